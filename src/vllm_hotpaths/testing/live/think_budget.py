"""The installed vLLM's own `ThinkingBudgetStateHolder`, behind the think_budget contract.

Requests enter through vLLM's `SamplingParams` (so 0.33's budget validation is upstream's own),
batch updates through vLLM's `BatchUpdate` and `MoveDirectionality`.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from vllm_hotpaths import vllm_env
from vllm_hotpaths.registry import get as get_hotpath
from vllm_hotpaths.think_budget import ThinkConfig
from vllm_hotpaths.think_budget.reference import normalized_states


class LiveThinkBudget:
    def __init__(self, config: ThinkConfig, device: torch.device | str = "cpu") -> None:
        module = vllm_env.import_vllm("vllm.v1.sample.thinking_budget_state")
        interface = vllm_env.import_vllm("vllm.v1.sample.logits_processor.interface")
        self._sampling_params = vllm_env.import_vllm("vllm.sampling_params").SamplingParams
        self._batch_update = interface.BatchUpdate
        self._directions = interface.MoveDirectionality
        reasoning = SimpleNamespace(reasoning_start_token_ids=list(config.start_ids),
                                    reasoning_end_token_ids=list(config.end_ids))
        self.holder = module.ThinkingBudgetStateHolder(
            reasoning, config.max_num_seqs, config.num_spec_tokens, torch.device(device), False)
        reference = get_hotpath("think_budget").reference(vllm_env.installed_version())
        self._state_keys = reference.STATE_KEYS

    def sync_batch(self, update) -> None:
        if update is None:
            return self.holder.sync_batch(None)
        added = [(index, self._sampling_params(thinking_token_budget=params.thinking_token_budget),
                  prompt, output) for index, params, prompt, output in update.added]
        moved = [(i1, i2, self._directions[direction.name]) for i1, i2, direction in update.moved]
        self.holder.sync_batch(self._batch_update(
            batch_size=update.batch_size, removed=list(update.removed), added=added, moved=moved))

    def has_tracked_requests(self) -> bool:
        return self.holder.has_tracked_requests()

    def update_state(self, rows, spec_token_ids=None, repeat_indices=None) -> None:
        self.holder.update_state(rows, spec_token_ids, repeat_indices)

    def apply_to_logits(self, logits, predict_bonus_token, spec_token_ids=None):
        return self.holder.apply_to_logits(logits, predict_bonus_token, spec_token_ids)

    def states(self):
        return normalized_states(self.holder._state, self._state_keys)
