"""Fast `swap_states` and `condense`: the same bytes as the version's own, in few numpy calls.

Each class writes exactly the array regions its vLLM version writes, so whole arrays come out
bit-identical to upstream's (what vLLM's own `test_swap_states_in_input_batch` compares): a
swap exchanges whole token rows (0.16.0) or their first `max(A1, A2)` columns (0.22.0, 0.33.0),
whole block-table rows and allowed-mask rows; condense copies a row's active prefix and its
first `num_blocks_per_row` block ids. Every per-row scalar, dict entry and list object moves
exactly, and the moves are recorded.

Where the time goes: vLLM spends most of a swap on numpy call overhead (fancy indexing of
`is_token_ids` and the block table, a numpy scalar per field) rather than on bytes. Here the row
data moves through flat byte views (`memoryview` slices are plain memmoves) and the per-row
scalars through integer views of the same bytes, so float fields keep their exact bit patterns.
The views are built once per batch and rebuilt when any of its arrays is replaced; they are kept
in this module, keyed by the batch and dropped with it, never on the batch itself (vLLM's tests
compare batches attribute by attribute). Condense moves the scalars and mask rows of all its
moves with one fancy-indexed copy per array.
"""

from __future__ import annotations

import weakref
from operator import attrgetter, is_

import numpy as np

from vllm_hotpaths.swap_states import (COUNT_ARRAYS, SAMPLING_ARRAYS, SAMPLING_DICTS, active_count,
                                       check_condense, check_supported, check_swap_rows, condense_plan,
                                       swap_dict_values)

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


class _RowTable:
    """Byte view of a C-contiguous 2-D array: rows copied with memmove-speed slices."""

    def __init__(self, array: np.ndarray) -> None:
        if array.ndim != 2 or not array.flags.c_contiguous:
            raise TypeError(f"swap_states needs C-contiguous 2-D row arrays, got shape {array.shape} "
                            f"(c_contiguous={array.flags.c_contiguous})")
        self.bytes = memoryview(array.reshape(-1).view(np.uint8))
        self.row_bytes, self.item = array.strides[0], array.itemsize
        self.scratch = memoryview(bytearray(self.row_bytes))  # one row, reused by every swap

    def swap_prefixes(self, i1: int, i2: int, n: int) -> None:
        """Rows i1 and i2 exchange their first n items."""
        b, scratch, k = self.bytes, self.scratch, n * self.item
        s1, s2 = i1 * self.row_bytes, i2 * self.row_bytes
        scratch[:k] = b[s1:s1 + k]
        b[s1:s1 + k] = b[s2:s2 + k]
        b[s2:s2 + k] = scratch[:k]

    def copy_prefix(self, src: int, dst: int, n: int) -> None:
        b, s, d = self.bytes, src * self.row_bytes, dst * self.row_bytes
        b[d:d + n * self.item] = b[s:s + n * self.item]

    def zero_prefix(self, row: int, n: int) -> None:
        start = row * self.row_bytes
        self.bytes[start:start + n * self.item] = bytes(n * self.item)


def _items(array: np.ndarray) -> memoryview:
    """The array's items as unsigned integers of the same width: bit patterns move unchanged."""
    if array.ndim != 1 or not array.flags.c_contiguous:
        raise TypeError(f"swap_states needs C-contiguous 1-D per-row arrays, got shape {array.shape}")
    return memoryview(array.view(_UINT[array.itemsize]))


