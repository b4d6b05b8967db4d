"""The known-divergence ledger is the only excuse for a conformance difference, and a stale
entry fails."""

import pytest

from strategies import checks_for
from vllm_hotpaths.testing import ledger
from vllm_hotpaths.testing.ledger import KnownDivergence, LedgerEntryStale, check_conformance

ENTRY = KnownDivergence(
    hotpath="demo", first_version="0.16.0", last_version="0.22.0",
    link="https://example.invalid/issue/1", summary="demo divergence",
    affects=lambda case: case == "affected",
)


def differ():
    raise AssertionError("reference and vLLM differ")


def agree():
    return None


@pytest.fixture
def demo_ledger(monkeypatch):
    monkeypatch.setattr(ledger, "LEDGER", [ENTRY])


def test_covered_difference_is_excused(demo_ledger):
    assert check_conformance("demo", "0.22.0", "affected", differ) is ENTRY


def test_entry_that_no_longer_diverges_fails(demo_ledger):
    with pytest.raises(LedgerEntryStale, match="example.invalid/issue/1"):
        check_conformance("demo", "0.16.0", "affected", agree)


@pytest.mark.parametrize("hotpath, version, case", [
    ("demo", "0.22.0", "unaffected"),  # predicate says no
    ("demo", "0.33.0", "affected"),  # after the fixed version
    ("demo", "0.15.1", "affected"),  # before the first affected version
    ("other", "0.22.0", "affected"),  # another hot path
])
def test_uncovered_difference_fails(demo_ledger, hotpath, version, case):
    with pytest.raises(AssertionError, match="differ"):
        check_conformance(hotpath, version, case, differ)
    assert check_conformance(hotpath, version, case, agree) is None


def test_versions_order_like_pip():
    from vllm_hotpaths.registry import get, version_key

    assert version_key("0.22.0rc1") < version_key("0.22.0") < version_key("0.22.0.post1")
    assert version_key("0.9.2") < version_key("0.22.0") < version_key("0.22.1+cu130")
    think_budget = get("think_budget")
    assert think_budget.reference_version_for("0.22.0+cpu") == "0.21.0"
    assert think_budget.reference_version_for("0.23.0") == "0.23.0"
    assert think_budget.reference_version_for("0.25.1") == "0.25.0"
    assert think_budget.reference_version_for("0.28.0rc1") == "0.26.0"
    assert think_budget.reference_version_for("0.33.0rc1") == "0.28.0"
    with pytest.raises(LookupError, match="no reference for vLLM 0.16.0"):
        think_budget.reference_version_for("0.16.0")


def test_drift_names_only_matching_changes():
    from vllm_hotpaths.testing.cases.swap_states import SwapProgram
    from vllm_hotpaths.testing.ledger import explain_drift, older_reference_version

    assert older_reference_version("swap_states", "0.33.0") == "0.19.0"
    assert older_reference_version("swap_states", "0.22.0") == "0.16.0"
    assert older_reference_version("swap_states", "0.16.0") is None
    assert older_reference_version("think_budget", "0.33.1") == "0.26.0"
    assert older_reference_version("think_budget", "0.27.1") == "0.25.0"
    condensed = SwapProgram(2, 9, 2, (1,), False, (("add", 0, 0, 9, 0, 0, 0, 1, False, 0, 0, 0),
                                                    ("remove", 0), ("condense",)))
    links = lambda entries: {e.link.rsplit("/", 1)[-1] for e in entries}  # noqa: E731
    assert links(explain_drift("swap_states", "0.33.0", condensed, "num_blocks_per_row: ...")) == {"49757"}
    assert links(explain_drift("swap_states", "0.33.0", condensed, "allowed-token mask ...")) == {"43894"}
    assert explain_drift("swap_states", "0.26.0", condensed, "num_blocks_per_row") == []  # before the change
    assert links(explain_drift("swap_states", "0.27.0", condensed, "num_blocks_per_row: ...")) == {"49757"}
    assert explain_drift("swap_states", "0.30.0", condensed, "allowed-token mask ...") == []  # before 0.31
    swapped = SwapProgram(2, 9, 2, (1,), False, (("add", 0, 0, 9, 0, 0, 0, 1, False, 0, 0, 0),
                                                  ("add", 1, 0, 1, 0, 0, 0, 1, False, 0, 0, 0), ("swap", 0, 1)))
    assert links(explain_drift("swap_states", "0.22.0", swapped, "token_ids_cpu: first at [1, 5]")) == {"34733"}
    assert explain_drift("swap_states", "0.18.1", swapped, "token_ids_cpu: first at [1, 5]") == []
    assert links(explain_drift("swap_states", "0.19.0", swapped, "token_ids_cpu: first at [1, 5]")) == {"34733"}
    assert explain_drift("swap_states", "0.22.0", condensed, "token_ids_cpu: first at [0, 5]") == []  # no swap


