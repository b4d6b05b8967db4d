"""The release matrix: which releases, which share a verdict, and an interrupted run."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_hotpaths import registry
from vllm_hotpaths.testing import fingerprint, matrix, releases

INDEX = ["0.15.1", "0.16.0", "0.17.0", "0.22.0", "0.22.1", "0.23.0", "0.33.0"]


def test_ranges_and_single_releases_are_read_from_the_index():
    assert matrix.parse_releases([], INDEX) == INDEX[1:]
    assert matrix.parse_releases(["0.17.0..0.22.1"], INDEX) == ["0.17.0", "0.22.0", "0.22.1"]
    assert matrix.parse_releases(["0.33.0", "..0.16.0"], INDEX) == ["0.16.0", "0.33.0"]
    with pytest.raises(releases.ReleaseError, match="older than 0.16.0"):
        matrix.parse_releases(["0.15.1..0.22.0"], INDEX)


def test_the_suite_segments_releases_where_its_own_code_names_a_version(pytestconfig):
    boundaries = matrix.suite_boundaries(pytestconfig.rootpath)
    assert set(boundaries) == set(registry.HOTPATHS)
    recovered = boundaries["recovered_tokens"]
    assert matrix.segment("0.17.1", recovered) == "0.17.0"  # the reciprocal reference's key
    assert matrix.segment("0.16.0", recovered) == "0.16.0"
    for name, versions in boundaries.items():
        assert set(registry.get(name).references) <= set(versions), name
        assert matrix.segment(versions[-1], versions) == versions[-1]
    # Another hot path's reference keys do not split this one's releases.
    assert "0.17.0" not in boundaries["penalties"] and "0.27.0" not in boundaries["penalties"]


def test_a_version_named_in_a_hot_paths_own_file_segments_that_hot_path_only(pytestconfig, tmp_path):
    import shutil

    for folder in matrix.PACKAGES.values():
        shutil.copytree(pytestconfig.rootpath / folder, tmp_path / folder,
                        ignore=shutil.ignore_patterns("__pycache__", "regressions"))
    before = matrix.boundaries_in(tmp_path)
    strategy = tmp_path / "strategies" / "recovered_tokens.py"
    strategy.write_text(strategy.read_text() + '\nPLANTED = "0.29.0"\n')
    after = matrix.boundaries_in(tmp_path)
    assert "0.29.0" in after["recovered_tokens"] and "0.29.0" not in before["recovered_tokens"]
    assert after["penalties"] == before["penalties"]
    assert matrix.segment("0.30.0", after["recovered_tokens"]) != matrix.segment("0.28.0", after["recovered_tokens"])


def test_an_interrupted_matrix_keeps_the_releases_that_finished(monkeypatch, tmp_path, pytestconfig, capsys):
    def release(self, version, own, environment):
        assert environment.result() == Path(version)  # made ahead
        if version == "0.22.1":
            raise KeyboardInterrupt
        result = {"version": version, "commit": self.commit, "profile": self.profile, "runner_choice": [],
                  "duration_s": 30.4, "hotpaths": {"penalties": {"status": "pass", "excused": [], "skip_reasons": [], "fixtures": [],
                                             "shared_with": None, "segment": "0.22.0", "fingerprint": "f"}}}
        self.store.mkdir(parents=True, exist_ok=True)
        self.path(version).write_text(json.dumps(result))
        return result

    monkeypatch.setattr(matrix.Matrix, "release", release)
    monkeypatch.setattr(matrix.Matrix, "own_rows", lambda self: {"hotpaths": {}})
    monkeypatch.setattr(releases, "environment", lambda version, root, log=None: Path(version))
    monkeypatch.setattr(releases, "index_releases", lambda: INDEX)
    monkeypatch.setattr(releases, "make_base", lambda root, base: None)
    from vllm_hotpaths import cli

    code = cli.main(["matrix", "0.22.0..0.22.1", "--hotpath", "penalties", "--out", str(tmp_path),
                     "--suite", str(pytestconfig.rootpath)])
    assert code == 1
    out = capsys.readouterr().out
    assert "interrupted: the releases that finished keep their results" in out
    assert (tmp_path / "matrix" / "vllm-0.22.0.json").exists()
    assert not (tmp_path / "matrix" / "vllm-0.22.1.json").exists()
    page = (tmp_path / "matrix.md").read_text()
    assert "| 0.22.0 | pass |" in page and "| 0.22.1 | not run |" in page and "1 of 2 releases" in page
    assert "the releases' own times sum to 30 s" in page


FAKE_GATE = """
import signal, sys, time
from pathlib import Path

