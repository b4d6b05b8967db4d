"""Installs `drained` into vLLM 0.17.1 to 0.25.1: `Scheduler.__init__` (the AsyncScheduler
inherits it) runs as upstream's, then, where the scheduler does not zero KV blocks (the only
reader of the list), gives each KV cache manager a `new_block_ids` that keeps nothing, as 0.26.0
records nothing there. Nothing changes per step: the managers' appends go to a list that stays
empty. A scheduler that zeroes is left exactly as it is.
"""

from __future__ import annotations

import functools

from vllm_hotpaths import vllm_env
from vllm_hotpaths.registry import version_key

SCHEDULER = "vllm.v1.core.sched.scheduler"
UPSTREAM: dict[str, object] = {}
REPLACED = ["Scheduler.__init__"]
FIRST_KEEPING, FIRST_FIXED = "0.17.1", "0.26.0"


class KeepsNothing(list):
    """An empty list whose appends are dropped (what a manager's `new_block_ids` becomes)."""

    def append(self, item) -> None:
        pass

    def extend(self, items) -> None:
        pass


def not_needed(version: str) -> str | None:
    if version_key(version) < version_key(FIRST_KEEPING):
        return f"vLLM {version} keeps no list of new block ids"
    if version_key(version) >= version_key(FIRST_FIXED):
        return f"from {FIRST_FIXED} vLLM records new block ids only where it zeroes them"
    return None


def keep_nothing(scheduler) -> None:
    """The managers of a scheduler that zeroes nothing keep no new block ids."""
    if not scheduler.needs_kv_cache_zeroing:
        for manager in scheduler.kv_cache_manager.coordinator.single_type_managers:
            if type(manager.new_block_ids) is list and not manager.new_block_ids:
                manager.new_block_ids = KeepsNothing()


def install(version: str | None = None) -> list[str]:
    module = vllm_env.import_vllm(SCHEDULER)
    if UPSTREAM:
        return REPLACED
    upstream = module.Scheduler.__init__

    @functools.wraps(upstream)
    def __init__(self, *args, **kwargs):
        upstream(self, *args, **kwargs)
        keep_nothing(self)

    __init__.hotpaths_upstream = upstream
    UPSTREAM["__init__"] = upstream
    module.Scheduler.__init__ = __init__
    return REPLACED


def uninstall() -> None:
    if UPSTREAM:
        vllm_env.import_vllm(SCHEDULER).Scheduler.__init__ = UPSTREAM.pop("__init__")
