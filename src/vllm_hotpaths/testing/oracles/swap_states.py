"""When two batches hold the same requests in the same rows: the swap_states oracle.

Compared exactly, after every operation, whole arrays as vLLM's own
`test_swap_states_in_input_batch` compares them:
- the row -> request list (holes included, and its length) and the id -> row map;
- `token_ids_cpu` and `is_token_ids`, every row and column (what lies past a row's active prefix
  too: each version's swap writes its own region, and a fast path must write the same one);
- every per-row scalar array by bit pattern: the counts over every row; the sampling values
  over the rows that ever held a request (vLLM allocates them uninitialized);
- per live row: its output and draft list *objects* (each batch must still hold the very list it
  was given or created for that request) and their contents; prompt embeddings, generator and
  bad words by identity;
- every block-table row and `num_blocks_per_row`, in every KV-cache group;
- the allowed-token mask: every row between implementations of one reference; the live rows
  against vLLM, whose condense before 0.33 leaves a mask in the row it vacates (issue #43894:
  the ledger names what that does to the next request added there);
- the recorded moves and the rows still listed as removed;
- between two batches of one class, the attribute names (vLLM's test compares every attribute:
  an implementation must keep nothing of its own on the batch).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from vllm_hotpaths.testing.bits import assert_same_bits
from vllm_hotpaths.swap_states import COUNT_ARRAYS, SAMPLING_ARRAYS, SAMPLING_DICTS, active_count

MASK = "allowed_token_ids_mask"


@dataclass
class Lists:
    """The list objects one batch holds per request: outputs handed in, drafts it created."""

    outputs: dict[str, list] = field(default_factory=dict)
    drafts: dict[str, list] = field(default_factory=dict)
    rows_used: int = 0  # rows below this have held a request: their sampling values are written

    def record_add(self, batch, req_id: str, output: list) -> None:
        self.outputs[req_id] = output
        row = batch.req_id_to_index[req_id]
        self.drafts[req_id] = batch.spec_token_ids[row]
        self.rows_used = max(self.rows_used, row + 1)


def live_rows(batch) -> list[int]:
    return [r for r, req_id in enumerate(batch._req_ids) if req_id is not None]


def _bits(values: np.ndarray) -> np.ndarray:
    return values.view(f"u{values.itemsize}") if values.dtype.kind == "f" else values


def _first_difference(got: np.ndarray, want: np.ndarray) -> str:
    where = tuple(int(i) for i in np.argwhere(_bits(got) != _bits(want))[0])
    return f"first at {list(where)}: {got[where]}, expected {want[where]}"


def _same_width(got: np.ndarray, want: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Block tables of two widths (vLLM sizes its rows from more than `max_model_len`): the
    common columns, each side's extra columns appended as zeros on the other, so ids written
    past the narrower width show as a difference."""
    if got.shape == want.shape:
        return got, want
    width = max(got.shape[1], want.shape[1])
    pad = lambda a: np.pad(a, ((0, 0), (0, width - a.shape[1])))  # noqa: E731
    return pad(got), pad(want)


