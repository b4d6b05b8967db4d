"""Exact lazy Gumbel-max: the fused sampling pass drawing noise only for the tokens that can win.

From vLLM 0.24 a token's noise has an upper bound, the noise of the smallest uniform the release
draws (`gumbel_noise.noise_bound`: about 21.5 with Philox, 22.9 with murmur3). Every noisy value
`x + g` is computed in fp32, and rounding is monotone, so a token whose `x + bound` rounds below
a noisy value already drawn for the row cannot be the row's largest, nor tie with it: its noise
need not be drawn. 0.22 and 0.23 can draw a noise of +inf (u = 1.0): no bound, no laziness there.

`_lazy_row_kernel`, one program per row:

1. reads the row once, processing it as the fused kernel does (penalties, temperature), and keeps
   the largest processed logit of each `SUB`-id slice, and of the row with its lowest id. A 1024-id
   block (upstream's) holding a NaN or +inf is marked to be drawn whole (its slices' tops +inf);
2. draws the noise of the row's largest logit's token: the first threshold `best`;
3. goes through the blocks in order. A marked block is drawn whole and reduced as upstream reduces
   it (`tl.max` over the 1024-id tile, in the fused kernel's load layout: where NaNs meet, that
   order decides the id). In the others, a slice is read again and drawn only where its top plus
   the bound reaches `best`; the block's maximum is the largest drawn value, the lowest id among
   equals (the order of a reduction without NaN does not matter). `best` rises with each drawn
   block;
4. takes the first block holding a NaN, else the first holding the largest maximum
   (`torch.argmax` of upstream's block maxima), and writes its id.

A block with no slice drawn keeps -inf: its true maximum is below `best`, so it was never the
first largest. Greedy rows, and rows whose first threshold is -inf (every logit -inf), are drawn
whole. The processed logits, where asked for, are written as the rows are processed (a greedy
row's in step 3). Each row reports how many of its ids had their noise drawn (`drawn`), the benchmark's share.
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
def _lazy_row_kernel(ids_ptr, drawn_ptr, tops_ptr, processed_ptr, logits_ptr, row_stride, slot_ptr, pos_ptr, local_pos_ptr,
                     input_ids_ptr, temp_ptr, seed_ptr, rep_ptr, freq_ptr, pres_ptr, pen_row_ptr, counts_ptr,
                     prompt_bits_ptr, words, vocab_size, num_blocks, BLOCK: tl.constexpr, SUB: tl.constexpr,
                     NOISE_LOG1P: tl.constexpr, NOISE_MURMUR3: tl.constexpr, FLOOR: tl.constexpr,
                     CONTIG: tl.constexpr, PENALTIES: tl.constexpr, MAX_DRAFTS: tl.constexpr,
                     WRITE_PROCESSED: tl.constexpr):
    SUBS: tl.constexpr = BLOCK // SUB
    row = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + row)
    t = tl.load(temp_ptr + slot)
    seed = tl.load(seed_ptr + slot)
    pos = tl.load(pos_ptr + row)
    tops = tops_ptr + row * num_blocks * SUBS
    # 1. each slice's top (+inf throughout a block to draw whole), the row's top and its id
    top = float("-inf")
    top_id = 0
    if t != 0.0:
        for b in range(num_blocks):
            lanes = b * BLOCK + tl.arange(0, BLOCK)
            inside = lanes < vocab_size
            x = _processed(logits_ptr, row, row_stride, lanes, inside, slot, t, local_pos_ptr, input_ids_ptr, rep_ptr,
                           freq_ptr, pres_ptr, pen_row_ptr, counts_ptr, prompt_bits_ptr, words, vocab_size, CONTIG,
                           PENALTIES, MAX_DRAFTS)
            if WRITE_PROCESSED:
                tl.store(processed_ptr + row * vocab_size + lanes, x, mask=inside)
            whole = tl.max(((x != x) | (x == float("inf"))).to(tl.int32), axis=0) != 0
            slice_tops = tl.max(tl.reshape(x, [SUBS, SUB]), axis=1)
            tl.store(tops + b * SUBS + tl.arange(0, SUBS), tl.where(whole, float("inf"), slice_tops))
            block_top, lane = tl.max(tl.where((x != x) | (x == float("inf")), float("-inf"), x), axis=0,
                                     return_indices=True)
            if block_top > top:
                top = block_top
                top_id = b * BLOCK + lane
    # 2. the first threshold: the drawn value of the row's top token
    best = float("-inf")
    bound = noise_bound(NOISE_LOG1P, NOISE_MURMUR3, FLOOR)
    drawn = 0
    if t != 0.0 and top != float("-inf"):
        first = tl.full([2], top_id, tl.int32)
        best = tl.max(top + gumbel_noise(seed, pos, first, NOISE_LOG1P, NOISE_MURMUR3), axis=0)
        drawn = 1
    # 3. each block's maximum over what can win, 4. the first largest
    win = float("-inf")
    win_id = 0
    found_nan = False
    for b in range(num_blocks):
        whole = (t == 0.0) | (best == float("-inf"))
        if not whole:
            whole = tl.load(tops + b * SUBS) == float("inf")
        if whole:
            lanes = b * BLOCK + tl.arange(0, BLOCK)
            inside = lanes < vocab_size
            x = _processed(logits_ptr, row, row_stride, lanes, inside, slot, t, local_pos_ptr, input_ids_ptr, rep_ptr,
                           freq_ptr, pres_ptr, pen_row_ptr, counts_ptr, prompt_bits_ptr, words, vocab_size, CONTIG,
                           PENALTIES, MAX_DRAFTS)
            if WRITE_PROCESSED and t == 0.0:  # (a random row's were written in the first pass)
                tl.store(processed_ptr + row * vocab_size + lanes, x, mask=inside)
            if t != 0.0:
                x = tl.where(inside, x + gumbel_noise(seed, pos, lanes, NOISE_LOG1P, NOISE_MURMUR3), float("-inf"))
                drawn += BLOCK
            block_max, lane = tl.max(x, axis=0, return_indices=True)
            block_id = b * BLOCK + lane
        else:
            block_max = float("-inf")
            block_id = b * BLOCK
            for s in range(SUBS):
                if tl.load(tops + b * SUBS + s) + bound >= best:
                    lanes = b * BLOCK + s * SUB + tl.arange(0, SUB)
                    inside = lanes < vocab_size
                    x = _processed(logits_ptr, row, row_stride, lanes, inside, slot, t, local_pos_ptr, input_ids_ptr,
                                   rep_ptr, freq_ptr, pres_ptr, pen_row_ptr, counts_ptr, prompt_bits_ptr, words,
                                   vocab_size, 0, PENALTIES, MAX_DRAFTS)
                    x = tl.where(inside, x + gumbel_noise(seed, pos, lanes, NOISE_LOG1P, NOISE_MURMUR3), float("-inf"))
                    drawn += SUB
                    slice_max, lane = tl.max(x, axis=0, return_indices=True)
                    if slice_max > block_max:
                        block_max = slice_max
                        block_id = b * BLOCK + s * SUB + lane
            if block_max > best:
                best = block_max
        if not found_nan:
            if block_max != block_max:
                found_nan = True
                win_id = block_id
            elif b == 0 or block_max > win:
                win = block_max
                win_id = block_id
    tl.store(ids_ptr + row, win_id.to(tl.int64))
    tl.store(drawn_ptr + row, drawn)


def lazy_sample(logits, slots, pos, local_pos, input_ids, temperature, seeds, repetition, frequency, presence,
                penalty_rows, counts, prompt_bits, noise: tuple[bool, bool], raw: bool, penalized: bool, drafts: int,
                write: bool, sub: int = 128):
    """`_lazy_row_kernel` over the rows of `logits` (`fast.fused_sample`'s arguments; `noise` a
    bounded release's): (ids int64 [rows], the processed logits fp32 or None where not `write`,
    ids drawn per row int32)."""
    n, vocab_size = logits.shape
    blocks = triton.cdiv(vocab_size, BLOCK)
    ids = torch.empty(n, dtype=torch.int64, device=logits.device)
    drawn = torch.empty(n, dtype=torch.int32, device=logits.device)
    tops = torch.empty((n, blocks * (BLOCK // sub)), dtype=torch.float32, device=logits.device)
    out = torch.empty((n, vocab_size), dtype=torch.float32, device=logits.device) if write else None
    if n:
        _lazy_row_kernel[(n,)](
            ids, drawn, tops, out if write else tops, logits, logits.stride(0), slots, pos, local_pos, input_ids, temperature, seeds,
            repetition, frequency, presence, penalty_rows, counts, prompt_bits, prompt_bits.shape[1], vocab_size,
            blocks, BLOCK=BLOCK, SUB=sub, NOISE_LOG1P=noise[0], NOISE_MURMUR3=noise[1], FLOOR=SMALLEST_UNIFORM[noise],
            CONTIG=0 if raw else 4, PENALTIES=penalized, MAX_DRAFTS=triton.next_power_of_2(drafts) if drafts else 0,
            WRITE_PROCESSED=write)
    return ids, out, drawn


class _Lazy:
    """The fused pass of a bounded release with its sampling through `lazy_sample`. `sub`: the
    slice width."""

    sub = 128
    last_drawn = None  # ids drawn per row in the last call (the benchmark's share)

    def sample_rows(self, source, row_info, raw: bool, penalized: bool, drafts: int, write: bool):
        state, ref = self.state, self.reference
        ids, out, self.last_drawn = lazy_sample(source, *row_info, self.temperature, self.seed, *self.penalties,
                                                state.row_of_device, state.counts, state.prompt_bits,
                                                noise=(ref.NOISE_LOG1P, ref.NOISE_MURMUR3), raw=raw,
                                                penalized=penalized, drafts=drafts, write=write, sub=self.sub)
        return ids, out


class LazySamplingPass024(_Lazy, FusedSamplingPass024):
    pass


class LazySamplingPass027(_Lazy, FusedSamplingPass027):
    pass


class LazySamplingPass031(_Lazy, FusedSamplingPass031):
    pass

