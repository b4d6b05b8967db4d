"""The sampling reference's two launches give the same ids: one program per row and 1024-id block
(what CUDA runs, and the shape of upstream's kernel) and, in Triton's interpreter, one program for
the whole batch (what the CPU properties run). Rows with NaN, infinities, ties, greedy and random
rows, every noise of every release, each logits dtype."""

import os

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from vllm_hotpaths.sampler_mrv2.reference import BLOCK, gumbel_argmax

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs Triton's interpreter")

NOISES = {"Philox, log (0.22)": (False, False), "Philox, log1p (0.24)": (True, False),
          "murmur3 (0.31)": (False, True)}
SPECIAL = (np.nan, np.inf, -np.inf, 0.0, -0.0, 3.0)


@st.composite
def batches(draw):
    rows = draw(st.integers(1, 5))
    vocab = draw(st.sampled_from((1, 2, 7, BLOCK - 1, BLOCK, BLOCK + 1, 2 * BLOCK + 5)))
    # Few distinct values (ties) or any finite floats, with specials written over some lanes.
    values = draw(st.sampled_from((st.sampled_from((-1.0, 0.0, 2.5)), st.floats(-1e4, 1e4, width=32))))
    logits = draw(arrays(np.float32, (rows, vocab), elements=values))
    for _ in range(draw(st.integers(0, 4))):
        logits[draw(st.integers(0, rows - 1)), draw(st.integers(0, vocab - 1))] = draw(st.sampled_from(SPECIAL))
    dtype = draw(st.sampled_from((torch.float32, torch.bfloat16, torch.float16)))
    temperature = draw(arrays(np.float32, rows, elements=st.sampled_from((0.0, 1.0, 0.7))))
    seed = draw(arrays(np.int64, rows, elements=st.integers(-(2**63), 2**63 - 1)))
    pos = draw(arrays(np.int64, rows, elements=st.integers(0, 2**31 - 1)))
    return torch.from_numpy(logits).to(dtype), *map(torch.from_numpy, (temperature, seed, pos))


@settings(max_examples=40, derandomize=True)
@given(batches(), st.sampled_from(sorted(NOISES)))
def test_one_program_for_the_batch_samples_as_one_per_block(batch, noise):
    per_block = gumbel_argmax(*batch, *NOISES[noise], batched=False)
    whole = gumbel_argmax(*batch, *NOISES[noise], batched=True)
    assert torch.equal(whole, per_block), f"{noise}: batched {whole.tolist()}, per block {per_block.tolist()}"


def test_a_row_of_nan_and_ties_lands_on_the_first():
    logits = torch.tensor([[1.0, np.nan, 5.0, np.nan], [2.0, 7.0, 7.0, 1.0], [-np.inf] * 4])
    greedy, zeros = torch.zeros(3), torch.zeros(3, dtype=torch.int64)
    for batched in (True, False):  # upstream's rules: a NaN wins, then the lowest id among equals
        ids = gumbel_argmax(logits, greedy, zeros, zeros, False, False, batched=batched)
        assert ids.tolist() == [1, 1, 0], f"batched={batched}: {ids.tolist()}"
