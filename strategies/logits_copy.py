"""Logits-copy generators: programs of requests entering and leaving sampler slots with sampler
steps (the schema and its operations: `vllm_hotpaths.testing.cases.logits_copy`), one request at
one boundary, and bad input.

Parameters sit at every boundary of the "needs processing" rule: temperature 0, 1e-6, 1e-5 and
one step below, 1.0 and one fp32 step each side; top_k -1, 0, 1, 2, V-1, V, V+1; top_p 1.0 and one
step below; min_p 0 and 1e-9; each penalty at its neutral value and one step off; empty and zero
logit biases; allowed ids; min_tokens with and without stop ids; bad words of 1 to 3 tokens;
thinking budgets (none, -1, 0 to 3) with the reasoning markers known, partly known or absent.
Each list (allowed ids, logit biases, stop ids, bad words) is empty, a few entries long, or, one
time in four, as long as vLLM 0.22's sampler takes (MAX_LIST_LENGTHS; a few ids repeated).

Real vocabulary sizes (32,768 to 262,144) come in a few examples: one program in 50 (one slot,
at most three operations, no drafts: each step costs O(V) per row, in interpreted kernels and in
vLLM's sampler), and a third of the boundary cases whose setting names the vocabulary size (V-1,
V, V+1; one row). Their ids come from the whole range, from above 32,767 and from the 16-bit
edges; top_k takes those edges too.
"""

from __future__ import annotations

from itertools import combinations, cycle, islice

import numpy as np
from hypothesis import strategies as st

from vllm_hotpaths.testing.cases import note
from vllm_hotpaths.testing.cases.logits_copy import (BAD_ROWS, FIELD_EDGES, SPECIAL_LOGITS, BadInputCase,
                                                     BoundaryCase, LogitsProgram)

ONE_UP, ONE_DOWN = float(np.nextafter(np.float32(1), np.float32(2))), float(np.nextafter(np.float32(1), np.float32(0)))
TINY = float(np.nextafter(np.float32(0), np.float32(1)))  # the smallest fp32 step above 0
TEMPERATURES = (0.0, 1.0, 1e-6, 1e-5, float(np.nextafter(1e-5, 0)), ONE_UP, ONE_DOWN, 0.7, 2.0)
TOP_P = (1.0, ONE_DOWN, 0.5, 0.9)
MIN_P = (0.0, 1e-9, 0.1)
REPETITION = (1.0, ONE_UP, ONE_DOWN, 1.3, 0.7)
ADDITIVE = (0.0, -0.0, TINY, 0.5, -0.5, 2.0, -2.0)  # frequency and presence
BIASES = (0.0, -0.0, 2.5, -100.0)
DTYPES = ("float32", "bfloat16", "float16")
REAL_VOCABS = (32768, 32769, 50257, 151936, 262144)
WIDE_ID_EDGES = (2**15 - 1, 2**15, 2**16 - 1, 2**16, 2**17)
# The longest list of each kind vLLM 0.22's sampler takes for one request (a longer one raises).
MAX_LIST_LENGTHS = {"allowed_token_ids": 1024, "logit_bias": 1024, "stop_token_ids": 128, "bad_words": 128}


def _token_ids(vocab: int) -> st.SearchStrategy[int]:
    """Ids of the vocabulary; in a real one, from above 32,767 and the 16-bit edges too
    (Hypothesis favours small integers)."""
    if vocab <= 2**15:
        return st.integers(0, vocab - 1)
    edges = sorted({0, vocab - 1} | {e for e in WIDE_ID_EDGES if e < vocab})
    return st.one_of(st.integers(0, vocab - 1), st.integers(2**15, vocab - 1), st.sampled_from(edges))


def _lists(elements, least: int, most: int, longest: int) -> st.SearchStrategy[tuple]:
    """`least` to `most` elements, or (one time in four) `longest` of them: a few repeated."""
    short = st.lists(elements, min_size=least, max_size=most).map(tuple)
    full = st.lists(elements, min_size=1, max_size=3).map(lambda few: tuple(islice(cycle(few), longest)))
    return st.one_of(short, short, short, full)


