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
version, in its own environment made from the recipe in `ci/`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from vllm_hotpaths import registry, vllm_env


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

    @property
    def status(self) -> str:
        if "failed" in self.outcomes:
            return "fail"
        if all(o == "skipped" for o in self.outcomes):
            return "skip"
        return "expected-divergence" if self.excused else "pass"

    def as_json(self) -> dict:
        return {"hotpath": self.hotpath, "check": self.check, "device": self.device,
                "implementation": self.implementation, "status": self.status,
                "examples": self.examples, "fixture": self.fixture,
                "outcomes": self.outcomes, "excused": sorted(self.excused)}

    def merge(self, other: dict) -> None:
        """Add a row of another gate process's report (same key)."""
        self.outcomes += other["outcomes"]
        self.examples += other["examples"]
        self.excused.update(other["excused"])
        self.fixture = self.fixture or other["fixture"]


class GatePlugin:
    """Collects property reports (works with xdist: reports carry user_properties)."""

    def __init__(self) -> None:
        self.rows: dict[tuple, Row] = {}
        self.terminal = None

    def pytest_configure(self, config):
        self.terminal = config.pluginmanager.get_plugin("terminalreporter")

    def _say(self, line: str) -> None:
        if self.terminal is not None:
            self.terminal.ensure_newline()
            self.terminal.write_line(line, flush=True)
        else:
            print(line, flush=True)

    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(self, report, config):
        if "hotpath" in dict(report.user_properties) and report.when == "call":
            return report.outcome, "", report.outcome.upper()  # the gate prints its own line
        return None

    def pytest_runtest_logreport(self, report):
        props = dict(report.user_properties)
        if "hotpath" not in props or (report.when != "call" and report.outcome == "passed"):
            return
        key = (props["hotpath"], props["check"], props["device"], props["implementation"])
        row = self.rows.setdefault(key, Row(*key))
        row.outcomes.append(report.outcome)
        row.examples += int(props.get("examples", 0))
        row.excused.update(props.get("excused", []))
        if props.get("fixture") and row.fixture is None:
            row.fixture = props["fixture"]
        if report.outcome == "skipped" and isinstance(report.longrepr, tuple):
            row.reasons.append(report.longrepr[2])
        name = report.nodeid.split("::")[-1]
        self._say(f"  {report.outcome:8} {props['hotpath']:14} {props['check']:12} "
                  f"{props['device']:5} {props['examples']:>6} examples  {name}")


