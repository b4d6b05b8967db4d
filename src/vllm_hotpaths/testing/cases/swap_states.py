"""swap_states cases: batches driven through vLLM's add / remove / drafts / tokens / swap /
condense, recorded as a replayable `SwapProgram`.

A state machine (`machine`) draws one operation at a time; `SwapRun.apply` runs it on every side
(a `BatchSide`: a batch and the implementation that swaps and condenses it). Requests are built
from their op by `make_request`, so a program is plain data and replays exactly (`replay`).

Operations:
  ("add", n, seed, prompt_len, output_len, async_tail, prompt_kind, allowed, generator,
   bad_words, lora, sampling)   request "r{n}" (skipped while r{n} is live) in the lowest hole or
                                the next row (after a condense: in the next step); prompt_kind
                                0: token ids, 1: embeddings only, 2: mixed; the last
                                `async_tail` output ids are -1 placeholders; `allowed` > 0:
                                that many allowed ids (a mask row)
  ("remove", n)                 request r{n} leaves (ends the step first if this step's removals
                                were already read, as the next step would)
  ("remove_all",)               every request leaves
  ("drafts", n, drafts)         r{n}'s speculative drafts (cut to fit max_model_len)
  ("token", n, token)           r{n} appends a sampled id (-1: async placeholder); its drafts
                                are used up
  ("accepted", n, count)        the model runner writes r{n}'s spec-decode counter
                                (`num_accepted_tokens_cpu`; generative batches only)
  ("swap", i1, i2)              the hot path; rows may be empty or out of range: a clear error
  ("condense",)                 the hot path; a second one in a step must be refused clearly
  ("end_step",)                 condense (unless this step did), then the step's removals and
                                moves are handed on

After every operation an observer compares the two sides under the oracle
(`vllm_hotpaths.testing.oracles.swap_states`), through the law's judge: `Equivalence` (a candidate
against the reference: everything, and a refused call refused the same way, before anything
moved) or `Conformance` (the reference against vLLM's own InputBatch: the ledger excuses exactly
its allowed-mask divergences, whose rows then get the first side's mask). `SwapStatesChecks` is
what the generic laws (properties/test_{equivalence,conformance,drift,patch}.py) run.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from vllm_hotpaths.swap_states import (COUNT_ARRAYS, SAMPLING_ARRAYS, SAMPLING_DICTS, CondensedAlready,
                                       InvalidRow, active_count, check_swap_rows, condense_plan)
from vllm_hotpaths.testing.batches.swap_states import BatchState, Request, book_token, record_accepted
from vllm_hotpaths.testing.cases import Ops, note
from vllm_hotpaths.testing.laws import CaseLog, Checks, Judge, Side, compare_plainly
from vllm_hotpaths.testing.live import swap_states as live
from vllm_hotpaths.testing.oracles.swap_states import (MASK, Lists, assert_same_on_device, differences,
                                                        mask_rows_differing)

OPS = Ops(add="n seed prompt_len output_len async_tail prompt_kind allowed generator bad_words lora sampling",
          remove="n", drafts="n drafts", token="n token", accepted="n count", swap="i1 i2")


@dataclass(frozen=True)
class SwapProgram:
    max_num_reqs: int
    max_model_len: int
    vocab_size: int
    block_sizes: tuple[int, ...]
    pooling: bool
    ops: tuple[tuple, ...]


SAMPLINGS = (  # (temperature, top_p, top_k, frequency, presence, repetition)
    (1.0, 1.0, 0, 0.0, 0.0, 1.0), (0.0, 1.0, 0, 0.0, 0.0, 1.0), (0.7, 0.9, 5, 0.5, -0.25, 1.2),
    (0.05, 0.5, 1, -2.0, 2.0, 0.5), (1.3, 0.999, 100000, 1.5, 0.1, 1.0000001),
    (0.9, 0.8, 2, 0.25, 0.0, 1.1), (0.6, 1.0, 2**31 - 1, 0.0, 1.0, 0.9),  # top_k 0, 1, 2, 5, past V, int32 max
)
HIDDEN = 3  # width of the prompt-embedding rows


def make_request(program: SwapProgram, op: tuple) -> Request:
    _, n, seed, prompt_len, output_len, async_tail, prompt_kind, allowed, generator, bad_words, lora, sampling = op
    rng = np.random.default_rng(seed)
    v = program.vocab_size
    prompt = rng.integers(0, v, prompt_len).tolist()
    output = rng.integers(0, v, output_len).tolist()
    output[len(output) - async_tail:] = [-1] * async_tail
    num_tokens = prompt_len + output_len
    block_ids = tuple(rng.integers(1, 1000, -(-num_tokens // b)).tolist() for b in program.block_sizes)
    temperature, top_p, top_k, frequency, presence, repetition = SAMPLINGS[sampling % len(SAMPLINGS)]
    return Request(
        req_id=f"r{n}",
        prompt_token_ids=None if prompt_kind == 1 else prompt,
        output_token_ids=output,
        num_computed_tokens=int(rng.integers(0, num_tokens + 1)),
        block_ids=block_ids,
        prompt_embeds=torch.from_numpy(rng.standard_normal((prompt_len, HIDDEN), dtype=np.float32))
        if prompt_kind else None,
        prompt_is_token_ids=(rng.random(prompt_len) < 0.5).tolist() if prompt_kind == 2 else None,
        pooling=program.pooling,
        temperature=temperature, top_p=top_p, top_k=top_k, frequency_penalty=frequency,
        presence_penalty=presence, repetition_penalty=repetition,
        generator=torch.Generator().manual_seed(seed) if generator else None,
        allowed_token_ids=sorted(set(rng.integers(0, v, allowed).tolist())) if allowed else None,
        bad_words_token_ids=[rng.integers(0, v, 1 + k).tolist() for k in range(bad_words)] or None,
        lora_id=lora,
    )


class UpstreamMethods:
    """The batch's own `swap_states` / `condense` (vLLM's, on vLLM's InputBatch; the plugin's
    where its patch is installed)."""

    @staticmethod
    def swap_states(batch, i1, i2):
        batch.swap_states(i1, i2)

    @staticmethod
    def condense(batch):
        batch.condense()


class UnpatchedMethods:
    """vLLM's own `swap_states` / `condense`, as they were before the plugin's patch (while it is
    installed)."""

    @staticmethod
    def swap_states(batch, i1, i2):
        from vllm_hotpaths.swap_states import patch

        patch.UPSTREAM["swap_states"](batch, i1, i2)

    @staticmethod
    def condense(batch):
        from vllm_hotpaths.swap_states import patch

        patch.UPSTREAM["condense"](batch)


@dataclass
class BatchSide:
    """One batch and the implementation that swaps and condenses it (one of the two batches a
    `SwapRun` drives; not `laws.Side`, which is one implementation in a law)."""

    batch: object
    impl: object
    vllm: bool = False  # vLLM's InputBatch (fed through `live`) or the standalone BatchState
    lists: Lists = dataclasses.field(default_factory=Lists)

    def add(self, request: Request) -> None:
        own = dataclasses.replace(request, output_token_ids=list(request.output_token_ids))
        live.add(self.batch, own) if self.vllm else self.batch.add_request(own)
        self.lists.record_add(self.batch, own.req_id, own.output_token_ids)

    def drafts(self, req_id: str, drafts: list[int]) -> None:
        if self.vllm:
            live.update_spec(self.batch, req_id, drafts)
        else:
            self.batch.update_req_spec_token_ids(req_id, drafts)

    def token(self, req_id: str, token: int) -> None:
        """The sampled id is booked; the row's drafts are used up (the next step sets new ones
        before anything swaps or condenses, so no unwritten column is ever inside a row's prefix)."""
        book_token(self.batch, req_id, token)
        self.drafts(req_id, [])

    def accepted(self, req_id: str, count: int) -> None:
        record_accepted(self.batch, req_id, count)

    def end_step(self) -> None:
        self.batch.batch_update_builder.reset()


