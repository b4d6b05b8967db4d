"""Deliberately wrong `cached_request_data` implementations: each must be caught by the `ci`
profile. Candidates (`--impl`) by the law named in `MUTANTS`; references (`--reference`, in
`REFERENCE_MUTANTS`) by conformance against the installed vLLM.

Run one with `pytest properties/test_equivalence.py -k cached_request_data --impl
cached_request_data@0.16.0=properties.quality.cached_request_data:NAME`.
"""

from __future__ import annotations

from vllm_hotpaths.cached_request_data import InvalidSchedulerInput
from vllm_hotpaths.cached_request_data.fast import ColumnwiseCachedRequestData, ColumnwiseCachedRequestData024
from vllm_hotpaths.cached_request_data.reference import CachedRequestData016


class OwnTokenList(ColumnwiseCachedRequestData):
    """Sends the request's own token list instead of a copy (saves the copy; a consumer that
    extends it would change the request)."""

    def make(self, scheduler, running, resumed, *tables):
        fields = super().make(scheduler, running, resumed, *tables)
        by_id = {r.request_id: r for r in [*running, *resumed]}
        fields["all_token_ids"] = {i: by_id[i]._all_token_ids for i in fields["all_token_ids"]}
        return fields


class PlaceholdersLeftOut(ColumnwiseCachedRequestData):
    """Counts only the sampled outputs, not the async placeholders."""

    def make(self, scheduler, running, resumed, *tables):
        fields = super().make(scheduler, running, resumed, *tables)
        fields["num_output_tokens"] = [r.num_output_tokens for r in [*running, *resumed]]
        return fields


class FirstGroupDecides(ColumnwiseCachedRequestData):
    """Takes a request's blocks for none when its first KV cache group got none (a hybrid
    model's other groups may still have new blocks)."""

    def make(self, scheduler, running, resumed, num_scheduled_tokens, spec_decode_tokens, req_to_new_blocks):
        fields = super().make(scheduler, running, resumed, num_scheduled_tokens, spec_decode_tokens, req_to_new_blocks)
        fields["new_block_ids"] = [None if ids is None or not ids[0] else ids for ids in fields["new_block_ids"]]
        return fields


class HistoryForEveryRequest(ColumnwiseCachedRequestData):
    """Sends every request's token list, scheduled in the previous step or not."""

    def make(self, scheduler, running, resumed, *tables):
        fields = super().make(scheduler, running, resumed, *tables)
        if not fields["new_token_ids"]:
            fields["all_token_ids"] = {r.request_id: list(r.all_token_ids) for r in [*running, *resumed]}
        return fields


class ResumedNotChecked(ColumnwiseCachedRequestData):
    """0.16's rule without its refusal of a resumed request scheduled in the previous step."""

    refuses_resumed_scheduled_before = False


class HistoryOnModelRunnerV2(ColumnwiseCachedRequestData024):
    """0.24 without its runner test: token lists for Model Runner V2 too."""

    history_for_v1_only = False


class MissingEntryAsKeyError(ColumnwiseCachedRequestData):
    """Lets the KeyError of a missing entry out instead of the contract's refusal."""

    def make(self, scheduler, running, resumed, num_scheduled_tokens, spec_decode_tokens, req_to_new_blocks):
        for r in [*running, *resumed]:
            req_to_new_blocks[r.request_id]
        return super().make(scheduler, running, resumed, num_scheduled_tokens, spec_decode_tokens, req_to_new_blocks)


class DraftsSentAsTokens(CachedRequestData016):
    """A reference that sends the drafts too in a pipeline-parallel step (upstream leaves the
    scheduled drafts out of the tokens it sends)."""

    def make(self, scheduler, running, resumed, num_scheduled_tokens, spec_decode_tokens, req_to_new_blocks):
        return super().make(scheduler, running, resumed, num_scheduled_tokens, {}, req_to_new_blocks)


class ResumedFirst(CachedRequestData016):
    """A reference that lists the resumed requests before the running ones."""

    def make(self, scheduler, running, resumed, *tables):
        try:
            return super().make(scheduler, resumed, running, *tables)
        except InvalidSchedulerInput:
            return super().make(scheduler, running, resumed, *tables)


# candidate -> (the reference version it targets, the law that catches it)
MUTANTS = {
    "OwnTokenList": ("0.16.0", "equivalence"),
    "PlaceholdersLeftOut": ("0.16.0", "equivalence"),
    "FirstGroupDecides": ("0.16.0", "equivalence"),
    "HistoryForEveryRequest": ("0.24.0", "equivalence"),
    "ResumedNotChecked": ("0.16.0", "equivalence"),
    "HistoryOnModelRunnerV2": ("0.24.0", "equivalence"),
    "MissingEntryAsKeyError": ("0.16.0", "errors"),
}
REFERENCE_MUTANTS = ("DraftsSentAsTokens", "ResumedFirst")
