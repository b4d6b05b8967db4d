"""Model Runner V2 rejection sampling generators (the schema:
`vllm_hotpaths.testing.cases.rejection_mrv2`).

Small vocabularies (one 1024-lane resample block, a few crossing it; interpreted kernels cost a
few milliseconds per program), one or two requests in any slots, up to three drafts each, -1
placeholder drafts among them, greedy and random requests (temperatures around 1), seeds across
the int64 range, one-hot drafts or draft logits. Logits are drawn from a seed, with special
values (signed zeros, infinities, NaN, subnormals, fp32 extremes), engineered near-ties (lanes
set to one value or one ulp apart, where Gumbel-max in log space and v1's probability ratio may
part ways) and exact ties of the acceptance test.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from vllm_hotpaths.testing.cases import note
from vllm_hotpaths.testing.cases.rejection_mrv2 import SPECIAL_LOGITS, RejectionCase

VOCABS = (1, 2, 3, 5, 8, 17, 64)
TWO_BLOCKS = 1025  # one case in twenty: the resample's second block
TEMPERATURES = (0.0, 1.0, 0.7, 1.3, 0.05)
SEEDS = (0, 1, 7, 2**31 - 1, 2**32, 2**63 - 1, -1, -(2**63))
TIE = np.float32(24.0)  # above a normal row's maximum: the tied lanes contend for the argmax
NEAR_TIES = (float(TIE), float(np.nextafter(TIE, np.float32(3))), float(np.nextafter(TIE, np.float32(2))))


def near_tie_edits(rows: int, vocab: int):
    """Several lanes of one row set to one value or its neighbours (one fp32 ulp away)."""
    return st.tuples(st.integers(0, max(rows - 1, 0)), st.lists(st.integers(0, vocab - 1), min_size=2,
                                                              max_size=min(4, vocab), unique=True),
                     st.lists(st.sampled_from(NEAR_TIES), min_size=4, max_size=4)).map(
        lambda t: tuple((t[0], lane, value) for lane, value in zip(t[1], t[2])))


@st.composite
def rejection_cases(draw) -> RejectionCase:
    vocab = TWO_BLOCKS if draw(st.integers(0, 19)) == 19 else draw(st.sampled_from(VOCABS))
    steps = draw(st.integers(1, 3))
    num_reqs = draw(st.sampled_from((1, 1, 2)))
    max_num_reqs = draw(st.integers(num_reqs, num_reqs + 1))
    slots = draw(st.permutations(range(max_num_reqs)))[:num_reqs]
    ids = st.integers(0, vocab - 1)
    # -1 placeholders in a quarter of the cases (refused up to 0.24: its kernels read the logits at -1)
    draft_ids = st.one_of(ids, ids, st.just(-1)) if draw(st.integers(0, 3)) == 0 else ids
    requests = []
    for slot in slots:
        length = draw(st.integers(0, steps))  # uniform: chains of drafts as often as single ones
        drafts = tuple(draw(st.lists(draft_ids, min_size=length, max_size=length)))
        temperature = draw(st.sampled_from(TEMPERATURES))
        requests.append((slot, drafts, temperature, draw(st.one_of(st.sampled_from(SEEDS), st.integers(0, 2**40))),
                         draw(st.integers(0, 4096)), draw(st.integers(0, len(drafts)))))
    rows = sum(1 + len(r[1]) for r in requests)
    edits = draw(st.lists(st.tuples(st.integers(0, rows - 1), ids, st.sampled_from(SPECIAL_LOGITS)), max_size=3))
    if vocab > 1 and draw(st.booleans()):
        edits += list(draw(near_tie_edits(rows, vocab)))
        note("near-ties")
    draft_logits = draw(st.booleans())
    draft_edits = ()
    if draft_logits:
        draft_edits = list(draw(st.lists(st.tuples(st.integers(0, max_num_reqs * steps - 1), ids,
                                                   st.sampled_from(SPECIAL_LOGITS + NEAR_TIES)), max_size=3)))
        note("draft logits")
        drafted = [(first_row(requests, r) + j, slot * steps + j, token)
                   for r, (slot, drafts, *_) in enumerate(requests) for j, token in enumerate(drafts) if token >= 0]
        if drafted and draw(st.integers(0, 3)):  # three cases in four
            # a draft both models rule out (target and draft logit -inf): log p = log q = -inf;
            # often a request's first draft, which is always tested
            first = [d for d in drafted if d[1] % steps == 0]
            row, draft_row, token = draw(st.sampled_from(first if first and draw(st.integers(0, 3)) else drafted))
            edits.append((row, token, -np.inf))
            draft_edits.append((draft_row, token, -np.inf))
            note("a draft of probability 0")
    edits += draw(reject_then_accept(requests, vocab))
    if any(-1 in r[1] for r in requests):
        note("a -1 draft")
    # one case in two with one-hot drafts: a random request's first draft at an exact tie of
    # the acceptance test (RejectionCase.ties)
    tied = [r for r, (_, drafts, temperature, *_) in enumerate(requests) if temperature != 0.0 and drafts
            and drafts[0] >= 0]
    tie = vocab > 1 and tied and not draft_logits and draw(st.booleans())
    ties = (draw(st.sampled_from(tied)),) if tie else ()
    return RejectionCase(vocab, steps, max_num_reqs, tuple(requests), draft_logits, draw(st.integers(0, 2**32 - 1)),
                         draw(st.sampled_from((0.0, 0.0, 0.2))), tuple(edits), tuple(draft_edits), ties)


@st.composite
def reject_then_accept(draw, requests, vocab: int) -> tuple:
    """One case in two with such a request: a request's first draft made a sure rejection (target logit -inf; greedy:
    another lane at 32) and its second a likely acceptance (target logit 32, above BOOST and TIE),
    so verification must stop before a draft it would have accepted."""
    chained = [r for r, request in enumerate(requests) if len(request[1]) >= 2 and min(request[1][:2]) >= 0]
    if vocab < 2 or not chained or draw(st.booleans()):
        return ()
    r = draw(st.sampled_from(chained))
    row, (first, second) = first_row(requests, r), requests[r][1][:2]
    if requests[r][2] == 0.0:
        rejected = (row, (first + draw(st.integers(1, vocab - 1))) % vocab, 32.0)
    else:
        rejected = (row, first, -np.inf)
    return rejected, (row + 1, second, 32.0)


def first_row(requests, r: int) -> int:
    """The logits row of request `r`'s first row (each request: one row plus one per draft)."""
    return sum(1 + len(request[1]) for request in requests[:r])
