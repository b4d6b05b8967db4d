"""`CompactCounts`' row bookkeeping on its own (its contents are the patch law's business)."""

import numpy as np
import torch

from vllm_hotpaths.sampler_mrv2.penalty_tables import CompactCounts


def test_release_vacated_frees_the_rows_of_slots_gone_and_keeps_the_others():
    table = CompactCounts(vocab_size=40, max_num_reqs=8, device="cpu")
    for slot in (6, 2, 5):
        table.add(slot, prompt=[slot], output=[slot, slot])
    kept_row = int(table.row_of[2])
    table.release_vacated({2: "b", 3: "unpenalized"})
    assert list(np.flatnonzero(table.row_of >= 0)) == [2] and int(table.row_of[2]) == kept_row
    assert torch.equal(table.row_of_device, torch.from_numpy(table.row_of))
    assert int(table.counts[kept_row, 2]) == 2 and table.counts.shape[0] == 4
    assert sorted(table.free) == sorted({0, 1, 2, 3} - {kept_row})
    table.add(7, prompt=[], output=[1])  # a freed row is reused before the tables grow
    assert table.counts.shape[0] == 4 and int(table.row_of[7]) != kept_row
    table.release_vacated({})
    assert table.nbytes == 0 and (table.row_of == -1).all() and (table.row_of_device == -1).all()


def test_release_vacated_drops_tables_no_row_holds_any_more():
    table = CompactCounts(vocab_size=40, max_num_reqs=4, device="cpu")
    table.add(1, prompt=[3], output=[])
    table.remove(1)
    assert table.nbytes > 0  # `remove` alone keeps the capacity
    table.release_vacated({0: "a"})
    assert table.nbytes == 0 and table.free == []
