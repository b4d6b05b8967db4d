"""sampler_mrv2 properties specific to the hot path (the generic laws run
`testing.cases.sampler_mrv2.SamplingPassChecks`).

Every pair of the knobs the fused pass computes itself (temperature and the three penalties) off
neutral in one request: the candidate samples the same ids and processed logits as the frozen
reference. Only there does the order of the pass's own steps show (temperature after the
penalties; repetition, then frequency, then presence): a request with any other knob off neutral
goes to the reference's processing, whose order the logits_copy properties check against vLLM
for every pair of knobs (properties/test_logits_copy.py).

The kernels are Triton: CPU cases run in Triton's interpreter, CUDA cases compiled.
"""

from __future__ import annotations

from itertools import combinations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies.sampler_mrv2 import FUSED_KNOBS, sampler_pair_programs
from vllm_hotpaths import registry
from vllm_hotpaths.testing.laws import Side

HOTPATH = registry.get("sampler_mrv2")
FUSED_PAIRS = tuple(combinations(FUSED_KNOBS, 2))
pytestmark = [pytest.mark.hotpath("sampler_mrv2"), pytest.mark.triton]


@pytest.mark.check("equivalence")
@pytest.mark.parametrize("pair", FUSED_PAIRS, ids=[f"{a}+{b}" for a, b in FUSED_PAIRS])
@given(data=st.data())
@settings(max_examples=max(10, settings.default.max_examples // 15))
def test_candidate_matches_reference_for_each_pair_of_fused_knobs(pair, data, candidate, device, case_log):
    """Both knobs off neutral in one request (beside another or alone; vocabularies of one to
    three 1024-id blocks, seeds over int64)."""
    program = data.draw(sampler_pair_programs(pair), label="case")
    case_log.record(program)
    name, factory, version = candidate
    reference = Side(f"reference {version}", HOTPATH.reference(version), version)
    HOTPATH.make_checks().agree(program, reference, Side(name, factory, version), device, case_log)
