"""pytest's and Hypothesis' own habits work on the suite: --lf, -m by check and hot path,
--hypothesis-seed under a derandomized profile, and --impl candidates kept out of the checkout."""

import pytest

PENALTIES_CPU = ("properties/test_equivalence.py", "-k", "penalties and cpu", "-p", "no:xdist")
WRONG = ("--impl", "penalties=properties.quality.penalties:PadWithZero")


def test_last_failed_reruns_only_the_failures(run_cli, tmp_path):
    """Conformance passes (it does not run the candidate); the candidate's two laws fail."""
    args = ("-m", "pytest", "properties/test_equivalence.py", "properties/test_errors.py",
            "properties/test_conformance.py", "-k", "penalties and cpu and not mrv2", "-p", "no:xdist",
            "-o", f"cache_dir={tmp_path / 'cache'}", "--hypothesis-profile", "smoke", "--fixture-dir", str(tmp_path), *WRONG)
    first = run_cli(*args)
    assert "2 failed, 1 passed" in first.stdout, first.stdout[-2000:]
    again = run_cli(*args, "--lf")
    assert "run-last-failure: rerun previous 2 failures" in again.stdout, again.stdout[-2000:]
    summary = again.stdout.splitlines()[-1]
    assert "2 failed" in summary and "passed" not in summary, summary


@pytest.mark.parametrize("selection, expected", [
    ("equivalence and penalties", "test_candidate_matches_reference[penalties-"),
    ("conformance and think_budget", "test_reference_matches_installed_vllm[think_budget-"),
])
def test_markers_select_by_check_and_hot_path(run_cli, selection, expected):
    result = run_cli("-m", "pytest", "properties", "-m", selection, "--co", "-q", "-p", "no:xdist")
    ids = [line for line in result.stdout.splitlines() if "::" in line]
    assert ids and all(expected.split("[")[1] in i or selection.split()[-1] in i for i in ids), ids
    assert any(expected in i for i in ids), ids


def test_a_seed_is_honoured_under_a_derandomized_profile(run_cli):
    result = run_cli("-m", "pytest", *PENALTIES_CPU, "--co", "--hypothesis-profile", "ci", "--hypothesis-seed", "7")
    assert "Hypothesis profile ci-seeded (150 examples, seed 7)" in result.stdout, result.stdout[:2000]
    plain = run_cli("-m", "pytest", *PENALTIES_CPU, "--co", "--hypothesis-profile", "ci")
    assert "Hypothesis profile ci (150 examples, derandomized)" in plain.stdout, plain.stdout[:2000]


def test_a_candidates_fixtures_go_to_a_scratch_folder(run_cli):
    from conftest import SCRATCH_FIXTURES

    result = run_cli("-m", "pytest", *PENALTIES_CPU, "--co", *WRONG)
    assert f"new fixtures go to {SCRATCH_FIXTURES}" in result.stdout, result.stdout[:2000]
    plain = run_cli("-m", "pytest", *PENALTIES_CPU, "--co")
    assert "new fixtures go to " in plain.stdout and "properties/regressions" in plain.stdout


def test_an_impl_for_a_hot_path_left_out_is_an_error(run_cli):
    result = run_cli("-m", "pytest", "properties/test_equivalence.py", "-k", "swap_states", "--co", "-p", "no:xdist", *WRONG)
    assert result.returncode == 4, result.stdout[-2000:]
    assert "no selected property checks hot path 'penalties'" in result.stdout + result.stderr


def test_a_candidate_for_another_version_leaves_the_patch_row_alone(run_cli, tmp_path):
    """The patch law checks the shipped fast path that the plugin installs, never the --impl one
    (which here targets the 0.33 reference while vLLM 0.22 is installed)."""
    result = run_cli("-m", "pytest", "properties/test_patch.py", "-k", "swap_states and cpu", "-p", "no:xdist",
                     "-q", "--hypothesis-profile", "smoke", "--fixture-dir", str(tmp_path),
                     "--impl", "swap_states@0.27.0=vllm_hotpaths.swap_states.fast:MemmoveSwap033")
    assert result.returncode == 0 and "1 passed" in result.stdout, result.stdout[-3000:]
    assert not (tmp_path / "swap_states").exists()
