"""The gate under bad input: a hanging candidate, a corrupt fixture, an unwritable folder, an
interruption, options that cannot work. It never hangs, crashes or loses its report."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

GATE = ("-m", "vllm_hotpaths.cli", "gate")


def report_of(folder):
    return json.loads((folder / "gate-report.json").read_text())


def corrupt_copy(root, tmp_path, case_type: str):
    """A copy of the committed penalties fixtures with one `case_type` file cut short (for
    VLLM_HOTPATHS_REGRESSIONS); returns the folder and that file."""
    folder = tmp_path / "regressions"
    shutil.copytree(root / "properties" / "regressions" / "penalties", folder / "penalties")
    corrupt = sorted((folder / "penalties").glob(f"{case_type}-*.json"))[0]
    corrupt.write_text('{"hotpath": "penalties", "case": {"vocab_size": 8,')
    return folder, corrupt


def test_a_hanging_candidate_and_a_corrupt_fixture_fail_their_rows_and_the_rest_runs(run_cli, pytestconfig, tmp_path):
    """The corrupt fixture is of a case type that only the bulk-repair properties replay (read
    while collecting, where it once stopped the gate with no report)."""
    folder, corrupt = corrupt_copy(pytestconfig.rootpath, tmp_path, "RepairCase")
    result = run_cli(*GATE, "--profile", "smoke", "--hotpath", "penalties", "--check", "equivalence", "--timeout", "15",
                     "--impl", "penalties=tests.candidates:Hangs", "--report-dir", str(tmp_path),
                     VLLM_HOTPATHS_REGRESSIONS=str(folder))
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    report = report_of(tmp_path)
    assert not report["partial"] and report["verdict"] == "FAIL"
    [hung] = [r for r in report["results"] if r["implementation"].endswith("Hangs@0.16.0")
              and r["check"] == "equivalence" and r["device"] == "cpu"]
    assert hung["status"] == "fail"
    assert any("timed out after 15 s" in f["message"] for f in hung["failures"]), hung
    messages = [f["message"] for r in report["results"] for f in r["failures"]]
    assert any(f"fixture {corrupt}: not readable JSON" in m for m in messages), messages
    assert any("passed" in r["outcomes"] for r in report["results"]), report["results"]
    assert result.stdout.rstrip().splitlines()[-1].startswith("FAIL: ")


def test_a_corrupt_fixture_is_one_line_naming_the_file(run_cli, pytestconfig, tmp_path):
    """Read while collecting and while running: both fail their tests with the same line."""
    folder, corrupt = corrupt_copy(pytestconfig.rootpath, tmp_path, "PenaltiesProgram")
    result = run_cli("-m", "pytest", "properties/test_penalties.py", "properties/test_equivalence.py",
                     "-k", "penalties and not cuda", "-p", "no:xdist", "-q", "--hypothesis-profile", "smoke",
                     VLLM_HOTPATHS_REGRESSIONS=str(folder))
    assert result.returncode == 1, result.stdout[-3000:]
    assert f"fixture {corrupt}: not readable JSON" in result.stdout, result.stdout[-3000:]
    assert "JSONDecodeError" not in result.stdout and "Traceback" not in result.stdout
    summary = result.stdout.splitlines()[-1]
    assert " passed" in summary and " error" not in summary, result.stdout[-500:]


def test_generated_only_leaves_the_committed_fixtures_out(run_cli, pytestconfig, tmp_path):
    """The corrupt fixture fails its tests wherever it is replayed (above); left out, it is never
    read, and the report says the fixtures were left out."""
    folder, corrupt = corrupt_copy(pytestconfig.rootpath, tmp_path, "PenaltiesProgram")
    result = run_cli(*GATE, "--profile", "smoke", "--hotpath", "penalties", "--check", "equivalence",
                     "--generated-only", "--report-dir", str(tmp_path), VLLM_HOTPATHS_REGRESSIONS=str(folder))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "committed fixtures left out" in result.stdout.splitlines()[0]
    assert str(corrupt) not in result.stdout
    report = report_of(tmp_path)
    assert report["committed_fixtures"] == "left out" and "--generated-only" in report["command"]


def test_a_committed_fixture_that_fails_is_named_as_such(run_cli, tmp_path):
    """The first run shrinks a new counterexample into the folder; the second fails on it."""
    args = ("-m", "pytest", "properties/test_equivalence.py", "-k", "cpu and penalties", "-p", "no:xdist",
            "-q", "--hypothesis-profile", "smoke", "--impl", "penalties=properties.quality.penalties:PadWithZero",
            "--fixture-dir", str(tmp_path))
    first = run_cli(*args, VLLM_HOTPATHS_REGRESSIONS=str(tmp_path))
    assert first.returncode == 1 and "new counterexample shrunk to" in first.stdout, first.stdout[-3000:]
    [written] = (tmp_path / "penalties").glob("*.json")
    second = run_cli(*args, VLLM_HOTPATHS_REGRESSIONS=str(tmp_path))
    assert second.returncode == 1
    assert "failed on the committed fixture" in second.stdout and written.name in second.stdout, second.stdout[-3000:]
    assert list((tmp_path / "penalties").glob("*.json")) == [written]


@pytest.mark.parametrize("args, message", [
    (("--report-dir", "/dev/null/reports"), "--report-dir /dev/null/reports: /dev/null is not a folder"),
    (("--fixture-dir", "/dev/null/fx"), "--fixture-dir /dev/null/fx: /dev/null is not a folder"),
    (("--profile", "dev", "--record"), "--record needs the ci profile or a larger one"),
    (("--profile", "ci", "--record", "--generated-only"), "--record needs the committed fixtures replayed"),
    (("--hotpath", "swap_states", "--impl", "penalties=vllm_hotpaths.penalties.fast:IncrementalPenalties"),
     "--impl penalties=vllm_hotpaths.penalties.fast:IncrementalPenalties: hot path 'penalties' is not selected"),
])
def test_impossible_options_are_refused_before_anything_runs(run_cli, tmp_path, args, message):
    started = time.monotonic()
    result = run_cli(*GATE, *(("--report-dir", str(tmp_path)) if "--report-dir" not in args else ()), *args)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert message in result.stderr, result.stderr
    assert "examples" not in result.stdout and time.monotonic() - started < 60


def test_a_cancelled_gate_writes_a_partial_report(pytestconfig, tmp_path):
    """SIGTERM, as a CI system cancels a job (Ctrl-C's SIGINT takes the same path where the
    process was not started with SIGINT ignored, as xdist's workers start theirs)."""
    root = pytestconfig.rootpath
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), str(root / "src")]))
    env.pop("PYTEST_XDIST_WORKER", None)
    gate = subprocess.Popen([sys.executable, *GATE, "--profile", "dev", "--hotpath", "penalties",
                             "--report-dir", str(tmp_path)], cwd=root, env=env, stdout=subprocess.PIPE, text=True)
    for line in gate.stdout:  # cancel once the first property has reported
        if " examples " in line:
            gate.send_signal(signal.SIGTERM)
            break
    out = gate.stdout.read()
    assert gate.wait(timeout=300) == 1, out[-3000:]
    report = report_of(tmp_path)
    assert report["partial"] and report["verdict"] == "FAIL", report["problems"]
    assert report["results"], "the rows that ran are kept"
    assert "partial report" in (tmp_path / "gate-report.md").read_text()


