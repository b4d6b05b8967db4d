"""cuda_rows: a release's CPU row gets cuda only from cuda rows that held, at the same checks."""

import json
import subprocess

import pytest

from vllm_hotpaths.testing import cuda_rows


def row(hotpath, device, implementation, status="pass", check="equivalence"):
    return {"hotpath": hotpath, "check": check, "device": device, "implementation": implementation, "status": status}


def report(*rows, commit="bbb", profile="ci"):
    return {"profile": profile, "devices": ["cpu", "cuda"], "results": list(rows),
            "environment": {"commit": commit, "cuda_device": "NVIDIA H200"}}


GPU_RUN = report(
    row("swap_states", "cuda", "memmove@0.16.0"), row("swap_states", "cuda", "memmove@0.27.0"),
    row("swap_states", "cpu", "memmove@0.16.0"), row("swap_states", "cpu", "plugin patch"),
    row("penalties", "cuda", "fused kernels"), row("penalties", "cuda", "incremental", status="skip"),
    row("penalties", "cpu", "bulk placeholder repair"),
)


def validated():
    cpu = {"profile": "ci", "devices": ["cpu"], "commit": "aaa"}
    return {"swap_states": {"0.23.0": {**cpu, "implementations": ["memmove@0.16.0", "memmove@0.27.0", "plugin patch"]},
                            "0.24.0": {**cpu, "implementations": ["memmove@0.16.0", "memmove@0.19.0", "plugin patch"]},
                            "0.25.0": {**cpu, "profile": "dev", "implementations": ["memmove@0.16.0"]},
                            "0.26.0": {**cpu, "commit": "ccc", "implementations": ["memmove@0.16.0"]}},
            "penalties": {"0.23.0": {**cpu, "implementations": ["fused kernels", "bulk placeholder repair"]}}}


def test_only_rows_whose_fast_paths_all_held_on_cuda_at_the_same_checks_get_cuda():
    lines = []
    folded = cuda_rows.fold(GPU_RUN, validated(), lambda name, a, b: a == "aaa" and b == "bbb", log=lines.append)
    swap = folded["swap_states"]
    assert swap["0.23.0"]["devices"] == ["cpu", "cuda"]  # the plugin patch has no cuda form
    assert swap["0.23.0"]["cuda"] == {"commit": "bbb", "device": "NVIDIA H200",
                                      "implementations": ["memmove@0.16.0", "memmove@0.27.0"]}
    assert swap["0.24.0"]["devices"] == ["cpu"]  # memmove@0.19.0 had no cuda row
    assert swap["0.25.0"]["devices"] == ["cpu"]  # another profile
    assert swap["0.26.0"]["devices"] == ["cpu"]  # other checks at its commit
    assert folded["penalties"]["0.23.0"]["devices"] == ["cpu"]  # a cuda row skipped
    text = "\n".join(lines)
    assert "swap_states on vLLM 0.24.0: cpu only (no cuda rows for memmove@0.19.0)" in text
    assert "profile dev here, ci on the GPU" in text
    assert "files at ccc and bbb are not known to be the same" in text


def test_a_failed_cuda_row_gives_no_release_cuda():
    failed = report(row("swap_states", "cuda", "memmove@0.16.0"),
                    row("swap_states", "cuda", "memmove@0.27.0", status="fail"))
    folded = cuda_rows.fold(failed, validated(), lambda *_: True, log=lambda _: None)
    assert all(r["devices"] == ["cpu"] for r in folded["swap_states"].values())


def test_the_command_names_a_report_without_cuda_rows(tmp_path, capsys):
    path = tmp_path / "gate-report.json"
    path.write_text(json.dumps({**GPU_RUN, "devices": ["cpu"]}))
    with pytest.raises(SystemExit):
        cuda_rows.main([str(path), "--validated", str(tmp_path / "v.json")])
    assert "no cuda rows ran in this report" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cuda_rows.main([str(tmp_path / "missing.json")])
    assert "missing.json: no such report" in capsys.readouterr().err


