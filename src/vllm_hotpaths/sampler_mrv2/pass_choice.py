"""Which of the two exact passes samples a sampler's next batch: the lazy one (`lazy.lazy_sample`,
noise drawn only for the blocks that can win) or the fused one (`fast.fused_sample`). Both give the
same ids and processed logits bit for bit, so the choice decides only the cost.

The lazy pass reads every block once for its tops, then again each block it draws: it wins on
peaked rows and loses on flat ones, where it draws nearly every block (on an H200, vLLM 0.28.0,
B = 1,024: 0.38-0.40 ms of device time at 5% of the ids drawn, 1.20-1.57 ms at 100%, against the
fused pass's 0.95-1.06 ms; `docs/sampler_mrv2.md#exact-lazy-gumbel`). So a sampler
takes the lazy pass until a lazy batch reads again more than `FLAT_SHARE` of its ids (a greedy
row counts whole), then the fused pass for the next `FUSED_RUN` batches, then looks again with a
lazy batch. A lazy batch's share reaches the host without stopping it: summed on the device,
copied into pinned memory behind an event that is queried, never waited on; the choice reads it
at the first batch after it has landed, and no other is measured until then. The first lazy
batch after a fused run is measured, then one lazy batch in `MEASURE_EVERY` (the sum, the copy
and the event are three calls into CUDA on the host).
"""

from __future__ import annotations

import torch

FLAT_SHARE = 0.5
LAZY_MIN_ROWS = 512  # fewer rows: the lazy pass's host work outweighs what it saves on the device
FUSED_RUN = 256
MEASURE_EVERY = 8
CHOICES = ("lazy", "fused")


class PassChoice:
    """Per sampler. `forced`: "lazy" or "fused" for every batch (the properties, the benchmark),
    or None for the rule above."""

    def __init__(self, forced: str | None = None) -> None:
        self.forced = forced
        self.fused_left = 0  # fused batches before the next lazy one
        self._sum = None  # the measured batch's ids read again (pinned on CUDA)
        self._ids = 0  # ... out of these
        self._landed = None  # the event after its copy (CUDA), None on the CPU
        self._unmeasured = 0  # lazy batches since the last one measured (0: measure the next)

    @property
    def forced(self) -> str | None:
        return self._forced

    @forced.setter
    def forced(self, choice: str | None) -> None:
        if choice is not None and choice not in CHOICES:
            raise ValueError(f"a forced pass is one of {CHOICES} or None, not {choice!r}")
        self._forced = choice

    def lazy_next(self, rows: int) -> bool:
        """Whether the next batch, of `rows` logits rows, takes the lazy pass."""
        if self._forced is not None:
            return self._forced == "lazy"
        if rows < LAZY_MIN_ROWS:
            return False
        if self._ids and (self._landed is None or self._landed.query()):
            if int(self._sum.item()) > FLAT_SHARE * self._ids:
                self.fused_left, self._unmeasured = FUSED_RUN, 0
            self._ids = 0
        if self.fused_left:
            self.fused_left -= 1
            return False
        return True

    def lazy_done(self, drawn: torch.Tensor, ids: int) -> None:
        """After a lazy batch of `ids` ids (rows times the vocabulary): `drawn`, those it read
        again, per row and block (`lazy.lazy_sample`)."""
        if self._forced is not None or self._ids:
            return
        if self._unmeasured:
            self._unmeasured = (self._unmeasured + 1) % MEASURE_EVERY
            return
        self._unmeasured = 1
        total = drawn.sum(dtype=torch.int64)
        if drawn.device.type == "cuda":
            if self._sum is None:
                self._sum = torch.empty((), dtype=torch.int64, pin_memory=True)
            self._sum.copy_(total, non_blocking=True)
            self._landed = torch.cuda.Event()
            self._landed.record()
        else:
            self._sum = total
        self._ids = ids
