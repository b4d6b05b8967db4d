"""`decode@0.21.0`: a decode step's `allocate_slots` in one frame, for vLLM 0.21.0 to 0.22.x.

It takes the call only where upstream's work is the decode case: no new prefix-cache hit, no
external or encoder tokens, no delayed caching and no full-sequence admission check; a request
the manager already holds (`num_cached_block` has it: it is running); exactly one KV cache group,
managed by a `FullAttentionManager` itself (not a subclass, whose skipped blocks may differ),
under the unitary or the no-prefix-cache coordinator. Every other call goes to upstream's method.
There it does what upstream does, in upstream's order: the same blocks from the same pool call,
the same record of new block ids, the caching through the manager's own `cache_blocks`, and the
manager's one shared empty `KVCacheBlocks` where no block is new.
"""

from __future__ import annotations

from vllm_hotpaths import vllm_env
from vllm_hotpaths.allocate_slots.reference import DecodeAllocation021


class DecodeAllocateSlots021(DecodeAllocation021):
    def method(self, upstream):
        """The replacement for `KVCacheManager.allocate_slots`, `upstream` taking the rest."""
        coordinator = vllm_env.import_vllm("vllm.v1.core.kv_cache_coordinator")
        blocks_type = vllm_env.import_vllm("vllm.v1.core.kv_cache_manager").KVCacheBlocks
        full = vllm_env.import_vllm("vllm.v1.core.single_type_kv_cache_manager").FullAttentionManager
        interface = vllm_env.import_vllm("vllm.v1.kv_cache_interface")
        # the specs whose managers record new block ids (for KV cache zeroing)
        recorded = tuple(getattr(interface, n) for n in ("FullAttentionSpec", "TQFullAttentionSpec") if hasattr(interface, n))
        coordinators = (coordinator.UnitaryKVCacheCoordinator, coordinator.KVCacheCoordinatorNoPrefixCache)

        def allocate_slots(self, request, num_new_tokens, num_new_computed_tokens=0, new_computed_blocks=None,
                           num_lookahead_tokens=0, num_external_computed_tokens=0, delay_cache_blocks=False,
                           num_encoder_tokens=0, full_sequence_must_fit=False):
            managers = self.coordinator.single_type_managers
            manager = managers[0]
            request_id = request.request_id
            if (new_computed_blocks is not None or num_new_computed_tokens or num_external_computed_tokens
                    or num_encoder_tokens or delay_cache_blocks or full_sequence_must_fit or not num_new_tokens
                    or len(managers) != 1 or type(manager) is not full or type(self.coordinator) not in coordinators
                    or request_id not in manager.num_cached_block):
                return upstream(self, request, num_new_tokens, num_new_computed_tokens, new_computed_blocks,
                                num_lookahead_tokens, num_external_computed_tokens, delay_cache_blocks,
                                num_encoder_tokens, full_sequence_must_fit)
            max_len = self.max_model_len
            computed = request.num_computed_tokens
            if computed > max_len:
                computed = max_len
            slots = computed + num_new_tokens + num_lookahead_tokens
            if slots > max_len:
                slots = max_len
            held = manager.req_to_blocks[request_id]
            needed = -(-slots // manager.block_size) - len(held)
            new = None
            if needed > 0:
                pool = self.block_pool
                if needed > pool.free_block_queue.num_free_blocks:
                    return None
                new = pool.get_new_blocks(needed)
                held.extend(new)
                if type(manager.kv_cache_spec) in recorded:
                    manager.new_block_ids.extend(b.block_id for b in new)
            if self.enable_caching:
                cached = computed + num_new_tokens
                if cached > request.num_tokens:
                    cached = request.num_tokens
                if manager.num_cached_block[request_id] < cached // manager.block_size:
                    manager.cache_blocks(request, cached)
            return blocks_type((new,)) if new else self.empty_kv_cache_blocks

        allocate_slots.hotpaths_upstream = upstream
        return allocate_slots
