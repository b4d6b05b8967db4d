"""vLLM's Model Runner V2 `Sampler.sample` (processed logits, then `gumbel_sample`) on the request
states of `testing.live.logits_copy`, whose adapter builds them."""

from __future__ import annotations

import os

from vllm_hotpaths import vllm_env
from vllm_hotpaths.testing.live.logits_copy import LiveSampler


class LiveSamplingPass(LiveSampler):
    """`sample(logits, rows, local_pos, input_ids, pos, processed=True)`: the installed release's
    `Sampler.sample` with its own arguments (no logprobs requested: `return_logprobs` False, the
    FlashInfer path off on CPU and for batches without top-k/top-p, which the cases never hold).
    0.26.0 processes the tensor it is given: it gets a copy of the caller's logits. The sampler
    is built with `VLLM_USE_FLASHINFER_SAMPLER=0` (0.23 on ask whether FlashInfer can sample, and
    import it to know, at construction): FlashInfer samples only top-k/top-p batches, which this
    hot path never holds."""

    def _sampler(self, max_num_reqs: int, vocab_size: int, reasoning):
        before = os.environ.get("VLLM_USE_FLASHINFER_SAMPLER")
        os.environ["VLLM_USE_FLASHINFER_SAMPLER"] = "0"
        try:
            return super()._sampler(max_num_reqs, vocab_size, reasoning)
        finally:
            if before is None:
                del os.environ["VLLM_USE_FLASHINFER_SAMPLER"]
            else:
                os.environ["VLLM_USE_FLASHINFER_SAMPLER"] = before

    def sample(self, logits, rows: list[int], local_pos: list[int], input_ids: list[int], pos: list[int],
               processed: bool = True):
        args = self.sampler_args(logits, rows, local_pos, input_ids, pos)
        del args["skip_top_k_top_p"]
        self.sampler.num_speculative_tokens = max(local_pos, default=0) + 1
        if self.keeps_logits_dtype:
            args["logits"] = logits.clone()
        # vLLM's own method, also where a plugin patch (ours) is installed in this process
        sample = type(self.sampler).sample
        ids, out = vllm_env.call(getattr(sample, "hotpaths_upstream", sample), self.sampler, **args)
        return ids, (out if processed else None)


def live_sampling_pass(vocab_size: int, max_num_reqs: int, device="cpu", max_model_len: int = 256, reasoning=None):
    """The installed vLLM's sampling pass behind the hot path's contract."""
    return LiveSamplingPass(vocab_size, max_num_reqs, device, max_model_len, reasoning=reasoning)
