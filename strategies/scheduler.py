"""Strategies for the scheduler state machine: engine configurations and requests.

Prompts share prefixes (two system prompts, whole blocks and a part) so that prefix-cache hits,
evictions and a request's own cached blocks after a preemption all occur; token ids come from a
small vocabulary in which 0 is the end-of-sequence id and 1 and 2 are stop ids, so that requests
stop on them as often as on their lengths.
"""

from __future__ import annotations

from hypothesis import strategies as st

from vllm_hotpaths.testing.scheduler_twins import Setup

VOCAB = 12
EOS, STOPS = 0, (1, 2)
PREFIXES = ((5, 6, 7, 8) * 9, (9, 10) * 11)  # 36 and 22 tokens: whole blocks and a part


@st.composite
def setups(draw):
    block_size = draw(st.sampled_from((16, 16, 32, 1)))
    max_model_len = draw(st.sampled_from((64, 128, 256)))
    return Setup(
        asynchronous=draw(st.booleans()),
        policy=draw(st.sampled_from(("fcfs", "priority"))),
        block_size=block_size,
        # room for one to four prompts of 48 tokens (KV pressure preempts), or up to four whole sequences
        num_blocks=draw(st.one_of(st.integers(1, 3).map(lambda n: n * -(-48 // block_size)),
                                  st.integers(2, 4 * max_model_len // block_size))),
        max_num_seqs=draw(st.integers(1, 6)),
        max_num_batched_tokens=draw(st.sampled_from((max_model_len, 2 * max_model_len))),
        max_model_len=max_model_len,
        prefix_caching=draw(st.booleans()),
        long_prefill_token_threshold=draw(st.sampled_from((0, 0, 8))),
        zeroing=draw(st.sampled_from((False, False, True))))


@st.composite
def requests(draw, max_model_len: int):
    """The keyword arguments of `Twins.request` but the id."""
    prefix = draw(st.sampled_from(((), *PREFIXES)))
    prompt = list(prefix) + draw(st.lists(st.integers(3, VOCAB - 1), min_size=0 if prefix else 1, max_size=40))
    prompt = prompt[:max_model_len - 1]
    max_tokens = draw(st.integers(1, 48))
    return {"prompt": prompt,
            "max_tokens": max_tokens,
            "min_tokens": min(max_tokens, draw(st.sampled_from((0, 0, 2, 8)))),
            "eos": draw(st.sampled_from((EOS, None))),
            "stop_token_ids": tuple(draw(st.lists(st.sampled_from((*STOPS, EOS)), max_size=3))),
            "priority": draw(st.integers(0, 2))}


# a sampled token: an end-of-sequence or stop id about once in fourteen draws
tokens = st.integers(0, 40).map(lambda t: t if t < VOCAB else 3 + t % (VOCAB - 3))


@st.composite
def runs(draw):
    """A configuration, one to three rollouts of up to six requests each, and what steers them
    (`twins.run_rollouts`): the sampled tokens, cycled, and the updates before which the prefix
    cache is reset (with the running requests, or not)."""
    setup = draw(setups())
    rollouts = draw(st.lists(st.lists(requests(setup.max_model_len), min_size=1, max_size=6), min_size=1, max_size=3))
    steering = {"sampled": tuple(draw(st.lists(tokens, min_size=1, max_size=12))),
                "resets": dict(draw(st.lists(st.tuples(st.integers(0, 40), st.booleans()), max_size=3)))}
    return setup, rollouts, steering
