"""Installs the split-vocabulary kernel as vLLM's `rejection_sampler.sample_recovered_tokens`,
at the shapes where it was measured faster (`dispatch`).

The replacement draws the noise as upstream does, call for call (one `exponential_()` over the
whole `[B, V]` tensor, then one per seeded request that has drafts, from its generator), so the
random streams advance exactly as upstream's, and hands it to the split-vocab variant whose
reference the installed vLLM is checked against (0.17.0 on: `split-vocab@0.17.0`). A shape the
dispatch leaves to upstream, inputs the fast path refuses, and 0.33's `use_fp64_gumbel` noise go
to upstream's function before any noise is drawn. On the first call on a GPU whose model no
measurement names as faster anywhere, upstream's function is put back in the module.
"""

from __future__ import annotations

import logging

import torch

from vllm_hotpaths import registry, vllm_env
from vllm_hotpaths.recovered_tokens import InvalidRecoveryInput, check_inputs, dispatch

REJECTION_SAMPLER = "vllm.v1.sample.rejection_sampler"
UPSTREAM: dict[str, object] = {}  # the replaced function, for the properties' unpatched side
logger = logging.getLogger("vllm.vllm_hotpaths")


def held_back() -> str | None:
    """Why the plugin installs nothing for this hot path, or None (some GPU model has a shape where
    the patched call was measured faster). The patch law still checks the patch, at every shape."""
    try:
        if dispatch.wins_on_some_gpu():
            return None
    except dispatch.DispatchFileError as error:
        return str(error)
    return (f"no GPU model has a shape where the split kernel's whole call was measured faster than upstream's "
            f"({dispatch.DISPATCH_FILE.name}; docs/recovered_tokens.md#dispatch-by-shape)")


def draw_noise(q: torch.Tensor, num_draft_tokens, generators) -> torch.Tensor:
    """Fill `q` [B, V] with Exp(1) noise in upstream's order of draws."""
    q.exponential_()
    for request, generator in generators.items():
        if num_draft_tokens[request] > 0:  # a request without drafts keeps its stream untouched
            q[request].exponential_(generator=generator)
    return q


def device_dispatch(device: torch.device):
    """The dispatch of `device`'s GPU model (the shipped measurements); a CPU, or a dispatch file
    that cannot be read (logged), takes upstream's call. VLLM_HOTPATHS_RECOVERED_DISPATCH=always
    takes the split kernel on any device (on a CPU, interpreted: vLLM's own tests run it there)."""
    if device.type != "cuda":
        return dispatch.always() if dispatch.setting() == dispatch.ALWAYS else dispatch.never("cpu")
    gpu = torch.cuda.get_device_name(device)
    try:
        return dispatch.for_gpu(gpu)
    except dispatch.DispatchFileError as error:
        logger.warning("vllm-hotpaths: recovered_tokens keeps upstream's call: %s", error)
        return dispatch.never(gpu)


def install(version: str | None = None, choose=None) -> list[str]:
    """The replacement; `choose(device)` gives a device's dispatch (default `device_dispatch`;
    the properties and the benchmark pass one that always takes the fast path)."""
    version = version or vllm_env.installed_version()
    module = vllm_env.import_vllm(REJECTION_SAMPLER)
    if UPSTREAM:
        return ["rejection_sampler.sample_recovered_tokens"]
    upstream = module.sample_recovered_tokens
    factory = registry.get("recovered_tokens").fast_for(version)
    choose = choose or device_dispatch
    per_device: dict[object, tuple] = {}  # device -> (fast instance, dispatch)

    def sample_recovered_tokens(max_spec_len, num_draft_tokens, cu_num_draft_tokens, draft_token_ids,
                                draft_probs, target_probs, sampling_metadata, device, use_fp64_gumbel=False):
        args = (max_spec_len, num_draft_tokens, cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs)
        if use_fp64_gumbel:  # 0.33's fp64 noise: no fast variant states it
            return upstream(*args, sampling_metadata, device, use_fp64_gumbel=True)
        held = per_device.get(device)
        if held is None:
            held = per_device[device] = (factory(torch.device(device)), choose(torch.device(device)))
            if not held[1].wins_anywhere() and module.sample_recovered_tokens is sample_recovered_tokens:
                module.sample_recovered_tokens = upstream
                logger.info("vllm-hotpaths: recovered_tokens: no shape measured faster on %s, upstream's "
                            "sample_recovered_tokens put back", held[1].gpu)
        fast, shapes = held
        if not shapes.takes_fast(len(num_draft_tokens), max_spec_len, target_probs.shape[-1], draft_probs is not None):
            return upstream(*args, sampling_metadata, device)
        q = torch.empty((len(num_draft_tokens), target_probs.shape[-1]), dtype=torch.float32, device=device)
        try:
            check_inputs(*args, q)
        except InvalidRecoveryInput:
            return upstream(*args, sampling_metadata, device)
        draw_noise(q, num_draft_tokens, sampling_metadata.generators)
        return fast.launch(*args, q)

    UPSTREAM["sample_recovered_tokens"] = upstream
    module.sample_recovered_tokens = sample_recovered_tokens
    return ["rejection_sampler.sample_recovered_tokens"]


def uninstall() -> None:
    """Put upstream's function back (the properties patch one test at a time)."""
    if UPSTREAM:
        vllm_env.import_vllm(REJECTION_SAMPLER).sample_recovered_tokens = UPSTREAM.pop("sample_recovered_tokens")