report = Path(sys.argv[sys.argv.index("--report-dir") + 1])
report.mkdir(parents=True, exist_ok=True)


def stop(signum, frame):
    (report / "gate-report.json").write_text('{"partial": true}')
    sys.exit(130)


signal.signal(signal.SIGINT, stop)
with open(report.parent / "started", "a") as started:
    started.write(report.name + "\\n")
time.sleep(20)
"""


def test_a_cancelled_matrix_stops_its_running_gate_and_starts_no_other(monkeypatch, tmp_path, pytestconfig, capsys):
    import os
    import signal
    import threading
    import time

    python = tmp_path / "python"  # a gate that runs until it is interrupted, then writes its partial report
    python.write_text(f"#!{sys.executable}\n{FAKE_GATE}")
    python.chmod(0o755)
    monkeypatch.setattr(matrix.Matrix, "own_rows", lambda self: {"hotpaths": {}})
    monkeypatch.setattr(matrix.Matrix, "_shared", lambda self, *args: None)
    monkeypatch.setattr(fingerprint, "vllm_root_of", lambda python: python)
    monkeypatch.setattr(releases, "environment", lambda version, root, log=None: python)
    monkeypatch.setattr(releases, "index_releases", lambda: INDEX)
    monkeypatch.setattr(releases, "make_base", lambda root, base: None)
    store = tmp_path / "out" / "matrix"

    def cancel():  # as CI cancels a job, once the first gate runs (has written its name: the file
        started = store / "started"  # exists before its line is flushed, a SIGINT between stops that)
        while not (started.exists() and started.read_text()):
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=cancel, daemon=True).start()
    from vllm_hotpaths import cli

    began, handler = time.monotonic(), signal.getsignal(signal.SIGTERM)
    code = cli.main(["matrix", "0.22.0..0.22.1", "--hotpath", "penalties", "--out", str(tmp_path / "out"),
                     "--suite", str(pytestconfig.rootpath)])
    assert code == 1 and time.monotonic() - began < 15
    assert (store / "started").read_text() == "gate-vllm-0.22.0\n"  # 0.22.1's gate never started
    assert json.loads((store / "gate-vllm-0.22.0" / "gate-report.json").read_text()) == {"partial": True}
    assert not (store / "vllm-0.22.0.json").exists()
    assert f"a gate stopped, its partial report in {store / 'gate-vllm-0.22.0'}" in capsys.readouterr().out
    assert signal.getsignal(signal.SIGTERM) is handler


def test_a_matrix_of_a_version_that_is_not_a_release_says_so(monkeypatch, capsys, pytestconfig):
    monkeypatch.setattr(releases, "index_releases", lambda: INDEX)
    from vllm_hotpaths import cli

    assert cli.main(["matrix", "0.20.0", "--suite", str(pytestconfig.rootpath)]) == 2
    assert "matrix: vLLM 0.20.0 is not a release on the package index" in capsys.readouterr().err


def test_what_changes_between_two_releases_is_composed_from_consecutive_steps():
    from vllm_hotpaths.testing import release_changes

    known = ["0.16.0", "0.22.0", "0.25.0", "0.28.0", "0.33.0"]
    choices = {"0.22.0": {"Qwen2 dense": "v1"}, "0.25.0": {"Qwen2 dense": "mrv2"}}
    steps = dict(release_changes.between("0.16.0", "0.33.0", known, choices))
    assert list(steps) == ["0.22.0", "0.25.0", "0.28.0", "0.33.0"]
    assert "think_budget_mrv2 (mrv2): appears in 0.28.0" in steps["0.28.0"]
    assert "runner for Qwen2 dense: v1 -> mrv2" in steps["0.25.0"]
    assert any("pull/49613" in line for line in steps["0.28.0"])  # a ledger entry starting there
    assert any("pull/46243" in line for line in steps["0.25.0"])  # from 0.24.0, between the releases known
    assert any(line.startswith("recovered_tokens (v1): upstream's semantics change") for line in steps["0.22.0"])
    # what the plugin's patch does from a release on, between the releases known (0.31.0 in 0.33.0's step)
    assert any(line.startswith("sampler_mrv2: plugin: the fused pass draws murmur3 noise") for line in steps["0.33.0"])
    assert not any("plugin: the fused pass draws murmur3" in line for line in steps["0.28.0"])
    # from 0.22.0 to 0.25.0 is only what 0.25.0 brings
    assert dict(release_changes.between("0.22.0", "0.25.0", known, choices)) == {"0.25.0": steps["0.25.0"]}
    with pytest.raises(ValueError, match="name the older release first"):
        release_changes.between("0.33.0", "0.22.0", known)


def planted_release(installed: Path, folder: Path, change: tuple[str, str, str] | None) -> Path:
    """The installed vLLM as a tree of links, with one file changed (`change`: file, old, new)."""
    import shutil
    import subprocess

    tree = folder / "vllm"
    subprocess.run(["cp", "-rs", str(installed), str(tree)], check=True)
    if change is not None:
        relpath, old, new = change
        target = tree / relpath
        text = target.read_text()
        assert old in text, f"{relpath} of this vLLM has no {old!r}"
        target.unlink()
        target.write_text(text.replace(old, new))
    shutil.rmtree(tree / "__pycache__", ignore_errors=True)
    return tree


PRESENCE_TWICE = ("model_executor/layers/utils.py",
                  "logits -= presence_penalties.unsqueeze(dim=1) * output_mask",
                  "logits -= 2 * presence_penalties.unsqueeze(dim=1) * output_mask")


def test_a_change_planted_in_a_release_is_caught_by_its_gate_and_not_shared(pytestconfig, tmp_path):
    """The installed release with a planted change in the code the penalties run (the presence
    penalty applied twice) fails its conformance; the same release unchanged passes; and the
    fingerprint of the functions the unchanged run traced differs between the two, so the matrix
    would not let one share the other's verdict."""
    import importlib.util
    import os
    import subprocess
    import sys

    root = pytestconfig.rootpath
    spec = importlib.util.find_spec("vllm")
    if spec is None:
        pytest.skip("vLLM is not installed")
    installed = Path(spec.origin).parent
    runs = {}
    for name, change in (("clean", None), ("planted", PRESENCE_TWICE)):
        folder = tmp_path / name
        folder.mkdir()
        tree = planted_release(installed, folder, change)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(folder), str(root), str(root / "src")]))
        env.pop("PYTEST_XDIST_WORKER", None)
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "properties/test_conformance.py", "-q", "-p", "no:cacheprovider",
             "-m", "penalties", "-k", "cpu", "--hypothesis-profile", "smoke", "--no-shrink",
             "--fixture-dir", str(folder / "fixtures"),
             "-p", "vllm_hotpaths.testing.fingerprint", "--trace-vllm", str(folder / "trace")],
            cwd=root, env=env, capture_output=True, text=True, timeout=600)
        runs[name] = (result, tree)
    clean, planted = runs["clean"][0], runs["planted"][0]
    assert clean.returncode == 0, clean.stdout[-2000:]
    assert planted.returncode == 1 and "test_reference_matches_installed_vllm[penalties-cpu]" in planted.stdout
    assert str(tmp_path / "planted") in planted.stdout  # the planted tree is the vLLM that ran
    functions = fingerprint.traced(tmp_path / "clean" / "trace")["penalties"]
    assert ("model_executor/layers/utils.py", "apply_penalties") in functions
    assert fingerprint.fingerprint(runs["clean"][1], functions) != fingerprint.fingerprint(runs["planted"][1], functions)


