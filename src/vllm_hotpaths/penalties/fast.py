"""Penalties with a persistent output-token staging tensor updated with new tokens only.

Upstream rebuilds the padded `[B, max_len]` int64 tensor from Python lists every step: O(B * L)
work per step, L the longest output. Here each batch row has a persistent staging row on the
target device that mirrors its output list (`-1` stored as the pad V, V beyond the list's end).
Lists that are `TrackedTokenList`s report the lowest index changed since the last step, so a step
writes only the changed tail: one appended token per row in steady decoding, a replaced run after
an async placeholder repair, pads after a trim. The result is a view of the staging rows, so the
per-step host cost depends on B and on the tokens that changed, not on L.

Row identity decides what the staging row can vouch for:
- the same tracked list as last step -> update from its change mark;
- a tracked list that last step sat in another staging row (swap, condense) -> copy that staging
  row over, then update from the change mark;
- anything else (a plain list, a list combined with spec drafts, a list seen twice) -> that row is
  rebuilt from the list, exactly as the reference does.
The steady decode step (every row the list it mirrored, unchanged in place, one token longer) is
recognised with a few whole-batch checks, without a per-row Python loop; its one new id per row is
written by a scatter, or, when the fused kernels penalize next, by their counting kernel.
The penalty arithmetic is upstream's: on contiguous CUDA logits in two fused kernels (`fused`),
elsewhere the reference's torch code.
"""

from __future__ import annotations

import collections
import itertools
import operator
from typing import Sequence

import numpy as np
import torch

from vllm_hotpaths.penalties import fused
from vllm_hotpaths.penalties.reference import (InvalidTokenId, apply_penalties_, check_logits, repair_placeholders,
                                                 token_array)
from vllm_hotpaths.tracked_list import UNCHANGED, TrackedTokenList

_WATCHER_KEYS = itertools.count(1)
# Staging capacity without a batch hint (vLLM's plugin gives none): it grows past it by doubling.
DEFAULT_ROWS, DEFAULT_COLS = 8, 64
_seen = operator.attrgetter("seen")


