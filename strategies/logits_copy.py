"""Logits-copy cases: programs of requests entering and leaving sampler slots, with sampler steps.

A `LogitsProgram` is plain data (its repr is valid Python, its JSON is a fixture): a vocabulary
size, the number of slots, the logits' dtype, the reasoning markers (start, end, natural end;
None: no reasoning config) and a list of operations:
  ("add", slot, prompt, output, params)   params: ((name, value), ...) for RequestParams
  ("remove", slot)
  ("append", slot, tokens)                sampled tokens join the request's outputs
  ("step", batch, seed, share, edits)     batch: ((slot, drafts), ...); each request gets one
                                          logits row plus one per draft (speculative rows);
                                          logits from `seed` (normal, scale 4), a `share` of
                                          lanes then special values (-0.0, infinities, NaN,
                                          -60, -200, ...), then `edits` =
                                          ((row, lane, value), ...) written over them
Parameters sit at every boundary of the "needs processing" rule: temperature 0, 1e-6, 1e-5 and
one step below, 1.0 and one fp32 step each side; top_k -1, 0, 1, V-1, V, V+1; top_p 1.0 and one
step below; min_p 0 and 1e-9; each penalty at its neutral value and one step off; empty and zero
logit biases; allowed ids; min_tokens with and without stop ids; bad words of 1 to 3 tokens;
thinking budgets (none, -1, 0 to 3) with the reasoning markers known, partly known or absent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch
from hypothesis import strategies as st

from vllm_hotpaths.logits_copy import ReasoningMarkers, RequestParams

ONE_UP, ONE_DOWN = float(np.nextafter(np.float32(1), np.float32(2))), float(np.nextafter(np.float32(1), np.float32(0)))
TINY = float(np.nextafter(np.float32(0), np.float32(1)))  # the smallest fp32 step above 0
TEMPERATURES = (0.0, 1.0, 1e-6, 1e-5, float(np.nextafter(1e-5, 0)), ONE_UP, ONE_DOWN, 0.7, 2.0)
TOP_P = (1.0, ONE_DOWN, 0.5, 0.9)
MIN_P = (0.0, 1e-9, 0.1)
REPETITION = (1.0, ONE_UP, ONE_DOWN, 1.3, 0.7)
ADDITIVE = (0.0, -0.0, TINY, 0.5, -0.5, 2.0, -2.0)  # frequency and presence
BIASES = (0.0, -0.0, 2.5, -100.0)
SPECIAL_LOGITS = (0.0, -0.0, math.inf, -math.inf, math.nan, 1e-45, -60.0, -200.0, 30.0)
DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class LogitsProgram:
    vocab_size: int
    max_num_reqs: int
    dtype: str
    ops: tuple[tuple, ...]
    reasoning: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None = None

    def samplers(self, *factories, device):
        """Each factory's sampler for this program's table size and reasoning markers."""
        markers = ReasoningMarkers(*self.reasoning) if self.reasoning is not None else None
        return [f(self.vocab_size, self.max_num_reqs, device, reasoning=markers) for f in factories]


@dataclass
class Step:
    """One sampler call: a logits row per request row, and what each row describes."""

    logits: torch.Tensor
    rows: list[int]
    local_pos: list[int]
    input_ids: list[int]
    pos: list[int]

    def args(self):
        return self.logits, self.rows, self.local_pos, self.input_ids, self.pos

    def per_request(self) -> Iterator["Step"]:
        """The step cut down to each request's own rows (a batch of one request)."""
        first = 0
        for end in range(1, len(self.rows) + 1):
            if end == len(self.rows) or self.rows[end] != self.rows[first]:
                yield Step(self.logits[first:end], self.rows[first:end], self.local_pos[first:end],
                           self.input_ids[first:end], self.pos[first:end])
                first = end


def params_of(pairs) -> RequestParams:
    return RequestParams(**dict(pairs))


def run(program: LogitsProgram, samplers, device) -> Iterator[Step]:
    """Apply the program's table operations to every sampler in `samplers`; yield each step's
    inputs (the caller runs the sampler call)."""
    history: dict[int, list[int]] = {}  # slot -> prompt + outputs
    for op in program.ops:
        kind = op[0]
        if kind == "add":
            _, slot, prompt, output, pairs = op
            for s in samplers:
                s.add_request(slot, list(prompt), list(output), params_of(pairs))
            history[slot] = list(prompt) + list(output)
        elif kind == "remove":
            for s in samplers:
                s.remove_request(op[1])
            del history[op[1]]
        elif kind == "append":
            for s in samplers:
                s.append_output(op[1], list(op[2]))
            history[op[1]].extend(op[2])
        elif kind == "step":
            _, batch, seed, share, edits = op
            rows, local_pos, input_ids, pos = [], [], [], []
            for slot, drafts in batch:
                fed = [history[slot][-1]] + list(drafts)
                for i, token in enumerate(fed):
                    rows.append(slot)
                    local_pos.append(i)
                    input_ids.append(token)
                    pos.append(len(history[slot]) - 1 + i)
            yield Step(build_logits(program, len(rows), seed, share, edits, device), rows, local_pos,
                       input_ids, pos)
        else:
            raise ValueError(f"unknown operation {op!r}")


