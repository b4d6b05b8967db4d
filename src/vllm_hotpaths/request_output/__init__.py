"""`Scheduler._update_request_with_output`: what the scheduler does with the tokens the model
sampled for one request, called for every request with output at every step. It appends each
token (and the hashes of any block it fills), checks for a stop, and in the AsyncScheduler settles
the request's output placeholders and caches its newly full blocks. Upstream spreads this over
the AsyncScheduler's override, the base method, `Request.append_output_token_ids`,
`check_stop` and three layers of `cache_blocks`: about a dozen frames per request and step.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OutputStep:
    """What one call depends on, read before it."""

    asynchronous: bool  # the AsyncScheduler's method (placeholders, caching) rather than the base's
    new_token_ids: tuple[int, ...]
    is_stale: bool  # output of a step scheduled before the request was preempted (0.27.0 on)
    status: str  # the request's (a RequestStatus name)
    num_output_tokens: int
    num_tokens: int  # prompt and outputs
    num_computed_tokens: int
    num_output_placeholders: int
    tokens_to_discard: int  # the async outputs to drop after reset_prefix_cache (a flag to 0.21)
    min_tokens: int
    max_tokens: int
    eos_token_id: int | None  # the id that stops the request: None where it ignores it
    stop_token_ids: tuple[int, ...]
    stop_reason: int | str | None
    max_model_len: int
    block_size: int
    enable_caching: bool
    cached_blocks: int  # full blocks the KV cache manager has cached for the request


@dataclass(frozen=True)
class Applied:
    """What the call returned and left behind."""

    new_token_ids: tuple[int, ...]  # returned: the tokens up to and including a stop
    stopped: bool
    status: str  # the request's after the call
    stop_reason: int | str | None  # the request's after the call
    num_output_tokens: int
    num_computed_tokens: int
    num_output_placeholders: int
    tokens_to_discard: int
    cached_blocks: int