def test_a_hot_path_missing_from_a_release_is_a_skip_whatever_its_own_rows():
    def row(check, status, own=False):
        return {"check": check, "status": status, "own": own}

    assert matrix.hotpath_status([row("equivalence", "pass", own=True), row("conformance", "skip")]) == "skip"
    assert matrix.hotpath_status([row("equivalence", "pass", own=True), row("conformance", "pass"),
                                  row("drift", "expected-divergence")]) == "expected-divergence"
    assert matrix.hotpath_status([row("equivalence", "fail", own=True), row("conformance", "pass")]) == "fail"
    # An equivalence row that runs vLLM (swap_states on vLLM's own InputBatch) is the release's.
    assert matrix.hotpath_status([row("equivalence", "fail"), row("conformance", "skip")]) == "fail"


def _row(kind, status, fixture=None):
    return {"hotpath": "penalties", "check": kind, "status": status, "device": "cpu",
            "implementation": "incremental", "excused": [], "skip_reasons": [], "fixture": fixture}


def test_the_rows_that_run_no_vllm_code_run_once_and_join_every_release(monkeypatch, tmp_path, pytestconfig):
    """The own rows are gated once, with the base environment's python (no vLLM there), and kept
    for a later run of the same commit; each release's gate runs only the rows that run vLLM, and
    its cell joins both (a failing own row fails every cell that is not a skip)."""
    gates = []

    def gate(self, version, python, hotpaths, rows):
        gates.append((version, python, tuple(hotpaths), rows))
        if rows == "own":
            return {"results": [_row("equivalence", "fail")], "seed": 1, "verdict": "FAIL", "vllm_version": None}, {}
        return {"results": [_row("conformance", "pass")], "runner_choice": [], "seed": 1, "verdict": "PASS"}, {}

    monkeypatch.setattr(matrix.Matrix, "_gate", gate)
    monkeypatch.setattr(releases, "environment", lambda version, root, log=None: Path(version))
    monkeypatch.setattr(fingerprint, "vllm_root_of", lambda python: python)
    monkeypatch.setattr(fingerprint, "fingerprint", lambda vllm_root, functions: f"code of {vllm_root}")
    monkeypatch.setattr(matrix, "suite_boundaries", lambda root: {"penalties": ["0.16.0", "0.22.0"]})
    monkeypatch.setattr(matrix.plugin_load, "check", lambda python: {"returned": True, "installed": {}, "log": []})
    table = matrix.Matrix(pytestconfig.rootpath, tmp_path, "ci", ["penalties"], None, None, log=lambda line: None)
    own = table.own_rows()
    assert gates == [("", pytestconfig.rootpath / ".venvs" / "base" / "bin" / "python", ("penalties",), "own")]
    first, second = table.release("0.22.0", own), table.release("0.22.1", own)
    assert [g[0::3] for g in gates[1:]] == [("0.22.0", "vllm"), ("0.22.1", "vllm")]  # other code: gated again
    for result in (first, second):
        cell = result["hotpaths"]["penalties"]
        assert cell["status"] == "fail" and not cell["held"]
        assert cell["checks"] == {"equivalence": "fail", "conformance": "pass"}
    assert table.own_rows() == own and len(gates) == 3  # kept
    table.commit = "another commit"
    table.own_rows()
    assert len(gates) == 4


