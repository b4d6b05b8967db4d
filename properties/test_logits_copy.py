"""Logits-copy properties: candidate == frozen reference (processed logits, bit for bit after
upcasting to fp32; the caller's logits never written), bad parameters refused alike, and
reference == the installed vLLM's Model Runner v2 sampler (processed logits and the ids its
Gumbel sampler draws from them with the requests' seeds).

The reference's kernels are Triton: CPU cases run in Triton's interpreter (a process with
TRITON_INTERPRET=1, which is every process on a machine without a GPU), CUDA cases compiled.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies.logits_copy import BOUNDARY_SETTINGS, LogitsProgram, boundary_cases, logits_programs, run
from vllm_hotpaths.testing import drift
from vllm_hotpaths.testing.cases import note
from properties import committed_examples
from vllm_hotpaths import registry, vllm_env
from vllm_hotpaths.testing.bits import assert_same_bits
from vllm_hotpaths.testing.ledger import check_conformance
from vllm_hotpaths.logits_copy import InvalidSamplingInput, RequestParams

HOTPATH = registry.get("logits_copy")
pytestmark = [pytest.mark.hotpath("logits_copy"), pytest.mark.triton]
replayed = committed_examples("logits_copy", LogitsProgram, "program")


def processed(impl, step, label: str) -> torch.Tensor:
    """The implementation's output for `step`, checking that the caller's logits stay as given."""
    logits = step.logits
    before = logits.clone()
    out = impl.apply_sampling_params(*step.args())
    assert_same_bits(logits, before, f"{label}: the caller's logits after the call")
    if out is not logits:
        assert out.dtype == torch.float32, f"{label}: processed logits are {out.dtype}"
        assert out.data_ptr() != logits.data_ptr(), f"{label}: processing wrote into the caller's logits"
    return out


@pytest.mark.check("equivalence")
@replayed
@given(program=logits_programs())
def test_candidate_matches_reference(program, candidate, device, case_log):
    case_log.record(program)
    check_candidate(program, candidate, device)


def check_candidate(program: LogitsProgram, candidate, device) -> None:
    name, factory, version = candidate
    reference, fast = program.samplers(HOTPATH.reference(version), factory, device=device)
    for i, batch in enumerate(run(program, (reference, fast), device)):
        # The whole batch, then each request alone: a request that needs processing is then
        # checked without the others' flags hiding it.
        for j, step in enumerate([batch, *batch.per_request()]):
            label = f"step {i}" + (f", request {step.rows[0]} alone" if j else "")
            expected = processed(reference, step, f"{label}, reference {version}")
            actual = processed(fast, step, f"{label}, {name}")
            if not j:
                note("copy skipped" if actual is step.logits else "processed")
            assert_same_bits(actual.float(), expected, f"{label} ({name} vs reference {version}): "
                                                       "processed logits, upcast to fp32")


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


FIELD_EDGES = {"temperature": (-1e-9, float("nan")), "top_p": (0.0, 1.5), "top_k": (-2,),
               "min_p": (-1e-9, 1.5), "repetition_penalty": (0.0, -1.0),
               "frequency_penalty": (2.5, -2.5), "presence_penalty": (2.5,), "min_tokens": (-1,),
               "logit_bias": (((0, 1.0), (0, 2.0)), ((-1, 1.0),)), "allowed_token_ids": ((-1,), (99,)),
               "stop_token_ids": ((99,),), "bad_words": (((),), ((99, 1),))}
# what is wrong -> the call's arguments: logits rows, slots, local_pos, input_ids, pos
BAD_ROWS = {
    "a slot without a request": (1, (1,), (0,), (3,), (1,)),
    "a slot outside the table": (1, (7,), (0,), (3,), (1,)),
    "local_pos not from 0": (2, (0, 0), (1, 2), (3, 4), (1, 2)),
    "a request's rows apart": (3, (0, 2, 0), (0, 0, 1), (3, 3, 4), (1, 1, 2)),
    "an input id past V": (1, (0,), (0,), (10,), (1,)),
    "fewer entries than rows": (2, (0,), (0,), (3,), (1,)),
}


@dataclass(frozen=True)
class BadInputCase:
    """A parameter outside what vLLM accepts (`field`, `value`), or a call whose rows do not
    describe one batch (`field` "rows", `value` a key of BAD_ROWS), on `dtype` logits."""

    field: str
    value: object
    dtype: str


bad_input_cases = st.one_of(
    st.sampled_from(sorted(FIELD_EDGES)).flatmap(
        lambda f: st.sampled_from(FIELD_EDGES[f]).map(lambda v: BadInputCase(f, v, "float32"))),
    st.builds(BadInputCase, st.just("rows"), st.sampled_from(sorted(BAD_ROWS)),
              st.sampled_from(("float32", "bfloat16"))))


@pytest.mark.check("equivalence")
@committed_examples("logits_copy", BadInputCase, "case")
@given(case=bad_input_cases)
def test_bad_input_is_refused(case, candidate, device, case_log):
    """A parameter vLLM refuses (or would misread: ids outside the vocabulary) and rows that do
    not describe one batch (upstream would read past its tables or mix requests up) raise
    InvalidSamplingInput with the reference's message; a refused request leaves its slot free."""
    case_log.record(case)
    name, factory, version = candidate
    errors = []
    for impl in (HOTPATH.reference(version)(10, 4, device), factory(10, 4, device)):
        impl.add_request(0, [1], [2], RequestParams(temperature=0.0))
        with pytest.raises(InvalidSamplingInput) as caught:
            if case.field == "rows":
                num_rows, *args = BAD_ROWS[case.value]
                logits = torch.zeros((num_rows, 10), dtype=getattr(torch, case.dtype), device=device)
                impl.apply_sampling_params(logits, *(list(a) for a in args))
            else:
                impl.add_request(2, [1], [], RequestParams(**{case.field: case.value}))
        errors.append(str(caught.value))
        impl.add_request(2, [1], [], RequestParams())  # the slot is still free
    assert errors[1] == errors[0], f"{name}: {errors[1]!r}, reference: {errors[0]!r}"



