"""Candidates that misbehave in ways the gate must survive (tests/test_gate_robustness.py)."""

import time

from vllm_hotpaths.penalties.fast import IncrementalPenalties


class Hangs(IncrementalPenalties):
    """Never returns from its first step."""

    def output_tokens(self, rows):
        while True:
            time.sleep(0.05)
