"""`vllm-hotpaths gate`: run every hot path's properties and report what still holds.

The gate runs the property suite in-process with pytest (optionally spread with xdist), watches
each property's report (hot path, check, device, implementation, examples, fixture), prints a
row per property while it runs and a table per hot path x check x device at the end, and writes
`gate-report.json` / `gate-report.md`. It fails on any failing property and on a missing
required device or vLLM.

Triton kernels run either compiled (CUDA tensors) or in Triton's interpreter (CPU tensors), chosen
per process before the kernels are defined. Where a GPU is visible, the gate therefore makes a
second, declared pytest run of the tests marked `triton` with TRITON_INTERPRET=1 (it prints the
command; this module is its pytest plugin, `-p vllm_hotpaths.testing.gate --gate-rows FILE`) and
merges the rows that run writes.

With `record`, every hot path whose checks all held (conformance included; skips only for a
device that is not there) is written to the plugin's validated file for this vLLM version, and a
hot path that failed loses its entry for it. `in_environment` runs the gate for another vLLM
release, in its own environment made from that release's metadata (testing.releases).
"""

from __future__ import annotations

import datetime
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from vllm_hotpaths import registry, runners, vllm_env
from vllm_hotpaths.testing import plugin_load, runner_choice, runner_report


@dataclass
class Row:
    hotpath: str
    check: str
    device: str
    implementation: str
    outcomes: list[str] = field(default_factory=list)
    examples: int = 0
    excused: set[str] = field(default_factory=set)
    fixture: str | None = None
    reasons: list[str] = field(default_factory=list)
    failures: list[dict] = field(default_factory=list)  # test id, message, fixture, replay command
    # Named differences (drift, runner-change): {link: examples judged expected by that entry}, the
    # examples of the runs they were counted in, and {link: the fixture written for it}.
    excused_counts: Counter = field(default_factory=Counter)
    counted_examples: int = 0
    shown_fixtures: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0  # its tests' time, setup and teardown included (as pytest's --durations)

    @property
    def runner(self) -> str:
        """The model runner that calls this hot path's upstream (registry `runner`)."""
        return registry.get(self.hotpath).runner if self.hotpath in registry.HOTPATHS else "?"

    @property
    def status(self) -> str:
        if "failed" in self.outcomes:
            return "fail"
        if all(o == "skipped" for o in self.outcomes):
            # the code it checks is gone: whatever else also kept it from running
            return "removed" if any(registry.removal(r) for r in self.reasons) else "skip"
        return "expected-divergence" if self.excused else "pass"

    def as_json(self) -> dict:
        return {"hotpath": self.hotpath, "runner": self.runner, "check": self.check, "device": self.device,
                "implementation": self.implementation, "status": self.status,
                "examples": self.examples, "fixture": self.fixture,
                "outcomes": self.outcomes, "excused": sorted(self.excused), "failures": self.failures,
                "skip_reasons": sorted(set(self.reasons)), "excused_counts": dict(sorted(self.excused_counts.items())),
                "counted_examples": self.counted_examples, "shown_fixtures": dict(sorted(self.shown_fixtures.items())),
                "seconds": round(self.seconds, 1)}

    def merge(self, other: dict) -> None:
        """Add a row of another gate process's report (same key)."""
        self.outcomes += other["outcomes"]
        self.examples += other["examples"]
        self.excused.update(other["excused"])
        self.fixture = self.fixture or other["fixture"]
        self.failures += other["failures"]
        self.reasons += other["skip_reasons"]
        self.seconds += other.get("seconds", 0.0)
        self.add_counts(other.get("excused_counts", {}), other.get("counted_examples", 0),
                        other.get("shown_fixtures", {}))

    def add_counts(self, excused_counts: dict, counted_examples: int, shown_fixtures: dict) -> None:
        """Add one test's (or one process's) named-difference counts and fixtures."""
        self.excused_counts.update({link: int(n) for link, n in excused_counts.items()})
        self.counted_examples += int(counted_examples)
        for link, path in shown_fixtures.items():
            self.shown_fixtures.setdefault(link, path)


