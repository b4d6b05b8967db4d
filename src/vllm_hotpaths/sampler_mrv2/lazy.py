"""Exact lazy Gumbel-max: the fused sampling pass drawing noise only for the tokens that can win.

From vLLM 0.24 a token's noise has an upper bound, the noise of the smallest uniform the release
draws (`gumbel_noise.noise_bound`: about 21.5 with Philox, 22.9 with murmur3). Every noisy value
`x + g` is computed in fp32, and rounding is monotone, so a token whose `x + bound` rounds below
a noisy value already drawn for the row cannot be the row's largest, nor tie with it: its noise
need not be drawn. 0.22 and 0.23 can draw a noise of +inf (u = 1.0): no bound, no laziness there.

Three kernels, then upstream's last step:

1. `_tops_kernel`, one program per (row, 1024-id block), as upstream's sampling kernel runs: reads
   the block once, processing it as the fused kernel does (penalties, temperature), and keeps its
   largest processed logit with its lowest id; a block holding a NaN keeps +inf;
2. `_threshold_kernel`, one program per row: draws the noise of the token of the row's largest
   top, the threshold `best` (-inf, every block drawn, where that top is +inf: a NaN or a logit
   of +inf; or -inf: a row of -inf);
3. `_draw_kernel`, one program per (row, block): where the block's top plus the bound reaches
   `best`, the fused kernel's block (every id's noise drawn, the 1024-id tile reduced in the
   fused kernel's load layout, which decides where NaNs meet); elsewhere -inf: no id of the block
   can reach `best`, so the block was never upstream's first largest;
4. the first block holding the largest maximum, a NaN counting as the largest (`torch.argmax`, as
   upstream and the fused pass take it).

Greedy rows are drawn whole (no noise). The processed logits, where asked for, are written in
step 1. Each row reports how many of its ids had their noise drawn (`drawn`), the benchmark's
share.

Where it pays (an H200, `ci/gpu/lazy-gumbel.sh`, docs/sampler_mrv2.md#exact-lazy-gumbel): on rows
whose head stands far above the rest; on flat rows it reads the logits once more than the fused
pass and is slower. The plugin installs the fused pass, not this one.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from vllm_hotpaths.gumbel_noise import SMALLEST_UNIFORM, gumbel_noise, noise_bound
from vllm_hotpaths.sampler_mrv2.fast import FusedSamplingPass024, FusedSamplingPass027, FusedSamplingPass031, _penalize
from vllm_hotpaths.sampler_mrv2.reference import BLOCK


@triton.jit
def _processed(logits_ptr, row, row_stride, lanes, inside, slot, t, local_pos_ptr, input_ids_ptr, rep_ptr, freq_ptr,
               pres_ptr, pen_row_ptr, counts_ptr, prompt_bits_ptr, words, vocab_size, CONTIG: tl.constexpr,
               PENALTIES: tl.constexpr, MAX_DRAFTS: tl.constexpr):
    # The fused kernel's processing of some ids of a row: upcast, penalties, temperature.
    offsets = row * row_stride + lanes
    if CONTIG:
        offsets = tl.max_contiguous(offsets, CONTIG)
    x = tl.load(logits_ptr + offsets, mask=inside, other=float("-inf")).to(tl.float32)
    if PENALTIES:
        x = _penalize(x, lanes, inside, row, slot, local_pos_ptr, input_ids_ptr, rep_ptr, freq_ptr, pres_ptr,
                      pen_row_ptr, counts_ptr, prompt_bits_ptr, words, vocab_size, CONTIG, MAX_DRAFTS)
    if t != 0.0 and t != 1.0:
        x = x / t
    return x


@triton.jit
def _tops_kernel(top_ptr, top_id_ptr, processed_ptr, logits_ptr, row_stride, slot_ptr, local_pos_ptr, input_ids_ptr,
                 temp_ptr, rep_ptr, freq_ptr, pres_ptr, pen_row_ptr, counts_ptr, prompt_bits_ptr, words, vocab_size,
                 num_blocks, BLOCK: tl.constexpr, CONTIG: tl.constexpr, PENALTIES: tl.constexpr,
                 MAX_DRAFTS: tl.constexpr, WRITE_PROCESSED: tl.constexpr):
    # Step 1, one program per (row, block): the block's largest processed logit with its lowest id
    # (+inf where the block holds a NaN: drawn whatever the threshold); the processed logits.
    row = tl.program_id(0).to(tl.int64)
    block = tl.program_id(1)
    slot = tl.load(slot_ptr + row)
    t = tl.load(temp_ptr + slot)
    if t != 0.0 or WRITE_PROCESSED:
        lanes = block * BLOCK + tl.arange(0, BLOCK)
        inside = lanes < vocab_size
        x = _processed(logits_ptr, row, row_stride, lanes, inside, slot, t, local_pos_ptr, input_ids_ptr, rep_ptr,
                       freq_ptr, pres_ptr, pen_row_ptr, counts_ptr, prompt_bits_ptr, words, vocab_size, CONTIG,
                       PENALTIES, MAX_DRAFTS)
        if WRITE_PROCESSED:
            tl.store(processed_ptr + row * vocab_size + lanes, x, mask=inside)
        nan = x != x
        top, lane = tl.max(tl.where(nan, float("-inf"), x), axis=0, return_indices=True)
        any_nan = tl.max(nan.to(tl.int32), axis=0) != 0
        tl.store(top_ptr + row * num_blocks + block, tl.where(any_nan, float("inf"), top))
        tl.store(top_id_ptr + row * num_blocks + block, block * BLOCK + lane)


@triton.jit
def _threshold_kernel(best_ptr, top_ptr, top_id_ptr, slot_ptr, pos_ptr, temp_ptr, seed_ptr, num_blocks,
                      BLOCKS: tl.constexpr, NOISE_LOG1P: tl.constexpr, NOISE_MURMUR3: tl.constexpr):
    # Step 2, one program per random row: the noisy value of the token of its largest block top
    # (-inf where that is -inf; a NaN block's +inf gives +inf: every block is then drawn whole).
    row = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + row)
    if tl.load(temp_ptr + slot) != 0.0:
        blocks = tl.arange(0, BLOCKS)
        tops = tl.load(top_ptr + row * num_blocks + blocks, mask=blocks < num_blocks, other=float("-inf"))
        top, k = tl.max(tops, axis=0, return_indices=True)
        if top == float("inf"):
            best = float("-inf")
        else:
            first = tl.full([2], tl.load(top_id_ptr + row * num_blocks + k), tl.int32)
            best = tl.max(top + gumbel_noise(tl.load(seed_ptr + slot), tl.load(pos_ptr + row), first, NOISE_LOG1P,
                                             NOISE_MURMUR3), axis=0)
        tl.store(best_ptr + row, best)


@triton.jit
def _draw_kernel(block_ids_ptr, block_max_ptr, drawn_ptr, best_ptr, top_ptr, logits_ptr, row_stride, slot_ptr, pos_ptr,
                 local_pos_ptr, input_ids_ptr, temp_ptr, seed_ptr, rep_ptr, freq_ptr, pres_ptr, pen_row_ptr,
                 counts_ptr, prompt_bits_ptr, words, vocab_size, num_blocks, BLOCK: tl.constexpr,
                 NOISE_LOG1P: tl.constexpr, NOISE_MURMUR3: tl.constexpr, FLOOR: tl.constexpr, CONTIG: tl.constexpr,
                 PENALTIES: tl.constexpr, MAX_DRAFTS: tl.constexpr):
    # Step 3, one program per (row, block): the fused kernel's block, or -inf where no id of the
    # block can reach the threshold.
    row = tl.program_id(0).to(tl.int64)
    block = tl.program_id(1)
    slot = tl.load(slot_ptr + row)
    t = tl.load(temp_ptr + slot)
    drawn = t == 0.0
    if not drawn:
        bound = noise_bound(NOISE_LOG1P, NOISE_MURMUR3, FLOOR)
        drawn = tl.load(top_ptr + row * num_blocks + block) + bound >= tl.load(best_ptr + row)
    if drawn:
        lanes = block * BLOCK + tl.arange(0, BLOCK)
        inside = lanes < vocab_size
        x = _processed(logits_ptr, row, row_stride, lanes, inside, slot, t, local_pos_ptr, input_ids_ptr, rep_ptr,
                       freq_ptr, pres_ptr, pen_row_ptr, counts_ptr, prompt_bits_ptr, words, vocab_size, CONTIG,
                       PENALTIES, MAX_DRAFTS)
        if t != 0.0:
            x = tl.where(inside, x + gumbel_noise(tl.load(seed_ptr + slot), tl.load(pos_ptr + row), lanes, NOISE_LOG1P,
                                                  NOISE_MURMUR3), float("-inf"))
            tl.atomic_add(drawn_ptr + row, tl.minimum(vocab_size - block * BLOCK, BLOCK))
        top, lane = tl.max(x, axis=0, return_indices=True)
        tl.store(block_ids_ptr + row * num_blocks + block, block * BLOCK + lane)
        tl.store(block_max_ptr + row * num_blocks + block, top)
    else:
        tl.store(block_ids_ptr + row * num_blocks + block, (block * BLOCK).to(tl.int64))
        tl.store(block_max_ptr + row * num_blocks + block, float("-inf"))


def lazy_sample(logits, slots, pos, local_pos, input_ids, temperature, seeds, repetition, frequency, presence,
                penalty_rows, counts, prompt_bits, noise: tuple[bool, bool], raw: bool, penalized: bool, drafts: int,
                write: bool):
    """`_tops_kernel`, `_threshold_kernel` and `_draw_kernel` over the rows of `logits`
    (`fast.fused_sample`'s arguments; `noise` a bounded release's), then the first block holding
    the largest maximum: (ids int64 [rows], the processed logits fp32 or None where not `write`,
    ids whose noise was drawn, per row)."""
    n, vocab_size = logits.shape
    blocks = triton.cdiv(vocab_size, BLOCK)
    device = logits.device
    top = torch.empty((n, blocks), dtype=torch.float32, device=device)
    top_id = torch.empty((n, blocks), dtype=torch.int32, device=device)
    best = torch.empty(n, dtype=torch.float32, device=device)
    block_ids = torch.empty((n, blocks), dtype=torch.int64, device=device)
    block_max = torch.empty((n, blocks), dtype=torch.float32, device=device)
    drawn = torch.zeros(n, dtype=torch.int32, device=device)
    out = torch.empty((n, vocab_size), dtype=torch.float32, device=device) if write else None
    if n:
        common = dict(BLOCK=BLOCK, CONTIG=0 if raw else 4, PENALTIES=penalized,
                      MAX_DRAFTS=triton.next_power_of_2(drafts) if drafts else 0)
        penalties = (repetition, frequency, presence, penalty_rows, counts, prompt_bits, prompt_bits.shape[1],
                     vocab_size, blocks)
        _tops_kernel[(n, blocks)](top, top_id, out if write else top, logits, logits.stride(0), slots, local_pos,
                                  input_ids, temperature, *penalties, WRITE_PROCESSED=write, **common)
        _threshold_kernel[(n,)](best, top, top_id, slots, pos, temperature, seeds, blocks,
                                BLOCKS=triton.next_power_of_2(blocks), NOISE_LOG1P=noise[0], NOISE_MURMUR3=noise[1])
        _draw_kernel[(n, blocks)](block_ids, block_max, drawn, best, top, logits, logits.stride(0), slots, pos,
                                  local_pos, input_ids, temperature, seeds, *penalties, NOISE_LOG1P=noise[0],
                                  NOISE_MURMUR3=noise[1], FLOOR=SMALLEST_UNIFORM[noise], **common)
    return block_ids.gather(-1, block_max.argmax(-1, keepdim=True)).view(-1), out, drawn


class _Lazy:
    """The fused pass of a bounded release with its sampling through `lazy_sample`."""

    last_drawn = None  # ids drawn per row in the last call (the benchmark's share)

    def sample_rows(self, source, row_info, raw: bool, penalized: bool, drafts: int, write: bool):
        state, ref = self.state, self.reference
        ids, out, self.last_drawn = lazy_sample(source, *row_info, self.temperature, self.seed, *self.penalties,
                                                state.row_of_device, state.counts, state.prompt_bits,
                                                noise=(ref.NOISE_LOG1P, ref.NOISE_MURMUR3), raw=raw,
                                                penalized=penalized, drafts=drafts, write=write)
        return ids, out


class LazySamplingPass024(_Lazy, FusedSamplingPass024):
    pass


class LazySamplingPass027(_Lazy, FusedSamplingPass027):
    pass


class LazySamplingPass031(_Lazy, FusedSamplingPass031):
    pass

