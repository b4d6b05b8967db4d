"""Reach: one derandomized `ci` draw of each hot path's generated cases (no committed fixture, no
vLLM) reaches every class its `Checks.boundaries` names: the decision boundaries and the shapes
its planted bugs need. A strategy edit that stops reaching one fails here, naming it, instead of
leaving a class to committed fixtures or luck (docs/quality.md#reach lists the classes).

Each draw runs in a process of its own (forked from one that has only imported the libraries,
tests/forked_pytest.py). A derandomized draw depends on the state of the process it runs in: in an
xdist worker that had run other tests first, penalties' draw gave other cases (150 of them, as
here) and missed "update: a swap moved a row added in it", which a fresh process reaches in 14,
in two full runs of the suite out of two. What in that state moves the draw was not found."""

import json
from pathlib import Path

import pytest
from hypothesis import strategies as st

from tests.forked_pytest import run_module
from vllm_hotpaths import registry
from vllm_hotpaths.testing.cases import note
from vllm_hotpaths.testing.laws import Checks

CHECKED = sorted(name for name, hotpath in registry.HOTPATHS.items() if hotpath.checks)
REACH = """
import json, sys
import conftest  # the suite's profiles
from strategies import checks_for
checks = checks_for(sys.argv[1])
print(json.dumps({"boundaries": list(checks.boundaries), "counts": dict(checks.reach("ci"))}))
"""


@pytest.mark.parametrize("name", CHECKED)
def test_a_ci_draw_reaches_every_boundary(name, pytestconfig):
    done = run_module("-c", [REACH, name], Path(pytestconfig.rootpath))
    assert done.returncode == 0, done.stderr[-3000:]
    reached = json.loads(done.stdout.strip().splitlines()[-1])
    counts = reached["counts"]
    assert reached["boundaries"], f"{name}'s Checks names no boundary to reach"
    missed = [label for label in reached["boundaries"] if counts.get(label, 0) == 0]
    assert not missed, f"{name}: a ci draw never reached {missed}; what it reached: {counts}"


class Parity(Checks):
    """Integers noted by parity while drawn, odd ones then rejected; 'past 100' noted when run."""

    hotpath = "parity"
    case_type = int
    boundaries = ("even", "odd", "past 100")

    def cases(self):
        @st.composite
        def draw_even(draw):
            value = draw(st.integers(0, 1000))
            note("even" if value % 2 == 0 else "odd")
            if value % 2:
                draw(st.nothing())  # rejects the draw: its label must not count
            return value

        return draw_even()

    def reached(self, case):
        if case > 100:
            note("past 100")


def test_reach_counts_run_examples_only():
    counts = Parity().reach("ci")
    assert counts["odd"] == 0 and counts["past 100"] > 0
    assert 0 < counts["even"] <= 150 and counts["past 100"] <= counts["even"]


def test_the_quality_page_lists_every_boundary():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "quality.md").read_text()
    for name in CHECKED:
        for label in registry.get(name).make_checks().boundaries:
            assert label in page, f"docs/quality.md#reach does not list {name}'s {label!r}"


def off_neutral(knob: str, params: dict, vocab: int) -> bool:
    """Whether `knob` alone, as set in `params` (with the request's temperature, other knobs
    neutral), changes some logit by the needs-processing rule."""
    from vllm_hotpaths.logits_copy import RequestParams, needs_processing

    fields = {"min_tokens": ("min_tokens", "stop_token_ids")}.get(knob, (knob,))
    alone = RequestParams(**{"temperature": params["temperature"], **{f: params[f] for f in fields if f in params}})
    return needs_processing(alone.checked(vocab), vocab, forces_thinking=True)


@pytest.mark.parametrize("hotpath", ["logits_copy", "sampler_mrv2"])
def test_a_ci_draw_of_each_pair_sets_both_knobs_off_neutral_in_one_request(hotpath):
    """The pair properties (properties/test_logits_copy.py, test_sampler_mrv2.py) draw, for
    every pair of knobs, requests with both off neutral: counted by their reach label in a
    derandomized `ci` draw of as many examples as the pair property takes there."""
    from collections import Counter

    from hypothesis import given, settings

    from strategies.logits_copy import KNOB_PAIRS, pair_label, pair_programs
    from strategies.sampler_mrv2 import FUSED_KNOBS, sampler_pair_programs
    from vllm_hotpaths.testing.cases import collecting
    from vllm_hotpaths.testing.laws import reach_settings

    if hotpath == "logits_copy":
        pairs, strategy, examples = KNOB_PAIRS, pair_programs, 3  # the fewer of its two properties' examples
    else:
        pairs, strategy, examples = [p for p in KNOB_PAIRS if set(p) <= set(FUSED_KNOBS)], sampler_pair_programs, 10
    counts: Counter[str] = Counter()
    for pair in pairs:
        with collecting() as seen:
            @settings(reach_settings("ci"), max_examples=examples)
            @given(strategy(pair))
            def draw(program):
                params = dict(program.ops[0][4])
                if all(off_neutral(knob, params, program.vocab_size) for knob in pair):
                    counts.update(seen & {pair_label(pair)})
                seen.clear()

            draw()
    missed = [pair for pair in pairs if counts[pair_label(pair)] == 0]
    assert not missed, f"{hotpath}: no request of a ci draw had both knobs off neutral for {missed}"
    assert len(counts) == len(pairs)
