"""Penalties properties: candidate == frozen reference, and reference == installed vLLM.

At every sampler step of a generated program, the padded output-token tensor must be equal
(shape, dtype int64, values) and the penalized logits equal bit for bit, on the same device.
The async placeholder repair that runs before the sampler reads output lists is compared call by
call: lists, their watchers' marks, waits for the previous step's copy, errors.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given

from strategies.penalties import (InvalidIdCase, PenaltiesProgram, PenaltiesRun, PoisonedProgram, RepairCase,
                                  invalid_id_cases, note, penalties_programs, poisoned_programs, repair_cases)
from vllm_hotpaths import fixtures, registry, vllm_env
from vllm_hotpaths.bits import assert_same_bits
from vllm_hotpaths.ledger import check_conformance
from vllm_hotpaths.penalties import InvalidTokenId, fused
from vllm_hotpaths.penalties.fast import repair_placeholders_in_bulk
from vllm_hotpaths.penalties.reference import (REPAIR_SINCE, apply_penalties_, compiled_op_repetition_,
                                               repair_placeholders)
from vllm_hotpaths.tracked_outputs import INPUT_BATCH

HOTPATH = registry.get("penalties")
pytestmark = pytest.mark.hotpath("penalties")
replayed = fixtures.replayed("penalties", PenaltiesProgram, "program")


def assert_same_step(actual_impl, expected_impl, step, device, label: str, penalize_first: bool = False) -> None:
    """Output tokens and penalized logits of one step, bit for bit. `penalize_first`: the step's
    lists reach the candidate through `apply_all_penalties` first, as in vLLM (the tokens it wrote
    are then read back with `output_tokens`), else through `output_tokens` first."""
    def tokens():
        expected_tokens = expected_impl.output_tokens(step.rows)
        actual_tokens = actual_impl.output_tokens(step.rows)
        assert_same_bits(actual_tokens, expected_tokens, f"{label}: output token tensor")

    if not penalize_first:
        tokens()
    expected_logits = expected_impl.apply_all_penalties(*step.on(device))
    actual_logits = actual_impl.apply_all_penalties(*step.on(device))
    assert_same_bits(actual_logits, expected_logits, f"{label}: penalized logits")
    if penalize_first:
        tokens()


@pytest.mark.check("equivalence")
@replayed
@given(program=penalties_programs())
def test_candidate_matches_reference(program, candidate, device, case_log):
    case_log.record(program)
    name, factory, version = candidate
    run = PenaltiesRun(program)
    reference = HOTPATH.reference(version)(program.vocab_size, device, run.batch)
    fast = factory(program.vocab_size, device, run.batch)
    for i, step in enumerate(run.steps()):
        assert_same_step(fast, reference, step, device, f"step {i} ({name} vs reference {version})",
                         penalize_first=i % 2 == 1)


@pytest.mark.check("equivalence")
@fixtures.replayed("penalties", PenaltiesProgram, "case", convert=PoisonedProgram.of)
@fixtures.replayed("penalties", PoisonedProgram, "case")
@given(case=poisoned_programs())
def test_invalid_ids_raise_the_same_error(case, candidate, device, case_log):
    """An id below -1 or above V (or not an integer), replacing one or appended in a step's new
    ids, raises InvalidTokenId naming the same place on both sides; once it is fixed (to 0), the
    candidate agrees with the reference again."""
    case_log.record(case)
    name, factory, version = candidate
    run = PenaltiesRun(case.program)
    reference = HOTPATH.reference(version)(case.vocab_size, device, run.batch)
    fast = factory(case.vocab_size, device, run.batch)
    step = None
    for step in run.steps():
        assert_same_step(fast, reference, step, device, f"{name} before the bad id")
    if step is None or (poisoned := case.poison(step.rows)) is None:
        return
    row, pos = poisoned
    note(f"invalid id: {case.bad}, " + ("appended to every row" if case.append else "replaced"))
    errors = []
    for impl in (reference, fast):
        with pytest.raises(InvalidTokenId) as caught:
            impl.output_tokens(step.rows)
        errors.append(str(caught.value))
    assert errors[1] == errors[0]
    row[pos] = 0
    assert_same_step(fast, reference, step, device, f"{name} after the bad id was fixed")


@pytest.mark.check("equivalence")
@pytest.mark.triton
@pytest.mark.implementation("fused kernels")
@replayed
@given(program=penalties_programs())
def test_fused_kernels_match_compiled_op_arithmetic(program, device, case_log):
    """The fused kernels == the reference's penalty arithmetic with vLLM's compiled repetition op
    (`x / p`), on contiguous logits at every step of a program, one scratch for all steps (it must
    come back all zero). On CPU the kernels run in Triton's interpreter and the op's arithmetic is
    the reference's torch code on CPU tensors; on CUDA both are on the device. Small vocabularies
    get small blocks, so ids and lanes cross block boundaries. On every other step the last
    column reaches the kernels blanked, with its ids as the steady step's `new` ids: the counting
    kernel must store them and count them, not the blanked ones."""
    case_log.record(program)
    run = PenaltiesRun(program)
    reference = HOTPATH.reference()(program.vocab_size, device, run.batch)
    blocks = (4, 8) if program.vocab_size <= 64 else (fused.COUNT_BLOCK, fused.PENALIZE_BLOCK)
    counts = torch.zeros(0, dtype=torch.int32, device=device)
    for i, step in enumerate(run.steps()):
        logits, prompt, presence, frequency, repetition, rows = step.on(device)
        logits = logits.contiguous()
        tokens = reference.output_tokens(rows)
        if counts.numel() < logits.numel():
            counts = torch.zeros(logits.numel(), dtype=torch.int32, device=device)
        expected = apply_penalties_(logits.clone(), prompt, tokens, presence, frequency, repetition,
                                    repetition_step=compiled_op_repetition_)
        given_tokens, new = tokens, None
        if i % 2 and tokens.shape[1]:
            last = tokens[:, -1]
            new = torch.stack([torch.full_like(last, tokens.shape[1] - 1), last])
            given_tokens = tokens.clone()
            given_tokens[:, -1] = torch.where(last == program.vocab_size, 0, program.vocab_size)
        actual = fused.apply_penalties(logits.clone(), prompt, given_tokens, presence, frequency, repetition,
                                       counts, blocks=blocks, new=new)
        assert_same_bits(actual, expected, f"step {i}: penalized logits, fused kernels vs reference")
        assert_same_bits(given_tokens, tokens, f"step {i}: output tokens after the kernels' write of new ids")


@pytest.mark.check("conformance")
@pytest.mark.devices("cuda")
@pytest.mark.needs_vllm_ops("apply_repetition_penalties_")
@replayed
@given(program=penalties_programs())
def test_cuda_reference_matches_compiled_op(program, device, case_log):
    """On contiguous CUDA logits upstream's repetition step is its compiled op (`x / p`); the
    reference reproduces it with torch. Here the reference meets the op itself."""
    case_log.record(program)
    run = PenaltiesRun(program)
    reference = HOTPATH.reference()(program.vocab_size, device, run.batch)
    compiled = registry.resolve(HOTPATH.live_kernels)(program.vocab_size, device, run.batch)
    for i, step in enumerate(run.steps()):
        note("contiguous logits" if step.contiguous else "non-contiguous logits")
        assert_same_step(reference, compiled, step, device, f"step {i} (reference vs compiled op)")


@pytest.mark.check("conformance")
@pytest.mark.needs_vllm
@replayed
@given(program=penalties_programs())
def test_reference_matches_installed_vllm(program, case_log):
    """Frozen reference == the installed vLLM's `apply_all_penalties` (CPU), via the ledger."""
    case_log.record(program)
    version = vllm_env.installed_version()
    run = PenaltiesRun(program)
    reference = HOTPATH.reference(version)(program.vocab_size, "cpu", run.batch)
    live = registry.resolve(HOTPATH.live)(program.vocab_size, "cpu", run.batch)

    def compare():
        for i, step in enumerate(run.steps()):
            assert_same_step(reference, live, step, "cpu", f"step {i} (reference vs vLLM {version})")

    entry = check_conformance("penalties", version, program, compare)
    if entry is not None:
        case_log.excuse(entry)