def differences(expected, actual, lists_expected: Lists, lists_actual: Lists,
                whole_mask: bool = True) -> dict[str, str]:
    """Field -> first difference found; empty when the batches agree under the oracle
    (`whole_mask=False`: the allowed-token mask of live rows only)."""
    found: dict[str, str] = {}
    if list(actual._req_ids) != list(expected._req_ids):
        found["rows"] = f"requests by row {actual._req_ids}, expected {expected._req_ids}"
        return found  # every other field is per row: nothing more to say
    if type(actual) is type(expected) and sorted(vars(actual)) != sorted(vars(expected)):
        extra = sorted(set(vars(actual)) ^ set(vars(expected)))
        found["attributes"] = f"attribute names differ: {extra}"
    if actual.req_id_to_index != expected.req_id_to_index:
        found["req_id_to_index"] = f"{actual.req_id_to_index}, expected {expected.req_id_to_index}"
    rows = live_rows(expected)
    if len(actual.req_output_token_ids) != len(expected.req_output_token_ids):
        found["req_output_token_ids"] = (f"{len(actual.req_output_token_ids)} entries, expected "
                                         f"{len(expected.req_output_token_ids)}")
    for r in rows:
        req_id = expected._req_ids[r]
        for lists, batch in ((lists_expected, expected), (lists_actual, actual)):
            if batch.req_output_token_ids[r] is not lists.outputs[req_id]:
                found.setdefault("req_output_token_ids", f"row {r} ({req_id}) holds another list object")
            if batch.spec_token_ids[r] is not lists.drafts[req_id]:
                found.setdefault("spec_token_ids", f"row {r} ({req_id}) holds another draft list object")
        if list(actual.req_output_token_ids[r]) != list(expected.req_output_token_ids[r]):
            found.setdefault("req_output_token_ids", f"row {r} content differs")
        if list(actual.spec_token_ids[r]) != list(expected.spec_token_ids[r]):
            found.setdefault("spec_token_ids", f"row {r}: {actual.spec_token_ids[r]}, expected "
                                               f"{expected.spec_token_ids[r]}")
    used = max(lists_expected.rows_used, lists_actual.rows_used)
    whole = ("token_ids_cpu", "is_token_ids") + COUNT_ARRAYS
    written = () if expected.is_pooling_model else SAMPLING_ARRAYS
    for name in whole + written:
        got, want = getattr(actual, name), getattr(expected, name)
        if name in written:
            got, want = got[:used], want[:used]
        if not np.array_equal(_bits(got), _bits(want)):
            found[name] = _first_difference(got, want)
    dict_names = ("req_prompt_embeds",) + (() if expected.is_pooling_model else SAMPLING_DICTS)
    for name in dict_names:
        got, want = getattr(actual, name), getattr(expected, name)
        for r in rows:
            if got.get(r) is not want.get(r):
                found.setdefault(name, f"row {r} ({expected._req_ids[r]}) holds another object "
                                       f"({'none' if got.get(r) is None else 'one'}, expected "
                                       f"{'none' if want.get(r) is None else 'one'})")
    for g, (group_a, group_e) in enumerate(zip(actual.block_table.block_tables, expected.block_table.block_tables)):
        for name, got, want in (("num_blocks_per_row", group_a.num_blocks_per_row, group_e.num_blocks_per_row),
                                ("block_table", *_same_width(group_a.block_table.np, group_e.block_table.np))):
            if not np.array_equal(got, want):
                found.setdefault(name, f"group {g}: {_first_difference(got, want)}")
    if not expected.is_pooling_model:
        mask_a, mask_e = actual.allowed_token_ids_mask_cpu_tensor, expected.allowed_token_ids_mask_cpu_tensor
        if (mask_a is None) != (mask_e is None):
            found[MASK] = f"allocated: {mask_a is not None}, expected {mask_e is not None}"
        elif mask_e is not None:
            a, e = mask_a.numpy(), mask_e.numpy()  # numpy: much faster than torch.equal per row
            compared = range(e.shape[0]) if whole_mask else rows
            same = whole_mask and np.array_equal(a, e)
            bad = [] if same else [r for r in compared if not np.array_equal(a[r], e[r])]
            if bad:
                found[MASK] = f"rows {bad} differ"
    moves_a = [(i, j, getattr(d, "name", d)) for i, j, d in actual.batch_update_builder.moved]
    moves_e = [(i, j, getattr(d, "name", d)) for i, j, d in expected.batch_update_builder.moved]
    if moves_a != moves_e:
        found["moved"] = f"{moves_a}, expected {moves_e}"
    removed_a, removed_e = sorted(actual.batch_update_builder._removed), sorted(expected.batch_update_builder._removed)
    if removed_a != removed_e:
        found["removed"] = f"{removed_a}, expected {removed_e}"
    return found


def mask_rows_differing(expected, actual) -> list[int]:
    mask_a, mask_e = actual.allowed_token_ids_mask_cpu_tensor, expected.allowed_token_ids_mask_cpu_tensor
    if mask_a is None or mask_e is None:
        return []
    a, e = mask_a.numpy(), mask_e.numpy()
    return [r for r in live_rows(expected) if not np.array_equal(a[r], e[r])]


def mirrored(batch, device) -> dict[str, torch.Tensor]:
    """What the model runner uploads from the batch, on `device`: per live row its values, active
    prefix (laid end to end) and allowed-mask row; per row its block ids and count."""
    rows = live_rows(batch)
    up = {name: torch.from_numpy(np.ascontiguousarray(getattr(batch, name)[rows])).to(device)
          for name in COUNT_ARRAYS + (() if batch.is_pooling_model else SAMPLING_ARRAYS)}
    for name in ("token_ids_cpu", "is_token_ids"):
        table = getattr(batch, name)
        parts = [table[r, :active_count(batch, r)] for r in rows]
        if name == "token_ids_cpu":
            parts = [np.where(batch.is_token_ids[r, :len(p)], p, 0) for r, p in zip(rows, parts)]
        up[name] = torch.from_numpy(np.concatenate(parts) if parts else table[:0, 0].copy()).to(device)
    for g, group in enumerate(batch.block_table.block_tables):
        counts = group.num_blocks_per_row
        blocks = [group.block_table.np[r, :counts[r]] for r in range(len(counts))]
        up[f"block_table[{g}]"] = torch.from_numpy(np.concatenate(blocks)).to(device)
        up[f"num_blocks_per_row[{g}]"] = torch.from_numpy(counts.copy()).to(device)
    mask = batch.allowed_token_ids_mask_cpu_tensor
    if mask is not None and not batch.is_pooling_model:
        up[MASK] = mask[rows].to(device)
    return up


def assert_same_on_device(expected, actual, device) -> None:
    want, got = mirrored(expected, device), mirrored(actual, device)
    assert sorted(got) == sorted(want), f"uploaded fields {sorted(got)}, expected {sorted(want)}"
    for name in want:
        assert_same_bits(got[name], want[name], f"{name} on {device}")
