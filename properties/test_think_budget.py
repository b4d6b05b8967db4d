"""Thinking-budget properties: candidate == frozen reference of its vLLM version, reference ==
installed vLLM, and the same clear error for bad configuration.

A Hypothesis state machine drives a batch (adds, removals, swaps, condense moves, tokens, drafts,
accepted drafts, async placeholders, repairs that shrink, interior fills, KV-load trims) and
calls the holders as upstream's sampler does. After every call the normalized per-row state must
be equal, and the logits after `apply_to_logits` equal bit for bit. The operations run are the
case: a failure writes them as a fixture, and every fixture is replayed on every candidate.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, target
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule, run_state_machine_as_test

from vllm_hotpaths.testing import drift
from vllm_hotpaths.testing.cases import note
from strategies.think_budget import (BadConfig, ThinkDraws, ThinkProgram, ThinkRun, bad_configs,
                                     small_counts, takes_budgets, think_configs)
from properties import REGRESSIONS, committed_examples
from vllm_hotpaths import registry, vllm_env
from vllm_hotpaths.testing import fixtures
from vllm_hotpaths.testing.bits import assert_same_bits
from vllm_hotpaths.registry import version_key
from vllm_hotpaths.think_budget import BatchUpdate, InvalidBudget, InvalidThinkConfig, Params, ThinkConfig

HOTPATH = registry.get("think_budget")
pytestmark = pytest.mark.hotpath("think_budget")
# The errors a holder may raise on purpose; anything else fails the property where it happens.
HOLDER_ERRORS = (InvalidBudget, InvalidThinkConfig)


def play(run: ThinkRun, op: tuple, expected, actual, label: str) -> tuple[int, int]:
    """Apply one operation; every holder call must give the same result on both holders.
    Returns (rows forcing their end marker, of which past the first draft) summed over the
    calls: targets that steer generation towards forcing."""
    forcing = past_first_draft = 0
    for call in run.apply(op):
        where = f"{label}, op {op[0]!r}, {call.label}"
        outcomes = []
        for holder in (expected, actual):
            try:
                outcomes.append(("returned", call.invoke(holder)))
            except HOLDER_ERRORS as err:
                outcomes.append(("raised", f"{type(err).__name__}: {err}"))
        run.observe(call, outcomes[0][1])
        (want_kind, want), (got_kind, got) = outcomes
        assert got_kind == want_kind, f"{where}: expected it to have {want_kind} {want}, it {got_kind} {got}"
        if want_kind == "raised":
            assert got == want, f"{where}: different errors"
            raise _Stop
        if isinstance(want, torch.Tensor):
            assert_same_bits(got, want, f"{where}: logits")
        want_states, got_states = expected.states(), actual.states()
        # Fields the expected holder does not have (a later version's, in a drift check) are not compared.
        fields = set().union(*want_states.values())
        got_states = {r: {k: v for k, v in s.items() if k in fields or not fields} for r, s in got_states.items()}
        if got_states != want_states:
            rows = sorted(set(want_states) | set(got_states))
            diff = {r: {k: (want_states.get(r, {}).get(k), got_states.get(r, {}).get(k))
                        for k in set(want_states.get(r, {})) | set(got_states.get(r, {}))
                        if want_states.get(r, {}).get(k) != got_states.get(r, {}).get(k)}
                    for r in rows}
            raise AssertionError(f"{where}: state differs (field: (expected, got)): "
                                 f"{ {r: d for r, d in diff.items() if d} }")
        forced = [state["force_index"] for state in want_states.values() if state["in_end"]]
        forcing += len(forced)
        past_first_draft += sum(1 for f in forced if f and f[0] > 0)
        if forced:
            note("a row is forcing its end marker")
        if len({state["same_state_as"] for state in want_states.values()}) < len(want_states):
            note("one state object on two rows (0.22 SWAP)")
    return forcing, past_first_draft


class _Stop(Exception):
    """Both holders raised the same error: the case ends there."""


def run_program(program: ThinkProgram, version: str, make_expected, make_actual, device, label: str) -> None:
    run = ThinkRun(program, version, device)
    expected, actual = make_expected(program.config), make_actual(program.config)
    try:
        for op in program.ops:
            play(run, op, expected, actual, label)
    except _Stop:
        pass


SEEDS, BOOLEANS, COUNTS = st.integers(0, 2**16), st.booleans(), small_counts()


def machine(version: str, spec: bool, make_expected, make_actual, device, case_log, label: str):
    """A RuleBasedStateMachine class comparing two holders after every operation."""

    class ThinkBudgetMachine(RuleBasedStateMachine):
        @initialize(config=think_configs(spec), data=st.data(), requests=st.integers(1, 4))
        def start(self, config, data, requests):
            self.header = config
            self.draws = ThinkDraws.for_config(config, version)
            self.ops: list[tuple] = []
            self.stopped = False
            self.forcing = [0, 0]
            program = ThinkProgram(**config, ops=())
            case_log.record(program)
            self.run = ThinkRun(program, version, device)
            self.expected = make_expected(program.config)
            self.actual = make_actual(program.config)
            for _ in range(requests):  # (Hypothesis' swarm testing may switch the `add` rule off)
                self.add(data, data.draw(BOOLEANS, label="tracked"))

        def do(self, *op) -> None:
            if self.stopped:
                return
            self.ops.append(op)
            case_log.last = ThinkProgram(**self.header, ops=tuple(self.ops))
            try:
                forcing, past_first_draft = play(self.run, op, self.expected, self.actual, label)
                self.forcing[0] += forcing
                self.forcing[1] += past_first_draft
            except _Stop:
                self.stopped = True
            except AssertionError as failure:  # a drift check goes on past a difference it names
                if not case_log.tolerates(failure):
                    raise
                self.stopped = True

        def teardown(self):
            if hasattr(self, "ops"):
                # Capped: enough forcing to exercise it, without rewarding ever longer runs.
                target(float(min(self.forcing[0], 24)), label="rows forcing their end marker")
                target(float(min(self.forcing[1], 8)), label="forcing past the first draft")

        def _step(self, data, spec_as_none: bool = False) -> None:
            self.do("step", data.draw(SEEDS, label="seed"), spec_as_none)

        @rule(data=st.data(), tracked=st.booleans())
        def add(self, data, tracked):
            d = self.draws
            self.do("add", data.draw(d.prompts, label="prompt"), data.draw(d.outputs, label="output"),
                    data.draw(d.budgets, label="budget"), tracked)

        @rule(row=st.integers(0, 7))
        def remove(self, row):
            self.do("remove", row)

        @rule(i=st.integers(0, 4), j=st.integers(0, 4))
        def swap(self, i, j):
            self.do("swap", i, j)

        @rule(data=st.data(), then_step=st.booleans())
        def sample(self, data, then_step):
            self.do("sample", data.draw(self.draws.token_lists))
            if then_step:
                self._step(data)

        @precondition(lambda self: self.header["num_spec_tokens"] > 0)
        @rule(data=st.data())
        def drafts(self, data):
            self.do("drafts", data.draw(self.draws.drafts, label="drafts"))

        @precondition(lambda self: self.header["num_spec_tokens"] > 0)
        @rule(data=st.data(), accepted=small_counts(), then_step=st.booleans())
        def accept(self, data, accepted, then_step):
            self.do("accept", accepted, data.draw(self.draws.token_lists))
            if then_step:
                self._step(data)

        @rule(extra=small_counts(2))
        def placeholders(self, extra):
            self.do("async", extra)

        @rule(data=st.data(), counts=small_counts(), then_step=st.booleans())
        def repair(self, data, counts, then_step):
            self.do("repair", counts, data.draw(self.draws.token_lists))
            if then_step:
                self._step(data)

        @rule(data=st.data(), row=st.integers(0, 7), nth=st.integers(0, 7))
        def fill(self, data, row, nth):
            self.do("fill", row, nth, data.draw(self.draws.marker_tokens, label="token"))

        @rule(row=st.integers(0, 7), keep=st.integers(0, 30))
        def trim(self, row, keep):
            self.do("trim", row, keep)

        @rule(data=st.data(), row=st.integers(0, 7), keep=st.integers(0, 30), then_step=st.booleans())
        def discard(self, data, row, keep, then_step):
            """KV-load discard and regeneration between two steps: same length, new ids."""
            self.do("regrow", row, keep, data.draw(self.draws.outputs, label="regenerated"))
            if then_step:
                self._step(data)

        @rule(data=st.data(), spec_as_none=st.booleans())
        def step(self, data, spec_as_none):
            self._step(data, spec_as_none)

        @rule(data=st.data(), rounds=st.integers(1, 8), asynchronous=st.booleans())
        def decode(self, data, rounds, asynchronous):
            """The engine's loop: drafts, the sampler step, then the tokens it produced (async:
            placeholders first, repaired before or after the step)."""
            k, d = self.header["num_spec_tokens"], self.draws
            for _ in range(rounds):
                if k:
                    self.drafts(data)
                if asynchronous:
                    repair_first = data.draw(BOOLEANS, label="repair before the step")
                    self.do("async", data.draw(d.extra_placeholders, label="extra placeholders"))
                    if not repair_first:
                        self._step(data)
                    self.do("repair", data.draw(COUNTS, label="ids per run"), data.draw(d.token_lists))
                    if repair_first:
                        self._step(data)
                else:
                    self._step(data)
                    obeys = data.draw(BOOLEANS, label="the model obeys forcing")
                    accepted = data.draw(COUNTS, label="accepted")
                    if obeys:
                        self.do("obey", accepted, data.draw(d.token_lists))
                    elif k:
                        self.do("accept", accepted, data.draw(d.token_lists))
                    else:
                        self.do("sample", data.draw(d.token_lists))

    return ThinkBudgetMachine


def run_machine(machine_class) -> None:
    run_state_machine_as_test(machine_class, settings=settings(settings.default, stateful_step_count=40))


def make(factory, device):
    return lambda config: factory(config, device)


SPEC_MODES = pytest.mark.parametrize("spec", [False, True], ids=["no spec", "spec"])


@pytest.mark.check("equivalence")
@SPEC_MODES
def test_candidate_matches_reference(candidate, device, spec, case_log):
    name, factory, version = candidate
    reference = HOTPATH.reference(version)
    run_machine(machine(version, spec, make(reference, device), make(factory, device), device, case_log,
                        f"{name} vs reference {version}"))


REPLAYED = fixtures.load(REGRESSIONS, "think_budget", ThinkProgram)


@pytest.mark.check("equivalence")
@pytest.mark.parametrize("fixture", [p for _, p in REPLAYED], ids=[path.stem for path, _ in REPLAYED])
def test_candidate_matches_reference_on_fixtures(fixture, candidate, device, case_log):
    case_log.record(fixture)
    name, factory, version = candidate
    run_program(fixture, version, make(HOTPATH.reference(version), device), make(factory, device),
                device, f"{name} vs reference {version}")


@pytest.mark.check("conformance")
@pytest.mark.needs_vllm
@SPEC_MODES
def test_reference_matches_installed_vllm(spec, case_log):
    """No ledger entry: the references reproduce upstream's own flaws (0.22's shared SWAP state,
    the missed re-entry after an exit, draft stripping), so every difference is a failure."""
    version = vllm_env.installed_version()
    reference = HOTPATH.reference_version_for(version)
    live = registry.resolve(HOTPATH.live)
    compared = drift.conformance_reference_version("think_budget", case_log)
    run_machine(machine(reference, spec, make(drift.conformance_reference("think_budget", case_log), "cpu"),
                        make(live, "cpu"), "cpu", case_log, f"reference {compared} vs vLLM {version}"))


@pytest.mark.check("drift")
@pytest.mark.needs_vllm
@SPEC_MODES
def test_older_reference_against_installed_vllm(spec, case_log, request):
    """The older reference, driven as the installed vLLM drives its holder: every difference
    must be a ledger change (vllm_hotpaths/testing/drift.py)."""
    drift.against_older_reference("think_budget", case_log, request,
                                  lambda: test_reference_matches_installed_vllm(spec, case_log))


def patched_vllm_holder(config: ThinkConfig):
    """vLLM's holder API as an InputBatch built with the plugin's patch installed holds it."""
    from types import SimpleNamespace

    from vllm_hotpaths.testing.live.swap_states import live_batch
    from vllm_hotpaths.testing.live.think_budget import LiveThinkBudget
    from vllm_hotpaths.think_budget.patch import FastHolder

    side = LiveThinkBudget(config, "cpu")
    reasoning = SimpleNamespace(reasoning_start_token_ids=list(config.start_ids),
                                reasoning_end_token_ids=list(config.end_ids))
    batch = live_batch(config.max_num_seqs, 16, config.vocab_size, (16,),
                       num_spec_tokens=config.num_spec_tokens, reasoning_config=reasoning)
    side.holder = batch.thinking_budget_state_holder
    assert isinstance(side.holder, FastHolder), f"the patched InputBatch holds {type(side.holder).__name__}"
    return side


@pytest.mark.check("equivalence")
@pytest.mark.needs_vllm
@pytest.mark.implementation("plugin patch")
@pytest.mark.plugin_patch
@SPEC_MODES
def test_patched_vllm_matches_upstream(spec, case_log):
    """The holder of an InputBatch built with the plugin's patch installed == upstream's holder,
    state and forced logits, driven as vLLM's sampler drives them."""
    from vllm_hotpaths.think_budget import patch

    version = vllm_env.installed_version()
    patch.install()
    try:
        run_machine(machine(HOTPATH.reference_version_for(version), spec,
                            make(registry.resolve(HOTPATH.live), "cpu"), patched_vllm_holder, "cpu", case_log,
                            f"patched vLLM {version} vs upstream"))
    finally:
        patch.uninstall()


