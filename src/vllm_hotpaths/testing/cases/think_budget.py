"""Thinking-budget cases: a batch driven through vLLM's transitions, the holder called as the
sampler calls it, recorded as a replayable `ThinkProgram`.

A Hypothesis state machine (`machine`, drawing from `strategies/think_budget.py`) draws one
operation at a time and `ThinkRun.apply` executes it; the operations it ran are the program, which
is plain data (a fixture) and replays through the same `ThinkRun`. After every holder call the
normalized per-row state of two holders must be equal, and the logits after `apply_to_logits`
equal bit for bit (`play`).

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
  ("repeat_step", seed)                      a spec step whose update_state gets the rejection
                                             sampler's rows, one per draft position (request r:
                                             its output combined with drafts[:j], j < its draft
                                             count; none without drafts), and `repeat_indices`
                                             naming each row's request

A `BadConfig` is a holder configuration or a request budget the targeted version must refuse.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

import torch

from vllm_hotpaths import registry
from vllm_hotpaths.registry import version_key
from vllm_hotpaths.testing import fixtures
from vllm_hotpaths.testing.bits import assert_same_bits
from vllm_hotpaths.testing.cases import Ops, note, read_on_a_copy
from vllm_hotpaths.testing.laws import CaseLog, Checks, Judge, Side, compare_plainly
from vllm_hotpaths.think_budget import (BatchUpdate, InvalidBudget, InvalidThinkConfig, Move, Params,
                                        ThinkConfig, is_swap)
from vllm_hotpaths.tracked_list import TrackedTokenList

HOTPATH = "think_budget"
# The operations' fields, by name (the docstring above says what each does).
OPS = Ops(add="prompt output budget tracked", remove="row", swap="i j", sample="tokens", drafts="drafts",
          accept="accepted tokens", fill="row nth token", obey="accepted tokens", trim="row keep",
          regrow="row keep tokens", step="seed spec_as_none", repeat_step="seed", repair="counts tokens",
          **{"async": "extra"})


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


def takes_budgets(version: str, program: ThinkProgram) -> bool:
    """Whether the version's SamplingParams takes every budget the program adds (before 0.23 any
    integer; from 0.23 only None, -1 and >= 0): a program written on one version may not be replayable
    against the other's vLLM, whose refusal `test_vllm_rejects_what_the_reference_rejects` checks."""
    if version_key(version) < version_key("0.23.0"):
        return True
    return all(add.budget is None or add.budget >= -1 for add in OPS.of(program, "add"))


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


def repeated(outputs: list, spec: list[list[int]], combined: bool) -> tuple:
    """`update_state`'s arguments in the rejection sampler's layout: request r has one row per
    draft (its output, combined with drafts[:j] where the version combines them: a new list;
    else the output itself), a request without drafts has none, and `repeat_indices` names each
    row's request (the holder reads each request's last row)."""
    counts = [len(s) for s in spec]
    rows = [[*out, *drafts[:j]] if combined and j else out
            for out, drafts in zip(outputs, spec) for j in range(len(drafts))]
    repeat_indices = torch.arange(len(spec)).repeat_interleave(torch.tensor(counts, dtype=torch.long))
    if max(counts, default=0) > 1:
        note("repeat_indices: a request with more than one row")
    if 0 in counts:
        note("repeat_indices: a request without rows")
    return rows, spec, repeat_indices


def length_class(n: int) -> str:
    """A length in the classes the statistics report (powers of two past 32)."""
    return "<= 32" if n <= 32 else f"in ({1 << (n - 1).bit_length() - 1}, {1 << (n - 1).bit_length()}]"


