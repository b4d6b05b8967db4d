"""The random draws of interpreted kernels through NumPy (vllm_hotpaths.interpreter_random): the
same bits as the interpreted functions (Triton's Philox, our murmur3), for every seed, counter
shape and width the callers use."""

import os
from functools import cache

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from vllm_hotpaths import gumbel_noise

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs Triton's interpreter")

BLOCK = 16


@cache
def _kernels():
    import triton
    import triton.language as tl

    @triton.jit
    def words_kernel(out_ptr, offsets_ptr, seed_ptr, n_rounds: tl.constexpr, SCALAR: tl.constexpr):
        lanes = tl.arange(0, BLOCK)
        if SCALAR:  # one counter for the program, as vLLM's `tl.randint(seed, pos)`
            offsets = tl.load(offsets_ptr)
        else:
            offsets = tl.load(offsets_ptr + lanes)
        a, b, c, d = tl.randint4x(tl.load(seed_ptr), offsets, n_rounds)
        tl.store(out_ptr + lanes, a)
        tl.store(out_ptr + BLOCK + lanes, b)
        tl.store(out_ptr + 2 * BLOCK + lanes, c)
        tl.store(out_ptr + 3 * BLOCK + lanes, d)

    @triton.jit
    def uniform_kernel(out_ptr, offsets_ptr, seed, pos):
        # Counters of two shapes at once: a scalar seed from a scalar draw, then a block of them.
        lanes = tl.arange(0, BLOCK)
        tl.store(out_ptr + lanes, tl.rand(tl.randint(seed, pos), tl.load(offsets_ptr + lanes)))

    @triton.jit
    def float_kernel(out_ptr, words_ptr):
        lanes = tl.arange(0, BLOCK)
        tl.store(out_ptr + lanes, tl.random.uint_to_uniform_float(tl.load(words_ptr + lanes)))

    @triton.jit
    def murmur_kernel(out_ptr, tokens_ptr, seed_ptr, pos_ptr):
        lanes = tl.arange(0, BLOCK)
        u = gumbel_noise.token_uniform(tl.load(seed_ptr), tl.load(pos_ptr), tl.load(tokens_ptr + lanes), False, True)
        tl.store(out_ptr + lanes, u)

    return words_kernel, uniform_kernel, float_kernel, murmur_kernel


def _run(vectorized: bool, kernel, out, *args, **constexprs):
    """`kernel` with the vectorized functions installed, or with Triton's own."""
    import triton.language.random as random

    places = [(random, "philox_impl"), (random, "philox"), (random, "uint_to_uniform_float"),
              (gumbel_noise, "_murmur_uniform")]
    installed = [getattr(module, name) for module, name in places]
    assert all(f.vectorized for f in installed), "interpreter_random is not installed"
    for (module, name), f in zip(places, installed):
        setattr(module, name, f if vectorized else f.__wrapped__)
    try:
        kernel[(1,)](out, *args, **constexprs)
    finally:
        for (module, name), f in zip(places, installed):
            setattr(module, name, f)
    return out.view(torch.int32).clone()


SEEDS = st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from((0, -1, 2**32 - 1, 2**32, -(2**31), 2**63 - 1)))


@settings(max_examples=40, database=None)
@given(seed=SEEDS, seed_dtype=st.sampled_from((torch.int64, torch.int32)),
       dtype=st.sampled_from((torch.int32, torch.int64)), scalar=st.booleans(),
       n_rounds=st.sampled_from((10, 7, 2, 1, 0)),
       offsets=st.lists(st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(0, 2**32 + 5)),
                        min_size=BLOCK, max_size=BLOCK))
def test_philox_words_are_tritons(seed, seed_dtype, dtype, scalar, n_rounds, offsets):
    words_kernel, *_ = _kernels()
    seeds = torch.tensor([seed], dtype=torch.int64).to(seed_dtype)  # an int32 seed keeps its low word
    info = torch.iinfo(dtype)
    counters = torch.tensor([min(max(o, info.min), info.max) for o in offsets], dtype=dtype)
    got, want = (_run(v, words_kernel, torch.empty(4 * BLOCK, dtype=torch.int32), counters, seeds,
                      n_rounds=n_rounds, SCALAR=scalar) for v in (True, False))
    assert torch.equal(got, want), (got - want).nonzero().flatten().tolist()


@settings(max_examples=20, database=None)
@given(seed=SEEDS, pos=st.integers(-(2**31), 2**31 - 1),
       offsets=st.lists(st.integers(0, 2**31 - 1), min_size=BLOCK, max_size=BLOCK))
def test_uniforms_are_tritons(seed, pos, offsets):
    _, uniform_kernel, *_ = _kernels()
    counters = torch.tensor(offsets, dtype=torch.int32)
    got, want = (_run(v, uniform_kernel, torch.empty(BLOCK, dtype=torch.float32), counters, seed, pos)
                 for v in (True, False))
    assert torch.equal(got, want)


EDGE_WORDS = (0, 1, -1, 2**31 - 1, -(2**31), -(2**31) + 1, 2**24, -(2**24) - 1)  # -(-2**31) wraps


@settings(max_examples=30, database=None)
@given(words=st.lists(st.one_of(st.integers(-(2**31), 2**31 - 1), st.sampled_from(EDGE_WORDS)),
                      min_size=BLOCK, max_size=BLOCK))
def test_word_floats_are_tritons(words):
    _, _, float_kernel, _ = _kernels()
    got, want = (_run(v, float_kernel, torch.empty(BLOCK, dtype=torch.float32), torch.tensor(words, dtype=torch.int32))
                 for v in (True, False))
    assert torch.equal(got, want)


@settings(max_examples=30, database=None)
@given(seed=SEEDS, seed_dtype=st.sampled_from((torch.int64, torch.int32)),
       pos=st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from((0, -1, 2**32, 2**31))),
       pos_dtype=st.sampled_from((torch.int64, torch.int32)),
       tokens=st.lists(st.one_of(st.integers(-(2**31), 2**31 - 1), st.integers(0, 2**17)), min_size=BLOCK,
                       max_size=BLOCK))
def test_murmur_uniforms_are_the_interpreted_functions(seed, seed_dtype, pos, pos_dtype, tokens):
    *_, murmur_kernel = _kernels()
    seeds = torch.tensor([seed], dtype=torch.int64).to(seed_dtype)
    info = torch.iinfo(pos_dtype)
    positions = torch.tensor([min(max(pos, info.min), info.max)], dtype=pos_dtype)
    ids = torch.tensor(tokens, dtype=torch.int32)
    got, want = (_run(v, murmur_kernel, torch.empty(BLOCK, dtype=torch.float32), ids, seeds, positions)
                 for v in (True, False))
    assert torch.equal(got, want), (got - want).nonzero().flatten().tolist()


def test_rounds_match_the_published_philox_vector():
    """Philox-4x32-10 of counter 0 and key 0 (Random123's known-answer test)."""
    from vllm_hotpaths.interpreter_random import rounds

    zero = np.zeros(1, dtype=np.uint32)
    words = [int(w[0]) for w in rounds(zero, zero, zero, zero, zero, zero, 10)]
    assert words == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
