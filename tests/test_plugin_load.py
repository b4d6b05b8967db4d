"""vLLM's own `load_general_plugins()` with this package installed, as the gate asks it of every
environment it runs in (`testing.plugin_load`): it returns, and a plugin that raised is told."""

import json

import pytest

from vllm_hotpaths import plugin, registry, vllm_env
from vllm_hotpaths.testing import plugin_load

pytestmark = pytest.mark.skipif(vllm_env.installed_version() is None, reason="vLLM is not installed")


def test_vllm_loads_its_plugins_with_this_package_installed():
    result = plugin_load.check()
    assert result["returned"], result
    assert plugin_load.lines(result)[0].startswith("plugin: vLLM's load_general_plugins() returned"), result
    assert any("vllm-hotpaths" in line for line in result["log"]), result


def test_a_plugin_that_raises_is_told_as_vllm_failing_to_start(tmp_path, monkeypatch):
    """The check itself can fail: a `register` that raises (planted through sitecustomize, before
    vLLM loads the entry point) makes `load_general_plugins()` raise in the child."""
    (tmp_path / "sitecustomize.py").write_text(
        "import vllm_hotpaths.plugin as p\n"
        "def register():\n    raise AttributeError(\"module 'vllm.envs' has no attribute 'X'\")\n"
        "p.register = register\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    result = plugin_load.check()
    assert not result["returned"] and "has no attribute 'X'" in result["error"], result
    assert "did not return" in plugin_load.lines(result)[0]


@pytest.mark.parametrize("release", ["0.34.0"])
def test_vllm_without_model_runner_v1_starts_with_the_plugin(pytestconfig, release):
    """vLLM 0.34.0, which removed Model Runner v1, in its own environment (`vllm-hotpaths gate
    --vllm 0.34.0` makes it): its plugin loading returns, each v1 hot path says it is gone, and the
    patches validated there are installed."""
    python = pytestconfig.rootpath / ".venvs" / f"vllm-{release}" / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no environment for vLLM {release} (`vllm-hotpaths gate --vllm {release}` makes it)")
    result = plugin_load.check(str(python))
    assert result["returned"], result
    assert not [line for line in result["log"] if line.startswith("ERROR")], result["log"]
    for name in ("penalties", "think_budget", "swap_states", "recovered_tokens"):
        assert any(f"{name}: vLLM 0.34.0 removed" in line for line in result["log"]), result["log"]
    assert any("this engine runs Model Runner V2" in line for line in result["log"]), result["log"]
    # what the committed validated.json records for 0.34.0, installed where a patch applies there
    validated = json.loads(plugin.VALIDATED.read_text())
    expected = {name for name, rows in validated.items() if release in rows and registry.get(name).patch
                and registry.get(name).removed_in(release) is None and registry.get(name).patch_needed(release) is None
                and registry.get(name).held_back() is None}
    assert {"sampler_mrv2", "cached_request_data", "allocate_slots", "request_output"} <= expected
    assert {n for n, replaced in result["installed"].items() if replaced} == expected


def test_the_answer_is_kept_until_what_it_depends_on_changes(tmp_path, monkeypatch):
    asked = []
    monkeypatch.setattr(plugin_load, "check", lambda: asked.append(1) or {"returned": True, "installed": {}, "log": []})
    store = tmp_path / "kept.json"
    validated = tmp_path / "validated.json"
    validated.write_text("{}")
    monkeypatch.setenv("VLLM_HOTPATHS_VALIDATED", str(validated))
    plugin_load.kept_or_checked(store)
    plugin_load.kept_or_checked(store)
    assert len(asked) == 1
    validated.write_text('{"penalties": {}}')  # another validated file: asked again
    plugin_load.kept_or_checked(store)
    monkeypatch.setenv("VLLM_HOTPATHS", "off")  # another selection: asked again
    plugin_load.kept_or_checked(store)
    assert len(asked) == 3


def test_a_call_that_did_not_return_is_never_kept(tmp_path, monkeypatch):
    asked = []
    monkeypatch.setattr(plugin_load, "check", lambda: asked.append(1) or {"returned": False, "error": "exit 1"})
    plugin_load.kept_or_checked(tmp_path / "kept.json")
    plugin_load.kept_or_checked(tmp_path / "kept.json")
    assert len(asked) == 2