def _longest_bias(vocab: int) -> st.SearchStrategy[tuple]:
    """As many distinct ids as vLLM takes biases for (all of a small vocabulary), from a drawn
    first id on, each with one of a few biases."""
    n = min(vocab, MAX_LIST_LENGTHS["logit_bias"])
    return st.tuples(st.integers(0, vocab - n), st.lists(st.sampled_from(BIASES), min_size=1, max_size=3)).map(
        lambda first_biases: tuple(zip(range(first_biases[0], first_biases[0] + n), cycle(first_biases[1]))))


# -- generation ----------------------------------------------------------------------------
def _knobs(vocab: int) -> dict:
    """knob -> (neutral settings, settings off neutral), each a strategy of ((name, value), ...)."""
    ids = _token_ids(vocab)
    one = lambda name, values: st.sampled_from(values).map(lambda v: ((name, v),))  # noqa: E731
    stops = _lists(ids, 1, 2, MAX_LIST_LENGTHS["stop_token_ids"])
    every = (st.just(tuple(range(vocab))),) if vocab <= MAX_LIST_LENGTHS["allowed_token_ids"] else ()
    cuts = (1, 2, *(e for e in WIDE_ID_EDGES if e < vocab - 1), vocab - 1)
    return {
        "temperature": (one("temperature", (1.0, 0.0)), one("temperature", TEMPERATURES[2:])),
        "top_k": (one("top_k", (-1, 0, vocab, vocab + 1)), one("top_k", cuts)),
        "top_p": (one("top_p", (1.0,)), one("top_p", TOP_P[1:])),
        "min_p": (one("min_p", (0.0,)), one("min_p", MIN_P[1:])),
        "repetition_penalty": (one("repetition_penalty", (1.0,)), one("repetition_penalty", REPETITION[1:])),
        "frequency_penalty": (one("frequency_penalty", ADDITIVE[:2]), one("frequency_penalty", ADDITIVE[2:])),
        "presence_penalty": (one("presence_penalty", ADDITIVE[:2]), one("presence_penalty", ADDITIVE[2:])),
        "logit_bias": (one("logit_bias", ((),)),
                       st.one_of(*[st.lists(st.tuples(ids, st.sampled_from(BIASES)), min_size=1, max_size=3,
                                             unique_by=lambda pair: pair[0]).map(tuple)] * 3,
                                 _longest_bias(vocab)).map(lambda b: (("logit_bias", b),))),
        "allowed_token_ids": (one("allowed_token_ids", ((),)),
                              st.one_of(_lists(ids, 1, 4, MAX_LIST_LENGTHS["allowed_token_ids"]),
                                        *every).map(lambda a: (("allowed_token_ids", a),))),
        "min_tokens": (st.one_of(stops.map(lambda s: (("min_tokens", 0), ("stop_token_ids", s))),
                                 st.integers(1, 4).map(lambda n: (("min_tokens", n),))),
                       st.tuples(st.integers(1, 4), stops).map(
                           lambda ns: (("min_tokens", ns[0]), ("stop_token_ids", ns[1])))),
        "bad_words": (one("bad_words", ((),)),
                      _lists(st.lists(ids, min_size=1, max_size=3).map(tuple), 1, 3,
                             MAX_LIST_LENGTHS["bad_words"]).map(lambda w: (("bad_words", w),))),
        "thinking_token_budget": (one("thinking_token_budget", (None, -1)),
                                  one("thinking_token_budget", (0, 1, 2, 3))),
    }


KNOBS = tuple(_knobs(2))  # their names
SEEDS = st.integers(0, 2 ** 31 - 1)


@st.composite
def request_params(draw, vocab: int, neutral_only: tuple[str, ...] = (), seeds=SEEDS) -> tuple:
    """((name, value), ...): plain sampling or greedy, some knobs set to neutral values (V + 1,
    -0.0, empty lists, ...), and often none or one knob off its neutral value, at a boundary
    (never the knobs named in `neutral_only`)."""
    knobs = _knobs(vocab)
    pairs = {"temperature": draw(st.sampled_from((1.0, 0.0)))}
    for name in draw(st.lists(st.sampled_from(sorted(knobs)), max_size=3, unique=True)):
        pairs.update(draw(knobs[name][0]))
    for name in draw(st.lists(st.sampled_from(sorted(set(knobs) - set(neutral_only))), max_size=2, unique=True)):
        pairs.update(draw(knobs[name][1]))
    pairs["seed"] = draw(seeds)
    return tuple(pairs.items())


