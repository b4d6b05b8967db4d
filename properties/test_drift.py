"""Drift, for every hot path whose installed vLLM has an older frozen reference: that reference
(what a fast path validated for the earlier vLLM implements) against the installed vLLM. Every
difference must be named by a ledger change; each change met is saved as a fixture carrying its
link (`vllm_hotpaths/testing/drift.py`)."""

import pytest

from vllm_hotpaths.testing import drift


@pytest.mark.check("drift")
@pytest.mark.needs_vllm
def test_older_reference_against_installed_vllm(hotpath, checks, vllm_version, device, case_log, request):
    drift.check_older_reference(hotpath, checks, vllm_version, device, case_log, request)
