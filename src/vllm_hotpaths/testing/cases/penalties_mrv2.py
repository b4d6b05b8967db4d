"""Model Runner V2 penalties cases: programs of requests entering and leaving slots, with steps.

A `SlotProgram` is plain data (its repr is valid Python, its JSON is a fixture): the vocabulary
size, the slot table's size, the model length and a list of operations:
  ("add", slot, prompt, resumed, penalties)   a request enters a free slot; `resumed`: outputs
                                              from before a preemption; penalties (repetition,
                                              frequency, presence)
  ("remove", slot)
  ("step", batch, seed, share, edits, sampled)
        batch: ((slot, drafts), ...) in the order vLLM scheduled them (its idx_mapping); each
        request gets one logits row plus one per draft (-1: a placeholder draft). Logits from
        `seed` (normal, scale 4), a `share` of lanes then special values, then `edits` =
        ((row, lane, value), ...). After the penalties, `sampled` (one tuple per batch entry:
        accepted drafts then the recovered or bonus token, or nothing) is committed, as vLLM's
        `post_update` does.

`run` replays a program on implementations and yields each step; `SlotPenaltiesChecks` is what
the generic laws run: conformance (and, through `V1OnSlots`, the runner-change law: v1's
penalties reference given the same request streams).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import torch

from vllm_hotpaths.testing.bits import assert_same_bits
from vllm_hotpaths.testing.cases import Ops, note, seeded_logits
from vllm_hotpaths.testing.laws import CaseLog, Checks, Side

OPS = Ops(add="slot prompt resumed penalties", remove="slot", step="batch seed share edits sampled")

SPECIAL_LOGITS = (0.0, -0.0, math.inf, -math.inf, math.nan, 1e-45, -1e-45, 1e-40, -1e-40, 3.4e38, -3.4e38,
                  1.0, -1.0)


@dataclass(frozen=True)
class SlotProgram:
    vocab_size: int
    max_num_reqs: int
    max_model_len: int
    ops: tuple[tuple, ...]

    def implementations(self, *factories, device):
        return [f(self.vocab_size, self.max_num_reqs, self.max_model_len, device) for f in factories]

    def penalties(self) -> list[tuple]:
        """(repetition, frequency, presence) of every request the program admits."""
        return [tuple(add.penalties) for add in OPS.of(self, "add")]


@dataclass
class Step:
    logits: torch.Tensor
    rows: list[int]
    local_pos: list[int]
    input_ids: list[int]
    slots: list[int]  # the step's requests, in batch order
    sampled: list[list[int]]  # what each commits after the penalties


def build_logits(program: SlotProgram, num_rows: int, seed: int, share: float, edits, device) -> torch.Tensor:
    return torch.from_numpy(seeded_logits(num_rows, program.vocab_size, seed, share, edits, SPECIAL_LOGITS)).to(device)


def run(program: SlotProgram, impls, device) -> Iterator[Step]:
    """Apply the program's table operations to every implementation; yield each step (the caller
    penalizes, then commits the step's `sampled`)."""
    history: dict[int, list[int]] = {}
    for op in program.ops:
        if op[0] == "add":
            _, slot, prompt, resumed, penalties = op
            for impl in impls:
                impl.add_request(slot, list(prompt), list(resumed), tuple(penalties))
            history[slot] = list(prompt) + list(resumed)
            if resumed:
                note("a resumed request (outputs at admission)")
        elif op[0] == "remove":
            for impl in impls:
                impl.remove_request(op[1])
            del history[op[1]]
        elif op[0] == "step":
            _, batch, seed, share, edits, sampled = op
            rows, local_pos, input_ids = [], [], []
            for slot, drafts in batch:
                for i, token in enumerate([history[slot][-1], *drafts]):
                    rows.append(slot)
                    local_pos.append(i)
                    input_ids.append(token)
            if any(-1 in drafts for _, drafts in batch):
                note("a -1 draft")
            if any(drafts for _, drafts in batch):
                note("speculative rows")
            if [s for s, _ in batch] != sorted(s for s, _ in batch):
                note("slots out of order in the batch")
            yield Step(build_logits(program, len(rows), seed, share, edits, device), rows, local_pos, input_ids,
                       [s for s, _ in batch], [list(t) for t in sampled])
            for (slot, _), tokens in zip(batch, sampled):
                history[slot].extend(tokens)
        else:
            raise ValueError(f"unknown operation {op!r}")


