"""Installs skip-unprocessed into vLLM 0.22's Model Runner v2 `Sampler`.

`Sampler.add_request` also sets the slot's flag with `fast.needs_processing` (0.22.0 has no
thinking forcing); `Sampler.sample`, when no request of the batch is flagged, hands the model's
logits to vLLM's own `gumbel_sample` (which reads them in fp32, exactly) instead of copying them
to fp32 and running the processing steps, and returns them as the processed logits. Rows it
cannot vouch for go upstream's way: a request with logprobs under the `processed_logprobs` mode
(the logprobs would be computed from the model's dtype), parameters that `RequestParams` refuses,
and every other caller of `apply_sampling_params` (the speculative-decoding path), which is left
as it is.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
from packaging.version import Version

from vllm_hotpaths import vllm_env
from vllm_hotpaths.logits_copy import InvalidSamplingInput, RequestParams
from vllm_hotpaths.logits_copy import needs_processing

SAMPLER = "vllm.v1.worker.gpu.sample.sampler"
UPSTREAM: dict[str, object] = {}  # the replaced methods, for the properties' unpatched side


def supports(version: str | None) -> bool:
    """0.22.x: the sampler layout this patch is written for (from 0.27 vLLM skips the copy itself)."""
    return version is not None and Version(version).release[:2] == (0, 22)


def not_needed(version: str) -> str | None:
    if Version(version) >= Version("0.27.0"):  # `_requires_logits_processing`
        return "upstream already skips the copy when no request needs processing"
    return None if supports(version) else f"the patch is written for vLLM 0.22.x, not {version}"


def request_params(sp) -> RequestParams:
    """What the 0.22.0 sampler reads of a (normalized) `SamplingParams`."""
    return RequestParams(
        temperature=sp.temperature, top_k=sp.top_k, top_p=sp.top_p, min_p=sp.min_p,
        repetition_penalty=sp.repetition_penalty, frequency_penalty=sp.frequency_penalty,
        presence_penalty=sp.presence_penalty,
        logit_bias=tuple((sp.logit_bias or {}).items()),
        allowed_token_ids=tuple(sp.allowed_token_ids or ()), min_tokens=sp.min_tokens,
        stop_token_ids=tuple(sp.all_stop_token_ids or ()),
        bad_words=tuple(tuple(w) for w in (sp.bad_words_token_ids or ())))


def vouched_needs(sampler, sp) -> bool:
    """The slot's flag: True (process, as upstream) unless the request provably needs nothing."""
    if sampler.logprobs_mode == "processed_logprobs" and (sp.logprobs is not None or sp.logprob_token_ids):
        return True
    try:
        params = request_params(sp).checked(sampler.sampling_states.vocab_size)
    except (InvalidSamplingInput, TypeError):
        return True
    return needs_processing(params, sampler.sampling_states.vocab_size, forces_thinking=False)


def install(version: str | None = None) -> list[str]:
    version = version or vllm_env.installed_version()
    if not supports(version):
        raise RuntimeError(f"the logits_copy patch is written for vLLM 0.22.x, not {version}")
    module = vllm_env.import_vllm(SAMPLER)
    sampler = module.Sampler
    if UPSTREAM:
        return ["Sampler.add_request", "Sampler.sample"]
    upstream_add, upstream_sample = sampler.add_request, sampler.sample
    add_request, sample = _patched(module, upstream_add, upstream_sample)
    # Another patch may have replaced these already: UPSTREAM keeps vLLM's own.
    UPSTREAM.update(add_request=getattr(upstream_add, "hotpaths_upstream", upstream_add),
                    sample=getattr(upstream_sample, "hotpaths_upstream", upstream_sample))
    add_request.hotpaths_upstream, sample.hotpaths_upstream = UPSTREAM["add_request"], UPSTREAM["sample"]
    sampler.add_request, sampler.sample = add_request, sample
    return ["Sampler.add_request", "Sampler.sample"]


def _patched(module, upstream_add, upstream_sample):
    """(add_request, sample) of the patch over the given methods."""

    def add_request(self, req_idx, prompt_len, sampling_params):
        upstream_add(self, req_idx, prompt_len, sampling_params)
        flags = self.__dict__.get("_hotpaths_needs")
        if flags is None:
            flags = self._hotpaths_needs = np.ones(self.sampling_states.max_num_reqs, dtype=bool)
        flags[req_idx] = vouched_needs(self, sampling_params)

    def sample(self, logits, expanded_idx_mapping, idx_mapping_np, pos, input_ids, expanded_local_pos):
        flags = self.__dict__.get("_hotpaths_needs")
        if flags is None or flags[idx_mapping_np].any():
            return upstream_sample(self, logits, expanded_idx_mapping, idx_mapping_np, pos, input_ids,
                                   expanded_local_pos)
        states = self.sampling_states
        sampled = module.gumbel_sample(logits, expanded_idx_mapping, states.temperature.gpu, states.seeds.gpu,
                                       pos, apply_temperature=False, use_fp64=self.use_fp64_gumbel)
        return sampled, logits

    return add_request, sample


@contextmanager
def alone(version: str | None = None):
    """This patch directly over vLLM's own `Sampler` methods for the duration, whatever else this
    process has installed (another hot path's patch law may have left its patch in place); the
    class's methods are put back after."""
    install(version)
    module = vllm_env.import_vllm(SAMPLER)
    sampler = module.Sampler
    before = sampler.add_request, sampler.sample
    add_request, sample = _patched(module, UPSTREAM["add_request"], UPSTREAM["sample"])
    add_request.hotpaths_upstream, sample.hotpaths_upstream = UPSTREAM["add_request"], UPSTREAM["sample"]
    sampler.add_request, sampler.sample = add_request, sample
    try:
        yield
    finally:
        sampler.add_request, sampler.sample = before
