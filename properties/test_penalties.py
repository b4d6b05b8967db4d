"""Penalties: what the generic laws do not cover (those run `testing.cases.penalties.PenaltiesChecks`).

The fused kernels against the compiled op's arithmetic, the reference against vLLM's compiled
repetition op on CUDA, vLLM's own refusal of bad ids, and the async placeholder repair that runs
before the sampler reads output lists, compared call by call: lists, their watchers' marks, waits
for the previous step's copy, errors (bulk repair == reference, reference == installed vLLM,
patched vLLM == upstream).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given

from strategies import invalid_id_cases, penalties_programs, repair_cases
from vllm_hotpaths.testing.cases import note
from vllm_hotpaths.testing.cases.penalties import InvalidIdCase, PenaltiesProgram, PenaltiesRun, RepairCase, assert_same_step
from properties import committed_examples
from vllm_hotpaths import registry, vllm_env
from vllm_hotpaths.testing.bits import assert_same_bits
from vllm_hotpaths.penalties import InvalidTokenId, fused
from vllm_hotpaths.penalties.fast import repair_placeholders_in_bulk
from vllm_hotpaths.penalties.reference import (REPAIR_SINCE, apply_penalties_, compiled_op_repetition_,
                                               repair_placeholders)
from vllm_hotpaths.tracked_outputs import INPUT_BATCH

HOTPATH = registry.get("penalties")
pytestmark = pytest.mark.hotpath("penalties")
replayed = committed_examples("penalties", PenaltiesProgram, "program")


def kernel_blocks(vocab_size: int, longest: int, device: str) -> tuple[int, int]:
    """(token ids per counting program, lanes per penalizing program) for a step (results never
    depend on them). Small vocabularies get small blocks, so ids and lanes cross block
    boundaries; real ones the kernels' own. In Triton's interpreter, whose cost is per program
    rather than per lane, a row takes at most about four programs of each kernel: counting blocks
    grow with the longest token list (256 ids: 64 per program, not 4), and a real vocabulary is
    penalized 32,768 lanes at a time (262,144 ids: 8 programs, not 128); boundaries are still
    crossed, every id still reached, and the CUDA run keeps the blocks above."""
    count, penalize = (4, 8) if vocab_size <= 64 else (fused.COUNT_BLOCK, fused.PENALIZE_BLOCK)
    if device == "cpu":
        count = max(count, 1 << max(0, (longest - 1) // 4).bit_length())
        penalize = max(penalize, 2**15) if vocab_size > 64 else penalize
    return count, penalize


@pytest.mark.check("equivalence")
@pytest.mark.triton
@pytest.mark.implementation("fused kernels")
@replayed
@given(program=penalties_programs())
def test_fused_kernels_match_compiled_op_arithmetic(program, device, case_log):
    """The fused kernels == the reference's penalty arithmetic with vLLM's compiled repetition op
    (`x / p`), on contiguous logits at every step of a program, one scratch for all steps (it must
    come back all zero). On CPU the kernels run in Triton's interpreter and the op's arithmetic is
    the reference's torch code on CPU tensors; on CUDA both are on the device. Blocks:
    `kernel_blocks`. On every other step the lastOn every other step the last
    column reaches the kernels blanked, with its ids as the steady step's `new` ids: the counting
    kernel must store them and count them, not the blanked ones."""
    case_log.record(program)
    run = PenaltiesRun(program)
    reference = HOTPATH.reference()(program.vocab_size, device, run.batch)
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
        blocks = kernel_blocks(program.vocab_size, max(tokens.shape[1], prompt.shape[1]), device)
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
@committed_examples("penalties", InvalidIdCase, "case")
@given(case=invalid_id_cases())
def test_vllm_rejects_what_the_reference_rejects(case, vllm_version, case_log):
    """Ids outside [-1, V] are an error upstream too (deep in scatter_add_), never a tensor."""
    case_log.record(case)
    rows, vocab = case.output_rows(), case.vocab_size
    reference = HOTPATH.reference(vllm_version)(vocab, "cpu")
    live = HOTPATH.live_factory()(vocab, "cpu")
    logits = torch.zeros((len(rows), vocab))
    prompt = torch.full((len(rows), 0), vocab, dtype=torch.int64)
    ones = torch.ones(len(rows))
    with pytest.raises(InvalidTokenId):
        reference.apply_all_penalties(logits.clone(), prompt, ones, ones, ones, rows)
    with pytest.raises((RuntimeError, IndexError, OverflowError, ValueError)):
        live.apply_all_penalties(logits.clone(), prompt, ones, ones, ones, rows)


# -- the async placeholder repair ---------------------------------------------------------------
def repair_rule_differs(version: str) -> str | None:
    if registry.version_key(version) < registry.version_key(REPAIR_SINCE):
        return f"vLLM {version} repairs from a list's first -1 (the trailing-run rule is from {REPAIR_SINCE})"
    return None


@pytest.mark.check("equivalence")
@pytest.mark.implementation("bulk placeholder repair")
@committed_examples("penalties", RepairCase, "case")
@given(case=repair_cases())
def test_bulk_repair_matches_reference(case, case_log):
    """The bulk repair leaves every list, its type and its watchers' marks as the reference's
    loop does, waits for the previous step's copy as often (0 or 1 times) and raises the same."""
    case_log.record(case)
    assert case.outcome(repair_placeholders_in_bulk) == case.outcome(repair_placeholders)


@pytest.mark.check("conformance")
@pytest.mark.needs_vllm
@committed_examples("penalties", RepairCase, "case")
@given(case=repair_cases())
def test_repair_reference_matches_installed_vllm(case, vllm_version, case_log):
    """The reference repair == the installed vLLM's `InputBatch.update_async_output_token_ids`,
    run unbound on the same stand-in: lists, marks, waits and errors."""
    if reason := repair_rule_differs(vllm_version):
        pytest.skip(reason)
    case_log.record(case)
    upstream = vllm_env.import_vllm(INPUT_BATCH).InputBatch.update_async_output_token_ids
    assert case.outcome(repair_placeholders) == case.outcome(upstream)


@pytest.mark.check("equivalence")
@pytest.mark.needs_vllm
@pytest.mark.implementation("plugin patch")
@pytest.mark.plugin_patch
@committed_examples("penalties", RepairCase, "case")
@given(case=repair_cases())
def test_patched_repair_matches_upstream(case, vllm_version, case_log):
    """With the plugin's patch installed, `InputBatch.update_async_output_token_ids` == upstream's."""
    if reason := repair_rule_differs(vllm_version):
        pytest.skip(reason)
    from vllm_hotpaths.penalties import patch

    case_log.record(case)
    patch.install(vllm_version)
    try:
        patched = vllm_env.import_vllm(INPUT_BATCH).InputBatch.update_async_output_token_ids
        assert patched is not patch.UPSTREAM["update_async_output_token_ids"]
        assert case.outcome(patched) == case.outcome(patch.UPSTREAM["update_async_output_token_ids"])
    finally:
        patch.uninstall()
