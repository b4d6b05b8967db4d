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


BLOCK = 1024  # the sampler's block of ids
FLOOR_FROM = "0.31.0"  # murmur3: a token at the noise's bound can be built (testing.noise_floor)


@pytest.mark.check("equivalence")
@given(data=st.data())
@settings(max_examples=max(10, settings.default.max_examples // 15))
def test_candidate_matches_reference_where_a_token_draws_the_largest_noise(data, candidate, device, case_log):
    """One random request (temperature 1.0) whose id `t` in the row's first 1024-id block (its
    other ids -200) draws the release's largest noise, the bound of the lazy pass: its seed is
    built so that the hash at (pos, t) is 0. The row's id `j`, in a later block over normal
    logits (scale 4), sets the threshold, its noisy value `best` near 30 (where fp32's step is
    the bound's), and `x_t + bound` rounds to `best` (a tie: the lower id, `t`, wins) or one step
    above (`t` wins) or below it (`j` wins). The candidate samples what the reference samples (the
    equivalence law's comparisons, on a program: its fixture replays); the reference's choice is
    also checked, so that a row built wrong fails rather than passes."""
    import numpy as np
    import torch

    from vllm_hotpaths.registry import version_key
    from vllm_hotpaths.testing.cases.logits_copy import LogitsProgram, run
    from vllm_hotpaths.testing.noise_floor import murmur3_floor_seed, noise_of

    name, factory, version = candidate
    if version_key(version) < version_key(FLOOR_FROM):
        pytest.skip(f"{name}: rows at the noise's bound are built for murmur3 (vLLM {FLOOR_FROM} on)")
    vocab = data.draw(st.sampled_from((1025, 2048, 3000)), label="vocab")
    t = data.draw(st.integers(0, BLOCK - 1), label="t")
    j = data.draw(st.integers(BLOCK, vocab - 1), label="j")
    pos = data.draw(st.integers(0, 30), label="pos")
    seed = murmur3_floor_seed(data.draw(st.integers(0, 2**32 - 1), label="seed's low word"), pos, t)
    steps = data.draw(st.sampled_from((-1, 0, 1)), label="x_t + bound, in fp32 steps from best")
    reference = HOTPATH.reference(version)
    (g_j, g_t), bound = noise_of(seed, pos, [j, t], (reference.NOISE_LOG1P, reference.NOISE_MURMUR3), device)
    assert g_t == bound, f"seed {seed}: token {t} draws {g_t}, not the bound {bound}"
    f32 = lambda v: torch.tensor(v, dtype=torch.float32, device=device)  # noqa: E731
    x_j = f32(30.0) - f32(g_j)
    best = (x_j + f32(g_j)).item()
    target = float(np.nextafter(np.float32(best), np.float32(np.inf * steps))) if steps else best
    x_t = f32(target) - f32(bound)
    for _ in range(8):  # the nearest x_t whose sum with the bound rounds to the target
        off = (x_t + f32(bound)).item() - target
        if off == 0:
            break
        x_t = f32(float(np.nextafter(np.float32(x_t.item()), np.float32(-np.inf * np.sign(off)))))
    assert (x_t + f32(bound)).item() == target, "no fp32 x_t puts x_t + bound on the target"
    edits = tuple((0, lane, -200.0) for lane in range(BLOCK) if lane != t) + ((0, j, x_j.item()), (0, t, x_t.item()))
    program = LogitsProgram(vocab, 1, "float32", (
        ("add", 0, (0,) * (pos + 1), (), (("temperature", 1.0), ("seed", seed))),
        ("step", ((0, ()),), data.draw(st.integers(0, 2**32 - 1), label="logits seed"), 0.0, edits)))
    case_log.record(program)
    (step,) = run(program, [], device)
    (want_from,) = program.samplers(reference, device=device)
    next(run(program, [want_from], device))
    want, _ = want_from.sample(*step.args(), processed=False)
    want_id = t if steps >= 0 else j
    assert want.tolist() == [want_id], f"the reference sampled {want.tolist()}, the row was built for {want_id}"
    reference_side = Side(f"reference {version}", reference, version)
    HOTPATH.make_checks().agree(program, reference_side, Side(name, factory, version), device, case_log)


RAISING = (("repetition_penalty", 0.7), ("presence_penalty", -2.0), ("frequency_penalty", -2.0))


@pytest.mark.check("equivalence")
@given(data=st.data())
@settings(max_examples=max(10, settings.default.max_examples // 15))
def test_candidate_matches_reference_where_a_penalty_raises_an_id_of_a_later_block(data, candidate, device,
                                                                                   case_log):
    """One random request (temperature 0.01) whose penalty raises a logit: repetition 0.7 on an id
    of its prompt, or presence or frequency -2 on an id of its output. That id `b`, in a block
    after the first, has the largest logit of its block, `x_b` in [20, 40]; id `a` of the first
    block has `x_b + 1.5`, the row's largest unpenalized logit. Penalized, `b` leads by at least
    0.5 / 0.01 = 50 before the noise (more than any two noises differ: below 22.9 and above -3.1),
    and its block's unpenalized top plus the noise's bound stays 150 - 22.9 - 3.1 below `a`'s noisy
    value and `b`'s: a pass that took unpenalized tops as bounds for such a row would skip `b`'s
    block, whichever top id raised its threshold. The reference's choice, `b`, is checked too (a
    row built wrong fails)."""
    from vllm_hotpaths.testing.cases.logits_copy import LogitsProgram, run

    name, factory, version = candidate
    vocab = data.draw(st.sampled_from((1025, 2048, 3000)), label="vocab")
    a = data.draw(st.integers(0, BLOCK - 1), label="a")
    b = data.draw(st.integers(BLOCK, vocab - 1), label="b")
    knob, value = data.draw(st.sampled_from(RAISING), label="penalty")
    x_b = data.draw(st.floats(20.0, 40.0, width=32), label="x_b")
    prompt, output = ((b,), ()) if knob == "repetition_penalty" else ((a,), (b,))
    params = (("temperature", 0.01), (knob, value), ("seed", data.draw(st.integers(0, 2**63 - 1), label="seed")))
    step = ("step", ((0, ()),), data.draw(st.integers(0, 2**32 - 1), label="logits seed"), 0.0,
            ((0, a, x_b + 1.5), (0, b, x_b)))
    # Twice: the equivalence comparisons ask for the processed logits on the first step only, and
    # a pass computes its tops exactly wherever it writes them.
    program = LogitsProgram(vocab, 1, "float32", (("add", 0, prompt, output, params), step, step))
    case_log.record(program)
    reference = HOTPATH.reference(version)
    built = next(run(program, [], device))
    (want_from,) = program.samplers(reference, device=device)
    next(run(program, [want_from], device))
    want, _ = want_from.sample(*built.args(), processed=False)
    assert want.tolist() == [b], f"the reference sampled {want.tolist()}, the row was built for {b}"
    reference_side = Side(f"reference {version}", reference, version)
    HOTPATH.make_checks().agree(program, reference_side, Side(name, factory, version), device, case_log)
