"""The forked runs of tests/forked_pytest.py behave as `python -m` would: the run's environment,
folder, exit code and output; and a run whose import-time environment differs from the fork
server's gets a fresh Python instead of the server's imports."""

from tests.forked_pytest import run_pytest

PROBE = '''
import os, sys

def test_probe():
    print("RUN_VALUE=" + os.environ.get("FORKED_RUN_VALUE", "unset"))
    print("REGRESSIONS=" + os.environ.get("VLLM_HOTPATHS_REGRESSIONS", "unset"))
    print("CWD=" + os.getcwd())
    print("TORCH_IMPORTED=" + str("torch" in sys.modules))
    assert os.environ.get("VLLM_HOTPATHS_NO_REPLAY") != "fail", "asked to fail"
'''


def probe(tmp_path, **env):
    path = tmp_path / "test_probe.py"
    path.write_text(PROBE)
    return run_pytest([str(path), "-q", "-s", "-p", "no:cacheprovider", "-p", "no:xdist"], tmp_path.parent, **env)


def lines(result) -> dict[str, str]:
    return dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line and line[0].isupper())


def test_a_forked_run_has_its_own_environment_folder_and_exit_code(tmp_path):
    # VLLM_HOTPATHS_REGRESSIONS is read only after the fork: the run is forked, and sees its value.
    passed = probe(tmp_path, VLLM_HOTPATHS_REGRESSIONS=str(tmp_path))
    assert passed.returncode == 0, passed.stdout[-2000:]
    assert lines(passed)["TORCH_IMPORTED"] == "True"  # the server's imports, before the run's own
    assert lines(passed)["REGRESSIONS"] == str(tmp_path)
    assert lines(passed)["CWD"] == str(tmp_path.parent)
    failing = probe(tmp_path, VLLM_HOTPATHS_NO_REPLAY="fail")  # also read only after the fork
    assert lines(failing)["TORCH_IMPORTED"] == "True"
    assert failing.returncode == 1 and "asked to fail" in failing.stdout


def test_a_run_whose_import_time_environment_differs_gets_a_fresh_python(tmp_path):
    result = probe(tmp_path, FORKED_RUN_VALUE="fresh")
    assert result.returncode == 0, result.stdout[-2000:]
    assert lines(result)["RUN_VALUE"] == "fresh"
    # A fresh Python has imported nothing before the run: pytest alone does not import torch.
    assert lines(result)["TORCH_IMPORTED"] == "False"
