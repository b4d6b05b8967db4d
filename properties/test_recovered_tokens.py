"""Recovered tokens: what the generic laws do not cover (those run
`testing.cases.recovered_tokens.RecoveredTokensChecks`: candidate == frozen reference, reference ==
installed vLLM, the older reference against it, patched vLLM == upstream, bad input refused).

The candidate at real vocabulary sizes and under a Triton compile hook (CUDA), the Triton
references against a plain torch statement of the same semantics, and the 0.16 -> 0.22 arithmetic
change confined to near-ties.

The kernels are Triton: CPU cases run in Triton's interpreter (a process with TRITON_INTERPRET=1,
which is every process on a machine without a GPU), CUDA cases compiled (a process without it).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from hypothesis import assume, given, settings

from properties import REGRESSIONS, SUITE_ROOT, committed_examples
from strategies import recovery_cases
from vllm_hotpaths import registry
from vllm_hotpaths.recovered_tokens.reference import torch_recover
from vllm_hotpaths.testing import fixtures
from vllm_hotpaths.testing.cases.recovered_tokens import RecoveredTokensChecks, RecoveryCase, recovered
from vllm_hotpaths.testing.laws import Side
from vllm_hotpaths.testing.ledger import position_entries
from vllm_hotpaths.testing.oracles.recovered_tokens import compare_ids

HOTPATH = registry.get("recovered_tokens")
CHECKS = RecoveredTokensChecks()
pytestmark = [pytest.mark.hotpath("recovered_tokens"), pytest.mark.triton]
replayed = committed_examples("recovered_tokens", RecoveryCase, "case")
CHANGE_LINK = "https://github.com/vllm-project/vllm/pull/34974"


def check_candidate(case, candidate, device, case_log):
    """The equivalence law's comparison (test-sized tiles on both sides)."""
    name, factory, version = candidate
    CHECKS.agree(case, Side(f"reference {version}", HOTPATH.reference(version), version),
                 Side(name, factory, version), device, case_log)


@pytest.mark.check("equivalence")
@pytest.mark.devices("cuda")
@given(case=recovery_cases(large=True))
def test_candidate_matches_reference_at_real_vocab_sizes(case, candidate, device, case_log):
    """Production tiles: vocabularies 8191, 8192, 8193, ..., 151,936."""
    case_log.record(case)
    check_candidate(case, candidate, device, case_log)


@pytest.mark.check("equivalence")
@pytest.mark.devices("cuda")
@settings(max_examples=3)  # each example compiles the kernels afresh
@given(case=recovery_cases())
def test_candidate_compiles_under_a_compile_hook(case, candidate, device, case_log):
    """vLLM registers a Triton post-compile hook, and Triton 3.6 then serializes every constexpr
    argument of a kernel it compiles: the candidate must compile (and agree) under one. (Jit
    functions passed as constexpr arguments crashed there with "JITFunction is not JSON
    serializable".)"""
    from triton import knobs

    from vllm_hotpaths.recovered_tokens import fast

    assume(sum(case.draft_counts) > 0)  # no draft token: no kernel is launched
    case_log.record(case)
    compiled = []
    previous = knobs.runtime.jit_post_compile_hook
    knobs.runtime.jit_post_compile_hook = lambda *args, **kwargs: compiled.append(kwargs)
    fast._kernels.clear()  # fresh kernels: the hook runs only when a kernel is compiled
    try:
        check_candidate(case, candidate, device, case_log)
    finally:
        knobs.runtime.jit_post_compile_hook = previous
    assert compiled, "no kernel was compiled under the hook: the property checked nothing"


@pytest.mark.check("equivalence")
@settings(max_examples=max(10, settings.default.max_examples // 7))  # seven launches an example
@replayed
@given(case=recovery_cases())
def test_one_candidate_serves_each_launch_shape_in_turn(case, candidate, device, case_log):
    """The patch keeps one candidate per device for every call, and the candidate keeps a launch
    plan per shape (grid, slicing, scratch, compile options) and, on CUDA, the kernel compiled for
    each kind of tensors, launched again without Triton's binding. Through one candidate: the case;
    each of its siblings, one component of the plan's key away (a sibling the key did not tell
    apart would be launched with the case's plan); the case's shape again with other data (a
    relaunch); and again with the draft ids in the other integer type (a kernel of its own). Each
    gets its own reference's ids."""
    name, factory, version = candidate
    case_log.record(case)
    kernel = factory(device, case.candidate_tiles())
    reference = HOTPATH.reference(version)
    again = replace(case, seed=case.seed + 1)
    other_ids = replace(again, ids_dtype="int64" if case.ids_dtype == "int32" else "int32")
    for turn in (case, *case.siblings(), again, other_ids):
        expected = recovered(reference(device, turn.reference_tiles()), turn, device)
        compare_ids(recovered(kernel, turn, device), expected, f"{name} (one instance) vs reference {version}")


@pytest.mark.check("equivalence")
@pytest.mark.devices("cpu")
@pytest.mark.implementation("torch vs triton references")
@replayed
@given(case=recovery_cases())
def test_triton_references_match_torch(case, device, case_log):
    """On the CPU the Triton references (interpreted, IEEE arithmetic) equal a plain torch
    statement of the same semantics: two independent writings of each version."""
    case_log.record(case)
    args = case.tensors(device)
    for version in HOTPATH.references:
        reference = HOTPATH.reference(version)(device, case.reference_tiles())
        plain = torch_recover(reference.division, args["num_draft_tokens"], args["draft_token_ids"],
                              args["draft_probs"], args["target_probs"], args["q"])
        compare_ids(recovered(reference, case, device), plain, f"reference {version} vs torch")


@pytest.mark.check("semantic-change")
@pytest.mark.implementation("reference@0.16.0 vs reference@0.22.0")
@replayed
@given(case=recovery_cases())
def test_reciprocal_change_moves_only_near_ties(case, device, case_log):
    """vLLM PR #34974 replaced `residual / q` by `residual * (1/q)`: the ids may change only where
    the winner is within rounding of another lane (the ledger's near-tie positions)."""
    case_log.record(case)
    old = recovered(HOTPATH.reference("0.16.0")(device, case.reference_tiles()), case, device)
    new = recovered(HOTPATH.reference("0.17.0")(device, case.reference_tiles()), case, device)
    excusable = position_entries("recovered_tokens", "0.17.0", case, kind="change")
    for link in compare_ids(new, old, "reference 0.22.0 vs 0.16.0", excusable):
        case_log.excuse_link(link)


@pytest.mark.check("semantic-change")
@pytest.mark.devices("cpu")
@pytest.mark.implementation("reference@0.16.0 vs reference@0.22.0")
def test_reciprocal_change_fixtures_show_different_ids(device, case_log):
    """The committed counterexamples of PR #34974: the two references pick different ids there."""
    shown = [(path, case) for path, case in fixtures.load(REGRESSIONS, "recovered_tokens", RecoveryCase)
             if fixtures.link_of(path) == CHANGE_LINK]
    assert shown, f"no fixture linked to {CHANGE_LINK}"
    for path, case in shown:
        case_log.record(case)
        old = recovered(HOTPATH.reference("0.16.0")(device, case.reference_tiles()), case, device)
        new = recovered(HOTPATH.reference("0.17.0")(device, case.reference_tiles()), case, device)
        assert not torch.equal(old, new), f"{path.name}: 0.16 and 0.22 agree on it"
        case_log.excuse_link(CHANGE_LINK)
        case_log.shown_by = str(path.relative_to(SUITE_ROOT))
