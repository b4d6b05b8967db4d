"""The known-divergence ledger is the only excuse for a conformance difference, and a stale
entry fails."""

import pytest

from vllm_hotpaths import ledger
from vllm_hotpaths.ledger import KnownDivergence, LedgerEntryStale, check_conformance

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
    penalties = get("penalties")
    assert penalties.reference_version_for("0.22.0+cpu") == "0.22.0"
    assert penalties.reference_version_for("0.23.0") == "0.22.0"
    with pytest.raises(LookupError, match="no reference for vLLM 0.16.0"):
        penalties.reference_version_for("0.16.0")


def test_fixed_in_ends_the_range(monkeypatch):
    fixed = KnownDivergence(hotpath="demo", first_version="0.16.0", last_version=None, fixed_in="0.33.0",
                            link="https://example.invalid/issue/2", summary="fixed later",
                            affects=lambda case: True)
    monkeypatch.setattr(ledger, "LEDGER", [fixed])
    assert check_conformance("demo", "0.32.9", "any", differ) is fixed
    with pytest.raises(AssertionError, match="differ"):
        check_conformance("demo", "0.33.0", "any", differ)
