"""Equivalence, for every hot path: each fast path (or `--impl` candidate) agrees bit for bit with
the frozen reference of the vLLM version it targets, on every committed fixture and on generated
cases, on every device. What is compared is the hot path's `Checks.agree`."""

import pytest

from vllm_hotpaths.testing.laws import Side


@pytest.mark.check("equivalence")
def test_candidate_matches_reference(hotpath, checks, candidate, device, case_log):
    reference = Side(f"reference {candidate.version}", hotpath.reference(candidate.version), candidate.version)
    checks.check(reference, candidate, device, case_log, key=f"equivalence:{candidate.label}:{device}")