def standalone(program: SwapProgram, vllm_version: str = "0.22.0") -> BatchState:
    """The standalone batch, adding and removing requests as `vllm_version`'s InputBatch does."""
    return BatchState(program.max_num_reqs, program.max_model_len, program.vocab_size,
                      program.block_sizes, program.pooling, vllm_version)


def vllm_batch(program: SwapProgram, make_batch=None):
    """vLLM's InputBatch for `program` (`make_batch`: the registry's live adapter, by default
    `live.live_batch`)."""
    return (make_batch or live.live_batch)(program.max_num_reqs, program.max_model_len, program.vocab_size,
                                           program.block_sizes, program.pooling)


class SwapRun:
    """Applies operations to every side; the first side's batch decides what is valid.

    With `valid_only` (a side that is vLLM's own InputBatch, which would fail halfway through),
    swaps of empty or out-of-range rows and a second condense in one step are skipped; otherwise
    every side runs them and must refuse them."""

    def __init__(self, program: SwapProgram, sides: list[BatchSide], valid_only: bool = False) -> None:
        self.program, self.sides, self.valid_only = program, sides, valid_only
        self.condensed = False  # this step has condensed: its removals are settled

    @property
    def lead(self):
        return self.sides[0].batch

    def apply(self, op: tuple) -> tuple[str, object]:
        """Run `op` on every side. Returns ("ran", None), ("skipped", reason) or, for a call
        that every side refused, ("refused", [error per side])."""
        kind, lead = op[0], self.lead
        if kind == "add" and self.condensed:
            self.apply(("end_step",))  # vLLM adds before it condenses; after, only a new step adds
        if kind == "add":
            request = make_request(self.program, op)
            holes = lead.batch_update_builder._removed
            index = min(holes) if holes else lead.num_reqs
            if request.req_id in lead.req_id_to_index or index >= self.program.max_num_reqs:
                return "skipped", "live id or full batch"
            for side in self.sides:
                side.add(request)
            note_limits(lead, self.program, request)
        elif kind in ("remove", "remove_all"):
            ids = [f"r{op[1]}"] if kind == "remove" else [i for i in lead._req_ids if i is not None]
            ids = [i for i in ids if i in lead.req_id_to_index]
            if not ids:
                return "skipped", "not live"
            if lead.batch_update_builder._is_removed_sorted:
                self.apply(("end_step",))  # removals come first in a step
            for side in self.sides:
                for req_id in ids:
                    side.batch.remove_request(req_id)
        elif kind in ("drafts", "token"):
            req_id = f"r{op[1]}"
            if req_id not in lead.req_id_to_index:
                return "skipped", "not live"
            row = lead.req_id_to_index[req_id]
            room = self.program.max_model_len - int(lead.num_tokens_no_spec[row])
            if kind == "drafts":
                drafts = list(op[2][:room])
                for side in self.sides:
                    side.drafts(req_id, drafts)
            else:
                if room - len(lead.spec_token_ids[row]) < 1:
                    return "skipped", "row is full"
                for side in self.sides:
                    side.token(req_id, op[2])
        elif kind == "accepted":
            req_id = f"r{op[1]}"
            if req_id not in lead.req_id_to_index or lead.is_pooling_model:
                return "skipped", "not live, or a pooling batch (no spec decode)"
            for side in self.sides:
                side.accepted(req_id, op[2])
            note_accepted(op[2])
        elif kind == "swap":
            if self.valid_only:
                try:
                    check_swap_rows(lead, op[1], op[2])
                except InvalidRow:
                    return "skipped", "not two live rows"
            if op[1] == op[2]:
                note("swap of a row with itself")
            elif _live(lead, op[1]) and _live(lead, op[2]):
                note_differing(lead, op[1], op[2], "swap")
            return self._refusable(lambda side: side.impl.swap_states(side.batch, op[1], op[2]))
        elif kind == "condense":
            if self.valid_only and self.condensed:
                return "skipped", "condensed already"
            if not self.condensed:
                for src, dst in condense_plan(lead.batch_update_builder.removed, lead.num_reqs):
                    note_differing(lead, src, dst, "condense")
            outcome = self._refusable(lambda side: side.impl.condense(side.batch))
            self.condensed = True
            return outcome
        elif kind == "end_step":
            if not self.condensed:
                for side in self.sides:
                    side.impl.condense(side.batch)
            for side in self.sides:
                side.end_step()
            self.condensed = False
        else:
            raise ValueError(f"unknown swap_states op {op!r}")
        return "ran", None

    def _refusable(self, call) -> tuple[str, object]:
        outcomes = []
        for side in self.sides:
            try:
                call(side)
                outcomes.append(None)
            except (InvalidRow, CondensedAlready) as err:
                outcomes.append(f"{type(err).__name__}: {err}")
        if all(o is None for o in outcomes):
            return "ran", None
        return "refused", outcomes