# Fixtures whose budgets the installed vLLM's SamplingParams refuses are not replayed against it.
REPLAYABLE = [(path, p) for path, p in REPLAYED if takes_budgets(vllm_env.installed_version() or "0.22.0", p)]


@pytest.mark.check("conformance")
@pytest.mark.needs_vllm
@pytest.mark.parametrize("fixture", [p for _, p in REPLAYABLE], ids=[path.stem for path, _ in REPLAYABLE])
def test_reference_matches_installed_vllm_on_fixtures(fixture, case_log):
    case_log.record(fixture)
    version = vllm_env.installed_version()
    run_program(fixture, HOTPATH.reference_version_for(version), make(HOTPATH.reference(version), "cpu"),
                make(registry.resolve(HOTPATH.live), "cpu"), "cpu", f"reference vs vLLM {version}")


@pytest.mark.check("equivalence")
def test_half_precision_logits_are_refused_when_forcing(candidate, device, case_log):
    """float16 cannot hold the forced 1e9: the same clear error on both sides, not torch's."""
    name, factory, version = candidate
    config = ThinkConfig((7,), (8,), 12, max_num_seqs=1)
    case_log.record(config)
    errors = []
    for make_holder in (HOTPATH.reference(version), factory):
        holder = make_holder(config, device)
        holder.sync_batch(BatchUpdate(1, (), [(0, Params(0), [7, 1], [])], []))  # over budget at once
        holder.update_state([[]], None)
        with pytest.raises(ValueError) as caught:
            holder.apply_to_logits(torch.zeros(1, 12, dtype=torch.float16, device=device), False, None)
        errors.append(str(caught.value))
    assert errors[1] == errors[0] and "float16" in errors[0]


