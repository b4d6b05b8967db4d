"""Thinking budget: what the generic laws do not cover (those run
`testing.cases.think_budget.ThinkBudgetChecks`: its state machine and every committed program for
equivalence, conformance, drift and the patch; its bad configurations for errors).

float16 logits refused with a clear error when forcing, and the installed vLLM failing too where
the reference refuses a configuration.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given

from strategies import bad_configs
from vllm_hotpaths.testing.cases import note
from vllm_hotpaths.testing.cases.think_budget import refusal
from vllm_hotpaths import registry, vllm_env
from vllm_hotpaths.think_budget import BatchUpdate, Params, ThinkConfig

HOTPATH = registry.get("think_budget")
pytestmark = pytest.mark.hotpath("think_budget")


@pytest.mark.check("equivalence")
def test_half_precision_logits_are_refused_when_forcing(candidate, device, case_log):
    """float16 cannot hold the forced 1e9: the same clear error on both sides, not torch's."""
    name, factory, version = candidate
    config = ThinkConfig((7,), (8,), 12, max_num_seqs=1)
    case_log.record(config)
    errors = []
    for make_holder in (HOTPATH.reference(version), factory):
        holder = make_holder(config, device)
        holder.sync_batch(BatchUpdate(1, (), [(0, Params(0), [7, 1], [])], []))  # over budget at once
        holder.update_state([[]], None)
        with pytest.raises(ValueError) as caught:
            holder.apply_to_logits(torch.zeros(1, 12, dtype=torch.float16, device=device), False, None)
        errors.append(str(caught.value))
    assert errors[1] == errors[0] and "float16" in errors[0]


INSTALLED = vllm_env.installed_version()


@pytest.mark.check("conformance")
@pytest.mark.needs_vllm
@given(case=bad_configs(INSTALLED or "0.22.0", vllm_detectable=True))
def test_vllm_rejects_what_the_reference_rejects(case, case_log):
    """vLLM fails too, later and less clearly: its SamplingParams refuses the budget (0.33), or
    forcing an end id past the vocabulary fails in `index_put_`. (A negative id it would write
    at a wrapped-around column, and a start id it never writes: only the reference refuses those.)"""
    case_log.record(case)
    assert refusal(HOTPATH.reference(INSTALLED), case) != "accepted"
    live = registry.resolve(HOTPATH.live)(case.config, "cpu")
    output: list[int] = []
    with pytest.raises(Exception) as caught:
        live.sync_batch(BatchUpdate(1, (), [(0, Params(case.budget), [*case.start_ids, 1], output)], []))
        for forced in case.end_ids:  # budget 0 inside a think block: the end marker is forced
            live.update_state([output], None)
            live.apply_to_logits(torch.zeros(1, case.vocab_size), False, None)
            output.append(forced)
    note(f"vLLM raised {type(caught.value).__name__}")