# -- what a run reaches (hypothesis events, one per kind and program) ------------------------
INT32_MAX, INT64_MAX = 2**31 - 1, 2**63 - 1


def row_fields_differing(batch, r1: int, r2: int) -> list[str]:
    """The fields swap and condense write in which rows r1 and r2 differ: a move that forgot one
    of them shows only where these differ."""
    found = [name for name in COUNT_ARRAYS + (() if batch.is_pooling_model else SAMPLING_ARRAYS)
             if getattr(batch, name)[r1] != getattr(batch, name)[r2]]
    n = max(active_count(batch, r1), active_count(batch, r2))
    found += [name for name in ("token_ids_cpu", "is_token_ids")
              if not np.array_equal(getattr(batch, name)[r1, :n], getattr(batch, name)[r2, :n])]
    found += ["spec_token_ids"] if batch.spec_token_ids[r1] != batch.spec_token_ids[r2] else []
    dicts = ("req_prompt_embeds",) + (() if batch.is_pooling_model else SAMPLING_DICTS)
    found += [name for name in dicts if getattr(batch, name).get(r1) is not getattr(batch, name).get(r2)]
    groups = batch.block_table.block_tables
    found += ["block_table"] if any(not np.array_equal(g.block_table.np[r1], g.block_table.np[r2])
                                    for g in groups) else []
    mask = batch.allowed_token_ids_mask_cpu_tensor
    if mask is not None and not batch.is_pooling_model and not np.array_equal(mask.numpy()[r1], mask.numpy()[r2]):
        found.append("allowed_token_ids_mask")
    return found


