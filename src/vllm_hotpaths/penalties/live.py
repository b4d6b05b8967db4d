"""The installed vLLM's own penalties path, behind the hot path's contract (conformance only)."""

from __future__ import annotations

import torch

from vllm_hotpaths.vllm_env import import_vllm


class LivePenalties:
    def __init__(self, vocab_size: int, device: torch.device | str = "cpu", batch=None) -> None:
        self.vocab_size = vocab_size
        self.device = torch.device(device)
        self._penalties = import_vllm("vllm.v1.sample.ops.penalties")

    def output_tokens(self, rows):
        # What `apply_all_penalties` builds before penalizing.
        tokens = self._penalties._convert_to_tensors(rows, self.vocab_size, self.device)
        return tokens.masked_fill_(tokens == -1, self.vocab_size)

    def apply_all_penalties(self, logits, prompt_tokens, presence, frequency, repetition, rows):
        return self._penalties.apply_all_penalties(
            logits, prompt_tokens, presence, frequency, repetition, rows
        )