class Workers:
    """When each pytest process (xdist worker, or this process without xdist) was running a test,
    from the reports' start and stop times: how long each sat idle while another still worked."""

    def __init__(self) -> None:
        self.busy: dict[str, list[tuple[float, float]]] = {}

    def add(self, report) -> None:
        node = getattr(report, "node", None)
        name = node.gateway.id if node is not None else "main"
        self.busy.setdefault(name, []).append((report.start, report.stop))

    def idle(self) -> dict[str, float]:
        """Worker -> seconds between the first test's start and the last test's end (any worker)
        in which it ran none."""
        spans = [span for spans in self.busy.values() for span in spans]
        if not spans:
            return {}
        first, last = min(s for s, _ in spans), max(e for _, e in spans)
        out = {}
        for name, worked in sorted(self.busy.items()):
            covered, reached = 0.0, first
            for start, stop in sorted(worked):
                covered += max(0.0, stop - max(start, reached))
                reached = max(reached, stop)
            out[name] = round(last - first - covered, 1)
        return out


def idle_text(idle: dict[str, float]) -> str:
    return ", ".join(f"{name} {seconds:.0f} s" for name, seconds in idle.items()) or "none ran"


class GatePlugin:
    """Collects property reports (works with xdist: reports carry user_properties and the worker
    that ran them), prints a line per property with its progress, times each row and worker, and
    keeps collection errors."""

    def __init__(self, replay: Callable[[str], str] = lambda nodeid: f"python -m pytest '{nodeid}'") -> None:
        self.rows: dict[tuple, Row] = {}
        self.terminal = None
        self.replay = replay
        self.collection_errors: list[str] = []
        self.total = 0
        self.done = 0
        self.started = time.monotonic()
        self.workers = Workers()
        self.row_of: dict[str, Row] = {}  # a property's row (its setup reports carry no row)
        self.unplaced: dict[str, float] = {}  # setup seconds of a property whose row is not known yet

    def pytest_configure(self, config):
        self.terminal = config.pluginmanager.get_plugin("terminalreporter")

    def _say(self, line: str) -> None:
        if self.terminal is not None:
            self.terminal.ensure_newline()
            self.terminal.write_line(line, flush=True)
        else:
            print(line, flush=True)

    def pytest_collection_finish(self, session):
        self.total = len(session.items)

    def pytest_xdist_node_collection_finished(self, node, ids):
        self.total = max(self.total, len(ids))

    def pytest_collectreport(self, report):
        if report.failed:
            self.collection_errors.append(f"{report.nodeid or 'collection'}: "
                                          + str(report.longrepr).strip().splitlines()[-1][:300])

    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(self, report, config):
        if "hotpath" in dict(getattr(report, "user_properties", ())) and (
                report.when == "call" or report.outcome != "passed"):
            return report.outcome, "", report.outcome.upper()  # the gate prints its own line
        return None

    def pytest_runtest_logreport(self, report):
        props = dict(report.user_properties)
        self.workers.add(report)
        if report.when == "teardown":
            self.done += 1
        seconds = report.duration
        if "hotpath" not in props or (report.when != "call" and report.outcome == "passed"):
            if report.nodeid in self.row_of:
                self.row_of[report.nodeid].seconds += seconds
            else:
                self.unplaced[report.nodeid] = self.unplaced.get(report.nodeid, 0.0) + seconds
            return
        key = (props["hotpath"], props["check"], props["device"], props["implementation"])
        row = self.rows.setdefault(key, Row(*key))
        self.row_of[report.nodeid] = row
        row.seconds += seconds + self.unplaced.pop(report.nodeid, 0.0)
        row.outcomes.append(report.outcome)
        row.examples += int(props.get("examples", 0))
        row.excused.update(props.get("excused", []))
        row.add_counts(props.get("excused_counts", {}), props.get("counted_examples", 0),
                       props.get("shown_fixtures", {}))
        if props.get("fixture") and row.fixture is None:
            row.fixture = props["fixture"]
        if report.outcome == "skipped" and isinstance(report.longrepr, tuple):
            row.reasons.append(report.longrepr[2])
        if report.failed:
            row.failures.append({"test": report.nodeid, "message": props.get("failure", ""),
                                 "fixture": props.get("fixture"), "replay": self.replay(report.nodeid)})
        name = report.nodeid.split("::")[-1]
        progress = f"[{self.done + 1}/{self.total or '?'}]"  # (this test's teardown comes later)
        self._say(f"  {progress:>9} {time.monotonic() - self.started:6.0f}s {report.outcome:8} "
                  f"{props['hotpath']:14} {props['check']:12} {props['device']:5} "
                  f"{props['examples']:>6} examples {report.duration:6.0f}s  {name}")


