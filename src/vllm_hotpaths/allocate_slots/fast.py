"""`decode@0.21.0`: a decode step's `allocate_slots` in one frame, for vLLM 0.21.0 to 0.34.x.

It takes the call only where upstream's work is the decode case: no new prefix-cache hit, no
external or encoder tokens, no delayed caching, no full-sequence admission check, no blocks held
back for other requests; a running request the manager already holds (`num_cached_block` has it)
and no copy-on-write tail pending for it; exactly one KV cache group, managed by a
`FullAttentionManager` itself (not a subclass, whose skipped blocks may differ), under the unitary
or the no-prefix-cache coordinator. Every other call goes to upstream's method with its arguments
as given. There it does what upstream does, in upstream's order: the same blocks from the same
pool call, the same record of new block ids, and the manager's one shared empty `KVCacheBlocks`
where no block is new. The caching goes through the coordinator's own `cache_blocks`, skipped only
where that call provably returns at once: caching off, or no block of the tokens to cache is
full and uncached yet (with, from 0.26, the manager's block size its hash block size, or it also
caches a partial tail). The release's code differs only in the data of `Layout`.
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm_hotpaths import vllm_env
from vllm_hotpaths.allocate_slots.reference import DecodeAllocation021
from vllm_hotpaths.registry import version_key


@dataclass(frozen=True)
class Layout:
    """Where a release's decode path differs."""

    recorded_specs: tuple[str, ...] | None  # KV specs whose new block ids are recorded; None: the manager's flag
    caching_flag_on_manager: bool  # the coordinator skips a manager whose enable_caching is off (0.30)
    partial_tail: bool  # a FullAttentionManager also caches a partial tail block (0.26)


LAYOUTS = {
    "0.21.0": Layout(("FullAttentionSpec", "TQFullAttentionSpec"), False, False),
    "0.23.0": Layout(("FullAttentionSpec", "TQFullAttentionSpec", "MLAAttentionSpec"), False, False),
    "0.24.0": Layout(("FullAttentionSpec", "TQFullAttentionSpec", "MLAAttentionSpec", "HiddenStateCacheSpec"),
                     False, False),
    "0.26.0": Layout(None, False, True),
    "0.30.0": Layout(None, True, True),
}


def layout_of(version: str) -> Layout:
    first = max((key for key in LAYOUTS if version_key(key) <= version_key(version)), key=version_key, default=None)
    if first is None:
        raise LookupError(f"allocate_slots' decode fast path starts at 0.21.0, not {version}")
    return LAYOUTS[first]


class DecodeAllocateSlots021(DecodeAllocation021):
    def method(self, upstream, version: str | None = None):
        """The replacement for `KVCacheManager.allocate_slots`, `upstream` taking the rest, for the
        installed vLLM (or `version`'s layout)."""
        layout = layout_of(version or vllm_env.installed_version())
        coordinator = vllm_env.import_vllm("vllm.v1.core.kv_cache_coordinator")
        blocks_type = vllm_env.import_vllm("vllm.v1.core.kv_cache_manager").KVCacheBlocks
        full = vllm_env.import_vllm("vllm.v1.core.single_type_kv_cache_manager").FullAttentionManager
        running = vllm_env.import_vllm("vllm.v1.request").RequestStatus.RUNNING
        interface = vllm_env.import_vllm("vllm.v1.kv_cache_interface")
        recorded = None if layout.recorded_specs is None else \
            tuple(getattr(interface, n) for n in layout.recorded_specs if hasattr(interface, n))
        coordinators = (coordinator.UnitaryKVCacheCoordinator, coordinator.KVCacheCoordinatorNoPrefixCache)
        no_pending = frozenset()

        def allocate_slots(self, request, num_new_tokens, num_new_computed_tokens=0, new_computed_blocks=None,
                           num_lookahead_tokens=0, *more, **named):
            managers = self.coordinator.single_type_managers
            manager = managers[0]
            request_id = request.request_id
            if (more or named or new_computed_blocks is not None or num_new_computed_tokens or not num_new_tokens
                    or len(managers) != 1 or type(manager) is not full or type(self.coordinator) not in coordinators
                    or request_id not in manager.num_cached_block or request.status is not running
                    or request_id in getattr(manager, "_partial_hit_reqs", no_pending)):
                return upstream(self, request, num_new_tokens, num_new_computed_tokens, new_computed_blocks,
                                num_lookahead_tokens, *more, **named)
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
                if (manager._record_new_block_ids if recorded is None else type(manager.kv_cache_spec) in recorded):
                    manager.new_block_ids.extend(b.block_id for b in new)
            if manager.enable_caching if layout.caching_flag_on_manager else self.enable_caching:
                cached = computed + num_new_tokens
                if cached > request.num_tokens:
                    cached = request.num_tokens
                if manager.num_cached_block[request_id] < cached // manager.block_size or (
                        layout.partial_tail and manager.block_size != self.block_pool.hash_block_size):
                    self.coordinator.cache_blocks(request, cached)
            return blocks_type((new,)) if new else self.empty_kv_cache_blocks

        allocate_slots.hotpaths_upstream = upstream
        return allocate_slots
