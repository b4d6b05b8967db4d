"""Each change between consecutive vLLM releases that the ledger names (an entry of kind
"change", from the release that brought it) is shown by a committed fixture that only it
explains: the entry covers the fixture, no other change of the same release does, and where that
release keys a new reference, the references before and from it really differ on the fixture
(`properties/regressions/<hot path>/`; the drift law writes such fixtures, one case may show
changes of several releases)."""

from __future__ import annotations

import pytest

from properties import REGRESSIONS
from vllm_hotpaths import registry
from vllm_hotpaths.registry import version_key
from vllm_hotpaths.testing import fixtures, ledger
from vllm_hotpaths.testing.laws import CaseLog, Side

CHANGES = [e for e in ledger.LEDGER if e.kind == "change"]


def step_id(entry) -> str:
    return f"{entry.hotpath}@{entry.first_version}:{entry.link.rsplit('/', 1)[-1]}"


def reference_side(hotpath, version: str) -> Side:
    return Side(f"reference {version}", registry.resolve(hotpath.references[version]), version)


@pytest.mark.parametrize("entry", CHANGES, ids=step_id)
def test_each_release_change_has_a_fixture_only_it_explains(entry):
    hotpath = registry.get(entry.hotpath)
    checks = hotpath.make_checks()
    if checks is None:
        pytest.skip(f"{entry.hotpath} has no case fixtures: its conformance rows on the releases before and "
                    f"from {entry.first_version} (the release matrix) show the change")
    committed = [case for _, case in fixtures.load(REGRESSIONS, entry.hotpath, checks.case_type)]
    same_release = [e for e in CHANGES if e.hotpath == entry.hotpath and e.first_version == entry.first_version]
    alone = [case for case in committed
             if [e for e in same_release if e.covers(entry.hotpath, entry.first_version, case)] == [entry]]
    assert alone, (f"no committed fixture of {entry.hotpath} is covered by {entry.link} alone among the "
                   f"changes of {entry.first_version}")
    keys = sorted(hotpath.references, key=version_key)
    if entry.first_version in keys and keys.index(entry.first_version) > 0:
        older = keys[keys.index(entry.first_version) - 1]
        differ = []
        for case in alone:
            try:
                checks.agree(case, reference_side(hotpath, older), reference_side(hotpath, entry.first_version),
                             "cpu", CaseLog(REGRESSIONS))
            except AssertionError:
                differ.append(case)
        assert differ, (f"the references {older} and {entry.first_version} of {entry.hotpath} agree on every "
                        f"committed fixture that {entry.link} alone covers")


@pytest.mark.parametrize("name", sorted(registry.HOTPATHS))
def test_each_reference_after_the_first_names_the_changes_that_made_it(name):
    """A reference keyed at a release stands for an upstream change there: a ledger change entry
    from that release names it (its PR), so `vllm-hotpaths changes` can say what it changes."""
    hotpath = registry.get(name)
    unnamed = [key for key in sorted(hotpath.references, key=version_key)[1:]
               if not any(e.hotpath == name and e.first_version == key for e in CHANGES)]
    assert not unnamed, f"{name}: references keyed at {', '.join(unnamed)} with no change entry from there"