def table(rows: list[Row]) -> str:
    header = ("hot path", "runner", "check", "device", "implementation", "status", "examples", "seconds", "fixture")
    lines = [header] + [
        (r.hotpath, r.runner, r.check, r.device, r.implementation, r.status, str(r.examples), f"{r.seconds:.0f}",
         r.fixture or "")
        for r in rows
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    fmt = lambda line: "| " + " | ".join(c.ljust(w) for c, w in zip(line, widths)) + " |"  # noqa: E731
    return "\n".join([fmt(lines[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
                     + [fmt(line) for line in lines[1:]])


PROFILES = ("smoke", "dev", "ci", "gate", "soak")  # Hypothesis profiles the gate takes, smallest first
CHECKS = ("equivalence", "conformance", "drift", "semantic-change", "runner-change")  # the rows' check kinds
# `--rows`: the properties that run only this project's code (no vLLM function, no compiled op of
# vLLM's) give the same verdict whatever vLLM is installed, so the release matrix runs them once,
# where no vLLM is installed at all ("own"), and on each release only the rest ("vllm").
ROWS = ("all", "own", "vllm")
OWN_ROWS = "not needs_vllm and not needs_vllm_ops"


@dataclass
class GateOptions:
    """One gate run's options. `pytest_args` builds the pytest arguments of both of its runs (the
    in-process one and the interpreter one); `cli_args` the same gate's command line for another
    environment (`--vllm`)."""

    profile: str
    root: Path  # the suite's folder
    report_dir: Path
    require_cuda: bool = False
    require_vllm: bool = False
    impls: list[str] = field(default_factory=list)
    workers: str | None = None
    fixture_dir: Path | None = None
    hotpaths: list[str] = field(default_factory=list)
    record: bool = False
    junit_xml: Path | None = None
    fail_on_skip: bool = False
    fail_on_removed: bool = False  # a row checking code the installed vLLM removed fails the verdict
    seed: int | None = None  # Hypothesis' seed (the gate draws one when None)
    timeout: float | None = None  # seconds per property (None: by profile)
    runner: str = "all"  # only the hot paths this model runner calls (v1, mrv2, all)
    trace_dir: Path | None = None  # note the vLLM functions each hot path runs (testing.fingerprint)
    checks: list[str] = field(default_factory=list)  # only these check kinds (default: all)
    generated_only: bool = False  # leave out the committed fixtures (what generation alone finds)
    rows: str = "all"  # "own": only the rows that run no vLLM code (ROWS); "vllm": only the others

    def selected_hotpaths(self) -> list[str]:
        """The hot paths to check: --hotpath (default all), those of --runner only."""
        names = self.hotpaths or list(registry.HOTPATHS)
        return [n for n in names if self.runner == "all" or runners.calls(self.runner, registry.get(n).runner)]

    def problems(self) -> list[str]:
        """What makes this run impossible, found before anything runs."""
        from vllm_hotpaths.testing import fixtures

        found = []
        for option, folder in (("--report-dir", self.report_dir), ("--fixture-dir", self.fixture_dir)):
            problem = folder is not None and fixtures.unwritable(folder)
            if problem:
                found.append(f"{option} {folder}: {problem}")
        for impl in self.impls:
            name = impl.split("=", 1)[0].split("@", 1)[0]
            if self.hotpaths and name not in self.hotpaths:
                found.append(f"--impl {impl}: hot path {name!r} is not selected (--hotpath "
                             f"{' '.join(self.hotpaths)})")
        if self.record and PROFILES.index(self.profile) < PROFILES.index("ci"):
            found.append(f"--record needs the ci profile or a larger one (--profile {self.profile} "
                         "checks too few examples to validate a hot path)")
        if not self.selected_hotpaths():
            found.append(f"--runner {self.runner}: none of the hot paths {', '.join(self.hotpaths or registry.HOTPATHS)} is called "
                         f"by that runner")
        if self.record and self.generated_only:
            found.append("--record needs the committed fixtures replayed (--generated-only leaves them out)")
        if self.record and self.checks:
            found.append(f"--record needs every check (--check {' '.join(self.checks)} leaves some out)")
        if self.record and self.rows != "all":
            found.append(f"--record needs every row (--rows {self.rows} leaves some out)")
        if self.timeout is not None and self.timeout < 0:
            found.append(f"--timeout {self.timeout:g}: seconds, 0 for no limit")
        return found

    def pytest_args(self, interpreted: bool = False, split: bool = False) -> list[str]:
        """The properties of the chosen hot paths (markers `check` and the hot paths' names).
        `interpreted`: only the Triton cases on CPU tensors, for a TRITON_INTERPRET=1 process;
        `split`: that process runs them, so this one leaves them out."""
        selection = "check" + (" and triton and not needs_cuda" if interpreted else
                               " and not needs_interpreter" if split else "")
        if self.hotpaths or self.runner != "all":
            selection += " and (" + " or ".join(self.selected_hotpaths()) + ")"
        if self.checks:
            selection += " and (" + " or ".join(kind.replace("-", "_") for kind in self.checks) + ")"
        if self.rows != "all":
            selection += f" and {'' if self.rows == 'own' else 'not '}({OWN_ROWS})"
        args = [str(self.root / "properties"), "-q", "-m", selection, "--hypothesis-profile", self.profile,
                f"--rootdir={self.root}", "--no-header", "-rfE", "--continue-on-collection-errors"]
        args += [f"--hypothesis-seed={self.seed}"] if self.seed is not None else []
        args += ["--time-limit", f"{self.timeout:g}"] if self.timeout is not None else []
        args += ["--require-cuda"] if self.require_cuda else []
        args += ["--no-replay"] if self.generated_only else []
        args += [a for impl in self.impls for a in ("--impl", impl)]
        args += ["-n", self.workers] if self.workers else []
        args += ["--fixture-dir", str(self.fixture_dir)] if self.fixture_dir else []
        args += ["-p", "vllm_hotpaths.testing.fingerprint", "--trace-vllm", str(self.trace_dir)] if self.trace_dir else []
        if self.junit_xml:
            xml = self.junit_xml.with_name(f"{self.junit_xml.stem}-interpreted.xml") if interpreted else self.junit_xml
            args.append(f"--junitxml={xml}")
        return args

    def cli_args(self) -> list[str]:
        """`vllm-hotpaths gate` arguments for the same run elsewhere."""
        out = ["--profile", self.profile, "--report-dir", str(self.report_dir), "--suite", str(self.root)]
        out += ["--require-cuda"] if self.require_cuda else []
        out += ["--record"] if self.record else []
        out += ["--fail-on-skip"] if self.fail_on_skip else []
        out += ["--fail-on-removed"] if self.fail_on_removed else []
        out += ["--generated-only"] if self.generated_only else []
        out += ["--junit-xml", str(self.junit_xml)] if self.junit_xml else []
        out += [a for impl in self.impls for a in ("--impl", impl)]
        out += [a for name in self.hotpaths for a in ("--hotpath", name)]
        out += ["--runner", self.runner] if self.runner != "all" else []
        out += [a for kind in self.checks for a in ("--check", kind)]
        out += ["--rows", self.rows] if self.rows != "all" else []
        out += ["-n", self.workers] if self.workers else []
        out += ["--fixture-dir", str(self.fixture_dir)] if self.fixture_dir else []
        out += ["--seed", str(self.seed)] if self.seed is not None else []
        out += ["--timeout", f"{self.timeout:g}"] if self.timeout is not None else []
        out += ["--trace-vllm", str(self.trace_dir)] if self.trace_dir else []
        return out

    def replay_command(self, nodeid: str) -> str:
        """The command that runs one failing property again, drawing the same examples."""
        parts = ["python", "-m", "pytest", f"'{nodeid}'", "--rootdir", str(self.root),
                 "--hypothesis-profile", self.profile]
        parts += [f"--hypothesis-seed={self.seed}"] if self.seed is not None else []
        parts += ["--no-replay"] if self.generated_only else []
        parts += [a for impl in self.impls for a in ("--impl", impl)]
        parts += ["--fixture-dir", str(self.fixture_dir)] if self.fixture_dir else []
        return " ".join(parts)


def pytest_addoption(parser):
    """As a pytest plugin (`-p vllm_hotpaths.testing.gate`): `--gate-rows FILE` writes the rows."""
    parser.getgroup("vllm-hotpaths").addoption("--gate-rows", metavar="FILE",
                                               help="write the gate's report rows of this run as JSON")


def pytest_configure(config):
    if config.getoption("gate_rows", None) and not config.pluginmanager.has_plugin("gate-rows"):
        config.pluginmanager.register(RowsWriter(Path(config.getoption("gate_rows"))), "gate-rows")


class RowsWriter(GatePlugin):
    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def pytest_sessionfinish(self, session):
        if not hasattr(session.config, "workerinput"):  # xdist workers report to the controller
            self.path.write_text(json.dumps({"rows": [r.as_json() for r in self.rows.values()],
                                             "idle_s": self.workers.idle()}, indent=1) + "\n")


def interprets_apart(options: GateOptions) -> bool:
    """Whether the Triton cases on CPU tensors need their own TRITON_INTERPRET=1 process: a GPU
    is visible (this process runs Triton compiled) and a chosen hot path has Triton kernels.
    VLLM_HOTPATHS_INTERPRETER=off leaves them skipped instead, for an image whose interpreter
    cannot run vLLM's kernels (docs/ci-gpu.md)."""
    import torch

    if os.environ.get("VLLM_HOTPATHS_INTERPRETER") == "off":
        print("gate: VLLM_HOTPATHS_INTERPRETER=off: the Triton cases on CPU tensors are skipped", flush=True)
        return False
    names = options.hotpaths or registry.HOTPATHS
    return (any(registry.get(n).triton for n in names) and os.environ.get("TRITON_INTERPRET") != "1"
            and torch.cuda.is_available())


def _interpreted_run(options: GateOptions):
    """(exit code, rows, idle seconds per worker) of the run of the Triton cases on CPU tensors in
    Triton's interpreter (a second pytest process). The GPU is hidden from it: it runs CPU cases
    only, and vLLM, seeing a GPU, would put its Model Runner V2 buffers there, which interpreted
    kernels cannot mix with CPU tensors."""
    with tempfile.TemporaryDirectory() as scratch:
        rows_file = Path(scratch) / "rows.json"
        cmd = [sys.executable, "-m", "pytest", *options.pytest_args(interpreted=True),
               "-p", "vllm_hotpaths.testing.gate", "--gate-rows", str(rows_file)]
        print("gate: the Triton cases on CPU tensors, in Triton's interpreter:\n  TRITON_INTERPRET=1 "
              "CUDA_VISIBLE_DEVICES= " + " ".join(cmd), flush=True)
        code = subprocess.run(cmd, env=dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")).returncode
        written = json.loads(rows_file.read_text()) if rows_file.exists() else {}
    rows = written.get("rows", [])
    return (code if rows else 2), rows, written.get("idle_s", {})


def record(rows: list[Row], version: str, profile: str, path: Path, environment: dict | None = None) -> dict[str, bool]:
    """Update the validated file from this run's rows; returns hot path -> recorded."""
    import torch

    from vllm_hotpaths.plugin import load_validated

    present = {"cpu"} | ({"cuda"} if torch.cuda.is_available() else set())
    validated = load_validated(path)
    verdicts = {}
    for name in sorted({r.hotpath for r in rows}):
        mine = [r for r in rows if r.hotpath == name]
        ran = [r for r in mine if r.status not in ("skip", "removed")]
        held = (all(r.status in ("pass", "expected-divergence") for r in ran)
                and all(r.device not in present for r in mine if r.status == "skip")
                and any(r.check == "conformance" for r in ran))
        entries = validated.setdefault(name, {})
        if held:
            entries[version] = {"profile": profile, "devices": sorted({r.device for r in ran}),
                                "implementations": sorted({r.implementation for r in ran if r.check == "equivalence"}),
                                **{k: (environment or {}).get(k) for k in ("date", "commit")}}
        else:
            entries.pop(version, None)
        verdicts[name] = held
    path.write_text(json.dumps(validated, indent=1, sort_keys=True) + "\n")
    return verdicts


def in_environment(version: str, options: GateOptions) -> int:
    """Run the same gate in `.venvs/vllm-<version>` (made or reused from the release's own
    metadata: testing.releases), with --require-vllm."""
    from vllm_hotpaths.testing import releases

    try:
        python = releases.environment(version, options.root, log=lambda line: print(line, flush=True))
    except releases.ReleaseError as err:
        print(f"gate: {err}", flush=True)
        return 2
    cmd = [str(python), "-m", "vllm_hotpaths.cli", "gate", *options.cli_args(), "--require-vllm"]
    return subprocess.run(cmd, cwd=options.root).returncode


def interrupted(signum, frame):
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def suite_commit(root: Path) -> str | None:
    """The suite's commit: VLLM_HOTPATHS_COMMIT where a copy of the tree has no git history of its
    own (a GPU machine is told it), else git's at `root` (`-dirty` when changed)."""
    if os.environ.get("VLLM_HOTPATHS_COMMIT"):
        return os.environ["VLLM_HOTPATHS_COMMIT"]
    try:
        return subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty"],
                              capture_output=True, text=True).stdout.strip() or None
    except OSError:  # no git here
        return None


def environment(options: GateOptions, version: str | None) -> dict:
    """What a report needs to be read later: when, on what code, with which versions."""
    import platform

    import hypothesis
    import torch

    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "commit": suite_commit(options.root), "python": platform.python_version(), "torch": torch.__version__,
            "triton": triton_version, "hypothesis": hypothesis.__version__, "vllm": version,
            "cuda_device": torch.cuda.get_device_name() if torch.cuda.is_available() else None}


def run(options: GateOptions, record_to: Path | None = None) -> int:
    """The gate in this process (the caller has checked `options.problems()`)."""
    profile, report_dir, impls = options.profile, options.report_dir, options.impls
    version = vllm_env.installed_version()
    if options.seed is None:
        options.seed = random.SystemRandom().randrange(2**32)
    # The suite folder first: with two checkouts, which one's properties run is not obvious.
    print(f"vllm-hotpaths gate: suite {options.root}, profile {profile}, seed {options.seed}, "
          f"vLLM {version or 'not installed'}"
          + (", committed fixtures left out (generated cases only)" if options.generated_only else ""), flush=True)
    if options.require_vllm and version is None:
        print("gate: vLLM is not installed, so conformance cannot be checked (--require-vllm)")
        return 2
    started = time.monotonic()
    asking = ThreadPoolExecutor(1).submit(runner_choice.choices) if version else None
    loading = ThreadPoolExecutor(1).submit(plugin_load.kept_or_checked) if version else None
    plugin = GatePlugin(options.replay_command)
    signal.signal(signal.SIGTERM, interrupted)  # a cancelled CI job still gets its partial report
    partial: list[str] = []
    code = 2
    idle_elsewhere: dict[str, float] = {}  # the interpreter run's workers
    try:
        split = interprets_apart(options)
        code = pytest.main(options.pytest_args(split=split), plugins=[plugin])
        if split:
            child_code, child_rows, child_idle = _interpreted_run(options)
            idle_elsewhere = {f"interpreter {name}": s for name, s in child_idle.items()}
            code = code if child_code in (0, 5) else child_code
            if not child_rows:
                partial.append("the interpreter run wrote no rows")
            for result in child_rows:
                key = tuple(result[k] for k in ("hotpath", "check", "device", "implementation"))
                for failure in result["failures"]:
                    failure["replay"] = "TRITON_INTERPRET=1 CUDA_VISIBLE_DEVICES= " + options.replay_command(failure["test"])
                plugin.rows.setdefault(key, Row(*key)).merge(result)
    except KeyboardInterrupt as err:
        partial.append(f"interrupted ({err})" if str(err) else "interrupted")
    except Exception as err:  # pytest itself failed (e.g. while reporting an interruption)
        partial.append(f"pytest stopped: {type(err).__name__}: {err}")
    if code == pytest.ExitCode.INTERRUPTED and not partial:
        partial.append("pytest stopped early (interrupted or a session error)")
    partial += [f"collection error: {e}" for e in plugin.collection_errors]
    rows = sorted(plugin.rows.values(), key=lambda r: (r.hotpath, r.check, r.device, r.implementation))
    if not rows:
        partial.append("no property ran")
    duration = time.monotonic() - started
    idle = {**plugin.workers.idle(), **idle_elsewhere}
    failed = [r for r in rows if r.status == "fail"]
    skipped = [r for r in rows if r.status == "skip"]
    removed = [r for r in rows if r.status == "removed"]
    if code not in (0, 5) and not failed and not partial:  # e.g. an error outside any property
        partial.append(f"pytest exited {int(code)} with no failed row: the gate's output above says why")
    verdict = "FAIL" if (failed or partial or code not in (0, 5) or (options.fail_on_skip and skipped)
                         or (options.fail_on_removed and removed)) else "PASS"
    stopped = any(p.startswith(("interrupted", "pytest stopped")) for p in partial)
    choice = asking.result() if asking and (asking.done() or not stopped) else []
    loaded = loading.result() if loading and (loading.done() or not stopped) else None
    plugin_problem = ([] if loaded is None or loaded["returned"] else
                      ["vLLM's load_general_plugins() did not return with this package installed: vLLM would not start"])
    verdict = "FAIL" if plugin_problem else verdict
    report = {"vllm_version": version, "suite": str(options.root), "profile": profile, "seed": options.seed,
              "runner": options.runner, "committed_fixtures": "left out" if options.generated_only else "replayed",
              "runner_choice": choice, "plugin_load": loaded,
              "command": "vllm-hotpaths gate " + " ".join(options.cli_args()),
              "environment": environment(options, version), "duration_s": round(duration, 1), "idle_s": idle,
              "devices": sorted({r.device for r in rows if r.status not in ("skip", "removed")}),
              "removed": removed_hotpaths(rows),
              "partial": bool(partial), "problems": partial + plugin_problem, "verdict": verdict,
              "results": [r.as_json() for r in rows],
              "runner_changes": runner_report.entries(rows, version, options.root, options.selected_hotpaths())}
    changes = runner_report.lines(report["runner_changes"], version, runner_report.left_out(options))
    write_reports(report, rows, report_dir, changes)
    print("\n" + table(rows))
    for line in (runner_choice.lines(version, choice) if choice else []) + (plugin_load.lines(loaded) if loaded else []):
        print(line)
    for line in (removed_lines(rows) + skip_lines(rows) + failure_lines(failed)
                 + [f"- partial report: {p}" for p in partial] + [f"- {p}" for p in plugin_problem]):
        print(line)
    print(f"\nreports: {report_dir / 'gate-report.json'}, {report_dir / 'gate-report.md'}")
    if record_to is not None:
        if version is None or impls or partial:
            print("gate: nothing recorded (" + ("no vLLM installed" if version is None else
                                                "--impl candidates are not the shipped fast paths" if impls
                                                else "the run is partial") + ")")
        else:
            for name, held in record(rows, version, profile, record_to, report["environment"]).items():
                print(f"recorded: {name} {'validated' if held else 'NOT validated'} for vLLM {version} "
                      f"({record_to})")
    if options.fail_on_skip and skipped:
        print(f"gate: {len(skipped)} row(s) skipped (--fail-on-skip)")
    if options.fail_on_removed and removed:
        print(f"gate: {len(removed)} row(s) check code this vLLM removed (--fail-on-removed)")
    print("\n" + "\n".join(changes))
    print(f"\nper hot path, on vLLM {version or 'not installed'}:\n" + "\n".join(hotpath_lines(rows)))
    counts = {s: sum(r.status == s for r in rows) for s in STATUSES}
    print(f"\n{verdict}: " + ", ".join(f"{n} {s}" for s, n in counts.items())
          + f" rows; {len(partial) + len(plugin_problem)} problem(s); {duration:.0f} s, workers idle: {idle_text(idle)}; seed {options.seed}")
    return 0 if verdict == "PASS" else 1


STATUSES = ("pass", "expected-divergence", "fail", "skip", "removed")  # a row's status, as the verdict counts them


def hotpath_lines(rows: list[Row]) -> list[str]:
    """Per hot path, what a bump needs to know: it holds (every row that ran held, conformance
    among them), its upstream code is gone, it needs work (the checks that failed, the first
    error), or nothing of it could run here."""
    lines = []
    for name in sorted({r.hotpath for r in rows}):
        mine = [r for r in rows if r.hotpath == name]
        failed = [r for r in mine if r.status == "fail"]
        ran = [r for r in mine if r.status not in ("skip", "removed")]
        if failed:
            first = next((f["message"].strip().splitlines() for r in failed for f in r.failures if f["message"].strip()), [""])
            lines.append(f"- {name}: needs work: {', '.join(sorted({f'{r.check} {r.device}' for r in failed}))} failed"
                         + (f" ({first[-1][:200]})" if first[-1] else ""))
        elif any(r.status == "removed" for r in mine):
            lines.append(f"- {name}: removed upstream (no patch to validate)")
        elif any(r.check == "conformance" for r in ran):
            lines.append(f"- {name}: holds")
        else:
            lines.append(f"- {name}: not checked here (every row that runs vLLM skipped)")
    return lines


def removed_hotpaths(rows: list[Row]) -> dict[str, str]:
    """Hot path -> what the installed vLLM runs in place of the code it removed (rows `removed`)."""
    return {r.hotpath: next(registry.removal(x) for x in r.reasons if registry.removal(x))
            for r in rows if r.status == "removed"}


def removed_lines(rows: list[Row]) -> list[str]:
    """One line per hot path whose upstream code this vLLM removed."""
    return [f"- removed: {text}" for text in removed_hotpaths(rows).values()]


def skip_lines(rows: list[Row]) -> list[str]:
    """Each skip reason once, with the rows it skipped."""
    by_reason: dict[str, list[str]] = {}
    for r in rows:
        if r.status == "skip":
            for reason in sorted(set(r.reasons)) or ["no reason given"]:
                by_reason.setdefault(reason, []).append(f"{r.hotpath} {r.check} {r.device} {r.implementation}")
    return [f"- skipped ({len(names)} rows: {', '.join(names)}): {reason}" for reason, names in by_reason.items()]


def failure_lines(failed: list[Row]) -> list[str]:
    lines = []
    for r in failed:
        for f in r.failures:
            lines.append(f"- FAILED {f['test']}")
            lines += [f"    {line}" for line in f["message"].splitlines()]
            if f.get("fixture"):
                lines.append(f"    fixture: {f['fixture']}")
            lines.append(f"    replay: {f['replay']}")
    return lines


def write_reports(report: dict, rows: list[Row], report_dir: Path, changes: list[str] = ()) -> None:
    """gate-report.json and gate-report.md; `changes`: the runner-change section's lines."""
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / "gate-report.json").write_text(json.dumps(report, indent=1) + "\n")
    env = report["environment"]
    excused = sorted({link for r in rows for link in r.excused})
    md = ["# vllm-hotpaths gate", "",
          f"**{report['verdict']}**" + (" (partial report)" if report["partial"] else ""), "",
          f"vLLM: {report['vllm_version'] or 'not installed'}; profile: {report['profile']}; "
          f"seed: {report['seed']}; devices: {', '.join(report['devices']) or 'none'}; "
          f"duration: {report['duration_s']:.0f} s (workers idle: {idle_text(report.get('idle_s', {}))})"
          + ("; committed fixtures left out (generated cases only)"
             if report.get("committed_fixtures") == "left out" else "") + "  ",
          f"{env['date']}, suite {report.get('suite')} at commit {env['commit']}; Python {env['python']}, torch {env['torch']}, "
          f"Triton {env['triton']}, Hypothesis {env['hypothesis']}"
          + (f"; {env['cuda_device']}" if env["cuda_device"] else ""), "",
          f"Command: `{report['command']}`", "", table(rows), ""]
    if report["runner_choice"]:
        md += [f"- {line.strip()}" for line in runner_choice.lines(report["vllm_version"], report["runner_choice"])]
    if report.get("plugin_load"):
        md += [f"- {line.strip()}" for line in plugin_load.lines(report["plugin_load"])]
    md += ["", "Per hot path:", *hotpath_lines(rows), ""]
    md += removed_lines(rows) + skip_lines(rows) + failure_lines([r for r in rows if r.status == "fail"])
    md += [f"- {'partial report: ' if report['partial'] else ''}{p}" for p in report["problems"]]
    md += [f"- expected divergence: {x}" for x in excused]
    if changes:
        md += ["", f"## {changes[0]}", *changes[1:]]
    (report_dir / "gate-report.md").write_text("\n".join(md) + "\n")
