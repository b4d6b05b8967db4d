"""new_block_ids: what the installed vLLM's KV cache managers keep of the blocks they allocate
(conformance with the frozen reference of its release), and what the plugin's drain keeps
(nothing, with every output upstream's: the scheduler state machine in
test_scheduler_machine.py checks that, step by step).

A run: rollouts of requests (prompts with shared prefixes, stop ids, lengths to 40 tokens) on
one scheduler, sync or async and stepped as the engine core steps it, until every request has
finished; the ids its block pool allocated are logged in order.
"""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

import strategies.scheduler as sched
from vllm_hotpaths import registry, vllm_env
from vllm_hotpaths.testing import scheduler_loop
from vllm_hotpaths.testing import scheduler_twins as twins
from vllm_hotpaths.testing.live import new_block_ids as live

HOTPATH = registry.get("new_block_ids")

pytestmark = [pytest.mark.hotpath("new_block_ids"), pytest.mark.needs_vllm, pytest.mark.devices("cpu")]


@st.composite
def runs(draw):
    setup = draw(sched.setups())
    max_model_len = setup.max_model_len
    rollouts = draw(st.lists(st.lists(sched.requests(max_model_len), min_size=1, max_size=6), min_size=1, max_size=3))
    return setup, rollouts


def run(setup, rollouts, patches=None) -> tuple[object, list[int]]:
    """The run on a fresh scheduler with `patches` bound; returns the scheduler and the ids its
    block pool allocated."""
    inits = {r: f for methods in (patches or {}).values() for r, f in methods.items() if r.endswith(".__init__")}
    with twins.class_attributes(inits):
        scheduler, hasher = setup.make()
    twins.bind(scheduler, patches or {})
    depth = 2 if setup.asynchronous else 1
    with live.allocations(scheduler) as allocated:
        for n, rollout in enumerate(rollouts):
            for i, kwargs in enumerate(rollout):
                scheduler.add_request(twins.request(hasher, f"{n}-{i}", **kwargs))
            in_flight: deque = deque()
            for _ in range(400):
                if not (scheduler.has_requests() or in_flight):
                    break
                if len(in_flight) < depth and scheduler.has_requests():
                    output = scheduler.schedule()
                    in_flight.append((output, {r: [5] for r in scheduler_loop.samples(scheduler, output)}))
                if in_flight and (len(in_flight) == depth or not scheduler.has_requests()):
                    output, tokens = in_flight.popleft()
                    scheduler.update_from_output(output, scheduler_loop.runner_output(output, tokens))
    return scheduler, list(allocated)


@pytest.mark.check("conformance")
@given(runs())
def test_the_installed_vllm_holds_what_its_reference_says(case):
    version = vllm_env.installed_version()
    scheduler, allocated = run(*case)
    expected = HOTPATH.reference(version)().held(allocated, scheduler.needs_kv_cache_zeroing)
    event("ids held" if expected else "none held")
    assert live.held(scheduler) == expected, (
        f"vLLM {version} holds {len(live.held(scheduler))} new block ids after allocating {len(allocated)}; "
        f"the {HOTPATH.reference_version_for(version)} reference says {len(expected)}")


@pytest.mark.check("equivalence")
@pytest.mark.implementation("plugin patch")
@given(runs())
def test_the_drain_holds_nothing_where_upstream_keeps_every_id(case):
    """With the plugin's patch (bound to the scheduler), no id is held after a run, as the fast
    path says; the same run upstream holds what the reference says."""
    version = vllm_env.installed_version()
    patches = twins.patched_methods(["new_block_ids"])
    if not patches:
        pytest.skip(f"new_block_ids: {HOTPATH.patch_needed(version)}")
    scheduler, allocated = run(*case, patches=patches)
    fast = HOTPATH.fast_for(version)()
    assert live.held(scheduler) == fast.held(allocated, scheduler.needs_kv_cache_zeroing)
