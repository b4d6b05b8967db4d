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


FLOOR_FROM = "0.31.0"  # murmur3: a token at the noise's bound can be built (testing.noise_floor)


@pytest.mark.check("equivalence")
@given(data=st.data())
@settings(max_examples=max(10, settings.default.max_examples // 15))
def test_candidate_matches_reference_where_a_token_draws_the_largest_noise(data, candidate, device):
    """One random row (temperature 1.0, the other ids -200) whose token `t` draws the release's
    largest noise, the bound of the lazy pass: its seed is built so that the hash at (pos, t) is 0.
    The row's other finite id `j` sets the threshold, its noisy value `best` near 20 (fp32's step
    there is the bound's), and `x_t + bound` rounds to `best` (a tie: the lower id wins), or one
    step above or below it. The candidate samples what the reference samples; the reference's
    choice is also checked, so that a row built wrong fails rather than passes."""
    import numpy as np
    import torch

    from vllm_hotpaths.logits_copy import RequestParams
    from vllm_hotpaths.registry import version_key
    from vllm_hotpaths.testing.noise_floor import murmur3_floor_seed, noise_of

    name, factory, version = candidate
    if version_key(version) < version_key(FLOOR_FROM):
        pytest.skip(f"{name}: rows at the noise's bound are built for murmur3 (vLLM {FLOOR_FROM} on)")
    vocab = data.draw(st.sampled_from((1024, 2048, 3000)), label="vocab")
    t, j = data.draw(st.lists(st.integers(0, vocab - 1), min_size=2, max_size=2, unique=True), label="t, j")
    pos = data.draw(st.integers(0, 2**31 - 1), label="pos")
    seed = murmur3_floor_seed(data.draw(st.integers(0, 2**32 - 1), label="seed's low word"), pos, t)
    steps = data.draw(st.sampled_from((-1, 0, 1)), label="x_t + bound, in fp32 steps from best")
    reference = HOTPATH.reference(version)
    (g_j, g_t), bound = noise_of(seed, pos, [j, t], (reference.NOISE_LOG1P, reference.NOISE_MURMUR3), device)
    assert g_t == bound, f"seed {seed}: token {t} draws {g_t}, not the bound {bound}"
    f32 = lambda v: torch.tensor(v, dtype=torch.float32, device=device)  # noqa: E731
    x_j = f32(20.0) - f32(g_j)
    best = x_j + f32(g_j)
    target = f32(float(np.nextafter(np.float32(best.item()), np.float32(np.inf * steps)))) if steps else best
    x_t = target - f32(bound)
    for _ in range(8):  # the nearest x_t whose sum with the bound rounds to the target
        if (x_t + f32(bound)).item() == target.item():
            break
        x_t = f32(float(np.nextafter(np.float32(x_t.item()), np.float32(target.item() - (x_t + f32(bound)).item()) * np.inf)))
    assert (x_t + f32(bound)).item() == target.item(), "no fp32 x_t puts x_t + bound on the target"
    logits = torch.full((1, vocab), -200.0, dtype=torch.float32, device=device)
    logits[0, j], logits[0, t] = x_j, x_t
    want_id = t if steps > 0 or (steps == 0 and t < j) else j
    sides = [reference(vocab, 1, device), factory(vocab, 1, device)]
    results = []
    for impl in sides:
        impl.add_request(0, [0], [], RequestParams(temperature=1.0, seed=seed))
        results.append(impl.sample(logits, [0], [0], [0], [pos], processed=True))
    (want, want_out), (got, got_out) = results
    assert want.tolist() == [want_id], f"the reference sampled {want.tolist()}, the row was built for {want_id}"
    assert got.tolist() == want.tolist(), \
        f"{name} sampled {got.tolist()}, the reference {want.tolist()} (t={t}, j={j}, steps={steps})"
    assert torch.equal(got_out.view(torch.int32), want_out.float().view(torch.int32)), "processed logits differ"