def build_logits(program: LogitsProgram, num_rows: int, seed: int, share: float, edits,
                 device) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    shape = (num_rows, program.vocab_size)
    values = (rng.standard_normal(shape) * 4).astype(np.float32)
    special = rng.random(shape) < share
    values[special] = rng.choice(np.array(SPECIAL_LOGITS, dtype=np.float32), size=int(special.sum()))
    for row, lane, value in edits:
        if num_rows:
            values[row % num_rows, lane % program.vocab_size] = value
    return torch.from_numpy(values).to(device=device, dtype=getattr(torch, program.dtype))


# -- generation ----------------------------------------------------------------------------
def _knobs(vocab: int) -> dict:
    """knob -> (neutral settings, settings off neutral), each a strategy of ((name, value), ...)."""
    ids = st.integers(0, vocab - 1)
    one = lambda name, values: st.sampled_from(values).map(lambda v: ((name, v),))  # noqa: E731
    stops = st.lists(ids, min_size=1, max_size=2).map(tuple)
    return {
        "temperature": (one("temperature", (1.0, 0.0)), one("temperature", TEMPERATURES[2:])),
        "top_k": (one("top_k", (-1, 0, vocab, vocab + 1)), one("top_k", (1, 2, vocab - 1))),
        "top_p": (one("top_p", (1.0,)), one("top_p", TOP_P[1:])),
        "min_p": (one("min_p", (0.0,)), one("min_p", MIN_P[1:])),
        "repetition_penalty": (one("repetition_penalty", (1.0,)), one("repetition_penalty", REPETITION[1:])),
        "frequency_penalty": (one("frequency_penalty", ADDITIVE[:2]), one("frequency_penalty", ADDITIVE[2:])),
        "presence_penalty": (one("presence_penalty", ADDITIVE[:2]), one("presence_penalty", ADDITIVE[2:])),
        "logit_bias": (one("logit_bias", ((),)),
                       st.lists(st.tuples(ids, st.sampled_from(BIASES)), min_size=1, max_size=3,
                                unique_by=lambda pair: pair[0]).map(lambda b: (("logit_bias", tuple(b)),))),
        "allowed_token_ids": (one("allowed_token_ids", ((),)),
                              st.one_of(st.lists(ids, min_size=1, max_size=4).map(tuple),
                                        st.just(tuple(range(vocab)))).map(lambda a: (("allowed_token_ids", a),))),
        "min_tokens": (st.one_of(stops.map(lambda s: (("min_tokens", 0), ("stop_token_ids", s))),
                                 st.integers(1, 4).map(lambda n: (("min_tokens", n),))),
                       st.tuples(st.integers(1, 4), stops).map(
                           lambda ns: (("min_tokens", ns[0]), ("stop_token_ids", ns[1])))),
        "bad_words": (one("bad_words", ((),)),
                      st.lists(st.lists(ids, min_size=1, max_size=3).map(tuple), min_size=1,
                               max_size=3).map(lambda w: (("bad_words", tuple(w)),))),
        "thinking_token_budget": (one("thinking_token_budget", (None, -1)),
                                  one("thinking_token_budget", (0, 1, 2, 3))),
    }


@st.composite
def request_params(draw, vocab: int) -> tuple:
    """((name, value), ...): plain sampling or greedy, some knobs set to neutral values (V + 1,
    -0.0, empty lists, ...), and often none or one knob off its neutral value, at a boundary."""
    knobs = _knobs(vocab)
    pairs = {"temperature": draw(st.sampled_from((1.0, 0.0)))}
    for name in draw(st.lists(st.sampled_from(sorted(knobs)), max_size=3, unique=True)):
        pairs.update(draw(knobs[name][0]))
    for name in draw(st.lists(st.sampled_from(sorted(knobs)), max_size=2, unique=True)):
        pairs.update(draw(knobs[name][1]))
    pairs["seed"] = draw(st.integers(0, 2 ** 31 - 1))
    return tuple(pairs.items())


