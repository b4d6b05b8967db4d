"""Thinking-budget generators: the configurations a state machine starts from, and what it draws
each operation from (`ThinkDraws`): token ids with markers spliced in, prompts, budgets, drafts;
and bad configurations. The schema (`ThinkProgram`, `BadConfig`), its operations, the driver
(`ThinkRun`) and the machine itself: `vllm_hotpaths.testing.cases.think_budget`."""

from __future__ import annotations

import random

from hypothesis import strategies as st

from vllm_hotpaths.registry import version_key
from vllm_hotpaths.testing.cases import note
from vllm_hotpaths.testing.cases.think_budget import BadConfig

LOGITS_DTYPES = ("float32", "bfloat16")  # vLLM's sampler works on float32; float16 cannot hold 1e9


# -- generation ------------------------------------------------------------------------------------
# Marker shapes with known edge cases, over ids 0..9: single/multi-token, self-overlapping end, start a
# prefix of end, start == end, empty start, empty end, end a prefix of start.
MARKER_SHAPES = (
    ((7,), (8,)), ((7,), (8, 9)), ((7, 6), (8, 9)), ((7,), (9, 9)), ((5,), (5, 6)), ((5,), (5,)),
    ((), (8, 9)), ((7,), ()), ((5, 6), (5,)), ((9, 9), (9, 9, 9)), ((7,), (8, 9, 8)),
)
# Markers of four to six ids: real reasoning markers are multi-token in some tokenizers
# (channel headers such as `<|end|><|start|>assistant<|channel|>final<|message|>`).
LONG_MARKER_SHAPES = (
    ((7,), (8, 9, 6, 5)), ((7, 6, 5, 4), (8, 9)), ((7,), (9, 9, 9, 9, 9, 9)),
    ((5, 6, 7, 8, 9, 4), (5, 6, 7, 8, 9, 3)),
)
MAX_MARKER = 6
BUDGET_EDGES = (0, 1, 2, 3, 5, 8, 2**31 - 1, 10**18)
REAL_VOCABS = (32769, 50257, 151936, 262144)
REAL_VOCAB_OPS = 12  # a run over a real vocabulary stops after this many operations (O(V) each)
# The scheduler's max_num_seqs far above the batch (vLLM's defaults are 256 and 1,024): the holder
# sizes nothing by it but its mask capacity, and the batch may then grow past a handful of rows.
MAX_NUM_SEQS = (1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 256, 1024)  # one in six far above the batch
# A resumed (preempted) request joins with the output it has so far: an output past the first
# buffers a fast path sizes (32, 64, 256 tokens), mostly ids that are no marker.
LONG_OUTPUT_EDGES = (33, 65, 257, 320)
# Situations a run builds first, each in one run of two (`ThinkBudgetMachine.build`).
BUILT = ("deep resumed output", "over budget inside the drafts", "long marker one id a step",
         "a found end rewritten away")


@st.composite
def think_configs(draw, spec: bool) -> dict:
    start, end = draw(st.one_of(
        st.sampled_from(MARKER_SHAPES + LONG_MARKER_SHAPES), st.sampled_from(LONG_MARKER_SHAPES),
        st.tuples(st.lists(st.integers(0, 9), max_size=MAX_MARKER).map(tuple),
                  st.lists(st.integers(0, 9), max_size=MAX_MARKER).map(tuple)),
    ))
    k = draw(st.integers(1, 3)) if spec else 0
    note(f"markers |start|={len(start)} |end|={len(end)}, k={k}")
    if max(len(start), len(end)) > 3:
        note("a marker of more than three ids")
    vocab, max_num_seqs = draw(st.sampled_from((10, 12, 33))), draw(st.sampled_from(MAX_NUM_SEQS))
    if max_num_seqs > 5:
        note("max_num_seqs far above the batch")
    if draw(st.integers(0, 4)) == 4:  # the last value: shrinking leaves the small vocabularies
        # A real vocabulary, markers among its last ids (where tokenizers add them), two rows,
        # a short run (REAL_VOCAB_OPS).
        vocab = draw(st.sampled_from(REAL_VOCABS))
        start, end = tuple(vocab - 10 + t for t in start), tuple(vocab - 10 + t for t in end)
        max_num_seqs = min(max_num_seqs, 2)
        note("real vocabulary (>= 32,768), markers at its end")
    return dict(start_ids=start, end_ids=end, vocab_size=vocab,
                max_num_seqs=max_num_seqs, num_spec_tokens=k,
                logits_dtype=draw(st.sampled_from(LOGITS_DTYPES)))


