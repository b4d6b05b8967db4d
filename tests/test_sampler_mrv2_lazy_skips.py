"""The lazy pass skips what it may (`sampler_mrv2/lazy.py`): the equivalence law holds it to the
reference's ids, which a pass drawing every block would also give; here, the share it reads
again, which `pass_choice` and the benchmark count on. CPU, in Triton's interpreter."""

import os

import numpy as np
import pytest
import torch

from vllm_hotpaths.logits_copy import RequestParams
from vllm_hotpaths.sampler_mrv2.lazy import LazySamplingPass031
from vllm_hotpaths.sampler_mrv2.reference import BLOCK

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs Triton's interpreter")
VOCAB = 3 * BLOCK


def drawn_after(logits: torch.Tensor, **params) -> list[int]:
    """Ids read again per block, one request (slot 0) sampling the row `logits`."""
    lazy = LazySamplingPass031(VOCAB, 1, "cpu")
    lazy.add_request(0, [7], [9], RequestParams(seed=11, **params))
    ids, _ = lazy.sample(logits[None], np.array([0]), np.array([0]), np.array([9]), np.array([3]), processed=False)
    reference = lazy.reference
    want, _ = reference.sample(logits[None], np.array([0]), np.array([0]), np.array([9]), np.array([3]),
                               processed=False)
    assert torch.equal(ids, want), (ids, want)
    return lazy.last_drawn[0].tolist()


def peaked(head_id: int, head: float = 60.0) -> torch.Tensor:
    x = torch.randn(VOCAB, generator=torch.Generator().manual_seed(head_id))
    x[head_id] = head
    return x


@pytest.mark.parametrize("params", [{"temperature": 1.0}, {"temperature": 0.6, "presence_penalty": 1.5},
                                    {"temperature": 1.0, "repetition_penalty": 1.3, "frequency_penalty": 0.5}],
                         ids=["no penalty", "presence", "repetition and frequency"])
def test_a_row_whose_head_stands_far_above_draws_only_the_heads_block(params):
    assert drawn_after(peaked(BLOCK + 5), **params) == [0, BLOCK, 0]


def test_a_penalty_that_raises_logits_keeps_its_tops_exact_and_still_skips():
    """Presence -2 raises the output id 9 (block 0) by 2: its block's top is computed with it."""
    assert drawn_after(peaked(2 * BLOCK + 5), temperature=1.0, presence_penalty=-2.0) == [0, 0, BLOCK]


def test_flat_and_greedy_rows_are_read_again_whole():
    flat = torch.zeros(VOCAB)
    assert drawn_after(flat, temperature=1.0) == [BLOCK] * 3
    assert drawn_after(peaked(5), temperature=0.0) == [BLOCK] * 3
