"""Installs the fast `swap_states` / `condense` into vLLM's `InputBatch`.

The implementation is the fast variant whose reference the installed vLLM is checked against
(0.19.0 to 0.26.0: `memmove@0.19.0`; from 0.27.0: `memmove@0.27.0`): it writes what upstream writes, whole
arrays bit for bit, and keeps nothing on the batch.
A batch the fast path does not support (0.33's ReplaySSM state) goes to upstream's methods, as
does every call whose rows upstream would accept but the fast path refuses (it refuses before
moving anything), so the patched batch never fails where upstream would not.
"""

from __future__ import annotations

from vllm_hotpaths import registry, vllm_env
from vllm_hotpaths.swap_states import check_supported

INPUT_BATCH = "vllm.v1.worker.gpu_input_batch"
UPSTREAM: dict[str, object] = {}  # the replaced methods, for the properties' unpatched side


def install(version: str | None = None) -> list[str]:
    version = version or vllm_env.installed_version()
    module = vllm_env.import_vllm(INPUT_BATCH)
    batch_class = module.InputBatch
    if UPSTREAM:
        return ["InputBatch.swap_states", "InputBatch.condense"]
    from vllm.v1.sample.logits_processor import MoveDirectionality

    fast = registry.get("swap_states").fast_for(version)(MoveDirectionality)
    upstream_swap, upstream_condense = batch_class.swap_states, batch_class.condense

    def swap_states(self, i1: int, i2: int) -> None:
        try:
            check_supported(self)
        except NotImplementedError:
            return upstream_swap(self, i1, i2)
        try:
            fast.swap_states(self, i1, i2)
        except ValueError:  # rows the fast path refuses, before moving anything
            upstream_swap(self, i1, i2)

    def condense(self) -> None:
        try:
            check_supported(self)
        except NotImplementedError:
            return upstream_condense(self)
        try:
            fast.condense(self)
        except ValueError:
            upstream_condense(self)

    UPSTREAM.update(swap_states=upstream_swap, condense=upstream_condense)
    batch_class.swap_states, batch_class.condense = swap_states, condense
    return ["InputBatch.swap_states", "InputBatch.condense"]


def uninstall() -> None:
    """Put upstream's methods back (the properties patch one test at a time)."""
    if UPSTREAM:
        batch_class = vllm_env.import_vllm(INPUT_BATCH).InputBatch
        batch_class.swap_states, batch_class.condense = UPSTREAM["swap_states"], UPSTREAM["condense"]
        UPSTREAM.clear()
