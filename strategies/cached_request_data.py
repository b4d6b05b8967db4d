"""`cached_request_data` generators: one scheduler step's requests scheduled again (the schema:
`vllm_hotpaths.testing.cases.cached_request_data`).

Up to 8 requests, the last few resumed after a preemption; the previous step's ids cover any
subset of the batch (a resumed one among them: 0.24's case, refused to 0.23) and ids that have
since left. Outputs may be empty, computed tokens anywhere from 0 to the whole sequence,
placeholders and drafts (-1 among them) where async scheduling or speculation left them. New
blocks: the manager's shared empty object (most decode steps), an empty object of the request's
own, or block ids in one to three KV cache groups. Any of the three scheduler flags.
"""

from __future__ import annotations

from hypothesis import strategies as st

from vllm_hotpaths.testing.cases.cached_request_data import (SHARED_EMPTY, BadStep, ScheduledRequest, ScheduledStep,
                                                             label)

TOKENS = st.integers(0, 63)
BLOCK_IDS = st.integers(0, 1 << 20)


@st.composite
def scheduled_request(draw, request_id: str, groups: int) -> ScheduledRequest:
    prompt = draw(st.lists(TOKENS, min_size=1, max_size=5))
    outputs = draw(st.lists(TOKENS, max_size=5))
    drafts = draw(st.lists(st.one_of(st.just(-1), TOKENS), max_size=3))
    blocks = draw(st.one_of(
        st.just(SHARED_EMPTY), st.just(SHARED_EMPTY), st.just(((),) * groups),
        st.tuples(*[st.lists(BLOCK_IDS, max_size=3).map(tuple) for _ in range(groups)])))
    return ScheduledRequest(
        request_id=request_id, prompt=tuple(prompt), outputs=tuple(outputs),
        num_computed_tokens=draw(st.integers(0, len(prompt) + len(outputs))),
        placeholders=draw(st.sampled_from((0, 0, 1, 2))), scheduled=len(drafts) + draw(st.integers(1, 3)),
        drafts=tuple(drafts), blocks=blocks)


@st.composite
def scheduled_steps(draw) -> ScheduledStep:
    groups = draw(st.sampled_from((1, 1, 2, 3)))
    ids = draw(st.lists(st.sampled_from([f"req-{i}" for i in range(12)] + ["0", "7-a", "ö"]), max_size=8,
                        unique=True))
    requests = tuple(draw(scheduled_request(i, groups)) for i in ids)
    previous = [i for i in ids if draw(st.booleans())] + draw(st.lists(st.sampled_from(("gone-1", "gone-2")),
                                                                        max_size=2, unique=True))
    step = ScheduledStep(use_pp=draw(st.booleans()), async_scheduling=draw(st.booleans()),
                         use_v2_model_runner=draw(st.booleans()), requests=requests,
                         resumed=draw(st.integers(0, len(requests))), previous=tuple(draw(st.permutations(previous))))
    label(step)
    return step


@st.composite
def bad_steps(draw) -> BadStep:
    """A step with at least one request's entry left out of req_to_new_blocks or (pipeline
    parallel without async scheduling, where it is read) num_scheduled_tokens."""
    step = draw(scheduled_steps().filter(lambda s: s.requests))
    tables = ["req_to_new_blocks"] + (["num_scheduled_tokens"] if step.use_pp and not step.async_scheduling else [])
    dropped = draw(st.lists(st.tuples(st.sampled_from(tables), st.sampled_from([r.request_id for r in step.requests])),
                            min_size=1, max_size=3, unique=True))
    return BadStep(step=step, dropped=tuple(dropped))
