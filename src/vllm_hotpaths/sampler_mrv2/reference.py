"""Frozen references of Model Runner V2's sampling pass (`Sampler.sample`), one per release
where what it computes changed (the semantics: this package's docstring):

| reference | processed logits (logits_copy) | Gumbel noise (gumbel_noise) |
|---|---|---|
| SamplerPass022 | Sampler022 | Philox, `-log(-log u)` |
| SamplerPass024 | Sampler024 (min tokens `pos + 1`) | `-log(-log1p(-u))`, libdevice log1p |
| SamplerPass026 | Sampler026 (no fp32 copy) | same |
| SamplerPass027 | Sampler027 (the copy back) | same |
| SamplerPass028 | Sampler028 (bad words on drafts, thinking forcing) | same |
| SamplerPass031 | Sampler028 | murmur3 of (seed, pos, token), series log1p |

The sampling is a Triton kernel with upstream's phases (one program per row and 1024-id block:
upcast, noise, block maximum with its lowest id), then the first largest block maximum
(`torch.argmax`): on CUDA Triton compiles the same arithmetic (its `log`, its block reduction,
which decides where a NaN lands), in the interpreter NumPy runs the same operations.

In Triton's interpreter one program can take the whole batch (`_batch_argmax_kernel`, every row
and id as one tile): the same elementwise operations on a larger array, and a maximum per row that
NumPy takes as it takes each block's (`np.max`, `np.argmax`: a NaN wins, the lowest id among
equals), so the first largest block maximum is the row's first largest value. An interpreted
program costs its operations' Python overhead whatever its size, and the batch's rows times blocks
programs were most of an interpreted sampling step. A reference compared with vLLM (conformance,
drift) runs one program per row and block on every device (`per_block`), so what is proven
against vLLM is the kernel CUDA runs; the equivalence of a fast path takes the batched launch, which
tests/test_sampler_mrv2_reference.py proves the same as the per-block one, bit for bit.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from vllm_hotpaths.gumbel_noise import gumbel_noise
from vllm_hotpaths.logits_copy import needs_processing
from vllm_hotpaths.logits_copy import reference as processing
from vllm_hotpaths.sampler_mrv2 import refuse_unstated

BLOCK = 1024


@triton.jit
def _block_argmax_kernel(block_ids_ptr, block_max_ptr, logits_ptr, row_stride, temp_ptr, seed_ptr, pos_ptr,
                         vocab_size, num_blocks, BLOCK: tl.constexpr, NOISE_LOG1P: tl.constexpr,
                         NOISE_MURMUR3: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    block = tl.program_id(1)
    lanes = block * BLOCK + tl.arange(0, BLOCK)
    inside = lanes < vocab_size
    x = tl.load(logits_ptr + row * row_stride + lanes, mask=inside, other=float("-inf")).to(tl.float32)
    if tl.load(temp_ptr + row) != 0.0:
        noise = gumbel_noise(tl.load(seed_ptr + row), tl.load(pos_ptr + row), lanes, NOISE_LOG1P, NOISE_MURMUR3)
        x = tl.where(inside, x + noise, float("-inf"))
    top, lane = tl.max(x, axis=0, return_indices=True)
    tl.store(block_ids_ptr + row * num_blocks + block, block * BLOCK + lane)
    tl.store(block_max_ptr + row * num_blocks + block, top)


@triton.jit
def _batch_argmax_kernel(ids_ptr, logits_ptr, row_stride, temp_ptr, seed_ptr, pos_ptr, num_rows, vocab_size,
                         ROWS: tl.constexpr, VOCAB: tl.constexpr, NOISE_LOG1P: tl.constexpr,
                         NOISE_MURMUR3: tl.constexpr):
    # `_block_argmax_kernel`'s operations on the whole batch at once, for Triton's interpreter.
    rows = tl.arange(0, ROWS)
    real = rows < num_rows
    lanes = tl.arange(0, VOCAB)[None, :]
    inside = real[:, None] & (lanes < vocab_size)
    x = tl.load(logits_ptr + rows.to(tl.int64)[:, None] * row_stride + lanes, mask=inside,
                other=float("-inf")).to(tl.float32)
    noisy = (tl.load(temp_ptr + rows, mask=real, other=0.0) != 0.0)[:, None]
    noise = gumbel_noise(tl.load(seed_ptr + rows, mask=real, other=0)[:, None],
                         tl.load(pos_ptr + rows, mask=real, other=0)[:, None], lanes, NOISE_LOG1P, NOISE_MURMUR3)
    x = tl.where(noisy, tl.where(inside, x + noise, float("-inf")), x)
    _, lane = tl.max(x, axis=1, return_indices=True)
    tl.store(ids_ptr + rows, lane.to(tl.int64), mask=real)


def gumbel_argmax(processed: torch.Tensor, temperature: torch.Tensor, seed: torch.Tensor, pos: torch.Tensor,
                  noise_log1p: bool, noise_murmur3: bool, batched: bool | None = None) -> torch.Tensor:
    """Each row's token (int64 [n]) from its processed logits (rows of stride 1 along the
    vocabulary) and its request's fp32 temperature (0: greedy), int64 seed and int64 position.
    `batched`: one program for the whole batch (default: where Triton interprets, off CUDA)."""
    n, vocab = processed.shape
    if batched if batched is not None else not processed.is_cuda:
        ids = torch.empty(n, dtype=torch.int64, device=processed.device)
        if n:
            _batch_argmax_kernel[(1,)](ids, processed, processed.stride(0), temperature, seed, pos, n, vocab,
                                       ROWS=triton.next_power_of_2(n), VOCAB=triton.next_power_of_2(vocab),
                                       NOISE_LOG1P=noise_log1p, NOISE_MURMUR3=noise_murmur3)
        return ids
    blocks = triton.cdiv(vocab, BLOCK)
    block_ids = torch.empty((n, blocks), dtype=torch.int64, device=processed.device)
    block_max = torch.empty((n, blocks), dtype=torch.float32, device=processed.device)
    if n:
        _block_argmax_kernel[(n, blocks)](block_ids, block_max, processed, processed.stride(0), temperature, seed, pos,
                                          vocab, blocks, BLOCK=BLOCK, NOISE_LOG1P=noise_log1p,
                                          NOISE_MURMUR3=noise_murmur3)
    return block_ids.gather(-1, block_max.argmax(-1, keepdim=True)).view(-1)


class _SamplingPass:
    """`sample` over a `logits_copy` reference's `process` (mixed in by each reference below)."""

    NOISE_LOG1P = False  # 0.24 (PR #45996)
    NOISE_MURMUR3 = False  # 0.31 (PR #51367)
    # 0.27 (PR #49033): a batch in which no request needs processing is sampled from its own
    # logits, in their dtype. Same values, but on CUDA the block maximum of a bf16 load is reduced
    # in another order than an fp32 one's, and where a NaN lands depends on that order.
    SAMPLES_UNPROCESSED = False
    # One program per row and block in the interpreter too (off: the whole batch in one there).
    per_block = False

    def sample(self, logits: torch.Tensor, rows, local_pos, input_ids, pos, processed: bool = True):
        """(ids int64 [num_rows], the processed logits or None where `processed` is False)."""
        slots = processing.check_rows(logits, rows, local_pos, input_ids, pos, self.occupied, self.vocab_size)
        params = [self.requests[int(s)].params for s in slots]
        refuse_unstated(params, self.vocab_size)
        if self.SAMPLES_UNPROCESSED and not any(needs_processing(p, self.vocab_size, self.forces_thinking)
                                                for p in params):
            out = logits
        else:
            out = self.process(logits, *map(processing.as_ints, (rows, local_pos, input_ids, pos)))
        device = logits.device
        ids = gumbel_argmax(out, torch.tensor([p.temperature for p in params], dtype=torch.float32, device=device),
                            torch.tensor([p.seed for p in params], dtype=torch.int64, device=device),
                            torch.as_tensor(processing.as_ints(pos), dtype=torch.int64, device=device),
                            self.NOISE_LOG1P, self.NOISE_MURMUR3, batched=False if self.per_block else None)
        return ids, (out if processed else None)


