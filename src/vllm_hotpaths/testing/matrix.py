"""`vllm-hotpaths matrix`: the gate over many vLLM releases, and the page of what holds where.

The rows that run no vLLM code (`gate --rows own`: our fast paths against our references) are
gated once, in the base environment, where no vLLM is installed. Each release gets its environment
(testing.releases, made ahead from the start while the gates run) and, per hot path, either a
verdict of its own (the gate of the rows that run vLLM in that environment, tracing the vLLM
functions each hot path runs, joined with the rows gated once) or the verdict of an earlier
release it provably shares: same suite segment (no version that this suite's own code names lies
between them, so the same references, ledger entries and version branches apply) and the same
fingerprint (testing.fingerprint) of the functions that release's run traced.

Each release's result is written to `<out>/matrix/vllm-X.Y.Z.json` as soon as it is known, so an
interrupted matrix keeps what finished and a later run with the same suite commit and profile
takes it up; `<out>/matrix.md` is written from those files.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from vllm_hotpaths import registry
from vllm_hotpaths.registry import version_key
from vllm_hotpaths.testing import fingerprint, gate, plugin_load, release_changes, releases, runner_choice
from vllm_hotpaths.testing.gate import PROFILES

STATUS_ORDER = ("fail", "expected-divergence", "pass", "skip", "removed")


class Interrupted(Exception):
    """A gate stopped by `Matrix.stop`: its release has no result."""


VERSION_LITERAL = re.compile(r"""["'](\d+\.\d+\.\d+)["']""")
IMPORT = re.compile(r"^\s*from\s+([\w.]+)\s+import\s+\(?([\w, \n]+)\)?|^\s*import\s+([\w.]+)", re.M)
DATA_FILES = ("registry.py", "ledger.py")  # their versions are read per hot path from their data
PACKAGES = {"vllm_hotpaths": "src/vllm_hotpaths", "strategies": "strategies", "properties": "properties"}


def _owner(path: Path, names) -> str | None:
    """The hot path a file belongs to: a folder or the file (`test_` dropped) named after it."""
    parts = set(path.parts[:-1]) | {path.stem.removeprefix("test_")}
    return next((n for n in names if n in parts), None)


def _module_file(root: Path, module: str) -> Path | None:
    top, _, rest = module.partition(".")
    if top not in PACKAGES:
        return None
    base = root / PACKAGES[top] / rest.replace(".", "/") if rest else root / PACKAGES[top]
    return next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)


def _imports(root: Path, text: str) -> set[Path]:
    """This suite's files that `text` imports (a `from package import module` names a file too)."""
    found = set()
    for package, members, module in IMPORT.findall(text):
        candidates = [module] if module else [package] + [f"{package}.{m}" for m in re.findall(r"\w+", members)]
        found |= {f for f in map(lambda m: _module_file(root, m), candidates) if f is not None}
    return found


def _suite_files(root: Path) -> list[Path]:
    return [p for folder in PACKAGES.values() for p in (root / folder).rglob("*.py") if p.name not in DATA_FILES]


def files_of(root: Path, name: str, texts: dict[Path, str] | None = None) -> set[Path]:
    """The suite's files a hot path's checks may run: those of the hot path and its v1
    counterpart (by folder or name), the files that belong to no hot path, and every file those
    import (registry.py and ledger.py are read per hot path from their data instead)."""
    texts = texts if texts is not None else {p: p.read_text() for p in _suite_files(root)}
    names = sorted(registry.HOTPATHS, key=len, reverse=True)  # penalties_mrv2 before penalties
    owned = {p: _owner(p.relative_to(root), names) for p in texts}
    related = {name, registry.get(name).family}
    todo = [p for p, owner in owned.items() if owner in related]
    reached = {p for p, owner in owned.items() if owner is None}
    while todo:
        path = todo.pop()
        if path not in reached:
            reached.add(path)
            todo += sorted(_imports(root, texts.get(path, "")) - reached)
    return reached


