"""Model Runner V2 penalties generators: slot programs (the schema and its operations:
`vllm_hotpaths.testing.cases.penalties_mrv2`).

Requests are admitted to any free slot (vLLM pops a free list: after removals any slot can come
next) and removed; a few are resumed after a preemption (outputs given at admission). Each step
schedules a subset of the live requests in any order (vLLM sorts by phase, not by slot), some
with drafts, -1 placeholder drafts among them (a request still in prefill, or a draft not yet
known); after the penalties, each request commits its accepted drafts (the prefix before the
first rejected one or the first -1) plus one recovered or bonus token, or nothing (a chunked
prefill that sampled no token). Async scheduling adds nothing here: Model Runner V2 updates its
counts on the device in the same step (`post_update`), with no host list or placeholder to
repair. Penalty values: neutral (1.0, 0.0, -0.0), one fp32 step off, tiny, huge, mixed per
request; logits with signed zeros, infinities, NaN, subnormals and the fp32 extremes.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from vllm_hotpaths.testing.cases import note
from vllm_hotpaths.testing.cases.penalties_mrv2 import SPECIAL_LOGITS, SlotProgram

ONE_UP = float(np.nextafter(np.float32(1), np.float32(2)))
ONE_DOWN = float(np.nextafter(np.float32(1), np.float32(0)))
TINY = float(np.nextafter(np.float32(0), np.float32(1)))
REPETITION = (1.0, ONE_UP, ONE_DOWN, 1.3, 0.7, 2.0, 1e-30, 1e30)
# frequency and presence; 0.7 and -1.3 have full mantissas, so f * count rounds (and a fused
# multiply-add rounds once instead)
ADDITIVE = (0.0, -0.0, TINY, 1e-7, 0.7, -1.3, 0.5, -0.5, 1.5, 2.0, -2.0)
VOCABS = (1, 2, 3, 7, 8, 9, 31, 32, 33, 64)  # around the prompt mask's 32-bit words
REAL_VOCABS = (32768, 32769, 151936, 262144)


def penalty_triples() -> st.SearchStrategy[tuple[float, float, float]]:
    """(repetition, frequency, presence): all neutral a quarter of the time, else any mix."""
    neutral = st.tuples(st.just(1.0), st.sampled_from((0.0, -0.0)), st.sampled_from((0.0, -0.0)))
    mixed = st.tuples(st.sampled_from(REPETITION), st.sampled_from(ADDITIVE), st.sampled_from(ADDITIVE))
    return st.one_of(neutral, mixed, mixed, mixed)


@st.composite
def slot_programs(draw, max_ops: int = 12) -> SlotProgram:
    real = draw(st.integers(0, 29)) == 29  # the last value: shrinking leaves the small vocabularies
    vocab = draw(st.sampled_from(REAL_VOCABS)) if real else draw(st.sampled_from(VOCABS))
    if real:
        note("real vocabulary (>= 32,768)")
    ids = st.integers(0, vocab - 1) if vocab <= 2**15 else st.one_of(
        st.integers(0, vocab - 1), st.integers(2**15, vocab - 1),
        st.sampled_from(sorted({vocab - 1} | {e for e in (2**15, 2**16) if e < vocab})))
    slots = draw(st.integers(1, 2 if real else 6))
    lengths: dict[int, int] = {}  # live slot -> its tokens so far
    longest = 1
    ops = []
    for _ in range(draw(st.integers(1, 4 if real else max_ops))):
        free = sorted(set(range(slots)) - set(lengths))
        kinds = (["add", "add"] if free else []) + (["step", "step", "step", "remove"] if lengths else [])
        kind = draw(st.sampled_from(kinds))
        if kind == "add":
            slot = draw(st.sampled_from(free))
            prompt = tuple(draw(st.lists(ids, min_size=1, max_size=8)))
            resumed = tuple(draw(st.one_of(st.just([]), st.lists(ids, min_size=1, max_size=8))))
            ops.append(("add", slot, prompt, resumed, draw(penalty_triples())))
            lengths[slot] = len(prompt) + len(resumed)
            longest = max(longest, lengths[slot])
        elif kind == "remove":
            slot = draw(st.sampled_from(sorted(lengths)))
            ops.append(("remove", slot))
            del lengths[slot]
        else:
            members = draw(st.one_of(st.permutations(sorted(lengths)),
                                     st.lists(st.sampled_from(sorted(lengths)), min_size=1, unique=True)))
            batch, sampled = [], []
            for slot in members:
                drafts = () if real else tuple(draw(st.lists(st.one_of(ids, ids, st.just(-1)), max_size=3)))
                batch.append((slot, drafts))
                sampled.append(draw(commits(drafts, ids)))
                lengths[slot] += len(sampled[-1])
                longest = max(longest, lengths[slot])
            edits = tuple(draw(st.lists(st.tuples(st.integers(0, 15), ids, st.sampled_from(SPECIAL_LOGITS)),
                                        max_size=4)))
            ops.append(("step", tuple(batch), draw(st.integers(0, 2**32 - 1)), draw(st.sampled_from((0.0, 0.3))),
                        edits, tuple(sampled)))
    if lengths and not any(op[0] == "step" for op in ops):
        slot = min(lengths)
        ops.append(("step", ((slot, ()),), 0, 0.0, (), ((0,),)))
        longest = max(longest, lengths[slot] + 1)
    # A model length past the longest request (one in five exactly at it).
    return SlotProgram(vocab, slots, longest + draw(st.sampled_from((0, 1, 64, 64, 64))), tuple(ops))


@st.composite
def commits(draw, drafts: tuple, ids) -> tuple:
    """What a request commits after a step with `drafts`: an accepted prefix of them (up to the
    first -1), then one recovered or bonus token; or nothing."""
    if draw(st.integers(0, 9)) == 0:
        return ()
    valid = drafts.index(-1) if -1 in drafts else len(drafts)
    accepted = draw(st.integers(0, valid))
    return tuple(drafts[:accepted]) + (draw(ids),)
