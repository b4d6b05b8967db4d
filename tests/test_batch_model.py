"""The standalone batch model moves like vLLM: its transitions conform to the installed vLLM.

The penalties strategies trust `TokenBatch` to reproduce upstream's placeholder repair and spec
combining; here both are compared with vLLM's own code on the same inputs (`InputBatch`'s repair
runs unbound on a stand-in holding just the attributes it reads).
"""

from types import SimpleNamespace

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from vllm_hotpaths import vllm_env
from vllm_hotpaths.testing.batches.penalties import TokenBatch

pytestmark = pytest.mark.needs_vllm

ids = st.integers(0, 9)
outputs = st.lists(st.one_of(ids, st.just(-1)), max_size=8)
# A list ending in a run of placeholders, and a sampled row of `valid` ids padded with -1:
# runs shorter, equal and longer than the valid count all occur.
placeholder_outputs = st.builds(lambda head, run: head + [-1] * run, outputs, st.integers(0, 3))
sampled_rows = st.builds(lambda valid, pad: valid + [-1] * pad,
                         st.lists(ids, min_size=1, max_size=4), st.integers(0, 2))


@given(st.lists(st.tuples(placeholder_outputs, sampled_rows, st.booleans()), min_size=1, max_size=4))
def test_repair_matches_vllm(rows):
    input_batch = vllm_env.import_vllm("vllm.v1.worker.gpu_input_batch").InputBatch
    ours = TokenBatch(len(rows), 64, 10)
    theirs = []
    for out, sampled, in_previous_step in rows:
        r = ours.add_request([], [])
        ours.req_output_token_ids[r].extend(out)
        ours.pending[r] = list(sampled) if in_previous_step else None
        theirs.append(list(out))
    width = max(len(s) for _, s, _ in rows)
    sampled_cpu = torch.tensor([s + [-1] * (width - len(s)) for _, s, _ in rows])
    stand_in = SimpleNamespace(
        sampling_metadata=SimpleNamespace(output_token_ids=theirs),
        sampled_token_ids_cpu=sampled_cpu,
        async_copy_ready_event=SimpleNamespace(synchronize=lambda: None),
        prev_req_id_to_index={f"r{i}": i for i, (_, _, prev) in enumerate(rows) if prev},
        req_ids=[f"r{i}" for i in range(len(rows))],
    )
    input_batch.update_async_output_token_ids(stand_in)
    for r, (_, _, in_previous_step) in enumerate(rows):
        if in_previous_step:
            ours.repair(r)
    assert [list(o) for o in ours.req_output_token_ids] == theirs


@given(st.lists(st.tuples(outputs, st.lists(st.one_of(ids, st.just(-1)), max_size=3)), max_size=4))
def test_combined_rows_match_vllm(rows):
    sampler = vllm_env.import_vllm("vllm.v1.sample.sampler").Sampler
    ours = TokenBatch(max(len(rows), 1), 64, 10)
    for out, spec in rows:
        r = ours.add_request([], out)
        ours.spec_token_ids[r].extend(spec)
    theirs = sampler._combine_outputs_with_spec_tokens(ours.req_output_token_ids, ours.spec_token_ids)
    combined = ours.combined_rows()
    assert combined == theirs
    for mine, upstream, out in zip(combined, theirs, ours.req_output_token_ids):
        assert (mine is out) == (upstream is out)  # rows without drafts stay the live list
