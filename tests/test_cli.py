"""The gate and bench commands: exit codes, report shapes, fixtures on failure."""

import json
from pathlib import Path

from vllm_hotpaths import registry

STATUSES = {"pass", "fail", "skip", "expected-divergence", "removed"}


def check_report_shape(report):
    assert set(report) == {"vllm_version", "suite", "profile", "seed", "command", "environment", "duration_s",
                           "devices", "partial", "problems", "verdict", "results", "runner", "runner_choice",
                           "runner_changes", "committed_fixtures", "idle_s", "removed", "plugin_load"}
    assert report["committed_fixtures"] == "replayed"
    assert set(report["environment"]) == {"date", "commit", "python", "torch", "triton", "hypothesis",
                                          "vllm", "cuda_device"}
    assert isinstance(report["seed"], int) and report["verdict"] in ("PASS", "FAIL")
    for row in report["results"]:
        assert set(row) == {"hotpath", "runner", "check", "device", "implementation", "status", "examples",
                            "fixture", "outcomes", "excused", "failures", "skip_reasons", "excused_counts",
                            "counted_examples", "shown_fixtures", "seconds"}
        assert row["check"] in {"equivalence", "conformance", "drift", "semantic-change", "runner-change"}
        assert row["device"] in {"cpu", "cuda"}
        assert row["runner"] == registry.get(row["hotpath"]).runner
        assert row["status"] in STATUSES
        assert isinstance(row["examples"], int)


# What the whole gate's run needs of its hot paths: a v1 one with committed fixtures, a stateful
# one, and a Model Runner V2 one with runner-change rows. Every hot path's properties run in the
# suite itself; with every hot path this test took 419 s (`CI=true pytest -n auto --durations=0`, 2 cores).
SMOKE_GATE_HOTPATHS = ("penalties", "think_budget", "penalties_mrv2")


