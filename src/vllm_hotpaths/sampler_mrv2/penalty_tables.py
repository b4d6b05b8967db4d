"""Penalty state of the penalized requests only (`CompactCounts`), and the device operations the
plugin runs on it in place of the ones upstream runs on its dense tables.

Upstream's `PenaltiesState` holds an int32 count table `[max_num_reqs, V]` and a prompt bitmask
`[max_num_reqs, ceil(V / 32)]` from engine start, and writes every request's row. Only the rows of
requests with a penalty are ever read: a row is rebuilt from the request's tokens when a
penalized request is admitted (`bincount`), and only penalized rows are penalized. So a table
with one row per penalized request gives the same penalties:

- `admit`: upstream's `bincount` for newly admitted penalized slots (prompt ids into the bitmask,
  the tokens after the prompt into the counts), into their compact rows;
- `count_sampled`: the counting part of upstream's `post_update` (each sampled token of the step
  adds one to its id's count), for penalized slots only;
- `fast.penalize_in_place`: upstream's penalties kernel, reading the compact rows.
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

ADMIT_BLOCK = 1024  # tokens per program of `_admit_kernel`


@triton.jit
def _admit_kernel(slot_ptr, pen_row_ptr, token_ids_ptr, token_ids_stride, prompt_len_ptr, prefill_len_ptr, counts_ptr,
                  prompt_bits_ptr, words, vocab_size, BLOCK: tl.constexpr):
    # One program per (admitted slot, block of its prefill tokens): ids before `prompt_len` set
    # their prompt bit, ids from there to `prefill_len` add to their count (rows zeroed before).
    slot = tl.load(slot_ptr + tl.program_id(0))
    row = tl.load(pen_row_ptr + slot).to(tl.int64)
    prompt_len = tl.load(prompt_len_ptr + slot)
    prefill_len = tl.load(prefill_len_ptr + slot)
    where = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    present = where < prefill_len
    ids = tl.load(token_ids_ptr + slot.to(tl.int64) * token_ids_stride + where, mask=present, other=0)
    in_prompt = present & (where < prompt_len)
    tl.atomic_or(prompt_bits_ptr + row * words + ids // 32, tl.full((BLOCK,), 1, tl.int32) << (ids % 32),
                 mask=in_prompt)
    tl.atomic_add(counts_ptr + row * vocab_size + ids, 1, mask=present & (where >= prompt_len))


@triton.jit
def _count_sampled_kernel(idx_mapping_ptr, pen_row_ptr, sampled_ptr, sampled_stride, num_sampled_ptr, counts_ptr,
                          vocab_size):
    # One program per request of the step; its sampled tokens in order (an id may repeat). A
    # padded request (slot -1, vLLM 0.23 on) counts nothing, as upstream's `post_update` skips it.
    req = tl.program_id(0)
    slot = tl.load(idx_mapping_ptr + req)
    row = tl.load(pen_row_ptr + slot, mask=slot >= 0, other=-1).to(tl.int64)
    if row >= 0:
        for i in range(tl.load(num_sampled_ptr + req)):
            token = tl.load(sampled_ptr + req * sampled_stride + i)
            at = counts_ptr + row * vocab_size + token
            tl.store(at, tl.load(at) + 1)


class CompactCounts:
    """Int32 output counts `[capacity, V]` and a prompt bitmask `[capacity, ceil(V / 32)]` (bit
    i % 32 of word i // 32 for id i), one row per penalized request (`row_of[slot]`, -1 for the
    others). Nothing is allocated until the first penalized request; capacity then doubles as
    needed, up to `max_num_reqs` rows (upstream's dense tables hold that many always), and goes
    back to nothing when no slot holds a row (`release_vacated`)."""

    def __init__(self, vocab_size: int, max_num_reqs: int, device: torch.device) -> None:
        self.vocab_size, self.max_num_reqs, self.device = vocab_size, max_num_reqs, torch.device(device)
        self.words = triton.cdiv(vocab_size, 32)
        self.row_of = np.full(max_num_reqs, -1, dtype=np.int32)
        self.row_of_device = torch.full((max_num_reqs,), -1, dtype=torch.int32, device=self.device)
        self.free: list[int] = []
        self.counts = torch.zeros((0, vocab_size), dtype=torch.int32, device=self.device)
        self.prompt_bits = torch.zeros((0, self.words), dtype=torch.int32, device=self.device)

    @property
    def nbytes(self) -> int:
        return self.counts.numel() * 4 + self.prompt_bits.numel() * 4

    def _resize(self, rows: int) -> None:
        """Tables of `rows` rows, the first rows of the old ones kept."""
        held = min(rows, self.counts.shape[0])
        for name in ("counts", "prompt_bits"):
            old = getattr(self, name)
            new = torch.zeros((rows, old.shape[1]), dtype=torch.int32, device=self.device)
            new[:held] = old[:held]
            setattr(self, name, new)

    def assign(self, slot: int) -> int:
        """A row for `slot` (its own if it holds one), its contents left as they are."""
        row = int(self.row_of[slot])
        if row < 0:
            if not self.free:
                old = self.counts.shape[0]
                self._resize(min(max(2 * old, 1), self.max_num_reqs))
                self.free = list(range(self.counts.shape[0] - 1, old - 1, -1))
            row = self.free.pop()
            self.row_of[slot] = row
            self.row_of_device[slot] = row
        return row

    def remove(self, slot: int) -> None:
        row = int(self.row_of[slot])
        if row >= 0:
            self.free.append(row)
            self.row_of[slot] = -1
            self.row_of_device[slot] = -1

    def release_vacated(self, occupied) -> None:
        """Free the rows of slots not in `occupied` (the slots of the requests present); with no
        row left held, the tables go. One host pass and one device write, however many rows."""
        if not self.counts.shape[0]:
            return
        present = np.zeros(self.max_num_reqs, dtype=bool)
        present[np.fromiter(occupied, dtype=np.int64, count=len(occupied))] = True
        held = self.row_of >= 0
        vacated = np.flatnonzero(held & ~present)
        if vacated.size == np.count_nonzero(held):  # none left (or none held since `remove`s)
            self.row_of[:], self.free = -1, []
            self.row_of_device.fill_(-1)
            self._resize(0)
            return
        if not vacated.size:
            return
        self.free.extend(self.row_of[vacated].tolist())
        self.row_of[vacated] = -1
        self.row_of_device[torch.from_numpy(vacated).to(self.device)] = -1

    def add(self, slot: int, prompt, output) -> None:
        """A penalized request's row from its token lists (host side)."""
        row = self.assign(slot)
        counts = np.bincount(np.asarray(output, dtype=np.int64), minlength=self.vocab_size).astype(np.int32)
        self.counts[row] = torch.from_numpy(counts).to(self.device)
        bits = np.zeros(self.words * 32, dtype=bool)
        bits[np.asarray(prompt, dtype=np.int64)] = True
        words = np.packbits(bits.reshape(-1, 32), axis=1, bitorder="little").view("<u4").view(np.int32).ravel()
        self.prompt_bits[row] = torch.from_numpy(words).to(self.device)

    def append(self, slot: int, tokens) -> None:
        row = int(self.row_of[slot])
        if row >= 0 and len(tokens):
            ids = torch.as_tensor(np.asarray(tokens, dtype=np.int64), device=self.device)
            self.counts[row].index_put_((ids,), torch.ones_like(ids, dtype=torch.int32), accumulate=True)

    def admit(self, slots: torch.Tensor, token_ids: torch.Tensor, prompt_len: torch.Tensor,
              prefill_len: torch.Tensor, max_prefill_len: int) -> None:
        """Rebuild the rows of `slots` (int32 on the device, each holding a row) from their tokens
        as upstream's `bincount` does: `token_ids[slot, :prompt_len]` are the prompt,
        `[prompt_len:prefill_len]` the output so far."""
        rows = self.row_of_device[slots.long()].long()
        self.counts.index_fill_(0, rows, 0)
        self.prompt_bits.index_fill_(0, rows, 0)
        blocks = triton.cdiv(max_prefill_len, ADMIT_BLOCK)
        if slots.shape[0] and blocks:
            _admit_kernel[(slots.shape[0], blocks)](
                slots, self.row_of_device, token_ids, token_ids.stride(0), prompt_len, prefill_len, self.counts,
                self.prompt_bits, self.words, self.vocab_size, BLOCK=ADMIT_BLOCK)

    def count_sampled(self, idx_mapping: torch.Tensor, sampled: torch.Tensor, num_sampled: torch.Tensor) -> None:
        """Add the step's sampled tokens (`sampled[i, :num_sampled[i]]` for slot `idx_mapping[i]`)
        to the penalized slots' counts."""
        if self.counts.shape[0] and idx_mapping.shape[0]:
            _count_sampled_kernel[(idx_mapping.shape[0],)](
                idx_mapping, self.row_of_device, sampled, sampled.stride(0), num_sampled, self.counts,
                self.vocab_size, num_warps=1)
