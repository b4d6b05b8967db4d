"""Model Runner V2 thinking-budget cases: programs of requests entering and leaving slots, with
steps whose forced end ids the requests obey.

A `ThinkSlotProgram` is plain data (its repr is valid Python, its JSON is a fixture): the three
marker lists (start, forced end, natural end), the vocabulary size, the slot table's size, the
model length and a list of operations:
  ("add", slot, prompt, resumed, budget)   a request enters a free slot; `resumed`: outputs from
                                           before a preemption; budget: an int or None
  ("remove", slot)
  ("step", batch, seed, sampled)
        batch: ((slot, drafts), ...) in the order vLLM scheduled them; each request gets one
        logits row plus one per draft (-1: a placeholder draft). Logits are normal from `seed`.
        After the forcing, each request commits its scripted tokens `sampled` (accepted drafts,
        then a recovered or bonus token; or nothing), except that it obeys: where the expected
        side forced its row j to an id, that id is committed at place j (the script's token
        there if equal, else the forced id, and nothing after it: the drafts after a forced
        place that differs are rejected). So forced end strings get written and continued.

`run` replays a program on implementations; `SlotThinkBudgetChecks` is what the generic laws run:
conformance (bit for bit on the logits) and, through `V1OnSlots`, the runner-change law: v1's
thinking-budget holder given the same request streams.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import torch

from vllm_hotpaths.testing.bits import assert_same_bits
from vllm_hotpaths.testing.cases import Ops, note, seeded_logits
from vllm_hotpaths.testing.laws import CaseLog, Checks, Side
from vllm_hotpaths.think_budget_mrv2 import FORCED_LOGIT, ThinkSlotsConfig

OPS = Ops(add="slot prompt resumed budget", remove="slot", step="batch seed sampled")


@dataclass(frozen=True)
class ThinkSlotProgram:
    start_ids: tuple[int, ...]
    end_ids: tuple[int, ...]  # forced
    natural_end_ids: tuple[int, ...]
    vocab_size: int
    max_num_reqs: int
    max_model_len: int
    ops: tuple[tuple, ...]

    @property
    def config(self) -> ThinkSlotsConfig:
        return ThinkSlotsConfig(self.start_ids, self.end_ids, self.natural_end_ids, self.vocab_size,
                                self.max_num_reqs, self.max_model_len)

    def implementations(self, *factories, device):
        return [f(self.config, device) for f in factories]

    def max_drafts(self) -> int:
        return max((len(drafts) for step in OPS.of(self, "step") for _, drafts in step.batch), default=0)

    def requests(self) -> list[tuple[list[int], list[int], list[int], int | None]]:
        """Every request in admission order: its prompt, its resumed outputs, its scripted commits
        in program order (obeying may replace some by forced ids) and its budget: what ledger
        predicates read."""
        found: list[tuple[list[int], list[int], list[int], int | None]] = []
        live: dict[int, int] = {}
        for op in self.ops:
            if op[0] == "add":
                live[op[1]] = len(found)
                found.append((list(op[2]), list(op[3]), [], op[4]))
            elif op[0] == "remove":
                live.pop(op[1], None)
            elif op[0] == "step":
                for (slot, drafts), tokens in zip(op[1], op[3]):
                    found[live[slot]][2].extend(tokens)
        return found


@dataclass
class Step:
    logits: torch.Tensor
    rows: list[int]
    local_pos: list[int]
    input_ids: list[int]
    slots: list[int]  # the step's requests, in batch order
    drafts: list[list[int]]
    sampled: list[list[int]]  # the scripted commits


def obeyed(scripted: list[int], forced: dict[int, int]) -> list[int]:
    """What a request commits when its rows `forced` ({place: id}) were forced: the forced id at
    each forced place; past a place whose forced id is not the script's token, nothing."""
    out = []
    for place, token in enumerate(scripted):
        want = forced.get(place)
        out.append(token if want is None else want)
        if want is not None and want != token:
            break
    return out


def forced_ids(before: torch.Tensor, after: torch.Tensor) -> dict[int, int]:
    """{row: lane} of the lanes set to the forced value (at most one a row is read)."""
    hit = (after == FORCED_LOGIT) & (before != FORCED_LOGIT)
    return {int(r): int(c) for r, c in hit.nonzero().tolist()}


