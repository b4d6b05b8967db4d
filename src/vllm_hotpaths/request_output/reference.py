"""Upstream's semantics, frozen: `_update_request_with_output` on one request, given the
`OutputStep` read before the call. Requests with repetition detection, pooling requests and
requests without sampling parameters are outside it (the fast path hands them to upstream).

The releases differ in data only:
- 0.16.0: `min_tokens` is checked first (no stop of any kind before it); the AsyncScheduler drops
  one output after `reset_prefix_cache` of the running requests (a flag), and otherwise settles
  one placeholder per kept token and caches the full blocks of the computed tokens not awaiting
  output, for a request that was running. (0.17.0 reads the end-of-sequence id from the sampling
  parameters rather than the request; for requests the engine builds it is the same id.)
- 0.22.0: the outputs to drop are counted (as many as were in flight), one dropped per call.
- 0.27.0: nothing is dropped; a stale output (scheduled before a preemption) leaves the
  placeholders as they are.
- 0.29.0: `min_tokens` is checked after the end-of-sequence, stop-id and length checks, so it
  holds back nothing they stop.
- 0.33.0: one method for both schedulers, caching moved to the caller: a stop trims the tokens
  after it from the computed count, and every returned token, kept or trimmed, settles a
  placeholder; a stale output changes neither.
"""

from __future__ import annotations

from vllm_hotpaths.request_output import Applied, OutputStep

STOPPED, LENGTH = "FINISHED_STOPPED", "FINISHED_LENGTH_CAPPED"


class Appended016:
    min_tokens_first = True
    discard = "flag"  # "flag", "counter" or None
    stale_keeps_placeholders = False
    one_method = False  # 0.33.0: the base method settles placeholders; no caching here

    def apply(self, step: OutputStep) -> Applied:
        asynchronous = step.asynchronous and not self.one_method
        if asynchronous and self.discard and step.tokens_to_discard > 0:
            left = 0 if self.discard == "flag" else step.tokens_to_discard - 1
            return self._applied(step, (), False, step.status, step.stop_reason, step.num_computed_tokens,
                                 step.num_output_placeholders, left, step.cached_blocks)
        kept, status, reason = [], None, step.stop_reason
        outputs, tokens = step.num_output_tokens, step.num_tokens
        for token in step.new_token_ids:
            kept.append(token)
            outputs, tokens = outputs + 1, tokens + 1
            status, reason = self._stop(step, token, outputs, tokens, reason)
            if status:
                break
        computed, placeholders, cached = step.num_computed_tokens, step.num_output_placeholders, step.cached_blocks
        if self.one_method:
            if not step.is_stale:
                if status:
                    computed -= len(step.new_token_ids) - len(kept)
                if placeholders > 0:
                    placeholders -= len(step.new_token_ids)
                    if placeholders < 0:
                        raise AssertionError("output placeholders below zero")
        elif asynchronous:
            if not (self.stale_keeps_placeholders and step.is_stale):
                placeholders -= len(kept)
            if placeholders < 0:
                raise AssertionError("output placeholders below zero")
            if step.status == "RUNNING" and step.enable_caching:
                cached = max(cached, (computed - placeholders) // step.block_size)
        return self._applied(step, tuple(kept), status is not None, status or step.status, reason, computed, placeholders,
                             step.tokens_to_discard, cached)

    def _stop(self, step: OutputStep, token: int, outputs: int, tokens: int, reason):
        if self.min_tokens_first and outputs < step.min_tokens:
            return None, reason
        if token == step.eos_token_id:
            return STOPPED, reason
        if token in step.stop_token_ids:
            return STOPPED, token
        if tokens >= step.max_model_len or outputs >= step.max_tokens:
            return LENGTH, reason
        return None, reason  # 0.29.0's min_tokens check comes here: it holds back no stop

    @staticmethod
    def _applied(step, kept, stopped, status, reason, computed, placeholders, discard, cached) -> Applied:
        return Applied(new_token_ids=kept, stopped=stopped, status=status, stop_reason=reason,
                       num_output_tokens=step.num_output_tokens + len(kept), num_computed_tokens=computed,
                       num_output_placeholders=placeholders, tokens_to_discard=discard, cached_blocks=cached)


class Appended022(Appended016):
    discard = "counter"


class Appended027(Appended022):
    discard = None
    stale_keeps_placeholders = True


class Appended029(Appended027):
    min_tokens_first = False


class Appended033(Appended029):
    one_method = True