def table(rows: list[Row]) -> str:
    header = ("hot path", "check", "device", "implementation", "status", "examples", "fixture")
    lines = [header] + [
        (r.hotpath, r.check, r.device, r.implementation, r.status, str(r.examples), r.fixture or "")
        for r in rows
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    fmt = lambda line: "| " + " | ".join(c.ljust(w) for c, w in zip(line, widths)) + " |"  # noqa: E731
    return "\n".join([fmt(lines[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
                     + [fmt(line) for line in lines[1:]])


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

    def pytest_args(self, interpreted: bool = False) -> list[str]:
        """The properties of the chosen hot paths (markers `check` and the hot paths' names);
        `interpreted`: only those marked `triton`, for a TRITON_INTERPRET=1 process."""
        selection = "check" + (" and triton" if interpreted else "")
        if self.hotpaths:
            selection += " and (" + " or ".join(self.hotpaths) + ")"
        args = [str(self.root / "properties"), "-q", "-p", "no:cacheprovider", "-m", selection,
                "--hypothesis-profile", self.profile, f"--rootdir={self.root}", "--no-header", "-rfE"]
        args += ["--require-cuda"] if self.require_cuda else []
        args += [a for impl in self.impls for a in ("--impl", impl)]
        args += ["-n", self.workers] if self.workers else []
        args += ["--fixture-dir", str(self.fixture_dir)] if self.fixture_dir else []
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
        out += ["--junit-xml", str(self.junit_xml)] if self.junit_xml else []
        out += [a for impl in self.impls for a in ("--impl", impl)]
        out += [a for name in self.hotpaths for a in ("--hotpath", name)]
        out += ["-n", self.workers] if self.workers else []
        out += ["--fixture-dir", str(self.fixture_dir)] if self.fixture_dir else []
        return out


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
            self.path.write_text(json.dumps([r.as_json() for r in self.rows.values()], indent=1) + "\n")


def _interpreted_run(options: GateOptions):
    """(exit code, rows) of the run of the Triton cases on CPU tensors in Triton's interpreter (a
    second pytest process); None where this process already interprets (no GPU) or no chosen hot
    path has Triton kernels."""
    import torch

    names = [n for n in (options.hotpaths or registry.HOTPATHS) if registry.get(n).triton]
    if not names or os.environ.get("TRITON_INTERPRET") == "1" or not torch.cuda.is_available():
        return None
    with tempfile.TemporaryDirectory() as scratch:
        rows_file = Path(scratch) / "rows.json"
        cmd = [sys.executable, "-m", "pytest", *options.pytest_args(interpreted=True),
               "-p", "vllm_hotpaths.testing.gate", "--gate-rows", str(rows_file)]
        print("gate: the Triton cases on CPU tensors, in Triton's interpreter:\n  TRITON_INTERPRET=1 "
              + " ".join(cmd), flush=True)
        code = subprocess.run(cmd, env=dict(os.environ, TRITON_INTERPRET="1")).returncode
        rows = json.loads(rows_file.read_text()) if rows_file.exists() else []
    return (code if rows else 2), rows


def record(rows: list[Row], version: str, profile: str, path: Path) -> dict[str, bool]:
    """Update the validated file from this run's rows; returns hot path -> recorded."""
    import torch

    from vllm_hotpaths.plugin import load_validated

    present = {"cpu"} | ({"cuda"} if torch.cuda.is_available() else set())
    validated = load_validated(path)
    verdicts = {}
    for name in sorted({r.hotpath for r in rows}):
        mine = [r for r in rows if r.hotpath == name]
        ran = [r for r in mine if r.status != "skip"]
        held = (all(r.status in ("pass", "expected-divergence") for r in ran)
                and all(r.device not in present for r in mine if r.status == "skip")
                and any(r.check == "conformance" for r in ran))
        entries = validated.setdefault(name, {})
        if held:
            entries[version] = {"profile": profile, "devices": sorted({r.device for r in ran}),
                                "implementations": sorted({r.implementation for r in ran if r.check == "equivalence"})}
        else:
            entries.pop(version, None)
        verdicts[name] = held
    path.write_text(json.dumps(validated, indent=1, sort_keys=True) + "\n")
    return verdicts


def in_environment(version: str, options: GateOptions) -> int:
    """Run the same gate in `.venvs/vllm-<version>` (made or reused by ci/install.sh from
    ci/vllm-<version>-cpu.txt), with --require-vllm."""
    root = options.root
    recipes = sorted(p.name[len("vllm-"):-len("-cpu.txt")] for p in (root / "ci").glob("vllm-*-cpu.txt"))
    if version not in recipes:
        print(f"gate: no recipe ci/vllm-{version}-cpu.txt (recipes: {', '.join(recipes)})")
        return 2
    venv = root / ".venvs" / f"vllm-{version}"
    print(f"gate: environment {venv} for vLLM {version}", flush=True)
    env = dict(os.environ, VENV=str(venv), VLLM_VERSION=version)
    if subprocess.run(["bash", str(root / "ci" / "install.sh")], cwd=root, env=env).returncode:
        print(f"gate: installing vLLM {version} into {venv} failed")
        return 2
    cmd = [str(venv / "bin" / "python"), "-m", "vllm_hotpaths.cli", "gate", *options.cli_args(), "--require-vllm"]
    return subprocess.run(cmd, cwd=root).returncode


def run(options: GateOptions, record_to: Path | None = None) -> int:
    profile, report_dir, impls = options.profile, options.report_dir, options.impls
    version = vllm_env.installed_version()
    print(f"vllm-hotpaths gate: profile {profile}, vLLM {version or 'not installed'}", flush=True)
    if options.require_vllm and version is None:
        print("gate: vLLM is not installed, so conformance cannot be checked (--require-vllm)")
        return 2
    plugin = GatePlugin()
    code = pytest.main(options.pytest_args(), plugins=[plugin])
    interpreted = _interpreted_run(options)
    if interpreted is not None:
        child_code, child_rows = interpreted
        code = code if child_code in (0, 5) else child_code
        for result in child_rows:
            key = tuple(result[k] for k in ("hotpath", "check", "device", "implementation"))
            plugin.rows.setdefault(key, Row(*key)).merge(result)
    rows = sorted(plugin.rows.values(), key=lambda r: (r.hotpath, r.check, r.device, r.implementation))
    if not rows:
        print("gate: no property ran")
        return 2
    report = {"vllm_version": version, "profile": profile, "command": "vllm-hotpaths gate " + " ".join(options.cli_args()),
              "results": [r.as_json() for r in rows]}
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / "gate-report.json").write_text(json.dumps(report, indent=1) + "\n")
    rendered = table(rows)
    notes = [f"- {r.hotpath} {r.check} {r.device}: skipped ({'; '.join(sorted(set(r.reasons)))})"
             for r in rows if r.status == "skip"]
    excused = sorted({link for r in rows for link in r.excused})
    md = ["# vllm-hotpaths gate", "", f"vLLM: {version or 'not installed'}; profile: {profile}", "",
          rendered, ""] + notes + ([""] + [f"- expected divergence: {x}" for x in excused] if excused else [])
    (report_dir / "gate-report.md").write_text("\n".join(md) + "\n")
    print("\n" + rendered)
    for line in notes:
        print(line)
    print(f"\nreports: {report_dir / 'gate-report.json'}, {report_dir / 'gate-report.md'}")
    if record_to is not None:
        if version is None or impls:
            print("gate: nothing recorded (" + ("no vLLM installed" if version is None else
                                                "--impl candidates are not the shipped fast paths") + ")")
        else:
            for name, held in record(rows, version, profile, record_to).items():
                print(f"recorded: {name} {'validated' if held else 'NOT validated'} for vLLM {version} "
                      f"({record_to})")
    failed = any(r.status == "fail" for r in rows)
    skipped = [r for r in rows if r.status == "skip"]
    if options.fail_on_skip and skipped:
        print(f"gate: {len(skipped)} row(s) skipped (--fail-on-skip)")
        return 1
    return 1 if failed or code not in (0, 5) else 0
