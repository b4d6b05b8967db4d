"""Runner change, for every Model Runner V2 hot path: the reference of the v1 hot path it replaces,
given the same request streams, against the installed vLLM's MRv2 code. Every difference must be
named by a ledger entry of kind "runner-change"; each one met is saved as a fixture carrying its
link (`vllm_hotpaths/testing/runner_change.py`)."""

import pytest

from vllm_hotpaths.testing import runner_change


@pytest.mark.check("runner-change")
@pytest.mark.needs_vllm
def test_v1_reference_against_installed_mrv2(hotpath, checks, vllm_version, device, case_log, request):
    runner_change.check_against_v1(hotpath, checks, vllm_version, device, case_log, request)