class IncrementalPenalties:
    def __init__(self, vocab_size: int, device: torch.device | str = "cpu", batch=None) -> None:
        self.vocab_size = vocab_size
        self.device = torch.device(device)
        rows = max(1, int(getattr(batch, "max_num_reqs", 0) or DEFAULT_ROWS))
        cols = max(1, int(getattr(batch, "max_model_len", 0) or DEFAULT_COLS))
        self._staging = torch.full((rows, cols), vocab_size, dtype=torch.int64, device=self.device)
        self._owner: list[TrackedTokenList | None] = [None] * rows  # list mirrored by each row
        self._synced: list[int] = [0] * rows  # leading columns holding list content; V after
        self._home: dict[int, int] = {}  # id(owned list) -> its staging row
        self._key = next(_WATCHER_KEYS)
        self._counts = torch.zeros(0, dtype=torch.int32, device=self.device)  # fused kernels' scratch

    # -- capacity ---------------------------------------------------------------------------
    def _grow(self, rows: int, cols: int) -> None:
        old_rows, old_cols = self._staging.shape
        rows, cols = max(rows, old_rows), max(cols, old_cols)
        if (rows, cols) == (old_rows, old_cols):
            return
        rows = max(rows, 2 * old_rows) if rows > old_rows else rows
        cols = max(cols, 2 * old_cols) if cols > old_cols else cols
        grown = torch.full((rows, cols), self.vocab_size, dtype=torch.int64, device=self.device)
        grown[:old_rows, :old_cols] = self._staging
        self._staging = grown
        self._owner += [None] * (rows - old_rows)
        self._synced += [0] * (rows - old_rows)

    # -- the builder ------------------------------------------------------------------------
    def output_tokens(self, rows: Sequence[Sequence[int]]) -> torch.Tensor:
        tokens, new = self.build(rows)
        if new is not None:
            self._write_one_per_row(*new)
        return tokens

    def build(self, rows: Sequence[Sequence[int]]) -> tuple[torch.Tensor, tuple[list, list] | None]:
        """The output-token tensor, and a steady step's new ids not yet in it: (columns, ids),
        one per row, or None. Pass them on to `penalize`, which writes them (on CUDA, in the
        fused counting kernel: no write of its own)."""
        steady = self._steady_step(rows)
        if steady is not None:
            return steady
        num_rows = len(rows)
        self._grow(num_rows, 1)
        pad, key = self.vocab_size, self._key
        owner, synced, home = self._owner, self._synced, self._home
        vals: list = []  # new values, their rows and columns, in (row, column) order
        val_rows: list[int] = []
        val_cols: list[int] = []
        move_src: list[int] = []
        move_dst: list[int] = []
        claims: list[tuple[int, object]] = []  # (row, list or None) ownership changes
        claimed: set[int] = set()  # ids of lists claimed by some row in this call
        lengths = [0] * num_rows
        max_len = 0

        for r in range(num_rows):
            lst = rows[r]
            n = len(lst)
            lengths[r] = n
            if n > max_len:
                max_len = n
            if lst is owner[r]:
                old = synced[r]
                start = min(lst._marks.get(key, 0), old)
            else:
                s = home.get(id(lst)) if type(lst) is TrackedTokenList else None
                movable = (
                    s is not None
                    and owner[s] is lst
                    and not (s < num_rows and rows[s] is lst)  # also in its own row: a duplicate
                    and id(lst) not in claimed
                )
                if movable:
                    move_src.append(s)
                    move_dst.append(r)
                    old = synced[s]
                    start = min(lst._marks.get(key, 0), old)
                    claims.append((r, lst))
                    claimed.add(id(lst))
                else:
                    start, old = 0, synced[r]
                    trackable = type(lst) is TrackedTokenList and s is None and id(lst) not in claimed
                    claims.append((r, lst if trackable else None))
                    if trackable:
                        claimed.add(id(lst))
            if start < n:
                if n - start == 1:
                    vals.append(lst[start])
                    val_rows.append(r)
                    val_cols.append(start)
                else:
                    vals += lst[start:n]
                    val_rows += [r] * (n - start)
                    val_cols += range(start, n)
            if n < old:
                vals += [pad] * (old - n)
                val_rows += [r] * (old - n)
                val_cols += range(n, old)

        values = self._checked_values(vals, val_rows, val_cols)
        self._grow(num_rows, max_len)
        if move_src:
            self._staging[move_dst] = self._staging[move_src]  # gathers first: safe for swaps
        self._write(val_rows, val_cols, values)
        self._commit(rows, lengths, move_src, claims)
        return self._staging[:num_rows, :max_len], None

    def _steady_step(self, rows: Sequence[Sequence[int]]) -> tuple[torch.Tensor, tuple[list, list]] | None:
        """The usual decode step, or None when it is not one: every row is the tracked list it
        mirrored last step, nothing it synced has changed (a placeholder repaired past it is new
        content), and it grew by exactly one token. Only the new last tokens are new: returned,
        not yet written."""
        num_rows = len(rows)
        owner, key = self._owner, self._key
        if not num_rows or num_rows > len(owner) or not all(map(operator.is_, rows, owner)):
            return None
        synced = self._synced[:num_rows]
        if not all(map(operator.ge, [lst._marks.get(key, -1) for lst in rows], synced)):
            return None
        lengths = list(map(len, rows))
        if list(map(operator.sub, lengths, synced)).count(1) != num_rows:
            return None
        values = list(map(operator.itemgetter(-1), rows))
        if set(map(type, values)) != {int} or not -1 <= min(values) <= max(values) <= self.vocab_size:
            values = self._checked_values(values, range(num_rows), synced)  # raises on a bad id
        elif -1 in values:
            values = [self.vocab_size if v == -1 else v for v in values]
        max_len = max(lengths)
        self._grow(num_rows, max_len)
        self._synced[:num_rows] = lengths
        for lst, n in zip(rows, lengths):  # lst.watch(key), inlined
            lst._marks[key] = UNCHANGED
            if n > lst.seen:
                lst.seen = n
        return self._staging[:num_rows, :max_len], (synced, values)

    def _write(self, val_rows, val_cols, values: np.ndarray | None) -> None:
        """staging[val_rows[j], val_cols[j]] = values[j]: one indexed write (one copy to the device)."""
        if values is None:
            return
        if self.device.type == "cpu":
            self._staging.numpy()[val_rows, val_cols] = values
            return
        packed = torch.from_numpy(np.array([val_rows, val_cols, values], dtype=np.int64))
        packed = packed.to(self.device, non_blocking=True)
        self._staging.index_put_((packed[0], packed[1]), packed[2])

    def _write_one_per_row(self, cols: list[int], values: Sequence[int]) -> None:
        """staging[r, cols[r]] = values[r] for r < len(cols): the steady step's write, one
        column per row (a scatter along rows, cheaper on the host than a two-index put)."""
        if self.device.type == "cpu":
            self._staging.numpy()[np.arange(len(cols)), cols] = values
            return
        packed = self._on_device(cols, values)
        self._staging[: len(cols)].scatter_(1, packed[0, :, None], packed[1, :, None])

    def _on_device(self, cols: list[int], values: Sequence[int]) -> torch.Tensor:
        """(cols, values) as one int64 `[2, n]` tensor on the device: one copy."""
        return torch.from_numpy(np.array((cols, values), dtype=np.int64)).to(self.device, non_blocking=True)

    def _checked_values(self, vals: list, val_rows: list[int], val_cols: list[int]) -> np.ndarray | None:
        """New values as int64 with -1 mapped to the pad; raises like the reference on bad ids."""
        if not vals:
            return None
        values, invalid = token_array(vals, self.vocab_size)
        if invalid is not None:
            j, value = invalid
            raise InvalidTokenId(val_rows[j], val_cols[j], value, self.vocab_size)
        values[values == -1] = self.vocab_size
        return values

    def _commit(self, rows, lengths: list[int], move_src: list[int], claims) -> None:
        owner, home, key = self._owner, self._home, self._key
        for s in move_src:  # a moved list leaves its old row
            if home.get(id(owner[s])) == s:
                del home[id(owner[s])]
            owner[s] = None
        for r, lst in claims:
            previous = owner[r]
            if previous is not None and home.get(id(previous)) == r:
                del home[id(previous)]
            owner[r] = lst
            if lst is not None:
                home[id(lst)] = r
        self._synced[: len(lengths)] = lengths
        for lst, mirrored in zip(rows, owner):
            if lst is mirrored:
                lst.watch(key)

    # -- the hot path -----------------------------------------------------------------------
    def apply_all_penalties(self, logits, prompt_tokens, presence, frequency, repetition, rows):
        check_logits(logits, self.vocab_size)
        tokens, new = self.build(rows)
        return self.penalize(logits, prompt_tokens, tokens, presence, frequency, repetition, new=new)

    def penalize(self, logits, prompt_tokens, output_tokens, presence, frequency, repetition,
                 fallback=apply_penalties_, new: tuple[list, list] | None = None) -> torch.Tensor:
        """Upstream's `apply_penalties` on the built tensor, once `new` (from `build`) is in it:
        the fused kernels where they fit, else `fallback` (the reference's torch code, or the
        plugin's upstream function)."""
        args = (logits, prompt_tokens, output_tokens, presence, frequency, repetition)
        if not fused.fits(*args):
            if new is not None:
                self._write_one_per_row(*new)
            return fallback(*args)
        if self._counts.numel() < logits.numel():  # the kernels' all-zero int32 scratch
            self._counts = torch.zeros(logits.numel(), dtype=torch.int32, device=self.device)
        return fused.apply_penalties(*args, self._counts, new=None if new is None else self._on_device(*new))