SMALL_VOCABS = (1, 2, 5, 8, 9, 17, 24)


def _nan_at_block_edges(vocab: int, block: int) -> st.SearchStrategy[tuple]:
    """Edits of NaN at the first or last lane of a `block`-id block of a row: with no `share`, a
    row with a NaN in some of its blocks but not all (a share puts NaN in every block)."""
    edges = sorted({lane for start in range(0, vocab, block) for lane in (start, min(start + block, vocab) - 1)})
    return st.tuples(st.integers(0, 15), st.sampled_from(edges), st.just(float("nan")))


@st.composite
def logits_programs(draw, vocabs: tuple[int, ...] = SMALL_VOCABS, neutral_only: tuple[str, ...] = (),
                    seeds=SEEDS, nan_block: int | None = None, narrow: tuple[str, ...] = (),
                    peaks: tuple[float, ...] = ()) -> LogitsProgram:
    """`vocabs`: the vocabulary sizes of most programs (one in 50 takes a real one);
    `neutral_only`, `seeds`: as `request_params`; `nan_block`: a block size (the sampler's), whose
    edges a step's edits also put NaN at where the vocabulary spans several blocks; `narrow`: knobs
    that, in one program of two, are the only ones its requests set off neutral (what a fast path
    computes itself, so that its steps are not all handed to its reference); `peaks`: values a
    step's edits also write (logits far above the rest of a row), the largest also on two ids of
    one row at once.

    While a request holds the longest bad-words list, its steps have no drafts: vLLM's bad-words
    kernel runs one interpreted program per row and bad word, and those steps were 94% of the
    programs sampler_mrv2's conformance row interpreted (drafts still meet bad words in the shorter
    lists)."""
    real = draw(st.integers(0, 49)) == 49  # the last value: shrinking leaves the small vocabularies
    if real:
        vocab = draw(st.sampled_from(REAL_VOCABS))
        note("real vocabulary (>= 32,768)")
    else:
        vocab = draw(st.sampled_from(vocabs))
    slots = draw(st.integers(1, 1 if real else 4))
    ids = _token_ids(vocab)
    tokens = st.lists(ids, max_size=6).map(tuple)
    if narrow and draw(st.booleans()):
        neutral_only = (*neutral_only, *sorted(set(KNOBS) - set(narrow)))
    live: set[int] = set()
    longest_bad_words: set[int] = set()  # slots whose request holds MAX_LIST_LENGTHS["bad_words"]
    edit = st.tuples(st.integers(0, 15), ids, st.sampled_from(SPECIAL_LOGITS))
    if nan_block is not None and vocab > nan_block:
        edit = st.one_of(edit, _nan_at_block_edges(vocab, nan_block))
    edit_lists = st.lists(edit, max_size=4).map(tuple)
    if peaks:
        edit = st.one_of(edit, st.tuples(st.integers(0, 15), ids, st.sampled_from(peaks)))
        # the largest peak on two ids of one row: equal scores after the noise where it absorbs it
        tie = st.tuples(st.integers(0, 15), ids, ids).map(lambda r: ((r[0], r[1], max(peaks)), (r[0], r[2], max(peaks))))
        edit_lists = st.lists(st.one_of(edit.map(lambda e: (e,)), tie), max_size=4).map(
            lambda groups: tuple(e for group in groups for e in group))
    ops = []
    for _ in range(draw(st.integers(1, 3 if real else 14))):
        free = sorted(set(range(slots)) - live)
        choices = (["add"] if free else []) + (["step", "step", "append", "remove"] if live else [])
        kind = draw(st.sampled_from(choices))
        if kind == "add":
            slot = draw(st.sampled_from(free))
            prompt = draw(st.lists(ids, min_size=1, max_size=6).map(tuple))
            params = draw(request_params(vocab, neutral_only, seeds))
            ops.append(("add", slot, prompt, draw(tokens), params))
            live.add(slot)
            if len(dict(params).get("bad_words", ())) == MAX_LIST_LENGTHS["bad_words"]:
                longest_bad_words.add(slot)
        elif kind == "remove":
            slot = draw(st.sampled_from(sorted(live)))
            ops.append(("remove", slot))
            live.discard(slot)
            longest_bad_words.discard(slot)
        elif kind == "append":
            ops.append(("append", draw(st.sampled_from(sorted(live))), draw(tokens)))
        else:
            # Every live request in some order (a decode step as vLLM mostly runs one), or a subset.
            members = draw(st.one_of(st.permutations(sorted(live)),
                                     st.lists(st.sampled_from(sorted(live)), min_size=1, unique=True)))
            drafts = st.just(()) if real or longest_bad_words & set(members) else \
                st.one_of(st.just(()), st.lists(ids, min_size=1, max_size=3).map(tuple))
            batch = tuple((slot, draw(drafts)) for slot in members)
            edits = draw(edit_lists)
            ops.append(("step", batch, draw(st.integers(0, 2 ** 32 - 1)),
                        draw(st.sampled_from((0.0, 0.3))), edits))
    if not any(op[0] == "step" for op in ops) and live:
        ops.append(("step", ((min(live), ()),), 0, 0.0, ()))
    if slots >= 2 and draw(st.integers(0, 3)) == 0:  # one program in four, built (below)
        ops.extend(_a_needy_request_left(draw, vocab, slots, live, neutral_only, seeds, edit_lists))
    marker = st.lists(ids, min_size=1, max_size=2).map(tuple)
    reasoning = draw(st.one_of(st.none(), st.tuples(marker, marker, marker),
                               st.tuples(marker, marker, st.just(()))))  # the last: not enabled
    return LogitsProgram(vocab, slots, draw(st.sampled_from(DTYPES)), tuple(ops), reasoning)


