"""The vLLM plugin, loaded the way vLLM loads it (`vllm.plugins.load_general_plugins`), in a
process of its own each time (forked from one that has imported vLLM's configuration, but loaded
no plugin): installed only for validated versions, selected by VLLM_HOTPATHS,
harmless twice, and in place inside a real `InputBatch`. (Each patch's equivalence with upstream
is a property named `test_patched_vllm_*` in its hot path's properties file.)"""

import json

import pytest

from vllm_hotpaths import registry, vllm_env

pytestmark = pytest.mark.skipif(vllm_env.installed_version() is None, reason="vLLM is not installed")
PATCHED = [name for name, hotpath in registry.HOTPATHS.items() if hotpath.patch]
CPU_RECORD = {"profile": "gate", "devices": ["cpu"]}  # a gate run on a machine without a GPU

LOAD = """
import logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(name)s %(levelname)s %(message)s")
from types import SimpleNamespace
from vllm_hotpaths import vllm_env
batch = vllm_env.import_vllm("vllm.v1.worker.gpu_input_batch").InputBatch
targets = {  # hot path -> what its patch replaces
    "logits_copy": (vllm_env.import_vllm("vllm.v1.worker.gpu.sample.sampler").Sampler, "sample"),
    "sampler_mrv2": (vllm_env.import_vllm("vllm.v1.worker.gpu.sample.sampler").Sampler, "sample"),
    "swap_states": (batch, "swap_states"),
    "think_budget": (batch, "__init__"),
    "penalties": (vllm_env.import_vllm("vllm.v1.sample.sampler"), "apply_all_penalties"),
    "recovered_tokens": (vllm_env.import_vllm("vllm.v1.sample.rejection_sampler"), "sample_recovered_tokens"),
    "cached_request_data": (vllm_env.import_vllm("vllm.v1.core.sched.scheduler").Scheduler,
                            "_make_cached_request_data"),
    "new_block_ids": (vllm_env.import_vllm("vllm.v1.core.sched.scheduler").Scheduler, "__init__"),
    "allocate_slots": (vllm_env.import_vllm("vllm.v1.core.kv_cache_manager").KVCacheManager, "allocate_slots"),
    "request_output": (vllm_env.import_vllm("vllm.v1.core.sched.scheduler").Scheduler, "_update_request_with_output"),
}
before = {name: getattr(owner, attr) for name, (owner, attr) in targets.items()}
from vllm.plugins import load_general_plugins
load_general_plugins()
from vllm_hotpaths import plugin
plugin.register()  # a second load, as a second engine in the process would
def wrappers(fn):  # the function and those it wraps (functools.wraps' __wrapped__)
    seen = []
    while fn is not None and fn not in seen:
        seen.append(fn)
        fn = getattr(fn, "__wrapped__", None)
    return seen
shared = {"logits_copy", "sampler_mrv2"}  # both replace Sampler.sample: told apart by their files
for name, (owner, attr) in targets.items():
    now = getattr(owner, attr)
    mine = any(getattr(getattr(f, "__code__", None), "co_filename", "").endswith(f"{name}/patch.py")
               for f in wrappers(now))
    print(name, "PATCHED" if now is not before[name] and (mine or name not in shared) else "UPSTREAM")
# A real InputBatch with a reasoning config, and one request added as the model runner adds it.
from vllm_hotpaths.testing.live.swap_states import add, live_batch
from vllm_hotpaths.testing.batches.swap_states import Request
live = live_batch(4, 32, 64, (16,), reasoning_config=SimpleNamespace(
    reasoning_start_token_ids=[5], reasoning_end_token_ids=[6]))
output = [1, 2]
add(live, Request("r0", [3, 4], output, 2, ([0],)))
print("holder", type(live.thinking_budget_state_holder).__name__)
print("output list", type(live.req_output_token_ids[0]).__name__)
"""


def load(run_cli, tmp_path, validated: dict, **env):
    path = tmp_path / "validated.json"
    path.write_text(json.dumps(validated))
    return run_cli("-c", LOAD, forked=True, VLLM_HOTPATHS_VALIDATED=str(path), VLLM_PLUGINS="vllm_hotpaths", **env)


def test_the_entry_point_is_declared():
    from importlib.metadata import entry_points

    found = {ep.name: ep.value for ep in entry_points(group="vllm.general_plugins")}
    assert found.get("vllm_hotpaths") == "vllm_hotpaths.plugin:register", found


