"""The installed vLLM's own `_update_request_with_output`, watched in a live scheduler: every
call in the fast path's domain (a plain `Request` with sampling parameters and no repetition
detection, one KV cache group) is recorded as the `OutputStep` read before it and the `Applied`
read after it (or the type of the error it raised)."""

from __future__ import annotations

from contextlib import contextmanager

from vllm_hotpaths.request_output import Applied, OutputStep


def in_domain(scheduler, request) -> bool:
    from vllm.v1.request import Request

    params = request.sampling_params
    return (type(request) is Request and params is not None and request.pooling_params is None
            and getattr(params, "repetition_detection", None) is None
            and len(scheduler.kv_cache_manager.coordinator.single_type_managers) == 1)


def to_discard(request) -> int:
    if hasattr(request, "async_tokens_to_discard"):
        return request.async_tokens_to_discard
    return int(getattr(request, "discard_latest_async_tokens", False))


def cached_blocks(scheduler, request) -> int:
    return scheduler.kv_cache_manager.coordinator.single_type_managers[0].num_cached_block.get(request.request_id, 0)


def eos_token_id(request) -> int | None:
    """The end-of-sequence id that stops the request (the parameters' from 0.17.0, the request's
    unless the parameters ignore it before)."""
    params = request.sampling_params
    if hasattr(params, "eos_token_id"):
        return params.eos_token_id
    return None if params.ignore_eos else request.eos_token_id


def output_step(scheduler, request, new_token_ids, is_stale: bool) -> OutputStep:
    params = request.sampling_params
    manager = scheduler.kv_cache_manager
    return OutputStep(
        asynchronous=any(c.__name__ == "AsyncScheduler" for c in type(scheduler).__mro__),
        new_token_ids=tuple(new_token_ids), is_stale=is_stale, status=request.status.name,
        num_output_tokens=request.num_output_tokens, num_tokens=request.num_tokens,
        num_computed_tokens=request.num_computed_tokens, num_output_placeholders=request.num_output_placeholders,
        tokens_to_discard=to_discard(request), min_tokens=params.min_tokens, max_tokens=request.max_tokens,
        eos_token_id=eos_token_id(request),
        stop_token_ids=tuple(params.stop_token_ids or ()), stop_reason=request.stop_reason,
        max_model_len=scheduler.max_model_len,
        block_size=manager.coordinator.single_type_managers[0].block_size,
        enable_caching=manager.enable_caching, cached_blocks=cached_blocks(scheduler, request))


@contextmanager
def watched(scheduler):
    """[(OutputStep, Applied or the name of the error raised)] of every call in the domain to
    `scheduler._update_request_with_output` inside the block (shadowed on the scheduler)."""
    method = scheduler._update_request_with_output
    own = scheduler.__dict__.get("_update_request_with_output")  # a patch bound to this scheduler
    found: list[tuple] = []

    def _update_request_with_output(request, new_token_ids, *args, **kwargs):
        if not in_domain(scheduler, request):
            return method(request, new_token_ids, *args, **kwargs)
        step = output_step(scheduler, request, new_token_ids, bool(kwargs.get("is_stale", args[0] if args else False)))
        try:
            kept, stopped = method(request, new_token_ids, *args, **kwargs)
        except Exception as error:
            found.append((step, type(error).__name__))
            raise
        found.append((step, Applied(
            new_token_ids=tuple(kept), stopped=stopped, status=request.status.name,
            stop_reason=request.stop_reason, num_output_tokens=request.num_output_tokens,
            num_computed_tokens=request.num_computed_tokens, num_output_placeholders=request.num_output_placeholders,
            tokens_to_discard=to_discard(request), cached_blocks=cached_blocks(scheduler, request))))
        return kept, stopped

    scheduler._update_request_with_output = _update_request_with_output
    try:
        yield found
    finally:
        if own is None:
            del scheduler._update_request_with_output
        else:
            scheduler._update_request_with_output = own
