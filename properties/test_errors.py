"""Errors, for every hot path with a bad-input case: what the reference refuses, the candidate
refuses with the same error and message (never a tensor, a crash deep inside or a hang)."""

import pytest

from vllm_hotpaths.testing.laws import Side


@pytest.mark.check("equivalence")
@pytest.mark.law("errors")
def test_bad_input_raises_the_same_error(hotpath, checks, candidate, device, case_log):
    reference = Side(f"reference {candidate.version}", hotpath.reference(candidate.version), candidate.version)
    checks.check_errors(reference, candidate, device, case_log, key=f"errors:{candidate.label}:{device}")
