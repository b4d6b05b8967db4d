"""Penalties cases: programs of upstream batch transitions, with sampler calls in between.

A `PenaltiesProgram` is plain data (its repr is valid Python, its JSON is a fixture): a vocabulary
size, the batch's capacity, whether implementations get the batch as a hint (`hint`: vLLM's plugin
builds without one, so a builder's own default capacity is what the batch must outgrow), and a
list of operations. `PenaltiesRun` replays it on a `TokenBatch`
and yields the sampler's inputs at every `step` operation, so properties compare implementations
on the states upstream really reaches, including the ones where the lists and `token_ids_cpu`
disagree (async placeholders, repairs that shrink a list, optimistic extension and trim).

A `RepairCase` is one call of vLLM's async placeholder repair on a stand-in batch (lists, previous
step's rows, sampled ids), for the bulk repair's properties.

Operations (row arguments are taken modulo the number of requests):
  ("add", prompt, output, tracked, presence, frequency, repetition)
  ("remove", row)                       remove, then condense (last row moves into the hole)
  ("update", removed, added, swaps)     one step's batch update as vLLM's model runner makes it:
                                        the rows `removed` freed, each request in `added`
                                        ((prompt, output, tracked, presence, frequency,
                                        repetition), as "add") in the lowest freed row, else
                                        appended; condense; then the swaps ((i, j), ...) of the
                                        batch reorder, which may move rows added in the update
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

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Iterator

import torch

from vllm_hotpaths.testing.batches.penalties import TokenBatch
from vllm_hotpaths.testing.bits import assert_same_bits
from vllm_hotpaths.testing.cases import note, read_on_a_copy
from vllm_hotpaths.testing.laws import CaseLog, Checks, Side
from vllm_hotpaths.tracked_list import TrackedTokenList



@dataclass(frozen=True)
class PenaltiesProgram:
    vocab_size: int
    max_num_reqs: int
    max_model_len: int
    ops: tuple[tuple, ...]
    hint: bool = True


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
    hint: bool = True

    @classmethod
    def of(cls, program: PenaltiesProgram, row: int = 0, pos: int = 0, bad: str = "below",
           append: bool = False):
        return cls(program.vocab_size, program.max_num_reqs, program.max_model_len, program.ops,
                   row, pos, bad, append, program.hint)

    @property
    def program(self) -> PenaltiesProgram:
        return PenaltiesProgram(self.vocab_size, self.max_num_reqs, self.max_model_len, self.ops, self.hint)

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

    @property
    def hint(self) -> TokenBatch | None:
        """What an implementation is built with: the batch, or nothing (as vLLM's plugin builds)."""
        return self.batch if self.program.hint else None

    def steps(self) -> Iterator[PenaltiesStep]:
        batch = self.batch
        for op in self.program.ops:
            name, args = op[0], op[1:]
            n = batch.num_reqs
            if name == "add":
                self._add(*args)
            elif name == "update":
                self._update(*args)
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

    def _add(self, prompt, output, tracked, presence, frequency, repetition, row: int | None = None) -> bool:
        """A new request appended, or in the freed row `row`; False where it does not fit."""
        batch = self.batch
        penalties = (presence, frequency, repetition)
        if row is not None:
            added = batch.replace_request(row, prompt, output, penalties, tracked)
        else:
            added = (batch.num_reqs < batch.max_num_reqs and len(prompt) + len(output) <= batch.max_model_len)
            if added:
                batch.add_request(prompt, output, penalties, tracked)
        if added:
            note("plain-list row" if not tracked else "tracked row")
            for what, length in (("prompt", len(prompt)), ("output", len(output))):
                if length <= 2:
                    note(f"{what} length {length}")
            if len(prompt) + len(output) == batch.max_model_len:
                note("prompt and output fill max_model_len (lengths at the maximum)")
        return added

    def _update(self, removed, added, swaps) -> None:
        """One batch update (see the module's list of operations)."""
        batch = self.batch
        freed = sorted({r % batch.num_reqs for r in removed}) if batch.num_reqs else []
        new_rows = []
        for request in added:
            row = freed[0] if freed else None
            if self._add(*request, row=row):
                new_rows.append(batch.num_reqs - 1 if row is None else freed.pop(0))
                if row is not None:
                    note("update: a new request in a freed row")
        moves = batch.condense(freed)
        if moves:
            note("update: condense moved a row")
        new_rows = [dict(moves).get(r, r) for r in new_rows]
        refilled, applied = set(new_rows), []
        for i, j in swaps:
            n = batch.num_reqs
            if n and i % n != j % n:
                batch.swap(i % n, j % n)
                applied.append({i % n, j % n})
                touched = {i % n, j % n} & set(new_rows)
                note("update: a swap moved a row added in it" if touched else "update: a swap moved rows")
                new_rows = [{i % n: j % n, j % n: i % n}.get(r, r) for r in new_rows]
        if removed and added and (moves or swaps):
            note("update: adds, removes and moves in one step")
        chained = [a | b for k, a in enumerate(applied) for b in applied[k + 1:] if len(a & b) == 1]
        if chained:
            note("update: moves whose order matters (swaps sharing one row)")
            if any(rows & refilled for rows in chained):
                note("update: chained moves touch a refilled row")

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
        self._note_capacity(rows)
        presence, frequency, repetition = batch.penalty_tensors()
        return PenaltiesStep(rows, batch.prompt_tokens(), presence, frequency, repetition,
                             logits, contiguous)

    def _note_capacity(self, rows) -> None:
        """Where the step stands against a builder's initial staging capacity: the hint's
        max_num_reqs x max_model_len, or the default without one."""
        from vllm_hotpaths.penalties.fast import DEFAULT_COLS, DEFAULT_ROWS

        program, hint = self.program, "hint" if self.program.hint else "no hint"
        cap_rows, cap_cols = ((program.max_num_reqs, program.max_model_len) if program.hint
                              else (DEFAULT_ROWS, DEFAULT_COLS))
        if len(rows) > cap_rows:
            note(f"batch past the initial capacity ({hint})")
        elif rows and len(rows) == program.max_num_reqs:
            note("batch full (max_num_reqs rows)")
        width = max(map(len, rows), default=0)
        if width > 2 * cap_cols:
            note(f"an output past twice the initial capacity ({hint})")
        elif width > cap_cols:
            note(f"an output past the initial capacity ({hint})")

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
            if any(t >= 2**15 for t in r):
                note("an id >= 32,768 in a row")


# -- the comparison -------------------------------------------------------------------------
def tokens_on_a_copy(impl, rows, label: str) -> torch.Tensor:
    """`impl.output_tokens(rows)` on a deep copy of `impl` that shares the step's lists (their
    identity and watchers' marks are what an incremental builder reads): the tensor `impl` would
    build from its state now, read without calling `impl` itself."""
    return read_on_a_copy(impl, lambda twin: twin.output_tokens(rows), keep=(rows, *rows), label=label)


def assert_same_step(actual_impl, expected_impl, step: PenaltiesStep, device, label: str) -> None:
    """One sampler step, each side called as vLLM's sampler calls it: `apply_all_penalties` once,
    penalized logits bit for bit. The padded output-token tensor (shape, dtype, values) is
    compared bit for bit too, read with `output_tokens` from deep copies (`tokens_on_a_copy`):
    one taken before the call (the tensor the step's lists make from the state vLLM's call
    meets) and one after it (the tensor the call left, ids the fused counting kernel stored
    included). Neither read reaches the implementations themselves, so their path across steps
    is vLLM's: no extra build refreshes a state that vLLM's calls alone would leave stale. The
    candidate must leave the lists as they were."""
    sides = ((actual_impl, "actual side"), (expected_impl, "expected side"))

    def same_tokens(when: str) -> None:
        actual, expected = (tokens_on_a_copy(impl, step.rows, f"{label}: the {name}") for impl, name in sides)
        assert_same_bits(actual, expected, f"{label}: output token tensor {when} (read from a copy)")

    same_tokens("before the call")
    lists = [list(row) for row in step.rows]
    expected_logits = expected_impl.apply_all_penalties(*step.on(device))
    actual_logits = actual_impl.apply_all_penalties(*step.on(device))
    assert [list(row) for row in step.rows] == lists, f"{label}: apply_all_penalties changed the output lists"
    assert_same_bits(actual_logits, expected_logits, f"{label}: penalized logits")
    same_tokens("after the call")


# What a builder that lets a bad id through fails with (upstream's own failures: scatter_add_'s
# index check, a tensor build); compared with the reference's InvalidTokenId, not raised past it.
BAD_ID_ERRORS = (ValueError, RuntimeError, IndexError, OverflowError)


class PenaltiesChecks(Checks):
    """At every sampler step of a program, each side called once, as the v1 sampler calls it
    (`apply_all_penalties`): the penalized logits, and the padded output-token tensor (shape,
    dtype int64, values) read from copies before and after the call, bit for bit, on the same
    device. Bad ids: the same InvalidTokenId on both sides, and agreement again once the id is
    fixed."""

    hotpath = "penalties"
    case_type = PenaltiesProgram
    boundaries = ("update: a new request in a freed row", "update: a swap moved a row added in it",
                  "update: adds, removes and moves in one step", "condense moved a row", "swap moved rows",
                  "empty batch", "interior -1", "trailing -1 run", "repair shrank a list", "pad id V inside a row",
                  "trim", "an output jumping past twice the default columns (built)")
    error_type = PoisonedProgram
    converted = ((PoisonedProgram, PenaltiesProgram, PoisonedProgram.of),)

    def cases(self):
        return self.draws.penalties_programs()

    def reached(self, case: PenaltiesProgram) -> None:
        note("batch hint" if case.hint else "no batch hint")
        for _ in PenaltiesRun(case).steps():  # the batch's own labels; no implementation runs
            pass

    def agree(self, case: PenaltiesProgram, expected: Side, actual: Side, device, log: CaseLog) -> None:
        run = PenaltiesRun(case)
        note("batch hint" if case.hint else "no batch hint")
        first = expected.factory(case.vocab_size, device, run.hint)
        second = actual.factory(case.vocab_size, device, run.hint)
        for i, step in enumerate(run.steps()):
            assert_same_step(second, first, step, device, f"step {i} ({actual.label} vs {expected.label})")

    def error_cases(self):
        return self.draws.poisoned_programs()

    def refuse_alike(self, case: PoisonedProgram, expected: Side, actual: Side, device, log: CaseLog) -> None:
        """An id below -1 or above V (or not an integer), replacing one or appended in a step's
        new ids, makes the next `apply_all_penalties` raise InvalidTokenId naming the same place
        on both sides; once it is fixed (to 0), the sides agree again. Every call is one the
        sampler makes: one `apply_all_penalties` per step (`assert_same_step`)."""
        run = PenaltiesRun(case.program)
        first = expected.factory(case.vocab_size, device, run.hint)
        second = actual.factory(case.vocab_size, device, run.hint)
        step = None
        for step in run.steps():
            assert_same_step(second, first, step, device, f"{actual.label} before the bad id")
        if step is None or (poisoned := case.poison(step.rows)) is None:
            return
        row, pos = poisoned
        note(f"invalid id: {case.bad}, " + ("appended to every row" if case.append else "replaced"))
        errors = []
        for impl in (first, second):  # the sampler's next call, with the bad id in its lists
            try:
                impl.apply_all_penalties(*step.on(device))
                errors.append("no error")
            except BAD_ID_ERRORS as err:
                errors.append(f"{type(err).__name__}: {err}")
        assert errors[0].startswith("InvalidTokenId"), f"{expected.label} accepted the bad id"
        assert errors[1] == errors[0], f"{actual.label}: {errors[1]!r}, {expected.label}: {errors[0]!r}"
        row[pos] = 0
        assert_same_step(second, first, step, device, f"{actual.label} after the bad id was fixed")

    def patch_agrees(self, case: PenaltiesProgram, device, log: CaseLog) -> None:
        """The v1 sampler's `apply_all_penalties` with the plugin's patch installed == upstream's,
        penalized logits bit for bit at every step (tracked and plain lists, swaps, async
        placeholders, trims)."""
        from vllm_hotpaths import vllm_env
        from vllm_hotpaths.penalties import patch

        run = PenaltiesRun(case)
        patch.install()
        try:
            patched = vllm_env.import_vllm(patch.CALLERS[0]).apply_all_penalties
            upstream = patch.UPSTREAM["apply_all_penalties"]
            for i, step in enumerate(run.steps()):
                expected = upstream(*step.on(device))
                actual = patched(*step.on(device))
                assert_same_bits(actual, expected, f"step {i}: penalized logits, patched vs upstream")
        finally:
            patch.uninstall()