def boundaries_in(root: Path) -> dict[str, list[str]]:
    """Per hot path, every vLLM version this suite's own code names for it: where its checks may
    change from one release to the next. Read in the code importable from here (the suite's own
    package): the registry entries (reference keys, fast variants' versions, `since`) and ledger
    entries of the hot path and its v1 counterpart, and the version literals of the files that
    belong to no hot path, of the two hot paths' own files (by folder or name) and of every file
    those import."""
    from vllm_hotpaths.testing import ledger

    texts = {p: p.read_text() for p in _suite_files(root)}
    first = version_key(releases.FIRST_RELEASE)
    result = {}
    for name in registry.HOTPATHS:
        related = {name, registry.get(name).family}
        found = {releases.FIRST_RELEASE}
        for path in files_of(root, name, texts):
            found.update(VERSION_LITERAL.findall(texts.get(path, "")))
        for hotpath in related:
            entry = registry.get(hotpath)
            found.update(entry.references)
            found.update(version for _, version in entry.fast.values())
            found.update([entry.since] if entry.since else [])
            found.update(version for version, _ in entry.before_since)
        for item in ledger.LEDGER:
            if item.hotpath in related:
                found.update(v for v in (item.first_version, item.last_version, item.fixed_in) if v)
        result[name] = sorted((v for v in found if version_key(v) >= first), key=version_key)
    return result


