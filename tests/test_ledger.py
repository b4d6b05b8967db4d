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
