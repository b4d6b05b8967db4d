"""The random draws of interpreted kernels as a handful of NumPy calls instead of a hundred
interpreted ops: Triton's Philox, and the murmur3 hash of the sampling noise from vLLM 0.31.

`tl.randint`, `tl.rand` and everything above them end in `triton.language.random.philox`: the
seed split into two 32-bit key words, then ten rounds of two 32-bit high multiplies, two low
multiplies, four XORs and two key additions; `tl.rand` then maps each word to a float. The
interpreter runs each of those as a Triton op (type checks, broadcasting, a new tensor and handle
each), about 25 ms a call, once per program: in an interpreted sampling pass Philox was 23.4 s of
44 s (cProfile of `sampler_mrv2`'s equivalence property on CPU, `smoke` profile, 928 calls).
`gumbel_noise._murmur_uniform` (our reference's murmur3 of seed, position and token) costs the
same way: four mixing rounds and a finalizer, about 60 ops.

`install()` puts in their place, for the interpreter only, the same operations on the operands'
NumPy arrays: the interpreter's own casts (`astype`, `view`), unsigned 32-bit arithmetic that
wraps, the high word of each product taken from its 64-bit value (as its `umulhi`), and the
float arithmetic in fp32. The bits are Triton's interpreter's (tests/test_interpreter_random.py
compares them with the interpreted functions, and the conformance properties compare vLLM's
interpreted kernels with our references). What these functions do not cover goes to the
interpreted function: 64-bit counters, fewer than two rounds and operands that are not tensors.
Compiled kernels are not affected.
"""

from __future__ import annotations

import numpy as np

KEY_A, KEY_B = np.uint32(0x9E3779B9), np.uint32(0xBB67AE85)
ROUND_A, ROUND_B = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
SCALE_32 = np.float32(4.6566127342e-10)  # uint_to_uniform_float's for 32-bit words


def install() -> None:
    """Triton's Philox functions (gumbel_noise installs `murmur_uniform` for its own)."""
    import triton.language.random as random

    if not getattr(random.philox, "vectorized", False):
        random.philox_impl = vectorized(random.philox_impl, _philox_impl)
        random.philox = vectorized(random.philox, _philox)
        random.uint_to_uniform_float = vectorized(random.uint_to_uniform_float, _uniform)


def rounds(c0, c1, c2, c3, k0, k1, n: int):
    """Philox-4x32 rounds on uint32 arrays (NumPy broadcasting): the four counter words after `n`."""
    with np.errstate(over="ignore"):
        for _ in range(n):
            hi_b, hi_a = ROUND_B * c2.astype(np.uint64), ROUND_A * c0.astype(np.uint64)
            c0, c1, c2, c3 = ((hi_b >> np.uint64(32)).astype(np.uint32) ^ c1 ^ k0, hi_b.astype(np.uint32),
                              (hi_a >> np.uint64(32)).astype(np.uint32) ^ c3 ^ k1, hi_a.astype(np.uint32))
            k0, k1 = k0 + KEY_A, k1 + KEY_B
    return c0, c1, c2, c3


def vectorized(triton_function, numpy_function):
    """`numpy_function` where it returns a result, else Triton's own (interpreted) function."""

    def call(*args, **kwargs):
        out = numpy_function(*args, **kwargs)
        return triton_function(*args, **kwargs) if out is None else out

    call.vectorized = True
    call.__wrapped__ = triton_function
    return call


def _tensors(*values) -> bool:
    import triton.language as tl

    return all(isinstance(v, tl.tensor) for v in values)


def _words(data: list, of: list, dtype):
    """`data` (NumPy arrays) as Triton tensors of `dtype`, shaped as the broadcast of `of` (the
    operands' tensors), as every word is once it has met all of them."""
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    shapes = [t.type.shape for t in of if t.type.is_block()]
    kind = tl.block_type(dtype, list(np.broadcast_shapes(*shapes))) if shapes else dtype
    return tuple(tl.tensor(TensorHandle(d, dtype), kind) for d in data)


