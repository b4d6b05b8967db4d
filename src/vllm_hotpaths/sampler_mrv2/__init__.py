"""Model Runner V2's sampling pass (`Sampler.sample`): `apply_sampling_params` (the `logits_copy`
hot path's semantics), then `gumbel_sample`, from one step's logits to one token per row.

What every implementation here states, per logits row of request slot `s` at position `pos`
(the position of the row's input token, as vLLM's sampler reads it):

- processed logits: the logits after logit bias, penalties, bad words, thinking forcing,
  temperature (`x / t` for t other than 0 and 1) and min_p, as `logits_copy`'s reference of the
  same release computes them (fp32; 0.26: the logits' own dtype);
- the token: a greedy request's (temperature 0) is the argmax of the processed row; any other's
  is the argmax of `x + g(seed, pos, id)` over the ids of the vocabulary, `g` the Gumbel noise of
  the release (`vllm_hotpaths.gumbel_noise`), keyed by the request's seed, the row's position and
  the token id. Both are taken in 1024-id blocks read as fp32 (ids past the vocabulary -inf):
  each block's maximum with the lowest id among equal values, then the first block holding the
  largest maximum, a NaN maximum counting as the largest (`torch.argmax`). So equal scores go to
  the lowest id, an all -inf row to id 0.

It covers temperature (greedy, seeded random), penalties, logit bias, allowed ids, min tokens,
bad words, min_p and thinking forcing, as `logits_copy` does. It does not state top-k / top-p
(upstream samples those rows by its Triton top-k/top-p kernel, or by FlashInfer on CUDA when no
request of the batch is greedy or seeded): `sample` refuses a batch with such a request
(`NotStated`), and the plugin leaves such batches to upstream. Nor the opt-in fp64 Gumbel noise
(`use_fp64_gumbel`), which the plugin also leaves to upstream.
"""

from __future__ import annotations

from vllm_hotpaths.logits_copy import InvalidSamplingInput


class NotStated(InvalidSamplingInput):
    """A batch with a request whose sampling this hot path does not state (top-k / top-p)."""


INT64 = (-2**63, 2**63 - 1)


def refuse_unstated(params_by_row, vocab_size: int) -> None:
    """Raise NotStated where a request of the batch has top-k (below the vocabulary) or top-p, and
    InvalidSamplingInput for a seed vLLM would not keep: -1 (vLLM draws a random seed for it) or
    one outside int64."""
    for params in params_by_row:
        if 0 < params.top_k < vocab_size or params.top_p < 1.0:
            raise NotStated(f"top_k={params.top_k}, top_p={params.top_p}: sampler_mrv2 states no top-k / top-p "
                            "(upstream's top-k/top-p kernel or FlashInfer samples such batches)")
        seed = params.seed
        if isinstance(seed, bool) or not isinstance(seed, int) or seed == -1 or not INT64[0] <= seed <= INT64[1]:
            raise InvalidSamplingInput(f"seed must be an int64 other than -1 (vLLM's random seed), got {seed!r}")
