"""Thinking-budget cases: a batch driven through vLLM's transitions, the holder called as the
sampler calls it, recorded as a replayable `ThinkProgram`.

The stateful machine in `properties/test_think_budget.py` draws one operation at a time (the
strategies below) and `ThinkRun.apply` executes it; the operations it ran are the program, which
is plain data (a fixture) and replays through the same `ThinkRun`.

Operations (row arguments are taken modulo the number of live rows):
  ("add", prompt, output, budget, tracked)   a request in the lowest free row; `tracked`: its output
                                             is a TrackedTokenList (else a plain list)
  ("remove", row)                            the row is freed; the next sync condenses the batch
  ("swap", i, j)                             after condensing (vLLM reorders after condense)
  ("sample", tokens)                         every row appends tokens[r % len] (one token a step)
  ("drafts", drafts)                         row r's speculative drafts := drafts[r % len][:k]
  ("accept", accepted, tokens)               every row appends accepted[r] of its drafts and one
                                             sampled token (1..k+1 tokens); drafts are consumed
  ("async", extra)                           every row appends 1 + extra[r % len] -1 placeholders
  ("repair", counts, tokens)                 the trailing -1 run of every row becomes
                                             counts[r] % (run + 1) real ids; the rest is deleted
  ("fill", row, nth, token)                  the nth -1 of the row (anywhere) becomes `token`
  ("obey", accepted, tokens)                  like "accept" (no spec: "sample"), except that a row
                                             whose logits the reference forced at the last step
                                             samples the forced id (a draft position forced in
                                             the target pass rejects the drafts from there)
  ("trim", row, keep)                        del out[keep % (len + 1):] (KV-load discard)
  ("regrow", row, keep, tokens)              trim, then `tokens` appended: positions already
                                             searched get new ids before the next step
  ("step", seed, spec_as_none)               sync the batch, then the sampler: update_state and
                                             apply_to_logits (spec mode: bonus pass, then target
                                             pass); `spec_as_none` passes spec_token_ids=None
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import torch
from hypothesis import strategies as st

from vllm_hotpaths.testing.cases import note
from vllm_hotpaths.registry import version_key
from vllm_hotpaths.think_budget import BatchUpdate, Move, Params, ThinkConfig
from vllm_hotpaths.tracked_list import TrackedTokenList

LOGITS_DTYPES = ("float32", "bfloat16")  # vLLM's sampler works on float32; float16 cannot hold 1e9


@dataclass(frozen=True)
class ThinkProgram:
    start_ids: tuple[int, ...]
    end_ids: tuple[int, ...]
    vocab_size: int
    max_num_seqs: int
    num_spec_tokens: int
    logits_dtype: str
    ops: tuple[tuple, ...]

    @property
    def config(self) -> ThinkConfig:
        return ThinkConfig(self.start_ids, self.end_ids, self.vocab_size, self.max_num_seqs,
                           self.num_spec_tokens)


# -- the batch -------------------------------------------------------------------------------
@dataclass
class Request:
    prompt: list[int] | None
    output: list[int]
    drafts: list[int] = field(default_factory=list)
    pending: list[int] = field(default_factory=list)  # async: the ids the next repair writes


class ThinkBatch:
    """The rows vLLM's InputBatch hands the holder, and the BatchUpdate it builds: removals free
    rows, additions reuse the lowest freed row, a sync condenses (last row into the lowest hole,
    UNIDIRECTIONAL), swaps come after condensing."""

    def __init__(self, max_num_seqs: int) -> None:
        self.max_num_seqs = max_num_seqs
        self.slots: list[Request | None] = []
        self.removed: list[int] = []
        self.added: list[tuple] = []
        self.moved: list[tuple] = []

    @property
    def live(self) -> list[Request]:
        return [s for s in self.slots if s is not None]

    def add(self, prompt, output, budget, tracked: bool) -> None:
        if len(self.live) >= self.max_num_seqs:
            return
        holes = [i for i, s in enumerate(self.slots) if s is None]
        index = holes[0] if holes else len(self.slots)
        if index in self.removed:
            self.removed.remove(index)  # vLLM's pop_removed: a reused row is not reported removed
        out = TrackedTokenList(output) if tracked else list(output)
        request = Request(None if prompt is None else list(prompt), out)
        if index == len(self.slots):
            self.slots.append(request)
        else:
            self.slots[index] = request
        self.added.append((index, Params(budget), request.prompt, out))

    def remove(self, row: int) -> None:
        self.slots[row] = None
        self.removed.append(row)

    def condense(self) -> None:
        while None in self.slots:
            hole = self.slots.index(None)
            last = max(i for i, s in enumerate(self.slots) if s is not None) if self.live else -1
            if last < hole:
                del self.slots[hole:]
                break
            self.slots[hole], self.slots[last] = self.slots[last], None
            self.moved.append((last, hole, Move.UNIDIRECTIONAL))

    def swap(self, i: int, j: int) -> None:
        self.slots[i], self.slots[j] = self.slots[j], self.slots[i]
        self.moved.append((i, j, Move.SWAP))

    def take_update(self) -> BatchUpdate | None:
        self.condense()
        if not (self.removed or self.added or self.moved):
            return None
        update = BatchUpdate(len(self.slots), sorted(self.removed, reverse=True), self.added, self.moved)
        self.removed, self.added, self.moved = [], [], []
        return update


# -- calls the holder receives ---------------------------------------------------------------------
@dataclass
class HolderCall:
    """One call, made identically on every holder; `logits` builds a fresh input per holder."""

    label: str
    method: str
    args: tuple = ()
    logits: Callable[[], torch.Tensor] | None = None

    def invoke(self, holder):
        if self.logits is None:
            return getattr(holder, self.method)(*self.args)
        return getattr(holder, self.method)(self.logits(), *self.args)


def _seeded_logits(seed: int, rows: int, vocab: int, dtype: str, device) -> Callable[[], torch.Tensor]:
    def build() -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        return torch.randn(rows, vocab, generator=g).to(getattr(torch, dtype)).to(device)
    return build


class ThinkRun:
    """Executes a program's operations; `apply` yields the holder calls an operation makes.

    `version` picks upstream's calling convention: 0.22's bonus pass hands the holder each output
    combined with its drafts (a new list when there are drafts), 0.33 the committed outputs.
    """

    def __init__(self, program: ThinkProgram, version: str, device) -> None:
        self.program = program
        self.combined_rows = version_key(version) < version_key("0.33.0")
        self.device = device
        self.batch = ThinkBatch(program.max_num_seqs)
        self.k = program.num_spec_tokens
        self.markers = set(program.start_ids) | set(program.end_ids)
        self.forced: dict[str, dict[int, int]] = {}  # pass -> logits row -> forced id

    def observe(self, call: HolderCall, result) -> None:
        """Remember which ids the reference forced, for the `obey` operation."""
        if call.method == "apply_to_logits" and isinstance(result, torch.Tensor) and result.numel():
            rows = result.float().abs().amax(dim=1) >= 1e8  # a forced 1e9 (inf in fp16)
            ids = result.float().argmax(dim=1)
            self.forced[call.label] = {int(r): int(ids[r]) for r in rows.nonzero().flatten()}

    def _row(self, row: int) -> Request | None:
        live = self.batch.live
        return live[row % len(live)] if live else None

    def apply(self, op: Sequence) -> Iterator[HolderCall]:
        kind, args = op[0], op[1:]
        batch = self.batch
        if kind == "add":
            if batch.moved:  # vLLM removes and adds before it condenses and reorders
                yield from self._sync()
            batch.add(*args)
        elif kind == "remove":
            if batch.moved:
                yield from self._sync()
            if batch.live:
                slots = [i for i, s in enumerate(batch.slots) if s is not None]
                batch.remove(slots[args[0] % len(slots)])
        elif kind == "swap":
            batch.condense()
            if batch.slots:
                n = len(batch.slots)
                batch.swap(args[0] % n, args[1] % n)
        elif kind == "sample":
            for r, req in enumerate(batch.live):
                req.output.append(args[0][r % len(args[0])])
        elif kind == "drafts":
            for r, req in enumerate(batch.live):
                req.drafts = list(args[0][r % len(args[0])])[: self.k]
        elif kind == "accept":
            accepted, tokens = args
            for r, req in enumerate(batch.live):
                a = accepted[r % len(accepted)] % (len(req.drafts) + 1)
                req.output.extend(req.drafts[:a] + [tokens[r % len(tokens)]])
                req.drafts = []
        elif kind == "async":
            for r, req in enumerate(batch.live):
                req.output.extend([-1] * (1 + args[0][r % len(args[0])]))
        elif kind == "repair":
            counts, tokens = args
            for r, req in enumerate(batch.live):
                self._repair(req.output, counts[r % len(counts)], tokens, r)
        elif kind == "fill":
            req = self._row(args[0])
            holes = [i for i, t in enumerate(req.output) if t == -1] if req else []
            if holes:
                req.output[holes[args[1] % len(holes)]] = args[2]
                note("interior placeholder filled" if holes[args[1] % len(holes)] < len(req.output) - 1
                     else "trailing placeholder filled")
        elif kind == "trim":
            req = self._row(args[0])
            if req is not None:
                keep = args[1] % (len(req.output) + 1)
                if keep < len(req.output):
                    note("output shrinks")
                del req.output[keep:]
        elif kind == "obey":
            self._obey(*args)
        elif kind == "regrow":
            req = self._row(args[0])
            if req is not None:
                keep = args[1] % (len(req.output) + 1)
                del req.output[keep:]
                req.output.extend(args[2])
                note("output rewritten below its end")
        elif kind == "step":
            yield from self._sync()
            yield from self._sampler(*args)
        else:
            raise ValueError(f"unknown think_budget operation {kind!r}")

    def _obey(self, accepted: Sequence[int], tokens: Sequence[int]) -> None:
        """What a model does with forced logits: the forced id is sampled (and the drafts after a
        forced draft position are rejected); rows not forced accept drafts and sample as usual."""
        no_spec, bonus = self.forced.get("apply (no spec)", {}), self.forced.get("apply (bonus pass)", {})
        target = self.forced.get("apply (target pass)", {})
        first_row = 0
        for r, req in enumerate(self.batch.live):
            drafts, fallback = req.drafts, tokens[r % len(tokens)]
            at = [j for j in range(len(drafts)) if first_row + j in target]
            if at:
                new = drafts[: at[0]] + [target[first_row + at[0]]]
                note("forced draft position obeyed")
            elif r in bonus or r in no_spec:
                new = drafts + [bonus.get(r, no_spec.get(r))]
            else:
                new = drafts[: accepted[r % len(accepted)] % (len(drafts) + 1)] + [fallback]
            first_row += len(drafts)
            req.output.extend(new)
            req.drafts = []
        self.forced = {}

    def _repair(self, out: list[int], count: int, tokens: Sequence[int], r: int) -> None:
        first = len(out)
        while first > 0 and out[first - 1] == -1:
            first -= 1
        run = len(out) - first
        if run:
            real = count % (run + 1)
            ids = [tokens[(r + i) % len(tokens)] for i in range(real)]
            if real < run:
                note("repair shrinks the output")
            if set(ids) & self.markers:
                note("placeholder repaired with a marker id")
            out[first:] = ids

    def _sync(self) -> Iterator[HolderCall]:
        update = self.batch.take_update()
        if update is not None:
            yield HolderCall("sync_batch", "sync_batch", (update,))

    def _sampler(self, seed: int, spec_as_none: bool) -> Iterator[HolderCall]:
        requests = self.batch.slots
        spec = [list(r.drafts) for r in requests]
        outputs = [r.output for r in requests]
        vocab, dtype = self.program.vocab_size, self.program.logits_dtype
        if not self.k:
            spec_arg = None if spec_as_none else spec
            yield HolderCall("update_state", "update_state", (outputs, spec_arg))
            yield HolderCall("apply (no spec)", "apply_to_logits", (False, spec_arg),
                             _seeded_logits(seed, len(requests), vocab, dtype, self.device))
            return
        if self.combined_rows:
            outputs = [[*o, *s] if s else o for o, s in zip(outputs, spec)]
        yield HolderCall("update_state", "update_state", (outputs, spec))
        yield HolderCall("apply (bonus pass)", "apply_to_logits", (True, spec),
                         _seeded_logits(seed, len(requests), vocab, dtype, self.device))
        yield HolderCall("apply (target pass)", "apply_to_logits", (False, spec),
                         _seeded_logits(seed + 1, sum(map(len, spec)), vocab, dtype, self.device))


# -- generation ------------------------------------------------------------------------------------
# Marker shapes with known edge cases, over ids 0..9: single/multi-token, self-overlapping end, start a
# prefix of end, start == end, empty start, empty end, end a prefix of start.
MARKER_SHAPES = (
    ((7,), (8,)), ((7,), (8, 9)), ((7, 6), (8, 9)), ((7,), (9, 9)), ((5,), (5, 6)), ((5,), (5,)),
    ((), (8, 9)), ((7,), ()), ((5, 6), (5,)), ((9, 9), (9, 9, 9)), ((7,), (8, 9, 8)),
)
BUDGET_EDGES = (0, 1, 2, 3, 5, 8, 2**31 - 1, 10**18)


@st.composite
def think_configs(draw, spec: bool) -> dict:
    start, end = draw(st.one_of(
        st.sampled_from(MARKER_SHAPES),
        st.tuples(st.lists(st.integers(0, 9), max_size=3).map(tuple),
                  st.lists(st.integers(0, 9), max_size=3).map(tuple)),
    ))
    k = draw(st.integers(1, 3)) if spec else 0
    note(f"markers |start|={len(start)} |end|={len(end)}, k={k}")
    return dict(start_ids=start, end_ids=end, vocab_size=draw(st.sampled_from((10, 12, 33))),
                max_num_seqs=draw(st.integers(1, 5)), num_spec_tokens=k,
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


def budgets(version: str) -> st.SearchStrategy[int | None]:
    valid = st.one_of(st.none(), st.just(-1), st.sampled_from(BUDGET_EDGES), st.integers(0, 6))
    valid = st.one_of(st.none(), valid)  # untracked rows often, for swaps with tracked ones
    if version_key(version) < version_key("0.33.0"):  # 0.22 runs the machine on any integer
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
        self.prompts = prompts(config, self.tokens)
        self.budgets = budgets(version)
        full = st.lists(self.tokens, min_size=k, max_size=k)  # a proposer usually fills all k
        runs = st.one_of(full, full, token_runs(config, k, self.tokens)).map(tuple)
        self.drafts = st.lists(runs, min_size=1, max_size=4).map(tuple)
        self.extra_placeholders = small_counts(k)


# -- bad configuration -----------------------------------------------------------------------------
@dataclass(frozen=True)
class BadConfig:
    """A holder configuration or a request budget that the targeted version must refuse."""

    start_ids: tuple
    end_ids: tuple
    vocab_size: int
    budget: object
    what: str  # "marker" or "budget"

    @property
    def config(self) -> ThinkConfig:
        return ThinkConfig(self.start_ids, self.end_ids, self.vocab_size, max_num_seqs=2)


def takes_budgets(version: str, program: "ThinkProgram") -> bool:
    """Whether the version's SamplingParams takes every budget the program adds (0.22 takes any
    integer; 0.33 only None, -1 and >= 0): a program written on one version may not be replayable
    against the other's vLLM, whose refusal `test_vllm_rejects_what_the_reference_rejects` checks."""
    if version_key(version) < version_key("0.33.0"):
        return True
    return all(op[3] is None or op[3] >= -1 for op in program.ops if op[0] == "add")


def invalid_budgets(version: str) -> st.SearchStrategy:
    """What the version refuses: 0.22 takes every integer; 0.33 takes -1 (unlimited) and >= 0."""
    wrong_type = st.one_of(st.booleans(), st.sampled_from((0.0, 2.5, -1.0, 1e9)))
    if version_key(version) < version_key("0.33.0"):
        return wrong_type
    return st.one_of(wrong_type, st.integers(-2**40, -2), st.just(-2))


@st.composite
def bad_configs(draw, version: str, vllm_detectable: bool = False) -> BadConfig:
    """`vllm_detectable`: only what the installed vLLM itself fails on (an end id >= the vocab
    size, hit when it is forced; budgets that 0.33's SamplingParams refuses)."""
    vocab = draw(st.sampled_from((10, 12, 33)))
    start, end = draw(st.sampled_from([s for s in MARKER_SHAPES if s[0] and s[1]]))
    kinds = ["marker"]
    if version_key(version) >= version_key("0.33.0") or not vllm_detectable:
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