class SamplerPass022(_SamplingPass, processing.Sampler022):
    """vLLM 0.22.0 to 0.23.0 (0.23 moves top-k/top-p out of `apply_sampling_params`, which this
    hot path does not state)."""


class SamplerPass024(_SamplingPass, processing.Sampler024):
    """vLLM 0.24.0 and 0.25.x: min tokens until `pos + 1`; Gumbel noise `-log(-log1p(-u))`."""

    NOISE_LOG1P = True


class SamplerPass026(_SamplingPass, processing.Sampler026):
    """vLLM 0.26.0: no fp32 copy, every step in the logits' dtype."""

    NOISE_LOG1P = True


class SamplerPass027(_SamplingPass, processing.Sampler027):
    """vLLM 0.27.x: the fp32 copy back, skipped for a batch no request needs processing."""

    NOISE_LOG1P = True
    SAMPLES_UNPROCESSED = True


class SamplerPass028(_SamplingPass, processing.Sampler028):
    """vLLM 0.28.0 to 0.30.0: bad words on drafts, thinking forcing."""

    NOISE_LOG1P = True
    SAMPLES_UNPROCESSED = True


class SamplerPass031(_SamplingPass, processing.Sampler028):
    """vLLM 0.31.0 to 0.33.0: murmur3 noise of (seed, pos, token), log1p by a degree-8 series."""

    NOISE_MURMUR3 = True
    SAMPLES_UNPROCESSED = True