def note_differing(batch, r1: int, r2: int, what: str) -> None:
    for name in row_fields_differing(batch, r1, r2):
        note(f"{what} moves a differing {name}")


def note_accepted(count: int) -> None:
    kind = count if count < 3 else "at the int32 maximum" if count == INT32_MAX else "3 or more"
    note(f"accepted count {kind}")


def note_limits(batch, program: SwapProgram, request: Request) -> None:
    """The boundaries an add reached: a full batch, a row at max_model_len with outputs, rows
    past 8,192 and 65,535 tokens, LoRA ids past 32 bits and at the int64 maximum."""
    if batch.num_reqs == program.max_num_reqs:
        note("batch filled to max_num_reqs")
    num_tokens = request.num_prompt_tokens + len(request.output_token_ids)
    if num_tokens == program.max_model_len and request.output_token_ids:
        note("row at max_model_len with outputs")
    for limit in (8192, 65535):
        if num_tokens > limit:
            note(f"row past {limit:,} tokens")
    if request.lora_id > INT32_MAX:
        note("LoRA id at the int64 maximum" if request.lora_id == INT64_MAX else "LoRA id past 32 bits")


# -- the comparison ---------------------------------------------------------------------------
# An observer compares the two sides around every operation, through the law's judge (with
# `program`, the operations run so far, as the case); `after` and `finish` return True where the
# judge tolerated a difference that ends the run (a drift check's named change).
class Equivalence:
    """Second side (`actual`) == first side (`expected`) after every operation: every field of
    the oracle, and a refused call refused the same way; on a GPU, what the model runner uploads
    too (at every step's end and at the end of the run)."""

    def __init__(self, device: str, judge: Judge = compare_plainly,
                 labels: tuple[str, str] = ("the reference", "the candidate")) -> None:
        self.device, self.judge = device, judge
        self.expected_label, self.actual_label = labels

    def before(self, run: SwapRun, op: tuple) -> None:
        pass

    def _on_device(self, run: SwapRun) -> None:
        """What the model runner uploads, compared on the device."""
        if self.device != "cpu":
            expected, actual = run.sides
            assert_same_on_device(expected.batch, actual.batch, self.device)

    def finish(self, run: SwapRun, program: SwapProgram) -> bool:
        return self.judge(program, lambda: self._on_device(run))

    def after(self, run: SwapRun, op: tuple, outcome: tuple, program: SwapProgram) -> bool:
        def compare():
            (expected, actual) = run.sides
            status, detail = outcome
            if status == "refused":
                want, got = detail
                assert got == want, (f"op {op}: {self.actual_label}'s outcome {got!r}, "
                                     f"{self.expected_label}'s {want!r}")
                note(f"{op[0]} refused")
            found = differences(expected.batch, actual.batch, expected.lists, actual.lists)
            assert not found, f"after op {op}: {self.actual_label} differs from {self.expected_label}: {found}"
            if op[0] == "end_step":
                self._on_device(run)

        return self.judge(program, compare)