@pytest.mark.parametrize("name", ["logits_copy", "sampler_mrv2"])
def test_a_validated_version_is_installed_once(run_cli, tmp_path, name):
    version = vllm_env.installed_version()
    if registry.get(name).patch_needed(version):
        pytest.skip(f"{name}: {registry.get(name).patch_needed(version)}")
    result = load(run_cli, tmp_path, {name: {version: CPU_RECORD}})
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"{name} PATCHED" in result.stdout, result.stdout
    assert result.stdout.count(f"{name} installed for vLLM {version}") == 1, result.stdout
    other = "sampler_mrv2" if name == "logits_copy" else "logits_copy"
    assert f"{other} is not validated for vLLM {version}" in result.stdout, result.stdout


def test_each_hot_path_is_installed_only_where_validated(run_cli, tmp_path):
    version = vllm_env.installed_version()
    result = load(run_cli, tmp_path, {"swap_states": {version: CPU_RECORD}})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "swap_states PATCHED" in result.stdout and "logits_copy UPSTREAM" in result.stdout, result.stdout
    assert "sampler_mrv2 UPSTREAM" in result.stdout, result.stdout
    assert f"swap_states installed for vLLM {version}" in result.stdout, result.stdout
    assert f"logits_copy is not validated for vLLM {version}" in result.stdout, result.stdout
    assert "holder ThinkingBudgetStateHolder" in result.stdout and "output list list" in result.stdout


def test_a_patch_says_where_upstream_needs_none():
    from vllm_hotpaths.registry import get

    assert get("logits_copy").patch_needed("0.22.3") is None
    assert "already skips the copy" in get("logits_copy").patch_needed("0.33.0")
    assert "already skips the copy" in get("logits_copy").patch_needed("0.27.0")
    assert "written for vLLM 0.22.x" in get("logits_copy").patch_needed("0.26.0")
    assert "written for vLLM 0.22.x" in get("logits_copy").patch_needed("0.21.0")
    assert get("sampler_mrv2").patch_needed("0.22.0") is None
    assert get("sampler_mrv2").patch_needed("0.33.0") is None
    assert "written for vLLM 0.22.x to 0.34.x" in get("sampler_mrv2").patch_needed("0.35.0")
    assert "written for vLLM 0.22.x to 0.34.x" in get("sampler_mrv2").patch_needed("0.21.0")
    assert get("swap_states").patch_needed("0.33.0") is None
    assert get("penalties").patch_needed("0.22.0") is None


def test_every_validated_hot_path_is_installed_into_vllm(run_cli, tmp_path):
    """All five validated: each replaced function is patched (logits_copy only where upstream
    still copies; recovered_tokens only where a GPU model has a shape measured faster), a new InputBatch holds the fast thinking-budget holder, and a request's output
    list becomes the tracked list the penalties builder follows."""
    version = vllm_env.installed_version()
    result = load(run_cli, tmp_path, {name: {version: CPU_RECORD} for name in PATCHED})
    assert result.returncode == 0, result.stderr[-3000:]
    for name in PATCHED:
        hotpath = registry.get(name)
        needed = hotpath.patch_needed(version) is None and hotpath.held_back() is None
        assert f"{name} {'PATCHED' if needed else 'UPSTREAM'}" in result.stdout, result.stdout
    assert "holder FastHolder" in result.stdout, result.stdout
    assert "output list TrackedTokenList" in result.stdout, result.stdout


def test_a_hot_path_measured_faster_nowhere_is_not_installed_though_validated(run_cli, tmp_path, monkeypatch):
    """recovered_tokens is validated, but its dispatch file (here one that names no GPU model)
    has no shape where its call was measured faster than upstream's: upstream is kept and one line
    says why."""
    version = vllm_env.installed_version()
    grid = tmp_path / "no-gpu.json"
    grid.write_text('{"gpus": {}}')
    monkeypatch.setenv("VLLM_HOTPATHS_RECOVERED_DISPATCH", str(grid))
    reason = registry.get("recovered_tokens").held_back()
    assert reason and "measured faster" in reason and "#dispatch-by-shape" in reason
    assert registry.get("recovered_tokens").patch_needed(version) is None  # the patch law still runs it
    result = load(run_cli, tmp_path, {"recovered_tokens": {version: CPU_RECORD}}, VLLM_HOTPATHS="recovered_tokens",
                  VLLM_HOTPATHS_RECOVERED_DISPATCH=str(grid))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "recovered_tokens UPSTREAM" in result.stdout, result.stdout
    lines = [line for line in result.stdout.splitlines() if "recovered_tokens held back" in line]
    assert len(lines) == 1 and lines[0].endswith(f"upstream kept: {reason}"), result.stdout


