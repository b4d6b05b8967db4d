"""Upstream's penalty arithmetic on CUDA in two Triton kernels instead of about a dozen torch ops.

Upstream (`apply_penalties`) builds two `[B, V + 1]` int64 count tensors (prompt and output
tokens; 156 MB each at B = 128, V = 151,936), their `> 0` masks, the repetition step (vLLM's
compiled op on contiguous CUDA logits), then `logits -= frequency * counts` and
`logits -= presence * mask`, each op a pass over `[B, V]`. Here:
- `_count_tokens` adds each row's output ids into a persistent int32 `[B, V]` scratch and sets a
  flag bit for its prompt ids (atomics; the pad V and ids outside [0, V) are skipped); in a steady
  decode step it also stores each row's one new id into the output-token tensor (no separate
  write);
- `_penalize` reads logits and counts once, does upstream's three steps per entry in upstream's
  order and rounding, writes the logits, and zeroes the counts it read, so the scratch is all
  zero again for the next call.

The arithmetic, entry by entry, is exactly the reference's (`reference.apply_penalties_` with the
compiled op's repetition step): `x / r` (IEEE division) where repeated and `x > 0`, else `x * r`
where repeated; then `x - f * count` and `x - p * (count > 0)`, each product rounded before the
subtraction (no fused multiply-add), over every entry (a `-0.0` logit meets `-p * 0` everywhere,
as upstream's whole-row subtraction does).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from vllm_hotpaths.triton_launch import Relauncher, unspecialized

PROMPT_BIT = tl.constexpr(1 << 30)  # set once a prompt id is seen; output counts stay below it
COUNT_BLOCK = 1024
PENALIZE_BLOCK = 2048


# Both kernels are relaunched (`triton_launch`): no argument value is specialized on.
@triton.jit(**unspecialized("counts_ptr", "output_ptr", "output_stride_row", "output_stride_col", "output_len",
                            "prompt_ptr", "prompt_stride_row", "prompt_stride_col", "prompt_len", "new_ptr",
                            "num_new", "vocab_size"))
def _count_tokens(counts_ptr, output_ptr, output_stride_row, output_stride_col, output_len, prompt_ptr,
                  prompt_stride_row, prompt_stride_col, prompt_len, new_ptr, num_new, vocab_size,
                  BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offsets = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    counts_row = counts_ptr + row.to(tl.int64) * vocab_size
    at = output_ptr + row.to(tl.int64) * output_stride_row + offsets * output_stride_col
    ids = tl.load(at, mask=offsets < output_len, other=vocab_size)
    if row < num_new:  # the row's new id: written into the output tensor and counted here
        new_here = offsets == tl.load(new_ptr + row)
        ids = tl.where(new_here, tl.load(new_ptr + num_new + row), ids)
        tl.store(at, ids, mask=new_here)
    tl.atomic_add(counts_row + ids, 1, mask=(ids >= 0) & (ids < vocab_size), sem="relaxed")
    ids = tl.load(prompt_ptr + row.to(tl.int64) * prompt_stride_row + offsets * prompt_stride_col,
                  mask=offsets < prompt_len, other=vocab_size)
    tl.atomic_or(counts_row + ids, PROMPT_BIT, mask=(ids >= 0) & (ids < vocab_size), sem="relaxed")


@triton.jit(**unspecialized("logits_ptr", "counts_ptr", "presence_ptr", "frequency_ptr", "repetition_ptr",
                            "vocab_size"))
def _penalize(logits_ptr, counts_ptr, presence_ptr, frequency_ptr, repetition_ptr, vocab_size,
              BLOCK: tl.constexpr):
    row = tl.program_id(0)
    lanes = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = lanes < vocab_size
    at = row.to(tl.int64) * vocab_size + lanes
    x = tl.load(logits_ptr + at, mask=inside, other=0.0)
    seen = tl.load(counts_ptr + at, mask=inside, other=0)
    count = seen & (PROMPT_BIT - 1)
    r = tl.load(repetition_ptr + row)
    penalized = tl.where(x > 0, tl.math.div_rn(x, r), x * r)
    x = tl.where(seen != 0, penalized, x)
    x = x - tl.load(frequency_ptr + row) * count.to(tl.float32)
    x = x - tl.load(presence_ptr + row) * (count > 0).to(tl.float32)
    tl.store(logits_ptr + at, x, mask=inside)
    tl.store(counts_ptr + at, tl.zeros_like(seen), mask=inside & (seen != 0))


def fits(logits, prompt_tokens, output_tokens, presence, frequency, repetition) -> bool:
    """Whether the fused kernels take this call: contiguous float32 CUDA logits (where upstream
    runs its compiled repetition op), integer token tensors and float32 penalties, one row each
    per logits row, all on the logits' device."""
    rows = logits.shape[0] if logits.dim() == 2 else -1
    return (logits.is_cuda and logits.dtype == torch.float32 and logits.is_contiguous() and rows >= 0
            and all(t.dim() == 2 and t.shape[0] == rows and t.device == logits.device
                    and t.dtype in (torch.int64, torch.int32) for t in (prompt_tokens, output_tokens))
            and all(t.dtype == torch.float32 and t.shape == (rows,) and t.device == logits.device
                    for t in (presence, frequency, repetition)))


_launch_count_tokens = Relauncher(_count_tokens)
# No fused multiply-add: upstream rounds each product before subtracting it.
_launch_penalize = Relauncher(_penalize, enable_fp_fusion=False)


def apply_penalties(logits, prompt_tokens, output_tokens, presence, frequency, repetition,
                    counts: torch.Tensor, blocks: tuple[int, int] = (COUNT_BLOCK, PENALIZE_BLOCK),
                    new: torch.Tensor | None = None) -> torch.Tensor:
    """Penalize `logits` in place as upstream's `apply_penalties` does; returns logits.
    `counts`: int32 scratch of at least `[B, V]` elements, all zero (it is left all zero).
    `blocks`: token ids per counting program and lanes per penalizing program (powers of two;
    results never depend on them: tests shrink them to cross block boundaries).
    `new`: a steady decode step's write, done first by the counting kernel: int64 `[2, n]` on the
    logits' device, row r < n's new id `new[1, r]` stored at `output_tokens[r, new[0, r]]` (a
    column inside `output_tokens`)."""
    num_rows, vocab_size = logits.shape
    if num_rows == 0 or vocab_size == 0:
        return logits
    count_block, penalize_block = blocks
    longest = max(output_tokens.shape[1], prompt_tokens.shape[1])
    num_new = 0 if new is None else new.shape[1]
    if num_new and not 0 < output_tokens.shape[1]:
        raise ValueError("a new id for each row needs an output-token tensor with columns")
    if longest:
        _launch_count_tokens(
            (num_rows, triton.cdiv(longest, count_block)), counts, output_tokens, *output_tokens.stride(),
            output_tokens.shape[1], prompt_tokens, *prompt_tokens.stride(), prompt_tokens.shape[1],
            output_tokens if new is None else new, num_new, vocab_size, count_block)
    _launch_penalize((num_rows, triton.cdiv(vocab_size, penalize_block)), logits, counts, presence, frequency,
                     repetition, vocab_size, penalize_block)
    return logits
