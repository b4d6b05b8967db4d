"""Patch, for every hot path whose plugin patch applies to the installed vLLM: vLLM with the patch
installed agrees with upstream, bit for bit, on the hot path's cases."""

import pytest


@pytest.mark.check("equivalence")
@pytest.mark.law("patch")
@pytest.mark.implementation("plugin patch")
@pytest.mark.plugin_patch
@pytest.mark.needs_vllm
def test_patched_vllm_matches_upstream(hotpath, checks, device, case_log):
    checks.check_patch(device, case_log, key=f"patch:{device}")