def _n_rounds(n_rounds) -> int:
    import triton.language as tl

    return int(tl.core._unwrap_if_constexpr(n_rounds))


def _philox_impl(c0, c1, c2, c3, k0, k1, n_rounds=10):
    import triton.language as tl

    words = (c0, c1, c2, c3, k0, k1)
    n = _n_rounds(n_rounds)
    if n < 2 or not _tensors(*words) or any(w.dtype != tl.uint32 for w in words):
        return None
    return _words(list(rounds(*(w.handle.data for w in words), n)), list(words), tl.uint32)


SEEDS = ("int32", "int64", "uint32", "uint64")
COUNTERS = ("int32", "uint32")


def _philox(seed, c0, c1, c2, c3, n_rounds=10):
    """`philox` for 32-bit counters: the seed as uint64, its high and low words the key."""
    import triton.language as tl

    counters = (c0, c1, c2, c3)
    n = _n_rounds(n_rounds)
    if n < 2 or not _tensors(seed, *counters) or seed.dtype.name not in SEEDS \
            or any(c.dtype.name not in COUNTERS for c in counters):
        return None
    key = seed.handle.data.astype(np.uint64)
    k0, k1 = key.astype(np.uint32), (key >> np.uint64(32)).astype(np.uint32)
    data = rounds(*(c.handle.data.view(np.uint32) for c in counters), k0, k1, n)
    return _words(list(data), [seed, *counters], tl.uint32)


def _uniform(x):
    """`uint_to_uniform_float` for 32-bit words: |x| (as int32, -x - 1 below 0) times the scale, in fp32."""
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    if not _tensors(x) or x.dtype.name not in COUNTERS:
        return None
    signed = x.handle.data.view(np.int32)
    with np.errstate(over="ignore"):  # -(-2**31) wraps, as in Triton's interpreter
        folded = np.where(signed < 0, -signed - np.int32(1), signed)
    data = folded.astype(np.float32) * SCALE_32
    kind = tl.block_type(tl.float32, x.type.shape) if x.type.is_block() else tl.float32
    return tl.tensor(TensorHandle(data, tl.float32), kind)


def _rotl(x, r: int):
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _murmur_round(h, k):
    k = _rotl(k * np.uint32(0xCC9E2D51), 15) * np.uint32(0x1B873593)
    return _rotl(h ^ k, 13) * np.uint32(5) + np.uint32(0xE6546B64)


def murmur_uniform(seed, pos, token):
    """`gumbel_noise._murmur_uniform`: MurmurHash3 (x86, 32-bit) of seed.lo, seed.hi, pos.lo and
    the token, then (h >> 16) * 2**-16 + ((h & 0xFFFF) + 0.5) * 2**-32 in fp32."""
    import triton.language as tl

    if not _tensors(seed, pos, token) or any(t.dtype.name not in SEEDS for t in (seed, pos, token)):
        return None
    s, p = seed.handle.data.astype(np.int64), pos.handle.data.astype(np.int64)
    with np.errstate(over="ignore"):
        h = (s ^ s).astype(np.uint32)
        for word in ((s & 0xFFFFFFFF).astype(np.uint32), ((s >> 32) & 0xFFFFFFFF).astype(np.uint32),
                     (p & 0xFFFFFFFF).astype(np.uint32), token.handle.data.astype(np.uint32)):
            h = _murmur_round(h, word)
        h = h ^ np.uint32(16)
        h = (h ^ (h >> np.uint32(16))) * np.uint32(0x85EBCA6B)
        h = (h ^ (h >> np.uint32(13))) * np.uint32(0xC2B2AE35)
        h = h ^ (h >> np.uint32(16))
    high = (h >> np.uint32(16)).astype(np.int32).astype(np.float32)
    low = (h & np.uint32(0xFFFF)).astype(np.int32).astype(np.float32)
    data = high * np.float32(1.52587890625e-05) + (low + np.float32(0.5)) * np.float32(2.3283064365386963e-10)
    (out,) = _words([data], [seed, pos, token], tl.float32)
    return out
