"""Frozen references of vLLM's recovered-token sampling, as Triton kernels (so each device runs
upstream's arithmetic: on CUDA Triton's fp32 `/` is approximate) and as plain torch for the CPU.

- `DivisionReference`, vLLM 0.16.0: one program per (request, position) loads the whole vocabulary
  padded to a power of two and takes `argmax(residual / q)`.
- `ReciprocalReference`, vLLM 0.17.0 (PR #34974; unchanged through 0.33.0): the host takes `inv_q = q.reciprocal()`; the
  kernel walks the vocabulary in tiles of `tiles.block` lanes (8192 upstream), scores
  `residual * inv_q`, and keeps a tile's maximum only if it is strictly greater (earlier tiles win
  ties).
Both keep every id in [0, V): NaN scores and lanes past V never win (see the package docstring).
Offsets are computed in the index type as upstream does (int32 for an int32 `cu_num_draft_tokens`,
so like upstream the references need num_tokens * V < 2**31 there).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from vllm_hotpaths.recovered_tokens import Tiles, check_inputs

UPSTREAM_BLOCK = 8192  # upstream's tile width from 0.17


@triton.jit
def _residual(target_ptr, draft_ptr, draft_id, row, lanes, inside, NO_DRAFT_PROBS: tl.constexpr):
    """max(target - draft, 0) over `lanes` (NaN kept), or the target with the draft id's lane at 0."""
    if NO_DRAFT_PROBS:
        return tl.load(target_ptr + row + lanes, mask=inside & (lanes != draft_id), other=0.0)
    target = tl.load(target_ptr + row + lanes, mask=inside, other=0.0)
    draft = tl.load(draft_ptr + row + lanes, mask=inside, other=0.0)
    return tl.maximum(target - draft, 0.0, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _span(cu_ptr, req):
    """(first token, draft count) of request `req` from the running sum of draft counts."""
    start = tl.load(cu_ptr + req - 1, mask=req > 0, other=0)
    return start, tl.load(cu_ptr + req) - start


@triton.jit
def _contestants(score, inside):
    """Scores that may win: NaN and lanes past the vocabulary become -inf."""
    return tl.where(inside & (score == score), score, float("-inf"))


@triton.jit
def _division_kernel(out_ptr, cu_ptr, draft_ids_ptr, draft_probs_ptr, target_ptr, q_ptr,
                     vocab_size, PADDED_VOCAB: tl.constexpr, NO_DRAFT_PROBS: tl.constexpr):
    req = tl.program_id(0)
    pos = tl.program_id(1)
    start, count = _span(cu_ptr, req)
    if pos >= count:
        return
    token = start + pos
    lanes = tl.arange(0, PADDED_VOCAB)
    inside = lanes < vocab_size
    draft_id = tl.load(draft_ids_ptr + token)
    residual = _residual(target_ptr, draft_probs_ptr, draft_id, token * vocab_size, lanes, inside,
                         NO_DRAFT_PROBS)
    q = tl.load(q_ptr + req * vocab_size + lanes, mask=inside, other=1.0)
    score = _contestants(residual / q, inside)
    tl.store(out_ptr + token, tl.argmax(score, axis=0))


@triton.jit
def _reciprocal_kernel(out_ptr, cu_ptr, draft_ids_ptr, draft_probs_ptr, target_ptr, inv_q_ptr,
                       vocab_size, BLOCK: tl.constexpr, NO_DRAFT_PROBS: tl.constexpr,
                       INTERPRETED_VOCAB: tl.constexpr):
    req = tl.program_id(0)
    pos = tl.program_id(1)
    start, count = _span(cu_ptr, req)
    if pos >= count:
        return
    token = start + pos
    draft_id = tl.load(draft_ids_ptr + token)
    row = token * vocab_size  # offsets in the index type, as upstream (int32 for int32 `cu`)
    noise_row = req * vocab_size
    best = float("-inf")
    best_id = 0
    # The bound: see `interpreted_bound` (chosen in place: the interpreter makes every assigned
    # value a tensor).
    for first in range(0, INTERPRETED_VOCAB if INTERPRETED_VOCAB > 0 else vocab_size, BLOCK):
        lanes = first + tl.arange(0, BLOCK)
        inside = lanes < vocab_size
        residual = _residual(target_ptr, draft_probs_ptr, draft_id, row, lanes, inside, NO_DRAFT_PROBS)
        inv_q = tl.load(inv_q_ptr + noise_row + lanes, mask=inside, other=0.0)
        tile_best, tile_id = tl.max(_contestants(residual * inv_q, inside), axis=0, return_indices=True)
        if tile_best > best:
            best = tile_best
            best_id = first + tile_id
    tl.store(out_ptr + token, best_id)


def interpreted_bound(target_probs, bound: int) -> int:
    """A loop bound as a compile-time constant for Triton's interpreter (CPU tensors), 0 on CUDA.
    Some interpreter and NumPy pairs (Triton 3.6 with NumPy 2.5) cannot loop to a runtime bound:
    `range()` converts the bound's one-element array with `__index__`, which NumPy 2.5 refuses.
    Compiled kernels keep the runtime bound, so they are not compiled once per size."""
    return 0 if target_probs.is_cuda else bound


def draft_pointer(draft_probs, target_probs):
    """What the kernels get for `draft_probs`: compiled Triton cannot hand a None on to a helper,
    so without draft probabilities the (unread) target takes its place."""
    return target_probs if draft_probs is None else draft_probs


class DivisionReference:
    """vLLM 0.16.0: untiled, `residual / q`."""

    division = True

    def __init__(self, device, tiles: Tiles | None = None):
        self.device = torch.device(device)

    def recover(self, max_spec_len, num_draft_tokens, cu_num_draft_tokens, draft_token_ids,
                draft_probs, target_probs, q):
        check_inputs(max_spec_len, num_draft_tokens, cu_num_draft_tokens, draft_token_ids,
                     draft_probs, target_probs, q)
        out = torch.empty_like(draft_token_ids)
        if out.numel():
            vocab = target_probs.shape[1]
            _division_kernel[(len(num_draft_tokens), max_spec_len)](
                out, cu_num_draft_tokens, draft_token_ids, draft_pointer(draft_probs, target_probs),
                target_probs, q, vocab,
                PADDED_VOCAB=triton.next_power_of_2(vocab), NO_DRAFT_PROBS=draft_probs is None)
        return out


class ReciprocalReference:
    """vLLM 0.17.0 on: tiles of `tiles.block` lanes (8192 upstream), `residual * q.reciprocal()`."""

    division = False

    def __init__(self, device, tiles: Tiles | None = None):
        self.device = torch.device(device)
        self.block = (tiles or Tiles(UPSTREAM_BLOCK)).block

    def recover(self, max_spec_len, num_draft_tokens, cu_num_draft_tokens, draft_token_ids,
                draft_probs, target_probs, q):
        check_inputs(max_spec_len, num_draft_tokens, cu_num_draft_tokens, draft_token_ids,
                     draft_probs, target_probs, q)
        out = torch.empty_like(draft_token_ids)
        if out.numel():
            _reciprocal_kernel[(len(num_draft_tokens), max_spec_len)](
                out, cu_num_draft_tokens, draft_token_ids, draft_pointer(draft_probs, target_probs),
                target_probs, q.reciprocal(),
                target_probs.shape[1], BLOCK=self.block, NO_DRAFT_PROBS=draft_probs is None,
                INTERPRETED_VOCAB=interpreted_bound(target_probs, target_probs.shape[1]))
        return out


def torch_recover(division: bool, num_draft_tokens, draft_token_ids, draft_probs, target_probs, q):
    """The same semantics in plain torch on the CPU (IEEE division there, as in Triton's
    interpreter): a second, independent statement of what the kernels compute."""
    rows = torch.repeat_interleave(torch.arange(len(num_draft_tokens)),
                                   torch.tensor(list(num_draft_tokens), dtype=torch.int64))
    noise = q[rows]
    if draft_probs is None:
        residual = target_probs.clone()
        tokens = torch.arange(len(draft_token_ids))
        ids = draft_token_ids.long()
        inside = (ids >= 0) & (ids < target_probs.shape[1])
        residual[tokens[inside], ids[inside]] = 0.0
    else:
        residual = torch.clamp_min(target_probs - draft_probs, 0.0)  # NaN stays NaN
    score = residual / noise if division else residual * noise.reciprocal()
    score = torch.where(torch.isnan(score), float("-inf"), score)
    if score.shape[0] == 0:
        return torch.empty_like(draft_token_ids)
    return score.argmax(dim=1).to(draft_token_ids.dtype)
