"""The plugin's scheduler patches inside vLLM's whole scheduler: a Hypothesis state machine drives two
of the installed vLLM's schedulers in lockstep (`testing.scheduler_twins`), one as upstream ships
it and one with every scheduler patch of the registry bound to it, and asserts after each call
that both give the same bits: the call's result field by field and in order (`SchedulerOutput`,
`EngineCoreOutputs` with the clock frozen), every block id and the free queue's order, every
request's own state, the queues and the finished ids in order.

What it drives, as vLLM's engine core drives a scheduler: arrivals (shared prefixes, stop ids,
`min_tokens`, priorities) at any step; with async scheduling two steps in flight (the next step
scheduled before the last one's output is applied), else schedule and update in turn; sampled
tokens that hit the end-of-sequence and stop ids; aborts of running, waiting, finished and
unknown requests, single and batched, also while a step is in flight; `reset_prefix_cache`, also of
the running requests.
Engine configurations (`strategies.scheduler.setups`) span sync and async, FCFS and priority, KV
caches small enough to preempt, prefix caching on and off, chunked prefill with small budgets,
and KV caches whose new blocks are zeroed (as a model with Mamba layers has it). Not yet:
speculative decoding, structured output, multimodal inputs, KV connectors.
"""

from __future__ import annotations

from collections import Counter, deque

import pytest
from hypothesis import event, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule, run_state_machine_as_test

import strategies.scheduler as sched
from vllm_hotpaths import registry, vllm_env
from vllm_hotpaths.testing import scheduler_loop
from vllm_hotpaths.testing import scheduler_twins as twins
from vllm_hotpaths.testing.live import new_block_ids as live_new_block_ids

pytestmark = [pytest.mark.needs_vllm, pytest.mark.devices("cpu")]


# What the machine must reach in one draw (each row of `test_scheduler_patches_give_upstreams_bits`).
CLASSES = ("sync", "async", "fcfs", "priority", "new blocks zeroed", "two steps in flight", "chunked prefill", "prefix-cache hit",
           "preempted", "resumed after preemption", "stopped: eos", "stopped: stop id", "stopped: length",
           "eos held back by min_tokens", "aborted: one", "aborted: several", "aborted: unknown id",
           "aborted while a step is in flight", "reset_prefix_cache: done", "reset_prefix_cache: refused",
           "reset_prefix_cache: running requests preempted")


