"""Recovered-token properties: candidate == frozen reference (ids, bit for bit, every id in
[0, V)), the 0.16 -> 0.22 arithmetic change confined to near-ties, and reference == installed vLLM.

The kernels are Triton: CPU cases run in Triton's interpreter (a process with TRITON_INTERPRET=1,
which is every process on a machine without a GPU), CUDA cases compiled (a process without it).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from vllm_hotpaths.testing import drift
from strategies.recovered_tokens import RecoveryCase, recovery_cases
from properties import REGRESSIONS, SUITE_ROOT, committed_examples
from vllm_hotpaths import registry, vllm_env
from vllm_hotpaths.testing import fixtures
from vllm_hotpaths.testing.ledger import position_entries
from vllm_hotpaths.recovered_tokens import InvalidRecoveryInput
from vllm_hotpaths.testing.oracles.recovered_tokens import assert_in_vocab, compare_ids
from vllm_hotpaths.recovered_tokens.reference import torch_recover

HOTPATH = registry.get("recovered_tokens")
pytestmark = [pytest.mark.hotpath("recovered_tokens"), pytest.mark.triton]
replayed = committed_examples("recovered_tokens", RecoveryCase, "case")
CHANGE_LINK = "https://github.com/vllm-project/vllm/pull/34974"


def recovered(impl, case: RecoveryCase, device) -> torch.Tensor:
    ids = impl.recover(**case.tensors(device))
    assert_in_vocab(ids, case.vocab_size, type(impl).__name__)
    return ids


def check_candidate(case, candidate, device):
    name, factory, version = candidate
    expected = recovered(HOTPATH.reference(version)(device, case.reference_tiles()), case, device)
    actual = recovered(factory(device, case.candidate_tiles()), case, device)
    compare_ids(actual, expected, f"{name} vs reference {version}")


@pytest.mark.check("equivalence")
@replayed
@given(case=recovery_cases())
def test_candidate_matches_reference(case, candidate, device, case_log):
    """Shrunk tiles, small vocabularies: every tile edge, tie and near-tie within reach."""
    case_log.record(case)
    check_candidate(case, candidate, device)


@pytest.mark.check("equivalence")
@pytest.mark.devices("cuda")
@given(case=recovery_cases(large=True))
def test_candidate_matches_reference_at_real_vocab_sizes(case, candidate, device, case_log):
    """Production tiles: vocabularies 8191, 8192, 8193, ..., 151,936."""
    case_log.record(case)
    check_candidate(case, candidate, device)


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
        check_candidate(case, candidate, device)
    finally:
        knobs.runtime.jit_post_compile_hook = previous
    assert compiled, "no kernel was compiled under the hook: the property checked nothing"


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
    new = recovered(HOTPATH.reference("0.22.0")(device, case.reference_tiles()), case, device)
    excusable = position_entries("recovered_tokens", "0.22.0", case, kind="change")
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
        new = recovered(HOTPATH.reference("0.22.0")(device, case.reference_tiles()), case, device)
        assert not torch.equal(old, new), f"{path.name}: 0.16 and 0.22 agree on it"
        case_log.excuse_link(CHANGE_LINK)
        case_log.shown_by = str(path.relative_to(SUITE_ROOT))


@pytest.mark.check("conformance")
@pytest.mark.needs_vllm
@pytest.mark.devices("cpu")
@replayed
@given(case=recovery_cases())
def test_reference_matches_installed_vllm(case, device, case_log):
    """The frozen reference (upstream's tiles) == the installed vLLM's `sample_recovered_tokens`
    (its Triton kernel interpreted), except where the ledger says upstream is undecided."""
    case_log.record(case)
    version = vllm_env.installed_version()
    reference = drift.conformance_reference("recovered_tokens", case_log)(device)
    live = registry.resolve(HOTPATH.live)(device)
    expected = recovered(reference, case, device)
    actual = live.recover(**case.tensors(device))
    excusable = position_entries("recovered_tokens", version, case)
    for link in compare_ids(actual, expected, f"vLLM {version} vs reference", excusable):
        case_log.excuse_link(link)


@pytest.mark.check("drift")
@pytest.mark.needs_vllm
@pytest.mark.devices("cpu")
def test_older_reference_against_installed_vllm(device, case_log, request):
    """The older reference against the installed vLLM's kernel: every difference must be a
    ledger change (vllm_hotpaths/testing/drift.py)."""
    drift.against_older_reference("recovered_tokens", case_log, request,
                                  lambda: test_reference_matches_installed_vllm(device=device, case_log=case_log),
                                  given_test=test_reference_matches_installed_vllm)


def upstream_call(function, case: RecoveryCase, device, generator_seeds: dict[int, int], seed: int):
    """`function` called as the rejection sampler calls it, the random streams seeded afresh:
    the ids, and where each stream stands afterwards (the next step draws from there)."""
    from types import SimpleNamespace

    args = case.tensors(device)
    del args["q"]  # drawn inside, from the streams
    generators = {i: torch.Generator(device).manual_seed(s) for i, s in generator_seeds.items()}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        ids = function(*args.values(), SimpleNamespace(generators=generators), torch.device(device))
        streams = {"the global stream": torch.get_rng_state()}
        streams |= {f"request {i}'s generator": g.get_state() for i, g in generators.items()}
    return ids, streams


@pytest.mark.check("equivalence")
@pytest.mark.needs_vllm
@pytest.mark.devices("cpu")
@pytest.mark.implementation("plugin patch")
@pytest.mark.plugin_patch
@given(case=recovery_cases(), data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_patched_vllm_matches_upstream(case, data, seed, device, case_log):
    """vLLM's `sample_recovered_tokens` with the plugin's patch installed == upstream's, ids bit
    for bit, from the same global seed and per-request generators (seeded requests with and
    without drafts); where upstream's pick is undecided (the ledger's NaN rows) it is excused, as
    in conformance."""
    from vllm_hotpaths.recovered_tokens import patch

    case_log.record(case)
    seeded = data.draw(st.dictionaries(st.integers(0, len(case.draft_counts) - 1), st.integers(0, 2**32 - 1)),
                       label="seeded requests")
    patch.install()
    try:
        module = vllm_env.import_vllm(patch.REJECTION_SAMPLER)
        upstream, upstream_streams = upstream_call(patch.UPSTREAM["sample_recovered_tokens"], case, device,
                                                   seeded, seed)
        patched, patched_streams = upstream_call(module.sample_recovered_tokens, case, device, seeded, seed)
    finally:
        patch.uninstall()
    for stream, state in upstream_streams.items():
        assert torch.equal(patched_streams[stream], state), f"{stream} advanced differently"
    assert patched.dtype == upstream.dtype, f"patched ids are {patched.dtype}, upstream's {upstream.dtype}"
    version = vllm_env.installed_version()
    excusable = position_entries("recovered_tokens", version, case)  # where upstream is undecided, as in conformance
    for link in compare_ids(patched, upstream, f"patched vLLM {version} vs upstream", excusable):
        case_log.excuse_link(link)


CORRUPTIONS = ("count sum", "spec len", "negative count", "target dtype", "noise shape",
               "ids shape", "cu dtype", "not contiguous")


def corrupt(args: dict, how: str) -> dict:
    bad = dict(args)
    if how == "count sum":
        bad["num_draft_tokens"] = args["num_draft_tokens"] + [1]
    elif how == "spec len":
        bad["max_spec_len"] = max(args["num_draft_tokens"]) - 1
    elif how == "negative count":
        bad["num_draft_tokens"] = [-1] + args["num_draft_tokens"][1:]
    elif how == "target dtype":
        bad["target_probs"] = args["target_probs"].double()
    elif how == "noise shape":
        bad["q"] = torch.cat([args["q"], args["q"][:, :1]], dim=1)
    elif how == "ids shape":
        bad["draft_token_ids"] = args["draft_token_ids"][:-1]
    elif how == "cu dtype":
        bad["cu_num_draft_tokens"] = args["cu_num_draft_tokens"].float()
    elif how == "not contiguous":
        bad["target_probs"] = torch.cat([args["target_probs"]] * 2, dim=1)[:, ::2]
    return bad


@pytest.mark.check("equivalence")
@given(case=recovery_cases().filter(lambda c: c.num_tokens > 0), how=st.sampled_from(CORRUPTIONS))
def test_bad_inputs_are_refused(case, how, candidate, device, case_log):
    """Inputs that do not describe one batch raise InvalidRecoveryInput, never a tensor."""
    case_log.record(case)
    name, factory, version = candidate
    bad = corrupt(case.tensors(device), how)
    assume(how != "not contiguous" or not bad["target_probs"].is_contiguous())  # one row, one lane
    for impl in (HOTPATH.reference(version)(device), factory(device)):
        with pytest.raises(InvalidRecoveryInput):
            impl.recover(**bad)
