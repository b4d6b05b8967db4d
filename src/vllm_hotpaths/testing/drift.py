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

from vllm_hotpaths import registry, vllm_env
from vllm_hotpaths.testing import fixtures, ledger


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
    """That reference's factory (a planted one, `--reference`, where one was given for it)."""
    return registry.get(hotpath).reference(conformance_reference_version(hotpath, case_log))


def check_older_reference(hotpath, checks, vllm_version: str, device, log, request) -> None:
    """The conformance law with the older reference in place of the current one.

    A difference fails the law and Hypothesis shrinks it; the shrunk case must be covered by
    ledger changes, which it then shows (a fixture carrying the first one's link). The law runs
    again with the differences of the changes shown so far judged as expected, example by
    example, until a run finds nothing new: each change gets its own shrunk case, and a
    difference no entry names fails.
    """
    from vllm_hotpaths.testing.laws import Side

    older = ledger.older_reference_version(hotpath.name, vllm_version)
    log.reference_version = older
    reference = Side(f"reference {older}", registry.resolve(hotpath.references[older]), older)
    live = Side(f"vLLM {vllm_version}", hotpath.live_factory(), vllm_version)
    conformance = ledger.conformance_judge(hotpath.name, vllm_version, log, device)
    shown = show_named_differences(
        checks, reference, live, device, log, key=f"drift:{older}:{vllm_version}:{device}", plain_judge=conformance,
        named=lambda case, failure: ledger.explain_drift(hotpath.name, vllm_version, case, str(failure), since=older),
        unnamed=f"reference@{older} differs from vLLM {vllm_version} where no ledger change names it")
    save_shown(hotpath.name, shown, log, request)


def show_named_differences(checks, expected, actual, device, log, key: str, plain_judge, named,
                           unnamed: str, one_per_case: bool = False) -> dict[str, object]:
    """`checks.check(expected, actual)` until a run finds nothing new; returns {ledger link: its
    shrunk case}. A difference fails and Hypothesis shrinks it; the shrunk case must be named by
    ledger entries (`named(case, failure)`), which it then shows. The law runs again with the
    differences of the entries shown so far judged as expected, example by example: each entry
    gets its own shrunk case, and a difference no entry names fails (`unnamed`: the message).
    `plain_judge` judges every example first (conformance's ledger divergences, or plainly).
    `one_per_case`: each shrunk case shows one entry (see below).

    The last run, the one that completes, counts into the log each example judged expected for
    every shown entry that covers it (`log.excused_counts`), and the examples it ran
    (`log.counted_examples`): earlier runs stop at a difference and are not counted."""
    shown: dict[str, object] = {}
    # (example number, link) judged expected: a stateful law may judge one example several times
    excused: set[tuple[int, str]] = set()

    def judge(case, compare) -> bool:
        try:
            return plain_judge(case, compare)
        except AssertionError as failure:
            entries = named(case, failure)
            met = [entry.link in shown for entry in entries]
            if entries and (any(met) if one_per_case else all(met)):
                excused.update((log.examples, entry.link) for entry in entries if entry.link in shown)
                return True
            raise

    while True:
        excused.clear()
        started = log.examples
        try:
            checks.check(expected, actual, device, log, judge, key=key)
            log.excused_counts.update(link for _, link in excused)
            log.counted_examples += log.examples - started
            return shown
        except AssertionError as failure:
            entries = named(log.last, failure)
            if not entries:
                raise AssertionError(f"{unnamed}: {failure}") from failure
            new = [entry for entry in entries if entry.link not in shown]
            if not new:  # not judged alone: no progress
                raise
            # With `one_per_case` a case shows one entry (the first), and a difference is judged
            # expected once any entry covering it has been shown: a case covered by several
            # entries cannot say which of them made it. Committed fixtures, replayed first, give
            # each entry a case that it alone covers.
            for entry in new[:1] if one_per_case else new:
                shown[entry.link] = log.last


def save_shown(hotpath: str, shown: dict, log, request) -> None:
    """Each change met, as a fixture carrying its link; the log names the first (the row's
    fixture) and keeps each one's path by link."""
    directory = Path(request.config.getoption("fixture_dir"))
    for link, case in shown.items():
        path = fixtures.save(directory, hotpath, case, source=request.node.nodeid, link=link)
        log.excuse_link(link)
        log.shown_fixtures[link] = fixtures.shown(path, request.config.rootpath)
        log.shown_by = log.shown_by or log.shown_fixtures[link]