# Knobs whose every off-neutral value changes logits a step sees (a greedy request's too).
CHANGING_KNOBS = ("temperature", "repetition_penalty", "logit_bias")


def _a_needy_request_left(draw, vocab, slots, live: set, neutral_only, seeds, edits) -> list[tuple]:
    """Two requests that need processing admitted one after the other, the first removed, then a
    step holding the second (and perhaps others still live): where bookkeeping of which requests
    still need processing goes wrong once others leave. With three slots or more, a request that
    needs none is admitted too and leads the step with drafts, so the second's rows lie past the
    first one per request. Slots these take are freed first. Updates `live`."""
    ids = _token_ids(vocab)
    first, second, *rest = draw(st.permutations(range(slots)))
    lead = rest[:1]
    ops = [("remove", slot) for slot in (first, second, *lead) if slot in live]
    live -= {first, second, *lead}
    knobs = _knobs(vocab)
    prompts, outputs = st.lists(ids, min_size=1, max_size=6).map(tuple), st.lists(ids, max_size=6).map(tuple)
    for slot in (first, second):
        name = draw(st.sampled_from([k for k in CHANGING_KNOBS if k not in neutral_only]))
        params = {"temperature": draw(st.sampled_from((1.0, 0.0))), **dict(draw(knobs[name][1])),
                  "seed": draw(seeds)}
        ops.append(("add", slot, draw(prompts), draw(outputs), tuple(params.items())))
    for slot in lead:
        plain = (("temperature", draw(st.sampled_from((1.0, 0.0)))), ("seed", draw(seeds)))
        ops.append(("add", slot, draw(prompts), draw(outputs), plain))
    ops.append(("remove", first))
    live.update((second, *lead))
    others = sorted(live - {second, *lead})
    others = draw(st.lists(st.sampled_from(others), unique=True)) if others else []
    batch = (*((slot, draw(st.lists(ids, min_size=1, max_size=3).map(tuple))) for slot in lead),
             *((slot, ()) for slot in draw(st.permutations([second, *others]))))
    ops.append(("step", batch, draw(st.integers(0, 2 ** 32 - 1)), draw(st.sampled_from((0.0, 0.3))), draw(edits)))
    return ops


# -- two knobs off neutral in one request -------------------------------------------------------
KNOB_PAIRS = tuple(combinations(KNOBS, 2))
SAMPLING_ONLY = {"top_k", "top_p", "min_p"}
# Besides each knob's boundary values: values off the dyadic grid, with which two steps applied
# in the other order round differently far more often (x - 0.5 - 2 is x - 2 - 0.5 for most x),
# and thresholds that cut within a small vocabulary, so that what min_p removes moves what top-p
# keeps.
PAIR_VALUES = {"temperature": (1.3,), "repetition_penalty": (1.2, 0.8),
               "frequency_penalty": (0.3, -0.7, 1.2), "presence_penalty": (0.3, -0.7, 1.2),
               "min_p": (0.2, 0.3, 0.5), "top_p": (0.7, 0.8)}


