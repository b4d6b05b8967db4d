"""new_block_ids: what the installed vLLM's KV cache managers keep of the blocks they allocate
(conformance with the frozen reference of its release), and what the plugin's drain keeps
(nothing, with every output upstream's: the scheduler state machine in
test_scheduler_machine.py checks that, step by step).

A run: rollouts of requests (prompts with shared prefixes, stop ids, lengths to 40 tokens) on
one scheduler, sync or async and stepped as the engine core steps it, until every request has
finished; the ids its block pool allocated are logged in order.
"""

from __future__ import annotations

import pytest
from hypothesis import event, given

import strategies.scheduler as sched
from vllm_hotpaths import registry, vllm_env
from vllm_hotpaths.testing import scheduler_twins as twins
from vllm_hotpaths.testing.live import new_block_ids as live

HOTPATH = registry.get("new_block_ids")

pytestmark = [pytest.mark.hotpath("new_block_ids"), pytest.mark.needs_vllm, pytest.mark.devices("cpu")]


def run(setup, rollouts, steering, patches=None) -> tuple[object, list[int]]:
    """The run on a fresh scheduler with `patches` (`twins.built`); returns the scheduler and the
    ids its block pool allocated."""
    scheduler, hasher = twins.built(setup, patches or {})
    with live.allocations(scheduler) as allocated:
        twins.run_rollouts(scheduler, hasher, rollouts, **steering)
    return scheduler, list(allocated)


def zeroes(scheduler) -> bool:
    """Whether the scheduler zeroes new KV blocks (0.16.0 and 0.17.0 have no such notion)."""
    return getattr(scheduler, "needs_kv_cache_zeroing", False)


@pytest.mark.check("conformance")
@given(sched.runs())
def test_the_installed_vllm_holds_what_its_reference_says(case):
    version = vllm_env.installed_version()
    scheduler, allocated = run(*case)
    expected = HOTPATH.reference(version)().held(allocated, zeroes(scheduler))
    event("ids held" if expected else "none held")
    assert live.held(scheduler) == expected, (
        f"vLLM {version} holds {len(live.held(scheduler))} new block ids after allocating {len(allocated)}; "
        f"the {HOTPATH.reference_version_for(version)} reference says {len(expected)}")


@pytest.mark.check("equivalence")
@pytest.mark.implementation("plugin patch")
@given(sched.runs())
def test_the_drain_holds_nothing_where_upstream_keeps_every_id(case):
    """With the plugin's patch (bound to the scheduler), no id is held after a run, as the fast
    path says; the same run upstream holds what the reference says."""
    version = vllm_env.installed_version()
    patches = twins.patched_methods(["new_block_ids"])
    if not patches:
        pytest.skip(f"new_block_ids: {HOTPATH.patch_needed(version)}")
    scheduler, allocated = run(*case, patches=patches)
    fast = HOTPATH.fast_for(version)()
    assert live.held(scheduler) == fast.held(allocated, zeroes(scheduler))