class MaskCase:
    """What the ledger's swap_states entries look at: the operation about to run; whether it swaps
    two rows with different allowed masks; whether it adds a request without allowed ids to a row
    that holds no request but still a mask (only vLLM's condense leaves one: removal clears it);
    and the operations run so far (`ops`, what a drift check's ledger changes read)."""

    def __init__(self, op: tuple, swaps_different_masks: bool, unmasked_add_to_stale_row: bool,
                 ops: tuple[tuple, ...] = ()) -> None:
        self.op = op
        self.swaps_different_masks = swaps_different_masks
        self.unmasked_add_to_stale_row = unmasked_add_to_stale_row
        self.ops = ops


def _live(batch, row) -> bool:
    return 0 <= row < len(batch._req_ids) and batch._req_ids[row] is not None


class Conformance:
    """Second side (`actual`: the installed vLLM's InputBatch and its own methods) == first side
    (`expected`: the reference on the standalone batch; or the patched InputBatch, in the patch
    law). Every field but the allowed-token mask is compared through the judge with the program
    run so far as the case (a conformance judge lets no difference pass there; a drift check's
    may name it, which ends the run); the mask is compared through the judge with a `MaskCase`,
    and a difference the ledger's divergences for `version` excuse gets the first side's mask
    rows copied into the second, so later operations are judged on their own."""

    def __init__(self, judge: Judge, version: str,
                 labels: tuple[str, str] = ("the reference", "vLLM")) -> None:
        self.judge, self.version = judge, version
        self.expected_label, self.actual_label = labels
        self.case = None

    def finish(self, run: SwapRun, program: SwapProgram) -> bool:
        return False

    def before(self, run: SwapRun, op: tuple) -> None:
        reference, upstream = run.sides[0].batch, run.sides[1].batch
        mask = reference.allowed_token_ids_mask_cpu_tensor
        swaps = adds = False
        if op[0] == "swap" and mask is not None:
            swap = OPS.types["swap"](*op)
            if _live(reference, swap.i1) and _live(reference, swap.i2):
                swaps = not np.array_equal(mask.numpy()[swap.i1], mask.numpy()[swap.i2])
        add = OPS.types["add"](*op) if op[0] == "add" else None
        if add and mask is not None and add.allowed == 0 and f"r{add.n}" not in reference.req_id_to_index:
            holes = [] if run.condensed else reference.batch_update_builder._removed  # (a new step)
            row = min(holes) if holes else reference.num_reqs
            adds = row < reference.max_num_reqs and bool(upstream.allowed_token_ids_mask_cpu_tensor[row].any())
        self.case = MaskCase(op, swaps, adds)

    def after(self, run: SwapRun, op: tuple, outcome: tuple, program: SwapProgram) -> bool:
        from vllm_hotpaths.testing import ledger

        reference, upstream = run.sides[0].batch, run.sides[1].batch
        found = differences(reference, upstream, run.sides[0].lists, run.sides[1].lists, whole_mask=False)
        mask_difference = found.pop(MASK, None)

        def compare_fields():
            assert not found, f"after op {op}: {self.actual_label} differs from {self.expected_label}: {found}"

        if self.judge(program, compare_fields):
            return True

        def compare_mask():
            assert mask_difference is None, (f"after op {op}: {self.actual_label} vs {self.expected_label}: "
                                             f"allowed-token mask {mask_difference}")

        case = MaskCase(self.case.op, self.case.swaps_different_masks, self.case.unmasked_add_to_stale_row,
                        program.ops)
        if not self.judge(case, compare_mask):
            return False
        excusing = [e for e in ledger.LEDGER
                    if e.kind == "divergence" and e.covers("swap_states", self.version, case)]
        if not excusing:  # no divergence of this vLLM: a change the judge named ends the run
            return True
        note(f"excused: {excusing[0].link}")
        for row in mask_rows_differing(reference, upstream):
            upstream.allowed_token_ids_mask_cpu_tensor[row] = reference.allowed_token_ids_mask_cpu_tensor[row]
        return False


