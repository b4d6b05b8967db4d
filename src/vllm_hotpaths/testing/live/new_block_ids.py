"""The installed vLLM's own `new_block_ids`: the ids a scheduler's KV cache managers hold (each
full-attention manager's list, in the coordinator's order), and the ids its block pool hands
out, in order (`allocations`)."""

from __future__ import annotations

from contextlib import contextmanager


def held(scheduler) -> list[int]:
    return [i for m in scheduler.kv_cache_manager.coordinator.single_type_managers
            for i in getattr(m, "new_block_ids", ())]


@contextmanager
def allocations(scheduler):
    """The ids of every block the scheduler's pool allocates inside the block, in order."""
    pool = scheduler.kv_cache_manager.block_pool
    found: list[int] = []
    take = pool.get_new_blocks

    def counted(num_blocks):
        blocks = take(num_blocks)
        found.extend(b.block_id for b in blocks)
        return blocks

    pool.get_new_blocks = counted
    try:
        yield found
    finally:
        del pool.get_new_blocks
