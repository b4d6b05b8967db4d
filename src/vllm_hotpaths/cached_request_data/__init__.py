"""`Scheduler._make_cached_request_data`: what the scheduler tells the model runner, each step,
about the requests it scheduled again (running ones, and resumed ones after a preemption).

For each request, in the order running then resumed: its id; in a pipeline-parallel engine
without async scheduling, the tokens it feeds this step; its whole token list when it was not
scheduled in the previous step (0.24 to 0.33, on Model Runner v1 only); the ids of the KV blocks it
was given this step (None when it got none); its computed tokens; its outputs, counting the
async placeholders not yet filled. From 0.34 a resumed request is scheduled as a new one (sent
in full) and never reaches this call, and the message has no resumed ids and no token lists
(`FIELDS_034`). It is Python over every request of the batch at every
step (1.3 ms of the scheduler's 7-8 ms at B = 1,024 on an H200 host: docs/decode-profile.md).

An implementation reads the scheduler through four attributes (`use_pp`,
`scheduler_config.async_scheduling`, `prev_step_scheduled_req_ids` and, from 0.24,
`use_v2_model_runner`), each request through `request_id`, `all_token_ids`,
`num_computed_tokens`, `num_output_tokens` and `num_output_placeholders`, and each request's
new blocks through `get_block_ids(allow_none=True)`, as vLLM's scheduler does.
"""

from __future__ import annotations

# vLLM's CachedRequestData, field by field (the same names from 0.16.0 to 0.33.0), and from 0.34.0.
FIELDS = ("req_ids", "resumed_req_ids", "new_token_ids", "all_token_ids", "new_block_ids",
          "num_computed_tokens", "num_output_tokens")
FIELDS_034 = ("req_ids", "new_token_ids", "new_block_ids", "num_computed_tokens", "num_output_tokens")


class InvalidSchedulerInput(ValueError):
    """A request with no entry where the scheduler must have one, or (to 0.23) a resumed request
    that was also scheduled in the previous step."""


def entry(table: dict, request_id: str, what: str):
    """`table[request_id]`, refused with the table's name where the scheduler left it out."""
    try:
        return table[request_id]
    except KeyError:
        raise InvalidSchedulerInput(f"request {request_id!r} is scheduled but has no entry in {what}") from None
    except TypeError:
        raise InvalidSchedulerInput(f"request id {request_id!r} cannot key {what}") from None
