"""Release environments from each release's own metadata: which releases, which requirements,
and the errors a user meets (a version that is not a release, one too old, a failed install)."""

import sys
from pathlib import Path

import pytest

from vllm_hotpaths.testing import releases
from vllm_hotpaths.testing.releases import ReleaseError

INDEX = ["0.15.1", "0.16.0", "0.17.0", "0.22.0", "0.23.0", "0.33.0"]  # a stand-in for the index


def test_a_release_on_the_index_is_accepted_as_the_index_spells_it():
    assert releases.check_release("0.23.0", INDEX) == "0.23.0"
    assert releases.check_release("0.23", INDEX) == "0.23.0"


@pytest.mark.parametrize("version, words", [
    ("0.15.1", "vLLM 0.15.1 is older than 0.16.0, the first release this suite checks "
               "(releases: 0.16.0 to 0.33.0, 5 releases)"),
    ("0.20.0", "vLLM 0.20.0 is not a release on the package index (releases: 0.16.0 to 0.33.0, 5 releases)"),
    ("9.9.9", "vLLM 9.9.9 is not a release on the package index"),
    ("latest", "vLLM 'latest' is not a version number (releases: 0.16.0 to 0.33.0, 5 releases)"),
])
def test_a_version_that_cannot_be_gated_gets_one_line_naming_the_range(version, words):
    with pytest.raises(ReleaseError) as err:
        releases.check_release(version, INDEX)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_gpu_only_requirements_are_left_out_and_the_rest_kept():
    for name in ("torch", "torchvision", "flashinfer-python", "nvidia-cutlass-dsl", "quack_kernels", "Tilelang"):
        assert releases.gpu_only(name), name
    for name in ("transformers", "numba", "xgrammar", "pyzmq", "compressed-tensors", "apache-tvm-ffi"):
        assert not releases.gpu_only(name), name


PIP_NOT_FOUND = """Looking in links: /somewhere
ERROR: Could not find a version that satisfies the requirement urllib3>=3 (from versions: 0.3, 1.0)
ERROR: No matching distribution found for urllib3>=3
"""
PIP_CONFLICT = ("ERROR: Cannot install requests==2.26.0 and urllib3==2.0.0 because these package versions "
                "have conflicting dependencies.\n\nThe conflict is caused by: ...\n")
PIP_BUILD = "  ERROR: Failed building wheel for llguidance\nERROR: Could not build wheels for llguidance, which..."


@pytest.mark.parametrize("output, package", [(PIP_NOT_FOUND, "urllib3>=3"),
                                             (PIP_CONFLICT, "requests==2.26.0 and urllib3==2.0.0"),
                                             (PIP_BUILD, "llguidance"),
                                             ("ERROR: something else broke\n", "ERROR: something else broke")])
def test_a_failed_install_is_named_by_the_package_pip_names(output, package):
    assert releases.failed_package(output).startswith(package)


def test_the_index_lists_every_release_from_the_first_one():
    found = releases.gateable(releases.index_releases())
    assert found[0] == releases.FIRST_RELEASE
    assert {"0.16.0", "0.22.0", "0.23.0", "0.33.0"} <= set(found)


def test_requirements_come_from_the_releases_metadata_without_the_gpu_only_ones():
    kept, left_out = releases.requirements("0.23.0")
    names = {releases.normalize(line.split(";")[0].split("[")[0].split("=")[0].split("<")[0].split(">")[0].split("!")[0])
             for line in kept}
    assert {"transformers", "pyzmq", "msgspec", "xgrammar"} <= names
    assert not names & {"torch", "torchaudio", "flashinfer-python"}
    assert any(line.startswith("torch==") for line in left_out)


def test_a_failed_install_names_the_package_and_leaves_no_environment(tmp_path):
    """Layered on this interpreter's environment (it has the release's requirements): only the
    planted requirement is missing, and it fails pip's resolution."""
    with pytest.raises(ReleaseError) as err:
        releases.environment("0.22.0", tmp_path, log=lambda line: None, releases=INDEX,
                             base=Path(sys.prefix), extra=["vllm-hotpaths-no-such-package==1"])
    assert "failed on vllm-hotpaths-no-such-package==1" in str(err.value)
    assert not (tmp_path / ".venvs" / "vllm-0.22.0").exists()


@pytest.mark.parametrize("version, words", [
    ("0.15.1", "gate: vLLM 0.15.1 is older than 0.16.0, the first release this suite checks (releases: 0.16.0 to"),
    ("9.9.9", "gate: vLLM 9.9.9 is not a release on the package index (releases: 0.16.0 to"),
])
def test_gate_for_a_version_that_is_not_a_release_says_so_in_one_line(run_cli, tmp_path, version, words):
    result = run_cli("-m", "vllm_hotpaths.cli", "gate", "--vllm", version, "--report-dir", str(tmp_path))
    assert result.returncode == 2
    assert words in result.stdout
    assert not (tmp_path / "gate-report.json").exists()


def test_the_ci_fan_out_lists_the_releases_to_gate(tmp_path, monkeypatch, capsys):
    """What the GPU pipelines' first job runs: the releases as a JSON list (a GitHub Actions
    matrix) or as Buildkite steps, all of them or those the validated file lacks."""
    import json

    monkeypatch.setattr(releases, "index_releases", lambda python=None: INDEX)
    validated = tmp_path / "validated.json"
    validated.write_text(json.dumps({"penalties": {"0.16.0": {}, "0.22.0": {}}, "swap_states": {"0.33.0": {}}}))
    assert releases.main(["releases", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == INDEX[1:]
    assert releases.main(["releases", "--json", "--unvalidated", str(validated)]) == 0
    assert json.loads(capsys.readouterr().out) == ["0.17.0", "0.23.0"]
    assert releases.main(["buildkite", "--unvalidated", str(validated)]) == 0
    steps = capsys.readouterr().out
    assert steps.count("command: bash ci/gpu/gate-ci.sh") == 2 and 'VLLM_VERSION: "0.23.0"' in steps
    validated.write_text(json.dumps({"penalties": {v: {} for v in INDEX}}))
    assert releases.main(["buildkite", "--unvalidated", str(validated)]) == 0
    assert capsys.readouterr().out.strip() == "steps: []"
