"""Upstream's semantics, frozen: the fields vLLM's `Scheduler._make_cached_request_data` returns,
request by request.

`CachedRequestData016`: vLLM 0.16.0 to 0.23.x. A resumed request must not have been scheduled in
the previous step (upstream asserts it). Every request that was not scheduled in the previous
step sends its whole token list.
`CachedRequestData024`: vLLM 0.24.0 on (unchanged through 0.33.0). No such assertion: a resumed
request that was scheduled in the previous step is listed as resumed and sends no token list.
Token lists are sent only to Model Runner v1 (`use_v2_model_runner` False).
`CachedRequestData034`: vLLM 0.34.0 on. Resumed requests are scheduled as new ones and never reach
this call (the `resumed` given are left out), and no token list is sent: the fields are
`FIELDS_034`.
"""

from __future__ import annotations

from vllm_hotpaths.cached_request_data import FIELDS, FIELDS_034, InvalidSchedulerInput, entry


class CachedRequestData016:
    refuses_resumed_scheduled_before = True  # upstream's assertion (0.16 to 0.23)
    history_for_v1_only = False  # 0.24: Model Runner V2 keeps its own token history
    fields = FIELDS  # 0.34: no resumed ids, no token lists, no resumed requests in the call
    # What the release's scheduler has and the method reads (0.34's has no previous step's ids)
    scheduler_reads = ("use_pp", "scheduler_config", "prev_step_scheduled_req_ids")

    def make(self, scheduler, running: list, resumed: list, num_scheduled_tokens: dict,
             spec_decode_tokens: dict, req_to_new_blocks: dict) -> dict:
        if self.fields is not FIELDS:  # 0.34 on: resumed requests never reach the call
            resumed = []
        fields = {name: [] for name in FIELDS}
        fields["resumed_req_ids"], fields["all_token_ids"] = set(), {}
        # Pipeline parallelism without async scheduling: the last stage cannot hand its sampled
        # tokens to the first, so the scheduler sends the tokens each request feeds.
        sends_tokens = scheduler.use_pp and not scheduler.scheduler_config.async_scheduling
        sends_history = self.fields is FIELDS and not (self.history_for_v1_only and scheduler.use_v2_model_runner)
        previous = scheduler.prev_step_scheduled_req_ids if self.fields is FIELDS else set()
        for index, request in enumerate([*running, *resumed]):
            request_id = request.request_id
            fields["req_ids"].append(request_id)
            if sends_tokens:
                drafts = len(spec_decode_tokens.get(request_id, ()))
                start = request.num_computed_tokens
                stop = start + entry(num_scheduled_tokens, request_id, "num_scheduled_tokens") - drafts
                fields["new_token_ids"].append(request.all_token_ids[start:stop])
            scheduled_before = request_id in previous
            if index >= len(running):
                if scheduled_before and self.refuses_resumed_scheduled_before:
                    raise InvalidSchedulerInput(f"resumed request {request_id!r} was scheduled in the previous step")
                fields["resumed_req_ids"].add(request_id)
            if sends_history and not scheduled_before:
                fields["all_token_ids"][request_id] = list(request.all_token_ids)
            blocks = entry(req_to_new_blocks, request_id, "req_to_new_blocks")
            fields["new_block_ids"].append(blocks.get_block_ids(allow_none=True))
            fields["num_computed_tokens"].append(request.num_computed_tokens)
            fields["num_output_tokens"].append(request.num_output_tokens + request.num_output_placeholders)
        return {name: fields[name] for name in self.fields}


class CachedRequestData024(CachedRequestData016):
    refuses_resumed_scheduled_before = False
    history_for_v1_only = True
    scheduler_reads = CachedRequestData016.scheduler_reads + ("use_v2_model_runner",)


class CachedRequestData034(CachedRequestData024):
    fields = FIELDS_034
    scheduler_reads = ("use_pp", "scheduler_config")
