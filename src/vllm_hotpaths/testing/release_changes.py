"""What changes for your sampled tokens from one vLLM release to another, composed from the
changes between consecutive releases that this suite knows: a hot path that appears, a frozen
reference keyed at a release (upstream's semantics changed there), a ledger entry whose range
starts or ends there (an upstream change or bug, with its link), a hot path whose upstream code
the release removed (what runs in its place), what a plugin patch does from
there on (its module's PLUGIN_CHANGES), and, where the release matrix
recorded them, the runner vLLM picks for the usual configurations.

`vllm-hotpaths changes X Y` prints it; the matrix page carries the consecutive steps.
"""

from __future__ import annotations

import json
from pathlib import Path

from vllm_hotpaths import registry
from vllm_hotpaths.registry import version_key
from vllm_hotpaths.testing import ledger


def _ends_after(entry: ledger.KnownDivergence, previous: str, current: str) -> bool:
    """The entry applies to `previous` and not to `current`: upstream fixed or undid it."""
    return entry.applies_to(entry.hotpath, previous) and not entry.applies_to(entry.hotpath, current)


def plugin_changes(hotpath) -> dict[str, str]:
    """release -> what the hot path's plugin patch does from there on (its module's
    PLUGIN_CHANGES), empty where it says nothing."""
    if not hotpath.patch:
        return {}
    import importlib

    return getattr(importlib.import_module(hotpath.patch.partition(":")[0]), "PLUGIN_CHANGES", {})


def step(previous: str, current: str, runner_choice: dict[str, dict] | None = None) -> list[str]:
    """The known changes from release `previous` to the next release `current`, a line each."""
    lines = []
    for hotpath in registry.HOTPATHS.values():
        runner = f"{hotpath.name} ({hotpath.runner})"
        if hotpath.removed_in(current) and not hotpath.removed_in(previous):
            lines.append(f"{runner}: removed upstream: {hotpath.removed_in(current).partition(': ')[2]}")
        elif hotpath.removed_in(current):
            continue
        elif not hotpath.exists_in(previous) and hotpath.exists_in(current):
            lines.append(f"{runner}: appears in {current}")
        elif hotpath.exists_in(previous) and \
                hotpath.reference_version_for(previous) != hotpath.reference_version_for(current):
            lines.append(f"{runner}: upstream's semantics change; checked against the reference keyed "
                         f"{hotpath.reference_version_for(current)}")
    for hotpath in registry.HOTPATHS.values():
        for at, text in plugin_changes(hotpath).items():
            if version_key(previous) < version_key(at) <= version_key(current):
                lines.append(f"{hotpath.name}: plugin: {text}")
    for entry in ledger.LEDGER:
        starts = entry.applies_to(entry.hotpath, current) and not entry.applies_to(entry.hotpath, previous)
        if starts:
            lines.append(f"{entry.hotpath}: {entry.summary} ({entry.link})")
        elif _ends_after(entry, previous, current):
            lines.append(f"{entry.hotpath}: no longer: {entry.label} ({entry.link})")
    if runner_choice and previous in runner_choice and current in runner_choice:
        before, after = runner_choice[previous], runner_choice[current]
        for configuration in sorted(set(before) | set(after)):
            if before.get(configuration) != after.get(configuration):
                lines.append(f"runner for {configuration}: {before.get(configuration)} -> {after.get(configuration)}")
    return lines


def between(first: str, last: str, releases: list[str], runner_choice: dict[str, dict] | None = None
            ) -> list[tuple[str, list[str]]]:
    """(release, its changes) for every release after `first` up to `last`, in order."""
    ordered = sorted(releases, key=version_key)
    if first not in ordered or last not in ordered:
        missing = first if first not in ordered else last
        raise ValueError(f"vLLM {missing} is not one of the releases ({ordered[0]} to {ordered[-1]})")
    if version_key(first) > version_key(last):
        raise ValueError(f"vLLM {first} comes after {last}: name the older release first")
    span = [v for v in ordered if version_key(first) <= version_key(v) <= version_key(last)]
    return [(current, step(previous, current, runner_choice)) for previous, current in zip(span, span[1:])]


def recorded_runner_choice(store: Path) -> dict[str, dict]:
    """The runner each release's matrix result records per configuration."""
    found = {}
    for path in store.glob("vllm-*.json"):
        result = json.loads(path.read_text())
        found[result["version"]] = {a["configuration"]: a["runner"] for a in result.get("runner_choice", [])}
    return found


def run(args) -> int:
    """The `changes` command."""
    import sys

    from vllm_hotpaths.testing import releases

    try:
        known = releases.gateable(releases.index_releases())
        first, last = (releases.check_release(v, known) for v in (args.first, args.last))
        steps = between(first, last, known, recorded_runner_choice(Path(args.store)))
    except (releases.ReleaseError, ValueError) as err:
        print(f"changes: {err}", file=sys.stderr)
        return 2
    print(f"What changes for your sampled tokens from vLLM {first} to {last} (known to this suite):")
    gated = set(recorded_runner_choice(Path(args.store)))
    for current, lines in steps:
        for line in lines:
            print(f"- {current}: {line}")
        if current not in gated:
            print(f"- {current}: never gated by this suite, so changes it makes are not known here; gate it "
                  f"with `vllm-hotpaths gate --vllm {current}` (or `vllm-hotpaths matrix {current}`)")
    if not any(lines for _, lines in steps):
        print("- nothing this suite knows of")
    return 0


def add_arguments(parser) -> None:
    parser.add_argument("first", metavar="X", help="the release you run")
    parser.add_argument("last", metavar="Y", help="the release you bump to")
    parser.add_argument("--store", default="docs/results/matrix",
                        help="the release matrix's results (for the runner vLLM picks)")
