"""Frozen references of vLLM's `ThinkingBudgetStateHolder` (`v1/sample/thinking_budget_state.py`).

One class per release that changed the holder's semantics (docs/release-changes.md, section B):
`ThinkBudgetReference` (0.21.0), `ThinkBudgetReference023`, `ThinkBudgetReference025`,
`ThinkBudgetReference026` and `ThinkBudgetReference028` (unchanged through 0.33); each is checked
against the installed vLLM by the conformance properties. The later ones are the 0.21 state
machine with small mixins, one per upstream change. The state is one dict per batch row with
upstream's keys, so the normalized state (`states()`) compares directly.

Every step reads the output through four hooks (`_take_output`, `_out_len`, `_last_index`,
`_new_tokens_contain`). Here they do what upstream does: a copy to strip the drafts (to 0.25) and
a backwards scan of the output for a marker, every step, until it is found. That scan is the
cost the fast holder removes; the state machine itself is shared.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from vllm_hotpaths.think_budget import InvalidBudget, ThinkConfig, is_swap

FORCED_LOGIT = 1e9  # written at the forced end-marker id; other logits are left as they are


def find_last(tokens: Sequence[int], marker: Sequence[int], offset: int = 0, stop: int | None = None) -> int:
    """Largest i >= offset with tokens[i : i + len(marker)] == marker inside tokens[:stop]; -1 if
    none or the marker is empty (upstream's `_find_last_sequence_index`, with an offset)."""
    m = len(marker)
    n = len(tokens) if stop is None else stop
    if m == 0:
        return -1
    marker = list(marker)
    first = marker[0]
    for i in range(n - m, offset - 1, -1):
        if tokens[i] == first and list(tokens[i : i + m]) == marker:
            return i
    return -1


class ThinkBudgetReference:
    """vLLM 0.21.0, the first release with the holder (checked on 0.21.0 to 0.22.1)."""

    version = "0.21.0"
    STATE_KEYS = (
        "in_think", "in_end", "check_count_down", "think_count", "end_count",
        "thinking_token_budget", "prev_output_length", "spec_token_ids", "force_index",
        "start_thinking", "end_thinking", "in_spec_mode", "bonus_token_forced",
        "continue_thinking",
    )

    def __init__(self, config: ThinkConfig, device: torch.device | str = "cpu") -> None:
        config.validate()
        self.config = config
        self.device = torch.device(device)
        self.start = list(config.start_ids)
        self.end = list(config.end_ids)
        self.spec_mode = config.num_spec_tokens > 0
        per_request = config.num_spec_tokens + 1 if self.spec_mode else 1
        self.mask_capacity = config.max_num_seqs * per_request
        self.rows: dict[int, dict[str, Any]] = {}

    # -- batch membership ------------------------------------------------------------------
    def has_tracked_requests(self) -> bool:
        """Whether any row holds a state: vLLM's sampler asks before each pass and calls
        `update_state` / `apply_to_logits` only when it is True."""
        return bool(self.rows)

    def sync_batch(self, update) -> None:
        """Removed, then added, then moved, as in upstream's `BatchUpdate` contract."""
        if update is None:
            return
        for index in update.removed:
            self._drop(index)
        for index, params, prompt, output in update.added:
            budget = self._budget(index, params.thinking_token_budget)
            if budget is None:
                self._drop(index)
            else:
                self._replace(index, self._new_state(prompt, budget, output))
        for i1, i2, direction in update.moved:
            if is_swap(direction):
                self._swap(i1, i2)
            else:
                state = self.rows.pop(i1, None)
                if state is not None:
                    self.rows[i2] = state

    def _drop(self, index: int) -> None:
        self.rows.pop(index, None)

    def _replace(self, index: int, state: dict[str, Any]) -> None:
        # Assigned in place, as upstream's dict is: a row that still held an entry (a reused row
        # is not reported removed) keeps its place in the table's order. `update_state` visits the
        # rows in that order, which decides what a state on two rows (a SWAP up to 0.27) reads last.
        self.rows[index] = state

    def _budget(self, index: int, budget) -> int | None:
        """0.22 takes any integer: -1 keeps an inert entry, other negatives run the machine."""
        if budget is None:
            return None
        if isinstance(budget, bool) or not isinstance(budget, int):
            raise InvalidBudget(f"row {index}: thinking_token_budget must be an integer, got {budget!r}")
        return budget

    def _swap(self, i1: int, i2: int) -> None:
        # Up to 0.27 both rows are read without removing them: swapping a tracked row with an
        # untracked one leaves the same state object on both rows (fixed in 0.28).
        first, second = self.rows.get(i1), self.rows.get(i2)
        if first is not None:
            self.rows[i2] = first
        if second is not None:
            self.rows[i1] = second

    def _new_state(self, prompt: list[int] | None, budget: int, output: list[int]) -> dict[str, Any]:
        state = {
            "in_think": False, "in_end": False, "check_count_down": budget, "think_count": 0,
            "end_count": 0, "prompt_tok_ids": prompt, "output_tok_ids": output,
            "thinking_token_budget": budget, "prev_output_length": 0, "spec_token_ids": [],
            "force_index": [], "start_thinking": -1, "end_thinking": -1, "in_spec_mode": False,
            "bonus_token_forced": False, "continue_thinking": False,
        }
        if prompt is not None:
            last_start, last_end = find_last(prompt, self.start), find_last(prompt, self.end)
            if last_start > last_end:  # the prompt leaves the request inside a think block
                think_count = len(prompt) - (last_start + len(self.start))
                state.update(
                    in_think=True, think_count=think_count, continue_thinking=True,
                    start_thinking=last_start + len(self.start) - 1,  # a prompt position
                    check_count_down=budget - think_count, in_end=budget - think_count <= 0,
                )
        return state

    # -- per step ----------------------------------------------------------------------------
    def update_state(self, rows: Sequence[Sequence[int]], spec_token_ids=None, repeat_indices=None) -> None:
        if not self.rows:
            return
        spec_lists = spec_token_ids or []
        source_row = None
        if repeat_indices is not None:  # the last logits row of each request carries its output
            indices = repeat_indices.tolist() if hasattr(repeat_indices, "tolist") else repeat_indices
            source_row = {request: row for row, request in enumerate(indices)}
        for index, state in list(self.rows.items()):
            row = index if source_row is None else source_row.get(index)
            if row is None or row >= len(rows):
                continue
            state["spec_token_ids"] = list(spec_lists[index]) if index < len(spec_lists) else []
            state["in_spec_mode"] = self.spec_mode
            state["force_index"] = []
            self._take_output(state, rows[row])
            self._advance(state)

    def _take_output(self, state: dict, row: Sequence[int]) -> None:
        # Up to 0.25 the row is output + drafts, and as many tokens as there are drafts are
        # stripped, whether or not the row really ends with them (vLLM PR #46662).
        spec_len = len(state["spec_token_ids"])
        if spec_len and len(row) >= spec_len:
            row = row[:-spec_len]
        state["output_tok_ids"] = row

    def _out_len(self, state: dict) -> int:
        return len(state["output_tok_ids"])

    def _last_index(self, state: dict, marker: list[int], offset: int) -> int:
        return find_last(state["output_tok_ids"], marker, offset)

    def _new_tokens_contain(self, state: dict, since: int, token: int) -> bool:
        return token in state["output_tok_ids"][since:]

    def _advance(self, state: dict) -> None:
        """One step of upstream's `_update_think_state`."""
        budget = state["thinking_token_budget"]
        if budget == -1:
            return
        if not self.end:  # nothing can be forced: the entry goes inert
            state.update(thinking_token_budget=-1, in_end=False, force_index=[])
            return
        if self._scan_markers(state) or self._natural_end_exit(state) or state["start_thinking"] == -1:
            return

        n = self._out_len(state)
        prev = state["prev_output_length"]
        spec_len = len(state["spec_token_ids"])
        grown = n - prev if state["continue_thinking"] or prev else n - len(self.start)
        countdown = state["check_count_down"] - grown
        if (not state["in_end"] and countdown - spec_len - 1 >= 0 and state["start_thinking"] > -1
                and self._countdown_applies(state)):
            state["check_count_down"] = countdown
            state["prev_output_length"] = n
            return
        if n == 0:
            if state["in_end"]:  # over budget from the prompt: force the very first token
                state["force_index"] = [0]
            return
        if n <= prev:
            if state["in_end"]:
                state["force_index"] = [self._force_position(state)]
            return

        state["prev_output_length"] = n
        start_pos, end_pos = state["start_thinking"], state["end_thinking"]
        if state["continue_thinking"] and end_pos > -1:
            end_pos += len(state["prompt_tok_ids"] or [])
        # The forced first end token was rejected (speculative decoding): back to thinking.
        if state["in_end"] and state["end_count"] == 0 \
                and not self._new_tokens_contain(state, prev, self.end[0]):
            state.update(in_think=True, in_end=False, end_count=0, bonus_token_forced=False)
        if state["in_end"]:
            self._walk_end_marker(state, n)
        else:
            self._classify(state, start_pos, end_pos, n)

    def _classify(self, state: dict, start_pos: int, end_pos: int, n: int) -> None:
        start_len = len(self.start)
        if start_pos >= 0 and end_pos >= 0:
            if start_pos > end_pos:
                state.update(in_think=True, think_count=n - (start_pos + start_len))
            else:
                state.update(in_think=False, think_count=0)
                self._left_think(state, n)
        elif start_pos >= 0 and not state["continue_thinking"]:
            state.update(in_think=True, think_count=n - (start_pos + start_len))
        elif end_pos >= 0:
            state.update(in_think=False, think_count=0)
            self._left_think(state, n)
        elif state["in_think"]:
            in_prompt = len(state["prompt_tok_ids"] or []) - (start_pos + start_len)
            state["think_count"] = n + in_prompt
        budget = state["thinking_token_budget"]
        state["check_count_down"] = max(0, budget - state["think_count"]) if state["in_think"] else budget
        if state["in_think"] and state["think_count"] + len(state["spec_token_ids"]) + 1 > budget:
            state.update(in_think=False, in_end=True, end_count=0, check_count_down=budget)
            state["force_index"] = [self._force_position(state)]

    @staticmethod
    def _force_position(state: dict) -> int:
        """Where the end marker goes: the first draft past the budget, else the bonus position."""
        remaining = state["thinking_token_budget"] - state["think_count"]
        spec_len = len(state["spec_token_ids"])
        if remaining <= 0:
            return 0
        return remaining if remaining < spec_len else spec_len

    def _walk_end_marker(self, state: dict, n: int) -> None:
        """In the end marker: drafts that continue it advance `end_count`; the first that does
        not is where the next marker token is forced."""
        state["force_index"] = []
        spec = state["spec_token_ids"]
        for i, token in enumerate(spec):
            nxt = state["end_count"] + 1
            state["end_count"] = nxt
            if nxt < len(self.end) and token != self.end[nxt]:
                state["force_index"] = [i]
                break
        if not state["force_index"]:
            state["end_count"] += 1
            state["force_index"] = [len(spec)]
        if state["end_count"] >= len(self.end):
            state.update(in_end=False, end_count=0, check_count_down=state["thinking_token_budget"])
            self._end_marker_done(state, n)

    # -- version hooks (0.21: no-ops) --------------------------------------------------------------
    def _scan_markers(self, state: dict) -> bool:
        """A marker position, once found, is kept for good, even if the output shrinks below it.
        True ends the step there (0.25's force-close on re-entry)."""
        if state["start_thinking"] == -1:
            state["start_thinking"] = self._last_index(state, self.start, 0)
        if state["end_thinking"] == -1:
            state["end_thinking"] = self._last_index(state, self.end, 0)
        return False

    def _natural_end_exit(self, state: dict) -> bool:
        return False

    def _countdown_applies(self, state: dict) -> bool:
        return True

    def _left_think(self, state: dict, n: int) -> None:
        pass

    def _end_marker_done(self, state: dict, n: int) -> None:
        pass

    # -- logits ----------------------------------------------------------------------------------
    def apply_to_logits(self, logits: torch.Tensor, predict_bonus_token: bool, spec_token_ids=None) -> torch.Tensor:
        """Write FORCED_LOGIT at the next end-marker id on each forced row (in place)."""
        if not self.rows:
            return logits
        vocab = self.config.vocab_size
        if logits.dim() != 2 or logits.shape[1] != vocab:
            raise ValueError(f"logits must be [rows, {vocab}], got {list(logits.shape)}")
        spec_lists = spec_token_ids or []
        first_row, total = {}, 0
        for index in range(max(len(spec_lists), max(self.rows) + 1)):
            first_row[index] = total
            if self.spec_mode and not predict_bonus_token:
                total += len(spec_lists[index]) if index < len(spec_lists) else 0
            else:
                total += 1
        positions, tokens = [], []
        for index in sorted(self.rows):
            state = self.rows[index]
            if not state["in_end"]:
                continue
            if predict_bonus_token:
                # Bonus pass: a position inside the drafts belongs to the target pass.
                if state["force_index"] and state["force_index"][0] < len(state["spec_token_ids"]):
                    continue
                state["force_index"] = [0]
            if state["end_count"] > 0:
                state["bonus_token_forced"] = False
            if state["bonus_token_forced"] or not state["force_index"]:
                continue
            end_count = state["end_count"]
            for offset in list(state["force_index"]):
                if end_count >= len(self.end):
                    continue
                position = first_row[index] + offset
                if position < self.mask_capacity and position < logits.shape[0]:
                    positions.append(position)
                    tokens.append(self.end[end_count])
                if predict_bonus_token:
                    if state["end_count"] > 0:
                        state.update(bonus_token_forced=False, force_index=[])
                    else:
                        state["bonus_token_forced"] = True
        if positions:
            if torch.finfo(logits.dtype).max < FORCED_LOGIT:  # upstream fails here, inside torch
                raise ValueError(f"{logits.dtype} logits cannot hold the forced value {FORCED_LOGIT:g} "
                                 "(vLLM's sampler works on float32 logits)")
            index = (torch.tensor(positions, dtype=torch.long).to(logits.device),
                     torch.tensor(tokens, dtype=torch.long).to(logits.device))
            logits.index_put_(index, logits.new_full((len(positions),), FORCED_LOGIT))
        return logits

    # -- comparison ----------------------------------------------------------------------------
    def states(self) -> dict[int, dict[str, Any]]:
        return normalized_states(self.rows, self.STATE_KEYS)


def normalized_states(rows: dict[int, dict], keys: Sequence[str]) -> dict[int, dict[str, Any]]:
    """Per row: the public state fields (not the output and prompt, which are inputs), and the
    lowest row holding the same state object (0.22's SWAP can put one on two rows)."""
    normalized, first_row = {}, {}
    for index in sorted(rows):
        state = rows[index]
        record = {key: list(state[key]) if isinstance(state[key], list) else state[key] for key in keys}
        record["same_state_as"] = first_row.setdefault(id(state), index)
        normalized[index] = record
    return normalized


class _ValidatedBudget:
    """From 0.23.0, `SamplingParams` validates the budget (`validate_thinking_token_budget`): -1
    means unlimited (no entry), other negatives are refused."""

    def _budget(self, index: int, budget) -> int | None:
        budget = super()._budget(index, budget)
        if budget == -1:
            return None
        if budget is not None and budget < 0:
            raise InvalidBudget(f"row {index}: thinking_token_budget must be a non-negative "
                                f"integer or -1 for unlimited, got {budget}")
        return budget


class ThinkBudgetReference023(_ValidatedBudget, ThinkBudgetReference):
    """vLLM 0.23.0: the 0.21.0 holder, budgets validated by SamplingParams."""

    version = "0.23.0"


class _ScanOffset:
    """From 0.25.0 (vLLM PR #43757): a completed forced end leaves the block (markers and count
    reset), and the markers are searched only past `scan_offset`, the output length then."""

    STATE_KEYS = ThinkBudgetReference.STATE_KEYS + ("scan_offset",)

    def _new_state(self, prompt, budget, output):
        state = super()._new_state(prompt, budget, output)
        state["scan_offset"] = 0
        return state

    def _scan_markers(self, state: dict) -> bool:
        offset = state["scan_offset"]
        if state["start_thinking"] == -1:
            state["start_thinking"] = self._last_index(state, self.start, offset)
        if state["end_thinking"] == -1:
            state["end_thinking"] = self._last_index(state, self.end, offset)
        return False

    def _reset_block(self, state: dict, n: int) -> None:
        state.update(continue_thinking=False, start_thinking=-1, end_thinking=-1, scan_offset=n)

    def _end_marker_done(self, state: dict, n: int) -> None:
        state["think_count"] = 0
        self._reset_block(state, n)


class _SearchPositions025:
    """0.25.0 only: each search resumes m - 1 tokens before the output length of its last miss
    (`start_search_pos` / `end_search_pos`, never reset, so positions rewritten below them are not
    searched again), and a start found past a forced end (`scan_offset > 0`) is force-closed at
    once. vLLM 0.26.0 dropped both."""

    STATE_KEYS = _ScanOffset.STATE_KEYS + ("start_search_pos", "end_search_pos")

    def _new_state(self, prompt, budget, output):
        state = super()._new_state(prompt, budget, output)
        state.update(start_search_pos=0, end_search_pos=0)
        return state

    def _search(self, state: dict, marker: list[int], key: str) -> int:
        since = max(state["scan_offset"], state[key] - (len(marker) - 1), 0)
        found = self._last_index(state, marker, since)
        if found == -1:
            state[key] = self._out_len(state)
        return found

    def _scan_markers(self, state: dict) -> bool:
        if state["start_thinking"] == -1:
            found = self._search(state, self.start, "start_search_pos")
            state["start_thinking"] = found
            if found >= 0 and state["scan_offset"] > 0:  # re-entry after a forced end
                state.update(in_think=False, in_end=True, end_count=0, force_index=[0])
                return True
        if state["end_thinking"] == -1:
            state["end_thinking"] = self._search(state, self.end, "end_search_pos")
        return False


class _NaturalEndReset:
    """From 0.26.0 (vLLM PR #45984): a natural end leaves the block at once and resets it too."""

    def _natural_end_exit(self, state: dict) -> bool:
        # An end after a start in the output, outside the forced end: the block is left here.
        start, end = state["start_thinking"], state["end_thinking"]
        if state["in_end"] or start < 0 or end <= start or state["continue_thinking"]:
            return False
        state.update(in_think=False, think_count=0, check_count_down=state["thinking_token_budget"])
        self._left_think(state, self._out_len(state))
        return True

    def _countdown_applies(self, state: dict) -> bool:
        # Continuing a prompt's block, a found end must be handled even within budget.
        return not (state["continue_thinking"] and state["end_thinking"] != -1)

    def _left_think(self, state: dict, n: int) -> None:
        self._reset_block(state, n)


class _CommittedOutputs:
    """From 0.26.0 (vLLM PRs #46662 / #46576): the sampler hands the holder the committed
    outputs, which it takes as they are (no draft strip)."""

    def _take_output(self, state: dict, row: Sequence[int]) -> None:
        state["output_tok_ids"] = row


class _SwapPops:
    """From 0.28.0 (vLLM PR #49613): a SWAP pops both rows before re-inserting their states."""

    def _swap(self, i1: int, i2: int) -> None:
        first, second = self.rows.pop(i1, None), self.rows.pop(i2, None)
        if first is not None:
            self.rows[i2] = first
        if second is not None:
            self.rows[i1] = second


class ThinkBudgetReference025(_SearchPositions025, _ScanOffset, _ValidatedBudget, ThinkBudgetReference):
    """vLLM 0.25.0 (to 0.25.1): `scan_offset`, a reset after a forced end, incremental searches
    and a force-close on re-entry after a forced end."""

    version = "0.25.0"


class ThinkBudgetReference026(_CommittedOutputs, _NaturalEndReset, _ScanOffset, _ValidatedBudget,
                              ThinkBudgetReference):
    """vLLM 0.26.0 (to 0.27.1): committed outputs, resets on every way out of a think block, the
    early natural-end exit; 0.25's incremental searches and force-close are gone."""

    version = "0.26.0"


class ThinkBudgetReference028(_SwapPops, ThinkBudgetReference026):
    """vLLM 0.28.0 (to 0.33.0, whose holder is the same): 0.26.0's with the SWAP fix."""

    version = "0.28.0"
