"""`KVCacheManager.allocate_slots` in a decode step: the KV blocks the scheduler gives a running
request for the tokens it computes next, called for every running request at every step
(the scheduler's single largest per-request cost: about 40% of `schedule()` on the CPU machine
at B = 1,024, docs/allocate_slots.md). Upstream passes every call through the coordinator and
each KV cache group's manager, about 18 frames; in the common case (one full-attention group, a
running request, no new prefix hits, external or encoder tokens) the work is a little arithmetic,
at most a few blocks from the pool, and at a block boundary the caching of the full block.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DecodeStep:
    """What a decode step's allocation depends on, read before the call."""

    num_computed_tokens: int
    num_tokens: int  # the request's known tokens (prompt and outputs, not drafts)
    num_new_tokens: int  # to compute this step (with drafts)
    num_lookahead_tokens: int
    max_model_len: int
    block_size: int
    blocks_held: int
    free_blocks: int
    cached_blocks: int  # the manager's num_cached_block for the request
    enable_caching: bool


@dataclass(frozen=True)
class Decision:
    new_blocks: int | None  # None: not enough free blocks (nothing allocated, nothing cached)
    cache_to: int | None  # the tokens whose full blocks are cached now; None: no new full block