# -- runs -------------------------------------------------------------------------------------
def replay(program: SwapProgram, make_sides, observer, valid_only: bool = False) -> None:
    """`program`'s operations on the sides `make_sides(program)` makes, compared by `observer`
    after each; a difference its judge tolerates ends the replay there."""
    run = SwapRun(program, make_sides(program), valid_only)
    for i, op in enumerate(program.ops):
        observer.before(run, op)
        if observer.after(run, op, run.apply(op), dataclasses.replace(program, ops=program.ops[:i + 1])):
            return
    observer.finish(run, program)


def machine(generators, make_sides, observer, log: CaseLog, valid_only: bool = False):
    """A state machine whose runs are programs (drawn from `generators`' headers and add ops, the
    hot path's module in `strategies`, one operation at a time), each operation run on the sides
    `make_sides(program)` makes and compared by `observer`; the log keeps the program so far (a
    failure's fixture)."""
    from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

    from vllm_hotpaths.testing.kept_strategies import KEPT as st  # the rules' strategies, built once each

    # Bare names in the class: its source is the seed of a derandomized run (Hypothesis' digest).
    add_ops, programs_header = generators.add_ops, generators.programs_header
    # small ids, or any id of a real vocabulary's range (taken modulo, or capped by, the program's)
    ANY_ID = st.one_of(st.integers(0, 23), st.integers(0, 2**18 - 1))

    class SwapStatesMachine(RuleBasedStateMachine):
        @initialize(header=programs_header(), data=st.data(), requests=st.integers(1, 6))
        def start(self, header, data, requests):
            self.header = header
            self.adds = add_ops(header)
            self.ops: list[tuple] = []
            program = SwapProgram(**header, ops=())
            log.record(program)
            self.run = SwapRun(program, make_sides(program), valid_only)
            # vLLM allocates the allowed-token mask on first use: half the runs start without it.
            late_mask = data.draw(st.booleans(), label="mask allocated later")
            for _ in range(min(requests, header["max_num_reqs"])):  # swarm testing may switch `add` off
                op = data.draw(self.adds, label="add")
                self.do(op[:7] + (0,) + op[8:] if late_mask else op)

        def teardown(self):
            if hasattr(self, "run") and not getattr(self, "stopped", False):
                observer.finish(self.run, SwapProgram(**self.header, ops=tuple(self.ops)))

        def do(self, *op) -> None:
            if getattr(self, "stopped", False):
                return
            op = op[0] if len(op) == 1 and isinstance(op[0], tuple) else op
            self.ops.append(op)
            program = log.last = SwapProgram(**self.header, ops=tuple(self.ops))
            observer.before(self.run, op)
            if observer.after(self.run, op, self.run.apply(op), program):
                self.stopped = True  # a drift check's judge named the difference: this run ends

        def _request(self, data) -> int:
            """Mostly a live request (else any id, which the run skips when it is not live)."""
            live = sorted(int(i[1:]) for i in self.run.lead.req_id_to_index)
            anyone = st.integers(0, 2 * self.header["max_num_reqs"])
            return data.draw(st.one_of(*[st.sampled_from(live)] * 4, anyone) if live else anyone, label="request")

        @rule(data=st.data())
        def add(self, data):
            """Mostly a new id (a live one is skipped); removed ids come back as re-adds."""
            op = data.draw(self.adds, label="add")
            live = self.run.lead.req_id_to_index
            free = [n for n in range(2 * self.header["max_num_reqs"] + 1) if f"r{n}" not in live]
            if free and data.draw(st.integers(0, 4), label="new id") > 0:
                op = (op[0], data.draw(st.sampled_from(free), label="id"), *op[2:])
            self.do(op)

        @rule(data=st.data(), everything=st.integers(0, 7))
        def remove(self, data, everything):
            if everything == 0:
                self.do("remove_all",)
            else:
                self.do("remove", self._request(data))

        @rule(data=st.data(), drafts=st.lists(ANY_ID, min_size=1, max_size=4).map(tuple))
        def drafts(self, data, drafts):
            self.do("drafts", self._request(data), tuple(d % self.header["vocab_size"] for d in drafts))

        @rule(data=st.data(), token=st.one_of(st.integers(-1, 23), ANY_ID))
        def token(self, data, token):
            self.do("token", self._request(data), min(token, self.header["vocab_size"] - 1))

        @rule(data=st.data(), count=st.one_of(st.integers(0, 5), st.just(2**31 - 1)))
        def accepted(self, data, count):
            """After a verified spec-decode step: 1 + the accepted drafts (0 and the field's
            maximum too: a swap or condense that left the counter behind shows wherever rows differ)."""
            self.do("accepted", self._request(data), count)

        @rule(data=st.data())
        def swap(self, data):
            ids = self.run.lead._req_ids
            live = [r for r, i in enumerate(ids) if i is not None]
            holes = [r for r, i in enumerate(ids) if i is None]
            choices = [st.sampled_from(live)] * 6 if live else []
            choices += [st.sampled_from(holes)] if holes else []
            index = st.one_of(*choices, st.integers(-2, self.header["max_num_reqs"] + 1))
            self.do("swap", data.draw(index, label="i1"), data.draw(index, label="i2"))

        @rule(data=st.data(), removals=st.integers(0, 2), additions=st.integers(0, 2), swaps=st.integers(0, 2))
        def turn(self, data, removals, additions, swaps):
            """One scheduler step in upstream's order: removals, additions (filling the holes),
            condense, reordering swaps, then the step's moves are handed on."""
            for _ in range(removals):
                self.remove(data, 1)
            for _ in range(additions):
                self.add(data)
            self.condense()
            for _ in range(swaps):
                self.swap(data)
            self.end_step()

        @rule()
        def condense(self):
            self.do("condense",)

        @rule()
        def end_step(self):
            self.do("end_step",)

    return SwapStatesMachine


