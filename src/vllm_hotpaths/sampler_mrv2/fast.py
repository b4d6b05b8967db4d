"""One kernel from logits to token: the sampling pass of each release with its logits read once.

Upstream runs a sequence over the whole batch: an fp32 copy of the logits (every release but
0.26, and 0.27 on only when some request needs processing), the penalties kernel over a dense
`[max_num_reqs, V]` count table, the temperature kernel, then `gumbel_sample`. `FusedSamplingPass`
does all of it per (row, 1024-id block) in one Triton program, `_fused_block_kernel`: load the
row's logits in their dtype and upcast, penalize (penalized rows only), divide by the
temperature, write the processed logits where the caller asks for them, add the release's
Gumbel noise and keep the block's maximum with its lowest id. The block maxima then meet in
`torch.argmax`, as in the reference. Each step is the reference's arithmetic in the same
order, so ids and processed logits are the reference's bit for bit.

Penalty state is kept only for requests with a penalty (`penalty_tables.CompactCounts`): a count
row and a prompt bitmask per penalized request, allocated when the first one arrives, grown by
doubling. `_penalize` is the penalty arithmetic, shared with `_penalties_kernel` (penalties alone,
in place: the plugin's `apply_penalties` on those rows for the batches upstream samples).

Where the fused kernel defers to the reference (the same tensors, upstream's sequence): a batch
holding a request with allowed ids, a logit bias, min tokens with stop ids, bad words, min_p, a
forced thinking budget, top-k/top-p (which the reference refuses) or an invalid seed; and 0.26's
batches of bf16/fp16 logits (processed in their own dtype, rounded after each step).

Reduction order: on CUDA a block's maximum is reduced over the layout its load chose, and where
two NaNs meet that order decides the id. Upstream reduces a bf16 row in the bf16 load's layout
only where it samples the caller's logits (0.27 on, no request needing processing); otherwise
over an fp32 copy's, whose rows are V apart. The kernel's loads take that fp32 layout there
(`CONTIG`: contiguity capped at 4 lanes), so both reductions run in the same order; it defers
where the caller's row stride and V differ in alignment (one a multiple of 16, the other not),
which would give its loads another layout.
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from vllm_hotpaths.gumbel_noise import gumbel_noise
from vllm_hotpaths.logits_copy import needs_processing
from vllm_hotpaths.logits_copy.reference import check_rows
from vllm_hotpaths.sampler_mrv2 import INT64
from vllm_hotpaths.sampler_mrv2.penalty_tables import CompactCounts
from vllm_hotpaths.sampler_mrv2.reference import (BLOCK, SamplerPass022, SamplerPass024, SamplerPass026,
                                                  SamplerPass027, SamplerPass028, SamplerPass031)


@triton.jit
def _penalize(x, lanes, inside, row, slot, local_pos_ptr, input_ids_ptr, rep_ptr, freq_ptr, pres_ptr, pen_row_ptr,
              counts_ptr, prompt_bits_ptr, words, vocab_size, CONTIG: tl.constexpr, MAX_DRAFTS: tl.constexpr):
    """`x` (fp32, one block of a logits row) with the slot's penalties, as upstream's penalties
    kernel computes them: repetition (prompt or output ids), then frequency, then presence. The
    slot's counts and prompt bits are row `pen_row_ptr[slot]` of the compact tables (-1: none)."""
    pen_row = tl.load(pen_row_ptr + slot).to(tl.int64)
    if pen_row >= 0:
        rep = tl.load(rep_ptr + slot)
        freq = tl.load(freq_ptr + slot)
        pres = tl.load(pres_ptr + slot)
        if rep != 1.0 or freq != 0.0 or pres != 0.0:
            count_offsets = pen_row * vocab_size + lanes
            if CONTIG:
                count_offsets = tl.max_contiguous(count_offsets, CONTIG)
            counts = tl.load(counts_ptr + count_offsets, mask=inside, other=0)
            # The row's earlier drafts count too: input ids of its request's rows 1..local_pos.
            local_pos = tl.load(local_pos_ptr + row)
            for j in tl.static_range(MAX_DRAFTS):
                draft = tl.load(input_ids_ptr + row - local_pos + 1 + j, mask=j < local_pos, other=-1)
                counts += (lanes == draft).to(tl.int32)
            seen = counts > 0
            if rep != 1.0:
                word = tl.load(prompt_bits_ptr + pen_row * words + lanes // 32, mask=inside, other=0)
                in_prompt = ((word >> (lanes % 32)) & 1) != 0
                scale = tl.where(in_prompt | seen, rep, 1.0)
                x *= tl.where(x > 0, 1.0 / scale, scale)
            x -= freq * counts
            x -= pres * seen
    return x


@triton.jit
def _fused_block_kernel(block_ids_ptr, block_max_ptr, processed_ptr, logits_ptr, row_stride, slot_ptr, pos_ptr,
                        local_pos_ptr, input_ids_ptr, temp_ptr, seed_ptr, rep_ptr, freq_ptr, pres_ptr, pen_row_ptr,
                        counts_ptr, prompt_bits_ptr, words, vocab_size, num_blocks, BLOCK: tl.constexpr,
                        NOISE_LOG1P: tl.constexpr, NOISE_MURMUR3: tl.constexpr, CONTIG: tl.constexpr,
                        PENALTIES: tl.constexpr, MAX_DRAFTS: tl.constexpr, WRITE_PROCESSED: tl.constexpr):
    # Per logits row: its request's slot, the position of its input token, its place among its
    # request's rows (0: the first) and that input token (vLLM's own row tensors fit as they are).
    row = tl.program_id(0).to(tl.int64)
    block = tl.program_id(1)
    lanes = block * BLOCK + tl.arange(0, BLOCK)
    inside = lanes < vocab_size
    offsets = row * row_stride + lanes
    if CONTIG:
        offsets = tl.max_contiguous(offsets, CONTIG)
    x = tl.load(logits_ptr + offsets, mask=inside, other=float("-inf")).to(tl.float32)
    slot = tl.load(slot_ptr + row)
    if PENALTIES:
        x = _penalize(x, lanes, inside, row, slot, local_pos_ptr, input_ids_ptr, rep_ptr, freq_ptr, pres_ptr,
                      pen_row_ptr, counts_ptr, prompt_bits_ptr, words, vocab_size, CONTIG, MAX_DRAFTS)
    t = tl.load(temp_ptr + slot)
    if t != 0.0 and t != 1.0:
        x = x / t
    if WRITE_PROCESSED:
        tl.store(processed_ptr + row * vocab_size + lanes, x, mask=inside)
    if t != 0.0:
        pos = tl.load(pos_ptr + row)
        noise = gumbel_noise(tl.load(seed_ptr + slot), pos, lanes, NOISE_LOG1P, NOISE_MURMUR3)
        x = tl.where(inside, x + noise, float("-inf"))
    top, lane = tl.max(x, axis=0, return_indices=True)
    tl.store(block_ids_ptr + row * num_blocks + block, block * BLOCK + lane)
    tl.store(block_max_ptr + row * num_blocks + block, top)


@triton.jit
def _rows_kernel(slots_out, temp_out, seed_out, rep_out, freq_out, pres_out, pen_row_out, slot_ptr, temp_ptr, seed_ptr,
                 rep_ptr, freq_ptr, pres_ptr, pen_row_ptr, n, ROWS: tl.constexpr):
    # Each row's slot parameters copied to row-indexed device memory (bits unchanged), the row
    # its own slot: see `row_parameters`.
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    inside = rows < n
    slot = tl.load(slot_ptr + rows, mask=inside, other=0)
    tl.store(slots_out + rows, rows.to(tl.int32), mask=inside)
    tl.store(temp_out + rows, tl.load(temp_ptr + slot, mask=inside), mask=inside)
    tl.store(seed_out + rows, tl.load(seed_ptr + slot, mask=inside), mask=inside)
    tl.store(rep_out + rows, tl.load(rep_ptr + slot, mask=inside), mask=inside)
    tl.store(freq_out + rows, tl.load(freq_ptr + slot, mask=inside), mask=inside)
    tl.store(pres_out + rows, tl.load(pres_ptr + slot, mask=inside), mask=inside)
    tl.store(pen_row_out + rows, tl.load(pen_row_ptr + slot, mask=inside), mask=inside)


_row_scratches: dict[tuple, tuple[torch.Tensor, ...]] = {}
# Fewer rows: a penalized fused batch reads its parameters where vLLM keeps them. Its few programs
# cross PCIe less than the gathering launch costs the host (docs/sampler_mrv2.md).
GATHER_MIN_ROWS = 256


def row_parameters(slots, temperature, seeds, repetition, frequency, presence, penalty_rows):
    """The per-slot arguments of the sampling kernels gathered per row, with the rows as their
    slots: (rows 0..n-1 int32, then each tensor's values at `slots`, its dtype). vLLM keeps the
    sampling and penalty parameters in pinned host memory that the GPU reads through a UVA view
    (`UvaBackedTensor`), so a kernel that loads them in each of its programs crosses PCIe each
    time; this crosses it once per row, in one launch. The tensors are kept between calls per
    device, stream and dtypes, grown to the most rows asked for: each call's values hold until
    the next call on that stream."""
    sources = (temperature, seeds, repetition, frequency, presence, penalty_rows)
    n, device = slots.shape[0], slots.device
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    key = (str(device), stream, *(t.dtype for t in sources))
    held = _row_scratches.get(key)
    if held is None or held[0].shape[0] < n:
        rows = max(n, 256)
        held = _row_scratches[key] = (torch.empty(rows, dtype=torch.int32, device=device),
                                      *(torch.empty(rows, dtype=t.dtype, device=device) for t in sources))
    gathered = tuple(t[:n] for t in held)
    if n:
        _rows_kernel[(triton.cdiv(n, 1024),)](*gathered, slots, *sources, n, ROWS=1024)
    return gathered


def fused_sample(logits, slots, pos, local_pos, input_ids, temperature, seeds, repetition, frequency, presence,
                 penalty_rows, counts, prompt_bits, noise: tuple[bool, bool], raw: bool, penalized: bool, drafts: int,
                 write: bool):
    """`_fused_block_kernel` over every (row, block) of `logits`, then the first block holding the
    largest maximum: (ids int64 [rows], the processed logits fp32 or None where not `write`).
    Per row: `slots`, `pos`, `local_pos`, `input_ids`. Per slot: `temperature`, `seeds`, the three
    penalties and `penalty_rows` (its row of `counts` [rows, V] int32 and of `prompt_bits`
    [rows, ceil(V / 32)] int32, bit i % 32 of word i // 32 for id i; -1: none). `noise`: the
    release's (NOISE_LOG1P, NOISE_MURMUR3); `raw`: the caller's logits are what upstream reduces
    (its load layout), else an fp32 copy's; `penalized`: some row may have a penalty; `drafts`: at
    least the largest `local_pos`."""
    n, vocab_size = logits.shape
    if penalized and n >= GATHER_MIN_ROWS:  # each program's five parameter loads from device memory
        slots, temperature, seeds, repetition, frequency, presence, penalty_rows = row_parameters(
            slots, temperature, seeds, repetition, frequency, presence, penalty_rows)
    blocks = triton.cdiv(vocab_size, BLOCK)
    block_ids = torch.empty((n, blocks), dtype=torch.int64, device=logits.device)
    block_max = torch.empty((n, blocks), dtype=torch.float32, device=logits.device)
    out = torch.empty((n, vocab_size), dtype=torch.float32, device=logits.device) if write else None
    _fused_block_kernel[(n, blocks)](
        block_ids, block_max, out if write else block_max, logits, logits.stride(0), slots, pos, local_pos,
        input_ids, temperature, seeds, repetition, frequency, presence, penalty_rows, counts, prompt_bits,
        prompt_bits.shape[1], vocab_size, blocks, BLOCK=BLOCK, NOISE_LOG1P=noise[0], NOISE_MURMUR3=noise[1],
        CONTIG=0 if raw else 4, PENALTIES=penalized, MAX_DRAFTS=triton.next_power_of_2(drafts) if drafts else 0,
        WRITE_PROCESSED=write)
    return block_ids.gather(-1, block_max.argmax(-1, keepdim=True)).view(-1), out


@triton.jit
def _penalties_kernel(logits_ptr, row_stride, slot_ptr, local_pos_ptr, input_ids_ptr, rep_ptr, freq_ptr, pres_ptr,
                      pen_row_ptr, counts_ptr, prompt_bits_ptr, words, vocab_size, BLOCK: tl.constexpr,
                      MAX_DRAFTS: tl.constexpr):
    # Penalties alone, in place: upstream's penalties kernel over the compact tables. As upstream,
    # in fp32 whatever the rows hold (0.26 penalizes bf16 logits in place), rounded once by the store.
    row = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + row)
    if tl.load(pen_row_ptr + slot) >= 0:
        lanes = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        inside = lanes < vocab_size
        x = tl.load(logits_ptr + row * row_stride + lanes, mask=inside).to(tl.float32)
        x = _penalize(x, lanes, inside, row, slot, local_pos_ptr, input_ids_ptr, rep_ptr, freq_ptr, pres_ptr,
                      pen_row_ptr, counts_ptr, prompt_bits_ptr, words, vocab_size, 0, MAX_DRAFTS)
        tl.store(logits_ptr + row * row_stride + lanes, x, mask=inside)


