"""Reach: one derandomized `ci` draw of each hot path's generated cases (no committed fixture, no
vLLM) reaches every class its `Checks.boundaries` names: the decision boundaries and the shapes
its planted bugs need. A strategy edit that stops reaching one fails here, naming it, instead of
leaving a class to committed fixtures or luck (docs/quality.md#reach lists the classes)."""

import pytest
from hypothesis import strategies as st

from strategies import checks_for
from vllm_hotpaths import registry
from vllm_hotpaths.testing.cases import note
from vllm_hotpaths.testing.laws import Checks

CHECKED = sorted(name for name, hotpath in registry.HOTPATHS.items() if hotpath.checks)


@pytest.mark.parametrize("name", CHECKED)
def test_a_ci_draw_reaches_every_boundary(name):
    checks = checks_for(name)
    assert checks.boundaries, f"{name}'s Checks names no boundary to reach"
    counts = checks.reach("ci")
    missed = [label for label in checks.boundaries if counts[label] == 0]
    assert not missed, f"{name}: a ci draw never reached {missed}; what it reached: {dict(counts.most_common())}"


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
