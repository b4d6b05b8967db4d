"""Frozen references of Model Runner V2's rejection sampling, keyed at the vLLM releases where its
default path changed: 0.21.0, 0.22.0, 0.24.0, 0.25.0, 0.28.0 and 0.31.0 (the contract: `rejection_mrv2`;
the semantics: this package's docstring).

Four Triton kernels with upstream's phases, block sizes and lane arithmetic, so that on CUDA
Triton compiles the same arithmetic (its `log`/`exp` approximations, fused multiply-adds, block
reductions, lowest-lane ties) and in the interpreter NumPy runs the same operations:

1. per logits row and 8192-lane block: the target max and sum of exponentials (greedy: max and
   argmax), and the draft's (0.28 on: draft logits divided by the temperature);
2. per request: the acceptance test row by row (0.22: a fp64 Philox uniform; 0.25 on: a fp32
   one floored at 4.66e-10; a -1 draft is rejected from 0.25, and ends a random request's
   verification from 0.28);
3. per request and 1024-lane block: the Gumbel-max of the resampled row's residual (Philox noise
   keyed by `randint(seed, pos)` and the token: in 0.21 a fp64 uniform from 64 bits and the
   residual in fp64, `-log(-log u)` in fp32 in 0.22, `-log(-log1p(-u))` from 0.24; from 0.31 a
   murmur3 hash of (seed, pos, token) and a series for log1p);
4. per request: the argmax over the blocks' maxima (0.28 on first maps a NaN maximum to -inf).

Each behaviour is a class attribute (a constexpr of the kernels), set by the reference of the
release that brought it. libdevice `log1p` (the Gumbel noise of 0.24 to 0.30, the residual with
draft logits from 0.25) runs in Triton's interpreter through `vllm_hotpaths.libdevice_cpu` (the
GPU's function, bit for bit).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from vllm_hotpaths.gumbel_noise import gumbel_noise, philox_uniform64, token_uniform
from vllm_hotpaths.rejection_mrv2 import InvalidRejectionInput, check_inputs, fill_tail

STATS_BLOCK = 8192
RESAMPLE_BLOCK = 1024


@triton.jit
def _max_and_sumexp(x):
    top = tl.max(x, axis=0)
    return top, tl.where(top > float("-inf"), tl.sum(tl.exp(x - top)), 0.0)


@triton.jit
def _logsumexp(max_ptr, sumexp_ptr, row, num_blocks, PADDED_BLOCKS: tl.constexpr):
    blocks = tl.arange(0, PADDED_BLOCKS)
    inside = blocks < num_blocks
    maxes = tl.load(max_ptr + row * num_blocks + blocks, mask=inside, other=float("-inf"))
    sums = tl.load(sumexp_ptr + row * num_blocks + blocks, mask=inside, other=0.0)
    top = tl.max(maxes, axis=0)
    return top + tl.log(tl.sum(sums * tl.exp(maxes - top)))


@triton.jit
def _stats_kernel(t_argmax_ptr, t_max_ptr, t_sumexp_ptr, d_max_ptr, d_sumexp_ptr, target_ptr, draft_ptr,
                  row_slot_ptr, row_step_ptr, row_skip_ptr, temp_ptr, vocab_size, num_steps, num_blocks,
                  BLOCK: tl.constexpr, HAS_DRAFT: tl.constexpr, DRAFT_OVER_TEMP: tl.constexpr):
    row = tl.program_id(0)
    if tl.load(row_skip_ptr + row) != 0:  # a bonus row: nothing reads its statistics
        return
    slot = tl.load(row_slot_ptr + row).to(tl.int64)
    step = tl.load(row_step_ptr + row).to(tl.int64)
    temp = tl.load(temp_ptr + slot).to(tl.float32)
    block = tl.program_id(1)
    lanes = block * BLOCK + tl.arange(0, BLOCK)
    inside = lanes < vocab_size
    x = tl.load(target_ptr + row * vocab_size + lanes, mask=inside, other=float("-inf")).to(tl.float32)
    out = row * num_blocks + block
    if temp == 0.0:
        top, lane = tl.max(x, axis=0, return_indices=True)
        tl.store(t_argmax_ptr + out, block * BLOCK + lane)
        tl.store(t_max_ptr + out, top)
    else:
        top, total = _max_and_sumexp(x)
        tl.store(t_max_ptr + out, top)
        tl.store(t_sumexp_ptr + out, total)
        if HAS_DRAFT:
            d = tl.load(draft_ptr + (slot * num_steps + step) * vocab_size + lanes, mask=inside,
                        other=float("-inf")).to(tl.float32)
            if DRAFT_OVER_TEMP:
                d = d / temp
            top, total = _max_and_sumexp(d)
            tl.store(d_max_ptr + out, top)
            tl.store(d_sumexp_ptr + out, total)


@triton.jit
def _global_argmax(max_ptr, argmax_ptr, row, num_blocks, PADDED_BLOCKS: tl.constexpr, NAN_TO_NEG_INF: tl.constexpr):
    blocks = tl.arange(0, PADDED_BLOCKS)
    maxes = tl.load(max_ptr + row * num_blocks + blocks, mask=blocks < num_blocks, other=float("-inf"))
    if NAN_TO_NEG_INF:
        maxes = tl.where(maxes != maxes, float("-inf"), maxes)
    return tl.load(argmax_ptr + row * num_blocks + tl.argmax(maxes, axis=0)).to(tl.int64)


@triton.jit
def _reject_kernel(sampled_ptr, num_sampled_ptr, t_lse_out_ptr, d_lse_out_ptr, target_ptr, t_argmax_ptr,
                   t_max_ptr, t_sumexp_ptr, ids_ptr, draft_ptr, d_max_ptr, d_sumexp_ptr, cu_ptr, slots_ptr,
                   temp_ptr, seed_ptr, pos_ptr, vocab_size, num_steps, num_blocks,
                   PADDED_BLOCKS: tl.constexpr, HAS_DRAFT: tl.constexpr, ACCEPT_FP32: tl.constexpr,
                   PLACEHOLDER_ENDS: tl.constexpr, DRAFT_OVER_TEMP: tl.constexpr, NAN_TO_NEG_INF: tl.constexpr):
    req = tl.program_id(0)
    slot = tl.load(slots_ptr + req).to(tl.int64)
    start = tl.load(cu_ptr + req).to(tl.int64)
    num_drafts = tl.load(cu_ptr + req + 1) - start - 1
    seed = tl.load(seed_ptr + slot)
    temp = tl.load(temp_ptr + slot).to(tl.float32)
    greedy = temp == 0.0
    width = num_steps + 1
    accepted_count = tl.zeros((), tl.int64)
    target_lse = 0.0
    draft_lse = 0.0
    going = True
    for i in range(num_drafts):
        row = start + i
        draft = tl.load(ids_ptr + row + 1).to(tl.int64)
        valid = draft >= 0
        draft = tl.maximum(draft, 0)
        if PLACEHOLDER_ENDS and not greedy:
            going &= valid  # a -1 draft ends a random request's verification (0.28 on)
        if going:
            accepted = False
            best = tl.zeros((), tl.int64)
            if greedy:
                best = _global_argmax(t_max_ptr, t_argmax_ptr, row, num_blocks, PADDED_BLOCKS, NAN_TO_NEG_INF)
                accepted = (best == draft) & valid
            else:
                t_logit = tl.load(target_ptr + row * vocab_size + draft).to(tl.float32)
                target_lse = _logsumexp(t_max_ptr, t_sumexp_ptr, row, num_blocks, PADDED_BLOCKS)
                t_lp = t_logit - target_lse
                pos = tl.load(pos_ptr + row)
                if ACCEPT_FP32:
                    u = tl.maximum(tl.rand(seed, pos), 4.6566127342e-10)
                    d_lp = 0.0
                else:
                    u = philox_uniform64(seed, pos)
                    d_lp = 0
                if HAS_DRAFT:
                    d_logit = tl.load(draft_ptr + (slot * num_steps + i) * vocab_size + draft).to(tl.float32)
                    if DRAFT_OVER_TEMP:
                        d_logit = d_logit / temp
                    draft_lse = _logsumexp(d_max_ptr, d_sumexp_ptr, row, num_blocks, PADDED_BLOCKS)
                    d_lp = d_logit - draft_lse
                # strict, in log space; a -1 draft (read at lane 0) is rejected (0.25 on)
                accepted = (t_lp > tl.log(u) + d_lp) & valid
            going = accepted
            accepted_count += accepted
            tl.store(sampled_ptr + req * width + i, best if greedy and not accepted else draft)
    tl.store(num_sampled_ptr + req, accepted_count.to(tl.int32))
    tl.store(t_lse_out_ptr + req, target_lse)
    tl.store(d_lse_out_ptr + req, draft_lse)


@triton.jit
def _resample_kernel(block_argmax_ptr, block_max_ptr, target_ptr, t_lse_ptr, draft_ptr, d_lse_ptr,
                     num_sampled_ptr, cu_ptr, row_slot_ptr, ids_ptr, temp_ptr, seed_ptr, pos_ptr,
                     vocab_size, num_steps, num_blocks, BLOCK: tl.constexpr, HAS_DRAFT: tl.constexpr,
                     PLACEHOLDER_ENDS: tl.constexpr, DRAFT_OVER_TEMP: tl.constexpr, RESIDUAL_LOG1P: tl.constexpr,
                     NOISE_LOG1P: tl.constexpr, NOISE_MURMUR3: tl.constexpr, GUMBEL_FP64: tl.constexpr):
    req = tl.program_id(0)
    step = tl.load(num_sampled_ptr + req).to(tl.int64)
    start = tl.load(cu_ptr + req).to(tl.int64)
    end = tl.load(cu_ptr + req + 1)
    row = start + step
    slot = tl.load(row_slot_ptr + row).to(tl.int64)
    temp = tl.load(temp_ptr + slot).to(tl.float32)
    bonus = row == end - 1
    if temp == 0.0 and not bonus:
        return  # a greedy request's rejection already stored the target argmax
    block = tl.program_id(1)
    lanes = block * BLOCK + tl.arange(0, BLOCK)
    inside = lanes < vocab_size
    x = tl.load(target_ptr + row * vocab_size + lanes, mask=inside, other=float("-inf")).to(tl.float32)
    if PLACEHOLDER_ENDS:  # a -1 draft's row: the target itself (0.28 on)
        rejected = tl.load(ids_ptr + row + 1, mask=not bonus, other=0)
        plain = bonus or rejected < 0
    else:
        plain = bonus
    if plain:
        residual = x
    elif HAS_DRAFT:
        d = tl.load(draft_ptr + (slot * num_steps + step) * vocab_size + lanes, mask=inside,
                    other=float("-inf")).to(tl.float32)
        if DRAFT_OVER_TEMP:
            d = d / temp
        t_lp = x - tl.load(t_lse_ptr + req)
        ratio = tl.exp(d - tl.load(d_lse_ptr + req) - t_lp)
        if RESIDUAL_LOG1P:
            gap = tl.extra.cuda.libdevice.log1p(-ratio)
        else:
            gap = tl.log(1 - ratio)
        residual = tl.where(ratio < 1.0, t_lp + gap, float("-inf")).to(tl.float32)
    else:
        residual = tl.where(lanes != tl.load(ids_ptr + row + 1), x, float("-inf")).to(tl.float32)
    if GUMBEL_FP64:  # 0.21: the residual and its noise in fp64
        residual = residual.to(tl.float64)
    if temp != 0.0:
        seed = tl.load(seed_ptr + slot)
        pos = tl.load(pos_ptr + row)
        if GUMBEL_FP64:
            noise = -tl.log(-tl.log(philox_uniform64(tl.randint(seed, pos), lanes)))
        else:
            noise = gumbel_noise(seed, pos, lanes, NOISE_LOG1P, NOISE_MURMUR3)
        residual = tl.where(inside, residual + noise, float("-inf"))
    top, lane = tl.max(residual, axis=0, return_indices=True)
    tl.store(block_argmax_ptr + req * num_blocks + block, block * BLOCK + lane)
    tl.store(block_max_ptr + req * num_blocks + block, top)


@triton.jit
def _insert_kernel(sampled_ptr, num_sampled_ptr, block_argmax_ptr, block_max_ptr, cu_ptr, row_slot_ptr, temp_ptr,
                   num_steps, num_blocks, PADDED_BLOCKS: tl.constexpr, NAN_TO_NEG_INF: tl.constexpr):
    req = tl.program_id(0)
    count = tl.load(num_sampled_ptr + req)
    start = tl.load(cu_ptr + req)
    row = start + count
    slot = tl.load(row_slot_ptr + row)
    tl.store(num_sampled_ptr + req, count + 1)
    temp = tl.load(temp_ptr + slot).to(tl.float32)
    if temp == 0.0 and not row == tl.load(cu_ptr + req + 1) - 1:
        return
    token = _global_argmax(block_max_ptr, block_argmax_ptr, req, num_blocks, PADDED_BLOCKS, NAN_TO_NEG_INF)
    tl.store(sampled_ptr + req * (num_steps + 1) + count, token)


@triton.jit
def _uniforms_kernel(accept_ptr, token_ptr, seed_ptr, pos_ptr, vocab_size, BLOCK: tl.constexpr,
                     ACCEPT_FP32: tl.constexpr, NOISE_LOG1P: tl.constexpr, NOISE_MURMUR3: tl.constexpr,
                     GUMBEL_FP64: tl.constexpr):
    row = tl.program_id(0)
    block = tl.program_id(1)
    seed = tl.load(seed_ptr + row)
    pos = tl.load(pos_ptr + row)
    lanes = block * BLOCK + tl.arange(0, BLOCK)
    if GUMBEL_FP64:
        u = philox_uniform64(tl.randint(seed, pos), lanes)
    else:
        u = token_uniform(seed, pos, lanes, NOISE_LOG1P, NOISE_MURMUR3)
    tl.store(token_ptr + row * vocab_size + lanes, u, mask=lanes < vocab_size)
    if block == 0:
        if ACCEPT_FP32:
            accept = tl.maximum(tl.rand(seed, pos), 4.6566127342e-10).to(tl.float64)
        else:
            accept = philox_uniform64(seed, pos)
        tl.store(accept_ptr + row, accept)


def uniforms(seed: torch.Tensor, pos: torch.Tensor, vocab_size: int, sampler: type):
    """The uniforms that the Model Runner V2 of reference class `sampler` draws for rows with
    these seeds (int64) and positions (int64): (the acceptance test's, float64 [n]; the Gumbel
    noise's per token, float32 [n, vocab_size], float64 where `sampler.GUMBEL_FP64`; its noise is
    `-log(-log u)` where `sampler.NOISE_LOG1P` is False, else `-log(-log1p(-u))`)."""
    n = seed.shape[0]
    accept = torch.zeros(n, dtype=torch.float64, device=seed.device)
    tokens = torch.zeros((n, vocab_size), dtype=torch.float64 if sampler.GUMBEL_FP64 else torch.float32,
                         device=seed.device)
    if n:
        _uniforms_kernel[(n, triton.cdiv(vocab_size, RESAMPLE_BLOCK))](
            accept, tokens, seed, pos, vocab_size, BLOCK=RESAMPLE_BLOCK, ACCEPT_FP32=sampler.ACCEPT_FP32,
            NOISE_LOG1P=sampler.NOISE_LOG1P, NOISE_MURMUR3=sampler.NOISE_MURMUR3, GUMBEL_FP64=sampler.GUMBEL_FP64)
    return accept, tokens


class RejectionSampler021:
    """vLLM 0.21.0 Model Runner V2 `probabilistic_rejection_sample`, its default ("standard")
    rejection (the contract: `rejection_mrv2`); each class attribute below is one behaviour, set by
    the reference of the release that changed it."""

    # 0.22 (PR #41775): the Gumbel noise's uniform is a fp32 tl.rand floored at fp32's tiniest
    # normal and the resampled residual stays fp32; 0.21 draws 64 Philox bits and works in fp64
    GUMBEL_FP64 = True

    # 0.24 (PR #45996): Gumbel noise -log(-log1p(-u)) with libdevice log1p, u floored at 4.66e-10
    NOISE_LOG1P = False
    # 0.25 (PR #46533): the acceptance uniform is a fp32 Philox draw floored at 4.66e-10
    ACCEPT_FP32 = False
    # 0.25 (PR #46533): -1 placeholder drafts are handed over and rejected (0.22-0.24 read at -1)
    PLACEHOLDERS = False
    # 0.25: the residual with draft logits is log p + libdevice log1p(-q/p)
    RESIDUAL_LOG1P = False
    # 0.28 (PR #50939): a -1 draft ends a random request's verification; its row is resampled
    # from the target itself
    PLACEHOLDER_ENDS = False
    # 0.28 (PR #50910): draft logits are cached before the temperature and divided by it on load
    DRAFT_OVER_TEMP = False
    # 0.28: a NaN block maximum is -inf in the argmax over blocks
    NAN_TO_NEG_INF = False
    # 0.31 (PR #51367): the Gumbel noise's uniform is a murmur3 hash of (seed, pos, token), the
    # log1p a degree-8 series
    NOISE_MURMUR3 = False

    def __init__(self, device="cpu") -> None:
        self.device = torch.device(device)

    def rejection_sample(self, target_logits, draft_logits, draft_sampled, cu_num_logits, pos, idx_mapping,
                         expanded_idx_mapping, expanded_local_pos, temperature, seed, num_speculative_steps):
        check_inputs(target_logits, draft_logits, draft_sampled, cu_num_logits, pos, idx_mapping,
                     expanded_idx_mapping, expanded_local_pos, temperature, seed, num_speculative_steps,
                     placeholders=self.PLACEHOLDERS)
        if target_logits.device.type != self.device.type:
            raise InvalidRejectionInput(f"inputs are on {target_logits.device}, the sampler on {self.device}")
        has_draft = draft_logits is not None
        return self._run(target_logits, draft_logits if has_draft else target_logits, has_draft, draft_sampled,
                         cu_num_logits, pos, idx_mapping, expanded_idx_mapping, expanded_local_pos, temperature,
                         seed, num_speculative_steps)

    def _run(self, target, draft, has_draft, ids, cu, pos, slots, row_slot, row_step, temp, seed, steps):
        num_logits, vocab = target.shape
        num_reqs = cu.shape[0] - 1
        dev = target.device
        last_rows = torch.zeros(num_logits, dtype=torch.int8, device=dev)
        last_rows[cu[1:].long() - 1] = 1  # each request's bonus row
        stats_blocks = triton.cdiv(vocab, STATS_BLOCK)
        f32 = dict(dtype=torch.float32, device=dev)
        t_argmax = torch.zeros((num_logits, stats_blocks), dtype=torch.int64, device=dev)
        t_max, t_sum, d_max, d_sum = (torch.zeros((num_logits, stats_blocks), **f32) for _ in range(4))
        _stats_kernel[(num_logits, stats_blocks)](
            t_argmax, t_max, t_sum, d_max, d_sum, target, draft, row_slot, row_step, last_rows, temp, vocab, steps,
            stats_blocks, BLOCK=STATS_BLOCK, HAS_DRAFT=has_draft, DRAFT_OVER_TEMP=self.DRAFT_OVER_TEMP)
        sampled = torch.full((num_reqs, steps + 1), -1, dtype=torch.int64, device=dev)
        num_sampled = torch.zeros(num_reqs, dtype=torch.int32, device=dev)
        t_lse, d_lse = torch.zeros(num_reqs, **f32), torch.zeros(num_reqs, **f32)
        padded = triton.next_power_of_2(stats_blocks)
        _reject_kernel[(num_reqs,)](
            sampled, num_sampled, t_lse, d_lse, target, t_argmax, t_max, t_sum, ids, draft, d_max, d_sum, cu, slots,
            temp, seed, pos, vocab, steps, stats_blocks, PADDED_BLOCKS=padded, HAS_DRAFT=has_draft,
            ACCEPT_FP32=self.ACCEPT_FP32, PLACEHOLDER_ENDS=self.PLACEHOLDER_ENDS,
            DRAFT_OVER_TEMP=self.DRAFT_OVER_TEMP, NAN_TO_NEG_INF=self.NAN_TO_NEG_INF, num_warps=1)
        blocks = triton.cdiv(vocab, RESAMPLE_BLOCK)
        block_argmax = torch.zeros((num_reqs, blocks), dtype=torch.int64, device=dev)
        block_max = torch.zeros((num_reqs, blocks), dtype=torch.float64 if self.GUMBEL_FP64 else torch.float32,
                                device=dev)
        _resample_kernel[(num_reqs, blocks)](
            block_argmax, block_max, target, t_lse, draft, d_lse, num_sampled, cu, row_slot, ids, temp, seed, pos,
            vocab, steps, blocks, BLOCK=RESAMPLE_BLOCK, HAS_DRAFT=has_draft, PLACEHOLDER_ENDS=self.PLACEHOLDER_ENDS,
            DRAFT_OVER_TEMP=self.DRAFT_OVER_TEMP, RESIDUAL_LOG1P=self.RESIDUAL_LOG1P, NOISE_LOG1P=self.NOISE_LOG1P,
            NOISE_MURMUR3=self.NOISE_MURMUR3, GUMBEL_FP64=self.GUMBEL_FP64)
        _insert_kernel[(num_reqs,)](sampled, num_sampled, block_argmax, block_max, cu, row_slot, temp, steps, blocks,
                                    PADDED_BLOCKS=triton.next_power_of_2(blocks), NAN_TO_NEG_INF=self.NAN_TO_NEG_INF)
        return fill_tail(sampled, num_sampled), num_sampled


class RejectionSampler022(RejectionSampler021):
    """vLLM 0.22.0: fp32 Gumbel noise, `-log(-log u)` of a fp32 uniform floored at fp32's tiniest
    normal (PR #41775)."""

    GUMBEL_FP64 = False


class RejectionSampler024(RejectionSampler022):
    """vLLM 0.24.0: Gumbel noise `-log(-log1p(-u))` (libdevice log1p), u floored at 4.66e-10
    (PR #45996)."""

    NOISE_LOG1P = True


class RejectionSampler025(RejectionSampler024):
    """vLLM 0.25.0: a fp32 acceptance uniform floored at 4.66e-10; -1 placeholder drafts handed
    over and rejected, read at lane 0 (PR #46533); the residual with draft logits by libdevice
    log1p."""

    ACCEPT_FP32 = True
    PLACEHOLDERS = True
    RESIDUAL_LOG1P = True


class RejectionSampler028(RejectionSampler025):
    """vLLM 0.28.0: a -1 draft ends a random request's verification and its row is resampled from
    the target (PR #50939); draft logits divided by the temperature on load (PR #50910); a NaN
    block maximum is -inf in the argmax over blocks."""

    PLACEHOLDER_ENDS = True
    DRAFT_OVER_TEMP = True
    NAN_TO_NEG_INF = True


class RejectionSampler031(RejectionSampler028):
    """vLLM 0.31.0 (to 0.33.0: their default path is the same): the Gumbel noise's uniform is a
    murmur3 hash of (seed, pos, token), its log1p a degree-8 series (PR #51367)."""

    NOISE_MURMUR3 = True
