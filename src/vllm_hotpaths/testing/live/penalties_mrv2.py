"""The installed vLLM's Model Runner V2 penalties behind the `penalties_mrv2` contract: vLLM's own
`RequestState`, `PenaltiesState` (admission `bincount`, the penalties kernel) and `post_update`
(the per-step count update), fed as the model runner feeds them. Slots are chosen by the caller
(vLLM pops its free list: the slot asked for is put last on it). Without pinned memory
(`buffer_utils.UvaBuffer`) a host tensor stands in while the states are built (live/logits_copy).
"""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import numpy as np
import torch

from vllm_hotpaths import vllm_env
from vllm_hotpaths.penalties_mrv2 import InvalidPenaltiesInput
from vllm_hotpaths.testing.live.logits_copy import admit, host_uva, request_state, unpinned_h2d


def _check_ids(vocab_size: int, *lists, lowest: int = 0) -> None:
    """vLLM's kernels write counts and prompt bits at these ids unchecked: an id outside the
    vocabulary would corrupt memory, so the adapter refuses it first."""
    for values in lists:
        bad = [t for t in values if not lowest <= t < vocab_size]
        if bad:
            raise InvalidPenaltiesInput(f"token id {bad[0]} is outside [{lowest}, {vocab_size}): vLLM's kernels "
                                        "would write outside their tables")


class LiveSlotPenalties:
    """The API from 0.17 to 0.30: `PenaltiesState(req_states)`, `apply_penalties(logits, ...)`
    (until 0.21 also given the speculative length its draft loop unrolls to)."""

    def __init__(self, vocab_size: int, max_num_reqs: int, max_model_len: int, device="cpu") -> None:
        self._penalties = vllm_env.import_vllm("vllm.v1.worker.gpu.sample.penalties")
        from vllm.v1.worker.gpu import buffer_utils
        from vllm.v1.worker.gpu.input_batch import post_update

        self._post_update, self._buffer_utils = post_update, buffer_utils
        self.device = torch.device(device)
        self.vocab_size, self.max_model_len = vocab_size, max_model_len
        with host_uva(buffer_utils):
            self.req_states = request_state(max_num_reqs, max_model_len, vocab_size, self.device)
            self.state = self._state()

    def __deepcopy__(self, memo):
        raise TypeError("vLLM's states hold pinned buffers and compiled kernels; the checks never copy them")

    def _state(self):
        return self._penalties.PenaltiesState(self.req_states)

    def _admit(self, slot: int, prompt: list[int], tokens: list[int]) -> None:
        admit(self.req_states, f"slot-{slot}", len(prompt), tokens, self.max_model_len)

    def add_request(self, slot: int, prompt, resumed, penalties) -> None:
        _check_ids(self.vocab_size, prompt, resumed)
        rs = self.req_states
        rs.free_indices.remove(slot)  # raises ValueError for a slot in use or outside the table
        rs.free_indices.append(slot)
        prompt, tokens = list(prompt), list(prompt) + list(resumed)
        self._admit(slot, prompt, tokens)
        repetition, frequency, presence = penalties
        self.state.add_request(slot, SimpleNamespace(repetition_penalty=repetition, frequency_penalty=frequency,
                                                     presence_penalty=presence))
        with unpinned_h2d(), host_uva(self._buffer_utils):  # (0.16 makes its UVA pool here)
            rs.apply_staged_writes()
            self._apply_staged_writes()

    def _apply_staged_writes(self) -> None:
        self.state.apply_staged_writes()

    def remove_request(self, slot: int) -> None:
        req_id = f"slot-{slot}"
        if req_id not in self.req_states.req_id_to_index:  # (until 0.21 removing one is silent)
            raise KeyError(f"no request in slot {slot}")
        self.req_states.remove_request(req_id)

    def commit(self, slots, sampled) -> None:
        """vLLM's `post_update` for the step's requests: `sampled[i]` accepted, none rejected."""
        if not len(slots):
            return
        _check_ids(self.vocab_size, *sampled)
        rs, dev = self.req_states, self.device
        width = max(1, max(map(len, sampled)))
        table = torch.zeros((len(slots), width), dtype=torch.int64)
        for i, tokens in enumerate(sampled):
            table[i, :len(tokens)] = torch.tensor(list(tokens), dtype=torch.int64)
        i32 = dict(dtype=torch.int32, device=dev)
        counts = torch.tensor([len(t) for t in sampled], **i32)
        self._post_update(
            torch.tensor(list(slots), **i32), rs.num_computed_tokens.gpu, rs.last_sampled_tokens,
            self.state.output_bin_counts, table.to(dev), counts, torch.zeros(len(slots), **i32),
            torch.cat([torch.zeros(1, **i32), torch.cumsum(counts, 0, dtype=torch.int32)]),
            *self._token_history())

    def _token_history(self) -> tuple:
        """`post_update`'s last arguments: the request table's token ids and lengths (0.17 on)."""
        return self.req_states.all_token_ids.gpu, self.req_states.total_len.gpu

    def _layout(self, rows, local_pos, input_ids):
        on = dict(dtype=torch.int32, device=self.device)
        idx_mapping_np = np.array(list(dict.fromkeys(int(r) for r in rows)), dtype=np.int32)
        return (torch.tensor(list(rows), **on), idx_mapping_np, torch.tensor(list(input_ids), **on),
                torch.tensor(list(local_pos), **on))

    def apply_penalties(self, logits, rows, local_pos, input_ids) -> torch.Tensor:
        _check_ids(self.vocab_size, input_ids, lowest=-1)
        expanded, idx_mapping_np, ids, local = self._layout(rows, local_pos, input_ids)
        # Until 0.21 the kernel counts a row's earlier drafts up to the model runner's
        # num_speculative_steps + 1; any length covering the step's drafts gives the same counts.
        vllm_env.call(self.state.apply_penalties, logits, expanded, idx_mapping_np, ids, local,
                      num_speculative_tokens=max(local_pos, default=0) + 1)
        return logits


