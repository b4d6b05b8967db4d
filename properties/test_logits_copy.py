"""Logits copy: what the generic laws do not cover (those run `testing.cases.logits_copy.LogitsCopyChecks`).

Every setting next to a boundary of the "needs processing" rule, alone in its batch, and every
pair of knobs off neutral in one request (where the order of two processing steps shows):
candidate == frozen reference (processed logits, bit for bit after upcasting to fp32; the caller's
logits never written) and reference == the installed vLLM's Model Runner v2 sampler (processed
logits and the ids its Gumbel sampler draws from them with the requests' seeds); and vLLM's Gumbel
sampler draws the same ids from the candidate's output as from the reference's.

The reference's kernels are Triton: CPU cases run in Triton's interpreter (a process with
TRITON_INTERPRET=1, which is every process on a machine without a GPU), CUDA cases compiled.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies import logits_programs
from strategies.logits_copy import BOUNDARY_SETTINGS, KNOB_PAIRS, boundary_cases, pair_programs
from properties import committed_examples
from vllm_hotpaths import registry, vllm_env
from vllm_hotpaths.testing import drift, ledger
from vllm_hotpaths.testing.cases.logits_copy import LogitsCopyChecks, LogitsProgram, processed, run
from vllm_hotpaths.testing.laws import Side

HOTPATH = registry.get("logits_copy")
CHECKS = LogitsCopyChecks()
pytestmark = [pytest.mark.hotpath("logits_copy"), pytest.mark.triton]
replayed = committed_examples("logits_copy", LogitsProgram, "program")


@pytest.mark.check("equivalence")
@pytest.mark.parametrize("knob, value", BOUNDARY_SETTINGS, ids=[f"{k}={v}" for k, v in BOUNDARY_SETTINGS])
@given(data=st.data())
@settings(max_examples=max(10, settings.default.max_examples // 10))
def test_candidate_matches_reference_at_each_boundary(knob, value, data, candidate, device, case_log):
    """Every setting next to a boundary of the "needs processing" rule, alone in its batch
    (greedy or sampled; the setting's token with a special logit such as -0.0)."""
    program = data.draw(boundary_cases(knob, value), label="case").program()
    case_log.record(program)
    check_candidate(program, candidate, device)


PAIR_IDS = [f"{a}+{b}" for a, b in KNOB_PAIRS]


@pytest.mark.check("equivalence")
@pytest.mark.parametrize("pair", KNOB_PAIRS, ids=PAIR_IDS)
@given(data=st.data())
@settings(max_examples=max(3, settings.default.max_examples // 50))
def test_candidate_matches_reference_for_each_pair_of_knobs(pair, data, candidate, device, case_log):
    """Every pair of knobs off neutral together in one request, beside another or alone."""
    program = data.draw(pair_programs(pair), label="case")
    case_log.record(program)
    check_candidate(program, candidate, device)


def check_candidate(program: LogitsProgram, candidate, device) -> None:
    """The equivalence law's comparison (the whole batch, then each request alone)."""
    name, factory, version = candidate
    reference = Side(f"reference {version}", HOTPATH.reference(version), version)
    CHECKS.agree(program, reference, Side(name, factory, version), device, None)


# The kept tests keep their source, docstrings included: it seeds Hypothesis' derandomized
# profiles (ci, gate), so they draw the examples they drew before. "The same" below: the
# conformance law's comparison.
@pytest.mark.check("conformance")
@pytest.mark.needs_vllm
@pytest.mark.needs_interpreter  # vLLM's kernels on CPU tensors: in the interpreted run, not a CUDA one
@pytest.mark.parametrize("knob, value", BOUNDARY_SETTINGS, ids=[f"{k}={v}" for k, v in BOUNDARY_SETTINGS])
@given(data=st.data())
@settings(max_examples=max(3, settings.default.max_examples // 50))
def test_reference_matches_installed_vllm_at_each_boundary(knob, value, data, case_log):
    """The same at every boundary setting, where an off-by-one in a position or a threshold
    shows (min_tokens ending within a request's draft rows, a bad word's prefix among them)."""
    program = data.draw(boundary_cases(knob, value), label="case").program()
    case_log.record(program)
    check_reference_conforms(program, case_log)


@pytest.mark.check("conformance")
@pytest.mark.needs_vllm
@pytest.mark.needs_interpreter
@pytest.mark.parametrize("pair", KNOB_PAIRS, ids=PAIR_IDS)
@given(data=st.data())
@settings(max_examples=max(10, settings.default.max_examples // 15))
def test_reference_matches_installed_vllm_for_each_pair_of_knobs(pair, data, case_log):
    """The same for every pair of knobs off neutral in one request: a reference applying two of
    vLLM's processing steps in the other order differs here (the bias and the penalties, the
    temperature and min_p, ...)."""
    program = data.draw(pair_programs(pair), label="case")
    case_log.record(program)
    check_reference_conforms(program, case_log)


def check_reference_conforms(program: LogitsProgram, case_log) -> None:
    """The conformance law's comparison (processed logits in fp32, and the ids vLLM's Gumbel
    sampler draws from both), through the ledger."""
    version = vllm_env.installed_version()
    reference_version = drift.conformance_reference_version("logits_copy", case_log)
    reference = Side(f"reference {reference_version}", drift.conformance_reference("logits_copy", case_log),
                     reference_version)
    live = Side(f"vLLM {version}", HOTPATH.live_factory(), version)
    ledger.conformance_judge("logits_copy", version, case_log)(
        program, lambda: CHECKS.agree(program, reference, live, "cpu", case_log))


@pytest.mark.check("equivalence")
@pytest.mark.needs_vllm
@pytest.mark.devices("cpu")
@replayed
@given(program=logits_programs())
def test_candidate_samples_like_reference(program, candidate, device, case_log):
    """vLLM's own Gumbel sampler, with the requests' seeds, draws the same ids from the
    candidate's output (its own dtype when the copy is skipped) as from the reference's."""
    case_log.record(program)
    name, factory, version = candidate
    reference, fast, live = program.samplers(HOTPATH.reference(version), factory,
                                             registry.resolve(HOTPATH.live), device=device)
    for i, step in enumerate(run(program, (reference, fast, live), device)):
        expected = live.gumbel_sample(processed(reference, step, "reference"), step.rows, step.pos)
        actual = live.gumbel_sample(processed(fast, step, name), step.rows, step.pos)
        assert torch.equal(actual, expected), f"step {i}: {name} sampled {actual.tolist()}, reference {expected.tolist()}"