def describe_update(update: BatchUpdate) -> None:
    """Statistics: which kinds of change one update combines, and whether a move touches a row
    added in the same update."""
    kinds = [name for name, part in (("removed", update.removed), ("added", update.added),
                                     ("moved", update.moved)) if part]
    note("update: " + "+".join(kinds))
    added = {index for index, *_ in update.added}
    for i1, i2, direction in update.moved:
        if i1 in added or i2 in added:
            note(f"update: a {'swap' if is_swap(direction) else 'condense move'} touches a row added in it")
    rows = [{i1, i2} for i1, i2, _ in update.moved if i1 != i2]
    chained = [a | b for k, a in enumerate(rows) for b in rows[k + 1:] if len(a & b) == 1]
    if chained:
        note("update: moves whose order matters (two sharing one row)")
        if any(pair & added for pair in chained):
            note("update: chained moves touch a row added in it")


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

    `version` picks upstream's calling convention: to 0.25 the bonus pass hands the holder each
    output combined with its drafts (a new list when there are drafts), from 0.26 the committed
    outputs (vLLM PR #46662).
    """

    def __init__(self, program: ThinkProgram, version: str, device) -> None:
        self.program = program
        self.combined_rows = version_key(version) < version_key("0.26.0")
        self.device = device
        self.batch = ThinkBatch(program.max_num_seqs)
        self.k = program.num_spec_tokens
        self.markers = set(program.start_ids) | set(program.end_ids)
        self.forced: dict[str, dict[int, int]] = {}  # pass -> logits row -> forced id
        self.tracked = False  # the expected holder's last has_tracked_requests() answer

    def observe(self, call: HolderCall, result) -> None:
        """Remember the expected holder's answers: whether it tracks requests (which decides
        whether the sampler's pass calls it on), and which ids it forced (for `obey`)."""
        if call.method == "has_tracked_requests":
            self.tracked = bool(result)
        if call.method == "apply_to_logits" and isinstance(result, torch.Tensor) and result.numel():
            values = result.float()  # converted once: rows may span a real vocabulary
            rows = values.abs().amax(dim=1) >= 1e8  # a forced 1e9 (inf in fp16)
            ids = values.argmax(dim=1)
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
        elif kind == "repeat_step":
            yield from self._sync()
            yield from self._sampler(args[0], False, repeated_rows=True)
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
            describe_update(update)
            yield HolderCall("sync_batch", "sync_batch", (update,))

    def _sampler(self, seed: int, spec_as_none: bool, repeated_rows: bool = False) -> Iterator[HolderCall]:
        """The sampler's calls, as vLLM's make them: each pass asks `has_tracked_requests()`
        first and calls `update_state` / `apply_to_logits` only when it says True (vLLM's
        `Sampler.apply_logits_processors` and `RejectionSampler.apply_logits_processors`); with
        drafts, the bonus pass (the sampler, `predict_bonus_token=True`) comes before the
        target pass (the rejection sampler). The answer is the expected holder's (`observe`);
        both must give it."""
        requests = self.batch.slots
        spec = [list(r.drafts) for r in requests]
        outputs = [r.output for r in requests]
        note(f"step: longest output {length_class(max(map(len, outputs), default=0))}")
        vocab, dtype = self.program.vocab_size, self.program.logits_dtype
        if not self.k:
            spec_arg = None if spec_as_none else spec
            if (yield from self._tracked("apply (no spec)")):
                yield HolderCall("update_state", "update_state", (outputs, spec_arg))
                yield HolderCall("apply (no spec)", "apply_to_logits", (False, spec_arg),
                                 _seeded_logits(seed, len(requests), vocab, dtype, self.device))
            return
        if repeated_rows:
            update_args = repeated(outputs, spec, self.combined_rows)
        else:
            if self.combined_rows:
                outputs = [[*o, *s] if s else o for o, s in zip(outputs, spec)]
            update_args = (outputs, spec)
        if (yield from self._tracked("apply (bonus pass)")):
            yield HolderCall("update_state", "update_state", update_args)
            yield HolderCall("apply (bonus pass)", "apply_to_logits", (True, spec),
                             _seeded_logits(seed, len(requests), vocab, dtype, self.device))
        if (yield from self._tracked("apply (target pass)")):
            yield HolderCall("apply (target pass)", "apply_to_logits", (False, spec),
                             _seeded_logits(seed + 1, sum(map(len, spec)), vocab, dtype, self.device))

    def _tracked(self, apply_label: str) -> Iterator[HolderCall]:
        """Ask `has_tracked_requests()`; True when the pass goes on. A pass that does not run
        forced nothing (what `obey` reads)."""
        yield HolderCall("has_tracked_requests", "has_tracked_requests")
        if not self.tracked:
            self.forced[apply_label] = {}
        return self.tracked


# -- the comparison --------------------------------------------------------------------------------
# The errors a holder may raise on purpose; anything else fails the property where it happens.
HOLDER_ERRORS = (InvalidBudget, InvalidThinkConfig)


class _Stop(Exception):
    """Both holders raised the same error: the case ends there."""


def states_on_a_copy(run: ThinkRun, holder, label: str) -> dict:
    """`holder.states()` read from a deep copy sharing the batch's lists: `states` is the checks'
    read, not a call vLLM makes, so the holder itself never gets it."""
    lists = [lst for r in run.batch.live for lst in (r.output, r.prompt, r.drafts) if lst is not None]
    return read_on_a_copy(holder, lambda twin: twin.states(), keep=lists, label=label)


def play(run: ThinkRun, op: tuple, expected, actual, label: str) -> None:
    """Apply one operation; every holder call must give the same result on both holders. The
    holders get only the calls vLLM makes (`ThinkRun.apply`); the per-row states compared after
    each call are read with `states()` from the expected holder (a reference, or vLLM's own) and
    from a copy of the actual one."""
    for call in run.apply(op):
        where = f"{label}, op {op[0]!r}, {call.label}"
        outcomes = []
        for holder in (expected, actual):
            try:
                outcomes.append(("returned", call.invoke(holder)))
            except HOLDER_ERRORS as err:
                outcomes.append(("raised", f"{type(err).__name__}: {err}"))
        run.observe(call, outcomes[0][1])
        (want_kind, want), (got_kind, got) = outcomes
        assert got_kind == want_kind, f"{where}: expected it to have {want_kind} {want}, it {got_kind} {got}"
        if want_kind == "raised":
            assert got == want, f"{where}: different errors"
            raise _Stop
        if call.method == "has_tracked_requests":
            assert bool(got) == bool(want), f"{where}: {got!r}, expected {want!r}"
            continue  # a question: nothing changed
        if isinstance(want, torch.Tensor):
            assert_same_bits(got, want, f"{where}: logits")
        want_states, got_states = expected.states(), states_on_a_copy(run, actual, where)
        # Fields only one holder has (another version's, in a drift check: 0.25's search positions,
        # 0.25 on's scan_offset) are not compared.
        want_fields, got_fields = set().union(*want_states.values()), set().union(*got_states.values())
        if want_fields and got_fields:
            fields = want_fields & got_fields
            want_states = {r: {k: v for k, v in s.items() if k in fields} for r, s in want_states.items()}
            got_states = {r: {k: v for k, v in s.items() if k in fields} for r, s in got_states.items()}
        if got_states != want_states:
            rows = sorted(set(want_states) | set(got_states))
            diff = {r: {k: (want_states.get(r, {}).get(k), got_states.get(r, {}).get(k))
                        for k in set(want_states.get(r, {})) | set(got_states.get(r, {}))
                        if want_states.get(r, {}).get(k) != got_states.get(r, {}).get(k)}
                    for r in rows}
            raise AssertionError(f"{where}: state differs (field: (expected, got)): "
                                 f"{ {r: d for r, d in diff.items() if d} }")
        if call.method == "update_state" and any(
                s["in_end"] and s["force_index"] and s["force_index"][0] < len(s.get("spec_token_ids") or ())
                for s in want_states.values()):
            note("a bonus pass with the forced position inside the drafts")
        if any(state["in_end"] for state in want_states.values()):
            note("a row is forcing its end marker")
        if len({state["same_state_as"] for state in want_states.values()}) < len(want_states):
            note("one state object on two rows (0.22 SWAP)")


def run_program(program: ThinkProgram, version: str, make_expected, make_actual, device, label: str) -> None:
    """Replay a whole program on two holders (a committed fixture), comparing after every call."""
    run = ThinkRun(program, version, device)
    expected, actual = make_expected(program.config), make_actual(program.config)
    try:
        for op in program.ops:
            play(run, op, expected, actual, label)
    except _Stop:
        pass


def machine(generators, version: str, spec: bool, make_expected, make_actual, device, log: CaseLog, label: str,
            judge: Judge = compare_plainly):
    """A RuleBasedStateMachine class comparing two holders after every operation: each
    operation's comparison goes to `judge` with the program so far; a judge that lets a
    difference pass (a ledger entry names it) ends the run there. `generators`: the hot path's
    module in `strategies`."""
    from hypothesis import strategies as st
    from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

    # Bare names in the class: its source is the seed of a derandomized run (Hypothesis' digest).
    small_counts, think_configs, ThinkDraws = generators.small_counts, generators.think_configs, generators.ThinkDraws
    SEEDS, BOOLEANS, COUNTS = st.integers(0, 2**16), st.booleans(), small_counts()
    REPEATED = st.integers(0, 3).map(lambda n: n == 3)  # one spec step in four: rows per draft position

    class ThinkBudgetMachine(RuleBasedStateMachine):
        @initialize(config=think_configs(spec), data=st.data(), requests=st.integers(1, 4))
        def start(self, config, data, requests):
            self.header = config
            self.draws = ThinkDraws.for_config(config, version)
            self.ops: list[tuple] = []
            self.stopped = False
            program = ThinkProgram(**config, ops=())
            log.record(program)
            self.run = ThinkRun(program, version, device)
            self.expected = make_expected(program.config)
            self.actual = make_actual(program.config)
            for what in data.draw(self.draws.built, label="built on purpose"):
                self.build(data, what)
            requests += data.draw(self.draws.more_requests, label="more requests")
            for _ in range(requests):  # (Hypothesis' swarm testing may switch the `add` rule off)
                self.add(data, data.draw(BOOLEANS, label="tracked"))

        def build(self, data, what: str) -> None:
            """A rare situation built first, in every run that draws it: the rules' own mix
            varies too much from seed to seed (swarm testing switches rules off) to reach it
            reliably. A tracked request first (the batch may hold one row), then its steps."""
            d, start, end = self.draws, list(self.header["start_ids"]), list(self.header["end_ids"])
            k = self.header["num_spec_tokens"]
            tracked = data.draw(BOOLEANS, label="tracked")
            if what == "deep resumed output":  # a start marker more than 256 ids back
                self.do("add", data.draw(d.prompts, label="prompt"), data.draw(d.deep_outputs, label="output"),
                        data.draw(d.tracked_budgets, label="budget"), tracked)
                note("a resumed output, its start marker more than 256 ids back")
            elif what == "over budget inside the drafts" and k:
                # thinking from the prompt, a budget below the drafts: the end marker is forced at
                # a draft position, which the bonus pass must leave to the target pass
                thought = data.draw(d.plain_runs, label="thought")
                budget = data.draw(st.integers(0, k - 1), label="budget")
                self.do("add", [*start, *thought], [], budget, tracked)
                self.do("drafts", (data.draw(d.plain_drafts, label="drafts"),))
                note("over budget inside the drafts (built)")
            elif what == "long marker one id a step" and max(len(start), len(end)) > 1:
                # the longest marker written one id a step, each step searched
                marker = max((start, end), key=len)
                prompt = [*start] if marker is end else []
                self.do("add", prompt, [], data.draw(d.tracked_budgets, label="budget"), tracked)
                self._decode(data, len(marker) + 1, False, tuple(marker))
                note("a marker of several ids written one id a step (built)")
                if len(marker) > 3:
                    note("a marker of four ids or more written one id a step")
                return
            elif what == "a found end rewritten away" and start and end:
                # thinking ended in the output, the end found by a step; then the output from
                # before the end is regenerated without it (a KV-load discard): thinking again,
                # over a budget below the thought, so the next step forces the end marker
                thought = data.draw(d.thoughts, label="thought")
                budget = data.draw(st.integers(0, len(thought) - 1), label="budget")
                row = len(self.run.batch.live)
                self.do("add", [*start], [*thought, *end], budget, True)
                if len(self.run.batch.live) == row:  # the batch was full
                    return
                self._step(data)
                self.do("regrow", row, len(thought), data.draw(d.plain_runs, label="regenerated"))
                note("a found end rewritten away (built)")
            else:
                return
            self._step(data)

        def do(self, *op) -> None:
            if self.draws.max_ops is not None and len(self.ops) >= self.draws.max_ops:
                self.stopped = True
            if self.stopped:
                return
            self.ops.append(op)
            program = ThinkProgram(**self.header, ops=tuple(self.ops))
            log.last = program

            def compare() -> None:
                try:
                    play(self.run, op, self.expected, self.actual, label)
                except _Stop:
                    self.stopped = True

            if judge(program, compare):  # a difference the judge lets pass: the run ends there
                self.stopped = True


        def _step(self, data, spec_as_none: bool = False) -> None:
            if self.header["num_spec_tokens"] and data.draw(REPEATED, label="rows per draft position"):
                self.do("repeat_step", data.draw(SEEDS, label="seed"))
            else:
                self.do("step", data.draw(SEEDS, label="seed"), spec_as_none)

        @rule(data=st.data(), tracked=st.booleans())
        def add(self, data, tracked):
            d = self.draws
            self.do("add", data.draw(d.prompts, label="prompt"), data.draw(d.added_outputs, label="output"),
                    data.draw(d.budgets, label="budget"), tracked)

        @rule(row=st.integers(0, 7))
        def remove(self, row):
            self.do("remove", row)

        @rule(i=st.integers(0, 4), j=st.integers(0, 4))
        def swap(self, i, j):
            self.do("swap", i, j)

        @rule(data=st.data(), refill=st.booleans(), a=st.integers(0, 7), b=st.integers(0, 7))
        def reorder(self, data, refill, a, b):
            """One update of chained moves: a row removed, then refilled by a new request (or
            left for the condense to fill with the last row), then two swaps sharing a row, the
            first at that row: (row, a) then (a, b), whose order decides where each state goes."""
            live = [i for i, s in enumerate(self.run.batch.slots) if s is not None]
            if len(live) < 3 or self.stopped:
                return
            k = data.draw(st.integers(0, len(live) - 1), label="removed")
            self.remove(k)
            if refill:
                self.add(data, data.draw(BOOLEANS, label="tracked"))
            row = live[k] if refill or live[k] < live[-1] else live[-2]
            n = len(live) if refill else len(live) - 1
            others = [i for i in range(n) if i != row]
            first = others[a % len(others)]
            second = [i for i in others if i != first][b % (len(others) - 1)] if len(others) > 1 else row
            self.swap(row, first)
            self.swap(first, second)
            self._step(data)

        @rule(data=st.data(), then_step=st.booleans())
        def sample(self, data, then_step):
            self.do("sample", data.draw(self.draws.token_lists))
            if then_step:
                self._step(data)

        @precondition(lambda self: self.header["num_spec_tokens"] > 0)
        @rule(data=st.data())
        def drafts(self, data):
            self.do("drafts", data.draw(self.draws.drafts, label="drafts"))

        @precondition(lambda self: self.header["num_spec_tokens"] > 0)
        @rule(data=st.data(), accepted=small_counts(), then_step=st.booleans())
        def accept(self, data, accepted, then_step):
            self.do("accept", accepted, data.draw(self.draws.token_lists))
            if then_step:
                self._step(data)

        @rule(extra=small_counts(2))
        def placeholders(self, extra):
            self.do("async", extra)

        @rule(data=st.data(), counts=small_counts(), then_step=st.booleans())
        def repair(self, data, counts, then_step):
            self.do("repair", counts, data.draw(self.draws.token_lists))
            if then_step:
                self._step(data)

        @rule(data=st.data(), row=st.integers(0, 7), nth=st.integers(0, 7))
        def fill(self, data, row, nth):
            self.do("fill", row, nth, data.draw(self.draws.marker_tokens, label="token"))

        @rule(row=st.integers(0, 7), keep=st.integers(0, 30))
        def trim(self, row, keep):
            self.do("trim", row, keep)

        @rule(data=st.data(), row=st.integers(0, 7), keep=st.integers(0, 30), then_step=st.booleans())
        def discard(self, data, row, keep, then_step):
            """KV-load discard and regeneration between two steps: same length, new ids."""
            self.do("regrow", row, keep, data.draw(self.draws.outputs, label="regenerated"))
            if then_step:
                self._step(data)

        @rule(data=st.data(), spec_as_none=st.booleans())
        def step(self, data, spec_as_none):
            self._step(data, spec_as_none)

        @rule(data=st.data(), rounds=st.integers(1, 8), asynchronous=st.booleans())
        def decode(self, data, rounds, asynchronous):
            """The engine's loop: drafts, the sampler step, then the tokens it produced (async:
            placeholders first, repaired before or after the step). A model that ends or starts
            thinking by itself emits the marker one id a round, each searched before the next."""
            self._decode(data, rounds, asynchronous, data.draw(self.draws.emitted_marker,
                                                               label="marker emitted one id a round"))

        def _decode(self, data, rounds: int, asynchronous: bool, emitted: tuple) -> None:
            k, d = self.header["num_spec_tokens"], self.draws
            if len(emitted) > 1 and rounds > len(emitted):
                note("a multi-id marker emitted one id a step")
            for i in range(rounds):
                sampled = (emitted[i],) if i < len(emitted) else data.draw(d.token_lists)
                if k:
                    self.drafts(data)
                if asynchronous:
                    repair_first = data.draw(BOOLEANS, label="repair before the step")
                    self.do("async", data.draw(d.extra_placeholders, label="extra placeholders"))
                    if not repair_first:
                        self._step(data)
                    self.do("repair", data.draw(COUNTS, label="ids per run"), sampled)
                    if repair_first:
                        self._step(data)
                else:
                    self._step(data)
                    obeys = data.draw(BOOLEANS, label="the model obeys forcing")
                    accepted = data.draw(COUNTS, label="accepted")
                    if obeys:
                        self.do("obey", accepted, sampled)
                    elif k:
                        self.do("accept", accepted, sampled)
                    else:
                        self.do("sample", sampled)

    return ThinkBudgetMachine


def run_machine(machine_class, digest: str | None = None, profile=None) -> None:
    """One property run of the machine (the profile's examples, up to 40 rules each; `profile`:
    Hypothesis settings in place of the loaded profile). `digest` gives the run its own examples
    (and, derandomized, its own seed), as Hypothesis' pytest plugin gives each parametrized test;
    the machine's own digest (its source) stays part of it."""
    from hypothesis import settings
    from hypothesis.stateful import get_state_machine_test

    test = get_state_machine_test(machine_class, settings=settings(profile or settings.default, stateful_step_count=40))
    if digest is not None:
        inner = test.hypothesis.inner_test
        inner._hypothesis_internal_add_digest = inner._hypothesis_internal_add_digest + digest.encode()
    test()


# -- bad configuration -----------------------------------------------------------------------------
def refusal(factory, case: BadConfig, device="cpu") -> str:
    """The error a holder gives when built from the case and handed a request; "accepted" if none."""
    try:
        holder = factory(case.config, device)
        request = (0, Params(case.budget), [*case.start_ids, 1], [])
        holder.sync_batch(BatchUpdate(1, (), [request], []))
    except (InvalidThinkConfig, InvalidBudget) as err:
        return f"{type(err).__name__}: {err}"
    return "accepted"


def refused_by(version: str, case: BadConfig) -> bool:
    budget = case.budget
    wrong_type = isinstance(budget, bool) or not isinstance(budget, int)
    return case.what == "marker" or wrong_type or version_key(version) >= version_key("0.23.0")


# -- vLLM with the plugin's patch ------------------------------------------------------------------
def patched_vllm_holder(config: ThinkConfig, device="cpu"):
    """vLLM's holder API as an InputBatch built with the plugin's patch installed holds it (on
    the CPU, whatever `device` says)."""
    from types import SimpleNamespace

    from vllm_hotpaths.testing.live.swap_states import live_batch
    from vllm_hotpaths.testing.live.think_budget import LiveThinkBudget
    from vllm_hotpaths.think_budget.patch import FastHolder

    side = LiveThinkBudget(config, "cpu")
    reasoning = SimpleNamespace(reasoning_start_token_ids=list(config.start_ids),
                                reasoning_end_token_ids=list(config.end_ids))
    batch = live_batch(config.max_num_seqs, 16, config.vocab_size, (16,),
                       num_spec_tokens=config.num_spec_tokens, reasoning_config=reasoning)
    side.holder = batch.thinking_budget_state_holder
    assert isinstance(side.holder, FastHolder), f"the patched InputBatch holds {type(side.holder).__name__}"
    return side


# -- the laws --------------------------------------------------------------------------------------
SPEC_MODES = ((False, "no spec"), (True, "spec"))


def _maker(side: Side, device):
    return lambda config: side.factory(config, device)


def _run_version(side: Side) -> str:
    """The calling convention a run follows: that of the reference `side` is checked against
    (its own version for a fast path, the installed vLLM's reference for vLLM's holder)."""
    return registry.get(HOTPATH).reference_version_for(side.version)


def _is_vllm(side: Side) -> bool:
    """The side is vLLM's own holder (requests enter through its SamplingParams)."""
    return side.factory is registry.get(HOTPATH).live_factory() or side.factory is patched_vllm_holder


class ThinkBudgetChecks(Checks):
    """A state machine drives a batch (adds, removals, swaps, condense moves, tokens, drafts,
    accepted drafts, async placeholders, repairs that shrink, interior fills, KV-load trims) and
    calls two holders as upstream's sampler does; after every call the normalized per-row state
    must be equal, and the logits after `apply_to_logits` equal bit for bit. Each law replays every
    committed program first, then runs the machine once without and once with speculative
    decoding. Bad configuration: the reference's error and message on both sides."""

    hotpath = HOTPATH
    case_type = ThinkProgram
    error_type = BadConfig
    stateful = True
    boundaries = ("a row is forcing its end marker", "output rewritten below its end", "output shrinks",
                  "repair shrinks the output", "interior placeholder filled", "long output (a resumed request)",
                  "update: removed", "update: moved", "update: removed+added", "update: a swap touches a row added in it",
                  "update: moves whose order matters (two sharing one row)",
                  "update: chained moves touch a row added in it",
                  "repeat_indices: a request with more than one row", "a multi-id marker emitted one id a step",
                  "prompt: in think", "a bonus pass with the forced position inside the drafts",
                  "a resumed output, its start marker more than 256 ids back",
                  "a marker of four ids or more written one id a step",
                  "real vocabulary (>= 32,768), markers at its end", "a found end rewritten away (built)")

    def reach_machines(self, counted, profile) -> None:
        """The newest reference on both sides, in each spec mode."""
        reference = registry.get(HOTPATH).reference()
        version = registry.get(HOTPATH).reference_version_for(None)
        for spec, mode in SPEC_MODES:
            make = _maker(Side("reference", reference, version), "cpu")
            run_machine(counted(machine(self.draws, version, spec, make, make, "cpu", CaseLog(Path(".")), "reach")),
                        digest=f"vllm-hotpaths:{self.hotpath}:reach:{mode}", profile=profile)
    # The errors law builds holders and hands them one request: no logits, so no CUDA case.
    law_devices = {**Checks.law_devices, "errors": ("cpu",)}

    def cases(self, spec: bool = False):
        """What the machine starts from (a program's header); it draws the operations itself."""
        return self.draws.think_configs(spec)

    def agree(self, case: ThinkProgram, expected: Side, actual: Side, device, log: CaseLog) -> None:
        run_program(case, _run_version(actual), _maker(expected, device), _maker(actual, device), device,
                    f"{actual.label} vs {expected.label}")

    def check(self, expected: Side, actual: Side, device, log: CaseLog, judge: Judge = compare_plainly,
              key: str = "") -> None:
        """Every committed program, then the machine in each spec mode."""
        self.replay(expected, actual, device, log, judge)
        version, label = _run_version(actual), f"{actual.label} vs {expected.label}"
        for spec, mode in SPEC_MODES:
            run_machine(machine(self.draws, version, spec, _maker(expected, device), _maker(actual, device), device,
                                log, label, judge),
                        digest=f"vllm-hotpaths:{self.hotpath}:{key}:{mode}")

    def replay(self, expected: Side, actual: Side, device, log: CaseLog, judge: Judge) -> None:
        """Every committed program through `judge` (not those whose budgets a vLLM side's
        SamplingParams refuses). All are replayed; the failure names each one that differs, and
        the log keeps the first as the case. VLLM_HOTPATHS_NO_REPLAY=1 skips them."""
        if os.environ.get("VLLM_HOTPATHS_NO_REPLAY") == "1":
            return
        failed: list[tuple[str, ThinkProgram, AssertionError]] = []
        for path, program in fixtures.load(log.regressions, self.hotpath, ThinkProgram):
            if not all(takes_budgets(side.version, program) for side in (expected, actual) if _is_vllm(side)):
                continue
            log.record(program)
            try:
                judge(program, lambda: self.agree(program, expected, actual, device, log))
            except AssertionError as failure:
                failed.append((path.stem, program, failure))
        if failed:
            log.last = failed[0][1]
            lines = [f"committed fixture {stem}: {failure}" for stem, _, failure in failed]
            raise AssertionError(f"{len(failed)} committed fixture(s) differ, {actual.label} vs {expected.label}:\n"
                                 + "\n".join(lines)) from failed[0][2]

    def error_cases(self):
        return self.draws.bad_configs("0.33.0")

    def refuse_alike(self, case: BadConfig, expected: Side, actual: Side, device, log: CaseLog) -> None:
        """Marker ids outside the vocabulary, and budgets the version refuses, raise the reference's
        error with the reference's message; budgets one version takes and the other refuses (0.22
        takes negative integers) are taken by both."""
        want = refusal(expected.factory, case, device)
        assert (want != "accepted") == refused_by(expected.version, case), f"{expected.label}: {want}"
        got = refusal(actual.factory, case, device)
        assert got == want, f"{actual.label}: {got!r}, {expected.label}: {want!r}"

    def _patch_sides(self) -> tuple[Side, Side]:
        from vllm_hotpaths import vllm_env

        version = vllm_env.installed_version()
        return (Side(f"upstream vLLM {version}", registry.get(HOTPATH).live_factory(), version),
                Side(f"patched vLLM {version}", patched_vllm_holder, version))

    def patch_agrees(self, case: ThinkProgram, device, log: CaseLog) -> None:
        """The holder of an InputBatch built with the plugin's patch installed == upstream's
        holder, state and forced logits, driven as vLLM's sampler drives them."""
        from vllm_hotpaths.think_budget import patch

        upstream, patched = self._patch_sides()
        patch.install()
        try:
            self.agree(case, upstream, patched, "cpu", log)
        finally:
            patch.uninstall()

    def check_patch(self, device, log: CaseLog, key: str = "") -> None:
        """With the patch installed: upstream's holder against the patched InputBatch's, on every
        committed program, then in the machine in each spec mode (`check`)."""
        from vllm_hotpaths.think_budget import patch

        upstream, patched = self._patch_sides()
        patch.install()
        try:
            self.check(upstream, patched, "cpu", log, key=key)
        finally:
            patch.uninstall()
