"""The installed vLLM's Model Runner V2 `rejection_sample` behind the `rejection_mrv2` contract:
vLLM's own function (0.21's `probabilistic_rejection_sample` and 0.22 to 0.33's
`rejection_sample` take the same leading arguments; from 0.34 the draft logits come in vLLM's
`DraftLogitsCache`, and the engine skips fully masked vocabulary blocks whenever a request of the
batch may mask logits (a penalty, top-k, top-p, min-p): the adapter returns the path the engine
takes for the requests the contract describes (none masks), and runs the other, which must agree,
except on CUDA where a target logit is NaN (there the compiled block maximum passes over NaN
lanes, and the two paths land on different lanes: docs/rejection_mrv2.md#vllm-0340); the default
path: no
synthetic rates, fp32 Gumbel noise, no block verification, watermark, fly or adaptive window), its
kernels interpreted on CPU. Inputs are checked first (upstream reads at every id unchecked; -1
placeholder drafts only from 0.25, where upstream rejects them: 0.22 to 0.24 read at -1, PR
#46533), and the entries past each request's `num_sampled`, left uninitialised upstream, are
filled with -1.
"""

from __future__ import annotations

from packaging.version import Version

from vllm_hotpaths import vllm_env
from vllm_hotpaths.rejection_mrv2 import check_inputs, fill_tail


class LiveRejectionSampler:
    def __init__(self, device="cpu") -> None:
        spec_decode = "vllm.v1.worker.gpu.spec_decode"
        try:
            self._sample = vllm_env.import_vllm(f"{spec_decode}.rejection_sampler_utils").rejection_sample
        except ImportError:  # 0.21
            self._sample = vllm_env.import_vllm(
                f"{spec_decode}.probabilistic_rejection_sampler_utils").probabilistic_rejection_sample
        version = vllm_env.installed_version()
        self.placeholders = version is not None and Version(version) >= Version("0.25.0")
        self.cached = version is not None and Version(version) >= Version("0.34.0")

    def __deepcopy__(self, memo):
        raise TypeError("vLLM's module holds compiled kernels; the checks never copy it")

    def rejection_sample(self, target_logits, draft_logits, draft_sampled, cu_num_logits, pos, idx_mapping,
                         expanded_idx_mapping, expanded_local_pos, temperature, seed, num_speculative_steps):
        check_inputs(target_logits, draft_logits, draft_sampled, cu_num_logits, pos, idx_mapping,
                     expanded_idx_mapping, expanded_local_pos, temperature, seed, num_speculative_steps,
                     placeholders=self.placeholders)
        arguments = (target_logits, draft_logits, draft_sampled, cu_num_logits, pos, idx_mapping,
                     expanded_idx_mapping, expanded_local_pos, temperature, seed, num_speculative_steps)
        if not self.cached:
            sampled, num_sampled = self._sample(*arguments)
            return fill_tail(sampled, num_sampled), num_sampled
        arguments = (arguments[0], draft_cache(draft_logits), *arguments[2:])
        sampled, num_sampled = self._sample(*arguments)
        result = fill_tail(sampled, num_sampled), num_sampled
        if target_logits.is_cuda and bool(target_logits.isnan().any()):
            return result  # the paths differ there (module docstring)
        skipping = self._sample(*arguments, skip_masked_vocab_blocks=True)
        skipped = fill_tail(*skipping), skipping[1]
        for name, mine, other in zip(("ids", "counts"), result, skipped):
            if not (mine.shape == other.shape and bool((mine == other).all())):
                raise AssertionError(f"vLLM's rejection_sample gives other {name} when it skips fully masked "
                                     f"vocabulary blocks: {other.tolist()} against {mine.tolist()}")
        return result


def draft_cache(draft_logits):
    """The draft logits in vLLM's own `DraftLogitsCache` (0.34 on), replicated as one GPU keeps it."""
    if draft_logits is None:
        return None
    cache_class = vllm_env.import_vllm("vllm.v1.worker.gpu.spec_decode.draft_logits").DraftLogitsCache
    rows, steps, vocab = draft_logits.shape
    cache = cache_class(rows, steps, 1, dtype=draft_logits.dtype, fill=0.0, device=draft_logits.device)
    cache.values = draft_logits
    return cache


def live_rejection_sampler(device="cpu") -> LiveRejectionSampler:
    """The installed vLLM's Model Runner V2 rejection sampling behind the contract."""
    return LiveRejectionSampler(device)
