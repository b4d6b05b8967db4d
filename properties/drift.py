"""Drift checks: an older frozen reference against the installed vLLM.

A fast path validated for an earlier vLLM implements that version's reference. Before a bump, the
gate runs each hot path's conformance property once more with the older reference in its place:
where the newer vLLM changed the semantics, the property fails and Hypothesis shrinks the
difference. The difference is accepted only when a ledger entry of kind "change" names it (the
upstream PR); the shrunk case is saved as a regression fixture carrying that link and the row
reports the entries. A difference no entry names fails the check. No difference found: the
older semantics still hold for the sampled inputs.
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

    Every example is judged on its own: a difference the ledger names is recorded (with the
    first case that showed it: for a stateful property, its operations up to the difference) and
    the search goes on, so Hypothesis keeps looking for, and shrinks, a difference no entry
    names. A `@given` property is judged through `given_test` (the property itself); a stateful
    one asks `case_log.tolerates` after each operation.
    """
    version = vllm_env.installed_version()
    older = ledger.older_reference_version(hotpath, version)
    case_log.reference_version = older
    witnesses: dict[str, object] = {}  # entry link -> the first case showing it

    def named(failure: AssertionError) -> bool:
        entries = ledger.explain_drift(hotpath, version, case_log.last)
        for entry in entries:
            case_log.excuse(entry)
            witnesses.setdefault(entry.link, case_log.last)
        return bool(entries)

    def named_or_raise(failure: AssertionError) -> None:
        if not named(failure):
            raise AssertionError(f"reference@{older} differs from vLLM {version} where no ledger "
                                 f"change names it: {failure}") from failure

    case_log.tolerates = named

    if given_test is not None:
        inner = given_test.hypothesis.inner_test

        def judged_alone(*args, **kwargs):
            try:
                inner(*args, **kwargs)
            except AssertionError as failure:
                named_or_raise(failure)

        given_test.hypothesis.inner_test = judged_alone
    try:
        conformance()
    except AssertionError as failure:
        named_or_raise(failure)
    finally:
        if given_test is not None:
            given_test.hypothesis.inner_test = inner
    directory = Path(request.config.getoption("fixture_dir") or fixtures.REGRESSIONS)
    for link, case in witnesses.items():
        path = fixtures.save(directory, hotpath, case, source=request.node.nodeid, link=link)
        case_log.shown_by = case_log.shown_by or str(path)