def test_drift_names_only_changes_after_the_older_reference():
    """Each think_budget change is named from the release that brought it, and a change the older
    reference already has names nothing (`since`)."""
    from vllm_hotpaths.testing.cases.think_budget import ThinkProgram
    from vllm_hotpaths.testing.ledger import explain_drift

    ends = ThinkProgram((1,), (2,), 10, 2, 0, "float32", (("add", [1], [], 5, False), ("sample", [2]),
                                                            ("step", 0, False)))
    links = lambda entries: {e.link.rsplit("/", 1)[-1] for e in entries}  # noqa: E731
    assert explain_drift("think_budget", "0.24.0", ends) == []
    assert links(explain_drift("think_budget", "0.25.1", ends, since="0.23.0")) == {"43757"}
    assert links(explain_drift("think_budget", "0.27.1", ends, since="0.25.0")) == {"45984"}
    assert links(explain_drift("think_budget", "0.27.1", ends)) == {"43757", "45984"}
    assert explain_drift("think_budget", "0.33.0", ends, since="0.26.0") == []  # no swap: 0.28 changes nothing
    swapped = ThinkProgram((1,), (2,), 10, 2, 0, "float32", (("add", [1], [], 5, False), ("swap", 0, 1)))
    assert links(explain_drift("think_budget", "0.33.0", swapped, since="0.26.0")) == {"49613"}


def test_fixed_in_ends_the_range(monkeypatch):
    fixed = KnownDivergence(hotpath="demo", first_version="0.16.0", last_version=None, fixed_in="0.33.0",
                            link="https://example.invalid/issue/2", summary="fixed later",
                            affects=lambda case: True)
    monkeypatch.setattr(ledger, "LEDGER", [fixed])
    assert check_conformance("demo", "0.32.9", "any", differ) is fixed
    with pytest.raises(AssertionError, match="differ"):
        check_conformance("demo", "0.33.0", "any", differ)


def test_runner_change_fails_where_no_entry_names_the_difference(monkeypatch):
    """The committed signed-zero program differs between v1's penalties reference and vLLM's
    Model Runner V2 on the CPU: named by its runner-change entry, and a failure without it."""
    from types import SimpleNamespace

    from properties import REGRESSIONS
    from vllm_hotpaths import registry, vllm_env
    from vllm_hotpaths.testing import fixtures, runner_change
    from vllm_hotpaths.testing.cases.penalties_mrv2 import SlotProgram
    from vllm_hotpaths.testing.laws import CaseLog

    version = vllm_env.installed_version()
    if version is None:
        pytest.skip("vLLM is not installed")
    signed_zero = [e for e in ledger.runner_changes(version) if e.link.endswith("penalties.py#L133")]
    shown = [case for path, case in fixtures.load(REGRESSIONS, "penalties_mrv2", SlotProgram)
             if fixtures.link_of(path) == signed_zero[0].link]
    assert shown and ledger.explain_runner_change("penalties_mrv2", version, "cpu", shown[0]) == signed_zero
    monkeypatch.setattr(ledger, "LEDGER", [e for e in ledger.LEDGER if e not in signed_zero])
    hotpath = registry.get("penalties_mrv2")
    request = SimpleNamespace(config=SimpleNamespace(getoption=lambda name: REGRESSIONS), node=SimpleNamespace(nodeid="t"))
    with pytest.raises(AssertionError, match="no runner-change entry names it"):
        runner_change.check_against_v1(hotpath, checks_for(hotpath.name), version, "cpu", CaseLog(REGRESSIONS), request)


