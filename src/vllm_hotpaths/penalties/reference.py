"""Frozen semantics of vLLM's penalties path (v1 `Sampler` -> `apply_all_penalties`), the same in
0.16.0, 0.22.0 and 0.33.0 (the conformance property holds against each; keyed 0.16.0, the first).

Upstream, every sampling step turns the per-request output lists into a padded int64 tensor
(`[len(rows), max(len(row))]`, pad = vocab size, every `-1` async placeholder mapped to the pad),
counts tokens per vocabulary bin with `scatter_add_` over `V + 1` bins (the pad bin is dropped),
then penalizes fp32 logits in place: repetition (prompt or output occurrence), frequency
(output count), presence (output occurrence), in that order.

The repetition step has two arithmetics upstream, chosen by the tensor: the CUDA op (taken for
contiguous CUDA logits) computes `x / p` for `x > 0` and `x * p` otherwise on penalized entries
only; the torch fallback (CPU, or non-contiguous CUDA logits) multiplies every entry by
`where(x > 0, 1 / pen, pen)` with `pen = 1` off the mask. They differ bitwise, so each device keeps
upstream's own choice.

Where upstream fails deep inside `scatter_add_` (ids below -1 or above V), these semantics raise
`InvalidTokenId` first, naming the row, position and value.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

VLLM_VERSION = "0.16.0"


class InvalidTokenId(ValueError):
    """An output token id outside [-1, vocab_size] (or not an integer)."""

    def __init__(self, row: int, position: int, value: object, vocab_size: int) -> None:
        super().__init__(
            f"output token id {value!r} at row {row}, position {position} is outside "
            f"[-1, {vocab_size}] (vocab size {vocab_size}; -1 is the async placeholder)"
        )
        self.row, self.position, self.value = row, position, value


def token_array(values: Sequence[int], vocab_size: int) -> tuple[np.ndarray, tuple[int, object] | None]:
    """`values` as an int64 array, and (index, value) of the first entry that is not an integer
    in [-1, vocab_size] (None when all are valid)."""
    try:
        array = np.asarray(values)
    except (OverflowError, ValueError):
        array = np.asarray(values, dtype=object)
    if array.size and array.dtype.kind not in "iu":
        for j, v in enumerate(values):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not -1 <= v <= vocab_size:
                return array, (j, v)
    if array.size:
        bad = (array < -1) | (array > vocab_size)
        if bad.any():
            j = int(np.argmax(bad))
            return array, (j, int(array[j]))
    return array.astype(np.int64, copy=False), None


def padded_output_tokens(rows: Sequence[Sequence[int]], vocab_size: int) -> np.ndarray:
    """Upstream's padded tensor as numpy: `[len(rows), max len]`, pad V, -1 mapped to V."""
    max_len = max(map(len, rows), default=0)
    out = np.full((len(rows), max_len), vocab_size, dtype=np.int64)
    for i, row in enumerate(rows):
        if len(row):
            array, invalid = token_array(row, vocab_size)
            if invalid is not None:
                raise InvalidTokenId(i, invalid[0], invalid[1], vocab_size)
            out[i, : len(row)] = array
    out[out == -1] = vocab_size
    return out


