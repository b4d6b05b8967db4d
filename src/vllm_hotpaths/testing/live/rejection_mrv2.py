"""The installed vLLM's Model Runner V2 `rejection_sample` behind the `rejection_mrv2` contract:
vLLM's own function (0.21's `probabilistic_rejection_sample` and 0.22 to 0.33's
`rejection_sample` take the same leading arguments; the default path: no
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

    def __deepcopy__(self, memo):
        raise TypeError("vLLM's module holds compiled kernels; the checks never copy it")

    def rejection_sample(self, target_logits, draft_logits, draft_sampled, cu_num_logits, pos, idx_mapping,
                         expanded_idx_mapping, expanded_local_pos, temperature, seed, num_speculative_steps):
        check_inputs(target_logits, draft_logits, draft_sampled, cu_num_logits, pos, idx_mapping,
                     expanded_idx_mapping, expanded_local_pos, temperature, seed, num_speculative_steps,
                     placeholders=self.placeholders)
        sampled, num_sampled = self._sample(
            target_logits, draft_logits, draft_sampled, cu_num_logits, pos, idx_mapping, expanded_idx_mapping,
            expanded_local_pos, temperature, seed, num_speculative_steps)
        return fill_tail(sampled, num_sampled), num_sampled


def live_rejection_sampler(device="cpu") -> LiveRejectionSampler:
    """The installed vLLM's Model Runner V2 rejection sampling behind the contract."""
    return LiveRejectionSampler(device)