def machine(patches: dict, reached: Counter | None = None):
    reached = Counter() if reached is None else reached

    class SchedulerMachine(RuleBasedStateMachine):
        def label(self, name: str) -> None:
            assert name in CLASSES, name
            event(name)
            self.seen.add(name)

        def teardown(self):
            reached.update(getattr(self, "seen", ()))

        @initialize(setup=sched.setups())
        def start(self, setup):
            note(repr(setup))
            self.twins = twins.Twins(setup, patches)
            self.in_flight: deque = deque()
            self.ids = 0
            self.depth = 2 if setup.asynchronous else 1
            self.seen: set[str] = set()
            self.min_tokens: dict[str, int] = {}
            self.label("async" if setup.asynchronous else "sync")
            self.label(setup.policy)

        def same(self, what: str, results) -> list:
            (kind_a, a), (kind_b, b) = results
            if kind_a == "raised" or kind_b == "raised":
                assert (kind_a, type(a), str(a)) == (kind_b, type(b), str(b)), f"{what}: upstream {kind_a} {a!r}, patched {kind_b} {b!r}"
                event(f"{what} raised {type(a).__name__}")
                return []
            difference = twins.first_difference(twins.bits(a), twins.bits(b))
            assert difference is None, f"{what} returned different bits at {difference}"
            return [a, b]

        @invariant()
        def same_state(self):
            if hasattr(self, "twins"):
                difference = twins.first_difference(twins.state(self.twins.upstream), twins.state(self.twins.patched))
                assert difference is None, f"the schedulers' state differs at {difference}"
                held = live_new_block_ids.held(self.twins.patched)
                if "new_block_ids" in patches:  # nothing kept, where nothing zeroes
                    assert not held or self.twins.patched.needs_kv_cache_zeroing, f"the drained scheduler holds {held}"
                else:
                    assert held == live_new_block_ids.held(self.twins.upstream), "the schedulers hold other new block ids"

        @rule(data=st.data(), copies=st.sampled_from((1, 1, 2, 4)))
        def add(self, data, copies):
            """A request, or as an RL rollout sends a prompt, several copies of one."""
            kwargs = data.draw(sched.requests(self.twins.setup.max_model_len))
            for _ in range(copies):
                request_id = f"r{self.ids}"
                self.ids += 1
                made = iter(self.twins.request(request_id, **kwargs))
                self.same("add_request", self.twins.both(lambda s: s.add_request(next(made))))
                self.min_tokens[request_id] = kwargs["min_tokens"]

        @rule(data=st.data(), steps=st.integers(1, 12))
        def run_engine_steps(self, data, steps):
            """Steps as the engine core takes them: schedule while the batch queue has room, and
            apply the oldest step's output when it is full or nothing more was scheduled."""
            for _ in range(steps):
                if len(self.in_flight) < self.depth and self.twins.upstream.has_requests():
                    self.schedule()
                if self.in_flight and (len(self.in_flight) == self.depth or not self.twins.upstream.has_requests()):
                    self.update(data)

        @precondition(lambda self: len(self.in_flight) < self.depth)
        @rule()
        def schedule(self):
            in_flight = len(self.in_flight)
            outputs = self.same("schedule", self.twins.both(lambda s: s.schedule()))
            if outputs:
                output, requests = outputs[0], self.twins.upstream.requests
                self.in_flight.append((outputs, scheduler_loop.samples(self.twins.upstream, output)))
                if in_flight:
                    self.label("two steps in flight")
                if getattr(output, "new_block_ids_to_zero", None):
                    self.label("new blocks zeroed")
                if any(r.req_id in requests and requests[r.req_id].num_preemptions for r in output.scheduled_new_reqs) \
                        or getattr(output.scheduled_cached_reqs, "resumed_req_ids", None):
                    self.label("resumed after preemption")
                if any(r.num_computed_tokens for r in output.scheduled_new_reqs):
                    self.label("prefix-cache hit")
                if any(r.req_id in requests and requests[r.req_id].num_computed_tokens < requests[r.req_id].num_prompt_tokens
                       for r in output.scheduled_new_reqs):
                    self.label("chunked prefill")
                if getattr(output, "preempted_req_ids", None) or any(
                        r.num_preemptions for r in requests.values()):
                    self.label("preempted")

        @precondition(lambda self: self.in_flight)
        @rule(data=st.data())
        def update(self, data):
            (up, patched), sampled = self.in_flight.popleft()
            tokens = {r: [data.draw(sched.tokens, label=f"token of {r}")] for r in sampled}
            outputs = iter((scheduler_loop.runner_output(up, tokens), scheduler_loop.runner_output(patched, tokens)))
            scheduled = iter((up, patched))
            requests = self.twins.upstream.requests
            for r, (token,) in tokens.items():
                request = requests.get(r)
                if request is None or token != sched.EOS:
                    continue
                # to 0.16 the request holds its eos id, later its sampling parameters
                eos = request.eos_token_id if hasattr(request, "eos_token_id") else request.sampling_params.eos_token_id
                if eos == sched.EOS and request.num_output_tokens + 1 < self.min_tokens.get(r, 0):
                    self.label("eos held back by min_tokens")
            results = self.same("update_from_output", self.twins.both(
                lambda s: s.update_from_output(next(scheduled), next(outputs))))
            for engine_outputs in (results[0].values() if results else ()):
                for out in engine_outputs.outputs:
                    reason = getattr(out.finish_reason, "name", None)
                    if reason == "STOP":
                        self.label("stopped: stop id" if out.stop_reason is not None else "stopped: eos")
                    elif reason == "LENGTH":
                        self.label("stopped: length")

        @rule(data=st.data(), what=st.sampled_from(("abort one", "abort several", "reset_prefix_cache",
                                                    "reset_prefix_cache of running requests")))
        def interrupt(self, data, what):
            """What reaches the scheduler between steps (one rule, so that the machine steps more
            often than it interrupts)."""
            if what.startswith("reset_prefix_cache"):
                self.reset_prefix_cache(running=what.endswith("running requests"))
            else:
                self.abort(data, what == "abort several")

        def abort(self, data, many):
            known = [f"r{i}" for i in range(self.ids)] + ["unknown"]
            ids = data.draw(st.lists(st.sampled_from(known), min_size=1, max_size=4 if many else 1, unique=True))
            from vllm.v1.request import RequestStatus

            self.same("finish_requests", self.twins.both(
                lambda s: s.finish_requests(ids if many else ids[0], RequestStatus.FINISHED_ABORTED)))
            self.label("aborted: several" if len(ids) > 1 else "aborted: one")
            if "unknown" in ids:
                self.label("aborted: unknown id")
            if self.in_flight:
                self.label("aborted while a step is in flight")

        def reset_prefix_cache(self, running: bool):
            """With `running`, the running requests are preempted first (their outputs in flight
            are then dropped or stale, as the release says)."""
            had_running = bool(self.twins.upstream.running)
            results = self.same("reset_prefix_cache", self.twins.both(
                lambda s: s.reset_prefix_cache(reset_running_requests=running)))
            if results:
                self.label("reset_prefix_cache: done" if results[0] else "reset_prefix_cache: refused")
                if running and had_running and results[0]:
                    self.label("reset_prefix_cache: running requests preempted")

    return SchedulerMachine


