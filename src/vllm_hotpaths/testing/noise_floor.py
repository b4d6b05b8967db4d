"""Rows where a token's noise is the largest the release can draw: the edge of the lazy pass's bound.

A token reaches the bound only when its uniform is the smallest one drawn, about one draw in 2**30:
random rows never meet it. With murmur3 (vLLM 0.31 on) it can be built: the hash is a chain of
invertible 32-bit steps, so for any low seed word, position and token there is exactly one high
seed word whose hash is 0, the uniform 2**-33 (`murmur3_floor_seed`). `noise_of` draws the
release's noise on a device with its own operations (the same bits as the kernels' tokens), so a
row can put that token's noisy value exactly on a threshold, or one fp32 step from it, on the
device that samples it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from vllm_hotpaths.gumbel_noise import SMALLEST_UNIFORM, gumbel_noise, noise_bound

MASK = 0xFFFFFFFF
C1, C2, MIX = 0xCC9E2D51, 0x1B873593, 0xE6546B64


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & MASK


def _block(k: int) -> int:
    return (_rotl((k * C1) & MASK, 15) * C2) & MASK


def _unblock(k: int) -> int:
    return (_rotl((k * pow(C2, -1, 2**32)) & MASK, 17) * pow(C1, -1, 2**32)) & MASK


def _round(h: int, k: int) -> int:
    return (_rotl(h ^ _block(k), 13) * 5 + MIX) & MASK


def _before_round(after: int) -> int:
    """h ^ block(k) of a round that ended at `after`."""
    return _rotl(((after - MIX) * pow(5, -1, 2**32)) & MASK, 19)


def murmur3_hash(seed: int, pos: int, token: int) -> int:
    """The 32-bit hash of (seed, pos, token) as vLLM 0.31's Gumbel noise takes it (finalized)."""
    h = 0
    for word in (seed & MASK, (seed >> 32) & MASK, pos & MASK, token & MASK):
        h = _round(h, word)
    h ^= 16
    for shift, factor in ((16, 0x85EBCA6B), (13, 0xC2B2AE35)):
        h = ((h ^ (h >> shift)) * factor) & MASK
    return h ^ (h >> 16)


def murmur3_floor_seed(seed_low: int, pos: int, token: int) -> int:
    """The int64 seed with low word `seed_low` whose hash at (pos, token) is 0 (the finalizer
    maps 0 to 0 and 16 is xored before it, so the last round must end at 16)."""
    after_pos = _before_round(16) ^ _block(token & MASK)
    after_high = _before_round(after_pos) ^ _block(pos & MASK)
    high = _unblock(_before_round(after_high) ^ _round(0, seed_low & MASK))
    seed = (high << 32) | (seed_low & MASK)
    return seed - 2**64 if seed >= 2**63 else seed


@triton.jit
def _noise_kernel(out_ptr, seed, pos, tokens_ptr, n, NOISE_LOG1P: tl.constexpr, NOISE_MURMUR3: tl.constexpr,
                  FLOOR: tl.constexpr, BLOCK: tl.constexpr):
    lanes = tl.arange(0, BLOCK)
    tokens = tl.load(tokens_ptr + lanes, mask=lanes < n, other=0)
    tl.store(out_ptr + lanes, gumbel_noise(seed, pos, tokens, NOISE_LOG1P, NOISE_MURMUR3), mask=lanes < n)
    tl.store(out_ptr + n, noise_bound(NOISE_LOG1P, NOISE_MURMUR3, FLOOR))


def noise_of(seed: int, pos: int, tokens: list[int], noise: tuple[bool, bool], device) -> tuple[list, float]:
    """(each token's noise at (seed, pos), the release's bound), fp32 values computed on `device`."""
    ids = torch.tensor(tokens, dtype=torch.int32, device=device)
    out = torch.empty(len(tokens) + 1, dtype=torch.float32, device=device)
    _noise_kernel[(1,)](out, seed, pos, ids, len(tokens), NOISE_LOG1P=noise[0], NOISE_MURMUR3=noise[1],
                        FLOOR=SMALLEST_UNIFORM[noise], BLOCK=triton.next_power_of_2(max(len(tokens), 2)))
    values = out.cpu()
    return values[:-1].tolist(), float(values[-1])
