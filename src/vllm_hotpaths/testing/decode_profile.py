"""Tables of where a decode step's wall time goes, from the files `vllm-hotpaths throughput
--profile` writes: py-spy's raw stacks of both of vLLM's processes (front end and engine core),
and vLLM's torch profiler trace of the engine core (host and GPU).

    python -m vllm_hotpaths.testing.decode_profile OUT [--top 15] [--json PATH]

py-spy samples each busy thread `rate` times a second (idle threads are left out), so a
function's samples / rate is the host time it took; divided by the engine steps that ran in the
window (the window's seconds x the run's steps per second) it is milliseconds per step. Self time
is the sampled leaf; inclusive time counts a function once per stack it is on.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

PROCESSES = re.compile(r'((?:process \d+:"[^"]*";)+)(.*)')  # a command line may hold ';'
PROCESS = re.compile(r'process \d+:"([^"]*)";')
THREAD = re.compile(r"thread \((\w+)\): ?(.*)")
FRAME = re.compile(r"(.*) \(([^():]*):\d+\)$")


@dataclass
class Thread:
    """One sampled thread: busy samples, and samples by function (self and inclusive)."""
    samples: int = 0
    self_: collections.Counter = field(default_factory=collections.Counter)
    inclusive: collections.Counter = field(default_factory=collections.Counter)


def frame_name(frame: str) -> str:
    """`function (path/file.py:LINE)` -> `function (file.py)` (with --function, LINE is the
    function's first line; the file keeps two path parts, enough to tell vLLM's modules apart)."""
    match = FRAME.match(frame)
    if not match:
        return frame
    name, path = match.groups()
    return f"{name} ({'/'.join(path.split('/')[-2:])})"


def command_name(command: str) -> str:
    """A command line without its paths: the program's name and the arguments that are no path."""
    program, *arguments = command.split(" ")
    return " ".join([program.rsplit("/", 1)[-1], *(a for a in arguments if "/" not in a)])[:60].strip()


def read_py_spy(text: str) -> dict[tuple[str, str], Thread]:
    """(process, thread) -> Thread, from py-spy's raw format with --subprocesses --threads: one
    stack a line, `process A;[process B;]thread (ID): NAME;frame;...;frame COUNT`. A process is
    named by its depth below the sampled root (`process 0` the front end, `process 1` its child,
    the engine core) and its command line's start."""
    threads: dict[tuple[str, str], Thread] = {}
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        match = PROCESSES.match(stack)
        rest = match.group(2).split(";") if match else []
        thread_match = THREAD.match(rest[0]) if rest else None
        if not thread_match:
            raise ValueError(f"not py-spy's raw format with --subprocesses --threads: {line[:120]!r}")
        commands = PROCESS.findall(match.group(1))
        process = f"process {len(commands) - 1}: {command_name(commands[-1])}"
        thread = threads.setdefault((process, thread_match.group(2) or thread_match.group(1)), Thread())
        names = [frame_name(f) for f in rest[1:]] or ["(no Python frame)"]
        thread.samples += int(count)
        thread.self_[names[-1]] += int(count)
        for name in set(names):
            thread.inclusive[name] += int(count)
    return threads


def steps_in(start_s: float, window_s: float, run_s: float, steps: int) -> float:
    """Engine steps that ran during a window of `window_s` seconds from `start_s` into a run of
    `run_s` seconds and `steps` steps (a window past the run's end counts only its part inside)."""
    return max(0.0, min(start_s + window_s, run_s) - start_s) * steps / run_s


CHAIN = 0.8  # an inclusive row on this share of a thread's samples or more is its call chain


