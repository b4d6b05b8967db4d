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


def check_inputs(max_spec_len, num_draft_tokens, cu_num_draft_tokens, draft_token_ids,
                 draft_probs, target_probs, q) -> None:
    """Raise InvalidRecoveryInput naming the first problem; checks only host-side metadata (no
    device synchronization), so `cu_num_draft_tokens` is trusted to be the running sum."""

    def fail(message: str):
        raise InvalidRecoveryInput(message)

    counts = list(num_draft_tokens)  # builtins over the list: this runs on every decode step
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
    expected = {
        "q": (q, (len(counts), vocab), (torch.float32,)),
        "cu_num_draft_tokens": (cu_num_draft_tokens, (len(counts),), (torch.int32, torch.int64)),
        "draft_token_ids": (draft_token_ids, (num_tokens,), (torch.int32, torch.int64)),
        "target_probs": (target_probs, (num_tokens, vocab), (torch.float32,)),
    }
    if draft_probs is not None:
        expected["draft_probs"] = (draft_probs, (num_tokens, vocab), (torch.float32,))
    for name, (tensor, shape, dtypes) in expected.items():
        if tuple(tensor.shape) != shape:
            fail(f"{name} must have shape {list(shape)}, got {list(tensor.shape)}")
        if tensor.dtype not in dtypes:
            fail(f"{name} must be {' or '.join(map(str, dtypes))}, got {tensor.dtype}")
        if tensor.device != target_probs.device:
            fail(f"{name} is on {tensor.device}, target_probs on {target_probs.device}")
        if not tensor.is_contiguous():
            fail(f"{name} must be contiguous")
    check_runnable(target_probs.device)