def token_bins(tokens: torch.Tensor, vocab_size: int, num_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row occurrence counts over the vocabulary (pad bin dropped) and their `> 0` mask."""
    counts = torch.zeros((num_rows, vocab_size + 1), dtype=torch.int64, device=tokens.device)
    counts.scatter_add_(1, tokens, torch.ones_like(tokens))
    counts = counts[:, :vocab_size]
    return counts, counts > 0


def repetition_penalty_(logits: torch.Tensor, prompt_mask: torch.Tensor, output_mask: torch.Tensor,
                        penalties: torch.Tensor) -> None:
    """Upstream's repetition step, with the arithmetic upstream picks for this tensor."""
    if logits.is_cuda and logits.is_contiguous():
        compiled_op_repetition_(logits, prompt_mask, output_mask, penalties)
    else:
        torch_fallback_repetition_(logits, prompt_mask, output_mask, penalties)


def compiled_op_repetition_(logits, prompt_mask, output_mask, penalties) -> None:
    """vLLM's CUDA op: divide positive penalized logits, multiply the others; unpenalized untouched."""
    p = penalties.unsqueeze(1)
    penalized = torch.where(logits > 0, logits / p, logits * p)
    logits.copy_(torch.where(prompt_mask | output_mask, penalized, logits))


def torch_fallback_repetition_(logits, prompt_mask, output_mask, penalties) -> None:
    """vLLM's torch fallback: every entry is scaled, by exactly 1.0 where not penalized."""
    per_entry = penalties.unsqueeze(1).repeat(1, logits.size(1))
    per_entry = torch.where(prompt_mask | output_mask, per_entry, 1.0)
    logits *= torch.where(logits > 0, 1.0 / per_entry, per_entry)


def apply_penalties_(
    logits: torch.Tensor,
    prompt_tokens: torch.Tensor,
    output_tokens: torch.Tensor,
    presence: torch.Tensor,
    frequency: torch.Tensor,
    repetition: torch.Tensor,
    repetition_step=repetition_penalty_,
) -> torch.Tensor:
    """Penalize `logits` in place given padded prompt and output token tensors; returns logits.
    `repetition_step(logits, prompt_mask, output_mask, penalties)` does the repetition part."""
    num_rows, vocab_size = logits.shape
    _, prompt_mask = token_bins(prompt_tokens, vocab_size, num_rows)
    output_counts, output_mask = token_bins(output_tokens, vocab_size, num_rows)
    repetition_step(logits, prompt_mask, output_mask, repetition)
    logits -= frequency.unsqueeze(1) * output_counts
    logits -= presence.unsqueeze(1) * output_mask
    return logits


def check_logits(logits: torch.Tensor, vocab_size: int) -> None:
    if logits.dim() != 2 or logits.shape[1] != vocab_size or logits.dtype != torch.float32:
        raise ValueError(
            f"logits must be float32 [num_rows, {vocab_size}], got {logits.dtype} {list(logits.shape)}"
        )


class ReferencePenalties:
    """vLLM 0.16.0-0.33.0 penalties: list-based padded output tokens, then in-place penalties."""

    def __init__(self, vocab_size: int, device: torch.device | str = "cpu", batch=None) -> None:
        self.vocab_size = vocab_size
        self.device = torch.device(device)

    def output_tokens(self, rows: Sequence[Sequence[int]]) -> torch.Tensor:
        return torch.from_numpy(padded_output_tokens(rows, self.vocab_size)).to(self.device)

    def apply_all_penalties(self, logits, prompt_tokens, presence, frequency, repetition, rows):
        check_logits(logits, self.vocab_size)
        tokens = self.output_tokens(rows)
        return apply_penalties_(logits, prompt_tokens, tokens, presence, frequency, repetition)


# -- the async placeholder repair ---------------------------------------------------------------
REPAIR_SINCE = "0.22.0"  # 0.16.0 replaces from the list's first -1 on, not its trailing run


def repair_row(output: list[int], sampled: list[int]) -> None:
    """One row of vLLM's placeholder repair (0.22.0, 0.33.0): the trailing run of `-1` in
    `output` takes the valid prefix of `sampled` (ids before its first `-1`), as many as both
    have; the rest of the run goes, so the list can shrink. Like upstream, `sampled` is cut to
    the ids used. Nothing happens unless `output` ends in `-1` and `sampled` is non-empty."""
    if not output or output[-1] != -1 or not sampled:
        return
    valid = len(sampled) if sampled[-1] != -1 else sampled.index(-1)
    first = len(output)
    while first > 0 and output[first - 1] == -1:
        first -= 1
    del sampled[min(valid, len(output) - first):]
    output[first:] = sampled


def repair_placeholders(batch, sampled: list[list[int]] | None = None) -> None:
    """`InputBatch.update_async_output_token_ids` (0.22.0, 0.33.0) on any object with its
    attributes: under async scheduling, each row whose request ran in the previous step
    (`prev_req_id_to_index`) and whose output list ends in a placeholder gets the ids sampled
    for it then (`repair_row`). The previous step's copy to the host is waited for once, when
    the first such row is met, unless `sampled` (those ids as lists) is given."""
    rows = batch.sampling_metadata.output_token_ids
    if batch.sampled_token_ids_cpu is None or not rows:
        return  # no async scheduling, or nothing reads the output ids
    previous = batch.prev_req_id_to_index
    if previous is None:
        raise ValueError("async scheduling without prev_req_id_to_index: no previous step to repair from")
    for index, req_id in enumerate(batch.req_ids):
        prev_index = previous.get(req_id)
        if prev_index is None:
            continue
        output = rows[index]
        if not output or output[-1] != -1:
            continue  # no placeholder (tokens were discarded after a KV-load failure)
        if sampled is None:
            batch.async_copy_ready_event.synchronize()
            sampled = batch.sampled_token_ids_cpu.tolist()
        repair_row(output, sampled[prev_index])