def host_tables(threads: dict[tuple[str, str], Thread], rate: int, steps: float, top: int) -> str:
    """Markdown: per thread with samples, its busy ms per step, then its top functions by self and
    by inclusive time; the inclusive rows leave out the thread's call chain (the functions on
    nearly all of its stacks: its loop and what started it)."""
    ms = 1e3 / rate / steps  # milliseconds per step of one sample
    lines = []
    for (process, name), thread in sorted(threads.items(), key=lambda item: -item[1].samples):
        lines += ["", f"**{process}, thread {name}**: busy {thread.samples * ms:.2f} ms per step "
                      f"({thread.samples} samples)", "",
                  "| # | self: function | ms/step | share | inclusive: function | ms/step | share |",
                  "|---|---|---|---|---|---|---|"]
        self_rows = thread.self_.most_common(top)
        inclusive_rows = [row for row in thread.inclusive.most_common()
                          if row[1] < CHAIN * thread.samples or row[0] in thread.self_][:top]
        for rank in range(max(len(self_rows), len(inclusive_rows))):
            cells = []
            for rows in (self_rows, inclusive_rows):
                if rank < len(rows):
                    fn, count = rows[rank]
                    fn = fn.replace("|", "\\|")
                    cells += [f"`{fn}`", f"{count * ms:.3f}", f"{count / thread.samples:.1%}"]
                else:
                    cells += ["", "", ""]
            lines.append(f"| {rank + 1} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


def read_trace(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as handle:
        return [e for e in json.load(handle).get("traceEvents", []) if e.get("ph") == "X"]


def device_table(events: list[dict], steps: int, top: int) -> str:
    """Markdown: the GPU's summed kernel, copy and set time per step, and its top kernels."""
    device = [e for e in events if e.get("cat") in DEVICE_CATEGORIES]
    if not device:
        return "no GPU events in the trace"
    total = sum(e["dur"] for e in device)
    span = (max(e["ts"] + e["dur"] for e in events) - min(e["ts"] for e in events)) / 1e3
    by_name: collections.Counter = collections.Counter()
    calls: collections.Counter = collections.Counter()
    for e in device:
        by_name[e["name"]] += e["dur"]
        calls[e["name"]] += 1
    lines = [f"GPU: {total / steps / 1e3:.3f} ms per step of kernels, copies and sets ({steps} steps; "
             f"the trace spans {span / steps:.3f} ms per step under the profiler)", "",
             "| # | GPU work | calls/step | ms/step | share |", "|---|---|---|---|---|"]
    for rank, (name, dur) in enumerate(by_name.most_common(top), 1):
        short = name if len(name) <= 80 else name[:77] + "..."
        lines.append(f"| {rank} | `{short.replace('|', '/')}` | {calls[name] / steps:.2f} | "
                     f"{dur / steps / 1e3:.4f} | {dur / total:.1%} |")
    return "\n".join(lines)


def summarize(out: Path, top: int) -> tuple[str, dict]:
    """The markdown and JSON of every profiled run under `out` (a `throughput --profile` folder)."""
    result = json.loads((out / "throughput.json").read_text())
    tokens = result["args"]["tokens"]
    sections, data = [], {}
    for label, run in result["profiles"].items():
        side, _, shape = label.partition(" ")
        number = next(i for i, row in enumerate(result["rows"]) if row["shape"] == shape)
        folder = out / "profile" / f"{side}-{number}"
        sections.append(f"\n## {label}: py-spy run {run['py_spy_run_s']:.2f} s ({tokens} steps), "
                        f"torch-profiled run {run['torch_run_s']:.2f} s")
        data[label] = {"windows": []}
        for number_w, (start, seconds) in enumerate(run["windows"]):
            raw = folder / f"py-spy-window{number_w}.txt"
            steps = steps_in(start, seconds, run["py_spy_run_s"], tokens)
            if steps == 0:
                sections.append(f"\npy-spy window {number_w}: starts after the run's end")
                continue
            if not raw.exists():
                sections.append(f"\npy-spy window {number_w}: no samples ({raw.name} missing; see its .log)")
                continue
            threads = read_py_spy(raw.read_text())
            end = min(start + seconds, run["py_spy_run_s"])
            sections.append(f"\n### py-spy, {start:g} s to {end:.2f} s into the run "
                            f"({steps:.0f} steps at {run['rate']} samples/s)")
            sections.append(host_tables(threads, run["rate"], steps, top))
            data[label]["windows"].append({
                "start_s": start, "seconds": seconds, "steps": steps,
                "threads": {f"{p} / {t}": {"busy_ms_per_step": th.samples * 1e3 / run["rate"] / steps,
                                           "self": th.self_.most_common(top), "inclusive": th.inclusive.most_common(top)}
                            for (p, t), th in threads.items()}})
        traces = sorted((out / "torch" / side).glob("*.pt.trace.json*"), key=lambda path: path.stat().st_mtime)
        if len(traces) > number:  # one trace per profiled shape, in the order they ran
            sections.append(f"\n### torch profiler, engine core, {run['torch_steps']} steps from step "
                            f"{run['torch_delay']}\n")
            sections.append(device_table(read_trace(traces[number]), run["torch_steps"], top))
        else:
            sections.append(f"\ntorch profiler: no trace for this run under torch/{side}")
    return "\n".join(sections), data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="a `vllm-hotpaths throughput --profile --out` folder")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if not (args.out / "throughput.json").exists():
        parser.error(f"{args.out} has no throughput.json: run `vllm-hotpaths throughput --profile --out {args.out}`")
    text, data = summarize(args.out, args.top)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
