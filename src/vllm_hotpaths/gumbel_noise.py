"""Model Runner V2's Gumbel noise as its Triton kernels draw it, for the references of both samplers
that use it: the main sampler's `gumbel_sample` (`sampler_mrv2`) and the rejection sampler's
resampling (`rejection_mrv2`). One function per release era, selected by constexpr flags:

- 0.22-0.23: Philox `tl.rand(tl.randint(seed, pos), token)` floored at fp32's tiniest normal,
  noise `-log(-log u)`;
- 0.24-0.30 (`NOISE_LOG1P`): the same uniform floored at 4.66e-10, noise `-log(-log1p(-u))` with
  libdevice log1p (in Triton's interpreter: `vllm_hotpaths.libdevice_cpu`, the GPU's function);
- 0.31 on (`NOISE_MURMUR3`): a murmur3 hash of (seed, pos, token), log1p by a degree-8 series
  (in Triton's interpreter the hash runs in NumPy, `vllm_hotpaths.interpreter_random`);
- `philox_uniform64`: the fp64 draw of 0.21 (the rejection sampler's acceptance test until 0.24).
"""

from __future__ import annotations

import os

from vllm_hotpaths import vllm_env

vllm_env.set_cpu_environment()

import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def philox_uniform64(seed, offset):
    # 64 random bits from one Philox round, scaled by 2**-64, floored at fp64's tiniest normal.
    lo, hi, _, _ = tl.randint4x(seed, offset)
    bits = (hi.to(tl.uint32, bitcast=True).to(tl.uint64) << 32) | lo.to(tl.uint32, bitcast=True).to(tl.uint64)
    return tl.maximum(bits.to(tl.float64) * 5.421010862427522170037e-20, 2.2250738585072014e-308)


@triton.jit
def _rotl32(x, r: tl.constexpr):
    return (x << r) | (x >> (32 - r))


@triton.jit
def _murmur_round(h, k):
    k = _rotl32(k * 0xCC9E2D51, 15) * 0x1B873593
    return _rotl32(h ^ k, 13) * 5 + 0xE6546B64


@triton.jit
def _murmur_uniform(seed, pos, token):
    # MurmurHash3 (x86, 32-bit) of the words seed.lo, seed.hi, pos.lo, token: 16 bytes, seed 0.
    seed = seed.to(tl.int64)
    pos = pos.to(tl.int64)
    h = (seed ^ seed).to(tl.uint32)
    h = _murmur_round(h, (seed & 0xFFFFFFFF).to(tl.uint32))
    h = _murmur_round(h, ((seed >> 32) & 0xFFFFFFFF).to(tl.uint32))
    h = _murmur_round(h, (pos & 0xFFFFFFFF).to(tl.uint32))
    h = _murmur_round(h, token.to(tl.uint32))
    h = h ^ 16
    h = (h ^ (h >> 16)) * 0x85EBCA6B
    h = (h ^ (h >> 13)) * 0xC2B2AE35
    h = h ^ (h >> 16)
    # Two exact 16-bit halves: (h + 0.5) * 2**-32 rounded once, in the arithmetic upstream writes.
    return ((h >> 16).to(tl.int32).to(tl.float32) * 1.52587890625e-05
            + ((h & 0xFFFF).to(tl.int32).to(tl.float32) + 0.5) * 2.3283064365386963e-10)


if os.environ.get("TRITON_INTERPRET") == "1":  # the same bits in NumPy: interpreter_random
    from vllm_hotpaths import interpreter_random

    _murmur_uniform = interpreter_random.vectorized(_murmur_uniform, interpreter_random.murmur_uniform)


@triton.jit
def _log1p_of_negative(v):
    # log(1 - v): a degree-8 series below 0.25 (Horner, as upstream writes it), else log directly.
    s = 1.0 / 8.0
    s = 1.0 / 7.0 + v * s
    s = 1.0 / 6.0 + v * s
    s = 1.0 / 5.0 + v * s
    s = 1.0 / 4.0 + v * s
    s = 1.0 / 3.0 + v * s
    s = 1.0 / 2.0 + v * s
    s = 1.0 + v * s
    return tl.where(v < 0.25, -v * s, tl.log(tl.maximum(1.0 - v, 5.960464477539063e-08)))


@triton.jit
def token_uniform(seed, pos, lanes, NOISE_LOG1P: tl.constexpr, NOISE_MURMUR3: tl.constexpr):
    # The Gumbel noise's uniform per token: murmur3 of (seed, pos, token) from 0.31; before, Philox
    # `tl.rand(randint(seed, pos), token)` floored at fp32's tiniest normal (0.22) or at tl.rand's
    # smallest nonzero value, 4.66e-10 (0.24 on).
    if NOISE_MURMUR3:
        u = _murmur_uniform(seed, pos, lanes)
    elif NOISE_LOG1P:
        u = tl.maximum(tl.rand(tl.randint(seed, pos), lanes), 4.6566127342e-10)
    else:
        u = tl.maximum(tl.rand(tl.randint(seed, pos), lanes), 1.1754943508222875e-38)
    return u


@triton.jit
def noise_of_uniform(u, NOISE_LOG1P: tl.constexpr, NOISE_MURMUR3: tl.constexpr):
    # -log(-log u) (0.22); -log(-log1p(-u)), libdevice log1p (0.24) or the series (0.31 on).
    if NOISE_MURMUR3:
        noise = -tl.log(-_log1p_of_negative(u))
    elif NOISE_LOG1P:
        noise = -tl.log(-tl.extra.cuda.libdevice.log1p(-u))
    else:
        noise = -tl.log(-tl.log(u))
    return noise


@triton.jit
def gumbel_noise(seed, pos, lanes, NOISE_LOG1P: tl.constexpr, NOISE_MURMUR3: tl.constexpr):
    return noise_of_uniform(token_uniform(seed, pos, lanes, NOISE_LOG1P, NOISE_MURMUR3), NOISE_LOG1P, NOISE_MURMUR3)


# The smallest uniform each bounded release draws, where its noise is largest (0.22-0.23 draw
# u = 1.0 too, whose noise is +inf: no bound). murmur3: h = 0, (0 + 0.5) * 2**-32 = 2**-33.
SMALLEST_UNIFORM = {(True, False): 4.6566127342e-10, (False, True): 1.1641532182693481e-10}


@triton.jit
def noise_bound(NOISE_LOG1P: tl.constexpr, NOISE_MURMUR3: tl.constexpr, FLOOR: tl.constexpr):
    # The release's largest noise, by the same operations as a token's, at its smallest uniform:
    # no token's noise is above it (the noise falls as u grows, by log 2 or more near the floor).
    return tl.max(noise_of_uniform(tl.full([2], FLOOR, tl.float32), NOISE_LOG1P, NOISE_MURMUR3), axis=0)