def run(program: ThinkSlotProgram, impls, device) -> Iterator[Step]:
    """Apply the program's table operations to every implementation; yield each step (the caller
    forces, then commits `Step.sampled` or what it obeys)."""
    history: dict[int, list[int]] = {}
    for op in program.ops:
        if op[0] == "add":
            _, slot, prompt, resumed, budget = op
            for impl in impls:
                impl.add_request(slot, list(prompt), list(resumed), budget)
            history[slot] = list(prompt) + list(resumed)
            if resumed:
                note("a resumed request")
        elif op[0] == "remove":
            for impl in impls:
                impl.remove_request(op[1])
            del history[op[1]]
        elif op[0] == "step":
            _, batch, seed, sampled = op
            rows, local_pos, input_ids = [], [], []
            for slot, drafts in batch:
                for i, token in enumerate([history[slot][-1], *drafts]):
                    rows.append(slot)
                    local_pos.append(i)
                    input_ids.append(token)
            if any(drafts for _, drafts in batch):
                note("speculative rows")
            logits = torch.from_numpy(seeded_logits(len(rows), program.vocab_size, seed, 0.0, (), (0.0,))).to(device)
            step = Step(logits, rows, local_pos, input_ids, [s for s, _ in batch], [list(d) for _, d in batch],
                        [list(t) for t in sampled])
            yield step
            for slot, tokens in zip(step.slots, step.sampled):
                history[slot].extend(tokens)
        else:
            raise ValueError(f"unknown operation {op!r}")


def assert_same_forcing(program: ThinkSlotProgram, expected: Side, actual: Side, device) -> None:
    """At every step, `actual`'s forced logits == `expected`'s, bit for bit, both in place; the
    requests then commit what they obey from the expected side's forcing."""
    first, second = program.implementations(expected.factory, actual.factory, device=device)
    for i, step in enumerate(run(program, (first, second), device)):
        outs = []
        for impl, side in ((first, expected), (second, actual)):
            logits = step.logits.clone()
            out = impl.apply(logits, step.rows, step.local_pos, step.input_ids)
            assert out is logits, f"step {i}: {side.label} did not force the logits in place"
            outs.append(out)
        assert_same_bits(outs[1], outs[0], f"step {i} ({actual.label} vs {expected.label}): forced logits "
                                           f"(rows {step.rows}, local_pos {step.local_pos}, input_ids {step.input_ids})")
        forced = forced_ids(step.logits, outs[0])
        if forced:
            note("a row forced")
            if any(step.local_pos[r] > 0 for r in forced):
                note("a draft row forced")
        first_row, commits = 0, []
        for scripted, drafts in zip(step.sampled, step.drafts):
            mine = {r - first_row: token for r, token in forced.items() if first_row <= r <= first_row + len(drafts)}
            commits.append(obeyed(scripted, mine))
            first_row += len(drafts) + 1
        step.sampled[:] = commits
        for impl in (first, second):
            impl.commit(step.slots, commits)


class V1OnSlots:
    """v1's thinking-budget holder (`think_budget`'s reference) given Model Runner V2's request
    streams, its decisions written as Model Runner V2 writes them. Every step schedules every
    live request (as the programs do); the v1 batch is kept as vLLM's InputBatch keeps it
    (removed, added at the lowest free row, condensed), and the sampler calls the holder as v1's
    does (0.33): without drafts one pass over the committed outputs; in spec mode (the program's
    largest draft count, vLLM's num_speculative_tokens) `update_state` and the bonus pass over
    one row per request (MRv2's row after the request's drafts), then the target pass over one
    row per draft (MRv2's rows 0..drafts-1). Where v1 forces a row, 1e9 goes at that id of the
    matching MRv2 logits row; nothing else is written, so only decisions can differ."""

    def __init__(self, config: ThinkSlotsConfig, device="cpu", v1_version: str | None = None,
                 num_spec_tokens: int = 0) -> None:
        from vllm_hotpaths import registry
        from vllm_hotpaths.think_budget import ThinkConfig

        self.device = torch.device(device)
        self.vocab_size, self.k = config.vocab_size, num_spec_tokens
        self.v1 = registry.get("think_budget").reference(v1_version)(
            ThinkConfig(tuple(config.start_ids), tuple(config.end_ids), config.vocab_size, config.max_num_reqs,
                        num_spec_tokens), self.device)
        self.requests: dict[int, tuple[list[int], list[int], int | None]] = {}  # slot -> prompt, output, budget
        self.rows: list[int | None] = []  # v1 batch row -> slot
        self.removed: list[int] = []
        self.added: list[int] = []

    def add_request(self, slot, prompt, resumed, budget) -> None:
        self.requests[slot] = (list(prompt), list(resumed), budget)
        self.added.append(slot)

    def remove_request(self, slot) -> None:
        del self.requests[slot]
        if slot in self.added:
            self.added.remove(slot)
        else:
            row = self.rows.index(slot)
            self.rows[row] = None
            self.removed.append(row)

    def commit(self, slots, sampled) -> None:
        for slot, tokens in zip(slots, sampled):
            self.requests[slot][1].extend(tokens)

    def _sync(self) -> None:
        from vllm_hotpaths.think_budget import BatchUpdate, Move, Params

        added = []
        for slot in self.added:
            holes = [i for i, s in enumerate(self.rows) if s is None]
            row = holes[0] if holes else len(self.rows)
            if row in self.removed:
                self.removed.remove(row)  # a reused row is not reported removed
            if row == len(self.rows):
                self.rows.append(slot)
            else:
                self.rows[row] = slot
            prompt, output, budget = self.requests[slot]
            added.append((row, Params(budget), prompt, output))
        moved = []
        while None in self.rows:
            hole = self.rows.index(None)
            last = max((i for i, s in enumerate(self.rows) if s is not None), default=-1)
            if last < hole:
                del self.rows[hole:]
                break
            self.rows[hole], self.rows[last] = self.rows[last], None
            moved.append((last, hole, Move.UNIDIRECTIONAL))
        if self.removed or added or moved:
            self.v1.sync_batch(BatchUpdate(len(self.rows), sorted(self.removed, reverse=True), added, moved))
        self.removed, self.added = [], []

    def apply(self, logits, rows, local_pos, input_ids) -> torch.Tensor:
        self._sync()
        first = {}  # slot -> its first MRv2 logits row
        drafts: dict[int, list[int]] = {}
        for i, (slot, place) in enumerate(zip(rows, local_pos)):
            if place == 0:
                first[slot], drafts[slot] = i, []
            else:
                drafts[slot].append(int(input_ids[i]))
        if sorted(first) != sorted(self.rows):  # a program error, not a difference
            raise ValueError("V1OnSlots needs every live request scheduled at every step")
        outputs = [self.requests[s][1] for s in self.rows]
        spec = [drafts[s] for s in self.rows]
        vocab, n = self.vocab_size, len(self.rows)
        if not self.k:
            if self.v1.has_tracked_requests():
                self.v1.update_state(outputs, spec)
                self._write(logits, self.v1.apply_to_logits(torch.zeros(n, vocab, device=self.device), False, spec),
                            [first[s] for s in self.rows])
            return logits
        if self.v1.has_tracked_requests():
            self.v1.update_state(outputs, spec)
            self._write(logits, self.v1.apply_to_logits(torch.zeros(n, vocab, device=self.device), True, spec),
                        [first[s] + len(drafts[s]) for s in self.rows])
        if self.v1.has_tracked_requests():
            targets = [first[s] + j for s in self.rows for j in range(len(drafts[s]))]
            self._write(logits, self.v1.apply_to_logits(torch.zeros(len(targets), vocab, device=self.device),
                                                        False, spec), targets)
        return logits

    @staticmethod
    def _write(logits: torch.Tensor, v1_logits: torch.Tensor, mrv2_rows: list[int]) -> None:
        for row, lane in forced_ids(torch.zeros_like(v1_logits), v1_logits).items():
            logits[mrv2_rows[row], lane] = FORCED_LOGIT