def penalize_in_place(logits, slots, local_pos, input_ids, repetition, frequency, presence, table: CompactCounts,
                      drafts: int) -> None:
    """Upstream's `apply_penalties` on `logits` [rows, V] in place (fp32, or 0.26's bf16), each row's counts and
    prompt bits read from its slot's row of `table`; `drafts`: at least the largest `local_pos`."""
    n, vocab_size = logits.shape
    if n and table.counts.shape[0]:
        _penalties_kernel[(n, triton.cdiv(vocab_size, BLOCK))](
            logits, logits.stride(0), slots, local_pos, input_ids, repetition, frequency, presence,
            table.row_of_device, table.counts, table.prompt_bits, table.words, vocab_size, BLOCK=BLOCK,
            MAX_DRAFTS=triton.next_power_of_2(drafts) if drafts else 0)


def fused_covers(p, vocab_size: int, forces_thinking: bool) -> bool:
    """Whether the fused kernel computes this request's processing (normalized parameters): only
    temperature and penalties, a seed vLLM keeps, no top-k/top-p (module docstring)."""
    forced = forces_thinking and p.thinking_token_budget is not None
    seed_ok = not isinstance(p.seed, bool) and isinstance(p.seed, int) and p.seed != -1 and \
        INT64[0] <= p.seed <= INT64[1]
    top_k = p.top_k if 0 < p.top_k <= vocab_size else vocab_size
    return seed_ok and not (p.allowed_token_ids or p.logit_bias or (p.min_tokens > 0 and p.stop_token_ids)
                            or p.bad_words or p.min_p != 0.0 or forced or top_k != vocab_size or p.top_p != 1.0)


