"""The laws every hot path is checked by, written once.

A hot path's `Checks` (the testing half of its registry entry, in `testing/cases/<hotpath>.py`)
says how a case runs through an implementation and what is compared; the generic property
modules (`properties/test_{equivalence,conformance,drift,patch,errors}.py`) ask it, for every hot
path, candidate, device and vLLM version:

- equivalence: a fast path agrees with the frozen reference of its vLLM version;
- conformance: the reference agrees with the installed vLLM, but where the ledger excuses it;
- drift: an older reference agrees with the installed vLLM, but where a ledger change names it;
- patch: vLLM with the plugin's patch installed agrees with upstream;
- errors: bad input raises the reference's error on both sides;
- runner-change (a Model Runner V2 hot path): the reference of the v1 hot path it replaces,
  given the same request streams, against the installed vLLM's MRv2 code: every difference is
  named by a ledger entry of kind "runner-change".

Each law is `Checks.check(expected, actual, device, log, judge)`: every committed fixture, then
generated cases (a `@given` over `Checks.cases()`, or a state machine where a hot path's `check`
says so), each compared by `Checks.agree` under `judge` (which decides what a difference means).
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from vllm_hotpaths.testing import fixtures


@dataclass(frozen=True)
class Side:
    """One implementation in a comparison: its label in messages, its factory (the hot path's
    contract), and the vLLM version whose semantics it implements."""

    label: str
    factory: Callable
    version: str


class CaseLog:
    """Per-test record of the examples a law ran, the last case (a failure's fixture), the ledger
    entries that excused a difference, and where committed fixtures are read from."""

    def __init__(self, regressions: Path) -> None:
        self.regressions = Path(regressions)
        self.examples = 0
        self.last = None
        self.excused: set[str] = set()
        # Named differences: {link: examples judged expected by that entry} and the examples of
        # the run they were counted in (`drift.show_named_differences`' last, complete run).
        self.excused_counts: Counter[str] = Counter()
        self.counted_examples = 0
        self.shown_by: str | None = None  # a committed fixture that shows an excused divergence
        self.shown_fixtures: dict[str, str] = {}  # {link: the fixture written for it}
        self.reference_version: str | None = None  # the reference a conformance-like law ran

    def record(self, case) -> None:
        self.examples += 1
        self.last = case

    def excuse_link(self, link: str) -> None:
        self.excused.add(link)

    def excuse(self, entry) -> None:
        self.excused.add(entry.link)


def reach_settings(profile: str, derandomize: bool = True):
    """`profile`'s settings for a reach run: no example database (every label comes from this draw)."""
    from hypothesis import settings

    return settings(settings.get_profile(profile), derandomize=derandomize, database=None)


def counting(counts: Counter, seen: set) -> Callable:
    """Wraps a state machine class: each run's labels (`seen`, from `collecting()`) counted once
    into `counts` at its teardown."""

    def counted(machine_class):
        class Counted(machine_class):
            def teardown(self):
                super().teardown()
                counts.update(seen)
                seen.clear()

        return Counted

    return counted


def compare_plainly(case, compare: Callable[[], None]) -> bool:
    """The judge of the equivalence and patch laws: every difference fails. A judge returns True
    where it let a difference pass (a ledger entry excused it)."""
    compare()
    return False


Judge = Callable[[Any, Callable[[], None]], bool]


class Checks:
    """What the laws need of one hot path. A subclass sets the class attributes and provides
    `cases` and `agree`, and where the hot path has them, `error_cases`/`refuse_alike` (errors
    law) and `patch_agrees` (patch law); a stateful hot path overrides `check` to run its state
    machine after the committed fixtures."""

    hotpath: str
    case_type: type  # the main case: the fixture format the laws replay
    # fixtures of another type replayed by a law: (the law's case type, the fixture's type, the
    # function making a case of the law's type from one)
    converted: tuple[tuple[type, type, Callable], ...] = ()
    error_type: type | None = None  # the errors law's case (None: the hot path has no errors law)
    triton: bool = False  # the laws run Triton kernels: CPU cases in Triton's interpreter
    # The labels (`note`) of the classes a `ci` draw must reach: its decision boundaries and the
    # shapes its planted bugs need (tests/test_reach.py, docs/quality.md#reach).
    boundaries: tuple[str, ...] = ()
    # Where each law runs: vLLM's own code runs here on the CPU (its kernels interpreted).
    law_devices = {"equivalence": ("cpu", "cuda"), "errors": ("cpu", "cuda"), "conformance": ("cpu",),
                   "drift": ("cpu",), "patch": ("cpu",), "runner-change": ("cpu",)}

    def __init__(self, draws=None) -> None:
        self._draws = draws

    def has_law(self, law: str, hotpath) -> bool:
        if law == "errors":
            return self.error_type is not None
        if law == "patch":
            return hotpath.patch is not None
        if law == "runner-change":
            return hotpath.v1_counterpart is not None
        return True

    def devices(self, law: str) -> tuple[str, ...]:
        return self.law_devices[law]

    @property
    def draws(self):
        """The hot path's generators: its module in `strategies`, handed in by whoever makes the
        checks (`strategies.checks_for`), so that nothing here imports the test layer."""
        if self._draws is None:
            raise TypeError(f"{self.hotpath}'s checks were made without its generators: make them with "
                            f"strategies.checks_for({self.hotpath!r})")
        return self._draws

    # -- what a hot path provides ------------------------------------------------------------
    def cases(self):
        """The strategy of generated main cases (from `self.draws`)."""
        raise NotImplementedError

    def agree(self, case, expected: Side, actual: Side, device, log: CaseLog) -> None:
        """Run `case` through both sides; raise AssertionError naming the first difference."""
        raise NotImplementedError

    def error_cases(self):
        raise NotImplementedError

    def refuse_alike(self, case, expected: Side, actual: Side, device, log: CaseLog) -> None:
        """Bad input: both sides raise the same error (AssertionError otherwise)."""
        raise NotImplementedError

    def patch_agrees(self, case, device, log: CaseLog) -> None:
        """vLLM with the plugin's patch installed == upstream on `case`."""
        raise NotImplementedError

    def v1_counterpart(self, vllm_version: str) -> Side:
        """A Model Runner V2 hot path: the v1 hot path's reference for `vllm_version`, behind this
        hot path's contract (the runner-change law's side)."""
        raise NotImplementedError

    stateful = False  # the laws run a state machine: `reach` runs it through `reach_machines`

    def reach_machines(self, counted: Callable, profile) -> None:
        """A stateful hot path: run its machine(s) under `profile` (Hypothesis settings), each
        class passed through `counted` first, with sides that need no vLLM."""
        raise NotImplementedError

    def reached(self, case) -> None:
        """`note` the labels `case` reaches beyond those its strategy notes while drawing it (the
        ones a law notes while running it), without vLLM: by default none."""

    # -- how a law runs ------------------------------------------------------------------------
    def check(self, expected: Side, actual: Side, device, log: CaseLog, judge: Judge = compare_plainly,
              key: str = "") -> None:
        """Every committed case, then generated ones: `expected` and `actual` agree under `judge`."""
        self.explore(self.cases(), self.case_type, key, log,
                     lambda case: judge(case, lambda: self.agree(case, expected, actual, device, log)))

    def check_errors(self, expected: Side, actual: Side, device, log: CaseLog, key: str = "") -> None:
        self.explore(self.error_cases(), self.error_type, key, log,
                     lambda case: self.refuse_alike(case, expected, actual, device, log))

    def check_patch(self, device, log: CaseLog, key: str = "") -> None:
        self.explore(self.cases(), self.case_type, key, log, lambda case: self.patch_agrees(case, device, log))

    def committed(self, case_type: type, regressions: Path) -> list:
        """The committed fixtures replayed as cases of `case_type`."""
        found = []
        for target, source, convert in self.converted:
            if target is case_type:
                found += [convert(case) for _, case in fixtures.load(regressions, self.hotpath, source)]
        return found + [case for _, case in fixtures.load(regressions, self.hotpath, case_type)]

    def explore(self, strategy, case_type: type, key: str, log: CaseLog, body: Callable,
                profile=None) -> None:
        """`body` on each committed case of `case_type`, then on generated ones; Hypothesis shrinks
        a failure, and the log keeps the last case for its fixture. VLLM_HOTPATHS_NO_REPLAY=1
        skips the committed cases (to show that generation alone finds a bug). `profile`:
        Hypothesis settings in place of the loaded profile (committed cases are then skipped)."""
        from hypothesis import example, given

        def run(case):
            log.record(case)
            body(case)

        # Each law x hot path x side draws its own examples (and, derandomized, its own seed), as
        # Hypothesis' pytest plugin gives each parametrized test.
        run._hypothesis_internal_add_digest = f"vllm-hotpaths:{self.hotpath}:{key}".encode()
        test = given(strategy)(run)
        if profile is not None:
            test = profile(test)
        elif os.environ.get("VLLM_HOTPATHS_NO_REPLAY") != "1":
            for case in reversed(self.committed(case_type, log.regressions)):
                test = example(case)(test)
        test()

    def reach(self, profile: str = "ci", key: str = "reach", seed: int | None = None) -> Counter[str]:
        """How many generated examples of one draw of `profile` (derandomized, or from `seed`)
        note each label, while drawn (the strategy's labels) or in `reached` (a state machine:
        each run, counted at its teardown). No committed case, no vLLM."""
        from hypothesis import seed as seeded
        from hypothesis import strategies as st

        from vllm_hotpaths.testing.cases import collecting

        counts: Counter[str] = Counter()
        if self.stateful:
            if seed is not None:
                raise ValueError(f"{self.hotpath}'s reach runs its state machine derandomized only, not from a seed")
            with collecting() as seen:
                self.reach_machines(counting(counts, seen), reach_settings(profile))
            return counts
        with collecting() as seen:
            @st.composite
            def fresh(draw):  # a draw Hypothesis rejects leaves no label behind
                seen.clear()
                return draw(self.cases())

            def body(case):
                self.reached(case)
                counts.update(seen)
                seen.clear()

            chosen = reach_settings(profile, derandomize=seed is None)
            self.explore(fresh(), self.case_type, key, CaseLog(Path(".")), body,
                         profile=chosen if seed is None else lambda test: seeded(seed)(chosen(test)))
        return counts
