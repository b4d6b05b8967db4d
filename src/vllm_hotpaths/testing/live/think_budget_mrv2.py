"""The installed vLLM's Model Runner V2 thinking budget behind the `think_budget_mrv2` contract:
vLLM's own `RequestState`, `ThinkingBudgetState` (its marker-cache and forcing kernels) and
`post_update`, fed as the model runner feeds them: `RequestState.add_request`, the sampler's
`add_request` of the budget state, both `apply_staged_writes`; per step `apply` with the batch
layout; after sampling `post_update`. Slots are chosen by the caller (vLLM pops its free list: the
slot asked for is put last on it). Without pinned memory (`buffer_utils.UvaBuffer`) a host tensor
stands in while the states are built (live/logits_copy). What vLLM would never hand over is
refused first, with the reference's checks: its kernels do not check ids or slots.
"""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import numpy as np
import torch

from vllm_hotpaths import vllm_env
from vllm_hotpaths.testing.live.logits_copy import host_uva, request_state
from vllm_hotpaths.think_budget_mrv2 import InvalidThinkingInput, ThinkSlotsConfig
from vllm_hotpaths.think_budget_mrv2.reference import SlotThinkBudget


class LiveSlotThinkBudget:
    def __init__(self, config: ThinkSlotsConfig, device="cpu") -> None:
        self._module = vllm_env.import_vllm("vllm.v1.worker.gpu.sample.thinking_budget")
        from vllm.v1.worker.gpu import buffer_utils
        from vllm.v1.worker.gpu.input_batch import post_update

        # The reference's bookkeeping checks every call before vLLM's code sees it.
        self._checks = SlotThinkBudget(config, device)
        self._post_update = post_update
        self.config, self.device = self._checks.config, torch.device(device)
        reasoning = SimpleNamespace(reasoning_start_token_ids=list(self.config.start_ids),
                                    reasoning_end_token_ids=list(self.config.end_ids),
                                    natural_reasoning_end_token_ids=list(self.config.natural_end_ids))
        c = self.config
        with host_uva(buffer_utils):
            self.req_states = request_state(c.max_num_reqs, c.max_model_len, c.vocab_size, self.device)
            self.state = self._module.ThinkingBudgetState(self.req_states, reasoning)
        # post_update counts outputs per lane (penalties); this state has none of its own
        self._bin_counts = torch.zeros((c.max_num_reqs, c.vocab_size), dtype=torch.int32, device=self.device)

    def __deepcopy__(self, memo):
        raise TypeError("vLLM's states hold pinned buffers and compiled kernels; the checks never copy them")

    def add_request(self, slot: int, prompt, resumed, budget) -> None:
        self._checks.add_request(slot, prompt, resumed, budget)
        rs = self.req_states
        rs.free_indices.remove(slot)
        rs.free_indices.append(slot)
        tokens = list(prompt) + list(resumed)
        admit = dict(num_computed_tokens=len(tokens))
        if "max_tokens" in inspect.signature(rs.add_request).parameters:
            admit["max_tokens"] = self.config.max_model_len - len(prompt)
        rs.add_request(f"slot-{slot}", len(prompt), tokens, **admit)
        assert rs.req_id_to_index[f"slot-{slot}"] == slot
        # vLLM's SamplingParams carries the budget; the state reads only that field.
        self.state.add_request(slot, SimpleNamespace(thinking_token_budget=budget))
        rs.apply_staged_writes()
        self.state.apply_staged_writes()

    def remove_request(self, slot: int) -> None:
        self._checks.remove_request(slot)
        freed = self.req_states.remove_request(f"slot-{slot}")
        assert freed is not None and freed is not False, f"vLLM held no request in slot {slot}"

    def commit(self, slots, sampled) -> None:
        """vLLM's `post_update` for the step's requests: `sampled[i]` accepted, none rejected."""
        self._checks.commit(slots, sampled)
        if not len(slots):
            return
        rs, dev = self.req_states, self.device
        width = max(1, max(map(len, sampled)))
        table = torch.zeros((len(slots), width), dtype=torch.int64)
        for i, tokens in enumerate(sampled):
            table[i, :len(tokens)] = torch.tensor(list(tokens), dtype=torch.int64)
        i32 = dict(dtype=torch.int32, device=dev)
        counts = torch.tensor([len(t) for t in sampled], **i32)
        self._post_update(
            torch.tensor(list(slots), **i32), rs.num_computed_tokens.gpu, rs.last_sampled_tokens,
            self._bin_counts, table.to(dev), counts, torch.zeros(len(slots), **i32),
            torch.cat([torch.zeros(1, **i32), torch.cumsum(counts, 0, dtype=torch.int32)]),
            rs.all_token_ids.gpu, rs.total_len.gpu)

    def apply(self, logits: torch.Tensor, rows, local_pos, input_ids) -> torch.Tensor:
        rows, local_pos, input_ids = self._checks.check(logits, rows, local_pos, input_ids)
        on = dict(dtype=torch.int32, device=self.device)
        idx_mapping_np = np.array(list(dict.fromkeys(rows)), dtype=np.int32)
        layout = dict(expanded_idx_mapping=torch.tensor(rows, **on), idx_mapping_np=idx_mapping_np,
                      idx_mapping=torch.from_numpy(idx_mapping_np).to(self.device),
                      expanded_local_pos=torch.tensor(local_pos, **on), input_ids=torch.tensor(input_ids, **on),
                      pos=torch.zeros(len(rows), dtype=torch.int64, device=self.device),
                      seq_lens_upper_bound_np=np.zeros(len(idx_mapping_np), dtype=np.int32))
        parameters = inspect.signature(self.state.apply).parameters
        if "ctx" in parameters:  # 0.33: the step's layout as one LogitsContext
            from vllm.v1.worker.gpu.sample.logits_processor.interface import LogitsContext

            out = self.state.apply(logits, LogitsContext(**layout))
        else:  # an older signature: the layout's tensors by name
            out = self.state.apply(logits, **{k: v for k, v in layout.items() if k in parameters})
        assert out is None or out is logits, "vLLM's ThinkingBudgetState.apply returned a new tensor"
        return logits


def live_slot_think_budget(config: ThinkSlotsConfig, device="cpu") -> LiveSlotThinkBudget:
    """The installed vLLM's Model Runner V2 thinking budget behind the contract."""
    return LiveSlotThinkBudget(config, device)
