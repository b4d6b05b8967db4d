"""The vLLM plugin, loaded the way vLLM loads it (`vllm.plugins.load_general_plugins`), in a
fresh process each time: installed only for validated versions, selected by VLLM_HOTPATHS,
harmless twice. (Each patch's equivalence with upstream is a property: `test_patched_vllm_samples_like_upstream`
in properties/test_logits_copy.py, `test_patched_vllm_matches_upstream` in
properties/test_swap_states.py.)"""

import json

import pytest

from vllm_hotpaths import vllm_env

pytestmark = pytest.mark.skipif(vllm_env.installed_version() is None, reason="vLLM is not installed")

LOAD = """
import logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(name)s %(levelname)s %(message)s")
from vllm_hotpaths import vllm_env
sampler = vllm_env.import_vllm("vllm.v1.worker.gpu.sample.sampler").Sampler
batch = vllm_env.import_vllm("vllm.v1.worker.gpu_input_batch").InputBatch
before, batch_before = sampler.sample, batch.swap_states
from vllm.plugins import load_general_plugins
load_general_plugins()
from vllm_hotpaths import plugin
plugin.register()  # a second load, as a second engine in the process would
print("PATCHED" if sampler.sample is not before else "UPSTREAM", sampler.sample.__qualname__)
print("BATCH PATCHED" if batch.swap_states is not batch_before else "BATCH UPSTREAM")
"""


def load(run_cli, tmp_path, validated: dict, **env):
    path = tmp_path / "validated.json"
    path.write_text(json.dumps(validated))
    return run_cli("-c", LOAD, VLLM_HOTPATHS_VALIDATED=str(path), VLLM_PLUGINS="vllm_hotpaths", **env)


def test_the_entry_point_is_declared():
    from importlib.metadata import entry_points

    found = {ep.name: ep.value for ep in entry_points(group="vllm.general_plugins")}
    assert found.get("vllm_hotpaths") == "vllm_hotpaths.plugin:register", found


def test_a_validated_version_is_installed_once(run_cli, tmp_path):
    version = vllm_env.installed_version()
    result = load(run_cli, tmp_path, {"logits_copy": {version: {"profile": "gate"}}})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "PATCHED" in result.stdout, result.stdout
    assert result.stdout.count(f"logits_copy installed for vLLM {version}") == 1, result.stdout


def test_each_hot_path_is_installed_only_where_validated(run_cli, tmp_path):
    version = vllm_env.installed_version()
    result = load(run_cli, tmp_path, {"swap_states": {version: {"profile": "gate"}}})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "BATCH PATCHED" in result.stdout and "UPSTREAM" in result.stdout, result.stdout
    assert f"swap_states installed for vLLM {version}" in result.stdout, result.stdout
    assert f"logits_copy is not validated for vLLM {version}" in result.stdout, result.stdout


def test_a_patch_says_where_upstream_needs_none():
    from vllm_hotpaths.registry import get

    assert get("logits_copy").patch_needed("0.22.3") is None
    assert "already skips the copy" in get("logits_copy").patch_needed("0.33.0")
    assert "written for vLLM 0.22.x" in get("logits_copy").patch_needed("0.21.0")
    assert get("swap_states").patch_needed("0.33.0") is None
    assert get("penalties").patch_needed("0.22.0") == "no patch"


def test_an_unvalidated_version_is_refused_with_the_gate_command(run_cli, tmp_path):
    version = vllm_env.installed_version()
    result = load(run_cli, tmp_path, {"logits_copy": {"0.0.1": {"profile": "gate"}}})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "UPSTREAM" in result.stdout, result.stdout
    assert f"not validated for vLLM {version}" in result.stdout, result.stdout
    assert f"vllm-hotpaths gate --vllm {version} --hotpath logits_copy --record" in result.stdout


def test_vllm_hotpaths_off_installs_nothing(run_cli, tmp_path):
    version = vllm_env.installed_version()
    result = load(run_cli, tmp_path, {"logits_copy": {version: {}}}, VLLM_HOTPATHS="off")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "PATCHED" not in result.stdout and "installed" not in result.stdout, result.stdout


def test_an_unknown_hot_path_is_named(run_cli, tmp_path):
    result = load(run_cli, tmp_path, {}, VLLM_HOTPATHS="logits_copy,sampler")
    assert result.returncode != 0
    assert "VLLM_HOTPATHS names sampler" in result.stderr, result.stderr[-3000:]