def test_the_holder_alone_also_tracks_the_output_lists(run_cli, tmp_path):
    version = vllm_env.installed_version()
    result = load(run_cli, tmp_path, {"think_budget": {version: CPU_RECORD}})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "think_budget PATCHED" in result.stdout and "penalties UPSTREAM" in result.stdout, result.stdout
    assert "holder FastHolder" in result.stdout and "output list TrackedTokenList" in result.stdout


def test_an_unvalidated_version_is_refused_with_the_gate_command(run_cli, tmp_path):
    version = vllm_env.installed_version()
    result = load(run_cli, tmp_path, {"logits_copy": {"0.0.1": CPU_RECORD}})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "logits_copy UPSTREAM" in result.stdout, result.stdout
    assert f"not validated for vLLM {version}" in result.stdout, result.stdout
    assert f"vllm-hotpaths gate --vllm {version} --hotpath logits_copy --record" in result.stdout


def test_vllm_hotpaths_off_installs_nothing(run_cli, tmp_path):
    version = vllm_env.installed_version()
    result = load(run_cli, tmp_path, {"logits_copy": {version: CPU_RECORD}}, VLLM_HOTPATHS="off")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "PATCHED" not in result.stdout and "installed" not in result.stdout, result.stdout
    assert "vllm-hotpaths: off (VLLM_HOTPATHS=off)" in result.stdout, result.stdout
    assert "holder ThinkingBudgetStateHolder" in result.stdout and "output list list" in result.stdout


def test_an_unknown_hot_path_is_named_and_the_others_installed(run_cli, tmp_path):
    version = vllm_env.installed_version()
    result = load(run_cli, tmp_path, {"swap_states": {version: CPU_RECORD}}, VLLM_HOTPATHS="swap_states,sampler")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "VLLM_HOTPATHS names sampler, which no patch has" in result.stdout, result.stdout
    assert "swap_states PATCHED" in result.stdout, result.stdout


def test_a_cpu_record_does_not_install_on_a_cuda_engine(monkeypatch, tmp_path, caplog):
    from vllm_hotpaths import plugin

    version = vllm_env.installed_version()
    path = tmp_path / "validated.json"
    path.write_text(json.dumps({"swap_states": {version: CPU_RECORD}}))
    monkeypatch.setenv("VLLM_HOTPATHS_VALIDATED", str(path))
    monkeypatch.setenv("VLLM_HOTPATHS", "swap_states")
    monkeypatch.setattr(plugin, "engine_device", lambda: "cuda")
    with caplog.at_level("WARNING", logger="vllm.vllm_hotpaths"):
        assert "swap_states" not in plugin.register()
    assert f"not validated for vLLM {version} on cuda (validated on cpu)" in caplog.text, caplog.text


def test_a_patch_that_fails_to_install_keeps_upstream_and_says_so(monkeypatch, tmp_path, caplog):
    """A vLLM build whose code differs from the release the gate validated (a patch's target
    missing): vLLM calls plugins without catching their errors, so the plugin logs one line naming
    the hot path and the way out, puts back what the patch had replaced, and never raises."""
    from vllm_hotpaths import plugin
    from vllm_hotpaths.swap_states import patch

    version = vllm_env.installed_version()
    path = tmp_path / "validated.json"
    path.write_text(json.dumps({"swap_states": {version: CPU_RECORD}, "penalties": {version: CPU_RECORD}}))
    monkeypatch.setenv("VLLM_HOTPATHS_VALIDATED", str(path))
    monkeypatch.setenv("VLLM_HOTPATHS", "penalties,swap_states")
    monkeypatch.setattr(plugin, "_installed", {"penalties": []})  # installed already: only swap_states runs
    undone = []
    monkeypatch.setattr(patch, "uninstall", lambda: undone.append(True))

    def missing_target(version):
        raise AttributeError("type object 'InputBatch' has no attribute 'swap_states'")

    monkeypatch.setattr(registry, "resolve", lambda dotted: missing_target)
    with caplog.at_level("INFO", logger="vllm.vllm_hotpaths"):
        assert plugin.register() == {"penalties": [], "swap_states": []}
    assert f"the swap_states patch could not be installed on vLLM {version}" in caplog.text, caplog.text
    assert "no attribute 'swap_states'" in caplog.text and "VLLM_HOTPATHS=penalties" in caplog.text, caplog.text
    assert "upstream kept" in caplog.text and undone == [True], caplog.text