@pytest.mark.parametrize("report, refusal", [
    ({"vllm_version": "0.22.0"}, "has vLLM 0.22.0 installed"),
    ({"vllm_version": None, "partial": True, "problems": ["interrupted"]}, "stopped early: interrupted")])
def test_own_rows_refuse_an_environment_with_vllm_and_a_partial_gate(monkeypatch, tmp_path, pytestconfig,
                                                                      report, refusal):
    monkeypatch.setattr(matrix.Matrix, "_gate", lambda *args: ({"results": [], "seed": 1, "verdict": "PASS",
                                                                **report}, {}))
    monkeypatch.setattr(matrix, "suite_boundaries", lambda root: {"penalties": ["0.16.0"]})
    table = matrix.Matrix(pytestconfig.rootpath, tmp_path, "ci", ["penalties"], None, None, log=lambda line: None)
    with pytest.raises(releases.ReleaseError, match=refusal):
        table.own_rows()
    assert not (table.store / "own-rows.json").exists()


def test_own_rows_of_hot_paths_that_have_none_are_empty_not_a_refusal(monkeypatch, tmp_path, pytestconfig):
    """Hot paths whose every row runs vLLM (the scheduler's) have no own row: the gate reports that
    no property ran, and the matrix goes on with empty own rows."""
    monkeypatch.setattr(matrix.Matrix, "_gate", lambda *args: ({
        "results": [], "seed": 1, "verdict": "FAIL", "vllm_version": None, "partial": True,
        "problems": ["no property ran"]}, {}))
    monkeypatch.setattr(matrix, "suite_boundaries", lambda root: {"allocate_slots": ["0.21.0"]})
    table = matrix.Matrix(pytestconfig.rootpath, tmp_path, "ci", ["allocate_slots"], None, None, log=lambda line: None)
    own = table.own_rows()
    assert own["verdict"] == "PASS" and own["hotpaths"] == {"allocate_slots": []}