def repair_placeholders_in_bulk(batch) -> None:
    """`reference.repair_placeholders` with the usual decode step done with whole-batch checks:
    no speculative decoding (one id sampled per row), every request ran in the previous step,
    every output list ends in exactly one placeholder and its sampled id is valid. Each list's
    placeholder then takes its id by item assignment (a `TrackedTokenList` lowers its watchers'
    marks to that index, as the reference's slice assignment does); when every list is a
    `TrackedTokenList` whose placeholder no watcher has seen, in one C-level pass that skips the
    lists' own `__setitem__`. Any other step, and any step whose checks fail, goes to the
    reference's loop; no list changes before the checks pass."""
    rows = batch.sampling_metadata.output_token_ids
    sampled = batch.sampled_token_ids_cpu
    previous, req_ids = batch.prev_req_id_to_index, batch.req_ids
    steady = (sampled is not None and rows and previous is not None and req_ids
              and sampled.dim() == 2 and sampled.shape[1] == 1 and len(rows) >= len(req_ids))
    if not steady:
        return repair_placeholders(batch)
    indices = list(map(previous.get, req_ids))
    outputs = rows[: len(req_ids)]
    try:
        ends = list(map(operator.itemgetter(-1), outputs))
        before_ends = list(map(operator.itemgetter(-2), outputs))  # a 1-token list: IndexError
    except IndexError:
        return repair_placeholders(batch)
    if (ends.count(-1) != len(ends) or -1 in before_ends or set(map(type, indices)) != {int}
            or not -sampled.shape[0] <= min(indices) <= max(indices) < sampled.shape[0]):
        return repair_placeholders(batch)  # also a request new to the batch (its index is None)
    batch.async_copy_ready_event.synchronize()
    column = sampled[:, 0].tolist()
    new_ids = list(map(column.__getitem__, indices))
    if -1 in new_ids:  # a discarded sample: the reference drops that placeholder
        return repair_placeholders(batch, sampled.tolist())
    if (set(map(type, outputs)) == {TrackedTokenList}
            and all(map(operator.lt, map(_seen, outputs), map(len, outputs)))):
        # No watcher synced any placeholder (the usual step): a change past `seen` lowers no mark.
        collections.deque(map(list.__setitem__, outputs, itertools.repeat(-1), new_ids), maxlen=0)
        return
    for output, token in zip(outputs, new_ids):
        output[-1] = token