class _Views:
    """Everything a swap touches, as views, for one batch's current arrays."""

    def __init__(self, batch) -> None:
        check_supported(batch)
        self.arrays = _ARRAYS(batch)
        self.mask_tensor = batch.allowed_token_ids_mask_cpu_tensor
        self.groups = batch.block_table.block_tables
        count = len(COUNT_ARRAYS)
        self.counts = [_items(a) for a in self.arrays[:count]]
        self.sampling = [_items(a) for a in self.arrays[count:count + len(SAMPLING_ARRAYS)]]
        self.tokens = _RowTable(batch.token_ids_cpu)
        self.is_token = _RowTable(batch.is_token_ids)
        self.width = batch.token_ids_cpu.shape[1]
        self.blocks = [(_RowTable(g.block_table.np), _items(g.num_blocks_per_row), g.block_table.np.shape[1])
                       for g in self.groups]
        self.mask = None if self.mask_tensor is None else _RowTable(self.mask_tensor.numpy())
        self.mask_width = None if self.mask_tensor is None else self.mask_tensor.shape[1]
        self.batch = None  # a weak reference to the batch, set by `views_of`

    def current(self, batch) -> bool:
        """Still the batch's arrays? vLLM allocates them once (the allowed mask on first use) and
        its block tables once per list of KV-cache groups."""
        return (batch.allowed_token_ids_mask_cpu_tensor is self.mask_tensor
                and batch.block_table.block_tables is self.groups
                and all(map(is_, _ARRAYS(batch), self.arrays)))


_ARRAYS = attrgetter(*COUNT_ARRAYS, *SAMPLING_ARRAYS, "token_ids_cpu", "is_token_ids")
_VIEWS: dict[int, _Views] = {}  # id(batch) -> its views; an entry goes when its batch is collected


def views_of(batch) -> _Views:
    """The batch's current views (shared by every implementation here)."""
    key = id(batch)
    views = _VIEWS.get(key)
    if views is None or views.batch() is not batch or not views.current(batch):
        views = _Views(batch)
        views.batch = weakref.ref(batch, lambda _, key=key: _VIEWS.pop(key, None))
        _VIEWS[key] = views
    return views