STEPS = settings(stateful_step_count=40)


@pytest.mark.check("equivalence")
@pytest.mark.implementation("plugin patch")
@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.hotpath(name))
                                  for name in twins.scheduler_hotpaths()])
def test_scheduler_patches_give_upstreams_bits(name):
    """The hot path's scheduler patch bound to one twin, upstream's code on the other: the same
    bits after every call. A derandomized draw of `ci` or a larger profile must reach every class
    of `CLASSES` (each counted once per run)."""
    patches = twins.patched_methods([name])
    if not patches:
        version = vllm_env.installed_version()
        found = registry.get(name)
        pytest.skip(found.removed_in(version) or (found.absence(version) if not found.exists_in(version) else None)
                    or f"{name}: {found.patch_needed(version)}")
    reached: Counter = Counter()
    run_state_machine_as_test(machine(patches, reached), settings=STEPS)
    current = settings()
    if current.derandomize and current.max_examples >= settings.get_profile("ci").max_examples:
        from vllm.v1.core.sched.output import SchedulerOutput

        zeroes = "new_block_ids_to_zero" in SchedulerOutput.__dataclass_fields__  # from 0.17.1
        missing = [c for c in CLASSES if not reached[c] and (zeroes or c != "new blocks zeroed")]
        assert not missing, f"never reached: {missing}; reached: {dict(reached)}"


@pytest.mark.hotpath("cached_request_data")
@pytest.mark.check("equivalence")
@pytest.mark.implementation("a planted bug")
def test_the_machine_catches_a_patch_that_forgets_the_async_placeholders():
    """A planted bug: `_make_cached_request_data` counting only the outputs already applied."""
    from hypothesis import Phase

    (replaced, real), = twins.patched_methods(["cached_request_data"])["cached_request_data"].items()

    def planted(self, running, *rest):
        data = real(self, running, *rest)
        data.num_output_tokens = [r.num_output_tokens for r in running] + data.num_output_tokens[len(running):]
        return data

    with pytest.raises(AssertionError, match="num_output_tokens"):
        run_state_machine_as_test(machine({"cached_request_data": {replaced: planted}}), settings=settings(
            STEPS, derandomize=True, database=None, phases=[Phase.generate], report_multiple_bugs=False))
