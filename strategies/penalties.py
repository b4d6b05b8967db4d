"""Penalties cases: programs of upstream batch transitions, with sampler calls in between.

A `PenaltiesProgram` is plain data (its repr is valid Python, its JSON is a fixture): a vocabulary
size, the batch's capacity, and a list of operations. `PenaltiesRun` replays it on a `TokenBatch`
and yields the sampler's inputs at every `step` operation, so properties compare implementations
on the states upstream really reaches, including the ones where the lists and `token_ids_cpu`
disagree (async placeholders, repairs that shrink a list, optimistic extension and trim).

A `RepairCase` is one call of vLLM's async placeholder repair on a stand-in batch (lists, previous
step's rows, sampled ids), for the bulk repair's properties.

Operations (row arguments are taken modulo the number of requests):
  ("add", prompt, output, tracked, presence, frequency, repetition)
  ("remove", row)                       remove, then condense (last row moves into the hole)
  ("swap", i, j)
  ("sample", tokens)                    synchronous: row r appends tokens[r % len]
  ("async", sampled)                    async bookkeeping: -1 appended; sampled[r % len] pending
  ("repair", skipped)                   0.22 placeholder repair; rows in `skipped` keep their -1
  ("decode", tokens)                    one async decode round as the sampler sees it: row r
                                        appends a -1, repaired to tokens[r % len] (the steady step)
  ("spec", drafts)                      row r gets drafts[r % len] as spec tokens
  ("extend", counts)                    optimistic -1 extension by counts[r % len]
  ("trim", row, keep)                   del out[keep:] (KV-load discard / over-extension)
  ("spec_round", accepted, sampled)     one zero-bubble async spec-decode round per row: -1
                                        bookkeeping, optimistic extension by the row's draft
                                        count (2 when it has none), then repair with
                                        1 + accepted[r % len] ids (the list shrinks when fewer
                                        drafts were accepted)
  ("stale", row, sampled, token)        async round whose repair skips `row` (it was not in the
                                        previous batch), then a synchronous token for every row:
                                        `row` keeps an interior -1
  ("step", bonus, seed, contiguous, specials)
                                        call the sampler: rows are the live lists, or combined
                                        with drafts when `bonus`; logits from `seed`, then
                                        `specials` = ((row, col, value), ...) written over them
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Iterator

import numpy as np
import torch
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from vllm_hotpaths.batch import TokenBatch
from vllm_hotpaths.tracked_list import TrackedTokenList

SPECIAL_LOGITS = (0.0, -0.0, math.inf, -math.inf, math.nan, 1e-45, -1e-45, 1e-40, -1e-40,
                  3.4e38, -3.4e38, 1.0, -1.0)
REPETITION_EDGES = (1.0, 1.0000001, 0.99999994, 1e-30, 1e30, 2.0, 0.5)
PRESENCE_EDGES = (0.0, -0.0, 2.0, -2.0, 1.5, 1e-7)
# Around powers of two, tiny vocabularies, and one real vocabulary size.
VOCAB_EDGES = (1, 2, 3, 7, 8, 9, 31, 32, 33, 64, 151936)


@dataclass(frozen=True)
class PenaltiesProgram:
    vocab_size: int
    max_num_reqs: int
    max_model_len: int
    ops: tuple[tuple, ...]


def note(label: str) -> None:
    """`hypothesis.event`, tolerated outside a test (benchmarks replay programs too)."""
    try:
        from hypothesis import event

        event(label)
    except InvalidArgument:
        pass


# -- generation ---------------------------------------------------------------------------
def _f32(x: float) -> float:
    return float(np.float32(x))


def token_ids(vocab_size: int) -> st.SearchStrategy[int]:
    edges = st.sampled_from(sorted({0, vocab_size - 1, vocab_size}))
    return st.one_of(st.integers(0, vocab_size - 1), edges)


def logit_values() -> st.SearchStrategy[float]:
    finite = st.floats(width=32, allow_nan=False, allow_infinity=False)
    return st.one_of(st.sampled_from(SPECIAL_LOGITS), finite)


def penalties_programs(max_ops: int = 14, max_vocab: int = 64) -> st.SearchStrategy[PenaltiesProgram]:
    """Any transitions in any order, or the same made into decode runs (see `decode_runs`)."""
    programs = transition_programs(max_ops, max_vocab)
    return st.one_of(programs, programs.flatmap(decode_runs))


@st.composite
def decode_runs(draw, program: PenaltiesProgram) -> PenaltiesProgram:
    """`program` as a serving engine mostly runs it: every row tracked, the sampler reading the
    live lists, and after each transition a few async decode rounds, each followed by a sampler
    step. Such steps are the fast path's steady step (every row one token longer, nothing
    changed in place); the transitions in between, and rounds that leave their placeholders for
    a later repair, are what must take it off that path."""
    ops = []
    for op in program.ops:
        if op[0] == "add":
            op = op[:3] + (True,) + op[4:]
        elif op[0] == "step":
            op = ("step", False) + op[2:]
        ops.append(op)
        for _ in range(draw(st.integers(0, 3))):
            tokens = tuple(draw(st.lists(token_ids(program.vocab_size), min_size=1, max_size=4)))
            # now and then a round whose placeholders stay: the next repair rewrites them in place
            round_ = draw(st.sampled_from((("decode", tokens),) * 3 + (("async", (tokens,)),)))
            ops += [round_, ("step", False, 0, True, ())]
    return PenaltiesProgram(program.vocab_size, program.max_num_reqs, 64, tuple(ops))


@st.composite
def transition_programs(draw, max_ops: int = 14, max_vocab: int = 64) -> PenaltiesProgram:
    vocab = draw(st.one_of(st.sampled_from([v for v in VOCAB_EDGES if v <= max_vocab]),
                           st.integers(1, max_vocab)))
    max_num_reqs = draw(st.integers(1, 6))
    max_model_len = draw(st.sampled_from([4, 16, 64]))
    tok = token_ids(vocab)
    short = lambda elems, n=4, least=0: st.lists(elems, min_size=least, max_size=n).map(tuple)  # noqa: E731
    rows = st.integers(0, 7)
    sampled = st.lists(tok, min_size=1, max_size=4).flatmap(
        lambda ids: st.integers(0, len(ids) - 1).map(
            lambda k: tuple(ids[:k + 1]) + (-1,) * (len(ids) - k - 1)))
    add = st.tuples(
        st.just("add"), short(tok, 6), short(tok, 5), st.booleans(),
        st.one_of(st.sampled_from(PRESENCE_EDGES), st.floats(-2, 2, width=32)).map(_f32),
        st.one_of(st.sampled_from(PRESENCE_EDGES), st.floats(-2, 2, width=32)).map(_f32),
        st.one_of(st.sampled_from(REPETITION_EDGES), st.floats(0.0009765625, 10, width=32)).map(_f32),
    )
    special = st.tuples(rows, st.integers(0, max(vocab - 1, 0)), logit_values().map(
        lambda x: math.nan if math.isnan(x) else x))
    step = st.tuples(st.just("step"), st.booleans(), st.integers(0, 2**16), st.booleans(),
                     short(special, 6))
    moves = st.one_of(st.tuples(st.just("remove"), rows), st.tuples(st.just("swap"), rows, rows))
    op = st.one_of(
        add,
        moves,
        moves,
        st.tuples(st.just("sample"), short(tok, 6, 1)),
        st.tuples(st.just("async"), short(sampled, 3, 1)),
        st.tuples(st.just("decode"), short(tok, 6, 1)),
        st.tuples(st.just("repair"), short(rows, 2)),
        st.tuples(st.just("spec"), short(short(tok, 3), 3, 1)),
        st.tuples(st.just("extend"), short(st.integers(0, 3), 3, 1)),
        st.tuples(st.just("trim"), rows, st.integers(0, 8)),
        st.tuples(st.just("spec_round"), short(st.integers(0, 3), 3, 1),
                  short(tok, 4, 1)),
        st.tuples(st.just("stale"), rows, sampled, tok),
    )
    prelude = draw(st.lists(add, min_size=1, max_size=4))
    # Each operation is followed by a sampler step or not: steps land between all transitions.
    ops = []
    for transition, then_step in draw(st.lists(st.tuples(op, st.one_of(st.none(), step)),
                                               min_size=1, max_size=max_ops)):
        ops += [transition] if then_step is None else [transition, then_step]
    final = draw(step)
    return PenaltiesProgram(vocab, max_num_reqs, max_model_len, tuple(prelude + ops + [final]))


@dataclass(frozen=True)
class PoisonedProgram:
    """A program whose last step's rows then get one invalid id: `bad` is "below" (-2), "above"
    (V + 1) or "float" (1.5). It replaces the id at row `row`, position `pos` (both taken modulo
    the non-empty rows and their lengths), or, with `append`, every row gets one more id (0) and
    row `row`'s is the bad one (a steady decode step's shape)."""

    vocab_size: int
    max_num_reqs: int
    max_model_len: int
    ops: tuple[tuple, ...]
    row: int = 0
    pos: int = 0
    bad: str = "below"
    append: bool = False

    @classmethod
    def of(cls, program: PenaltiesProgram, row: int = 0, pos: int = 0, bad: str = "below",
           append: bool = False):
        return cls(program.vocab_size, program.max_num_reqs, program.max_model_len, program.ops,
                   row, pos, bad, append)

    @property
    def program(self) -> PenaltiesProgram:
        return PenaltiesProgram(self.vocab_size, self.max_num_reqs, self.max_model_len, self.ops)

    def bad_value(self):
        return {"below": -2, "above": self.vocab_size + 1, "float": 1.5}[self.bad]

    def poison(self, rows: list[list[int]]) -> tuple[list[int], int] | None:
        """Put the bad id into `rows` (the last step's lists); returns its list and position,
        None when there is no place for it (no row, or only empty rows and no `append`)."""
        if self.append and rows:
            for row in rows:
                row.append(0)
            target = rows[self.row % len(rows)]
            pos = len(target) - 1
        else:
            filled = [row for row in rows if len(row)]
            if not filled:
                return None
            target = filled[self.row % len(filled)]
            pos = self.pos % len(target)
        target[pos] = self.bad_value()
        return target, pos


def poisoned_programs() -> st.SearchStrategy[PoisonedProgram]:
    return st.builds(PoisonedProgram.of, penalties_programs(), st.integers(0, 7), st.integers(0, 40),
                     st.sampled_from(["below", "above", "float"]), st.booleans())


@dataclass(frozen=True)
class InvalidIdCase:
    """Output rows with one id outside [-1, vocab_size] inserted at (row, pos)."""

    vocab_size: int
    rows: tuple[tuple[int, ...], ...]
    row: int
    pos: int
    bad: int

    def output_rows(self) -> list[list[int]]:
        rows = [list(r) for r in self.rows]
        target = rows[self.row % len(rows)]
        target.insert(self.pos % (len(target) + 1), self.bad)
        return rows


@st.composite
def invalid_id_cases(draw) -> InvalidIdCase:
    vocab = draw(st.integers(1, 16))
    rows = draw(st.lists(st.lists(st.integers(-1, vocab), max_size=5).map(tuple), min_size=1,
                         max_size=4).map(tuple))
    bad = draw(st.one_of(st.integers(-(2**40), -2), st.integers(vocab + 1, 2**40),
                         st.sampled_from([-2, vocab + 1])))
    return InvalidIdCase(vocab, rows, draw(st.integers(0, 3)), draw(st.integers(0, 5)), bad)


@dataclass(frozen=True)
class RepairCase:
    """One call of vLLM's async placeholder repair (`update_async_output_token_ids`) on a batch:
    output lists (`TrackedTokenList`s where `tracked`, watched by two keys while they held their
    first `synced[r]` ids (all of them when None or not given), the second marked at index
    `marks[r] % synced` when not None, the rest appended after), the previous step's row of each
    request (`previous`, None: not in the previous step; an index past `sampled` is an error
    upstream too) and the ids sampled then (`sampled`: one row per previous request, -1 after its
    valid ids)."""

    rows: tuple[tuple[int, ...], ...]
    tracked: tuple[bool, ...]
    marks: tuple[int | None, ...]
    previous: tuple[int | None, ...]
    sampled: tuple[tuple[int, ...], ...]
    synced: tuple[int | None, ...] = ()

    def batch(self):
        """A stand-in holding what the repair reads, and the list its event's waits go to."""
        outputs = []
        for r, (row, tracked, mark) in enumerate(zip(self.rows, self.tracked, self.marks)):
            if not tracked:
                outputs.append(list(row))
                continue
            synced = self.synced[r] if r < len(self.synced) and self.synced[r] is not None else len(row)
            output = TrackedTokenList(row[:synced])
            output.watch(1)
            output.watch(2)
            if mark is not None and output:
                output[mark % len(output)] = output[mark % len(output)]  # lowers both marks
                output.watch(1)
            output.extend(row[synced:])  # after the watchers synced, as vLLM's placeholders are
            outputs.append(output)
        waits: list[int] = []
        batch = SimpleNamespace(
            sampling_metadata=SimpleNamespace(output_token_ids=outputs),
            sampled_token_ids_cpu=torch.tensor(self.sampled, dtype=torch.int64).reshape(len(self.sampled), -1),
            async_copy_ready_event=SimpleNamespace(synchronize=lambda: waits.append(1)),
            prev_req_id_to_index={f"r{r}": p for r, p in enumerate(self.previous) if p is not None},
            req_ids=[f"r{r}" for r in range(len(self.rows))])
        return batch, waits

    def outcome(self, repair) -> tuple:
        """What `repair(batch)` leaves: each list's type, ids and marks, how often it waited for
        the previous step's copy, and the error it raised (type and message) if any."""
        batch, waits = self.batch()
        try:
            repair(batch)
            error = None
        except Exception as err:  # compared, not hidden: both sides must raise the same
            error = (type(err).__name__, str(err))
        lists = [(type(o).__name__, list(o),
                  (o.dirty_from(1), o.dirty_from(2), o.seen) if type(o) is TrackedTokenList else None)
                 for o in batch.sampling_metadata.output_token_ids]
        return lists, len(waits), error


@st.composite
def repair_cases(draw) -> RepairCase:
    """Half the cases are a steady decode step (one placeholder per list, one valid id sampled per
    request, every request in the previous step), or one with a single request off it (its
    sample discarded, two placeholders, nothing but a placeholder, new to the batch); the rest
    mix runs of placeholders, interior -1, wider sampled rows, new requests and bad indices.
    Half are in vLLM's order (tracked lists whose watchers synced before the placeholder came)."""
    n = draw(st.integers(1, 5))
    ids = st.integers(0, 9)
    steady = draw(st.booleans())
    if steady:
        rows = [draw(st.lists(ids, min_size=1, max_size=5)) + [-1] for _ in range(n)]
        previous = list(draw(st.permutations(range(n + draw(st.integers(0, 2)))))[:n])
        sampled = [[draw(ids)] for _ in range(max(previous) + 1)]
        # One request off the usual step, or none: each must take the step off the bulk path.
        odd = draw(st.none() | st.sampled_from(["discarded", "longer run", "only a placeholder", "new"]))
        r = 0
        if odd is not None:
            r = draw(st.integers(0, n - 1))
            note(f"steady but one request: {odd}")
        if odd == "discarded":
            sampled[previous[r]] = [-1]
        elif odd == "longer run":
            rows[r].append(-1)
        elif odd == "only a placeholder":
            rows[r] = [-1]
        elif odd == "new":
            previous[r] = None
    else:
        rows = [draw(st.lists(st.one_of(ids, st.just(-1)), max_size=5)) + [-1] * draw(st.integers(0, 3))
                for _ in range(n)]
        width = draw(st.integers(1, 3))
        count = n + draw(st.integers(0, 2))
        previous = [draw(st.one_of(st.none(), st.integers(0, count - 1), st.integers(-count - 1, count)))
                    for _ in range(n)]
        sampled = [draw(st.lists(ids, min_size=0, max_size=width)) for _ in range(count)]
        sampled = [row + [-1] * (width - len(row)) for row in sampled]
    note("steady repair step" if steady else "mixed repair step")
    marks = [draw(st.one_of(st.none(), st.integers(0, 8))) for _ in range(n)]
    if draw(st.booleans()):  # vLLM's order: every list tracked, its watchers synced before its last -1
        tracked = [True] * n
        synced = [max(len(row) - 1, 0) for row in rows]
        note("tracked lists, watchers synced before the placeholder")
    else:
        tracked = [draw(st.booleans()) for _ in range(n)]
        synced = [draw(st.one_of(st.none(), st.integers(0, len(row)))) for row in rows]
    if steady and odd is None and all(tracked) and all(
            s is not None and s < len(row) for s, row in zip(synced, rows)):
        note("steady, every list tracked, no placeholder synced")
    return RepairCase(tuple(map(tuple, rows)), tuple(tracked), tuple(marks), tuple(previous),
                      tuple(map(tuple, sampled)), tuple(synced))

# -- replay -------------------------------------------------------------------------------
@dataclass
class PenaltiesStep:
    """The sampler's inputs at one step (host tensors; `on(device)` gives fresh copies)."""

    rows: list[list[int]]
    prompt_tokens: torch.Tensor
    presence: torch.Tensor
    frequency: torch.Tensor
    repetition: torch.Tensor
    logits: torch.Tensor
    contiguous: bool

    def on(self, device: torch.device | str):
        logits = self.logits.to(device, copy=True)  # penalized in place: never the step's own tensor
        if not self.contiguous:  # same values, transposed strides (CUDA takes the torch fallback)
            logits = logits.t().contiguous().t()
        return (logits, self.prompt_tokens.to(device), self.presence.to(device),
                self.frequency.to(device), self.repetition.to(device), self.rows)


class PenaltiesRun:
    def __init__(self, program: PenaltiesProgram) -> None:
        self.program = program
        self.batch = TokenBatch(program.max_num_reqs, program.max_model_len, program.vocab_size)

    def steps(self) -> Iterator[PenaltiesStep]:
        batch = self.batch
        for op in self.program.ops:
            name, args = op[0], op[1:]
            n = batch.num_reqs
            if name == "add":
                prompt, output, tracked, presence, frequency, repetition = args
                if n < batch.max_num_reqs and len(prompt) + len(output) <= batch.max_model_len:
                    batch.add_request(prompt, output, (presence, frequency, repetition), tracked)
                    note("plain-list row" if not tracked else "tracked row")
            elif n == 0:
                if name == "step":
                    note("empty batch")
                    yield self._step(*args)
            elif name == "remove":
                if args[0] % n != n - 1:
                    note("condense moved a row")
                batch.remove_request(args[0] % n)
            elif name == "swap":
                if args[0] % n != args[1] % n:
                    note("swap moved rows")
                batch.swap(args[0] % n, args[1] % n)
            elif name == "sample":
                for r in range(n):
                    batch.sample(r, args[0][r % len(args[0])])
            elif name == "async":
                for r in range(n):
                    batch.sample_async(r, args[0][r % len(args[0])])
            elif name == "repair":
                skipped = {s % n for s in args[0]}
                for r in range(n):
                    if r in skipped:
                        batch.drop_pending(r)
                    else:
                        self._repair(r)
            elif name == "decode":
                for r in range(n):
                    batch.sample_async(r, (args[0][r % len(args[0])],))
                    self._repair(r)
            elif name == "spec":
                for r in range(n):
                    batch.set_spec(r, args[0][r % len(args[0])])
            elif name == "extend":
                for r in range(n):
                    batch.extend_optimistic(r, args[0][r % len(args[0])])
            elif name == "trim":
                batch.trim(args[0] % n, args[1])
                note("trim")
            elif name == "spec_round":
                accepted, sampled = args
                for r in range(n):
                    drafts = len(batch.spec_token_ids[r]) or 2
                    ok = min(accepted[r % len(accepted)], drafts)
                    ids = [sampled[(r + j) % len(sampled)] for j in range(ok + 1)]
                    batch.sample_async(r, ids + [-1] * (drafts - ok))
                    batch.extend_optimistic(r, drafts)
                    self._repair(r)
            elif name == "stale":
                row, sampled, token = args
                for r in range(n):
                    batch.sample_async(r, sampled)
                    if r == row % n:
                        batch.drop_pending(r)
                    else:
                        self._repair(r)
                    batch.sample(r, token)
            elif name == "step":
                yield self._step(*args)
            else:
                raise ValueError(f"unknown penalties operation {op!r}")

    def _repair(self, r: int) -> None:
        before = len(self.batch.req_output_token_ids[r])
        self.batch.repair(r)
        if len(self.batch.req_output_token_ids[r]) < before:
            note("repair shrank a list")

    def _step(self, bonus: bool, seed: int, contiguous: bool, specials) -> PenaltiesStep:
        batch = self.batch
        rows = batch.combined_rows() if bonus else batch.req_output_token_ids
        b, v = batch.num_reqs, batch.vocab_size
        gen = torch.Generator().manual_seed(seed)
        logits = torch.randn((b, v), generator=gen) * 4
        logits[logits.abs() < 0.5] = 0.0  # exact zeros take the multiply branch
        for row, col, value in specials:
            if b:
                logits[row % b, col % v] = value
        self._note_rows(rows, v)
        presence, frequency, repetition = batch.penalty_tensors()
        return PenaltiesStep(rows, batch.prompt_tokens(), presence, frequency, repetition,
                             logits, contiguous)

    @staticmethod
    def _note_rows(rows, vocab_size: int) -> None:
        if rows and all(len(r) == 0 for r in rows):
            note("all rows empty")
        for r in rows:
            if -1 in r:
                first_real_after = any(t != -1 for t in r[r.index(-1):])
                note("interior -1" if first_real_after else "trailing -1 run")
            if vocab_size in r:
                note("pad id V inside a row")
