"""Deliberately wrong logits-copy candidates: each skips the copy where some step would have
changed a logit, and must be caught by the `ci` profile.

Run one with `pytest properties/test_LAW.py -k "logits_copy and cpu"` for a generic law (LAW:
`MUTANTS[NAME]`, "equivalence" or "errors"), or `pytest properties/test_logits_copy.py -k
"MUTANTS[NAME] and cpu"` for a logits-copy property, with
`--impl logits_copy@VERSION=properties.quality.logits_copy:NAME` (VERSION: `version_of(NAME)`);
`tests/test_quality.py` runs them all (CPU) and requires a failure with a written fixture.
"""

from __future__ import annotations

import dataclasses

from vllm_hotpaths.logits_copy.fast import SkipUnprocessed, SkipUnprocessed028, needs_processing
from vllm_hotpaths.logits_copy.reference import Sampler022, _min_p_kernel


def _without(**neutral):
    """A predicate that judges the request as if these fields were neutral."""
    def predicate(params, vocab_size, forces_thinking):
        return needs_processing(dataclasses.replace(params, **neutral), vocab_size, forces_thinking)
    return staticmethod(predicate)


class RawTemperatureGreedy(SkipUnprocessed):
    """Flags from the parameters as given, before SamplingParams raises 0 < t < 1e-2 to 1e-2:
    a temperature of 1e-6 reads as greedy."""

    def add_request(self, slot, prompt, output, params):
        super().add_request(slot, prompt, output, params)
        if params.temperature < 1e-5:
            self.needs[slot] = needs_processing(dataclasses.replace(params, temperature=0.0),
                                                self.reference.vocab_size, False)


class TemperatureNearOne(SkipUnprocessed):
    """A temperature within 1e-6 of 1 counts as 1."""

    @staticmethod
    def needs_processing(params, vocab_size, forces_thinking):
        if abs(params.temperature - 1.0) < 1e-6:
            params = dataclasses.replace(params, temperature=1.0)
        return needs_processing(params, vocab_size, forces_thinking)


class TopKOffByOne(SkipUnprocessed):
    """top_k = V - 1 counts as no top-k."""

    @staticmethod
    def needs_processing(params, vocab_size, forces_thinking):
        if params.top_k >= vocab_size - 1:
            params = dataclasses.replace(params, top_k=0)
        return needs_processing(params, vocab_size, forces_thinking)


class TopPRounded(SkipUnprocessed):
    """top_p compared with a tolerance: one fp32 step below 1 counts as 1."""

    @staticmethod
    def needs_processing(params, vocab_size, forces_thinking):
        if params.top_p > 0.999999:
            params = dataclasses.replace(params, top_p=1.0)
        return needs_processing(params, vocab_size, forces_thinking)


class MinPIgnored(SkipUnprocessed):
    needs_processing = _without(min_p=0.0)


class ZeroBiasIgnored(SkipUnprocessed):
    """A logit bias of 0 counts as none (but -0.0 + 0.0 is +0.0)."""

    @staticmethod
    def needs_processing(params, vocab_size, forces_thinking):
        bias = tuple((t, b) for t, b in params.logit_bias if b != 0.0)
        return needs_processing(dataclasses.replace(params, logit_bias=bias), vocab_size, forces_thinking)


class AllowedIdsIgnored(SkipUnprocessed):
    needs_processing = _without(allowed_token_ids=())


class MinTokensIgnored(SkipUnprocessed):
    needs_processing = _without(min_tokens=0)


class RepetitionAboveOneOnly(SkipUnprocessed):
    """Only a repetition penalty above 1 counts."""

    @staticmethod
    def needs_processing(params, vocab_size, forces_thinking):
        if params.repetition_penalty < 1.0:
            params = dataclasses.replace(params, repetition_penalty=1.0)
        return needs_processing(params, vocab_size, forces_thinking)


class BadWordsIgnored(SkipUnprocessed):
    needs_processing = _without(bad_words=())


class ThinkingBudgetIgnored(SkipUnprocessed028):
    """vLLM's own 0.33 predicate before PR #52284: a thinking budget does not count, so a
    greedy request whose only setting is a budget is never forced to end its reasoning."""

    needs_processing = _without(thinking_token_budget=None)