def refusal(factory, case: BadConfig) -> str:
    """The error a holder gives when built from the case and handed a request; "accepted" if none."""
    try:
        holder = factory(case.config, "cpu")
        request = (0, Params(case.budget), [*case.start_ids, 1], [])
        holder.sync_batch(BatchUpdate(1, (), [request], []))
    except (InvalidThinkConfig, InvalidBudget) as err:
        return f"{type(err).__name__}: {err}"
    return "accepted"


def refused_by(version: str, case: BadConfig) -> bool:
    budget = case.budget
    wrong_type = isinstance(budget, bool) or not isinstance(budget, int)
    return case.what == "marker" or wrong_type or version_key(version) >= version_key("0.33.0")


@pytest.mark.check("equivalence")
@committed_examples("think_budget", BadConfig, "case")
@given(case=bad_configs("0.33.0"))
def test_bad_config_raises_the_same_error(case, candidate, case_log):
    """Marker ids outside the vocabulary, and budgets the version refuses, raise the reference's
    error with the reference's message; budgets one version takes and the other refuses (0.22
    takes negative integers) are taken by both."""
    case_log.record(case)
    name, factory, version = candidate
    expected = refusal(HOTPATH.reference(version), case)
    assert (expected != "accepted") == refused_by(version, case), f"reference {version}: {expected}"
    assert refusal(factory, case) == expected, f"{name} vs reference {version}"


INSTALLED = vllm_env.installed_version()


@pytest.mark.check("conformance")
@pytest.mark.needs_vllm
@given(case=bad_configs(INSTALLED or "0.22.0", vllm_detectable=True))
def test_vllm_rejects_what_the_reference_rejects(case, case_log):
    """vLLM fails too, later and less clearly: its SamplingParams refuses the budget (0.33), or
    forcing an end id past the vocabulary fails in `index_put_`. (A negative id it would write
    at a wrapped-around column, and a start id it never writes: only the reference refuses those.)"""
    case_log.record(case)
    assert refusal(HOTPATH.reference(INSTALLED), case) != "accepted"
    live = registry.resolve(HOTPATH.live)(case.config, "cpu")
    output: list[int] = []
    with pytest.raises(Exception) as caught:
        live.sync_batch(BatchUpdate(1, (), [(0, Params(case.budget), [*case.start_ids, 1], output)], []))
        for forced in case.end_ids:  # budget 0 inside a think block: the end marker is forced
            live.update_state([output], None)
            live.apply_to_logits(torch.zeros(1, case.vocab_size), False, None)
            output.append(forced)
    note(f"vLLM raised {type(caught.value).__name__}")
