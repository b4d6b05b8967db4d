"""Model Runner v2's `Sampler.apply_sampling_params`: the logits copied to fp32, then logit bias
(allowed ids, biases, min tokens), penalties, bad words, temperature, min_p, top-k/top-p.

Every implementation here keeps a slot-indexed request table and answers
`apply_sampling_params(logits, rows, local_pos, input_ids, pos)`, one entry per logits row:
`rows` the request slot (vLLM's expanded_idx_mapping), `local_pos` the row's place among its
request's rows (0, 1, .. for speculative rows), `input_ids` the token fed at that row (row 0 of a
request: the last sampled token, already among its outputs), `pos` its position in the sequence.

`RequestParams` holds what the sampler reads of vLLM's `SamplingParams`, validated and
normalized as `SamplingParams` does it (vLLM 0.22.0): a temperature in (0, 1e-2) becomes 1e-2;
one below 1e-5 (so only 0) is greedy and resets top_p to 1, top_k to 0 and min_p to 0; the
ranges below raise `InvalidSamplingInput`. A thinking budget of -1 means none (vLLM 0.33.0).

`ReasoningMarkers` is the engine's reasoning config as the sampler sees it; every
implementation's factory takes it as `reasoning=` (None: no reasoning config).
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm_hotpaths import vllm_env

# Triton has no CPU backend: without a GPU the reference's kernels run in Triton's interpreter,
# which must be chosen before triton is imported.
vllm_env.set_cpu_environment()

GREEDY_BELOW = 1e-5  # SamplingParams' _SAMPLING_EPS
LOWEST_TEMPERATURE = 1e-2  # SamplingParams' _MAX_TEMP: smaller positive temperatures are raised to it


class InvalidSamplingInput(ValueError):
    """Sampling parameters, token ids or a batch that vLLM would refuse or misread."""


@dataclass(frozen=True)
class RequestParams:
    temperature: float = 1.0
    top_k: int = 0  # 0 or -1: off
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, bias), ids distinct
    allowed_token_ids: tuple[int, ...] = ()
    min_tokens: int = 0
    stop_token_ids: tuple[int, ...] = ()
    bad_words: tuple[tuple[int, ...], ...] = ()  # token ids of each bad word
    seed: int = 0
    thinking_token_budget: int | None = None  # None or -1: no budget

    def checked(self, vocab_size: int) -> "RequestParams":
        """Validated as SamplingParams validates, token ids inside [0, vocab_size), greedy
        normalized; returns the normalized parameters."""
        def fail(message):
            raise InvalidSamplingInput(message)

        if not -2.0 <= self.presence_penalty <= 2.0:
            fail(f"presence_penalty must be in [-2, 2], got {self.presence_penalty}")
        if not -2.0 <= self.frequency_penalty <= 2.0:
            fail(f"frequency_penalty must be in [-2, 2], got {self.frequency_penalty}")
        if not self.repetition_penalty > 0.0:
            fail(f"repetition_penalty must be greater than zero, got {self.repetition_penalty}")
        if not self.temperature >= 0.0:
            fail(f"temperature must be non-negative, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            fail(f"top_p must be in (0, 1], got {self.top_p}")
        if not isinstance(self.top_k, int) or self.top_k < -1:
            fail(f"top_k must be an integer >= -1, got {self.top_k!r}")
        if not 0.0 <= self.min_p <= 1.0:
            fail(f"min_p must be in [0, 1], got {self.min_p}")
        if self.min_tokens < 0:
            fail(f"min_tokens must be >= 0, got {self.min_tokens}")
        ids = {"logit_bias": [t for t, _ in self.logit_bias], "allowed_token_ids": self.allowed_token_ids,
               "stop_token_ids": self.stop_token_ids, "bad_words": [t for w in self.bad_words for t in w]}
        for name, values in ids.items():
            bad = [t for t in values if not 0 <= t < vocab_size]
            if bad:
                fail(f"{name} holds token ids outside [0, {vocab_size}): {bad}")
        if len({t for t, _ in self.logit_bias}) != len(self.logit_bias):
            fail("logit_bias names a token id twice")
        if any(not word for word in self.bad_words):
            fail("bad_words holds an empty word")
        budget = self.thinking_token_budget
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < -1):
            fail(f"thinking_token_budget must be a non-negative integer or -1, got {budget!r}")
        fields = dict(self.__dict__)
        if budget == -1:
            fields["thinking_token_budget"] = None
        if 0 < self.temperature < LOWEST_TEMPERATURE:
            fields["temperature"] = LOWEST_TEMPERATURE
        if fields["temperature"] < GREEDY_BELOW:
            fields.update(top_p=1.0, top_k=0, min_p=0.0)
        return RequestParams(**fields)

    def as_sampling_params_kwargs(self) -> dict:
        """Keyword arguments for vLLM's SamplingParams (`bad_words_token_ids`: the token ids the
        engine would make of `bad_words` strings)."""
        return dict(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p,
                    min_p=self.min_p, repetition_penalty=self.repetition_penalty,
                    frequency_penalty=self.frequency_penalty, presence_penalty=self.presence_penalty,
                    logit_bias=dict(self.logit_bias) or None,
                    allowed_token_ids=list(self.allowed_token_ids) or None,
                    min_tokens=self.min_tokens, stop_token_ids=list(self.stop_token_ids),
                    bad_words_token_ids=[list(w) for w in self.bad_words] or None, seed=self.seed,
                    thinking_token_budget=self.thinking_token_budget)


@dataclass(frozen=True)
class ReasoningMarkers:
    """Token ids of the reasoning start marker, the end marker the sampler forces when a
    budget runs out, and the end marker that closes reasoning naturally (vLLM's
    `ReasoningConfig.reasoning_start_token_ids`, `reasoning_end_token_ids`,
    `natural_reasoning_end_token_ids`)."""

    start: tuple[int, ...] = ()
    end: tuple[int, ...] = ()
    natural_end: tuple[int, ...] = ()

    @property
    def enabled(self) -> bool:
        """vLLM forces thinking budgets only when all three are known."""
        return bool(self.start and self.end and self.natural_end)

    def checked(self, vocab_size: int) -> "ReasoningMarkers":
        for name in ("start", "end", "natural_end"):
            bad = [t for t in getattr(self, name) if not 0 <= t < vocab_size]
            if bad:
                raise InvalidSamplingInput(f"reasoning {name} marker holds token ids outside "
                                           f"[0, {vocab_size}): {bad}")
        return self


def needs_processing(p: RequestParams, vocab_size: int, forces_thinking: bool) -> bool:
    """Whether any processing step could change one of the request's logits (normalized
    parameters): vLLM 0.27's early return of `apply_sampling_params` (the batch's logits handed
    back untouched when no request of it needs processing) and 0.28 on's per-request flag, which
    0.33 words as here (a greedy request's top_k, top_p and min_p are already neutral)."""
    top_k = p.top_k if 0 < p.top_k <= vocab_size else vocab_size
    sampling = p.temperature != 0.0 and (p.temperature != 1.0 or p.min_p != 0.0
                                         or top_k != vocab_size or p.top_p != 1.0)
    bias = bool(p.allowed_token_ids or p.logit_bias or (p.min_tokens > 0 and p.stop_token_ids))
    penalties = p.repetition_penalty != 1.0 or p.frequency_penalty != 0.0 or p.presence_penalty != 0.0
    thinking = forces_thinking and p.thinking_token_budget is not None
    return sampling or bias or penalties or bool(p.bad_words) or thinking