def _no_v2_choice(monkeypatch):
    """vLLM as 0.34 has it: no `VllmConfig.use_v2_model_runner`, no VLLM_USE_V2_MODEL_RUNNER."""
    from vllm import envs
    from vllm.config import VllmConfig

    monkeypatch.delattr(VllmConfig, "use_v2_model_runner", raising=False)
    known = getattr(envs, "__getattr__", None)

    def without(name):
        if name == "VLLM_USE_V2_MODEL_RUNNER":
            raise AttributeError(f"module 'vllm.envs' has no attribute {name!r}")
        return known(name)

    monkeypatch.setattr(envs, "__getattr__", without, raising=False)
    if "VLLM_USE_V2_MODEL_RUNNER" in vars(envs):
        monkeypatch.delattr(envs, "VLLM_USE_V2_MODEL_RUNNER")


def _modules_gone(monkeypatch):
    """Every vLLM module a patch imports is missing (a release that moved or removed them)."""
    def gone(name):
        raise ModuleNotFoundError(f"No module named {name!r}")

    monkeypatch.setattr(vllm_env, "import_vllm", gone)


def _validated_unreadable(monkeypatch):
    monkeypatch.setenv("VLLM_HOTPATHS_VALIDATED", __file__)  # not JSON


def _patch_modules_broken(monkeypatch):
    """A patch module that raises while the plugin asks it whether it is needed or held back."""
    def broken(self, *args):
        raise KeyError("no such release")

    monkeypatch.setattr(registry.HotPath, "held_back", broken)


@pytest.mark.parametrize("version", ["0.22.0", "0.33.0", "0.34.0", "0.99.0", "1.0.0.dev3+g1234"])
@pytest.mark.parametrize("fault", [_no_v2_choice, _modules_gone, _validated_unreadable, _patch_modules_broken])
def test_register_never_raises_whatever_vllm_lacks(monkeypatch, tmp_path, caplog, version, fault):
    """vLLM calls every general plugin without catching what it raises: with the attributes and
    modules the plugin reads taken away, on releases known and unknown, `register` returns,
    installs nothing it cannot, and says why in the log."""
    from vllm_hotpaths import plugin

    path = tmp_path / "validated.json"  # every patch validated for this version, on the CPU
    path.write_text(json.dumps({name: {version: CPU_RECORD} for name in PATCHED}))
    monkeypatch.setenv("VLLM_HOTPATHS_VALIDATED", str(path))
    monkeypatch.setattr(plugin, "_installed", {})
    monkeypatch.setattr(plugin, "engine_device", lambda: "cpu")
    monkeypatch.setattr(vllm_env, "installed_version", lambda: version)
    monkeypatch.setattr(registry, "resolve", lambda dotted: lambda version: (_ for _ in ()).throw(
        AttributeError("this release has no such function")))  # nothing of vLLM is really patched here
    monkeypatch.setattr(plugin.runners, "_announced", set())
    fault(monkeypatch)
    with caplog.at_level("INFO", logger="vllm.vllm_hotpaths"):
        installed = plugin.register()
    assert not any(installed.values()), installed
    assert "vllm-hotpaths" in caplog.text, "the plugin said nothing"
    if registry.version_key(version) >= registry.version_key(registry.V1_REMOVED) and fault is not _validated_unreadable:
        for name in PATCHED:
            if registry.get(name).removed:
                assert f"{name}: vLLM {registry.V1_REMOVED} removed" in caplog.text, caplog.text


def test_the_runner_is_model_runner_v2_where_vllm_has_no_other(monkeypatch):
    from vllm_hotpaths import runners

    _no_v2_choice(monkeypatch)
    monkeypatch.setattr(vllm_env, "installed_version", lambda: "0.34.0")
    assert runners.runner_of(None) == "mrv2"
    monkeypatch.setattr(vllm_env, "installed_version", lambda: "0.21.0")
    assert runners.runner_of(None) == "v1"  # the variable unset: vLLM's default before 0.22


def test_the_engine_device_is_found_without_initializing_cuda(monkeypatch):
    """vLLM loads plugins before it forks workers, and its own tests fork per test: asking the
    CUDA runtime whether a GPU exists would leave every forked child unable to use CUDA. With
    NVML reporting a GPU, the plugin must say "cuda" without calling the runtime."""
    import torch

    def runtime_asked():
        raise AssertionError("the CUDA runtime was asked for the device count")

    monkeypatch.setattr(torch.cuda, "_is_compiled", lambda: True)
    monkeypatch.setattr(torch.cuda, "_device_count_nvml", lambda: 1)
    monkeypatch.setattr(torch.cuda, "_cached_device_count", None)
    monkeypatch.setattr(torch._C, "_cuda_getDeviceCount", runtime_asked, raising=False)
    monkeypatch.delenv("PYTORCH_NVML_BASED_CUDA_CHECK", raising=False)
    from vllm_hotpaths import plugin

    assert plugin.engine_device() == "cuda"
    assert not vllm_env._no_gpu()