@pytest.mark.check("conformance")
@pytest.mark.needs_vllm
@replayed
@given(program=logits_programs())
def test_reference_matches_installed_vllm(program, case_log):
    """Frozen reference == vLLM's `Sampler.apply_sampling_params` (CPU, kernels interpreted),
    and vLLM's Gumbel sampler draws the same ids from both."""
    case_log.record(program)
    check_reference_conforms(program, case_log)


@pytest.mark.check("conformance")
@pytest.mark.needs_vllm
@pytest.mark.parametrize("knob, value", BOUNDARY_SETTINGS, ids=[f"{k}={v}" for k, v in BOUNDARY_SETTINGS])
@given(data=st.data())
@settings(max_examples=max(3, settings.default.max_examples // 50))
def test_reference_matches_installed_vllm_at_each_boundary(knob, value, data, case_log):
    """The same at every boundary setting, where an off-by-one in a position or a threshold
    shows (min_tokens ending within a request's draft rows, a bad word's prefix among them)."""
    program = data.draw(boundary_cases(knob, value), label="case").program()
    case_log.record(program)
    check_reference_conforms(program, case_log)


def check_reference_conforms(program: LogitsProgram, case_log) -> None:
    version = vllm_env.installed_version()
    reference, live = program.samplers(drift.conformance_reference("logits_copy", case_log),
                                       registry.resolve(HOTPATH.live), device="cpu")

    def compare():
        for i, step in enumerate(run(program, (reference, live), "cpu")):
            expected = processed(live, step, f"step {i}, vLLM {version}")
            actual = processed(reference, step, f"step {i}, reference")
            # 0.33 hands back the caller's tensor when nothing is processed: compare in fp32.
            assert_same_bits(actual.float(), expected.float(), f"step {i} (reference vs vLLM {version})")
            ids = [live.sample(out, step.rows, step.pos) for out in (actual, expected)]
            assert torch.equal(ids[0], ids[1]), f"step {i}: vLLM's Gumbel sampler drew different ids"

    entry = check_conformance("logits_copy", version, program, compare)
    if entry is not None:
        case_log.excuse(entry)


@pytest.mark.check("drift")
@pytest.mark.needs_vllm
def test_older_reference_against_installed_vllm(case_log, request):
    """The older reference (what a fast path validated for the earlier vLLM implements) against
    the installed vLLM: every difference must be a ledger change (vllm_hotpaths/testing/drift.py)."""
    drift.against_older_reference("logits_copy", case_log, request,
                                  lambda: test_reference_matches_installed_vllm(case_log=case_log),
                                  given_test=test_reference_matches_installed_vllm)


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
        expected = live.sample(processed(reference, step, "reference"), step.rows, step.pos)
        actual = live.sample(processed(fast, step, name), step.rows, step.pos)
        assert torch.equal(actual, expected), f"step {i}: {name} sampled {actual.tolist()}, reference {expected.tolist()}"



@pytest.mark.check("equivalence")
@pytest.mark.implementation("plugin patch@0.22.0")
@pytest.mark.plugin_patch
@pytest.mark.needs_vllm
@pytest.mark.devices("cpu")
@replayed
@given(program=logits_programs())
def test_patched_vllm_samples_like_upstream(program, device, case_log):
    """vLLM's `Sampler.sample` with the plugin's patch installed draws the same ids as the
    upstream method it replaced, and its processed logits are equal after upcasting to fp32."""
    from vllm_hotpaths.logits_copy import patch

    case_log.record(program)
    patch.install()
    (live,) = program.samplers(registry.resolve(HOTPATH.live), device=device)
    for i, step in enumerate(run(program, (live,), device)):
        args = live.sampler_args(*step.args())
        ids, out = live.sampler.sample(*args)
        upstream_ids, upstream_out = patch.UPSTREAM["sample"](live.sampler, *args)
        note("copy skipped" if out is step.logits else "processed")
        assert torch.equal(ids, upstream_ids), f"step {i}: patched {ids.tolist()}, upstream {upstream_ids.tolist()}"
        assert_same_bits(out.float(), upstream_out, f"step {i}: processed logits, patched vs upstream")