def test_each_think_budget_runner_change_has_its_own_fixture():
    """Every think_budget_mrv2 runner-change entry links one committed fixture that no other entry
    covers, and on it v1's holder and vLLM's Model Runner V2 state really differ."""
    from functools import partial

    from properties import REGRESSIONS
    from vllm_hotpaths import registry, vllm_env
    from vllm_hotpaths.testing import fixtures
    from vllm_hotpaths.testing.cases.think_budget_mrv2 import ThinkSlotProgram, V1OnSlots, assert_same_forcing
    from vllm_hotpaths.testing.laws import Side

    entries = [e for e in ledger.runner_changes() if e.hotpath == "think_budget_mrv2"]
    committed = fixtures.load(REGRESSIONS, "think_budget_mrv2", ThinkSlotProgram)
    version = vllm_env.installed_version()
    hotpath = registry.get("think_budget_mrv2")
    runs = version is not None and hotpath.exists_in(version)
    assert len(entries) == 7
    for entry in entries:
        shown = [case for path, case in committed if fixtures.link_of(path) == entry.link]
        assert len(shown) == 1, entry.label
        covering = [e.label for e in entries if e.covers("think_budget_mrv2", "0.33.0", shown[0])]
        assert covering == [entry.label]
        if runs:
            v1 = Side("v1", partial(V1OnSlots, v1_version=version, num_spec_tokens=shown[0].max_drafts()), version)
            with pytest.raises(AssertionError, match="forced logits"):
                assert_same_forcing(shown[0], v1, Side("mrv2", hotpath.live_factory(), version), "cpu")


def test_rejection_runner_change_names_each_committed_fixture_and_fails_without_its_entry(monkeypatch):
    """The committed near-tie fixtures of this vLLM version differ between v1's recovered-token
    reference and Model Runner V2's rejection sampling on the CPU: named by their entry alone, and
    the runner-change law fails without that entry."""
    from types import SimpleNamespace

    from properties import REGRESSIONS
    from vllm_hotpaths import registry, vllm_env
    from vllm_hotpaths.testing import fixtures, runner_change
    from vllm_hotpaths.testing.cases.rejection_mrv2 import RejectionCase, assert_same_samples
    from vllm_hotpaths.testing.laws import CaseLog, Side

    version = vllm_env.installed_version()
    if version is None:
        pytest.skip("vLLM is not installed")
    near_tie = [e for e in ledger.runner_changes(version) if e.link.endswith("rejection_sampler_utils.py#L405-L419")]
    hotpath = registry.get("rejection_mrv2")
    checks = checks_for(hotpath.name)
    v1, live = checks.v1_counterpart(version), Side("live", hotpath.live_factory(), version)
    shown = []
    for path, case in fixtures.load(REGRESSIONS, "rejection_mrv2", RejectionCase):
        if fixtures.link_of(path) == near_tie[0].link:
            try:
                assert_same_samples(case, v1, live, "cpu")
            except AssertionError as failure:
                shown.append((case, str(failure)))
    assert shown  # each version has fixtures that show the near-tie
    for case, message in shown:
        assert ledger.explain_runner_change("rejection_mrv2", version, "cpu", case, message) == near_tie
    monkeypatch.setattr(ledger, "LEDGER", [e for e in ledger.LEDGER if e not in near_tie])
    request = SimpleNamespace(config=SimpleNamespace(getoption=lambda name: REGRESSIONS), node=SimpleNamespace(nodeid="t"))
    with pytest.raises(AssertionError, match="no runner-change entry names it"):
        runner_change.check_against_v1(hotpath, checks, version, "cpu", CaseLog(REGRESSIONS), request)


def test_logits_copy_keyed_where_its_sampler_changed():
    """logits_copy runs the reference of the newest release before it whose sampler changed what
    the properties compare, and a drift names each change from the release that brought it (0.26's
    bf16 processing ends at 0.27, which brings it back to fp32)."""
    from vllm_hotpaths.registry import get
    from vllm_hotpaths.testing.cases.logits_copy import LogitsProgram
    from vllm_hotpaths.testing.ledger import explain_drift, older_reference_version

    spec = get("logits_copy")
    releases = ("0.22.1", "0.23.0", "0.25.1", "0.26.0", "0.27.1", "0.28.0", "0.33.0")
    assert [spec.reference_version_for(v) for v in releases] == [
        "0.22.0", "0.23.0", "0.24.0", "0.26.0", "0.27.0", "0.28.0", "0.28.0"]
    assert older_reference_version("logits_copy", "0.33.0") == "0.27.0"
    scaled = LogitsProgram(8, 1, "bfloat16", (("add", 0, (1,), (), (("temperature", 0.7),)),))
    links = lambda entries: {e.link.rsplit("/", 1)[-1] for e in entries}  # noqa: E731
    assert links(explain_drift("logits_copy", "0.26.0", scaled, since="0.24.0")) == {"48641"}
    assert links(explain_drift("logits_copy", "0.27.0", scaled, since="0.26.0")) == {"49033"}
    assert explain_drift("logits_copy", "0.33.0", scaled, since="0.27.0") == []
    assert explain_drift("logits_copy", "0.26.0", LogitsProgram(8, 1, "float32", scaled.ops), since="0.24.0") == []