def test_gate_passes_and_writes_reports(run_cli, tmp_path):
    hotpaths = [arg for name in SMOKE_GATE_HOTPATHS for arg in ("--hotpath", name)]
    result = run_cli("-m", "vllm_hotpaths.cli", "gate", "--profile", "smoke", "--report-dir", str(tmp_path),
                     *hotpaths, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((tmp_path / "gate-report.json").read_text())
    check_report_shape(report)
    # which checkout's suite ran: the first line and the report name its folder
    root = str(Path(__file__).resolve().parents[1])
    assert report["suite"] == root
    assert result.stdout.splitlines()[0].startswith(f"vllm-hotpaths gate: suite {root}, profile smoke, ")
    rows = {(r["check"], r["device"]): r for r in report["results"]}
    assert rows[("equivalence", "cpu")]["status"] == "pass"
    assert rows[("equivalence", "cpu")]["examples"] > 0
    assert "| penalties" in (tmp_path / "gate-report.md").read_text()
    assert "| penalties" in result.stdout
    assert result.stdout.rstrip().splitlines()[-1].startswith("PASS: ")
    # each row's seconds (its tests' setup, call and teardown) and how long each worker sat idle
    ran = [r for r in report["results"] if r["status"] != "skip"]
    assert all(r["seconds"] >= 0 for r in ran) and 0 < sum(r["seconds"] for r in ran) <= report["duration_s"]
    assert set(report["idle_s"]) == {"main"} and 0 <= report["idle_s"]["main"] < report["duration_s"]
    assert f"workers idle: main {report['idle_s']['main']:.0f} s;" in result.stdout.rstrip().splitlines()[-1]
    assert "| examples | seconds |" in (tmp_path / "gate-report.md").read_text()
    # the runner-change section closes the output, before the verdict
    title = f"What changes for your sampled tokens when vLLM {report['vllm_version'] or '(not installed)'} runs"
    assert title in result.stdout.split("reports: ")[-1], result.stdout[-3000:]
    assert {r["hotpath"] for r in report["results"]} == set(SMOKE_GATE_HOTPATHS)
    assert report["runner_changes"] and all(set(item) >= {"hotpath", "summary", "link", "devices", "counts",
                                                          "fixture"} for item in report["runner_changes"])


def test_gate_runs_only_the_named_hot_paths_of_the_named_runner(run_cli, tmp_path):
    """`--hotpath` and `--runner` select together (logits_copy is Model Runner V2's, so `--runner v1`
    leaves it out); rows carry their runner, and the report says which runner the installed vLLM's
    own engine configuration picks (0.22: MRv2 for Qwen3 dense only)."""
    from vllm_hotpaths import vllm_env

    result = run_cli("-m", "vllm_hotpaths.cli", "gate", "--profile", "smoke", "--hotpath", "swap_states",
                     "--hotpath", "logits_copy", "--runner", "v1", "--check", "equivalence",
                     "--report-dir", str(tmp_path))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((tmp_path / "gate-report.json").read_text())
    check_report_shape(report)
    assert {r["hotpath"] for r in report["results"]} == {"swap_states"}
    assert any(r["check"] == "equivalence" and r["status"] == "pass" for r in report["results"])
    assert report["runner"] == "v1" and "--runner v1" in report["command"]
    if vllm_env.installed_version():
        assert "- not checked: --runner v1 leaves out every Model Runner V2 hot path" in result.stdout
    if vllm_env.installed_version() == "0.22.0":
        assert {a["configuration"]: a["runner"] for a in report["runner_choice"]} == {
            "Qwen3 dense": "mrv2", "Qwen2 dense": "v1", "Qwen3 dense, ngram speculative decoding": "v1"}
        assert "  Qwen3 dense: mrv2" in result.stdout, result.stdout[-3000:]


def test_runner_selection_and_its_refusal():
    from vllm_hotpaths.testing.gate import GateOptions

    options = GateOptions(profile="ci", root=Path("."), report_dir=Path("."), runner="mrv2")
    assert options.selected_hotpaths() == [n for n, hp in registry.HOTPATHS.items() if hp.runner in ("mrv2", "any")]
    assert "cached_request_data" in options.selected_hotpaths()  # the scheduler: both runners call it
    assert "logits_copy" in options.selected_hotpaths() and "penalties" not in options.selected_hotpaths()
    assert ("(logits_copy or penalties_mrv2 or think_budget_mrv2 or rejection_mrv2 or sampler_mrv2 or cached_request_data"
            " or allocate_slots or new_block_ids or request_output)" in " ".join(options.pytest_args()))
    only_v1 = GateOptions(profile="ci", root=Path("."), report_dir=Path("."), runner="mrv2", hotpaths=["penalties"])
    assert only_v1.problems() == ["--runner mrv2: none of the hot paths penalties is called by that runner"]


def test_check_selection_and_its_refusal_with_record():
    from vllm_hotpaths.testing.gate import GateOptions

    options = GateOptions(profile="ci", root=Path("."), report_dir=Path("."), checks=["conformance", "runner-change"])
    assert "check and (conformance or runner_change)" in " ".join(options.pytest_args())
    args = options.cli_args()
    assert [args[i + 1] for i, a in enumerate(args) if a == "--check"] == ["conformance", "runner-change"]
    recording = GateOptions(profile="ci", root=Path("."), report_dir=Path("."), checks=["conformance"], record=True)
    assert recording.problems() == ["--record needs every check (--check conformance leaves some out)"]


def test_gate_fails_on_a_wrong_candidate_and_names_the_fixture(run_cli, tmp_path):
    result = run_cli("-m", "vllm_hotpaths.cli", "gate", "--profile", "smoke", "--report-dir", str(tmp_path),
                     "--hotpath", "penalties", "--impl", "penalties=properties.quality.penalties:PadWithZero",
                     "--fixture-dir", str(tmp_path / "fx"))
    assert result.returncode == 1, result.stdout[-3000:]
    report = json.loads((tmp_path / "gate-report.json").read_text())
    check_report_shape(report)
    failed = [r for r in report["results"] if r["status"] == "fail"]
    assert failed and all("PadWithZero@0.16.0" in r["implementation"] for r in failed)
    # a committed fixture that catches it is named; a new counterexample goes to --fixture-dir
    assert failed[0]["fixture"].startswith((str(tmp_path / "fx"), "properties/regressions/penalties/"))
    failure = failed[0]["failures"][0]
    assert failure["test"] in failure["replay"] and f"--hypothesis-seed={report['seed']}" in failure["replay"]
    assert failure["message"] and result.stdout.rstrip().splitlines()[-1].startswith("FAIL: ")


def test_gate_require_cuda_fails_without_a_gpu(run_cli, tmp_path):
    import torch

    result = run_cli("-m", "vllm_hotpaths.cli", "gate", "--profile", "smoke", "--require-cuda",
                     "--hotpath", "swap_states", "--check", "equivalence", "--report-dir", str(tmp_path))
    assert (result.returncode == 0) == torch.cuda.is_available(), result.stdout[-3000:]


def test_bench_records_and_plot(run_cli, tmp_path):
    out, png = tmp_path / "bench.json", tmp_path / "bench.png"
    result = run_cli("-m", "vllm_hotpaths.cli", "bench", "--device", "cpu", "--quick",
                     "--json", str(out), "--plot", str(png))
    assert result.returncode == 0, result.stderr[-3000:]
    bench = json.loads(out.read_text())
    assert bench["command"].startswith("vllm-hotpaths bench --device cpu --quick")
    records = bench["records"]
    assert records
    for r in records:
        assert set(r) == {"hotpath", "case", "size", "device", "reference_s", "fast_s", "ratio"}
        assert r["ratio"] == r["reference_s"] / r["fast_s"]
    assert png.read_bytes()[:4] == b"\x89PNG"
    pages = run_cli("-m", "vllm_hotpaths.cli", "results", "--bench", str(out), "--out", str(tmp_path / "results"))
    assert pages.returncode == 0, pages.stderr[-3000:]
    page = (tmp_path / "results" / "bench-bench.md").read_text()
    assert bench["command"] in page and f"{records[0]['ratio']:.2f}x" in page
    assert " ms |" not in page  # CPU times only as ratios


def test_unknown_candidate_is_a_clear_usage_error(run_cli):
    result = run_cli("-m", "pytest", "properties/test_penalties.py", "-q",
                     "--impl", "penalties=no_such_module:Thing")
    assert result.returncode == 4
    assert "--impl penalties=no_such_module:Thing" in result.stderr + result.stdout


def test_candidate_missing_a_method_is_a_clear_usage_error(run_cli):
    result = run_cli("-m", "pytest", "properties/test_penalties.py", "-q",
                     "--impl", "penalties=vllm_hotpaths.tracked_list:TrackedTokenList")
    assert result.returncode == 4
    assert "lacks output_tokens, apply_all_penalties" in result.stderr + result.stdout


def test_gate_record_keeps_only_hot_paths_whose_checks_all_held(tmp_path):
    from vllm_hotpaths.testing.gate import Row, record

    def row(hotpath, check, device, status):
        outcomes = {"pass": ["passed"], "fail": ["failed"], "skip": ["skipped"]}[status]
        return Row(hotpath, check, device, "fast" if check == "equivalence" else "reference@1.0.0", outcomes)

    path = tmp_path / "validated.json"
    path.write_text(json.dumps({"b": {"1.0.0": {"profile": "gate"}, "0.9.0": {"profile": "gate"}}}))
    rows = [row("a", "conformance", "cpu", "pass"), row("a", "equivalence", "cpu", "pass"),
            row("a", "equivalence", "cuda", "skip"),
            row("b", "conformance", "cpu", "pass"), row("b", "equivalence", "cpu", "fail"),
            row("c", "conformance", "cpu", "skip"), row("c", "equivalence", "cpu", "pass"),
            row("d", "equivalence", "cpu", "pass")]
    import torch

    verdicts = record(rows, "1.0.0", "ci", path, {"date": "2026-01-02T03:04:05+00:00", "commit": "abc1234"})
    on_gpu = torch.cuda.is_available()  # a cuda row skipped on a GPU machine does not validate
    assert verdicts == {"a": not on_gpu, "b": False, "c": False, "d": False}
    validated = json.loads(path.read_text())
    assert validated["b"] == {"0.9.0": {"profile": "gate"}}  # the failed version's entry is gone
    if not on_gpu:
        assert validated["a"] == {"1.0.0": {"profile": "ci", "devices": ["cpu"], "implementations": ["fast"],
                                            "date": "2026-01-02T03:04:05+00:00", "commit": "abc1234"}}


def test_gate_writes_junit_and_fails_on_a_skip_when_asked(run_cli, tmp_path):
    import torch

    result = run_cli("-m", "vllm_hotpaths.cli", "gate", "--profile", "smoke", "--hotpath", "swap_states",
                     "--check", "equivalence", "--report-dir", str(tmp_path), "--junit-xml", str(tmp_path / "junit.xml"),
                     "--fail-on-skip")
    assert "<testsuite" in (tmp_path / "junit.xml").read_text()
    report = json.loads((tmp_path / "gate-report.json").read_text())
    skipped = [r for r in report["results"] if r["status"] == "skip"]
    assert (result.returncode == 1) == bool(skipped), result.stdout[-3000:]
    if not torch.cuda.is_available():  # the cuda rows skip here
        assert skipped and "skipped (--fail-on-skip)" in result.stdout


def test_impl_imports_from_the_folder_it_is_run_in(pytestconfig, tmp_path):
    """`--impl my_patch:X` finds my_patch.py in the current folder, outside the checkout (through
    a console script, whose sys.path does not start with the current folder as `python -m` does)."""
    import os
    import subprocess
    import sys

    (tmp_path / "my_patch.py").write_text(
        "from vllm_hotpaths.penalties.fast import IncrementalPenalties as MyPenalties\n")
    root = pytestconfig.rootpath
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_XDIST_WORKER")}
    result = subprocess.run(
        [str(Path(sys.executable).with_name("pytest")), str(root / "properties" / "test_equivalence.py"), "-q", "-p", "no:cacheprovider",
         f"--rootdir={root}", "-k", "penalties and cpu", "--impl", "penalties=my_patch:MyPenalties",
         "--hypothesis-profile", "smoke"],  # what is checked is where the class is found, not its law
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "1 passed" in result.stdout


def test_a_version_before_mrv2s_thinking_budget_says_what_vllm_does_instead():
    """The skip rows of think_budget_mrv2 name what 0.22 (refused) and 0.25 (warned, requests
    refused) do with a budget on Model Runner V2."""
    from vllm_hotpaths import registry

    hotpath = registry.get("think_budget_mrv2")
    assert not hotpath.exists_in("0.25.9") and hotpath.exists_in("0.28.0")
    assert "fails at start-up" in hotpath.absence("0.22.0") and "warns" not in hotpath.absence("0.22.0")
    assert "warns at start-up" in hotpath.absence("0.25.0") and "refuses each request" in hotpath.absence("0.25.0")
    assert hotpath.absence("0.16.0").startswith("vLLM 0.16.0: think_budget_mrv2 is checked from 0.28.0: ")
    assert "opt-in" in hotpath.absence("0.21.0") and "opt-in" not in hotpath.absence("0.22.0")


def test_model_runner_v2_before_022_says_what_runs_there():
    """Before 0.22 Model Runner V2 is opt-in: penalties_mrv2 is checked there (the same arithmetic);
    the skip rows of the others say what the opt-in runner does instead."""
    assert registry.get("penalties_mrv2").exists_in("0.16.0")
    rejection, logits = registry.get("rejection_mrv2"), registry.get("logits_copy")
    assert "strictly" in rejection.absence("0.17.1") and "probabilistic" in rejection.absence("0.18.0")
    assert "no apply_sampling_params" in logits.absence("0.17.1") and "no reference yet" in logits.absence("0.21.0")


def test_a_release_before_the_thinking_budget_holder_says_what_it_has_instead():
    hotpath = registry.get("think_budget")
    assert not hotpath.exists_in("0.20.2") and hotpath.exists_in("0.21.0")
    assert "no thinking budget" in hotpath.absence("0.18.1")
    assert "logits processor" in hotpath.absence("0.19.0") and "logits processor" in hotpath.absence("0.20.2")


def test_a_row_whose_upstream_the_release_removed_is_counted_apart_and_never_recorded(tmp_path):
    """A hot path whose upstream code the installed vLLM removed: its vLLM rows are `removed` (not
    a skip, not a failure), the gate names what runs instead, and `--record` validates nothing."""
    from vllm_hotpaths.testing.gate import Row, record, removed_lines

    said = "Skipped: " + registry.REMOVED_MARK + registry.get("swap_states").removed_in("0.34.0")
    rows = [Row("swap_states", "conformance", "cpu", "reference@0.27.0", ["skipped", "skipped"],
                reasons=["Skipped: vLLM's compiled op cannot be loaded", said]),
            Row("swap_states", "equivalence", "cpu", "memmove@0.27.0", ["passed"]),
            Row("penalties", "conformance", "cpu", "reference@0.16.0", ["skipped"], reasons=["no CUDA device"])]
    assert [r.status for r in rows] == ["removed", "pass", "skip"]
    assert removed_lines(rows) == ["- removed: " + registry.get("swap_states").removed_in("0.34.0")]
    path = tmp_path / "validated.json"
    path.write_text(json.dumps({"swap_states": {"0.34.0": {"profile": "ci"}}}))
    assert record(rows[:2], "0.34.0", "ci", path)["swap_states"] is False
    assert json.loads(path.read_text())["swap_states"] == {}


def test_every_v1_hot_path_is_removed_from_0_34_with_what_runs_instead():
    for name, hotpath in registry.HOTPATHS.items():
        if hotpath.runner == "v1":
            assert hotpath.removed_in("0.33.0") is None
            text = hotpath.removed_in("0.34.0")
            assert text.startswith(f"{name}: vLLM 0.34.0 removed {hotpath.upstream} with Model Runner v1; "), text
            assert hotpath.removed_in("0.35.1") == text
        else:
            assert hotpath.removed_in("0.34.0") is None, name


def test_the_gate_says_per_hot_path_what_holds_and_what_needs_work():
    from vllm_hotpaths.testing.gate import Row, hotpath_lines

    gone = registry.REMOVED_MARK + registry.get("swap_states").removed_in("0.34.0")
    broken = Row("rejection_mrv2", "conformance", "cpu", "reference@0.31.0", ["failed"])
    broken.failures.append({"message": "Traceback ...\nAttributeError: 'Tensor' object has no attribute 'row_mapping'"})
    rows = [broken, Row("rejection_mrv2", "drift", "cpu", "reference@0.28.0", ["passed"]),
            Row("swap_states", "conformance", "cpu", "reference@0.27.0", ["skipped"], reasons=[gone]),
            Row("swap_states", "equivalence", "cpu", "memmove@0.27.0", ["passed"]),
            Row("sampler_mrv2", "conformance", "cpu", "reference@0.31.0", ["passed"]),
            Row("logits_copy", "conformance", "cpu", "reference@0.28.0", ["skipped"], reasons=["no CUDA device"])]
    assert hotpath_lines(rows) == [
        "- logits_copy: not checked here (every row that runs vLLM skipped)",
        "- rejection_mrv2: needs work: conformance cpu failed (AttributeError: 'Tensor' object has no attribute "
        "'row_mapping')",
        "- sampler_mrv2: holds",
        "- swap_states: removed upstream (no patch to validate)",
    ]