def test_the_gate_splits_its_rows_into_own_and_vllm_by_their_markers(pytestconfig):
    """`--rows own` and `--rows vllm` select complementary sets of the gate's properties: the own
    ones are those marked neither needs_vllm nor needs_vllm_ops (swap_states on vLLM's InputBatch is
    an equivalence row that runs vLLM)."""
    from vllm_hotpaths.testing.gate import GateOptions

    def collected(rows):
        args = GateOptions(profile="smoke", root=pytestconfig.rootpath, report_dir=pytestconfig.rootpath,
                           rows=rows).pytest_args()
        args = [a for a in args if a not in ("-rfE", "--continue-on-collection-errors")]
        done = subprocess.run([sys.executable, "-m", "pytest", *args, "--collect-only", "-p", "no:xdist"],
                              capture_output=True, text=True, cwd=pytestconfig.rootpath)
        return {line for line in done.stdout.splitlines() if "::" in line}

    own, vllm, every = collected("own"), collected("vllm"), collected("all")
    assert own and vllm and not own & vllm and own | vllm == every
    assert any("test_candidate_on_vllm_input_batch" in n for n in vllm)
    assert not any("test_candidate_on_vllm_input_batch" in n or "conformance" in n for n in own)
    assert any("test_candidate_matches_reference" in n for n in own)


def test_a_recorded_matrix_validates_held_and_shared_hot_paths_and_drops_failed_ones(monkeypatch, tmp_path, pytestconfig):
    """--record: a release whose hot path held gets a CPU row (a shared verdict names the release
    it shares), one that failed loses its row, and a row a GPU run validated stays while the CPU
    verdict holds and the suite's files for the hot path are those it was recorded with; where
    they differ, it becomes a CPU row."""
    verdict = {"0.22.0": "pass", "0.23.0": "fail"}

    def gate(self, version, python, hotpaths, rows):
        fixture = str(self.store / f"gate-vllm-{version}" / "fixtures" / "case.json")
        return {"results": [_row("conformance", verdict[version], fixture)], "runner_choice": [], "seed": 1,
                "verdict": "pass"}, {}

    own = {"hotpaths": {"penalties": [{**_row("equivalence", "pass"), "own": True}]}}

    monkeypatch.setattr(matrix.Matrix, "_gate", gate)
    monkeypatch.setattr(releases, "environment", lambda version, root, log=None: Path(version))
    monkeypatch.setattr(fingerprint, "vllm_root_of", lambda python: python)
    monkeypatch.setattr(fingerprint, "fingerprint", lambda vllm_root, functions: "same code")
    monkeypatch.setattr(matrix.runner_choice, "choices", lambda python: [])
    monkeypatch.setattr(matrix, "suite_boundaries", lambda root: {"penalties": ["0.16.0", "0.22.0", "0.23.0"]})
    monkeypatch.setattr(matrix.plugin_load, "check", lambda python: {"returned": True, "installed": {}, "log": []})
    validated = tmp_path / "validated.json"
    gpu_row = {"profile": "ci", "devices": ["cpu", "cuda"], "implementations": ["incremental"], "commit": "abc1234"}
    for same in (True, False):
        validated.write_text(json.dumps({"penalties": {"0.22.0": gpu_row, "0.23.0": gpu_row}}))
        table = matrix.Matrix(pytestconfig.rootpath, tmp_path / str(same), "ci", ["penalties"], None, None,
                              log=lambda line: None, record_to=validated)
        monkeypatch.setattr(table, "_same_code", lambda name, commit: same and (name, commit) == ("penalties", "abc1234"))
        for version in ("0.22.0", "0.22.1", "0.23.0"):
            result = table.release(version, own)
        assert result["hotpaths"]["penalties"]["fixtures"] == [
            "matrix/gate-vllm-0.23.0/fixtures/case.json"]  # from OUT
        rows = json.loads(validated.read_text())["penalties"]
        if same:
            assert rows["0.22.0"] == gpu_row
        else:
            assert rows["0.22.0"]["devices"] == ["cpu"] and rows["0.22.0"]["commit"] == table.commit
        assert rows["0.22.1"]["devices"] == ["cpu"] and rows["0.22.1"]["shared_with"] == "0.22.0"
        assert rows["0.22.1"]["implementations"] == ["incremental"]
        assert "0.23.0" not in rows


