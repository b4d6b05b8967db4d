"""request_output: the installed vLLM's own `_update_request_with_output` in every call of a live
scheduler's runs that is in the fast path's domain conforms to the frozen reference of its
release (the tokens kept, the stop, the request's counts and cached blocks after); and the
plugin's fast path, bound to the scheduler, does what the reference decides in the same runs.
The fast path inside the whole scheduler, bit for bit against upstream:
test_scheduler_machine.py (row `request_output`).

The runs: those of test_allocate_slots.py (one to three rollouts of up to six requests with stop
ids, end-of-sequence ids and minimum lengths, sync and async, pipelined as the engine core steps
them, KV caches small enough to preempt, prefix-cache resets). The direct calls: the method
called on admitted requests put in drawn states (several tokens at once, as accepted drafts
return them; placeholders, outputs to drop, stale outputs, preempted requests), on twin
schedulers, upstream's and the patched.
"""

from __future__ import annotations

import inspect

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

import strategies.scheduler as sched
from vllm_hotpaths import registry, vllm_env
from vllm_hotpaths.testing import scheduler_twins as twins
from vllm_hotpaths.testing.live import request_output as live

HOTPATH = registry.get("request_output")

pytestmark = [pytest.mark.hotpath("request_output"), pytest.mark.devices("cpu")]


@pytest.mark.needs_vllm
@pytest.mark.check("conformance")
@given(sched.runs())
def test_the_installed_vllm_applies_outputs_as_its_reference_does(case):
    check_calls(case, {}, f"vLLM {vllm_env.installed_version()}")


def check_calls(case, patches: dict, who: str) -> None:
    """Every call in the domain on a scheduler with `patches` does what the reference of the
    installed vLLM decides."""
    scheduler, hasher = twins.built(case[0], patches)
    with live.watched(scheduler) as calls:
        twins.run_rollouts(scheduler, hasher, case[1], **case[2])
    conform(calls, who)


def conform(calls: list, who: str) -> None:
    """Each watched call (`live.watched`) left what the installed vLLM's reference says."""
    version = vllm_env.installed_version()
    reference = HOTPATH.reference(version)()
    for step, applied in calls:
        try:
            expected = reference.apply(step)
        except AssertionError as error:
            expected = type(error).__name__
        label(step, expected)
        assert applied == expected, (
            f"{who} left {applied} where the {HOTPATH.reference_version_for(version)} reference leaves "
            f"{expected}: {step}")


def label(step, expected) -> None:
    if isinstance(expected, str):
        event("placeholders below zero")
        return
    event(f"stop: {expected.status}" if expected.stopped else "no stop")
    if step.status != "RUNNING":
        event(f"called on a {step.status.lower()} request")
    if len(step.new_token_ids) > 1:
        event("several tokens")
    if step.tokens_to_discard:
        event("an output dropped after reset_prefix_cache")
    if step.is_stale:
        event("stale output")
    if step.num_output_tokens < step.min_tokens:
        event("below min_tokens")
    if expected.cached_blocks > step.cached_blocks:
        event("a full block cached")


@pytest.mark.needs_vllm
@pytest.mark.check("equivalence")
@pytest.mark.implementation("plugin patch")
@given(sched.runs())
def test_the_fast_path_applies_outputs_as_the_reference_does(case):
    """The same runs with the plugin's patch bound to the scheduler: every call in the domain,
    now the fast path's, does what the reference decides."""
    version = vllm_env.installed_version()
    patches = twins.patched_methods(["request_output"])
    if not patches:
        pytest.skip(f"request_output: {HOTPATH.patch_needed(version)}")
    check_calls(case, patches, "the fast path")