def tokens(config: dict) -> st.SearchStrategy[int]:
    """Ids, one in four a marker id, so markers form, split and overlap, and think blocks still
    run long enough to exhaust small budgets."""
    marker_ids = sorted(set(config["start_ids"]) | set(config["end_ids"]))
    plain = st.integers(0, config["vocab_size"] - 1)
    return st.one_of(st.sampled_from(marker_ids), plain, plain, plain) if marker_ids else plain


def _splice(parts: tuple, markers: tuple) -> list[int]:
    out = list(parts[0])
    for marker, cut in zip(markers, parts[1:]):
        if cut is not None:  # (length of the marker prefix, where it goes)
            at = cut[1] % (len(out) + 1)
            out[at:at] = list(marker)[: cut[0]]
    return out


def token_runs(config: dict, max_size: int = 12, ids: st.SearchStrategy[int] | None = None):
    """Random ids, with whole or partial markers spliced in."""
    markers = tuple(m for m in (config["start_ids"], config["end_ids"]) if m)
    cuts = [st.one_of(st.none(), st.tuples(st.integers(1, len(m)), st.integers(0, max_size)))
            for m in markers]
    base = st.lists(tokens(config) if ids is None else ids, max_size=max_size)
    return st.tuples(base, *cuts).map(lambda parts: _splice(parts, markers))


def _plain_ids(config: dict) -> list[int]:
    """Ids below 64 that are part of no marker."""
    markers = set(config["start_ids"]) | set(config["end_ids"])
    return [t for t in range(min(config["vocab_size"], 64)) if t not in markers] or [0]


def long_outputs(config: dict, ids: st.SearchStrategy[int], lengths=None) -> st.SearchStrategy[tuple[int, ...]]:
    """A resumed request deep in its think block: the start marker, 33 to 320 ids (or `lengths`)
    that are no marker (derived from a drawn seed: hundreds of single draws would crowd out the
    rest of the example), then a few drawn ids (markers spliced in as anywhere)."""
    plain = _plain_ids(config)
    if lengths is None:
        lengths = st.one_of(st.sampled_from(LONG_OUTPUT_EDGES), st.integers(LONG_OUTPUT_EDGES[0], LONG_OUTPUT_EDGES[-1]))

    def build(parts: tuple) -> tuple[int, ...]:
        length, seed, tail = parts
        note("long output (a resumed request)")
        return (*config["start_ids"], *random.Random(seed).choices(plain, k=length), *tail)

    return st.tuples(lengths, st.integers(0, 2**16), token_runs(config, 4, ids)).map(build)


def budgets(version: str) -> st.SearchStrategy[int | None]:
    valid = st.one_of(st.none(), st.just(-1), st.sampled_from(BUDGET_EDGES), st.integers(0, 6))
    valid = st.one_of(st.none(), valid)  # untracked rows often, for swaps with tracked ones
    if version_key(version) < version_key("0.23.0"):  # before 0.23 the machine runs on any integer
        return st.one_of(valid, st.integers(-4, -2))
    return valid


PROMPT_SHAPES = ("plain", "in think", "partial end", "partial start")


def _prompt(parts: tuple, config: dict) -> list[int] | None:
    absent, prompt, shape, cut, thought = parts
    if absent:
        return None
    start, end = list(config["start_ids"]), list(config["end_ids"])
    if shape == "in think" and start:
        prompt = prompt + start + list(thought)
    elif shape == "partial end" and len(end) > 1:
        prompt = prompt + end[: 1 + cut % (len(end) - 1)]
    elif shape == "partial start" and len(start) > 1:
        prompt = prompt + start[: 1 + cut % (len(start) - 1)]
    note(f"prompt: {shape if prompt else 'empty'}")
    return prompt


def prompts(config: dict, ids: st.SearchStrategy[int] | None = None):
    """None (prompt embeds), plain, inside a think block (maybe over budget), ending with part
    of a marker that the output completes."""
    ids = tokens(config) if ids is None else ids
    parts = st.tuples(st.integers(0, 7).map(lambda n: n == 0), token_runs(config, 10, ids),
                      st.sampled_from(PROMPT_SHAPES), st.integers(0, 3), st.lists(ids, max_size=6))
    return parts.map(lambda p: _prompt(p, config))


def small_counts(max_value: int = 3) -> st.SearchStrategy[tuple[int, ...]]:
    return st.lists(st.integers(0, max_value), min_size=1, max_size=4).map(tuple)