def test_same_code_is_a_git_diff_of_the_hot_paths_files_less_the_report_writers(tmp_path):
    def git(*args):
        return subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True,
                              text=True).stdout.strip()

    def commit(path, text):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
        git("add", "-A")
        git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", path)
        return git("rev-parse", "--short", "HEAD")

    git("init", "-q")
    first = commit("src/vllm_hotpaths/penalties/fast.py", "x = 1\n")
    commit("src/vllm_hotpaths/swap_states/fast.py", "y = 1\n")
    report_writer = commit("src/vllm_hotpaths/testing/gate.py", "z = 2\n")
    same = cuda_rows.git_same_code(tmp_path)
    assert same("penalties", first, report_writer)  # another hot path's file and a report writer changed
    shared = commit("src/vllm_hotpaths/testing/laws.py", "w = 1\n")  # a file of no hot path: every one's
    assert not same("penalties", first, shared)
    assert not same("penalties", first + "-dirty", first)
    swap = commit("src/vllm_hotpaths/swap_states/fast.py", "y = 2\n")
    assert same("penalties", shared, swap) and not same("swap_states", shared, swap)


def test_a_patch_law_on_cuda_holds_for_the_report_s_own_vllm_release_only():
    """sampler_mrv2's patch law runs the installed vLLM on CUDA: a staged 0.22.0 run gives no
    other release a cuda row, and a run with no vLLM (its patch row skipped) gives none at all."""
    rows = [row("sampler_mrv2", "cuda", "fused@0.22.0"), row("sampler_mrv2", "cuda", "plugin patch")]
    cpu = {"profile": "ci", "devices": ["cpu"], "commit": "aaa", "implementations": ["fused@0.22.0", "plugin patch"]}
    staged = report(*rows)
    staged["environment"]["vllm"] = "0.22.0"
    folded = cuda_rows.fold(staged, {"sampler_mrv2": {"0.22.0": dict(cpu), "0.33.0": dict(cpu)}}, lambda *_: True,
                            log=lambda _: None)["sampler_mrv2"]
    assert folded["0.22.0"]["devices"] == ["cpu", "cuda"] and folded["0.33.0"]["devices"] == ["cpu"]
    bare = report(rows[0], row("sampler_mrv2", "cuda", "plugin patch", status="skip"))
    bare["environment"]["vllm"] = None
    assert cuda_rows.held_on_cuda(bare) == {"sampler_mrv2": {"fused@0.22.0"}}
    folded = cuda_rows.fold(bare, {"sampler_mrv2": {"0.22.0": dict(cpu)}}, lambda *_: True, log=lambda _: None)
    assert folded["sampler_mrv2"]["0.22.0"]["devices"] == ["cpu"]


def test_reports_of_one_commit_join_a_patch_run_per_release_to_the_fast_paths_run():
    cpu = {"profile": "ci", "devices": ["cpu"], "commit": "aaa", "implementations": ["fused@0.22.0", "plugin patch"]}
    bare = report(row("sampler_mrv2", "cuda", "fused@0.22.0"), row("sampler_mrv2", "cuda", "plugin patch", status="skip"),
                  row("sampler_mrv2", "cuda", "reference@0.31.0", status="skip", check="conformance"))
    bare["environment"]["vllm"] = None
    on_033 = report(row("sampler_mrv2", "cuda", "plugin patch"),
                    row("sampler_mrv2", "cuda", "reference@0.31.0", check="conformance"))
    on_033["environment"]["vllm"] = "0.33.0"
    both = cuda_rows.joined([bare, on_033])
    folded = cuda_rows.fold(both, {"sampler_mrv2": {"0.28.0": dict(cpu), "0.33.0": dict(cpu)}}, lambda *_: True,
                            log=lambda _: None)["sampler_mrv2"]
    assert folded["0.33.0"]["devices"] == ["cpu", "cuda"]
    assert folded["0.33.0"]["cuda"]["implementations"] == ["fused@0.22.0", "plugin patch"]
    assert folded["0.28.0"]["devices"] == ["cpu"]
    with pytest.raises(ValueError, match="different suite commits"):
        cuda_rows.joined([bare, report(commit="zzz")])
    with pytest.raises(ValueError, match="profiles ci and gate cannot be joined"):
        cuda_rows.joined([bare, report(profile="gate")])