def _wrapped(x: int, bits: int) -> int:
    """`x` stored in a signed integer of `bits` bits."""
    half = 1 << (bits - 1)
    return (x + half) % (2 * half) - half


class SixteenBitTopK(SkipUnprocessed):
    """Clamps top_k against the vocabulary size in 16-bit integers (a compact per-slot table):
    exact below 32,768; past it the size wraps (32,768 reads as -32,768, 262,144 as 0), and a
    top-k that cuts lanes of a real vocabulary reads as none."""

    @staticmethod
    def needs_processing(params, vocab_size, forces_thinking):
        if not 0 < _wrapped(params.top_k, 16) < _wrapped(vocab_size, 16):
            params = dataclasses.replace(params, top_k=0)
        return needs_processing(params, vocab_size, forces_thinking)


class ByteListLengths(SkipUnprocessed):
    """Counts each request's allowed ids, biases, stop ids and bad words in 8-bit counters (a
    compact per-slot table), a list counting while its counter is positive: vLLM 0.22 takes up
    to 1,024 allowed ids or biases and 128 stop ids or bad words, and at those lengths the
    counter wraps to 0 or -128: the list reads as empty."""

    LISTS = ("allowed_token_ids", "logit_bias", "stop_token_ids", "bad_words")

    @staticmethod
    def needs_processing(params, vocab_size, forces_thinking):
        emptied = {name: () for name in ByteListLengths.LISTS if _wrapped(len(getattr(params, name)), 8) <= 0}
        return needs_processing(dataclasses.replace(params, **emptied), vocab_size, forces_thinking)


class MemoizedBatches(SkipUnprocessed):
    """Remembers each batch's answer by the slots in it, never forgetting: a slot reused by a
    request that needs processing is still skipped."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.memo = {}

    def batch_needs_processing(self, rows):
        key = frozenset(rows)
        if key not in self.memo:
            self.memo[key] = super().batch_needs_processing(rows)
        return self.memo[key]


class NeedySlotsPopLast(SkipUnprocessed):
    """Keeps the slots that need processing in a list, and when one of them leaves drops the
    last one added: after an earlier such request leaves, a later one is looked up in vain while
    the departed slot stays listed."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.needy: list[int] = []

    def add_request(self, slot, prompt, output, params):
        if slot in self.needy:  # a slot taken over without a removal
            self.needy.remove(slot)
        super().add_request(slot, prompt, output, params)
        if self.needs[slot]:
            self.needy.append(slot)

    def remove_request(self, slot):
        super().remove_request(slot)
        if self.needs[slot]:
            self.needy.pop()

    def batch_needs_processing(self, rows):
        return any(int(slot) in self.needy for slot in rows)


class FirstRowsOnly(SkipUnprocessed):
    """Looks up one row per request, but takes the first rows of the expanded batch: with
    speculative rows a later request is never looked at."""

    def batch_needs_processing(self, rows):
        return super().batch_needs_processing(rows[:len(set(rows))])


class RowsCutAtTableSize(SkipUnprocessed):
    """Looks the batch up through a buffer of one entry per slot (`max_num_reqs` of them, as a
    per-request mapping is sized): with speculative rows a batch has more rows than slots, and
    a request whose rows all lie past the buffer is never looked at."""

    def batch_needs_processing(self, rows):
        return super().batch_needs_processing(rows[:len(self.needs)])


class ValidatesOnlyWhenProcessing(SkipUnprocessed):
    """Checks the rows only on the reference's path: a skipped batch naming an empty slot
    returns the logits instead of an error."""

    def apply_sampling_params(self, logits, rows, local_pos, input_ids, pos):
        if not self.batch_needs_processing([r for r in rows if 0 <= r < len(self.needs)]):
            return logits
        return super().apply_sampling_params(logits, rows, local_pos, input_ids, pos)


class UncheckedParams(SkipUnprocessed):
    """Takes the parameters as given (no range checks, no greedy normalization)."""

    def add_request(self, slot, prompt, output, params):
        super().add_request(slot, prompt, output, type(params)())
        self.reference.requests[slot].params = params
        self.needs[slot] = self.needs_processing(params, self.reference.vocab_size, self.reference.forces_thinking)


