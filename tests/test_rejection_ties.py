"""`RejectionCase.ties` builds exact ties of Model Runner V2's acceptance test: in the interpreted
kernels of the 0.31.0 reference the tied draft's log probability equals log u, so the reference
(strict `>`) rejects it where the same kernels with `>=` (only where finite) accept it."""

import os
import sys

import numpy as np
import pytest

from vllm_hotpaths.rejection_mrv2.reference import RejectionSampler031
from vllm_hotpaths.testing.cases.rejection_mrv2 import ACCEPT_FLOOR, RejectionCase, tie_log_prob, tie_logits


def test_tie_logits_meet_log_u_exactly_for_most_uniforms():
    uniforms = np.random.default_rng(0).random(500).astype(np.float32)
    exact = sum(tie_log_prob(*tie_logits(u)) == np.log(max(u, ACCEPT_FLOOR)) for u in uniforms)
    assert exact >= 350, f"{exact} of 500 uniforms got an exact tie"


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs Triton's interpreter")
def test_tied_drafts_split_strict_from_non_strict_acceptance():
    from properties.quality.rejection_mrv2 import GreaterOrEqualWhereFinite

    non_strict = sys.modules[GreaterOrEqualWhereFinite.__module__].RejectionSampler031
    differ = 0
    for seed in range(12):
        case = RejectionCase(5, 1, 1, ((0, (2,), 1.0, seed, 3, 0),), False, seed, 0.0, ties=(0,))
        strict_counts = RejectionSampler031().rejection_sample(*case.inputs("cpu"))[1]
        loose_counts = non_strict().rejection_sample(*case.inputs("cpu"))[1]
        # num_sampled: the accepted drafts plus the one token sampled after them
        assert (strict_counts.tolist(), loose_counts.tolist()) in (([1], [1]), ([2], [2]), ([1], [2]))
        differ += loose_counts.tolist() != strict_counts.tolist()
    assert differ >= 6, f"only {differ} of 12 tied drafts were accepted by >= and rejected by >"
