"""swap_states properties specific to the hot path: the candidate on vLLM's own InputBatch.

The laws every hot path has run in the generic modules (properties/test_{equivalence,conformance,
drift,patch}.py) through `SwapStatesChecks` (`vllm_hotpaths.testing.cases.swap_states`): its state
machine adds requests (prompts up to max_model_len, outputs with async -1 placeholders, embedding
prompts, allowed-token masks, generators, bad words, LoRA ids), removes them (one, several, all;
re-adds fill the holes), sets drafts, appends tokens, swaps rows (equal and unequal active
lengths, a row with itself, empty rows, rows out of range) and condenses. After every operation
the batches must agree under the oracle (`vllm_hotpaths.testing.oracles.swap_states`); the
operations run are the case: a failure writes them as a fixture.
"""

from __future__ import annotations

import pytest

import strategies.swap_states
from vllm_hotpaths import registry
from vllm_hotpaths.testing.cases.swap_states import Equivalence, candidate_sides, machine, run_machine

HOTPATH = registry.get("swap_states")

pytestmark = pytest.mark.hotpath("swap_states")


@pytest.mark.needs_vllm
@pytest.mark.devices("cpu")
@pytest.mark.check("equivalence")
def test_candidate_on_vllm_input_batch(candidate, device, case_log):
    """The candidate runs on vLLM's own InputBatch (what the plugin installs) as on the standalone."""
    name, factory, version = candidate
    make_sides = candidate_sides(HOTPATH.reference(version), factory, on_vllm=True)
    observer = Equivalence(device, labels=(f"reference {version}", name))
    run_machine(machine(strategies.swap_states, make_sides, observer, case_log))
