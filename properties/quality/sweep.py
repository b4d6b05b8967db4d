"""Generation-only power: each planted bug run under fresh seeds with the `ci` profile and no
committed fixture, counting the seeds whose generated cases catch it (a comparison's
AssertionError, never an error on the way).

    python -m properties.quality.sweep --seeds 10 -n 16 [--hotpath NAME ...] [--json OUT]

prints one line per planted bug (caught k of n, the seeds that missed, the slowest run) and exits
1 when a bug is caught by fewer than `--at-least` seeds (default 8 in 10) and is not listed in its
module's `CAUGHT_BY_FIXTURE`. Bugs the installed vLLM cannot run (a hot path it lacks, or none
installed where every test the bug selects needs vLLM) are listed as skipped. docs/quality.md
records a run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from properties.quality.runs import PlantedRun, failure_types, planted_runs

ROOT = Path(__file__).resolve().parents[2]
ALL_SKIPPED = "every selected test skipped (the installed vLLM lacks what it needs?)"


def caught(run: PlantedRun, seed: int, profile: str = "ci", one_thread: bool = False) -> tuple[bool, float, str]:
    """(caught by a comparison, seconds, what else happened) for one seed; `one_thread`: torch
    computes on one CPU thread (runs side by side)."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "src")]), **run.env(out))
        env.pop("PYTEST_XDIST_WORKER", None)
        if one_thread:
            env.setdefault("OMP_NUM_THREADS", "1")
        start = time.perf_counter()
        result = subprocess.run([sys.executable, *run.args(out, profile, seed)], cwd=ROOT, env=env,
                                capture_output=True, text=True, timeout=1800)
        seconds = time.perf_counter() - start
        junit = out / "junit.xml"
        report = ET.parse(junit).getroot() if junit.exists() else None
        failures = failure_types(junit)
        if result.returncode == 1 and failures == ["AssertionError"]:
            return True, seconds, ""
        ran = sum(1 for case in report.iter("testcase") if case.find("skipped") is None) if report is not None else 0
        if result.returncode == 0 and ran:
            return False, seconds, ""
        if result.returncode == 0:
            return False, seconds, ALL_SKIPPED
        return False, seconds, f"exit {result.returncode}, failures {failures}: {result.stdout[-400:]!r}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m properties.quality.sweep", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10, help="seeds 1..N (default 10)")
    parser.add_argument("-n", "--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--hotpath", action="append", default=[], help="only these hot paths (repeatable)")
    parser.add_argument("--at-least", type=int, help="seeds that must catch each bug (default: 8 in 10)")
    parser.add_argument("--json", type=Path, help="write every run's outcome here")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.workers < 1:
        parser.error("--seeds and -n must be at least 1")
    if args.at_least is None:
        args.at_least = -(-8 * args.seeds // 10)
    runs = [r for r in planted_runs() if not args.hotpath or r.hotpath in args.hotpath]
    unknown = set(args.hotpath) - {r.hotpath for r in planted_runs()}
    if unknown:
        parser.error(f"no planted bugs for {sorted(unknown)}")
    skipped = {r.name: r.skip_reason() for r in runs if r.skip_reason()}
    jobs = [(r, s) for r in runs if r.name not in skipped for s in range(1, args.seeds + 1)]
    started = time.perf_counter()

    def one(job):  # each run's outcome as it ends, so an interrupted sweep keeps what it ran
        outcome = caught(*job, one_thread=args.workers > 1)  # runs side by side share the cores
        print(f"  {job[0].name} seed {job[1]}: {'caught' if outcome[0] else 'missed'} in {outcome[1]:.0f} s",
              file=sys.stderr, flush=True)
        return outcome

    with ThreadPoolExecutor(args.workers) as pool:
        outcomes = list(pool.map(one, jobs))
    by_run: dict[str, list] = {}
    for (run, seed), outcome in zip(jobs, outcomes):
        by_run.setdefault(run.name, []).append((seed, *outcome))
    short = []
    for run in runs:
        if run.name in skipped:
            print(f"{run.name}: skipped ({skipped[run.name]})")
            continue
        rows = by_run[run.name]
        if all(note == ALL_SKIPPED for *_, note in rows):  # nothing ran: no power measured, none lost
            print(f"{run.name}: skipped (every selected test skipped on every seed: the installed vLLM "
                  "lacks what it needs)")
            continue
        hits = [seed for seed, ok, _, _ in rows if ok]
        missed = [seed for seed, ok, _, _ in rows if not ok]
        odd = [f"seed {seed}: {note}" for seed, _, _, note in rows if note]
        line = (f"{run.name}: caught {len(hits)} of {len(rows)}" + (f" (missed seeds {missed})" if missed else "")
                + f", slowest {max(s for _, _, s, _ in rows):.0f} s" + (f" [{run.fixture}]" if run.fixture else ""))
        print(line + "".join(f"\n  {o}" for o in odd))
        if len(hits) < args.at_least and run.fixture is None:
            short.append(run.name)
    print(f"sweep: {len(jobs)} runs, {args.seeds} seeds, {args.workers} workers, {time.perf_counter() - started:.0f} s; "
          + (f"caught by fewer than {args.at_least} seeds: {short}" if short else f"every bug caught by at least {args.at_least}"))
    if args.json:
        args.json.write_text(json.dumps({name: [{"seed": seed, "caught": ok, "seconds": round(s, 1), "note": note}
                                                for seed, ok, s, note in rows] for name, rows in by_run.items()},
                                        indent=1) + "\n")
    return 1 if short else 0


if __name__ == "__main__":
    sys.exit(main())