class ThinkDraws:
    """The strategies a machine run draws from. Built once per configuration and version
    (`for_config`): Hypothesis validates each new strategy object on its first draw, which would
    otherwise dominate the cost of every example and every shrink."""

    _cache: dict = {}

    @classmethod
    def for_config(cls, config: dict, version: str) -> "ThinkDraws":
        key = (tuple(sorted(config.items())), version)
        if key not in cls._cache:
            cls._cache[key] = cls(config, version)
        return cls._cache[key]

    def __init__(self, config: dict, version: str) -> None:
        k = config["num_spec_tokens"]
        self.tokens = tokens(config)
        marker_ids = sorted(set(config["start_ids"]) | set(config["end_ids"]))
        self.marker_tokens = st.one_of(st.sampled_from(marker_ids), self.tokens) if marker_ids else self.tokens
        self.token_lists = st.lists(self.tokens, min_size=1, max_size=4).map(tuple)
        self.outputs = token_runs(config, 8, self.tokens).map(tuple)
        # one added output in eight is a resumed request's long one
        long = long_outputs(config, self.tokens)
        self.deep_outputs = long_outputs(config, self.tokens, st.integers(*LONG_OUTPUT_EDGES[-2:]))
        plain = _plain_ids(config)
        self.plain_runs = st.lists(st.sampled_from(plain), max_size=8)
        self.thoughts = st.lists(st.sampled_from(plain), min_size=1, max_size=8)
        self.plain_drafts = st.lists(st.sampled_from(plain), min_size=k, max_size=k).map(tuple)
        self.tracked_budgets = budgets(version).filter(lambda b: b is not None)
        # what a run builds first (`ThinkBudgetMachine.build`): each situation in one run of two,
        # drawn on its own (one draw picking among them tends to settle on one for a whole seed)
        self.built = st.tuples(*[st.booleans()] * len(BUILT)).map(
            lambda chosen: tuple(what for what, yes in zip(BUILT, chosen) if yes))
        self.added_outputs = st.integers(0, 7).flatmap(lambda n: long if n == 7 else self.outputs)
        # a batch hint far above the batch: more rows join at the start
        self.more_requests = st.integers(0, 8) if config["max_num_seqs"] > 5 else st.just(0)
        self.prompts = prompts(config, self.tokens)
        self.budgets = budgets(version)
        full = st.lists(self.tokens, min_size=k, max_size=k)  # a proposer usually fills all k
        runs = st.one_of(full, full, token_runs(config, k, self.tokens)).map(tuple)
        self.drafts = st.lists(runs, min_size=1, max_size=4).map(tuple)
        self.extra_placeholders = small_counts(k)
        # one decode loop in three emits a marker, one id a round (the model ending or starting
        # thinking by itself: a multi-id marker then spans several searched steps)
        markers = [m for m in (config["start_ids"], config["end_ids"]) if m]
        self.emitted_marker = st.one_of(st.just(()), st.just(()), st.sampled_from(markers)) if markers else st.just(())
        # where a run stops: operations over a real vocabulary cost O(V) each
        self.max_ops = REAL_VOCAB_OPS if config["vocab_size"] > 2**15 else None


# -- bad configuration -----------------------------------------------------------------------------
def invalid_budgets(version: str) -> st.SearchStrategy:
    """What the version refuses: before 0.23 every integer is taken; from 0.23 -1 (unlimited) and >= 0."""
    wrong_type = st.one_of(st.booleans(), st.sampled_from((0.0, 2.5, -1.0, 1e9)))
    if version_key(version) < version_key("0.23.0"):
        return wrong_type
    return st.one_of(wrong_type, st.integers(-2**40, -2), st.just(-2))


@st.composite
def bad_configs(draw, version: str, vllm_detectable: bool = False) -> BadConfig:
    """`vllm_detectable`: only what the installed vLLM itself fails on (an end id >= the vocab
    size, hit when it is forced; budgets that SamplingParams refuses from 0.23)."""
    vocab = draw(st.sampled_from((10, 12, 33)))
    start, end = draw(st.sampled_from([s for s in MARKER_SHAPES if s[0] and s[1]]))
    kinds = ["marker"]
    if version_key(version) >= version_key("0.23.0") or not vllm_detectable:
        kinds.append("budget")
    what = draw(st.sampled_from(kinds))
    budget = 0 if vllm_detectable else draw(st.integers(0, 3))  # 0: the end marker is forced at once
    if what == "marker":
        too_big = st.sampled_from((vocab, vocab + 1, 2**31, 2**63 - 1))
        bad = draw(too_big if vllm_detectable else st.one_of(too_big, st.sampled_from((-1, -7, True, 2.0))))
        in_start = not vllm_detectable and draw(st.booleans())
        marker = list(start if in_start else end)
        marker[draw(st.integers(0, len(marker) - 1))] = bad
        start, end = (tuple(marker), end) if in_start else (start, tuple(marker))
    else:
        budget = draw(invalid_budgets(version))
    note(f"bad {what}")
    return BadConfig(start, end, vocab, budget, what)
