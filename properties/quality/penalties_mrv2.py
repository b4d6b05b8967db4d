"""Deliberately wrong Model Runner V2 penalties references: each must fail conformance.

There is no fast path to plant a bug in, so each is checked in place of the frozen reference:
`pytest properties/test_conformance.py -k "penalties_mrv2 and cpu"
--reference penalties_mrv2@0.16.0=properties.quality.penalties_mrv2:NAME`. `tests/test_quality.py`
runs the CPU ones (kernels interpreted); `ExactDivision` and `UnfusedFrequency` differ only where
Triton's arithmetic is not IEEE's: on CUDA (ci/gpu/cuda-suite.sh, PARTS=quality).
"""

from __future__ import annotations

import numpy as np
import torch

from vllm_hotpaths.penalties_mrv2 import uses_penalties
from vllm_hotpaths.penalties_mrv2.reference import SlotPenalties, penalize_rows_


class CountsPlaceholderDrafts(SlotPenalties):
    """Counts a -1 draft, which NumPy's negative indexing sends to the last lane."""

    def apply_penalties(self, logits, rows, local_pos, input_ids):
        rows, local_pos, input_ids = self.check_step(logits, rows, local_pos, input_ids)
        states = [self.slots[int(s)] for s in rows]
        if not any(uses_penalties(s.penalties) for s in states):
            return logits
        counts = np.zeros((len(rows), self.vocab_size), dtype=np.int32)
        prompt = np.zeros((len(rows), self.vocab_size), dtype=np.int8)
        for i, state in enumerate(states):
            counts[i] = state.counts
            np.add.at(counts[i], input_ids[i - local_pos[i] + 1:i + 1], 1)
            prompt[i] = state.prompt
        return penalize_rows_(logits, counts, prompt, [s.penalties for s in states])


class DraftsFromRowZero(SlotPenalties):
    """Counts the drafts from the request's first row on, so the last committed token (row 0's
    input) is counted twice: the double count reviewed in vLLM PR #33251."""

    def apply_penalties(self, logits, rows, local_pos, input_ids):
        rows, local_pos, input_ids = self.check_step(logits, rows, local_pos, input_ids)
        shifted = input_ids.copy()
        for i in range(len(rows)):
            if local_pos[i] > 0:
                shifted[i] = input_ids[i - 1]  # row i now brings the token of the row before it
        return super().apply_penalties(logits, rows, local_pos, shifted)


class ResumedNotCounted(SlotPenalties):
    """Ignores the outputs a resumed request brings (counts only what it commits afterwards)."""

    def add_request(self, slot, prompt, resumed, penalties):
        super().add_request(slot, prompt, resumed, penalties)
        self.slots[slot].counts[:] = 0


class StaleCountsOnReuse(SlotPenalties):
    """Keeps a freed slot's counts for the next request admitted there (no clearing at admission)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.left: dict[int, np.ndarray] = {}

    def remove_request(self, slot):
        self.left[slot] = self.slots[slot].counts
        super().remove_request(slot)

    def add_request(self, slot, prompt, resumed, penalties):
        super().add_request(slot, prompt, resumed, penalties)
        if slot in self.left:
            self.slots[slot].counts += self.left.pop(slot)


class ExactDivision(SlotPenalties):
    """Repetition in PyTorch (`x * (1 / p)`, an IEEE reciprocal), the rest in the kernel: equal
    to Model Runner V2 in the interpreter, not where Triton's `1.0 / p` is approximate."""

    def _penalize(self, logits, counts, prompt, penalties):
        seen = torch.from_numpy((counts > 0) | (prompt != 0)).to(logits.device)
        rep = torch.tensor([p[0] for p in penalties], dtype=torch.float32, device=logits.device)[:, None]
        scale = torch.where(seen, rep, 1.0)
        logits *= torch.where(logits > 0, 1.0 / scale, scale)
        return penalize_rows_(logits, counts, prompt, [(1.0, f, p) for _, f, p in penalties])


class UnfusedFrequency(SlotPenalties):
    """The kernel compiled without fusing `x - f * count` into one multiply-add (two roundings)."""

    def _penalize(self, logits, counts, prompt, penalties):
        launch = {} if not logits.is_cuda else {"enable_fp_fusion": False}
        return penalize_rows_(logits, counts, prompt, penalties, **launch)


# name -> the devices it shows on (all: reference version 0.22.0, law conformance)
MUTANTS = {
    "CountsPlaceholderDrafts": "cpu cuda",
    "DraftsFromRowZero": "cpu cuda",
    "ResumedNotCounted": "cpu cuda",
    "StaleCountsOnReuse": "cpu cuda",
    "ExactDivision": "cuda",
    "UnfusedFrequency": "cuda",
}