@pytest.mark.check("equivalence")
@pytest.mark.needs_vllm
@pytest.mark.devices("cpu")
@pytest.mark.implementation("plugin patch")
@pytest.mark.plugin_patch
@replayed
@given(program=penalties_programs())
def test_patched_vllm_matches_upstream(program, device, case_log):
    """The v1 sampler's `apply_all_penalties` with the plugin's patch installed == upstream's,
    penalized logits bit for bit at every step of a program (tracked and plain lists, swaps,
    async placeholders, trims)."""
    from vllm_hotpaths.penalties import patch

    case_log.record(program)
    run = PenaltiesRun(program)
    patch.install()
    try:
        patched = vllm_env.import_vllm(patch.CALLERS[0]).apply_all_penalties
        upstream = patch.UPSTREAM["apply_all_penalties"]
        for i, step in enumerate(run.steps()):
            expected = upstream(*step.on(device))
            actual = patched(*step.on(device))
            assert_same_bits(actual, expected, f"step {i}: penalized logits, patched vs upstream")
    finally:
        patch.uninstall()


@pytest.mark.check("conformance")
@pytest.mark.needs_vllm
@fixtures.replayed("penalties", InvalidIdCase, "case")
@given(case=invalid_id_cases())
def test_vllm_rejects_what_the_reference_rejects(case, case_log):
    """Ids outside [-1, V] are an error upstream too (deep in scatter_add_), never a tensor."""
    case_log.record(case)
    rows, vocab = case.output_rows(), case.vocab_size
    reference = HOTPATH.reference(vllm_env.installed_version())(vocab, "cpu")
    live = registry.resolve(HOTPATH.live)(vocab, "cpu")
    logits = torch.zeros((len(rows), vocab))
    prompt = torch.full((len(rows), 0), vocab, dtype=torch.int64)
    ones = torch.ones(len(rows))
    with pytest.raises(InvalidTokenId):
        reference.apply_all_penalties(logits.clone(), prompt, ones, ones, ones, rows)
    with pytest.raises((RuntimeError, IndexError, OverflowError, ValueError)):
        live.apply_all_penalties(logits.clone(), prompt, ones, ones, ones, rows)