def pair_label(pair: tuple[str, str]) -> str:
    return f"{pair[0]} and {pair[1]} off neutral in one request"


FLAT_ROW_VOCAB = 64
MODERATE_LOGITS = (-1.0, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0)


def _flat_row(vocab: int) -> st.SearchStrategy[tuple]:
    """Edits giving every lane of one row a moderate logit: the seeded rows (normal, scale 4) put
    nearly all the probability on one id, where min_p, top-p and top-k cut the same ids in any
    order; a flatter row has the middling ids an order of two of them keeps or cuts."""
    return st.tuples(st.integers(0, 15), st.lists(st.sampled_from(MODERATE_LOGITS), min_size=vocab,
                                                  max_size=vocab)).map(
        lambda row_values: tuple((row_values[0], lane, v) for lane, v in enumerate(row_values[1])))


@st.composite
def pair_programs(draw, pair: tuple[str, str], vocabs: tuple[int, ...] = SMALL_VOCABS, seeds=SEEDS,
                  neutral_only: tuple[str, ...] = ()) -> LogitsProgram:
    """One request with both knobs of `pair` off neutral (each at one of its boundary values or of
    `PAIR_VALUES`, sampled or greedy), alone or beside a request of `request_params` (`neutral_only`
    and `seeds` as there); a step, the request's tokens appended, and often another step (penalties
    then count them); rows with drafts unless a request holds the longest bad-words list; in a small
    vocabulary a step's logits are, one time in two (always for two of top-k, top-p and min_p), a
    row of moderate values (`_flat_row`). Where the two knobs are applied by two processing steps,
    such a request is where their order shows."""
    # top-k cuts nothing from one or two ids, two thresholds little from fewer than five; top-k,
    # top-p and min_p leave a greedy request alone
    least = 5 if SAMPLING_ONLY >= set(pair) else 3 if "top_k" in pair else 1
    vocab = draw(st.sampled_from([v for v in vocabs if v >= least]))
    knobs, ids = _knobs(vocab), _token_ids(vocab)
    params = {"temperature": 1.0 if SAMPLING_ONLY & set(pair) else draw(st.sampled_from((1.0, 0.0)))}
    for name in pair:
        values = st.sampled_from(PAIR_VALUES.get(name, ())).map(lambda v, name=name: ((name, v),))
        params.update(draw(st.one_of(knobs[name][1], values) if name in PAIR_VALUES else knobs[name][1]))
    params["seed"] = draw(seeds)
    note(pair_label(pair))
    tokens = st.lists(ids, max_size=6).map(tuple)
    prompts = st.lists(ids, min_size=1, max_size=6).map(tuple)
    requests = [tuple(params.items())]
    slots = draw(st.integers(1, 2))
    if slots == 2:
        requests.append(draw(request_params(vocab, neutral_only, seeds)))
    ops = [("add", slot, draw(prompts), draw(tokens), request) for slot, request in enumerate(requests)]
    longest = any(len(dict(r).get("bad_words", ())) == MAX_LIST_LENGTHS["bad_words"] for r in requests)
    drafts = st.just(()) if longest else st.one_of(st.just(()), st.lists(ids, min_size=1, max_size=3).map(tuple))
    edits = st.lists(st.tuples(st.integers(0, 15), ids, st.sampled_from(SPECIAL_LOGITS)), max_size=2).map(tuple)
    if vocab <= FLAT_ROW_VOCAB:  # two thresholds: always (on a peaked row they cut alike)
        edits = _flat_row(vocab) if SAMPLING_ONLY >= set(pair) else st.one_of(edits, _flat_row(vocab))
    for number in range(draw(st.integers(1, 2))):
        if number:
            ops.append(("append", 0, draw(tokens)))
        batch = tuple((slot, draw(drafts)) for slot in draw(st.permutations(range(slots))))
        ops.append(("step", batch, draw(st.integers(0, 2 ** 32 - 1)), draw(st.sampled_from((0.0, 0.3))), draw(edits)))
    marker = st.lists(ids, min_size=1, max_size=2).map(tuple)
    reasoning = draw(st.tuples(marker, marker, marker) if "thinking_token_budget" in pair else
                     st.one_of(st.none(), st.tuples(marker, marker, marker)))
    # fp32 half the time: its logits carry the low bits in which an order of two steps shows
    return LogitsProgram(vocab, slots, draw(st.sampled_from(("float32", *DTYPES))), tuple(ops), reasoning)