def run_machine(machine_class, profile=None) -> None:
    """Runs of up to 100 operations (Hypothesis' default is 50; the planted bugs that need a
    removal, a condense and a re-add in a later step were missed by some 50-operation seeds),
    under the loaded profile or `profile` (Hypothesis settings)."""
    from hypothesis import settings
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(machine_class, settings=settings(profile, stateful_step_count=100))


def candidate_sides(reference_factory, factory, on_vllm: bool = False):
    """`make_sides` for a candidate against the reference: both on standalone batches, or the
    candidate on vLLM's own InputBatch (what the plugin installs; the reference's standalone
    batch then adds and removes as the installed vLLM does)."""
    from vllm_hotpaths import vllm_env
    from vllm_hotpaths.think_budget import Move

    def make_sides(program):
        if on_vllm:
            return [BatchSide(standalone(program, vllm_env.installed_version()), reference_factory(Move)),
                    BatchSide(vllm_batch(program), factory(live.move_directions()), vllm=True)]
        return [BatchSide(standalone(program), reference_factory(Move)), BatchSide(standalone(program), factory(Move))]

    return make_sides


def is_live(side: Side) -> bool:
    """`side` is the installed vLLM (its factory is the registry's live adapter: a batch maker)."""
    from vllm_hotpaths import registry

    return side.factory is registry.get("swap_states").live_factory()


