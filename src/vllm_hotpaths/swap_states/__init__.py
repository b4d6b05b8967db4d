"""`InputBatch.swap_states` and `InputBatch.condense`: moving requests between batch rows.

Both functions take the batch as their first argument and touch it only through `InputBatch`'s
own attribute names, so the same code runs on vLLM's `InputBatch` and on the standalone
`BatchState` (`vllm_hotpaths.testing.batches.swap_states`). Only a row's *active prefix* has a meaning: columns
`[0, num_tokens_no_spec + len(spec_token_ids))` of `token_ids_cpu` and `is_token_ids`; nothing
upstream reads a row past it.
"""

from __future__ import annotations

import operator


class InvalidRow(ValueError):
    """A swap names a row outside the batch or a row that holds no request."""


class CondensedAlready(ValueError):
    """condense called again before the step's batch update was reset (`refresh_metadata`)."""


def check_condense(batch, holes: list[int]) -> None:
    """The removed rows condense fills must be rows of the batch. After a condense the rows it left
    empty at the end stay listed until the step ends, past the trimmed lists: condensing again
    would move rows that are not there (vLLM raises IndexError halfway through)."""
    past = [r for r in holes if r >= len(batch._req_ids)]
    if past:
        raise CondensedAlready(f"condense: removed rows {sorted(past)} lie past the batch's "
                               f"{len(batch._req_ids)} rows: it was condensed already this step; reset the "
                               f"batch update (refresh_metadata) before condensing again")


def active_count(batch, row: int) -> int:
    """vLLM's `_get_active_token_count`: committed tokens plus the row's current drafts."""
    return int(batch.num_tokens_no_spec[row]) + len(batch.spec_token_ids[row])


def check_swap_rows(batch, i1, i2) -> tuple[int, int]:
    """Both rows must hold a request; raises InvalidRow (before anything moves) otherwise.

    Negative indices are refused: Python would read them from the end and swap the wrong rows."""
    rows = []
    for name, index in (("i1", i1), ("i2", i2)):
        try:
            row = operator.index(index)
        except TypeError:
            raise InvalidRow(f"swap_states: {name}={index!r} is not an integer row index") from None
        if not 0 <= row < len(batch._req_ids):
            raise InvalidRow(f"swap_states: {name}={row} is outside the batch's rows "
                             f"[0, {len(batch._req_ids)})")
        if batch._req_ids[row] is None:
            raise InvalidRow(f"swap_states: {name}={row} is an empty row (its request was removed)")
        rows.append(row)
    return rows[0], rows[1]


def check_supported(batch) -> None:
    """0.33's ReplaySSM keeps one more per-row array; no implementation here moves it yet."""
    if getattr(batch, "use_replayssm", False):
        raise NotImplementedError("swap_states: batches with ReplaySSM (replayssm_decode_base) are not "
                                  "supported; leave vLLM's own swap_states/condense in place")


# Per-row numpy arrays that swap and condense move, under InputBatch's names.
COUNT_ARRAYS = ("num_tokens_no_spec", "num_prompt_tokens", "num_computed_tokens_cpu",
                "request_lora_mapping")
# Moved only in generative batches (pooling models keep no sampling state).
SAMPLING_ARRAYS = ("temperature_cpu", "top_p_cpu", "top_k_cpu", "frequency_penalties_cpu",
                   "presence_penalties_cpu", "repetition_penalties_cpu", "num_accepted_tokens_cpu")
# Per-row dicts keyed by row index; swapped as vLLM's `swap_dict_values` does.
SAMPLING_DICTS = ("generators", "bad_words_token_ids")


def swap_dict_values(d: dict, k1, k2) -> None:
    """Exchange the values at two keys; a missing value (or None) leaves the other key missing."""
    v1, v2 = d.get(k1), d.get(k2)
    if v1 is not None:
        d[k2] = v1
    else:
        d.pop(k2, None)
    if v2 is not None:
        d[k1] = v2
    else:
        d.pop(k1, None)


def condense_plan(removed_descending: list[int], num_reqs: int) -> list[tuple[int, int]]:
    """The (last, empty) moves of vLLM's condense loop, in order: the highest occupied row fills
    the lowest hole until the lowest hole is at or above the highest occupied row."""
    removed = set(removed_descending)
    holes = sorted(removed)
    last = num_reqs + len(holes) - 1
    moves = []
    for empty in holes:
        while last in removed:
            last -= 1
        if empty >= last:
            break
        moves.append((last, empty))
        last -= 1
    return moves


__all__ = ["COUNT_ARRAYS", "CondensedAlready", "InvalidRow", "SAMPLING_ARRAYS", "SAMPLING_DICTS", "active_count",
           "check_condense", "check_supported", "check_swap_rows", "condense_plan", "swap_dict_values"]