# -- one request at one boundary -----------------------------------------------------------
# Every setting next to a "needs processing" boundary, alone: (knob, value), where "V-1", "V"
# and "V+1" are the vocabulary size's neighbours and "id" a token id drawn per case.
BOUNDARY_SETTINGS = (
    *[("temperature", t) for t in TEMPERATURES],
    *[("top_k", k) for k in (-1, 0, 1, 2, "V-1", "V", "V+1")],
    *[("top_p", p) for p in TOP_P[:3]],
    *[("min_p", p) for p in MIN_P],
    *[("repetition_penalty", p) for p in REPETITION[:3]],
    *[(name, v) for name in ("frequency_penalty", "presence_penalty") for v in ADDITIVE[:4]],
    *[("logit_bias", b) for b in ((), (("id", 0.0),), (("id", -0.0),), (("id", 2.5),))],
    *[("allowed_token_ids", a) for a in ((), ("id",), "all")],
    *[("min_tokens", m) for m in ((0, ("id",)), (1, ()), (1, ("id",)), (2, ()), (2, ("id",)))],
    *[("bad_words", w) for w in ((), (("id",),), (("id", "id"),))],
    *[("thinking_token_budget", b) for b in (None, -1, 0, 1, 2)],
)


def _names_vocab_size(value) -> bool:
    if isinstance(value, tuple):
        return any(_names_vocab_size(v) for v in value)
    return value in ("V-1", "V", "V+1")


@st.composite
def boundary_cases(draw, knob: str, value) -> BoundaryCase:
    # A setting that names the vocabulary size (V-1, V, V+1) takes a real one a third of the time.
    real = _names_vocab_size(value) and draw(st.integers(0, 2)) == 2
    if real:
        vocab = draw(st.sampled_from(REAL_VOCABS))
        note("real vocabulary (>= 32,768)")
    else:
        vocab = draw(st.sampled_from((2, 5, 8, 17)))
    token = draw(_token_ids(vocab))
    reasoning = None
    if knob == "thinking_token_budget":
        # starts with `token`; the natural end is another token, and only sometimes known
        end = draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=2).map(tuple))
        natural_end = draw(st.sampled_from((((token + 1) % vocab,), ())))
        reasoning = ((token,), end, natural_end)
    return BoundaryCase(
        vocab_size=vocab, knob=knob, value=value,
        temperature=draw(st.sampled_from((1.0, 0.0))),
        token=token,
        # a logit far below the rest (-60, -200) in half the cases: the token's probability is
        # then below 2**-24, where a probability threshold one fp32 step off its neutral value
        # (top_p just below 1, min_p) removes it and skipping the processing shows
        special=draw(st.sampled_from((-0.0, 0.0, 1.0, -200.0, -60.0, -60.0))),
        drafts=draw(st.lists(_token_ids(vocab), max_size=0 if real else 2).map(tuple)),
        seed=draw(st.integers(0, 2 ** 31 - 1)),
        dtype=draw(st.sampled_from(DTYPES)),
        reasoning=reasoning,
    )


def bad_input_cases() -> st.SearchStrategy[BadInputCase]:
    """A parameter outside what vLLM accepts (float32 logits), or a call whose rows do not
    describe one batch (float32 or bfloat16 logits)."""
    return st.one_of(
        st.sampled_from(sorted(FIELD_EDGES)).flatmap(
            lambda f: st.sampled_from(FIELD_EDGES[f]).map(lambda v: BadInputCase(f, v, "float32"))),
        st.builds(BadInputCase, st.just("rows"), st.sampled_from(sorted(BAD_ROWS)),
                  st.sampled_from(("float32", "bfloat16"))))
