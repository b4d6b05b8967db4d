"""Give the plugin's CPU rows their cuda half from one GPU gate run.

A hot path's cuda rows are equivalence rows: our fast paths against our references, for every
reference key at once, on CUDA tensors (and, for penalties, the reference against the staged
release's compiled repetition op). No release's Python code runs in them, so they read the same
for every release; what a release changes is checked by its CPU rows (conformance, drift, the
plugin patch against the installed vLLM), which `vllm-hotpaths matrix --record` writes. So a
release's row gets `cuda` when

- its CPU row holds (it is in the validated file),
- a GPU gate report ran the hot path's cuda rows, every one held (none failed or skipped), and
  they cover each of the row's fast paths that has a CUDA form,
- the suite's files for that hot path (matrix.files_of) are the same at the row's commit and the
  report's (`git diff`), so both ran the same checks.

    python -m vllm_hotpaths.testing.cuda_rows REPORT.json [REPORT.json ...] [--validated FILE]

Several reports of one suite commit join: a hot path whose patch rows run the installed vLLM
(`RELEASE_BOUND`) takes them from a GPU run per release, its fast paths' from any.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path
from typing import Callable

from vllm_hotpaths.plugin import load_validated, validated_file
from vllm_hotpaths.registry import version_key
from vllm_hotpaths.testing import matrix


# Rows that run the installed vLLM's own code on CUDA (a patch law, as sampler_mrv2's, and the
# laws against vLLM itself): they hold for the report's vLLM release only, and where no vLLM was
# installed their skipped rows say nothing of the others.
RELEASE_BOUND = frozenset({"plugin patch"})
VLLM_CHECKS = frozenset({"conformance", "drift", "runner-change"})


def _release_bound(row: dict) -> bool:
    return row["implementation"] in RELEASE_BOUND or row["check"] in VLLM_CHECKS


def _vllm_of(report: dict, row: dict) -> str | None:
    """The vLLM release a result row ran with (a joined report's rows each carry their own)."""
    return row.get("vllm", report.get("environment", {}).get("vllm"))


def held_on_cuda(report: dict, version: str | None = None) -> dict[str, set[str]]:
    """hot path -> the implementations whose cuda rows all held in this report; a hot path with
    any cuda row that failed or skipped is left out. A release-bound row counts for `version`
    only where it ran with that release, and one skipped where no vLLM was installed says
    nothing of the others (None: every release-bound row that ran counts)."""
    def counts(r: dict) -> bool:
        if not _release_bound(r):
            return True
        ran_with = _vllm_of(report, r)
        return not (ran_with is None and r["status"] == "skip") and version in (None, ran_with)

    cuda = [r for r in report["results"] if r["device"] == "cuda" and counts(r)]
    held: dict[str, set[str]] = {}
    for name in sorted({r["hotpath"] for r in cuda}):
        mine = [r for r in cuda if r["hotpath"] == name]
        if all(r["status"] in ("pass", "expected-divergence") for r in mine) and any(
                r["check"] == "equivalence" for r in mine):
            held[name] = {r["implementation"] for r in mine if r["check"] == "equivalence"}
    return held


def joined(reports: list[dict]) -> dict:
    """Several GPU reports of one suite commit and profile as one, each row keeping the vLLM
    release it ran with (a run without vLLM for the fast paths, one per release for a patch)."""
    first = reports[0]
    for other in reports[1:]:
        if other["profile"] != first["profile"]:
            raise ValueError(f"reports of profiles {first['profile']} and {other['profile']} cannot be joined")
        if other.get("environment", {}).get("commit") != first.get("environment", {}).get("commit"):
            raise ValueError("reports of different suite commits cannot be joined")
    return {**first, "devices": sorted({d for r in reports for d in r.get("devices", ())}),
            "environment": {**first.get("environment", {}), "vllm": None},
            "results": [{**row, "vllm": _vllm_of(r, row)} for r in reports for row in r["results"]]}


def without_cuda_form(report: dict, name: str) -> set[str]:
    """The hot path's equivalence implementations that ran on a GPU machine with no cuda row: the
    plugin patch (against the installed vLLM, on CPU) and device-free ones (list repairs)."""
    rows = [r for r in report["results"] if r["hotpath"] == name and r["check"] == "equivalence"]
    return {r["implementation"] for r in rows} - {r["implementation"] for r in rows if r["device"] == "cuda"}


def fold(report: dict, validated: dict, same_code: Callable[[str, str, str], bool], log=print) -> dict:
    """`validated` with cuda added where this report's cuda rows carry it (changed in place).
    `same_code(hotpath, row_commit, report_commit)`: the suite's files for the hot path are equal."""
    commit = report.get("environment", {}).get("commit")
    gpu = report.get("environment", {}).get("cuda_device")
    for name in held_on_cuda(report):
        for version, row in sorted(validated.get(name, {}).items(), key=lambda kv: version_key(kv[0])):
            implementations = held_on_cuda(report, version).get(name, set())
            needed = set(row.get("implementations", ())) - without_cuda_form(report, name)
            why = None
            if row.get("profile") != report["profile"]:
                why = f"profile {row.get('profile')} here, {report['profile']} on the GPU"
            elif needed - implementations:
                why = f"no cuda rows for {', '.join(sorted(needed - implementations))}"
            elif not (row.get("commit") and commit and same_code(name, row["commit"], commit)):
                why = f"the suite's {name} files at {row.get('commit')} and {commit} are not known to be the same"
            if why:
                log(f"cuda_rows: {name} on vLLM {version}: cpu only ({why})")
                continue
            row["devices"] = sorted({*row["devices"], "cuda"})
            row["cuda"] = {"commit": commit, "device": gpu, "implementations": sorted(implementations)}
            log(f"cuda_rows: {name} on vLLM {version}: cpu + cuda ({gpu}, suite {commit})")
    return validated


# The tools that run checks and write their reports, not the checks: a change there leaves what
# a row means as it was.
RUNNERS = ("src/vllm_hotpaths/cli.py", "src/vllm_hotpaths/testing/gate.py", "src/vllm_hotpaths/testing/matrix.py",
           "src/vllm_hotpaths/testing/cuda_rows.py", "src/vllm_hotpaths/testing/results.py",
           "src/vllm_hotpaths/testing/release_changes.py", "src/vllm_hotpaths/testing/plot.py")


def git_same_code(root: Path) -> Callable[[str, str, str], bool]:
    def same(name: str, a: str, b: str) -> bool:
        if a.endswith("-dirty") or b.endswith("-dirty"):
            return False
        files = [str(p.relative_to(root)) for p in matrix.files_of(root, name)]
        files = [f for f in files if f not in RUNNERS]
        files += ["src/vllm_hotpaths/registry.py", "src/vllm_hotpaths/testing/ledger.py"]
        done = subprocess.run(["git", "-C", str(root), "diff", "--quiet", a, b, "--", *files])
        return done.returncode == 0
    return same


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vllm_hotpaths.testing.cuda_rows", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("report", type=Path, nargs="+",
                        help="gate-report.json files of GPU runs of one suite commit (ci/gpu/cuda-suite.sh)")
    parser.add_argument("--validated", type=Path, default=None, help="the file to update (default: the plugin's)")
    parser.add_argument("--root", type=Path, default=Path("."), help="the suite's git checkout")
    args = parser.parse_args(argv)
    for path in args.report:
        if not path.is_file():
            parser.error(f"{path}: no such report")
    reports = [json.loads(path.read_text()) for path in args.report]
    for path, one in zip(args.report, reports):
        if "cuda" not in one.get("devices", ()):
            parser.error(f"{path}: no cuda rows ran in this report (devices: {one.get('devices')})")
    try:
        report = joined(reports)
    except ValueError as err:
        parser.error(str(err))
    path = args.validated or validated_file()
    validated = load_validated(path)
    fold(report, validated, git_same_code(args.root.resolve()))
    path.write_text(json.dumps(validated, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