class SlotThinkBudgetChecks(Checks):
    """Forced logits bit for bit at every step, on each device (vLLM's kernels interpreted on
    CPU, compiled on CUDA), the requests obeying the expected side's forcing."""

    hotpath = "think_budget_mrv2"
    case_type = ThinkSlotProgram
    boundaries = ("a row forced", "a draft row forced", "a resumed request", "speculative rows", "prompt: in think",
                  "prompt: partial start", "prompt: partial end", "a marker list missing (budget not enforced)")
    triton = True
    law_devices = {**Checks.law_devices, "conformance": ("cpu", "cuda"), "runner-change": ("cpu", "cuda")}

    def cases(self):
        return self.draws.think_slot_programs()

    def reached(self, case: ThinkSlotProgram) -> None:
        from vllm_hotpaths import registry
        from vllm_hotpaths.think_budget_mrv2.reference import forced_end_id

        reference = registry.get(self.hotpath).reference()
        if case.config.enabled:  # the reference on both sides notes the rows it forces
            side = Side("reference", reference, "")
            assert_same_forcing(case, side, side, "cpu")
            return
        if not (case.start_ids and case.end_ids):
            return
        # No natural end: upstream forces nothing; would a budget with no end marker force a row?
        impl = reference(case.config, "cpu")
        for step in run(case, [impl], "cpu"):
            for i, slot in enumerate(step.rows):
                request = impl.slots[slot]
                tokens = impl.sequence(request, step.input_ids, i, step.local_pos[i])
                if request.budget is not None and forced_end_id(tokens, case.start_ids, case.end_ids, (-1,),
                                                                request.budget) is not None:
                    note("no natural end marker: a budgeted row past its budget (not forced)")
            impl.commit(step.slots, step.sampled)

    def agree(self, case: ThinkSlotProgram, expected: Side, actual: Side, device, log: CaseLog) -> None:
        def sized(side: Side) -> Side:  # the v1 side's spec mode follows the program
            if getattr(side.factory, "func", None) is V1OnSlots:
                from functools import partial

                return Side(side.label, partial(side.factory, num_spec_tokens=case.max_drafts()), side.version)
            return side

        assert_same_forcing(case, sized(expected), sized(actual), device)

    def v1_counterpart(self, vllm_version: str) -> Side:
        """The runner-change law's side: v1's holder reference for `vllm_version` on the same streams."""
        from functools import partial

        from vllm_hotpaths import registry

        version = registry.get("think_budget").reference_version_for(vllm_version)
        return Side(f"v1 think_budget reference {version}", partial(V1OnSlots, v1_version=version), version)
