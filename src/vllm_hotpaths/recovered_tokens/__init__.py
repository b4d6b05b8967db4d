"""Recovered tokens of the rejection sampler: for each draft position, the id drawn from the
residual distribution, as an exponential race `argmax(residual / q)`.

Inputs mirror vLLM's `sample_recovered_tokens`, with the noise `q` ([B, V] fp32, one row per
request, shared by its draft positions) passed in instead of drawn:
`recover(max_spec_len, num_draft_tokens, cu_num_draft_tokens, draft_token_ids, draft_probs,
target_probs, q)` returns one id per draft token, with `draft_token_ids`' dtype.

Semantics every implementation here keeps (upstream's, where upstream defines a result):
- residual: `max(target - draft, 0)`; without draft probabilities, the target with the draft
  token's lane set to 0 (a draft id of -1 masks nothing);
- score: `residual / q` (vLLM 0.16) or `residual * (1 / q)` (vLLM 0.17 on), in Triton on the
  device (Triton's fp32 division is approximate on CUDA);
- the highest score wins, ties go to the lowest index (an all-zero residual gives id 0);
- a NaN residual or score (NaN probabilities, `0 * inf` from q = 0) never wins, and no lane at or
  past V can win: every id is in [0, V). Upstream leaves these cases to Triton's reduction order,
  which can return V (vLLM PR #44744): a ledger entry.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from vllm_hotpaths import vllm_env

# Triton has no CPU backend: without a GPU the kernels of this package run in Triton's
# interpreter, which must be chosen before they are defined.
vllm_env.set_cpu_environment()


class InvalidRecoveryInput(ValueError):
    """Shapes, dtypes, devices or draft counts that do not describe one batch."""


@dataclass(frozen=True)
class Tiles:
    """Vocabulary tiling of a kernel. `block`: lanes per step (a power of two); `split`: blocks
    per program of a split-vocabulary kernel. Results never depend on these; tests shrink them so
    that small vocabularies cross many tile boundaries under Triton's interpreter."""

    block: int
    split: int = 1

    def __post_init__(self):
        if self.block < 1 or self.block & (self.block - 1):
            raise ValueError(f"tile block must be a power of two, got {self.block}")
        if self.split < 1:
            raise ValueError(f"tile split must be at least 1, got {self.split}")


def check_runnable(device: torch.device) -> None:
    """Triton kernels see CPU tensors only in its interpreter (TRITON_INTERPRET=1 before import)."""
    if device.type == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("recovered_tokens kernels on CPU tensors need Triton's interpreter: set "
                           "TRITON_INTERPRET=1 before vllm_hotpaths.recovered_tokens is imported "
                           "(a process of its own where a GPU is visible)")


INDEX_DTYPES = (torch.int32, torch.int64)


def check_inputs(max_spec_len, num_draft_tokens, cu_num_draft_tokens, draft_token_ids,
                 draft_probs, target_probs, q) -> None:
    """Raise InvalidRecoveryInput naming the first problem; checks only host-side metadata (no
    device synchronization), so `cu_num_draft_tokens` is trusted to be the running sum. This runs
    on every decode step of the patched function: well-formed tensors pass one chain of
    comparisons, and only a failing one is looked at tensor by tensor for the message."""

    def fail(message: str):
        raise InvalidRecoveryInput(message)

    counts = num_draft_tokens if type(num_draft_tokens) is list else list(num_draft_tokens)  # builtins below
    if counts and min(counts) < 0:
        fail(f"num_draft_tokens must be >= 0, got {counts}")
    if target_probs.dim() != 2:
        fail(f"target_probs must be [num_tokens, vocab_size], got shape {list(target_probs.shape)}")
    num_tokens, vocab = target_probs.shape
    if vocab < 1:
        fail("vocab_size must be at least 1")
    if sum(counts) != num_tokens:
        fail(f"num_draft_tokens sum to {sum(counts)}, but target_probs has {num_tokens} rows")
    if counts and max(counts) > max_spec_len:
        fail(f"max_spec_len {max_spec_len} is below the largest draft count {max(counts)}")
    device, fp32, requests = target_probs.device, torch.float32, len(counts)
    if not (q.shape == (requests, vocab) and q.dtype == fp32 and q.device == device and q.is_contiguous()
            and cu_num_draft_tokens.shape == (requests,) and cu_num_draft_tokens.dtype in INDEX_DTYPES
            and cu_num_draft_tokens.device == device and cu_num_draft_tokens.is_contiguous()
            and draft_token_ids.shape == (num_tokens,) and draft_token_ids.dtype in INDEX_DTYPES
            and draft_token_ids.device == device and draft_token_ids.is_contiguous()
            and target_probs.dtype == fp32 and target_probs.is_contiguous()
            and (draft_probs is None or (draft_probs.shape == target_probs.shape and draft_probs.dtype == fp32
                                         and draft_probs.device == device and draft_probs.is_contiguous()))):
        fail(_tensor_problem(q, cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs, requests))
    check_runnable(device)


def _tensor_problem(q, cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs, requests: int) -> str:
    """The first tensor of a batch that `check_inputs`' chain refused, and why."""
    num_tokens, vocab = target_probs.shape
    fp32 = (torch.float32,)
    expected = [("q", q, (requests, vocab), fp32),
                ("cu_num_draft_tokens", cu_num_draft_tokens, (requests,), INDEX_DTYPES),
                ("draft_token_ids", draft_token_ids, (num_tokens,), INDEX_DTYPES),
                ("target_probs", target_probs, (num_tokens, vocab), fp32)]
    if draft_probs is not None:
        expected.append(("draft_probs", draft_probs, (num_tokens, vocab), fp32))
    for name, tensor, shape, dtypes in expected:
        if tuple(tensor.shape) != shape:
            return f"{name} must have shape {list(shape)}, got {list(tensor.shape)}"
        if tensor.dtype not in dtypes:
            return f"{name} must be {' or '.join(map(str, dtypes))}, got {tensor.dtype}"
        if tensor.device != target_probs.device:
            return f"{name} is on {tensor.device}, target_probs on {target_probs.device}"
        if not tensor.is_contiguous():
            return f"{name} must be contiguous"
    return "the tensors do not describe one batch"
