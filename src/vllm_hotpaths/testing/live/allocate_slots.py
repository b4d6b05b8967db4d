"""The installed vLLM's own `KVCacheManager.allocate_slots`, watched in a live scheduler: every
call in the decode case (the fast path's domain) is recorded as the `DecodeStep` read before
it, the blocks it returned (None where it refused) and the blocks the request has cached after
it."""

from __future__ import annotations

import inspect
from contextlib import contextmanager

from vllm_hotpaths.allocate_slots import DecodeStep


def decode_case(manager, request, arguments: dict) -> bool:
    """Whether upstream's call is the decode case: one full-attention group (the manager itself,
    not a subclass) under the unitary or no-prefix-cache coordinator, a running request with no
    copy-on-write tail pending, new tokens and nothing else."""
    from vllm.v1.core import kv_cache_coordinator as coordinators
    from vllm.v1.core.single_type_kv_cache_manager import FullAttentionManager
    from vllm.v1.request import RequestStatus

    managers = manager.coordinator.single_type_managers
    return (len(managers) == 1 and type(managers[0]) is FullAttentionManager
            and type(manager.coordinator) in (coordinators.UnitaryKVCacheCoordinator,
                                              coordinators.KVCacheCoordinatorNoPrefixCache)
            and request.request_id in managers[0].num_cached_block and arguments["num_new_tokens"] > 0
            and request.status == RequestStatus.RUNNING
            and request.request_id not in getattr(managers[0], "_partial_hit_reqs", {})
            and arguments.get("new_computed_blocks") is None
            and not any(arguments.get(k) for k in ("num_new_computed_tokens", "num_external_computed_tokens",
                                                   "num_encoder_tokens", "delay_cache_blocks", "full_sequence_must_fit",
                                                   "reserved_blocks")))


def decode_step(manager, request, arguments: dict) -> DecodeStep:
    single = manager.coordinator.single_type_managers[0]
    return DecodeStep(
        num_computed_tokens=request.num_computed_tokens, num_tokens=request.num_tokens,
        num_new_tokens=arguments["num_new_tokens"], num_lookahead_tokens=arguments.get("num_lookahead_tokens", 0),
        max_model_len=manager.max_model_len, block_size=single.block_size,
        blocks_held=len(single.req_to_blocks.get(request.request_id, ())),
        free_blocks=manager.block_pool.get_num_free_blocks(),
        cached_blocks=single.num_cached_block[request.request_id], enable_caching=manager.enable_caching)


@contextmanager
def watched(manager):
    """[(DecodeStep, blocks returned or None, blocks cached after)] of every decode-case call to
    `manager.allocate_slots` inside the block (the manager's own method, shadowed on it)."""
    method = manager.allocate_slots
    signature = inspect.signature(method)
    found: list[tuple] = []

    def allocate_slots(request, *args, **kwargs):
        arguments = signature.bind(request, *args, **kwargs).arguments
        if not decode_case(manager, request, arguments):
            return method(request, *args, **kwargs)
        step = decode_step(manager, request, arguments)
        result = method(request, *args, **kwargs)
        blocks = None if result is None else len((result.get_block_ids(allow_none=True) or ((),))[0])
        found.append((step, blocks, manager.coordinator.single_type_managers[0].num_cached_block[request.request_id]))
        return result

    manager.allocate_slots = allocate_slots
    try:
        yield found
    finally:
        del manager.allocate_slots
