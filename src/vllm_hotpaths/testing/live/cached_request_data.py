"""vLLM's own `Scheduler._make_cached_request_data`, behind the hot path's contract.

The stand-in requests and blocks of a case become vLLM's own `Request` (its `ConstantList` of
tokens) and `KVCacheBlocks` of `KVCacheBlock`s, one vLLM object per stand-in object (the shared
empty blocks stay one object); the scheduler is the case's four attributes, as the method reads
them. Upstream's refusals (its assertion on a resumed request scheduled in the previous step, a
KeyError for a missing entry) are given as the contract's `InvalidSchedulerInput`, naming the
request the reference names. From 0.34 vLLM's method takes no resumed requests (they are
scheduled as new ones): the case's resumed requests are left out of its call, as vLLM's scheduler
leaves them out.
"""

from __future__ import annotations

import dataclasses
import inspect

from vllm_hotpaths import vllm_env
from vllm_hotpaths.cached_request_data import InvalidSchedulerInput


def scheduler_class():
    return vllm_env.import_vllm("vllm.v1.core.sched.scheduler").Scheduler


def upstream_method():
    """vLLM's own method, even while the plugin's patch is installed."""
    method = scheduler_class()._make_cached_request_data
    return getattr(method, "hotpaths_upstream", method)


def takes_resumed(method) -> bool:
    """Whether vLLM's method takes resumed requests (0.16 to 0.33)."""
    return "resumed_reqs" in inspect.signature(method).parameters


def arguments(method, inputs) -> tuple:
    """The case's arguments as `method` takes them: without the resumed requests from 0.34."""
    every = inputs.arguments()
    return every if takes_resumed(method) else every[:2] + every[3:]


def fields_of(data) -> dict:
    """vLLM's CachedRequestData as {field: value}, its own fields in order."""
    return {f.name: getattr(data, f.name) for f in dataclasses.fields(data)}


def vllm_request(request_id: str, prompt: list[int], outputs: list[int], num_computed_tokens: int, placeholders: int):
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    request = vllm_env.call(Request, request_id=request_id, prompt_token_ids=list(prompt),
                            sampling_params=SamplingParams(max_tokens=1 << 16), pooling_params=None, eos_token_id=None)
    if outputs:
        request.append_output_token_ids(list(outputs))
    request.num_computed_tokens = num_computed_tokens
    request.num_output_placeholders = placeholders
    return request


def vllm_blocks(groups):
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.kv_cache_utils import KVCacheBlock

    return KVCacheBlocks(tuple([KVCacheBlock(i) for i in group] for group in groups))


def as_vllm(inputs):
    """The case's arguments with vLLM's own request and block objects."""
    vllm_env.import_vllm("vllm.v1.core.sched.scheduler")
    requests = {}
    for r in inputs.running + inputs.resumed:
        outputs = list(r._output_token_ids)
        tokens = list(r.all_token_ids)
        requests[id(r)] = vllm_request(r.request_id, tokens[:len(tokens) - len(outputs)], outputs,
                                       r.num_computed_tokens, r.num_output_placeholders)
    blocks = {}
    for b in inputs.req_to_new_blocks.values():
        blocks.setdefault(id(b), vllm_blocks(b.groups))
    return dataclasses.replace(
        inputs, running=[requests[id(r)] for r in inputs.running], resumed=[requests[id(r)] for r in inputs.resumed],
        req_to_new_blocks={k: blocks[id(b)] for k, b in inputs.req_to_new_blocks.items()})


def first_problem(inputs, error: Exception) -> InvalidSchedulerInput:
    """Upstream's refusal as the reference words it."""
    if isinstance(error, AssertionError):
        previous = inputs.scheduler.prev_step_scheduled_req_ids
        found = next(r.request_id for r in inputs.resumed if r.request_id in previous)
        return InvalidSchedulerInput(f"resumed request {found!r} was scheduled in the previous step")
    (key,) = error.args
    scheduler = inputs.scheduler
    sends_tokens = scheduler.use_pp and not scheduler.scheduler_config.async_scheduling
    table = "num_scheduled_tokens" if sends_tokens and key not in inputs.num_scheduled_tokens else "req_to_new_blocks"
    return InvalidSchedulerInput(f"request {key!r} is scheduled but has no entry in {table}")


class LiveCachedRequestData:
    @classmethod
    def scheduler_reads(cls) -> tuple[str, ...]:
        """The installed vLLM's scheduler attributes (its reference's `scheduler_reads`)."""
        from vllm_hotpaths import registry

        return registry.get("cached_request_data").reference(vllm_env.installed_version()).scheduler_reads

    def make(self, scheduler, running, resumed, num_scheduled_tokens, spec_decode_tokens, req_to_new_blocks) -> dict:
        from vllm_hotpaths.testing.cases.cached_request_data import Inputs

        inputs = as_vllm(Inputs(scheduler, running, resumed, num_scheduled_tokens, spec_decode_tokens,
                                req_to_new_blocks))
        method = upstream_method()
        try:
            data = method(*arguments(method, inputs))
        except (AssertionError, KeyError) as error:
            raise first_problem(inputs, error) from error
        return fields_of(data)


def vllm_inputs(step):
    """A case's arguments as the patch law hands them to the scheduler: vLLM's own objects, the
    scheduler with the attributes the installed release's has (its reference's `scheduler_reads`)."""
    from vllm_hotpaths.testing.cases.cached_request_data import inputs_of

    return as_vllm(inputs_of(step, reads=LiveCachedRequestData.scheduler_reads()))


def call(method, inputs):
    """The method's fields (every type spelled out), or the error it raised."""
    from vllm_hotpaths.testing.cases.cached_request_data import typed

    try:
        data = method(*arguments(upstream_method(), inputs))
    except Exception as error:  # upstream's own error must be the patched one's
        return ("raised", type(error).__name__, str(error))
    return [(name, typed(value)) for name, value in fields_of(data).items()]
