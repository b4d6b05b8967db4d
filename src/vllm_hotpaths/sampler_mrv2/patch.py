"""Installs the fused sampling pass into vLLM 0.22's Model Runner V2 `Sampler.sample`.

`Sampler.add_request` also sets the slot's flag: the fused kernel covers the request
(`fast.fused_covers`: temperature and penalties only; no top-k/top-p, logit bias, allowed ids,
min tokens with stop ids, bad words or min_p). `Sampler.sample`, when every request of the batch
is flagged, runs `fast.fused_sample` on vLLM's own state: the row tensors it is called with, the
temperatures and seeds of `sampling_states`, the penalties, prompt bitmask and dense output
counts of `penalties_state` (a slot's counts are its own row there). It returns the ids and, under the
`processed_logprobs` mode, the processed logits; under `raw_logprobs`, where `Sampler.__call__`
never reads them, None instead of a tensor nobody asked for. Batches it cannot vouch for go to
the `sample` it replaced: a request it does not cover, parameters `RequestParams` refuses, the fp64
noise option, logits other than fp32/bf16/fp16 rows of unit stride, and a row stride whose
alignment class differs from the vocabulary's (the load layout would differ from upstream's fp32
copy's, and with it which of two NaNs wins).

The penalty state stays upstream's (`output_bin_counts` is written by the model runner's
`post_update` after each step): the plugin changes the speed of the pass, not its memory.
"""

from __future__ import annotations

import numpy as np
import torch
from packaging.version import Version

from vllm_hotpaths import vllm_env
from vllm_hotpaths.logits_copy import InvalidSamplingInput
from vllm_hotpaths.logits_copy.patch import request_params
from vllm_hotpaths.sampler_mrv2.fast import fused_covers, fused_sample
from vllm_hotpaths.sampler_mrv2.reference import SamplerPass022

SAMPLER = "vllm.v1.worker.gpu.sample.sampler"
UPSTREAM: dict[str, object] = {}  # the methods as vLLM ships them, for the properties' unpatched side
NOISE = (SamplerPass022.NOISE_LOG1P, SamplerPass022.NOISE_MURMUR3)
LOADED = (torch.float32, torch.bfloat16, torch.float16)  # the kernel upcasts these as upstream's copy does


def supports(version: str | None) -> bool:
    """0.22.x: the sampler layout this patch is written for."""
    return version is not None and Version(version).release[:2] == (0, 22)


def not_needed(version: str) -> str | None:
    return None if supports(version) else f"the patch is written for vLLM 0.22.x, not {version}"


def covered(sampler, sp) -> bool:
    """The slot's flag: True where the fused kernel computes this request's whole pass."""
    try:
        params = request_params(sp).checked(sampler.sampling_states.vocab_size)
    except (InvalidSamplingInput, TypeError):
        return False
    return fused_covers(params, sampler.sampling_states.vocab_size, forces_thinking=False)


def fused_or_none(sampler, logits, expanded_idx_mapping, idx_mapping_np, pos, input_ids, expanded_local_pos):
    """(ids, processed logits or None) through the fused kernel, or None where the batch is not
    one it vouches for."""
    flags = sampler.__dict__.get("_hotpaths_fused")
    vocab = sampler.sampling_states.vocab_size
    if (flags is None or sampler.use_fp64_gumbel or logits.dim() != 2 or logits.shape[0] == 0
            or logits.shape[1] != vocab or logits.dtype not in LOADED or logits.stride(1) != 1
            or (logits.stride(0) % 16 == 0) != (vocab % 16 == 0) or not flags[idx_mapping_np].all()):
        return None
    penalties = sampler.penalties_state
    slots = sampler.__dict__.get("_hotpaths_slots")
    if slots is None:  # a slot's penalty row is the slot itself
        slots = sampler._hotpaths_slots = torch.arange(flags.shape[0], dtype=torch.int32, device=logits.device)
    source = logits
    if logits.device.type == "cpu" and logits.dtype != torch.float32:
        source = torch.empty_like(logits, dtype=torch.float32).copy_(logits)  # as fast.FusedSamplingPass.sample
    expanded = logits.shape[0] != idx_mapping_np.shape[0]
    states = sampler.sampling_states
    return fused_sample(
        source, expanded_idx_mapping, pos, expanded_local_pos, input_ids, states.temperature.gpu, states.seeds.gpu,
        penalties.repetition_penalty.gpu, penalties.frequency_penalty.gpu, penalties.presence_penalty.gpu, slots,
        penalties.output_bin_counts, penalties.prompt_bin_mask, noise=NOISE, raw=False,
        penalized=bool(np.any(penalties.use_penalty[idx_mapping_np])),
        drafts=sampler.num_speculative_tokens if expanded else 0,
        write=sampler.logprobs_mode == "processed_logprobs")


def install(version: str | None = None) -> list[str]:
    version = version or vllm_env.installed_version()
    if not supports(version):
        raise RuntimeError(f"the sampler_mrv2 patch is written for vLLM 0.22.x, not {version}")
    sampler = vllm_env.import_vllm(SAMPLER).Sampler
    if UPSTREAM:
        return ["Sampler.add_request", "Sampler.sample"]
    replaced_add, replaced_sample = sampler.add_request, sampler.sample  # upstream's, or another patch's

    def add_request(self, req_idx, prompt_len, sampling_params):
        replaced_add(self, req_idx, prompt_len, sampling_params)
        flags = self.__dict__.get("_hotpaths_fused")
        if flags is None:
            flags = self._hotpaths_fused = np.zeros(self.sampling_states.max_num_reqs, dtype=bool)
        flags[req_idx] = covered(self, sampling_params)

    def sample(self, logits, expanded_idx_mapping, idx_mapping_np, pos, input_ids, expanded_local_pos):
        fused = fused_or_none(self, logits, expanded_idx_mapping, idx_mapping_np, pos, input_ids,
                              expanded_local_pos)
        if fused is None:
            return replaced_sample(self, logits, expanded_idx_mapping, idx_mapping_np, pos, input_ids,
                                   expanded_local_pos)
        return fused

    UPSTREAM.update(add_request=getattr(replaced_add, "hotpaths_upstream", replaced_add),
                    sample=getattr(replaced_sample, "hotpaths_upstream", replaced_sample))
    add_request.hotpaths_upstream, sample.hotpaths_upstream = UPSTREAM["add_request"], UPSTREAM["sample"]
    sampler.add_request, sampler.sample = add_request, sample
    return ["Sampler.add_request", "Sampler.sample"]