# name -> what must catch it: a generic law (properties/test_<law>.py) or a property of
# properties/test_logits_copy.py
LAWS = ("equivalence", "errors")
# Caught on some ci draws but not all: the quality set runs these with the `quality` profile (600
# examples, derandomized). MemoizedBatches needs a batch of requests that need no processing, then
# the same slots with one that does.
NEED_MORE_EXAMPLES = {"MemoizedBatches", "RowsCutAtTableSize"}

# Reached by fewer than 8 of 10 fresh `ci` seeds (docs/quality.md#generation-only-power: only
# requests whose rows all lie past the first one per request need processing): this committed
# fixture, replayed, catches it.
CAUGHT_BY_FIXTURE = {"RowsCutAtTableSize": "LogitsProgram-2d9e17edf9ed"}
BOUNDARY = "test_candidate_matches_reference_at_each_boundary"
MUTANTS = {
    **{name: BOUNDARY for name in (
        "RawTemperatureGreedy", "TemperatureNearOne", "TopKOffByOne", "TopPRounded", "MinPIgnored",
        "ZeroBiasIgnored", "AllowedIdsIgnored", "MinTokensIgnored", "RepetitionAboveOneOnly",
        "BadWordsIgnored", "ThinkingBudgetIgnored", "SixteenBitTopK")},
    "MemoizedBatches": "equivalence",
    "FirstRowsOnly": "equivalence",
    "NeedySlotsPopLast": "equivalence",
    "ByteListLengths": "equivalence",
    "RowsCutAtTableSize": "equivalence",
    "ValidatesOnlyWhenProcessing": "errors",
    "UncheckedParams": "errors",
}


# -- references with two processing steps in the wrong order ---------------------------------
# Each differs from vLLM only for a request that sets both steps' knobs off neutral: caught by
# conformance against vLLM 0.22.0 (`--reference logits_copy@0.22.0=...`) on the pairs of knobs
# drawn together (properties/test_logits_copy.py).
class PenaltiesBeforeBias(Sampler022):
    """The penalties before the logit bias (vLLM adds the bias first)."""

    def _logit_bias(self, out, reqs, pos):  # `process` calls it first: kept for after the penalties
        self._positions = pos

    def _penalties(self, out, reqs, rows, local_pos, input_ids):
        super()._penalties(out, reqs, rows, local_pos, input_ids)
        super()._logit_bias(out, reqs, self._positions)


class MinPBeforeTemperature(Sampler022):
    """min_p's threshold taken before the temperature divides (vLLM divides first)."""

    def _row_kernel(self, kernel, out, values, neutral=(0.0,)):
        if kernel is _min_p_kernel:
            return
        if kernel is self._temperature:
            super()._row_kernel(_min_p_kernel, out, [r.params.min_p for r in self._reqs])
        super()._row_kernel(kernel, out, values, neutral)

    def process(self, logits, rows, local_pos, input_ids, pos):
        self._reqs = [self.requests[s] for s in rows]
        return super().process(logits, rows, local_pos, input_ids, pos)


class TopKTopPBeforeMinP(Sampler022):
    """top-k and top-p cut before min_p's threshold is taken (vLLM applies min_p first)."""

    def _row_kernel(self, kernel, out, values, neutral=(0.0,)):
        if kernel is not _min_p_kernel:
            super()._row_kernel(kernel, out, values, neutral)

    def _top_k_top_p(self, out, reqs, rows):
        out = super()._top_k_top_p(out, reqs, rows)
        super()._row_kernel(_min_p_kernel, out, [r.params.min_p for r in reqs])
        return out


PAIRS_CONFORMANCE = "test_reference_matches_installed_vllm_for_each_pair_of_knobs"
# name -> what must catch it (with --reference logits_copy@0.22.0=...: vLLM 0.22.0 installed)
REFERENCE_MUTANTS = {name: PAIRS_CONFORMANCE for name in
                     ("PenaltiesBeforeBias", "MinPBeforeTemperature", "TopKTopPBeforeMinP")}


def version_of(name: str) -> str:
    """The reference version a mutant claims to match."""
    return "0.28.0" if issubclass(globals()[name], SkipUnprocessed028) else "0.22.0"
