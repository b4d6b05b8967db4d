"""Frozen references: vLLM 0.16.0's, 0.19.0's and 0.27.0's `swap_states` and `condense`, with the
allowed-token mask moved as intended.

They write exactly the array regions the version writes, so whole arrays agree with it: 0.16.0
swaps whole `max_model_len` rows of `token_ids_cpu` and `is_token_ids`; 0.19.0 and 0.27.0 swap
columns `[0, max(A1, A2))` only, with A a row's active count taken before the swap. Block-table
rows are swapped whole and moved by their first `num_blocks_per_row` ids. Two upstream bugs are not reproduced:
0.16-0.30 swap the allowed-token mask rows by assigning row views to each other, so both rows end
up with the second row's mask (vLLM PR #48419), and condense leaves the moved request's mask in
the vacated row, where the next request without allowed ids inherits it (vLLM issue #43894).
Here the mask rows are exchanged, and condense clears the row it vacates. The known-divergence
ledger excuses exactly those two differences in conformance.
"""

from __future__ import annotations

from vllm_hotpaths.swap_states import (COUNT_ARRAYS, SAMPLING_ARRAYS, SAMPLING_DICTS, active_count,
                                       check_condense, check_supported, check_swap_rows, swap_dict_values)


class FullRowSwap:
    """`factory(moves)`: `moves` has the `SWAP` and `UNIDIRECTIONAL` members recorded in
    `batch.batch_update_builder.moved` (vLLM's `MoveDirectionality` for vLLM's batch)."""

    CLEARS_VACATED_BLOCKS = False  # from 0.27: condense zeroes the block-table row it vacates

    def __init__(self, moves) -> None:
        self.moves = moves

    def swap_states(self, batch, i1: int, i2: int) -> None:
        check_supported(batch)
        i1, i2 = check_swap_rows(batch, i1, i2)
        for rows in (batch._req_ids, batch.req_output_token_ids, batch.spec_token_ids):
            rows[i1], rows[i2] = rows[i2], rows[i1]
        id_map = batch.req_id_to_index
        id_map[batch._req_ids[i1]], id_map[batch._req_ids[i2]] = i1, i2
        for name in COUNT_ARRAYS:
            _swap_items(getattr(batch, name), i1, i2)
        self._swap_token_rows(batch, i1, i2)
        swap_dict_values(batch.req_prompt_embeds, i1, i2)
        for group in batch.block_table.block_tables:
            _swap_items(group.num_blocks_per_row, i1, i2)
            rows = group.block_table.np
            saved = rows[i1].copy()
            rows[i1] = rows[i2]
            rows[i2] = saved
        if batch.is_pooling_model:
            return
        batch.batch_update_builder.moved.append((i1, i2, self.moves.SWAP))
        for name in SAMPLING_ARRAYS:
            _swap_items(getattr(batch, name), i1, i2)
        for name in SAMPLING_DICTS:
            swap_dict_values(getattr(batch, name), i1, i2)
        mask = batch.allowed_token_ids_mask_cpu_tensor
        if mask is not None:
            saved = mask[i1].clone()
            mask[i1] = mask[i2]
            mask[i2] = saved

    def _swapped_columns(self, batch, i1: int, i2: int) -> int:
        """How many leading columns of the two token rows a swap exchanges: 0.16 whole rows."""
        return batch.token_ids_cpu.shape[1]

    def _swap_token_rows(self, batch, i1: int, i2: int) -> None:
        n = self._swapped_columns(batch, i1, i2)
        for table in (batch.token_ids_cpu, batch.is_token_ids):
            saved = table[i1, :n].copy()
            table[i1, :n] = table[i2, :n]
            table[i2, :n] = saved

    def _moved_count(self, batch, row: int) -> int:
        """Columns condense copies: the active prefix, drafts included."""
        return active_count(batch, row)

    def condense(self, batch) -> None:
        check_supported(batch)
        builder = batch.batch_update_builder
        num_reqs = batch.num_reqs
        holes = builder.removed
        if not holes:
            return
        check_condense(batch, holes)
        if num_reqs == 0:
            batch._req_ids.clear()
            batch.req_output_token_ids.clear()
            batch.spec_token_ids.clear()
            return
        last = num_reqs + len(holes) - 1
        while holes:
            while last in holes:
                last -= 1
            empty = builder.peek_removed()
            if empty >= last:
                break
            builder.pop_removed()
            self._move(batch, last, empty)
            last -= 1
        del batch._req_ids[num_reqs:]
        del batch.req_output_token_ids[num_reqs:]
        del batch.spec_token_ids[num_reqs:]

    def _move(self, batch, src: int, dst: int) -> None:
        req_id = batch._req_ids[src]
        batch._req_ids[dst], batch._req_ids[src] = req_id, None
        outputs = batch.req_output_token_ids
        outputs[dst], outputs[src] = outputs[src], None
        batch.req_id_to_index[req_id] = dst
        count = self._moved_count(batch, src)
        spec = batch.spec_token_ids
        spec[dst], spec[src] = spec[src], spec[dst]
        spec[src].clear()
        batch.token_ids_cpu[dst, :count] = batch.token_ids_cpu[src, :count]
        batch.is_token_ids[dst, :count] = batch.is_token_ids[src, :count]
        if src in batch.req_prompt_embeds:
            batch.req_prompt_embeds[dst] = batch.req_prompt_embeds.pop(src)
        for name in COUNT_ARRAYS:
            getattr(batch, name)[dst] = getattr(batch, name)[src]
        for group in batch.block_table.block_tables:
            blocks = group.num_blocks_per_row[src]
            group.block_table.np[dst, :blocks] = group.block_table.np[src, :blocks]
            group.num_blocks_per_row[dst] = blocks
            if self.CLEARS_VACATED_BLOCKS:
                group.block_table.np[src, :blocks] = 0
                group.num_blocks_per_row[src] = 0
        if batch.is_pooling_model:
            return
        batch.batch_update_builder.moved.append((src, dst, self.moves.UNIDIRECTIONAL))
        for name in SAMPLING_ARRAYS:
            getattr(batch, name)[dst] = getattr(batch, name)[src]
        for name in SAMPLING_DICTS:
            value = getattr(batch, name).pop(src, None)
            if value is not None:
                getattr(batch, name)[dst] = value
        mask = batch.allowed_token_ids_mask_cpu_tensor
        if mask is not None:
            mask[dst] = mask[src]
            mask[src] = False  # the vacated row must not hand this mask to its next request


def _swap_items(array, i1: int, i2: int) -> None:
    array[i1], array[i2] = array[i2], array[i1]


class MaxPrefixSwap(FullRowSwap):
    """vLLM 0.19.0 on: token rows swapped over `[0, max(A1, A2))` (vLLM PR #34733). The maximum is the
    same before and after the per-row counts are exchanged."""

    def _swapped_columns(self, batch, i1: int, i2: int) -> int:
        return max(active_count(batch, i1), active_count(batch, i2))


class MaxPrefixSwap033(MaxPrefixSwap):
    """vLLM 0.27.0 on: as 0.19.0, and condense zeroes the block-table row it vacates (0.31.0
    also fixed both mask bugs, which no reference copies) (upstream: dummy-run batches read stale rows as Mamba state slots)."""

    CLEARS_VACATED_BLOCKS = True
