"""Conformance, for every hot path in the installed vLLM: the frozen reference of its version
agrees with vLLM's own code (the live adapter), except where a ledger entry excuses a difference
(an entry whose difference disappears fails)."""

import pytest

from vllm_hotpaths.testing import ledger
from vllm_hotpaths.testing.laws import Side


@pytest.mark.check("conformance")
@pytest.mark.needs_vllm
def test_reference_matches_installed_vllm(hotpath, checks, vllm_version, device, case_log):
    version = hotpath.reference_version_for(vllm_version)
    case_log.reference_version = version
    reference = Side(f"reference {version}", hotpath.reference(vllm_version), version)
    live = Side(f"vLLM {vllm_version}", hotpath.live_factory(), vllm_version)
    judge = ledger.conformance_judge(hotpath.name, vllm_version, case_log, device)
    checks.check(reference, live, device, case_log, judge, key=f"conformance:{vllm_version}:{device}")
