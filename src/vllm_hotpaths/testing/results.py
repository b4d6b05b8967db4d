"""`vllm-hotpaths results`: Markdown pages of measured results, written from the files the gate
and the benchmarks write (`gate-report.json`, `bench --json`), never typed in by hand. Each page
names the command that produced its numbers (recorded in those files) and the device they ran on.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from vllm_hotpaths.testing import gate, runner_report


def machine_folders(command: str) -> dict[str, str]:
    """The machine's folders in a gate command, and what a page writes for them: the suite is
    `.`, the folder holding the report directory is `OUT`."""
    try:
        words = shlex.split(command)
    except ValueError:
        return {}
    value = {w: words[i + 1] for i, w in enumerate(words[:-1]) if w in ("--suite", "--report-dir")}
    folders = {}
    if value.get("--report-dir", "").startswith("/"):
        folders[str(Path(value["--report-dir"]).parent)] = "OUT"
    if value.get("--suite", "").startswith("/"):
        folders[value["--suite"]] = "."
    return folders


def gate_page(report: dict, source: str) -> str:
    text = _gate_page(report, source)
    for folder, short in sorted(machine_folders(report.get("command", "")).items(), key=lambda f: -len(f[0])):
        text = text.replace(folder, short)
    return text


def _gate_page(report: dict, source: str) -> str:
    env = report.get("environment", {})
    lines = ["# Gate report", "", f"Produced by: `{report.get('command', 'vllm-hotpaths gate')}`  ",
             f"Verdict: {report.get('verdict', '?')}{' (partial)' if report.get('partial') else ''}; "
             f"vLLM: {report.get('vllm_version') or 'not installed'}; profile: {report['profile']}; "
             f"seed: {report.get('seed')}; devices: {', '.join(report.get('devices', []))}  ",
             f"{env.get('date')}, commit {env.get('commit')}; torch {env.get('torch')}, Triton {env.get('triton')}"
             + (f"; {env['cuda_device']}" if env.get("cuda_device") else "") + f"; from `{source}`"
             + (f"  \nDuration: {report['duration_s']:.0f} s; workers idle: {gate.idle_text(report['idle_s'])}"
                if "idle_s" in report else ""), "",
             "| hot path | runner | check | device | implementation | status | examples | seconds |",
             "|---|---|---|---|---|---|---|---|"]
    for r in report["results"]:  # reports written before rows carried a runner or seconds say "?"
        lines.append(f"| {r['hotpath']} | {r.get('runner', '?')} | {r['check']} | {r['device']} | "
                     f"{r['implementation']} | {r['status']} | {r['examples']} | "
                     f"{format(r['seconds'], '.0f') if 'seconds' in r else '?'} |")
    failures = [f for r in report["results"] for f in r.get("failures", [])]
    if failures:
        lines += ["", "Failures:", ""] + [f"- `{f['test']}`: {f['message'].splitlines()[0] if f['message'] else ''}"
                                          for f in failures]
    choice = report.get("runner_choice") or []
    if choice:
        lines += ["", f"Runner choice of vLLM {report.get('vllm_version')} (its own engine configuration, GPU engine):",
                  ""] + [f"- {a['configuration']}: {a['runner'] or 'not decided (' + a.get('error', '') + ')'}"
                         for a in choice]
    excused = sorted({link for r in report["results"] for link in r["excused"]})
    if excused:
        lines += ["", "Expected divergences (ledger entries met):", ""] + [f"- {link}" for link in excused]
    if report.get("runner_changes"):  # reports written before the section have none
        head, *entries = runner_report.lines(report["runner_changes"], report.get("vllm_version"), None)
        lines += ["", f"## {head}", *entries]
    return "\n".join(lines) + "\n"


def baseline_s(record: dict) -> float:
    """The baseline's seconds: upstream's own code where the record has it, else the reference."""
    return record["upstream_s"] if "upstream_s" in record else record["reference_s"]


def bench_page(bench: dict, source: str) -> str:
    """Ratios for every row; absolute times only for the GPU's rows (a CPU's depend on its load)."""
    device = bench.get("cuda_device")
    lines = ["# Benchmarks", "", f"Produced by: `{bench.get('command', 'vllm-hotpaths bench')}`  ",
             "Devices: cpu" + (f", cuda ({device})" if device else "") + f"; from `{source}`. Times are "
             "medians measured side by side in one run; the ratio is baseline / fast, and the case "
             "names the baseline. Absolute times are given for the GPU only.", "",
             "| hot path | device | size | case | baseline | fast | ratio |", "|---|---|---|---|---|---|---|"]
    for r in bench["records"]:
        size = " ".join(f"{k}={v}" for k, v in r["size"].items())
        times = (f"{baseline_s(r) * 1e3:.3f} ms | {r['fast_s'] * 1e3:.3f} ms" if r["device"] == "cuda"
                 else "- | -")
        lines.append(f"| {r['hotpath']} | {r['device']} | {size} | {r['case']} | {times} | {r['ratio']:.2f}x |")
    return "\n".join(lines) + "\n"


def page_name(path: Path, prefix: str) -> str:
    stem = Path(path).stem
    return f"{stem if stem.startswith(prefix) else prefix + stem}.md"


def write(gate_reports: list[Path], benches: list[Path], out: Path) -> list[Path]:
    """One page per input file, named after it (`gate-`/`bench-` prefixed); returns the pages."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path in gate_reports:
        page = out / page_name(path, "gate-")
        page.write_text(gate_page(json.loads(Path(path).read_text()), Path(path).name))
        written.append(page)
    for path in benches:
        page = out / page_name(path, "bench-")
        page.write_text(bench_page(json.loads(Path(path).read_text()), Path(path).name))
        written.append(page)
    return written