@st.composite
def direct_calls(draw):
    """A configuration, the requests admitted by one `schedule()`, and the calls: (request
    index, tokens, placeholders, outputs to drop, stale, preempted, computed tokens added)."""
    setup = draw(sched.setups())
    prompts = draw(st.lists(sched.requests(setup.max_model_len), min_size=1, max_size=4))
    calls = []
    for _ in range(draw(st.integers(1, 12))):
        tokens = draw(st.lists(sched.tokens, min_size=1, max_size=4))
        # placeholders: mostly as many as the tokens returned (nothing left in flight after), or one more or less
        placeholders = max(0, len(tokens) + draw(st.sampled_from((0, 0, 1, -1, 2))))
        calls.append((draw(st.integers(0, 3)), tokens, placeholders, draw(st.sampled_from((0, 0, 0, 1, 2))),
                      draw(st.booleans()), draw(st.sampled_from((False, False, False, True))),
                      draw(st.sampled_from((0, FULL, FULL, 1, 5, 17)))))
    return setup, prompts, calls


FULL = 1 << 20  # computed tokens added up to the bound


def put_in_state(scheduler, index: int, placeholders: int, drop: int, preempted: bool, advance: int):
    """The admitted request `index` (modulo those still known) with the drawn counts, or None.
    `advance` computed tokens are added (as a step with drafts computes more than the known
    tokens, whose blocks the output then fills), up to the slots of the blocks it holds and to
    the known tokens and those awaiting output (the engine's bound)."""
    from vllm.v1.request import RequestStatus

    known = sorted(scheduler.requests)
    if not known:
        return None
    request = scheduler.requests[known[index % len(known)]]
    request.num_output_placeholders = placeholders
    if hasattr(request, "async_tokens_to_discard"):
        request.async_tokens_to_discard = drop
    elif hasattr(request, "discard_latest_async_tokens"):
        request.discard_latest_async_tokens = bool(drop)
    if preempted and request.status == RequestStatus.RUNNING:
        request.status = RequestStatus.PREEMPTED
    manager = scheduler.kv_cache_manager.coordinator.single_type_managers[0]
    slots = len(manager.req_to_blocks.get(request.request_id, ())) * manager.block_size
    bound = min(request.num_computed_tokens + advance, slots, request.num_tokens + placeholders)
    request.num_computed_tokens = max(request.num_computed_tokens, bound)
    return request


@pytest.mark.needs_vllm
@pytest.mark.check("equivalence")
@pytest.mark.implementation("plugin patch")
@given(direct_calls())
def test_the_fast_path_gives_upstreams_bits_on_direct_calls(case):
    """Each drawn call on both twins: the same result (or error), the same schedulers after it;
    and upstream's call conforms to the reference."""
    version = vllm_env.installed_version()
    patches = twins.patched_methods(["request_output"])
    if not patches:
        pytest.skip(f"request_output: {HOTPATH.patch_needed(version)}")
    setup, prompts, calls = case
    pair = twins.Twins(setup, patches)
    for i, kwargs in enumerate(prompts):
        for scheduler, request in zip((pair.upstream, pair.patched), pair.request(f"r{i}", **kwargs)):
            scheduler.add_request(request)
    pair.both(lambda s: s.schedule())
    stale_arg = "is_stale" in inspect.signature(pair.upstream._update_request_with_output).parameters
    with live.watched(pair.upstream) as upstream_calls:
        for index, tokens, placeholders, drop, stale, preempted, advance in calls:
            def call(scheduler):
                request = put_in_state(scheduler, index, placeholders, drop, preempted, advance)
                if request is None:
                    return None
                extra = {"is_stale": stale} if stale_arg else {}
                return scheduler._update_request_with_output(request, list(tokens), **extra)

            (kind_a, a), (kind_b, b) = pair.both(call)
            if "raised" in (kind_a, kind_b):
                assert (kind_a, type(a), str(a)) == (kind_b, type(b), str(b)), f"upstream {kind_a} {a!r}, patched {kind_b} {b!r}"
            else:
                assert twins.bits(a) == twins.bits(b), twins.first_difference(twins.bits(a), twins.bits(b))
            assert twins.state(pair.upstream) == twins.state(pair.patched), twins.first_difference(
                twins.state(pair.upstream), twins.state(pair.patched))
    conform(upstream_calls, f"vLLM {version}")