def test_a_hot_path_whose_upstream_a_release_removed_is_removed_with_what_runs_instead():
    """A row that runs vLLM says its code is gone: the cell is `removed`, not a skip, also beside
    rows skipped for another reason, and the page names what the release runs in its place."""
    from vllm_hotpaths import registry

    removed = "Skipped: " + registry.REMOVED_MARK + registry.get("penalties").removed_in("0.34.0")
    rows = [{"check": "equivalence", "status": "pass", "own": True},
            {"check": "conformance", "status": "removed", "skip_reasons": [removed]}]
    assert matrix.hotpath_status(rows) == "removed"
    assert matrix.hotpath_status(rows + [{"check": "drift", "status": "skip"}]) == "removed"
    assert matrix.hotpath_status([rows[0], {"check": "drift", "status": "skip"}]) == "skip"
    text = matrix.cell_text({"status": "removed", "skip_reasons": ["Triton kernels on CPU tensors ...", removed]})
    assert text.startswith("removed: Model Runner V2's PenaltiesState runs in its place"), text
    assert "penalties_mrv2" in text, text


def test_the_step_to_0_34_names_the_removal_of_model_runner_v1_and_its_scheduler_change():
    from vllm_hotpaths.testing import release_changes

    steps = dict(release_changes.between("0.33.0", "0.35.0", ["0.33.0", "0.34.0", "0.35.0"]))
    removals = [line for line in steps["0.34.0"] if "removed upstream" in line]
    assert sorted(line.split(" ")[0] for line in removals) == sorted(
        name for name, hotpath in registry.HOTPATHS.items() if hotpath.runner == "v1")
    assert any(line.startswith("cached_request_data: CachedRequestData has no resumed_req_ids") for line in steps["0.34.0"])
    assert not any("removed upstream" in line for line in steps["0.35.0"])  # said once, at the release that did it


def test_changes_to_a_release_never_gated_say_so_with_the_command(monkeypatch, capsys, tmp_path, pytestconfig):
    monkeypatch.setattr(releases, "index_releases", lambda: ["0.33.0", "0.34.0", "0.35.0"])
    (tmp_path / "vllm-0.33.0.json").write_text(json.dumps({"version": "0.33.0", "runner_choice": []}))
    from vllm_hotpaths import cli

    assert cli.main(["changes", "0.33.0", "0.35.0", "--store", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "- 0.35.0: never gated by this suite" in out and "`vllm-hotpaths gate --vllm 0.35.0`" in out, out
    assert "- 0.34.0: never gated by this suite" in out
    assert "0.33.0: never gated" not in out