# -- the async placeholder repair ---------------------------------------------------------------
def installed_repair_rule_differs() -> str | None:
    version = vllm_env.installed_version()
    if registry.version_key(version) < registry.version_key(REPAIR_SINCE):
        return f"vLLM {version} repairs from a list's first -1 (the trailing-run rule is from {REPAIR_SINCE})"
    return None


@pytest.mark.check("equivalence")
@pytest.mark.implementation("bulk placeholder repair")
@fixtures.replayed("penalties", RepairCase, "case")
@given(case=repair_cases())
def test_bulk_repair_matches_reference(case, case_log):
    """The bulk repair leaves every list, its type and its watchers' marks as the reference's
    loop does, waits for the previous step's copy as often (0 or 1 times) and raises the same."""
    case_log.record(case)
    assert case.outcome(repair_placeholders_in_bulk) == case.outcome(repair_placeholders)


@pytest.mark.check("conformance")
@pytest.mark.needs_vllm
@fixtures.replayed("penalties", RepairCase, "case")
@given(case=repair_cases())
def test_repair_reference_matches_installed_vllm(case, case_log):
    """The reference repair == the installed vLLM's `InputBatch.update_async_output_token_ids`,
    run unbound on the same stand-in: lists, marks, waits and errors."""
    if reason := installed_repair_rule_differs():
        pytest.skip(reason)
    case_log.record(case)
    upstream = vllm_env.import_vllm(INPUT_BATCH).InputBatch.update_async_output_token_ids
    assert case.outcome(repair_placeholders) == case.outcome(upstream)


@pytest.mark.check("equivalence")
@pytest.mark.needs_vllm
@pytest.mark.implementation("plugin patch")
@pytest.mark.plugin_patch
@fixtures.replayed("penalties", RepairCase, "case")
@given(case=repair_cases())
def test_patched_repair_matches_upstream(case, case_log):
    """With the plugin's patch installed, `InputBatch.update_async_output_token_ids` == upstream's."""
    if reason := installed_repair_rule_differs():
        pytest.skip(reason)
    from vllm_hotpaths.penalties import patch

    case_log.record(case)
    patch.install()
    try:
        patched = vllm_env.import_vllm(INPUT_BATCH).InputBatch.update_async_output_token_ids
        assert patched is not patch.UPSTREAM["update_async_output_token_ids"]
        assert case.outcome(patched) == case.outcome(patch.UPSTREAM["update_async_output_token_ids"])
    finally:
        patch.uninstall()