def test_version_and_option_defaults_are_shown(run_cli):
    from importlib.metadata import version

    assert run_cli("-m", "vllm_hotpaths.cli", "--version").stdout.strip() == f"vllm-hotpaths {version('vllm-hotpaths')}"
    help_text = " ".join(run_cli(*GATE, "--help").stdout.split())
    assert "Hypothesis profile: examples per property (smoke 10, dev 60, ci 150, gate 1500, soak 25000) (default: gate)" in help_text
    assert "(default: .)" in help_text  # --report-dir


def test_a_failing_exit_with_no_failed_row_says_so(pytestconfig, tmp_path, monkeypatch):
    """pytest can end with an error outside every property (a worker lost, a session hook): the
    FAIL then names that instead of a report whose rows all passed."""
    from vllm_hotpaths.testing import gate

    def pytest_main(args, plugins):
        row = plugins[0].rows.setdefault(("penalties", "equivalence", "cpu", "incremental"),
                                         gate.Row("penalties", "equivalence", "cpu", "incremental"))
        row.outcomes.append("passed")
        return pytest.ExitCode.INTERNAL_ERROR

    monkeypatch.setattr(gate.pytest, "main", pytest_main)
    monkeypatch.setattr(gate.runner_choice, "choices", lambda *a, **k: [])
    options = gate.GateOptions(profile="dev", root=pytestconfig.rootpath, report_dir=tmp_path,
                               hotpaths=["penalties"], seed=1)
    assert gate.run(options) == 1
    report = report_of(tmp_path)
    assert report["verdict"] == "FAIL"
    assert report["problems"] == ["pytest exited 3 with no failed row: the gate's output above says why"]
