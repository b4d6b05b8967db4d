"""Installs the split-vocabulary kernel as vLLM's `rejection_sampler.sample_recovered_tokens`.

The replacement draws the noise as upstream does, call for call (one `exponential_()` over the
whole `[B, V]` tensor, then one per seeded request that has drafts, from its generator), so the
random streams advance exactly as upstream's, and hands it to the split-vocab variant whose
reference the installed vLLM is checked against (0.17.0 on: `split-vocab@0.17.0`). Inputs
the fast path refuses, and 0.33's `use_fp64_gumbel` noise, go to upstream's function before any
noise is drawn.
"""

from __future__ import annotations

import torch

from vllm_hotpaths import registry, vllm_env
from vllm_hotpaths.recovered_tokens import InvalidRecoveryInput, check_inputs

REJECTION_SAMPLER = "vllm.v1.sample.rejection_sampler"
UPSTREAM: dict[str, object] = {}  # the replaced function, for the properties' unpatched side


def draw_noise(q: torch.Tensor, num_draft_tokens, generators) -> torch.Tensor:
    """Fill `q` [B, V] with Exp(1) noise in upstream's order of draws."""
    q.exponential_()
    for request, generator in generators.items():
        if num_draft_tokens[request] > 0:  # a request without drafts keeps its stream untouched
            q[request].exponential_(generator=generator)
    return q


def install(version: str | None = None) -> list[str]:
    version = version or vllm_env.installed_version()
    module = vllm_env.import_vllm(REJECTION_SAMPLER)
    if UPSTREAM:
        return ["rejection_sampler.sample_recovered_tokens"]
    upstream = module.sample_recovered_tokens
    factory = registry.get("recovered_tokens").fast_for(version)
    kernels: dict[torch.device, object] = {}  # one fast instance per device

    def sample_recovered_tokens(max_spec_len, num_draft_tokens, cu_num_draft_tokens, draft_token_ids,
                                draft_probs, target_probs, sampling_metadata, device, use_fp64_gumbel=False):
        args = (max_spec_len, num_draft_tokens, cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs)
        if use_fp64_gumbel:  # 0.33's fp64 noise: no fast variant states it
            return upstream(*args, sampling_metadata, device, use_fp64_gumbel=True)
        q = torch.empty((len(num_draft_tokens), target_probs.shape[-1]), dtype=torch.float32, device=device)
        try:
            check_inputs(*args, q)
        except InvalidRecoveryInput:
            return upstream(*args, sampling_metadata, device)
        draw_noise(q, num_draft_tokens, sampling_metadata.generators)
        fast = kernels.get(q.device)
        if fast is None:
            fast = kernels[q.device] = factory(q.device)
        return fast.launch(*args, q)

    UPSTREAM["sample_recovered_tokens"] = upstream
    module.sample_recovered_tokens = sample_recovered_tokens
    return ["rejection_sampler.sample_recovered_tokens"]


def uninstall() -> None:
    """Put upstream's function back (the properties patch one test at a time)."""
    if UPSTREAM:
        vllm_env.import_vllm(REJECTION_SAMPLER).sample_recovered_tokens = UPSTREAM.pop("sample_recovered_tokens")