class SwapStatesChecks(Checks):
    """After every operation of a program (adds of every kind of request, removals, drafts,
    tokens, swaps of live, empty and out-of-range rows, condenses): the two batches agree under
    the oracle, and refused calls are refused alike before anything moved.

    Stateful: each law replays every committed `SwapProgram` fixture through the comparison,
    then runs the state machine (`machine`); every operation's comparison goes through the law's
    judge. Equivalence: a candidate against the reference of its version on standalone batches
    (on a GPU, the uploads too). Conformance and drift (`actual` is the installed vLLM, `is_live`):
    the reference on the standalone batch against vLLM's InputBatch with its own methods, valid
    calls only, allowed-mask divergences through the ledger (`Conformance`). Patch: vLLM's
    InputBatch with the plugin's patch against upstream's methods, judged as conformance."""

    hotpath = "swap_states"
    case_type = SwapProgram
    stateful = True
    boundaries = ("swap of a row with itself", "swap refused", "condense refused",
                  "swap moves a differing allowed_token_ids_mask", "condense moves a differing block_table",
                  "swap moves a differing spec_token_ids", "condense moves a differing token_ids_cpu",
                  "accepted count at the int32 maximum", "batch filled to max_num_reqs",
                  "row at max_model_len with outputs")

    def reach_machines(self, counted, profile) -> None:
        """The reference on both sides (refusals are noted by the comparison)."""
        from vllm_hotpaths import registry

        reference = registry.get(self.hotpath).reference()
        sides = candidate_sides(reference, reference)
        run_machine(counted(machine(self.draws, sides, Equivalence("cpu"), CaseLog(Path(".")))), profile)

    def cases(self):
        """The generator is a state machine, not a strategy: `machine` (which draws from
        `programs_header` and `add_ops` of `self.draws`)."""
        return functools.partial(machine, self.draws)

    def agree(self, case: SwapProgram, expected: Side, actual: Side, device, log: CaseLog,
              judge: Judge = compare_plainly) -> None:
        """Replay `case` on both sides, comparing after every operation under `judge`."""
        replay(case, *self._comparison(expected, actual, device, judge))

    def _comparison(self, expected: Side, actual: Side, device, judge: Judge):
        """(make_sides, observer, valid_only) of a law comparing `actual` with `expected`."""
        from vllm_hotpaths.think_budget import Move

        labels = (expected.label, actual.label)
        if is_live(actual):
            def make_sides(program):
                return [BatchSide(standalone(program, actual.version), expected.factory(Move)),
                        BatchSide(vllm_batch(program, actual.factory), UpstreamMethods(), vllm=True)]

            return make_sides, Conformance(judge, actual.version, labels), True
        return candidate_sides(expected.factory, actual.factory), Equivalence(device, judge, labels), False

    def check(self, expected: Side, actual: Side, device, log: CaseLog, judge: Judge = compare_plainly,
              key: str = "") -> None:
        """Every committed program, then the state machine's runs."""
        for case in self.replayed(log):
            log.record(case)
            self.agree(case, expected, actual, device, log, judge)
        make_sides, observer, valid_only = self._comparison(expected, actual, device, judge)
        run_machine(machine(self.draws, make_sides, observer, log, valid_only))

    def replayed(self, log: CaseLog) -> list:
        """The committed fixtures (none with VLLM_HOTPATHS_NO_REPLAY=1, to show that generation
        alone finds a bug)."""
        if os.environ.get("VLLM_HOTPATHS_NO_REPLAY") == "1":
            return []
        return self.committed(self.case_type, log.regressions)

    # -- the patch law ----------------------------------------------------------------------
    def _patch_comparison(self, log: CaseLog):
        from vllm_hotpaths import vllm_env
        from vllm_hotpaths.testing import ledger

        version = vllm_env.installed_version()

        def make_sides(program):
            return [BatchSide(vllm_batch(program), UpstreamMethods(), vllm=True),  # patched
                    BatchSide(vllm_batch(program), UnpatchedMethods(), vllm=True)]

        judge = ledger.conformance_judge(self.hotpath, version, log)
        labels = (f"vLLM {version} with the plugin's patch", f"vLLM {version} (upstream's methods)")
        return make_sides, Conformance(judge, version, labels)

    def patch_agrees(self, case: SwapProgram, device, log: CaseLog) -> None:
        """vLLM's InputBatch with the plugin's patch installed == the same batch with upstream's
        methods, field by field after every operation; the ledger's upstream mask bugs (which the
        patch does not copy) are the only differences allowed, as in conformance."""
        from vllm_hotpaths.swap_states import patch

        installed_here = not patch.UPSTREAM
        patch.install()
        try:
            replay(case, *self._patch_comparison(log), valid_only=True)
        finally:
            if installed_here:
                patch.uninstall()

    def check_patch(self, device, log: CaseLog, key: str = "") -> None:
        """Every committed program, then the state machine's runs, with the patch installed."""
        from vllm_hotpaths.swap_states import patch

        patch.install()
        try:
            for case in self.replayed(log):
                log.record(case)
                self.patch_agrees(case, device, log)
            run_machine(machine(self.draws, *self._patch_comparison(log), log, valid_only=True))
        finally:
            patch.uninstall()