ENGINES = """
import logging, sys, tempfile
from pathlib import Path
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(name)s %(levelname)s %(message)s")
from vllm.plugins import load_general_plugins
load_general_plugins()
from vllm_hotpaths.testing import runner_choice
with tempfile.TemporaryDirectory() as folder:
    for answer in runner_choice.ask_vllm(Path(folder)):  # three engine configurations, vLLM deciding
        print("decided", answer)
"""


def test_each_engine_runner_is_named_with_the_patches_it_calls(run_cli, tmp_path):
    """vLLM 0.22 runs Qwen3 dense on Model Runner V2 and Qwen2 on v1: each runner gets one line,
    listing only the installed patches that runner calls; no install line claims more."""
    version = vllm_env.installed_version()
    if version != "0.22.0":
        pytest.skip(f"the expected runner choices are those of vLLM 0.22.0, not {version}")
    path = tmp_path / "validated.json"
    path.write_text(json.dumps({name: {version: CPU_RECORD} for name in ("logits_copy", "swap_states")}))
    result = run_cli("-c", ENGINES, VLLM_HOTPATHS_VALIDATED=str(path), VLLM_PLUGINS="vllm_hotpaths",
                     HF_HUB_OFFLINE="1")
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if "this engine runs" in line]
    assert [line.split("vllm-hotpaths: ", 1)[1] for line in lines] == [
        "this engine runs Model Runner V2; installed patches it calls: logits_copy; "
        "installed but not called by this runner: swap_states",
        "this engine runs Model Runner v1; installed patches it calls: swap_states; "
        "installed but not called by this runner: logits_copy",
    ], result.stdout
    assert "swap_states installed for vLLM 0.22.0 (InputBatch.swap_states, InputBatch.condense), called by " \
           "Model Runner v1 engines only" in result.stdout, result.stdout


INTERMEDIATE = "0.25.0"  # neither a release the references were first written for nor CI's install


def test_the_plugin_installs_on_a_validated_intermediate_release(pytestconfig):
    """vLLM 0.25.0 in its own environment (`testing.releases`, made by `vllm-hotpaths gate --vllm
    0.25.0`), loading the plugin as vLLM does with the committed validated.json: every hot path
    validated for 0.25.0 there is installed (penalties at least), and the others are not."""
    import os
    import subprocess

    from vllm_hotpaths import plugin

    root = pytestconfig.rootpath
    python = root / ".venvs" / f"vllm-{INTERMEDIATE}" / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no environment for vLLM {INTERMEDIATE} (`vllm-hotpaths gate --vllm {INTERMEDIATE}` makes it)")
    validated = json.loads(plugin.VALIDATED.read_text())
    recorded = sorted(n for n in PATCHED if INTERMEDIATE in validated.get(n, {}))
    assert "penalties" in recorded, f"validated.json has no penalties row for vLLM {INTERMEDIATE}"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), str(root / "src")]), VLLM_PLUGINS="vllm_hotpaths")
    env.pop("VLLM_HOTPATHS_VALIDATED", None)
    result = subprocess.run([str(python), "-c", LOAD], cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    for name in PATCHED:
        hotpath = registry.get(name)
        installs = name in recorded and hotpath.patch_needed(INTERMEDIATE) is None and hotpath.held_back() is None
        assert f"{name} {'PATCHED' if installs else 'UPSTREAM'}" in result.stdout, result.stdout
    assert f"penalties installed for vLLM {INTERMEDIATE}" in result.stdout, result.stdout


def test_a_patch_not_needed_on_the_release_asks_for_no_validation(monkeypatch, tmp_path, caplog):
    """Where a hot path's patch has nothing to do on the installed vLLM, the plugin says so and
    does not ask for a gate run that would validate nothing."""
    from vllm_hotpaths import plugin

    version = vllm_env.installed_version()
    name = "new_block_ids"
    from vllm_hotpaths.new_block_ids import patch

    monkeypatch.setattr(patch, "not_needed", lambda v: f"nothing to do on {v}")
    path = tmp_path / "validated.json"
    path.write_text(json.dumps({}))
    monkeypatch.setenv("VLLM_HOTPATHS_VALIDATED", str(path))
    monkeypatch.setenv("VLLM_HOTPATHS", name)
    with caplog.at_level("INFO", logger="vllm.vllm_hotpaths"):
        assert plugin.register().get(name) == []  # considered, nothing replaced
    assert f"{name} left to upstream on vLLM {version}: nothing to do on {version}" in caplog.text, caplog.text
    assert "not validated" not in caplog.text, caplog.text