def suite_boundaries(root: Path) -> dict[str, list[str]]:
    """`boundaries_in(root)` as the suite at `root` has it (its own package, in a child process:
    the suite checked may be another checkout than the one running the matrix)."""
    code = "import json, sys; from pathlib import Path; from vllm_hotpaths.testing import matrix; " \
           "print(json.dumps(matrix.boundaries_in(Path(sys.argv[1]))))"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root / "src"), str(root)]))
    done = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise releases.ReleaseError(f"could not read the suite's versions in {root}: {done.stderr.strip()[-400:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def segment(version: str, boundaries: list[str]) -> str:
    """The first boundary at or below `version`: releases in one segment are checked alike."""
    below = [b for b in boundaries if version_key(b) <= version_key(version)]
    return below[-1] if below else releases.FIRST_RELEASE


def hotpath_status(rows: list[dict]) -> str:
    """The hot path's verdict on a release. Where every row that runs the release's vLLM skips
    (the hot path is not in that release), it is `skip`, or `removed` where one of them says the
    release removed its code, whatever the rows that run no vLLM code (marked `own`: our fast path
    against our reference, the same on every release) say."""
    upstream = [r for r in rows if not r.get("own")]
    if upstream and all(r["status"] in ("skip", "removed") for r in upstream):
        return "removed" if any(r["status"] == "removed" for r in upstream) else "skip"
    statuses = {r["status"] for r in rows}
    return next((s for s in STATUS_ORDER if s in statuses), "skip")


def commit_of(root: Path) -> str | None:
    done = subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty"], capture_output=True, text=True)
    return done.stdout.strip() or None


class Matrix:
    def __init__(self, root: Path, out: Path, profile: str, hotpaths: list[str], workers: str | None,
                 seed: int | None, log=print, record_to: Path | None = None) -> None:
        self.root, self.out, self.profile, self.hotpaths = root, out, profile, hotpaths
        self.record_to = record_to
        self.workers, self.seed, self.log = workers, seed, log
        self.store = out / "matrix"
        self.commit = commit_of(root)
        self.boundaries = suite_boundaries(root)
        self.lock = threading.Lock()
        self.gates: dict[subprocess.Popen, Path] = {}  # the gates running now -> their report folder
        self.stopping, self.stopped = False, []

    def stop(self, grace_s: float = 300) -> None:
        """Interrupt the running gates as Ctrl-C in a terminal would (each writes its partial report
        into the folder kept in `self.stopped`) and wait for them; one still running after `grace_s`
        is killed. No gate starts after this."""
        with self.lock:
            self.stopping = True
            running = dict(self.gates)
            self.gates.clear()
            self.stopped += running.values()
        for child in running:
            try:
                os.killpg(child.pid, signal.SIGINT)
            except ProcessLookupError:  # it has just finished
                pass
        for child in running:
            try:
                child.wait(grace_s)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()

    def path(self, version: str) -> Path:
        return self.store / f"vllm-{version}.json"

    def done(self, version: str) -> dict | None:
        """A finished result of this release by this commit and profile (resume), or None."""
        path = self.path(version)
        if not path.exists():
            return None
        result = json.loads(path.read_text())
        same = result.get("commit") == self.commit and result.get("profile") == self.profile
        return result if same and set(self.hotpaths) <= set(result["hotpaths"]) else None

    def anchors(self, hotpath: str, before: str) -> list[dict]:
        """Results of earlier releases whose hot path ran a gate of its own."""
        found = []
        for path in sorted(self.store.glob("vllm-*.json")):
            result = json.loads(path.read_text())
            cell = result["hotpaths"].get(hotpath)
            if (cell and cell.get("shared_with") is None and result.get("commit") == self.commit
                    and result.get("profile") == self.profile
                    and version_key(result["version"]) < version_key(before)):
                found.append(result)
        return sorted(found, key=lambda r: version_key(r["version"]))

    def own_rows(self) -> dict:
        """The rows that run no vLLM code (`gate --rows own`: our fast paths against our references,
        and the like), gated once for every release, in the base environment, where no vLLM is
        installed: nothing they compute can come from a release. Kept in `<store>/own-rows.json`
        for the same commit and profile (resume)."""
        path = self.store / "own-rows.json"
        if path.exists():
            kept = json.loads(path.read_text())
            if (kept.get("commit"), kept.get("profile")) == (self.commit, self.profile) \
                    and set(self.hotpaths) <= set(kept["hotpaths"]):
                self.log(f"matrix: the rows that run no vLLM code kept from an earlier run of this commit ({path})")
                return kept
        started = time.monotonic()
        python = self.root / ".venvs" / "base" / "bin" / "python"
        report = self._gate("", python, self.hotpaths, "own")[0]
        if report["vllm_version"] is not None:
            raise releases.ReleaseError(f"the base environment has vLLM {report['vllm_version']} installed: "
                                        "the rows that run no vLLM code must run where none is")
        none = report.get("problems") == ["no property ran"]  # these hot paths have no such row: nothing is missing
        if report.get("partial") and not none:  # rows missing: no cell may stand on them
            raise releases.ReleaseError("the gate of the rows that run no vLLM code stopped early: "
                                        + "; ".join(report["problems"]))
        result = {"commit": self.commit, "profile": self.profile, "seed": report["seed"],
                  "verdict": "PASS" if none else report["verdict"], "duration_s": round(time.monotonic() - started, 1),
                  "hotpaths": {name: [{**r, "fixture": self._relative(r["fixture"]), "own": True}
                                      for r in report["results"] if r["hotpath"] == name]
                               for name in self.hotpaths}}
        self.store.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1) + "\n")
        self.log(f"matrix: the rows that run no vLLM code done in {result['duration_s']:.0f} s "
                 f"({result['verdict']})")
        return result

    def release(self, version: str, own: dict, environment=None) -> dict:
        """The release's cells: per hot path, an earlier release's verdict it provably shares, or
        its own gate of the rows that run vLLM joined with `own` (`own_rows()`). `environment`: a
        future of the release's python (made ahead, while earlier releases gate), else made here."""
        previous = self.done(version)
        if previous is not None:
            self.log(f"matrix: vLLM {version}: kept from an earlier run of this commit ({self.path(version)})")
            return previous
        started = time.monotonic()
        python = environment.result() if environment else releases.environment(version, self.root, log=self.log)
        vllm_root = fingerprint.vllm_root_of(python)
        here = {name: segment(version, self.boundaries[name]) for name in self.hotpaths}
        cells, gated = {}, []
        with self.lock:  # anchors are read while other releases may be writing theirs
            for name in self.hotpaths:
                shared = self._shared(name, version, here[name], vllm_root)
                if shared is not None:
                    cells[name] = shared
                else:
                    gated.append(name)
        report, gates = None, []
        if gated:
            report, traced = self._gate(version, python, gated, "vllm")
            gates.append({"hotpaths": gated, "rows": "vllm", "seed": report["seed"], "verdict": report["verdict"]})
            for name in gated:
                rows = [{**r, "fixture": self._relative(r["fixture"])} for r in report["results"] if r["hotpath"] == name]
                cells[name] = self._own_cell(rows, own["hotpaths"][name], traced.get(name, []), vllm_root, here[name])
        choice = report["runner_choice"] if report else runner_choice.choices(str(python))
        loaded = (report or {}).get("plugin_load") or plugin_load.check(str(python))
        if not loaded["returned"]:
            self.log(f"matrix: vLLM {version}: " + plugin_load.lines(loaded)[0])
        result = {"version": version, "commit": self.commit, "profile": self.profile,
                  "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "duration_s": round(time.monotonic() - started, 1),
                  "gates": gates,
                  "runner_choice": choice, "plugin_load": loaded, "hotpaths": cells}
        with self.lock:
            self.store.mkdir(parents=True, exist_ok=True)
            self.path(version).write_text(json.dumps(result, indent=1) + "\n")
            if self.record_to is not None:
                self.record(result)
        self.log(f"matrix: vLLM {version} done in {result['duration_s']:.0f} s; gated "
                 f"{', '.join(gated) or 'nothing (every hot path shared)'}")
        return result

    def _relative(self, path: str | None) -> str | None:
        """A fixture the gate wrote under OUT, as a path from OUT (the page travels with it)."""
        if path and Path(path).is_relative_to(self.out):
            return str(Path(path).relative_to(self.out))
        return path

    def record(self, result: dict) -> None:
        """The plugin's validated file for this release, as `gate --record` writes it: a hot path
        whose checks all held here (its own gate, or the release it shares a verdict with) gets a
        CPU row; one that did not loses its row. A row that a GPU run also validated is left as
        it is while the CPU verdict holds and the suite's files for the hot path are those it was
        recorded with (`_same_code`); otherwise it becomes a CPU row, until a GPU run of this code
        adds its cuda rows again (`testing.cuda_rows`)."""
        from vllm_hotpaths.plugin import load_validated

        validated, version = load_validated(self.record_to), result["version"]
        for name, cell in result["hotpaths"].items():
            entries = validated.setdefault(name, {})
            entry = entries.get(version, {})
            if not cell.get("held"):
                entries.pop(version, None)
            elif not ("cuda" in entry.get("devices", []) and self._same_code(name, entry.get("commit"))):
                entries[version] = {"profile": self.profile, "devices": ["cpu"], "implementations": cell["implementations"],
                                    "date": result["date"], "commit": self.commit,
                                    **({"shared_with": cell["shared_with"]} if cell.get("shared_with") else {})}
        self.record_to.write_text(json.dumps(validated, indent=1, sort_keys=True) + "\n")

    def _same_code(self, name: str, commit: str | None) -> bool:
        """Whether the suite's files for `name` at `commit` are those at the matrix's commit."""
        from vllm_hotpaths.testing.cuda_rows import git_same_code

        return bool(commit and self.commit) and git_same_code(self.root)(name, commit, self.commit)

    def _shared(self, name: str, version: str, here: str, vllm_root: Path) -> dict | None:
        for anchor in reversed(self.anchors(name, version)):
            cell = anchor["hotpaths"][name]
            if cell["segment"] != here:
                continue
            functions = [tuple(f) for f in cell["traced"]]
            if fingerprint.fingerprint(vllm_root, functions) == cell["fingerprint"]:
                return {**{k: cell.get(k) for k in ("status", "excused", "skip_reasons", "fixtures", "held",
                                                    "implementations")},
                        "shared_with": anchor["version"], "segment": here, "fingerprint": cell["fingerprint"]}
        return None

    @staticmethod
    def _own_cell(rows: list[dict], own: list[dict], traced: list, vllm_root: Path, here: str) -> dict:
        """The cell of a hot path gated on this release: its rows that run vLLM with `own`, the rows
        that run no vLLM code (gated once for every release)."""
        rows = rows + own
        ran = [r for r in rows if r["status"] not in ("skip", "removed")]
        # What `gate --record` asks (testing.gate.record): every row that ran held, skips only
        # where no GPU was, and conformance ran.
        held = (all(r["status"] in ("pass", "expected-divergence") for r in ran)
                and all(r["device"] == "cuda" for r in rows if r["status"] == "skip")
                and any(r["check"] == "conformance" for r in ran))
        checks = {kind: next(s for s in STATUS_ORDER if s in {r["status"] for r in rows if r["check"] == kind})
                  for kind in {r["check"] for r in rows}}
        functions = [tuple(f) for f in traced]
        return {"status": hotpath_status(rows) if rows else "fail",
                "excused": sorted({link for r in rows for link in r.get("excused", [])}),
                "skip_reasons": sorted({x for r in rows for x in r.get("skip_reasons", []) if "CUDA" not in x}),
                "fixtures": sorted({r["fixture"] for r in rows if r.get("fixture")}),
                "rows": len(rows), "shared_with": None, "segment": here, "checks": checks, "held": held,
                "implementations": sorted({r["implementation"] for r in ran if r["check"] == "equivalence"}),
                "traced": functions, "fingerprint": fingerprint.fingerprint(vllm_root, functions)}

    def _gate(self, version: str, python: Path, hotpaths: list[str], rows: str) -> tuple[dict, dict]:
        """`gate --rows ROWS` of `hotpaths` with `python`: the rows that run vLLM (traced, vLLM
        required) on a release, or the rows that run none ("own")."""
        report_dir = self.store / ("gate-own-rows" if rows == "own" else f"gate-vllm-{version}")
        what = "the rows that run no vLLM code" if rows == "own" else f"vLLM {version}"
        with tempfile.TemporaryDirectory() as trace:
            cmd = [str(python), "-m", "vllm_hotpaths.cli", "gate", "--rows", rows, "--profile", self.profile,
                   "--suite", str(self.root), "--report-dir", str(report_dir),
                   "--fixture-dir", str(report_dir / "fixtures")]
            cmd += ["--require-vllm", "--trace-vllm", trace] if rows == "vllm" else []
            cmd += [a for name in hotpaths for a in ("--hotpath", name)]
            cmd += ["-n", self.workers] if self.workers else []
            cmd += ["--seed", str(self.seed)] if self.seed is not None else []
            self.log(f"matrix: {what}: gate of {', '.join(hotpaths)}: {' '.join(cmd)}")
            report_dir.mkdir(parents=True, exist_ok=True)
            output = report_dir / "gate.log"  # (not committed: .gitignore)
            with open(output, "w") as log, self.lock:
                if self.stopping:
                    raise Interrupted(f"the matrix was interrupted before the gate of {what}")
                # its own session: an interruption reaches it once, from `stop`
                child = subprocess.Popen(cmd, cwd=self.root, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
                self.gates[child] = report_dir
            try:
                child.wait()
            except BaseException:  # Ctrl-C while this thread waits (the rows gated once run in the main one)
                self.stop()
                raise
            with self.lock:
                self.gates.pop(child, None)
            if self.stopping:
                raise Interrupted(f"the gate of {what} was interrupted (its partial report: {report_dir})")
            report_file = report_dir / "gate-report.json"
            if not report_file.exists():
                raise releases.ReleaseError(f"the gate of {what} wrote no report (its output: {output})")
            return json.loads(report_file.read_text()), fingerprint.traced(Path(trace))


def parse_releases(spec: list[str], index: list[str]) -> list[str]:
    """`0.16.0..0.33.0` (a range of the index's releases, ends included), single versions, or
    nothing (every gateable release)."""
    ok = releases.gateable(index)
    if not spec:
        return ok
    chosen = []
    for item in spec:
        if ".." in item:
            low, _, high = item.partition("..")
            low = releases.check_release(low, index) if low else ok[0]
            high = releases.check_release(high, index) if high else ok[-1]
            chosen += [v for v in ok if version_key(low) <= version_key(v) <= version_key(high)]
        else:
            chosen.append(releases.check_release(item, index))
    return sorted(set(chosen), key=version_key)


def run(args) -> int:
    """The `matrix` command."""
    from vllm_hotpaths.testing import suite

    root = suite.root(args.suite)
    out = Path(args.out).resolve()
    try:
        chosen = parse_releases(args.releases, releases.index_releases())
    except releases.ReleaseError as err:
        print(f"matrix: {err}", file=sys.stderr)
        return 2
    hotpaths = args.hotpath or list(registry.HOTPATHS)
    if args.record and PROFILES.index(args.profile) < PROFILES.index("ci"):
        print(f"matrix: --record needs the ci profile or a larger one (--profile {args.profile})", file=sys.stderr)
        return 2
    record_to = Path(os.environ.get("VLLM_HOTPATHS_VALIDATED", root / "src" / "vllm_hotpaths" / "validated.json"))
    matrix = Matrix(root, out, args.profile, hotpaths, args.workers, args.seed,
                    log=lambda line: print(line, flush=True), record_to=record_to if args.record else None)
    print(f"vllm-hotpaths matrix: {len(chosen)} releases ({releases.span(chosen)}), profile {args.profile}, "
          f"{args.jobs} at a time; suite {root}; results in {matrix.store}", flush=True)
    started, finished, problems = time.monotonic(), [], []
    try:
        releases.make_base(root, root / ".venvs" / "base")
    except releases.ReleaseError as err:
        print(f"matrix: {err}", file=sys.stderr)
        return 2
    making, pool = ThreadPoolExecutor(1), ThreadPoolExecutor(args.jobs)
    # a cancelled CI job stops as Ctrl-C does: the running gates write their partial reports
    sigterm = signal.signal(signal.SIGTERM, gate.interrupted)
    try:
        # Environments are made one at a time, in order, from the start: pip's downloads and
        # unpacking overlap the gates (the rows gated once, then each earlier release's).
        environments = {v: making.submit(releases.environment, v, root, log=matrix.log)
                        for v in chosen if matrix.done(v) is None}
        own = matrix.own_rows()
        for version, future in [(v, pool.submit(matrix.release, v, own, environments.get(v))) for v in chosen]:
            try:
                finished.append(future.result())
            except releases.ReleaseError as err:
                problems.append(f"vLLM {version}: {err}")
                print(f"matrix: vLLM {version}: {err}", flush=True)
    except releases.ReleaseError as err:
        problems.append(str(err))
        print(f"matrix: {err}", flush=True)
    except KeyboardInterrupt:
        pool.shutdown(wait=False, cancel_futures=True)  # no release starts after this
        matrix.stop()
        problems.append("interrupted: the releases that finished keep their results; run the same command "
                        "again to go on" + "".join(f"; a gate stopped, its partial report in {d}" for d in matrix.stopped))
        print(f"matrix: {problems[-1]}", flush=True)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        making.shutdown(wait=False, cancel_futures=True)
        signal.signal(signal.SIGTERM, sigterm)
    page = write_page(matrix, chosen, time.monotonic() - started, problems, " ".join(sys.argv[1:]))
    print(f"matrix: {len(finished)} of {len(chosen)} releases done; page {page}")
    failing = [r["version"] for r in finished if any(c["status"] == "fail" for c in r["hotpaths"].values())
               or not r.get("plugin_load", {"returned": True})["returned"]]
    if failing:
        print(f"matrix: a hot path fails, or vLLM's plugin loading raised, on {', '.join(failing)}")
    return 1 if failing or problems else 0


def cell_text(cell: dict | None) -> str:
    if cell is None:
        return "not run"
    text = cell["status"]
    if cell.get("shared_with"):
        text += f" (= {cell['shared_with']}, {cell['fingerprint']})"
    if cell["status"] == "expected-divergence":
        text += " " + " ".join(f"[{i + 1}]({link})" for i, link in enumerate(cell["excused"]))
    reasons = cell.get("skip_reasons") or []
    if cell["status"] == "removed":
        # what runs in its place (the release that removed the code is the row's, or an earlier one's)
        reasons = [registry.removal(r).split("; ", 1)[-1] for r in reasons if registry.removal(r)]
    if cell["status"] in ("skip", "removed") and reasons:
        text += f": {reasons[0].removeprefix('Skipped: ')[:160]}"
    return text.replace("|", "/")


def write_page(matrix: Matrix, chosen: list[str], duration: float, problems: list[str], command: str) -> Path:
    results = {v: json.loads(matrix.path(v).read_text()) for v in chosen if matrix.path(v).exists()}
    # A resumed matrix takes up the releases an earlier run of this commit finished: their own
    # times are the cost of the page, not this run's.
    own_file = matrix.store / "own-rows.json"
    own = json.loads(own_file.read_text()) if own_file.exists() else {}
    own_s = own.get("duration_s", 0) if own.get("commit") == matrix.commit else 0
    spent = sum(r.get("duration_s", 0) for r in results.values())
    lines = ["# Release matrix", "",
             f"Command: `vllm-hotpaths {command}`; suite commit {matrix.commit}; profile {matrix.profile}; "
             f"{len(results)} of {len(chosen)} releases; the releases' own times sum to {spent:.0f} s "
             f"({spent / 3600:.1f} h), with {own_s:.0f} s for the rows that run no vLLM code, gated once; "
             f"this run took {duration:.0f} s.", ""]
    lines += [f"- {p}" for p in problems] + ([""] if problems else [])
    lines += ["A cell is the hot path's verdict on that release (every check and device of its gate rows): "
              "`pass`, `expected-divergence` (the ledger entries that named the differences), `fail`, "
              "`skip` (what vLLM does there), or `removed` (the release removed the code the hot path "
              "replaces: what runs in its place). `(= X, fingerprint)`: the release runs the same vLLM code for "
              "that hot path as release X, in the same suite segment, so X's verdict stands for it. "
              "The rows that run no vLLM code (our fast path against our reference) ran once, where no "
              "vLLM is installed, and are part of every cell.", ""]
    titles = {"v1": "Model Runner v1", "mrv2": "Model Runner V2", "any": "The scheduler (both runners)"}
    for runner, title in titles.items():
        names = [n for n in matrix.hotpaths if registry.get(n).runner == runner]
        if not names:
            continue
        lines += [f"## {title}", "",
                  "| release | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
        for version in chosen:
            cells = results.get(version, {}).get("hotpaths", {})
            lines.append(f"| {version} | " + " | ".join(cell_text(cells.get(n)) for n in names) + " |")
        lines.append("")
    lines += ["## The runner vLLM picks, and its plugin loading", "",
              "| release | " + " | ".join(runner_choice.CONFIGURATIONS) + " | load_general_plugins() |",
              "|---|" + "---|" * (len(runner_choice.CONFIGURATIONS) + 1)]
    for version, result in results.items():
        answers = {a["configuration"]: a["runner"] or f"not decided ({a.get('error', '')[:60]})"
                   for a in result["runner_choice"]}
        loaded = result.get("plugin_load")
        loading = ("not asked" if loaded is None else "returned" if loaded["returned"]
                   else f"RAISED ({loaded['error'][:60]})")
        lines.append(f"| {version} | " + " | ".join(answers.get(c, answers.get("all", "?"))
                                                    for c in runner_choice.CONFIGURATIONS) + f" | {loading} |")
    lines += ["", "## What changes from one release to the next", "",
              "Known to this suite (a hot path that appears, a reference keyed at the release, a ledger "
              "entry that starts or ends there, the runner vLLM picks); `vllm-hotpaths changes X Y` "
              "composes them for any two releases.", ""]
    choices = release_changes.recorded_runner_choice(matrix.store)
    for current, changes in release_changes.between(chosen[0], chosen[-1], chosen, choices) if chosen else []:
        lines += [f"- **{current}**: " + ("; ".join(changes) if changes else "nothing this suite knows of")]
    matrix.out.mkdir(parents=True, exist_ok=True)
    page = matrix.out / "matrix.md"
    page.write_text("\n".join(lines) + "\n")
    return page


def add_arguments(parser) -> None:

    parser.add_argument("releases", nargs="*", metavar="RELEASES",
                        help="X.Y.Z or A..B (ends included); default: every release from "
                             f"{releases.FIRST_RELEASE} on the package index")
    parser.add_argument("--profile", default="ci", choices=PROFILES, help="Hypothesis profile of each gate")
    parser.add_argument("--hotpath", action="append", choices=sorted(registry.HOTPATHS),
                        help="only this hot path (repeatable; default: all)")
    parser.add_argument("-n", "--workers", default=None, help="pytest-xdist workers of each gate")
    parser.add_argument("-j", "--jobs", type=int, default=1, help="releases checked at a time")
    parser.add_argument("--seed", type=int, default=None, help="Hypothesis' seed for every gate")
    parser.add_argument("--out", default="docs/results", help="the page's folder; results go to OUT/matrix/")
    parser.add_argument("--suite", metavar="DIR", help="the checkout holding properties/")
    parser.add_argument("--record", action="store_true",
                        help="write each release's held hot paths to the plugin's validated file (as gate --record)")
