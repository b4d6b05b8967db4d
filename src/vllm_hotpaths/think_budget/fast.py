"""Thinking budget with marker search in O(new tokens) per step, exactly equal to the references.

Upstream searches the whole output backwards for the start and end markers at every step until it
finds them. Here each row keeps, per marker, a *claim*: "no occurrence starts in [lo, hi - m]",
valid while the output's first `hi` tokens are unchanged. A search then only looks at starts
past the claim (which includes the m - 1 starts that straddle the old boundary) and below it
when the search begins lower, and returns exactly what the full search returns.

What makes that exact is knowing the lowest position that changed since the last step:
- a `TrackedTokenList` row says so itself (O(1));
- any other row is compared with a private copy of what was searched (a C-speed list compare).
A claim is cut back to that position, so shrinking outputs (spec rejection, KV-load discard,
placeholder trim), placeholders replaced by real ids (interior or trailing, marker ids included),
and a state fed a different list (row moves, the shared SWAP state before 0.28) are all rescanned
where they changed. The state machine is the reference's own; only the four output hooks differ.
"""

from __future__ import annotations

import itertools
from typing import Sequence

from vllm_hotpaths.think_budget.reference import (ThinkBudgetReference, ThinkBudgetReference023,
                                                  ThinkBudgetReference025, ThinkBudgetReference026,
                                                  ThinkBudgetReference028, find_last)
from vllm_hotpaths.tracked_list import TrackedTokenList

_watcher_keys = itertools.count(1 << 40)  # apart from other watchers' keys


def common_prefix(row: Sequence[int], copy: list[int], limit: int) -> int:
    """Length of the longest equal prefix of row[:limit] and copy[:limit]."""
    if row[:limit] == (copy if limit == len(copy) else copy[:limit]):
        return limit
    lo, hi = 0, limit  # row[:lo] equals, row[:hi] does not
    while hi - lo > 32:
        mid = (lo + hi) // 2
        if row[lo:mid] == copy[lo:mid]:
            lo = mid
        else:
            hi = mid
    while row[lo] == copy[lo]:
        lo += 1
    return lo


class RowScan:
    """What one state has searched: the list and length it saw, and the per-marker claims."""

    __slots__ = ("row", "n", "copy", "key", "claims")

    def __init__(self) -> None:
        self.row: Sequence[int] | None = None
        self.n = 0
        self.copy: list[int] | None = None  # rows that are not TrackedTokenList
        self.key = next(_watcher_keys)
        self.claims: dict[int, tuple[int, int]] = {}  # id(marker) -> (lo, hi)

    def forget(self) -> None:
        if isinstance(self.row, TrackedTokenList):
            self.row.unwatch(self.key)
        self.row, self.n, self.copy = None, 0, None
        self.claims.clear()

    def _unchanged_prefix(self, row: Sequence[int], n: int) -> int:
        limit = min(self.n, n)
        if limit == 0:
            return 0
        if isinstance(row, TrackedTokenList):
            if row is not self.row:
                return 0
            dirty = row.dirty_from(self.key)
            return 0 if dirty is None else min(dirty, limit)
        if self.copy is None:
            return 0
        return common_prefix(row, self.copy, limit)

    def take(self, row: Sequence[int], n: int) -> None:
        """The output is now row[:n]: cut the claims back to where it changed."""
        stable = self._unchanged_prefix(row, n)
        for marker, (lo, hi) in list(self.claims.items()):
            if hi > stable:
                self.claims[marker] = (lo, stable)
        if isinstance(self.row, TrackedTokenList) and self.row is not row:
            self.row.unwatch(self.key)
        if isinstance(row, TrackedTokenList):
            row.watch(self.key)
            self.copy = None
        else:
            copy = self.copy if self.copy is not None and stable else []
            del copy[stable:]
            copy.extend(row[stable:n])
            self.copy = copy
        self.row, self.n = row, n

    def find_last(self, marker: list[int], offset: int) -> int:
        """Last start i >= offset of `marker` in row[:n], as `find_last(row[:n], marker, offset)`."""
        m, n, row = len(marker), self.n, self.row
        if m == 0:
            return -1
        lo, hi = self.claims.get(id(marker), (0, 0))
        if hi - m >= lo:  # starts in [lo, hi - m] are known not to match
            found = find_last(row, marker, max(offset, hi - m + 1), n)
            if found < 0 and offset < lo:
                found = find_last(row, marker, offset, min(lo - 1 + m, n))
        else:
            found = find_last(row, marker, offset, n)
        self.claims[id(marker)] = (offset, n) if found < 0 else (found + 1, n)
        return found


class _WatermarkHooks:
    """The output hooks of the reference state machine, without the full rescans and copies."""

    scan_type = RowScan

    def _new_state(self, prompt, budget, output):
        state = super()._new_state(prompt, budget, output)
        state["_scan"] = self.scan_type()
        return state

    def _drop(self, index: int) -> None:
        state = self.rows.pop(index, None)
        if state is not None:
            state["_scan"].forget()

    def _replace(self, index: int, state: dict) -> None:
        old = self.rows.get(index)
        if old is not None:
            old["_scan"].forget()
        super()._replace(index, state)

    def _committed_length(self, state: dict, row: Sequence[int]) -> int:
        return len(row)

    def _take_output(self, state: dict, row: Sequence[int]) -> None:
        scan = state["_scan"]
        state["output_tok_ids"] = row
        if state["start_thinking"] != -1 and state["end_thinking"] != -1:
            scan.forget()  # no search is pending: nothing to keep up to date
            scan.row, scan.n = row, self._committed_length(state, row)
        else:
            scan.take(row, self._committed_length(state, row))

    def _out_len(self, state: dict) -> int:
        return state["_scan"].n

    def _last_index(self, state: dict, marker: list[int], offset: int) -> int:
        return state["_scan"].find_last(marker, offset)

    def _new_tokens_contain(self, state: dict, since: int, token: int) -> bool:
        scan = state["_scan"]
        return token in scan.row[since : scan.n]


class WatermarkThinkBudget(_WatermarkHooks, ThinkBudgetReference):
    """vLLM 0.21.0 semantics (to 0.22.1)."""

    def _committed_length(self, state: dict, row: Sequence[int]) -> int:
        spec_len = len(state["spec_token_ids"])  # to 0.25 the drafts' count is stripped (no copy here)
        return len(row) - spec_len if spec_len and len(row) >= spec_len else len(row)


class WatermarkThinkBudget023(WatermarkThinkBudget, ThinkBudgetReference023):
    """vLLM 0.23.0 semantics: 0.21.0's, budgets validated."""


class WatermarkThinkBudget025(WatermarkThinkBudget, ThinkBudgetReference025):
    """vLLM 0.25.0 semantics (to 0.25.1): still combined rows with the drafts' count stripped."""


class WatermarkThinkBudget026(_WatermarkHooks, ThinkBudgetReference026):
    """vLLM 0.26.0 semantics (to 0.27.1): committed outputs."""


class WatermarkThinkBudget028(_WatermarkHooks, ThinkBudgetReference028):
    """vLLM 0.28.0 semantics (to 0.33.0)."""