def assert_same_penalties(program: SlotProgram, expected: Side, actual: Side, device) -> None:
    """At every step, `actual`'s penalized logits == `expected`'s, bit for bit, both in place."""
    first, second = program.implementations(expected.factory, actual.factory, device=device)
    for i, step in enumerate(run(program, (first, second), device)):
        outs = []
        for impl, side in ((first, expected), (second, actual)):
            logits = step.logits.clone()
            out = impl.apply_penalties(logits, step.rows, step.local_pos, step.input_ids)
            assert out is logits, f"step {i}: {side.label} did not penalize the logits in place"
            outs.append(out)
            impl.commit(step.slots, step.sampled)
        assert_same_bits(outs[1], outs[0], f"step {i} ({actual.label} vs {expected.label}): penalized logits "
                                           f"(rows {step.rows}, local_pos {step.local_pos}, input_ids {step.input_ids})")


class V1OnSlots:
    """v1's penalties reference given Model Runner V2's request stream: each logits row becomes a
    v1 row whose output list is the request's outputs plus the drafts before it (v1 lists them so
    for spec decode; its -1 maps to the pad), with the batch's prompts padded, and v1's
    `apply_all_penalties` penalizes the whole batch whenever any request has penalties."""

    def __init__(self, vocab_size: int, max_num_reqs: int, max_model_len: int, device="cpu",
                 v1_version: str | None = None) -> None:
        from vllm_hotpaths import registry

        self.vocab_size, self.device = vocab_size, torch.device(device)
        self.v1 = registry.get("penalties").reference(v1_version)(vocab_size, self.device)
        self.requests: dict[int, tuple[list[int], list[int], tuple]] = {}

    def add_request(self, slot, prompt, resumed, penalties) -> None:
        self.requests[slot] = (list(prompt), list(resumed), tuple(penalties))

    def remove_request(self, slot) -> None:
        del self.requests[slot]

    def commit(self, slots, sampled) -> None:
        for slot, tokens in zip(slots, sampled):
            self.requests[slot][1].extend(tokens)

    def apply_penalties(self, logits, rows, local_pos, input_ids) -> torch.Tensor:
        from vllm_hotpaths.penalties_mrv2 import uses_penalties

        reqs = [self.requests[s] for s in rows]
        if not any(uses_penalties(r[2]) for r in reqs):
            return logits  # v1's sampler skips penalties for a batch without any
        lists = [r[1] + list(input_ids[i - local_pos[i] + 1:i + 1]) for i, r in enumerate(reqs)]
        width = max(len(r[0]) for r in reqs)
        prompts = torch.tensor([r[0] + [self.vocab_size] * (width - len(r[0])) for r in reqs],
                               dtype=torch.int64, device=self.device).reshape(len(reqs), width)
        column = lambda k: torch.tensor([r[2][k] for r in reqs], dtype=torch.float32, device=self.device)  # noqa: E731
        return self.v1.apply_all_penalties(logits, prompts, column(2), column(1), column(0), lists)


class SlotPenaltiesChecks(Checks):
    """Penalized logits bit for bit at every step, on each device (vLLM's kernels interpreted on
    CPU, compiled on CUDA)."""

    hotpath = "penalties_mrv2"
    case_type = SlotProgram
    boundaries = ("speculative rows", "a -1 draft", "a resumed request (outputs at admission)",
                  "a slot reused after a removal", "drafts committed after a step", "slots out of order in the batch")
    triton = True
    law_devices = {**Checks.law_devices, "conformance": ("cpu", "cuda"), "runner-change": ("cpu", "cuda")}

    def cases(self):
        return self.draws.slot_programs()

    def reached(self, case: SlotProgram) -> None:
        for _ in run(case, [], "cpu"):  # the program's own labels; no implementation runs
            pass
        freed: set[int] = set()
        for op in case.ops:
            if op[0] == "remove":
                freed.add(op[1])
            elif op[0] == "add" and op[1] in freed:
                note("a slot reused after a removal")
            elif op[0] == "step" and any(len(tokens) > 1 for tokens in op[5]):
                note("drafts committed after a step")

    def agree(self, case: SlotProgram, expected: Side, actual: Side, device, log: CaseLog) -> None:
        assert_same_penalties(case, expected, actual, device)

    def v1_counterpart(self, vllm_version: str) -> Side:
        """The runner-change law's side: v1's reference for `vllm_version` on the same streams."""
        from functools import partial

        from vllm_hotpaths import registry

        version = registry.get("penalties").reference_version_for(vllm_version)
        return Side(f"v1 penalties reference {version}", partial(V1OnSlots, v1_version=version), version)
