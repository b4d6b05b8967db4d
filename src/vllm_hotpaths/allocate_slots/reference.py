"""Upstream's semantics, frozen: `KVCacheManager.allocate_slots` for a decode step, given the
`DecodeStep` read before the call.

`DecodeAllocation021`: vLLM 0.21.0 on (through 0.34.x the decode case keeps these semantics; the
code around them moved, `fast.Layout`). The slots needed are those of the computed tokens
(capped at the model's length), the new tokens and the lookahead, again capped at the model's
length; blocks are taken for what the request does not hold yet, or none at all when the pool
has fewer free blocks than that. With prefix caching, the full blocks of the computed and new
tokens, capped at the known tokens (drafts are not cached), are cached where that reaches a
block the request has not cached yet.
"""

from __future__ import annotations

from vllm_hotpaths.allocate_slots import Decision, DecodeStep


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class DecodeAllocation021:
    def decide(self, step: DecodeStep) -> Decision:
        if step.num_new_tokens <= 0:
            raise ValueError("num_new_tokens must be greater than 0 when there are no external computed tokens")
        computed = min(step.num_computed_tokens, step.max_model_len)
        slots = min(computed + step.num_new_tokens + step.num_lookahead_tokens, step.max_model_len)
        needed = max(cdiv(slots, step.block_size) - step.blocks_held, 0)
        if needed > step.free_blocks:
            return Decision(None, None)
        if not step.enable_caching:
            return Decision(needed, None)
        cached = min(computed + step.num_new_tokens, step.num_tokens)
        return Decision(needed, cached if cached // step.block_size > step.cached_blocks else None)
