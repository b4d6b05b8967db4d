"""Exact lazy Gumbel-max: the fused sampling pass drawing noise only for the tokens that can win.

From vLLM 0.24 a token's noise has an upper bound, the noise of the smallest uniform the release
draws (`gumbel_noise.noise_bound`: about 21.5 with Philox, 22.9 with murmur3). Every noisy value
`x + g` is computed in fp32, and rounding is monotone, so a token whose `x + bound` rounds below
a noisy value already drawn for the row cannot be the row's largest, nor tie with it: its noise
need not be drawn. 0.22 and 0.23 can draw a noise of +inf (u = 1.0): no bound, no laziness there.

Two kernels, then upstream's last step:

1. `_tops_kernel`, one program per row and `TOPS_CHUNK` 1024-id blocks: reads each block once and
   keeps its largest logit with its lowest id (a block holding a NaN keeps +inf). That top is the
   processed logit (penalties, temperature, as the fused kernel computes them) or, where the
   processed logits are not written and the row's penalties can only lower a logit (repetition
   in [1, inf), frequency and presence >= 0), the unpenalized logit over the temperature: a bound
   above every processed logit of the block, read without the penalty tables. The top id's own
   noisy value, processed exactly, raises the row's threshold `best` (an atomic maximum from
   -inf, one per program): any drawn token's noisy value is a floor under the row's largest.
   Only the id of the program's largest top is processed so (`THRESHOLD_PER_BLOCK`);
2. `_draw_kernel`, one program per row and `DRAW_CHUNK` blocks: for each block, where the
   block's top plus the bound reaches `best`, the fused kernel's block (every id's noise drawn,
   the 1024-id tile reduced in the fused kernel's load layout, which decides where NaNs meet);
   elsewhere -inf: no id of the block can reach `best`, so the block was never upstream's first
   largest. A row of -inf keeps `best` at -inf and is drawn whole; a NaN block is always drawn,
   and only a NaN can win its row;
3. the first block holding the largest maximum, a NaN counting as the largest (`torch.argmax`, as
   upstream and the fused pass take it).

Greedy rows are drawn whole (no noise). The processed logits, where asked for, are written in
step 1. Step 2 reports how many ids of each block it read again (`drawn`: the ids whose noise was
drawn, a greedy row's every id; stored per block, so nothing is zeroed first), the benchmark's
share and `pass_choice`'s measure.

The slot parameters (temperature, seed, penalties) are read per program, and vLLM keeps them
behind UVA views of host memory: `fast.row_parameters` copies them per row to the device first.

Where it pays (an H200, `ci/gpu/lazy-gumbel.sh`, docs/sampler_mrv2.md#exact-lazy-gumbel): on rows
whose head stands far above the rest (1.5-2.4x the fused pass's whole call at 5-9% of the ids
drawn); on flat rows it reads the logits once more than the fused pass and is slower, which
`pass_choice` avoids. The plugin's `install` lets each sampler choose (`patch.lazy_choice`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from vllm_hotpaths.gumbel_noise import SMALLEST_UNIFORM, gumbel_noise, noise_bound
from vllm_hotpaths.sampler_mrv2.fast import (FusedSamplingPass024, FusedSamplingPass027, FusedSamplingPass031,
                                             _penalize, row_parameters)
from vllm_hotpaths.sampler_mrv2.reference import BLOCK

# Blocks per program of each kernel (one program per row and chunk of blocks).
TOPS_CHUNK = 8
DRAW_CHUNK = 1
# Whether each block's top raises the threshold (True) or only each program's largest top: one
# dependent load and one hash a program instead of a block, for a threshold no higher.
THRESHOLD_PER_BLOCK = False


@triton.jit
def _load(logits_ptr, row, row_stride, lanes, inside, CONTIG: tl.constexpr):
    # Some ids of a row, upcast, loaded as the fused kernel loads them (CONTIG: its contiguity cap,
    # which decides the reduction's layout).
    offsets = row * row_stride + lanes
    if CONTIG:
        offsets = tl.max_contiguous(offsets, CONTIG)
    return tl.load(logits_ptr + offsets, mask=inside, other=float("-inf")).to(tl.float32)


@triton.jit
def _processed(logits_ptr, row, row_stride, lanes, inside, slot, t, local_pos_ptr, input_ids_ptr, rep_ptr, freq_ptr,
               pres_ptr, pen_row_ptr, counts_ptr, prompt_bits_ptr, words, vocab_size, CONTIG: tl.constexpr,
               PENALTIES: tl.constexpr, MAX_DRAFTS: tl.constexpr):
    # The fused kernel's processing of some ids of a row: upcast, penalties, temperature.
    x = _load(logits_ptr, row, row_stride, lanes, inside, CONTIG)
    if PENALTIES:
        x = _penalize(x, lanes, inside, row, slot, local_pos_ptr, input_ids_ptr, rep_ptr, freq_ptr, pres_ptr,
                      pen_row_ptr, counts_ptr, prompt_bits_ptr, words, vocab_size, CONTIG, MAX_DRAFTS)
    if t != 0.0 and t != 1.0:
        x = x / t
    return x


@triton.jit
def _lowers(slot, rep_ptr, freq_ptr, pres_ptr):
    # Whether the slot's penalties can only lower a logit: repetition in [1, inf), frequency and
    # presence >= 0 (finite: no NaN made of a number). Then the unpenalized logit bounds the
    # penalized one from above, through the temperature's division too (rounding is monotone).
    rep = tl.load(rep_ptr + slot)
    return (rep >= 1.0) & (rep < float("inf")) & (tl.load(freq_ptr + slot) >= 0.0) & (tl.load(pres_ptr + slot) >= 0.0)


@triton.jit
def _noisy_top(id, logits_ptr, row, row_stride, slot, t, seed, position, local_pos_ptr, input_ids_ptr, rep_ptr,
               freq_ptr, pres_ptr, pen_row_ptr, counts_ptr, prompt_bits_ptr, words, vocab_size,
               NOISE_LOG1P: tl.constexpr, NOISE_MURMUR3: tl.constexpr, PENALTIES: tl.constexpr,
               MAX_DRAFTS: tl.constexpr):
    # One id's noisy value, processed exactly (one id: no contiguity to hint), a floor under its
    # row's largest; -inf for a NaN (its block is drawn anyway) and for a greedy row.
    first = tl.full([2], id, tl.int32)
    value = _processed(logits_ptr, row, row_stride, first, first < vocab_size, slot, t, local_pos_ptr, input_ids_ptr,
                       rep_ptr, freq_ptr, pres_ptr, pen_row_ptr, counts_ptr, prompt_bits_ptr,
                       words, vocab_size, 0, PENALTIES, MAX_DRAFTS)
    value = tl.max(value + gumbel_noise(seed, position, first, NOISE_LOG1P, NOISE_MURMUR3), axis=0)
    return tl.where((value == value) & (t != 0.0), value, float("-inf"))


@triton.jit
def _tops_kernel(top_ptr, best_ptr, processed_ptr, logits_ptr, row_stride, slot_ptr, pos_ptr, local_pos_ptr,
                 input_ids_ptr, temp_ptr, seed_ptr, rep_ptr, freq_ptr, pres_ptr, pen_row_ptr, counts_ptr,
                 prompt_bits_ptr, words, vocab_size, num_blocks, BLOCK: tl.constexpr, NOISE_LOG1P: tl.constexpr,
                 NOISE_MURMUR3: tl.constexpr, CONTIG: tl.constexpr, PENALTIES: tl.constexpr,
                 MAX_DRAFTS: tl.constexpr, WRITE_PROCESSED: tl.constexpr, CHUNK: tl.constexpr,
                 PER_BLOCK: tl.constexpr):
    # Step 1, one program per row and CHUNK blocks: each block's largest processed logit, or a
    # bound above it (+inf where the block holds a NaN: drawn whatever the threshold); the
    # processed logits; the noisy value of the program's largest top id (PER_BLOCK: of each
    # block's) raises the row's threshold (one atomic maximum per program). The blocks are
    # unrolled (`static_range`), so their loads can be in flight together; a block past the row's
    # end loads nothing and stores nothing.
    row = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + row)
    t = tl.load(temp_ptr + slot)
    if t != 0.0 or WRITE_PROCESSED:
        # Without the processed logits to write, a row whose penalties only lower its logits
        # reads no count or prompt bit here: its tops bound the processed logits from above.
        lowers = _lowers(slot, rep_ptr, freq_ptr, pres_ptr)
        seed = tl.load(seed_ptr + slot)
        position = tl.load(pos_ptr + row)
        raised = tl.full([], float("-inf"), tl.float32)
        lead = tl.full([], float("-inf"), tl.float32)
        lead_id = (tl.program_id(1) * CHUNK * BLOCK).to(tl.int32)
        for i in tl.static_range(CHUNK):
            block = tl.program_id(1) * CHUNK + i
            lanes = block * BLOCK + tl.arange(0, BLOCK)
            inside = lanes < vocab_size
            x = _load(logits_ptr, row, row_stride, lanes, inside, CONTIG)
            if PENALTIES:
                if WRITE_PROCESSED or not lowers:
                    x = _penalize(x, lanes, inside, row, slot, local_pos_ptr, input_ids_ptr, rep_ptr, freq_ptr,
                                  pres_ptr, pen_row_ptr, counts_ptr, prompt_bits_ptr, words, vocab_size, CONTIG,
                                  MAX_DRAFTS)
            if t != 0.0 and t != 1.0:
                x = x / t
            if WRITE_PROCESSED:
                tl.store(processed_ptr + row * vocab_size + lanes, x, mask=inside)
            nan = x != x
            top, lane = tl.max(tl.where(nan, float("-inf"), x), axis=0, return_indices=True)
            any_nan = tl.max(nan.to(tl.int32), axis=0) != 0
            tl.store(top_ptr + row * num_blocks + block, tl.where(any_nan, float("inf"), top),
                     mask=block < num_blocks)
            if PER_BLOCK:
                raised = tl.maximum(raised, _noisy_top(block * BLOCK + lane, logits_ptr, row, row_stride, slot, t,
                                                       seed, position, local_pos_ptr, input_ids_ptr, rep_ptr,
                                                       freq_ptr, pres_ptr, pen_row_ptr, counts_ptr, prompt_bits_ptr,
                                                       words, vocab_size, NOISE_LOG1P, NOISE_MURMUR3, PENALTIES,
                                                       MAX_DRAFTS))
            else:  # the program's largest top (NaN blocks left out), its first block's on a tie
                lead_id = tl.where(top > lead, block * BLOCK + lane, lead_id)
                lead = tl.maximum(lead, top)
        if not PER_BLOCK:
            raised = _noisy_top(lead_id, logits_ptr, row, row_stride, slot, t, seed, position, local_pos_ptr,
                                input_ids_ptr, rep_ptr, freq_ptr, pres_ptr, pen_row_ptr, counts_ptr, prompt_bits_ptr,
                                words, vocab_size, NOISE_LOG1P, NOISE_MURMUR3, PENALTIES, MAX_DRAFTS)
        tl.atomic_max(best_ptr + row, raised)


@triton.jit
def _draw_kernel(block_ids_ptr, block_max_ptr, drawn_ptr, best_ptr, top_ptr, logits_ptr, row_stride, slot_ptr, pos_ptr,
                 local_pos_ptr, input_ids_ptr, temp_ptr, seed_ptr, rep_ptr, freq_ptr, pres_ptr, pen_row_ptr,
                 counts_ptr, prompt_bits_ptr, words, vocab_size, num_blocks, BLOCK: tl.constexpr,
                 NOISE_LOG1P: tl.constexpr, NOISE_MURMUR3: tl.constexpr, FLOOR: tl.constexpr, CONTIG: tl.constexpr,
                 PENALTIES: tl.constexpr, MAX_DRAFTS: tl.constexpr, CHUNK: tl.constexpr):
    # Step 2, one program per row and CHUNK blocks: for each block, the fused kernel's block, or
    # -inf where no id of the block can reach the threshold.
    row = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + row)
    t = tl.load(temp_ptr + slot)
    bound = noise_bound(NOISE_LOG1P, NOISE_MURMUR3, FLOOR)
    best = tl.load(best_ptr + row)
    for i in tl.static_range(CHUNK):
        block = tl.program_id(1) * CHUNK + i
        if block < num_blocks:
            drawn = t == 0.0
            if not drawn:
                drawn = tl.load(top_ptr + row * num_blocks + block) + bound >= best
            if drawn:
                lanes = block * BLOCK + tl.arange(0, BLOCK)
                inside = lanes < vocab_size
                x = _processed(logits_ptr, row, row_stride, lanes, inside, slot, t, local_pos_ptr, input_ids_ptr,
                               rep_ptr, freq_ptr, pres_ptr, pen_row_ptr, counts_ptr, prompt_bits_ptr, words,
                               vocab_size, CONTIG, PENALTIES, MAX_DRAFTS)
                if t != 0.0:
                    x = tl.where(inside, x + gumbel_noise(tl.load(seed_ptr + slot), tl.load(pos_ptr + row), lanes,
                                                          NOISE_LOG1P, NOISE_MURMUR3), float("-inf"))
                tl.store(drawn_ptr + row * num_blocks + block, tl.minimum(vocab_size - block * BLOCK, BLOCK))
                top, lane = tl.max(x, axis=0, return_indices=True)
                tl.store(block_ids_ptr + row * num_blocks + block, block * BLOCK + lane)
                tl.store(block_max_ptr + row * num_blocks + block, top)
            else:
                tl.store(drawn_ptr + row * num_blocks + block, 0)
                tl.store(block_ids_ptr + row * num_blocks + block, (block * BLOCK).to(tl.int64))
                tl.store(block_max_ptr + row * num_blocks + block, float("-inf"))


_scratches: dict[tuple, tuple[torch.Tensor, ...]] = {}


def _scratch(n: int, blocks: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """`lazy_sample`'s working tensors for `n` rows of `blocks` blocks (top, best, block ids,
    block maxima, ids read again), kept between calls per device, stream and block count, grown
    to the most rows asked for: on the GPU machine's host one allocation costs 9-15 us
    (docs/sampler_mrv2.md, the fused pass's host costs). Reuse is safe in one stream: each call
    writes every element it reads (its tops only for the rows it reads them for, `best` filled
    first) and the next call's kernels run after this one's reads. So `drawn`, which the call
    returns, holds until the next call on that stream."""
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    key = (str(device), stream, blocks)
    held = _scratches.get(key)
    if held is None or held[1].shape[0] < n:
        rows = max(n, 256)
        held = _scratches[key] = (torch.empty((rows, blocks), dtype=torch.float32, device=device),
                                  torch.empty(rows, dtype=torch.float32, device=device),
                                  torch.empty((rows, blocks), dtype=torch.int64, device=device),
                                  torch.empty((rows, blocks), dtype=torch.float32, device=device),
                                  torch.empty((rows, blocks), dtype=torch.int32, device=device))
    return tuple(t[:n] for t in held)


def lazy_sample(logits, slots, pos, local_pos, input_ids, temperature, seeds, repetition, frequency, presence,
                penalty_rows, counts, prompt_bits, noise: tuple[bool, bool], raw: bool, penalized: bool, drafts: int,
                write: bool):
    """`_tops_kernel` and `_draw_kernel` over the rows of `logits` (`fast.fused_sample`'s
    arguments; `noise` a bounded release's), then the first block holding the largest maximum:
    (ids int64 [rows], the processed logits fp32 or None where not `write`, ids read again per
    row and block, int32 [rows, blocks], until the next call: `_scratch`)."""
    n, vocab_size = logits.shape
    blocks = triton.cdiv(vocab_size, BLOCK)
    device = logits.device
    top, best, block_ids, block_max, drawn = _scratch(n, blocks, device)
    # Read per program below: from device memory, not through vLLM's UVA views (`row_parameters`).
    slots, temperature, seeds, repetition, frequency, presence, penalty_rows = row_parameters(
        slots, temperature, seeds, repetition, frequency, presence, penalty_rows)
    best.fill_(float("-inf"))
    out = torch.empty((n, vocab_size), dtype=torch.float32, device=device) if write else None
    if n:
        common = dict(BLOCK=BLOCK, NOISE_LOG1P=noise[0], NOISE_MURMUR3=noise[1], CONTIG=0 if raw else 4,
                      PENALTIES=penalized, MAX_DRAFTS=triton.next_power_of_2(drafts) if drafts else 0)
        penalties = (repetition, frequency, presence, penalty_rows, counts, prompt_bits, prompt_bits.shape[1],
                     vocab_size, blocks)
        chunk = min(TOPS_CHUNK, blocks)  # a short row's program holds no block past its end
        _tops_kernel[(n, triton.cdiv(blocks, chunk))](
            top, best, out if write else top, logits, logits.stride(0), slots, pos, local_pos, input_ids, temperature,
            seeds, *penalties, WRITE_PROCESSED=write, CHUNK=chunk, PER_BLOCK=THRESHOLD_PER_BLOCK, **common)
        _draw_kernel[(n, triton.cdiv(blocks, DRAW_CHUNK))](
            block_ids, block_max, drawn, best, top, logits, logits.stride(0), slots, pos, local_pos, input_ids,
            temperature, seeds, *penalties, FLOOR=SMALLEST_UNIFORM[noise], CHUNK=DRAW_CHUNK, **common)
    return block_ids.gather(-1, block_max.argmax(-1, keepdim=True)).view(-1), out, drawn


class _Lazy:
    """The fused pass of a bounded release with its sampling through `lazy_sample`."""

    last_drawn = None  # ids read again per row and block in the last call, until the next (the benchmark's share)

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