@st.composite
def logits_programs(draw, max_vocab: int = 24) -> LogitsProgram:
    vocab = draw(st.sampled_from((1, 2, 5, 8, 9, 17, max_vocab)))
    slots = draw(st.integers(1, 4))
    tokens = st.lists(st.integers(0, vocab - 1), max_size=6).map(tuple)
    live: set[int] = set()
    ops = []
    for _ in range(draw(st.integers(1, 14))):
        free = sorted(set(range(slots)) - live)
        choices = (["add"] if free else []) + (["step", "step", "append", "remove"] if live else [])
        kind = draw(st.sampled_from(choices))
        if kind == "add":
            slot = draw(st.sampled_from(free))
            prompt = draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=6).map(tuple))
            ops.append(("add", slot, prompt, draw(tokens), draw(request_params(vocab))))
            live.add(slot)
        elif kind == "remove":
            slot = draw(st.sampled_from(sorted(live)))
            ops.append(("remove", slot))
            live.discard(slot)
        elif kind == "append":
            ops.append(("append", draw(st.sampled_from(sorted(live))), draw(tokens)))
        else:
            members = draw(st.lists(st.sampled_from(sorted(live)), min_size=1, unique=True))
            drafts = st.one_of(st.just(()), st.lists(st.integers(0, vocab - 1), min_size=1, max_size=3).map(tuple))
            batch = tuple((slot, draw(drafts)) for slot in members)
            edits = draw(st.lists(st.tuples(st.integers(0, 15), st.integers(0, vocab - 1),
                                            st.sampled_from(SPECIAL_LOGITS)), max_size=4).map(tuple))
            ops.append(("step", batch, draw(st.integers(0, 2 ** 32 - 1)),
                        draw(st.sampled_from((0.0, 0.3))), edits))
    if not any(op[0] == "step" for op in ops) and live:
        ops.append(("step", ((min(live), ()),), 0, 0.0, ()))
    marker = st.lists(st.integers(0, vocab - 1), min_size=1, max_size=2).map(tuple)
    reasoning = draw(st.one_of(st.none(), st.tuples(marker, marker, marker),
                               st.tuples(marker, marker, st.just(()))))  # the last: not enabled
    return LogitsProgram(vocab, slots, draw(st.sampled_from(DTYPES)), tuple(ops), reasoning)


# -- one request at one boundary -----------------------------------------------------------
# Every setting next to a "needs processing" boundary, alone: (knob, value), where "V-1", "V"
# and "V+1" are the vocabulary size's neighbours and "id" a token id drawn per case.
BOUNDARY_SETTINGS = (
    *[("temperature", t) for t in TEMPERATURES],
    *[("top_k", k) for k in (-1, 0, 1, "V-1", "V", "V+1")],
    *[("top_p", p) for p in TOP_P[:3]],
    *[("min_p", p) for p in MIN_P],
    *[("repetition_penalty", p) for p in REPETITION[:3]],
    *[(name, v) for name in ("frequency_penalty", "presence_penalty") for v in ADDITIVE[:4]],
    *[("logit_bias", b) for b in ((), (("id", 0.0),), (("id", -0.0),), (("id", 2.5),))],
    *[("allowed_token_ids", a) for a in ((), ("id",), "all")],
    *[("min_tokens", m) for m in ((0, ("id",)), (2, ()), (2, ("id",)))],
    *[("bad_words", w) for w in ((), (("id",),), (("id", "id"),))],
    *[("thinking_token_budget", b) for b in (None, -1, 0, 2)],
)


@dataclass(frozen=True)
class BoundaryCase:
    """One request with one boundary setting, sampled (temperature 1) or greedy, in a batch of
    its own rows (one plus its drafts); the setting's token id gets a special logit. Its prompt
    and output are that token; for a thinking budget, that token starts reasoning (`reasoning`:
    the markers)."""

    vocab_size: int
    knob: str
    value: object
    temperature: float
    token: int
    special: float
    drafts: tuple[int, ...]
    seed: int
    dtype: str
    reasoning: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None = None

    def program(self) -> LogitsProgram:
        v, t = self.vocab_size, self.token

        def resolve(x):
            if isinstance(x, tuple):
                return tuple(resolve(e) for e in x)
            return {"V-1": v - 1, "V": v, "V+1": v + 1, "id": t, "all": tuple(range(v))}.get(x, x) \
                if isinstance(x, str) else x

        value = resolve(self.value)
        if self.knob == "min_tokens":
            pairs = (("min_tokens", value[0]), ("stop_token_ids", value[1]))
        else:
            pairs = ((self.knob, value),)
        params = (("temperature", self.temperature), *pairs, ("seed", self.seed))
        if self.knob == "temperature":
            params = params[1:]
        edits = tuple((row, t, self.special) for row in range(1 + len(self.drafts)))
        return LogitsProgram(v, 1, self.dtype, (
            ("add", 0, (t,), (t,), params),
            ("step", ((0, self.drafts),), self.seed, 0.0, edits)), self.reasoning)


@st.composite
def boundary_cases(draw, knob: str, value) -> BoundaryCase:
    vocab = draw(st.sampled_from((2, 5, 8, 17)))
    token = draw(st.integers(0, vocab - 1))
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
        special=draw(st.sampled_from((-0.0, 0.0, -200.0, -60.0, 1.0))),
        drafts=draw(st.lists(st.integers(0, vocab - 1), max_size=2).map(tuple)),
        seed=draw(st.integers(0, 2 ** 31 - 1)),
        dtype=draw(st.sampled_from(DTYPES)),
        reasoning=reasoning,
    )
