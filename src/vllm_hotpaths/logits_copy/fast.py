"""Skip the fp32 copy and every processing step when no request of the batch needs them.

Each request's flag is computed once, when it is added, from its parameters alone (vLLM 0.33's
rule, applied to each reference's steps): it needs processing if any step could change one of its
logits: a temperature other than 0 with a temperature other than 1, min_p, top_k (clamped to
[1, V]) other than V or top_p other than 1; any allowed ids, any logit bias (a zero bias too:
`-0.0 + 0.0` is `+0.0`); min_tokens with stop ids; any penalty off its neutral value; any bad
word; a thinking budget where the reference forces thinking budgets (0.28.0 on, with all three
reasoning markers known; earlier samplers never do). A batch in which no request needs it
gets its own logits back, the same tensor in its own dtype: after upcasting to fp32 that is bit
for bit what the reference computes (0.26.0's reference computes in that dtype, and leaves
every lane of such a batch as it is). Otherwise the reference runs. A slot's flag is replaced
when a request is added there. One variant per reference key: `SkipUnprocessed` (0.22.0),
`SkipUnprocessed023`, `024`, `026`, `027`, `028` (0.28.0-0.33.0).
"""

from __future__ import annotations

import numpy as np

from vllm_hotpaths.logits_copy import ReasoningMarkers, RequestParams, needs_processing
from vllm_hotpaths.logits_copy.reference import (Sampler022, Sampler023, Sampler024, Sampler026, Sampler027,
                                                 Sampler028, as_ints, check_rows)


class SkipUnprocessed:
    """The 0.22.0 reference behind a per-request "needs processing" flag."""

    needs_processing = staticmethod(needs_processing)
    reference_type = Sampler022

    def __init__(self, vocab_size: int, max_num_reqs: int, device, reasoning: ReasoningMarkers | None = None):
        self.reference = self.reference_type(vocab_size, max_num_reqs, device, reasoning)
        self.needs = np.zeros(max_num_reqs, dtype=bool)

    @property
    def keeps_logits_dtype(self) -> bool:
        """Processed logits in the caller's dtype where the reference's are (0.26.0)."""
        return self.reference.keeps_logits_dtype

    def add_request(self, slot, prompt, output, params: RequestParams) -> None:
        ref = self.reference
        ref.add_request(slot, prompt, output, params)
        self.needs[slot] = self.needs_processing(ref.requests[slot].params, ref.vocab_size, ref.forces_thinking)

    def remove_request(self, slot) -> None:
        self.reference.remove_request(slot)

    def append_output(self, slot, tokens) -> None:
        self.reference.append_output(slot, tokens)

    def apply_sampling_params(self, logits, rows, local_pos, input_ids, pos):
        ref = self.reference
        slots = check_rows(logits, rows, local_pos, input_ids, pos, ref.occupied, ref.vocab_size)
        if not self.batch_needs_processing(slots):
            return logits
        return ref.process(logits, *map(as_ints, (rows, local_pos, input_ids, pos)))

    def batch_needs_processing(self, slots: np.ndarray) -> bool:
        return bool(self.needs[slots].any())


class SkipUnprocessed023(SkipUnprocessed):
    """The same rule over the 0.23.0 reference (top-k/top-p left to sampling)."""

    reference_type = Sampler023


class SkipUnprocessed024(SkipUnprocessed):
    """The same rule over the 0.24.0 reference (min tokens one position earlier)."""

    reference_type = Sampler024


class SkipUnprocessed026(SkipUnprocessed):
    """The same rule over the 0.26.0 reference (processing in the logits' own dtype)."""

    reference_type = Sampler026


class SkipUnprocessed027(SkipUnprocessed):
    """The same rule over the 0.27.0 reference (the fp32 copy back): 0.27.0's own early return."""

    reference_type = Sampler027


class SkipUnprocessed028(SkipUnprocessed):
    """The same rule over the 0.28.0 reference (thinking budgets count)."""

    reference_type = Sampler028