class MemmoveSwap:
    """`factory(moves)`, like the reference: `moves.SWAP` / `moves.UNIDIRECTIONAL` are recorded.
    vLLM 0.16.0's semantics (to 0.18.1); `MemmoveSwap022` and `MemmoveSwap033` those of 0.19.0 and 0.27.0 on."""

    CLEARS_VACATED_BLOCKS = False

    def __init__(self, moves) -> None:
        self.moves = moves

    def _views_of(self, batch) -> _Views:
        return views_of(batch)

    def _swapped_columns(self, views: _Views, n1: int, n2: int) -> int:
        """Leading token columns a swap exchanges, given the rows' active counts: 0.16 whole rows."""
        return views.width

    def swap_states(self, batch, i1: int, i2: int) -> None:
        ids = batch._req_ids
        if not (type(i1) is int and type(i2) is int and 0 <= i1 < len(ids) and 0 <= i2 < len(ids)
                and ids[i1] is not None and ids[i2] is not None):
            i1, i2 = check_swap_rows(batch, i1, i2)  # raises, or accepts another integer type
        views = self._views_of(batch)
        outputs, spec = batch.req_output_token_ids, batch.spec_token_ids
        num_tokens = views.counts[0]  # num_tokens_no_spec
        n1, n2 = num_tokens[i1] + len(spec[i1]), num_tokens[i2] + len(spec[i2])
        ids[i1], ids[i2] = ids[i2], ids[i1]
        outputs[i1], outputs[i2] = outputs[i2], outputs[i1]
        spec[i1], spec[i2] = spec[i2], spec[i1]
        id_map = batch.req_id_to_index
        id_map[ids[i1]], id_map[ids[i2]] = i1, i2
        for items in views.counts:
            items[i1], items[i2] = items[i2], items[i1]
        columns = self._swapped_columns(views, n1, n2)
        views.tokens.swap_prefixes(i1, i2, columns)
        views.is_token.swap_prefixes(i1, i2, columns)
        for rows, counts, width in views.blocks:
            counts[i1], counts[i2] = counts[i2], counts[i1]
            rows.swap_prefixes(i1, i2, width)
        embeds = batch.req_prompt_embeds
        if embeds and (i1 in embeds or i2 in embeds):
            swap_dict_values(embeds, i1, i2)
        if batch.is_pooling_model:
            return
        batch.batch_update_builder.moved.append((i1, i2, self.moves.SWAP))
        for items in views.sampling:
            items[i1], items[i2] = items[i2], items[i1]
        for table in (batch.generators, batch.bad_words_token_ids):
            if table and (i1 in table or i2 in table):
                swap_dict_values(table, i1, i2)
        if views.mask is not None:
            views.mask.swap_prefixes(i1, i2, views.mask_width)

    def condense(self, batch) -> None:
        builder = batch.batch_update_builder
        num_reqs = batch.num_reqs
        if not builder.removed:
            return
        check_condense(batch, builder.removed)
        if num_reqs == 0:
            batch._req_ids.clear()
            batch.req_output_token_ids.clear()
            batch.spec_token_ids.clear()
            return
        views = self._views_of(batch)
        plan = condense_plan(builder.removed, num_reqs)
        ids, outputs, spec = batch._req_ids, batch.req_output_token_ids, batch.spec_token_ids
        id_map, embeds = batch.req_id_to_index, batch.req_prompt_embeds
        for src, dst in plan:
            builder.pop_removed()
            count = active_count(batch, src)
            views.tokens.copy_prefix(src, dst, count)
            views.is_token.copy_prefix(src, dst, count)
            req_id = ids[src]
            ids[dst], ids[src] = req_id, None
            outputs[dst], outputs[src] = outputs[src], None
            id_map[req_id] = dst
            spec[dst], spec[src] = spec[src], spec[dst]
            spec[src].clear()
            if src in embeds:
                embeds[dst] = embeds.pop(src)
            for rows, counts, _ in views.blocks:
                rows.copy_prefix(src, dst, int(counts[src]))
                if self.CLEARS_VACATED_BLOCKS:
                    rows.zero_prefix(src, int(counts[src]))
        if plan:
            srcs, dsts = (list(rows) for rows in zip(*plan))
            for array in views.arrays[:len(COUNT_ARRAYS)]:  # one fancy-indexed copy per array
                array[dsts] = array[srcs]
            for group in batch.block_table.block_tables:
                group.num_blocks_per_row[dsts] = group.num_blocks_per_row[srcs]
                if self.CLEARS_VACATED_BLOCKS:
                    group.num_blocks_per_row[srcs] = 0
            if not batch.is_pooling_model:
                self._move_sampling(batch, views, plan, srcs, dsts)
        del ids[num_reqs:]
        del outputs[num_reqs:]
        del spec[num_reqs:]

    def _move_sampling(self, batch, views, plan, srcs, dsts) -> None:
        batch.batch_update_builder.moved.extend((src, dst, self.moves.UNIDIRECTIONAL) for src, dst in plan)
        for array in views.arrays[len(COUNT_ARRAYS):len(COUNT_ARRAYS) + len(SAMPLING_ARRAYS)]:
            array[dsts] = array[srcs]
        for name in SAMPLING_DICTS:
            table = getattr(batch, name)
            if table:
                for src, dst in plan:
                    value = table.pop(src, None)
                    if value is not None:
                        table[dst] = value
        if views.mask_tensor is not None:
            mask = views.mask_tensor.numpy()
            mask[dsts] = mask[srcs]
            mask[srcs] = False  # vacated rows must not hand a mask to their next request


class MemmoveSwap022(MemmoveSwap):
    """vLLM 0.22.0's semantics: token rows exchange their first `max(A1, A2)` columns."""

    def _swapped_columns(self, views: _Views, n1: int, n2: int) -> int:
        return max(n1, n2)


class MemmoveSwap033(MemmoveSwap022):
    """vLLM 0.33.0's semantics: as 0.22.0, and condense zeroes the block-table row it vacates."""

    CLEARS_VACATED_BLOCKS = True