class LiveSlotPenalties016(LiveSlotPenalties):
    """0.16's API: `PenaltiesState(max_num_reqs, vocab_size, device)`, whose staged writes count
    the prefill tokens the model runner passes; `post_update` without the token table."""

    def _state(self):
        return self._penalties.PenaltiesState(self.req_states.max_num_reqs, self.vocab_size, self.device)

    def _apply_staged_writes(self) -> None:
        rs = self.req_states
        self.state.apply_staged_writes(rs.prefill_token_ids.gpu, rs.prefill_len.np, rs.prompt_len)

    def _token_history(self) -> tuple:
        return ()


class LiveSlotPenalties033(LiveSlotPenalties):
    """The API from 0.31: `PenaltiesState(vllm_config, LogitsProcRequestState)`, `apply(logits, ctx)`."""

    def _state(self):
        from vllm.config import VllmConfig
        from vllm.v1.worker.gpu.sample.logits_processor.interface import LogitsProcRequestState

        return self._penalties.PenaltiesState(VllmConfig(), LogitsProcRequestState.from_request_state(self.req_states))

    def apply_penalties(self, logits, rows, local_pos, input_ids) -> torch.Tensor:
        from vllm.v1.worker.gpu.sample.logits_processor.interface import LogitsContext

        _check_ids(self.vocab_size, input_ids, lowest=-1)
        expanded, idx_mapping_np, ids, local = self._layout(rows, local_pos, input_ids)
        # The penalties read the layout only; positions and lengths are what a real step would pass.
        ctx = vllm_env.call(LogitsContext, expanded_idx_mapping=expanded,
                            idx_mapping=torch.from_numpy(idx_mapping_np).to(self.device),
                            idx_mapping_np=idx_mapping_np, expanded_local_pos=local, input_ids=ids,
                            pos=torch.zeros(len(rows), dtype=torch.int64, device=self.device),
                            seq_lens_upper_bound_np=np.zeros(len(idx_mapping_np), dtype=np.int32))
        out = self.state.apply(logits, ctx)
        assert out is logits, "PenaltiesState.apply returned a new tensor"
        return out


def live_slot_penalties(vocab_size: int, max_num_reqs: int, max_model_len: int, device="cpu"):
    """The installed vLLM's Model Runner V2 penalties behind the contract (by its API: 0.16's
    own state, a logits processor's `apply(logits, ctx)` from 0.31)."""
    penalties = vllm_env.import_vllm("vllm.v1.worker.gpu.sample.penalties")
    if hasattr(penalties.PenaltiesState, "apply"):
        cls = LiveSlotPenalties033
    elif "max_num_reqs" in inspect.signature(penalties.PenaltiesState).parameters:
        cls = LiveSlotPenalties016
    else:
        cls = LiveSlotPenalties
    return cls(vocab_size, max_num_reqs, max_model_len, device)
