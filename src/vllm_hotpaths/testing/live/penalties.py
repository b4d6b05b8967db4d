"""The installed vLLM's own penalties path, behind the hot path's contract (conformance only)."""

from __future__ import annotations

import torch

from vllm_hotpaths.penalties.reference import ReferencePenalties, apply_penalties_, repetition_penalty_
from vllm_hotpaths.vllm_env import compiled_op, import_vllm


class LivePenalties:
    def __init__(self, vocab_size: int, device: torch.device | str = "cpu", batch=None) -> None:
        self.vocab_size = vocab_size
        self.device = torch.device(device)
        self._penalties = import_vllm("vllm.v1.sample.ops.penalties")

    def __deepcopy__(self, memo):
        return self  # no state of its own (upstream's functions, called afresh every step)

    def output_tokens(self, rows):
        # What `apply_all_penalties` builds before penalizing.
        tokens = self._penalties._convert_to_tensors(rows, self.vocab_size, self.device)
        return tokens.masked_fill_(tokens == -1, self.vocab_size)

    def apply_all_penalties(self, logits, prompt_tokens, presence, frequency, repetition, rows):
        return self._penalties.apply_all_penalties(
            logits, prompt_tokens, presence, frequency, repetition, rows
        )


class LiveRepetitionOp(ReferencePenalties):
    """The reference with its repetition step done by vLLM's compiled CUDA op where upstream
    calls it (contiguous CUDA logits): checks the reference's CUDA arithmetic against the op."""

    def __init__(self, vocab_size: int, device: torch.device | str = "cpu", batch=None) -> None:
        super().__init__(vocab_size, device, batch)
        self._op = compiled_op("apply_repetition_penalties_")
        if self._op is None:
            raise ImportError("vLLM's compiled op apply_repetition_penalties_ cannot be loaded")

    def __deepcopy__(self, memo):
        return self  # no state of its own (the reference's builder and vLLM's op)

    def _repetition(self, logits, prompt_mask, output_mask, penalties) -> None:
        if logits.is_cuda and logits.is_contiguous():
            self._op(logits, prompt_mask, output_mask, penalties)
        else:
            repetition_penalty_(logits, prompt_mask, output_mask, penalties)

    def apply_all_penalties(self, logits, prompt_tokens, presence, frequency, repetition, rows):
        tokens = self.output_tokens(rows)
        return apply_penalties_(logits, prompt_tokens, tokens, presence, frequency, repetition,
                                repetition_step=self._repetition)
