"""Deliberately wrong thinking-budget candidates: each must be caught by the `ci` profile.

Run one with `pytest properties/test_<law>.py -k think_budget --impl think_budget@0.21.0=properties.quality.think_budget:NAME`
(the law its `MUTANTS` entry names); `tests/test_quality.py` runs them all and requires a failure
with a written fixture.

`PrimeRLWatermark` / `PrimeRLWatermark028` behave like the watermark of prime-rl PR #2772
(https://github.com/PrimeIntellect-ai/prime-rl/pull/2772), wrapped around each version's
state machine: a scan position per row, an (m - 1)-token overlap, `-2` for "scanned, not found",
and a reset of the position (and of markers at or past the end) when the output shrinks. It
agrees with 0.22 on append-only outputs and diverges when the output shrinks below an end marker
already found and when a placeholder the scan passed is replaced by a marker; on 0.28 the `-2`
reads as "found" (`end_thinking != -1`).
"""

from __future__ import annotations

import dataclasses

from vllm_hotpaths.think_budget import BatchUpdate
from vllm_hotpaths.think_budget.fast import (RowScan, WatermarkThinkBudget, WatermarkThinkBudget025,
                                             WatermarkThinkBudget026, WatermarkThinkBudget028)
from vllm_hotpaths.think_budget.reference import (ThinkBudgetReference, ThinkBudgetReference028,
                                                  find_last, normalized_states)


class _PrimeRLScan:
    def _advance(self, state: dict) -> None:
        if state["thinking_token_budget"] != -1 and self.end:
            out = state["output_tok_ids"]
            hi = len(out)
            while hi and out[hi - 1] == -1:  # the trailing placeholder run is not scanned yet
                hi -= 1
            pos = state.get("_prime_scan_pos", 0)
            start_in_output = -1 if state["continue_thinking"] else state["start_thinking"]
            if pos > hi or state["end_thinking"] >= hi or start_in_output >= hi:
                pos = 0
                if state["end_thinking"] >= hi:
                    state["end_thinking"] = -1
                if start_in_output >= hi:
                    state["start_thinking"] = -1
            if state["start_thinking"] == -1:
                state["start_thinking"] = find_last(out, self.start, max(0, pos - len(self.start) + 1), hi)
            if state["end_thinking"] < 0:
                found = find_last(out, self.end, max(0, pos - len(self.end) + 1), hi)
                state["end_thinking"] = found if found >= 0 else -2
            state["_prime_scan_pos"] = hi
            if state["start_thinking"] == -1:
                return
        super()._advance(state)

    def states(self):
        # The sentinel is the patch's private encoding of "not found": report it as -1, so only
        # differences in behaviour count.
        normalized = normalized_states(self.rows, self.STATE_KEYS)
        for record in normalized.values():
            if record["end_thinking"] == -2:
                record["end_thinking"] = -1
        return normalized


class PrimeRLWatermark(_PrimeRLScan, ThinkBudgetReference):
    """prime-rl PR #2772's watermark over 0.22.0's state machine."""


class PrimeRLWatermark028(_PrimeRLScan, ThinkBudgetReference028):
    """prime-rl PR #2772's watermark over 0.28.0's state machine (0.28 to 0.33)."""


class _NoOverlapScan(RowScan):
    def find_last(self, marker, offset):
        lo, hi = self.claims.get(id(marker), (0, 0))
        if hi > lo:  # resume at the watermark itself: a marker straddling it is missed
            self.claims[id(marker)] = (lo, hi + len(marker) - 1)
        return super().find_last(marker, offset)


class NoOverlap(WatermarkThinkBudget):
    """Resumes the scan at the old watermark, without the m - 1 token overlap."""

    scan_type = _NoOverlapScan


class _AppendOnlyScan(RowScan):
    def _unchanged_prefix(self, row, n):
        return min(self.n, n)  # trusts that what was scanned never changes


class AppendOnlyWatermark(WatermarkThinkBudget):
    """Never cuts a claim back: rewrites and shrinks below the watermark go unseen."""

    scan_type = _AppendOnlyScan


class SwapFixIn022(WatermarkThinkBudget):
    """0.28's SWAP (pop both rows) under 0.22 semantics, where one state lands on both rows."""

    _swap = ThinkBudgetReference028._swap


class CommittedRowsIn022(WatermarkThinkBudget):
    """Does not strip the drafts' count from 0.22's combined rows."""

    def _committed_length(self, state, row):
        return len(row)


class BonusPassForcesInsideDrafts(WatermarkThinkBudget):
    """Forces at the bonus position even when the force index points inside the drafts."""

    def apply_to_logits(self, logits, predict_bonus_token, spec_token_ids=None):
        if predict_bonus_token:
            for state in self.rows.values():
                if state["in_end"] and state["force_index"]:
                    state["force_index"] = [0]
        return super().apply_to_logits(logits, predict_bonus_token, spec_token_ids)


class FreshSearchIn025(WatermarkThinkBudget025):
    """Searches the whole output past `scan_offset` (as 0.26 does) under 0.25, whose searches resume
    at their last miss: a marker written below a position 0.25 already searched is found."""

    def _search(self, state, marker, key):
        found = self._last_index(state, marker, state["scan_offset"])
        if found == -1:
            state[key] = self._out_len(state)
        return found


class ForceCloseIn026(WatermarkThinkBudget026):
    """Keeps 0.25's force-close of a start found after a forced end under 0.26, which dropped it."""

    def _scan_markers(self, state):
        reentry = state["start_thinking"] == -1 and state["scan_offset"] > 0
        super()._scan_markers(state)
        if reentry and state["start_thinking"] >= 0:
            state.update(in_think=False, in_end=True, end_count=0, force_index=[0])
            return True
        return False


