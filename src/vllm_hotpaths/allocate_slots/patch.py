"""Installs `decode@0.21.0` as vLLM's `KVCacheManager.allocate_slots` (the engine core's
scheduler, whichever model runner the engine uses) on vLLM 0.21.0 to 0.34.x; every call outside
the decode case goes to upstream's method (fast.py says which)."""

from __future__ import annotations

from vllm_hotpaths import registry, vllm_env
from vllm_hotpaths.registry import version_key

MODULE = "vllm.v1.core.kv_cache_manager"
UPSTREAM: dict[str, object] = {}
REPLACED = ["KVCacheManager.allocate_slots"]
FIRST, LAST = "0.21.0", (0, 34)  # the releases whose allocate_slots this fast path restates


def not_needed(version: str) -> str | None:
    release = version_key(version).release[:2]
    if version_key(version) < version_key(FIRST) or release > LAST:
        return f"the decode fast path is written for vLLM 0.21.x to 0.34.x (allocate_slots differs in {version})"
    return None


def install(version: str | None = None) -> list[str]:
    version = version or vllm_env.installed_version()
    manager = vllm_env.import_vllm(MODULE).KVCacheManager
    if UPSTREAM:
        return REPLACED
    upstream = manager.allocate_slots
    UPSTREAM["allocate_slots"] = upstream
    manager.allocate_slots = registry.get("allocate_slots").fast_for(version)().method(upstream, version)
    return REPLACED


def uninstall() -> None:
    if UPSTREAM:
        vllm_env.import_vllm(MODULE).KVCacheManager.allocate_slots = UPSTREAM.pop("allocate_slots")