def penalized(p) -> bool:
    """Whether a request has a penalty off its neutral value (normalized parameters)."""
    return p.repetition_penalty != 1.0 or p.frequency_penalty != 0.0 or p.presence_penalty != 0.0


class FusedSamplingPass:
    """The reference of `reference_type`'s release through `_fused_block_kernel` (module
    docstring); batches the kernel does not cover go to that reference, which holds the same
    request table."""

    reference_type = SamplerPass022

    def __init__(self, vocab_size: int, max_num_reqs: int, device, reasoning=None):
        self.reference = ref = self.reference_type(vocab_size, max_num_reqs, device, reasoning)
        self.vocab_size, self.device = vocab_size, ref.device
        self.fused = np.zeros(max_num_reqs, dtype=bool)  # the kernel covers the request's processing
        self.needs = np.zeros(max_num_reqs, dtype=bool)  # the request needs processing (0.27 on)
        self.temperature = torch.zeros(max_num_reqs, dtype=torch.float32, device=self.device)
        self.seed = torch.zeros(max_num_reqs, dtype=torch.int64, device=self.device)
        self.penalties = torch.zeros((3, max_num_reqs), dtype=torch.float32, device=self.device)  # rep, freq, pres
        self.state = CompactCounts(vocab_size, max_num_reqs, self.device)
        self._pinned = None  # host staging of each step's row table (CUDA)
        self._copied = None  # the event after the last copy out of it

    def __deepcopy__(self, memo):
        """A copy with its own host staging (a CUDA event cannot be copied; the copy's first
        step makes a new buffer)."""
        import copy

        twin = object.__new__(type(self))
        memo[id(self)] = twin
        for name, value in vars(self).items():
            setattr(twin, name, None if name in ("_pinned", "_copied") else copy.deepcopy(value, memo))
        return twin

    def add_request(self, slot, prompt, output, params) -> None:
        ref = self.reference
        ref.add_request(slot, prompt, output, params)
        p = ref.requests[slot].params
        self.needs[slot] = needs_processing(p, self.vocab_size, ref.forces_thinking)
        self.fused[slot] = fused_covers(p, self.vocab_size, ref.forces_thinking)
        if self.fused[slot]:
            self.temperature[slot] = p.temperature
            self.seed[slot] = p.seed
            self.penalties[:, slot] = torch.tensor([p.repetition_penalty, p.frequency_penalty, p.presence_penalty])
            if penalized(p):
                self.state.add(slot, prompt, output)

    def remove_request(self, slot) -> None:
        self.reference.remove_request(slot)
        self.state.remove(slot)
        self.fused[slot] = False

    def append_output(self, slot, tokens) -> None:
        self.reference.append_output(slot, tokens)
        self.state.append(slot, tokens)

    def sample(self, logits: torch.Tensor, rows, local_pos, input_ids, pos, processed: bool = True):
        """(ids int64 [num_rows], the processed logits or None where `processed` is False)."""
        ref = self.reference
        slots = check_rows(logits, rows, local_pos, input_ids, pos, ref.occupied, self.vocab_size)
        n = logits.shape[0]
        in_dtype = not ref.keeps_logits_dtype or logits.dtype == torch.float32
        raw = ref.SAMPLES_UNPROCESSED and not self.needs[slots].any()
        # Triton specializes an integer argument that is a multiple of 16 (the load layout).
        same_layout = raw or (logits.stride(0) % 16 == 0) == (self.vocab_size % 16 == 0)
        if n == 0 or not in_dtype or not same_layout or not self.fused[slots].all():
            return ref.sample(logits, rows, local_pos, input_ids, pos, processed)
        row_info = self._row_table(slots, pos, local_pos, input_ids)
        penalized = bool((self.state.row_of[slots] >= 0).any())
        drafts = int(np.max(local_pos)) if penalized else 0
        source = logits
        if not raw and logits.dtype != torch.float32 and logits.device.type == "cpu":
            # Torch's CPU conversion of an fp16 NaN depends on where the NaN sits in the tensor
            # (vectorized or not); the reference copies with it, so in Triton's interpreter the
            # kernel is handed that same copy. On CUDA both convert with the same instruction.
            source = torch.empty_like(logits, dtype=torch.float32).copy_(logits)
        ids, out = self.sample_rows(source, row_info, raw, penalized, drafts, write=processed and not raw)
        return ids, ((out if out is not None else logits) if processed else None)

    def sample_rows(self, source, row_info, raw: bool, penalized: bool, drafts: int, write: bool):
        """The device work of `sample` for its checked batch: (ids, the processed logits or None)."""
        state, ref = self.state, self.reference
        return fused_sample(source, *row_info, self.temperature, self.seed, *self.penalties, state.row_of_device,
                            state.counts, state.prompt_bits, noise=(ref.NOISE_LOG1P, ref.NOISE_MURMUR3), raw=raw,
                            penalized=penalized, drafts=drafts, write=write)

    def _row_table(self, *columns) -> torch.Tensor:
        """int64 [4, n] on the device: slot, position, local_pos, input id of each row. On CUDA
        through a pinned buffer, copied without blocking the host (a copy from pageable memory
        would wait for every kernel queued before it)."""
        n = len(columns[0])
        if self.device.type != "cuda":
            return torch.from_numpy(np.stack([np.asarray(c, dtype=np.int64) for c in columns]))
        if self._pinned is None or self._pinned.numel() < 4 * n:
            self._pinned = torch.empty(4 * max(n, 256), dtype=torch.int64, pin_memory=True)
        elif self._copied is not None:
            self._copied.synchronize()  # the previous step's copy has left the buffer
        table = self._pinned[:4 * n].view(4, n)
        host = table.numpy()
        for i, column in enumerate(columns):
            host[i] = column
        on_device = table.to(self.device, non_blocking=True)
        self._copied = torch.cuda.Event()
        self._copied.record()
        return on_device


class FusedSamplingPass024(FusedSamplingPass):
    reference_type = SamplerPass024


class FusedSamplingPass026(FusedSamplingPass):
    """0.26.0: fused for fp32 logits (0.24.0's result); bf16/fp16 batches go to the reference."""

    reference_type = SamplerPass026


class FusedSamplingPass027(FusedSamplingPass):
    reference_type = SamplerPass027


class FusedSamplingPass028(FusedSamplingPass):
    reference_type = SamplerPass028


class FusedSamplingPass031(FusedSamplingPass):
    reference_type = SamplerPass031