class ForcesInfinity(WatermarkThinkBudget028):
    """Writes +inf instead of 1e9 at the forced id."""

    def apply_to_logits(self, logits, predict_bonus_token, spec_token_ids=None):
        forced = super().apply_to_logits(logits, predict_bonus_token, spec_token_ids)
        return forced.masked_fill_(forced == 1e9, float("inf"))


class AcceptsNegativeBudget028(WatermarkThinkBudget028):
    """Runs the 0.28 machine on budgets 0.28 refuses."""

    _budget = ThinkBudgetReference._budget


class NoVocabCheck(WatermarkThinkBudget028):
    """Takes marker ids outside the vocabulary."""

    def __init__(self, config, device="cpu"):
        super().__init__(dataclasses.replace(config, start_ids=(), end_ids=()), device)
        self.config, self.start, self.end = config, list(config.start_ids), list(config.end_ids)


class MarkerTablePrefilter(WatermarkThinkBudget):
    """Skips the marker search when a 32,768-entry lookup table of marker ids says no marker
    could be there; ids past the table read as "not a marker", so a marker among a real
    vocabulary's last ids is never found."""

    TABLE_SIZE = 2**15

    def _last_index(self, state, marker, offset):
        if any(t >= self.TABLE_SIZE for t in marker):
            return -1
        return super()._last_index(state, marker, offset)


class _WindowScan(RowScan):
    WINDOW = 256

    def find_last(self, marker, offset):
        lo, hi = self.claims.get(id(marker), (0, 0))
        if hi - len(marker) < lo:  # no claim yet: search the window only, claim the whole row
            offset = max(offset, self.n - self.WINDOW)
        return super().find_last(marker, offset)


class SearchWindow256(WatermarkThinkBudget):
    """Searches a row it has no claim on only in its last 256 tokens (a window sized for the
    outputs of a step or two): a marker deeper in a long output that joins the batch (a resumed
    request's) is never found."""

    scan_type = _WindowScan


class _TwoTokenCarryScan(RowScan):
    CARRY = 2

    def find_last(self, marker, offset):
        lo, hi = self.claims.get(id(marker), (0, 0))
        m = len(marker)
        if m - 1 > self.CARRY and hi - m >= lo:  # resume CARRY tokens before the old end, not m - 1
            self.claims[id(marker)] = (lo, hi + m - 1 - self.CARRY)
        return super().find_last(marker, offset)


class TwoTokenCarry(WatermarkThinkBudget):
    """Carries a fixed two tokens across the old end of the search, enough for markers of up to
    three ids: a longer marker straddling the old end is missed."""

    scan_type = _TwoTokenCarryScan


class MovesBeforeAdds(WatermarkThinkBudget):
    """Applies an update's moves before its additions (the contract: removed, added, moved): a
    move that touches a row added in the same update moves the wrong state."""

    def sync_batch(self, update):
        if update is None:
            return
        super().sync_batch(BatchUpdate(update.batch_size, update.removed, (), update.moved))
        super().sync_batch(BatchUpdate(update.batch_size, (), update.added, ()))


class MovesInReverse(WatermarkThinkBudget):
    """Applies an update's moves last to first: the same result while no two moves share a row;
    a chained pair ((row, a) then (a, b)) puts the states in the wrong rows."""

    def sync_batch(self, update):
        if update is not None:
            update = BatchUpdate(update.batch_size, update.removed, update.added, tuple(reversed(update.moved)))
        super().sync_batch(update)


class FirstRepeatedRow(WatermarkThinkBudget):
    """Reads each request's first row of a repeated layout (`repeat_indices`), not its last: with
    more than one row per request (one per draft position) the state sees too short an output."""

    def update_state(self, rows, spec_token_ids=None, repeat_indices=None):
        if repeat_indices is not None:
            indices, first = repeat_indices.tolist(), {}
            for row, request in enumerate(indices):
                first.setdefault(request, row)
            rows = [rows[first[request]] for request in indices]
        return super().update_state(rows, spec_token_ids, repeat_indices)


# mutant -> (the reference version it targets, the law expected to catch it: properties/test_<law>.py)
MUTANTS = {
    "PrimeRLWatermark": ("0.21.0", "equivalence"),
    "PrimeRLWatermark028": ("0.28.0", "equivalence"),
    "NoOverlap": ("0.21.0", "equivalence"),
    "AppendOnlyWatermark": ("0.21.0", "equivalence"),
    "SwapFixIn022": ("0.21.0", "equivalence"),
    "CommittedRowsIn022": ("0.21.0", "equivalence"),
    "BonusPassForcesInsideDrafts": ("0.21.0", "equivalence"),
    "FreshSearchIn025": ("0.25.0", "equivalence"),
    "ForceCloseIn026": ("0.26.0", "equivalence"),
    "ForcesInfinity": ("0.28.0", "equivalence"),
    "AcceptsNegativeBudget028": ("0.28.0", "errors"),
    "NoVocabCheck": ("0.28.0", "errors"),
    "MarkerTablePrefilter": ("0.21.0", "equivalence"),
    "SearchWindow256": ("0.21.0", "equivalence"),
    "TwoTokenCarry": ("0.21.0", "equivalence"),
    "MovesBeforeAdds": ("0.21.0", "equivalence"),
    "MovesInReverse": ("0.21.0", "equivalence"),
    "FirstRepeatedRow": ("0.21.0", "equivalence"),
}

# (AppendOnlyWatermark needed the `quality` profile's 600 examples until the machine built a found
# end rewritten away on purpose: strategies/think_budget.py BUILT.)
NEED_MORE_EXAMPLES: set[str] = set()

