"""Which model runner a vLLM engine uses, as vLLM itself decides it.

`v1` is Model Runner v1 (`vllm/v1/worker/gpu_model_runner.py`, the v1 `Sampler`, `InputBatch`);
`mrv2` is Model Runner V2 (`vllm/v1/worker/gpu/`), the default for Qwen3 dense models in 0.22,
every dense model from 0.25 and every model in 0.33, the only one from 0.34 (`registry.V1_REMOVED`).
vLLM decides per engine in `VllmConfig.use_v2_model_runner` (0.22 to 0.33); older versions read
`VLLM_USE_V2_MODEL_RUNNER` (off unless set). A hot path's upstream function is called by one
runner only (registry `runner`).
"""

from __future__ import annotations

import functools
from typing import Callable

RUNNERS = ("v1", "mrv2")
TITLES = {"v1": "Model Runner v1", "mrv2": "Model Runner V2", "any": "either model runner"}


def calls(engine_runner: str, hotpath_runner: str) -> bool:
    """An engine on `engine_runner` calls a hot path of `hotpath_runner` (a registry `runner`:
    "any" is the engine core's scheduler, which both runners' engines call)."""
    return hotpath_runner in (engine_runner, "any")


def runner_of(vllm_config) -> str:
    """The runner an engine with this `VllmConfig` builds (vLLM's own decision)."""
    if hasattr(type(vllm_config), "use_v2_model_runner"):
        return "mrv2" if vllm_config.use_v2_model_runner else "v1"
    from vllm_hotpaths import registry, vllm_env

    version = vllm_env.installed_version()
    if version is None or registry.version_key(version) >= registry.version_key(registry.V1_REMOVED):
        return "mrv2"  # no choice left
    from vllm import envs  # versions before the automatic choice: the variable alone

    return "mrv2" if getattr(envs, "VLLM_USE_V2_MODEL_RUNNER", False) else "v1"


def watch(announce: Callable[[str], None]) -> bool:
    """Call `announce(runner)` the first time this process learns its engine's runner: wraps
    `VllmConfig.use_v2_model_runner`, which vLLM's scheduler and worker read when they are built.
    False where the installed vLLM has no such property (the runner is then fixed by the
    environment: `runner_of` tells it)."""
    from vllm.config import VllmConfig

    decided = getattr(VllmConfig, "use_v2_model_runner", None)
    if not isinstance(decided, property) or getattr(decided.fget, "_hotpaths_watched", False):
        return isinstance(decided, property)

    @functools.wraps(decided.fget)
    def use_v2_model_runner(self) -> bool:
        answer = decided.fget(self)
        announce_once("mrv2" if answer else "v1", announce)
        return answer

    use_v2_model_runner._hotpaths_watched = True
    VllmConfig.use_v2_model_runner = property(use_v2_model_runner)
    return True


def announce_once(runner: str, announce: Callable[[str], None]) -> None:
    """`announce(runner)` unless this process already did for that runner."""
    if runner not in _announced:
        _announced.add(runner)
        announce(runner)


_announced: set[str] = set()
