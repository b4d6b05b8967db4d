"""allocate_slots: the installed vLLM's own `KVCacheManager.allocate_slots` in every decode-case
call of a live scheduler's runs conforms to the frozen reference of its release (the blocks it
takes, its refusal when the pool is short, the blocks it caches); and the plugin's fast path, bound to
the scheduler, takes and caches what the reference decides in the same runs. The fast path
inside the whole scheduler, bit for bit against upstream: test_scheduler_machine.py (row
`allocate_slots`).

The runs: one to three rollouts of up to six requests (prompts with shared prefixes, stop ids,
up to 48 output tokens; sync and async schedulers stepped as the engine core steps them; KV
caches small enough to refuse and preempt; prefix caching on and off; block sizes 1, 16, 32).
"""

from __future__ import annotations

import pytest
from hypothesis import event, given

import strategies.scheduler as sched
from vllm_hotpaths import registry, vllm_env
from vllm_hotpaths.allocate_slots import Decision, DecodeStep
from vllm_hotpaths.testing import scheduler_twins as twins
from vllm_hotpaths.testing.live import allocate_slots as live

HOTPATH = registry.get("allocate_slots")

pytestmark = [pytest.mark.hotpath("allocate_slots"), pytest.mark.devices("cpu")]


@pytest.mark.needs_vllm
@pytest.mark.check("conformance")
@given(sched.runs())
def test_the_installed_vllm_allocates_what_its_reference_decides(case):
    check_calls(case, {}, f"vLLM {vllm_env.installed_version()}")


def check_calls(case, patches: dict, who: str) -> None:
    """Every decode-case call of the runs on a scheduler with `patches` takes and caches what
    the reference of the installed vLLM decides."""
    version = vllm_env.installed_version()
    reference = HOTPATH.reference(version)()
    scheduler, hasher = twins.built(case[0], patches)
    with live.watched(scheduler.kv_cache_manager) as calls:
        twins.run_rollouts(scheduler, hasher, case[1], **case[2])
    for step, blocks, cached_after in calls:
        decision = reference.decide(step)
        label(step, decision)
        assert blocks == decision.new_blocks, (
            f"{who} took {blocks} blocks where the {HOTPATH.reference_version_for(version)} reference "
            f"takes {decision.new_blocks}: {step}")
        expected_cached = step.cached_blocks if decision.cache_to is None or decision.new_blocks is None \
            else decision.cache_to // step.block_size
        assert cached_after == expected_cached, (
            f"{who} has {cached_after} blocks cached after the call, the reference {expected_cached}: {step}")


def label(step: DecodeStep, decision: Decision) -> None:
    event("refused: too few free blocks" if decision.new_blocks is None else
          "new blocks" if decision.new_blocks else "no new block")
    if decision.cache_to is not None and decision.new_blocks is not None:
        event("a full block cached")


@pytest.mark.needs_vllm
@pytest.mark.check("equivalence")
@pytest.mark.implementation("plugin patch")
@given(sched.runs())
def test_the_fast_path_allocates_what_the_reference_decides(case):
    """The same runs with the plugin's patch bound to the scheduler: every decode-case call,
    now the fast path's, takes and caches what the reference decides."""
    version = vllm_env.installed_version()
    patches = twins.patched_methods(["allocate_slots"])
    if not patches:
        pytest.skip(f"allocate_slots: {HOTPATH.patch_needed(version)}")
    check_calls(case, patches, "the fast path")
