"""Drift checks: an older frozen reference against the installed vLLM.

A fast path validated for an earlier vLLM implements that version's reference. Before a bump, the
gate runs each hot path's conformance property once more with the older reference in its place:
where the newer vLLM changed the semantics, the property fails and Hypothesis shrinks the
difference. A difference is accepted only when ledger entries of kind "change" name it (the
upstream PRs); its shrunk case is saved as a regression fixture carrying the first link, and the
row reports the entries met. A difference no entry names fails the check. No difference found:
the older semantics still hold for the sampled inputs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from vllm_hotpaths import fixtures, ledger, registry, vllm_env


def conformance_reference_version(hotpath: str, case_log) -> str:
    """The reference a conformance property runs: the log's older one in a drift check, else the
    one for the installed vLLM (the newest where none is installed or the hot path is not in it)."""
    if case_log is not None and case_log.reference_version:
        return case_log.reference_version
    spec, version = registry.get(hotpath), vllm_env.installed_version()
    try:
        return spec.reference_version_for(version if version and spec.exists_in(version) else None)
    except LookupError:  # the installed vLLM predates every reference: conformance cannot run
        return "none"


def conformance_reference(hotpath: str, case_log) -> Callable:
    return registry.resolve(registry.get(hotpath).references[conformance_reference_version(hotpath, case_log)])


def against_older_reference(hotpath: str, case_log, request, conformance: Callable[[], None],
                            given_test=None) -> None:
    """Run `conformance` (a conformance property, called directly) with the older reference.

    A difference fails the property and Hypothesis shrinks it; the shrunk case must be covered by
    ledger changes, which it then shows (a fixture carrying the first one's link). The property
    runs again with the differences of the changes shown so far judged as expected, until a run
    finds nothing new: so each change gets its own shrunk case, and a difference no entry names
    fails. Examples are judged one by one through `case_log.tolerates`, which a stateful property
    asks after each operation (ending the run there) and which a `@given` property (`given_test`,
    the property itself) is wrapped with.
    """
    version = vllm_env.installed_version()
    older = ledger.older_reference_version(hotpath, version)
    case_log.reference_version = older
    shown: dict[str, object] = {}  # entry link -> its shrunk case

    def tolerated(failure: AssertionError) -> bool:
        entries = ledger.explain_drift(hotpath, version, case_log.last, str(failure))
        return bool(entries) and all(entry.link in shown for entry in entries)

    case_log.tolerates = tolerated
    if given_test is not None:
        inner = given_test.hypothesis.inner_test

        def judged_alone(*args, **kwargs):
            try:
                inner(*args, **kwargs)
            except AssertionError as failure:
                if not tolerated(failure):
                    raise

        given_test.hypothesis.inner_test = judged_alone
    try:
        while True:
            try:
                conformance()
                break
            except AssertionError as failure:
                entries = ledger.explain_drift(hotpath, version, case_log.last, str(failure))
                if not entries:
                    raise AssertionError(f"reference@{older} differs from vLLM {version} where no "
                                         f"ledger change names it: {failure}") from failure
                if all(entry.link in shown for entry in entries):  # not judged alone: no progress
                    raise
                for entry in entries:
                    shown.setdefault(entry.link, case_log.last)
    finally:
        if given_test is not None:
            given_test.hypothesis.inner_test = inner
    directory = Path(request.config.getoption("fixture_dir") or fixtures.REGRESSIONS)
    for link, case in shown.items():
        path = fixtures.save(directory, hotpath, case, source=request.node.nodeid, link=link)
        case_log.excuse_link(link)
        case_log.shown_by = case_log.shown_by or fixtures.shown(path)
