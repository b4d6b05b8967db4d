"""The gate's closing section: what changes for a user's sampled tokens on Model Runner V2.

One line per runner-change ledger entry of the installed vLLM: the hot path, what differs, how
often the runner-change rows of this run met it (examples judged expected by the entry, of the
examples counted, per device), the fixture that shows it and its upstream link. An entry whose
hot path is not in the registry (e.g. random sampling) is measured outside the properties, by
the end-to-end runs.
"""

from __future__ import annotations

from pathlib import Path

from vllm_hotpaths import registry
from vllm_hotpaths.testing import fixtures, ledger

CHECK = "runner-change"
OUTSIDE = "measured outside the properties (docs/e2e.md)"


def title(version: str | None) -> str:
    return f"What changes for your sampled tokens when vLLM {version or '(not installed)'} runs your model on MRv2"


def left_out(options) -> str | None:
    """The option that left every Model Runner V2 hot path out of the run (None: one ran)."""
    if any(registry.get(name).v1_counterpart for name in options.selected_hotpaths()):
        return None
    if options.runner != "all" and not any(
            hp.v1_counterpart for hp in registry.HOTPATHS.values() if hp.runner == options.runner):
        return f"--runner {options.runner}"
    return "--hotpath " + " ".join(options.hotpaths)


def committed_fixture(root: Path, hotpath: str, link: str) -> str | None:
    """The committed fixture of `hotpath` carrying `link`, as reports print it."""
    for path in sorted((Path(root) / "properties" / "regressions" / hotpath).glob("*.json")):
        try:
            if fixtures.link_of(path) == link:
                return fixtures.shown(path, root)
        except (OSError, ValueError):  # an unreadable fixture fails its own tests, not this list
            continue
    return None


def entries(rows, version: str | None, root: Path, selected: list[str]) -> list[dict]:
    """The section's data (gate-report.json's `runner_changes`): one object per entry."""
    if version is None:
        return []
    found = []
    for entry in ledger.runner_changes(version):
        item = {"hotpath": entry.hotpath, "summary": entry.summary, "link": entry.link,
                "devices": list(entry.devices), "counts": None, "fixture": None}
        if entry.hotpath not in registry.HOTPATHS:
            item["measured"] = OUTSIDE
        elif entry.hotpath in selected:
            mine = [r for r in rows if r.hotpath == entry.hotpath and r.check == CHECK]
            item["counts"] = {device: counts(mine, device, entry.link) for device in entry.devices}
            written = [r.shown_fixtures[entry.link] for r in mine if entry.link in r.shown_fixtures]
            item["fixture"] = written[0] if written else committed_fixture(root, entry.hotpath, entry.link)
        else:
            item["measured"] = "not selected in this run"
            item["fixture"] = committed_fixture(root, entry.hotpath, entry.link)
        found.append(item)
    return found


def counts(rows, device: str, link: str) -> dict | None:
    """{met, examples} of this device's rows that ran; None where none ran (absent or skipped)."""
    ran = [r for r in rows if r.device == device and r.status != "skip"]
    if not ran:
        return None
    return {"met": sum(r.excused_counts.get(link, 0) for r in ran),
            "examples": sum(r.counted_examples for r in ran)}


def how_often(item: dict) -> str:
    if item["counts"] is None:
        return item.get("measured", "not checked")
    parts = [f"{c['met']} of {c['examples']} examples on {device}" if c else f"not checked: no {device} rows"
             for device, c in item["counts"].items()]
    if not any(c and c["met"] for c in item["counts"].values()) and any(item["counts"].values()):
        parts.insert(0, "not met in this run")
    return "; ".join(parts)


def lines(items: list[dict], version: str | None, left_out_by: str | None) -> list[str]:
    """The section as text: its title, then one line per entry."""
    head = [title(version), ""]
    if version is None:
        return head + ["- vLLM is not installed: no runner change was checked"]
    if left_out_by is not None:
        return head + [f"- not checked: {left_out_by} leaves out every Model Runner V2 hot path"]
    if not items:
        return head + [f"- no runner-change entry applies to vLLM {version}"]
    return head + [f"- {item['hotpath']}: {item['summary']}. How often: {how_often(item)}. "
                   + ("" if item.get("measured") == OUTSIDE else f"Fixture: {item['fixture'] or 'none'}. ")
                   + item["link"] for item in items]
