"""The installed vLLM's `sample_recovered_tokens`, with the noise given instead of drawn.

Upstream draws `q` inside the function (`torch.empty(...)` then `q.exponential_()`, then one
`exponential_` per seeded request). With no per-request generators it draws once, on the whole
`[B, V]` tensor; the adapter answers that single draw with the given `q` and fails loudly if
upstream draws differently, so everything else (the host reciprocal, the launch, the kernel) is
upstream's own code.
"""

from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace

import torch

from vllm_hotpaths import vllm_env
from vllm_hotpaths.recovered_tokens import Tiles, check_inputs


class UnexpectedNoiseDraw(AssertionError):
    """Upstream no longer draws its noise with one `exponential_()` on a [B, V] tensor."""


@contextmanager
def _noise_from(q: torch.Tensor):
    draws = []
    original = torch.Tensor.exponential_

    def given_noise(tensor, *args, **kwargs):
        if tensor.shape != q.shape or kwargs.get("generator") is not None or draws:
            raise UnexpectedNoiseDraw(f"exponential_ on {list(tensor.shape)} (noise is {list(q.shape)}, "
                                      f"draw {len(draws) + 1})")
        draws.append(tensor.shape)
        return tensor.copy_(q)

    torch.Tensor.exponential_ = given_noise
    try:
        yield draws
    finally:
        torch.Tensor.exponential_ = original
    if q.numel() and not draws:
        raise UnexpectedNoiseDraw("upstream drew no noise")


class LiveRecovery:
    """Same contract as the references; `tiles` is ignored (upstream's own tiling runs)."""

    def __init__(self, device, tiles: Tiles | None = None):
        self.device = torch.device(device)
        self.module = vllm_env.import_vllm("vllm.v1.sample.rejection_sampler")

    def recover(self, max_spec_len, num_draft_tokens, cu_num_draft_tokens, draft_token_ids,
                draft_probs, target_probs, q):
        check_inputs(max_spec_len, num_draft_tokens, cu_num_draft_tokens, draft_token_ids,
                     draft_probs, target_probs, q)
        metadata = SimpleNamespace(generators={})
        with _noise_from(q):
            return self.module.sample_recovered_tokens(
                max_spec_len, list(num_draft_tokens), cu_num_draft_tokens, draft_token_ids,
                draft_probs, target_probs, metadata, self.device)
