"""Installs `columnwise` as vLLM's `Scheduler._make_cached_request_data` (the engine core's
scheduler, whichever model runner the engine uses; `AsyncScheduler` inherits it).

The fast fields become vLLM's own `CachedRequestData`; from 0.34 the method takes no resumed
requests, and the wrapper takes the arguments upstream's takes. Every call the fast path refuses (a request
missing from a table, or to 0.23 a resumed request scheduled in the previous step) goes to
upstream's method, so the patched scheduler raises upstream's own error there.
"""

from __future__ import annotations

import inspect

from vllm_hotpaths import registry, vllm_env
from vllm_hotpaths.cached_request_data import InvalidSchedulerInput

SCHEDULER = "vllm.v1.core.sched.scheduler"
UPSTREAM: dict[str, object] = {}  # the replaced method, for the properties' unpatched side
REPLACED = ["Scheduler._make_cached_request_data"]


def install(version: str | None = None) -> list[str]:
    version = version or vllm_env.installed_version()
    module = vllm_env.import_vllm(SCHEDULER)
    if UPSTREAM:
        return REPLACED
    fast = registry.get("cached_request_data").fast_for(version)()
    upstream = module.Scheduler._make_cached_request_data
    make_data = vllm_env.import_vllm("vllm.v1.core.sched.output").CachedRequestData

    def made(self, running_reqs, resumed_reqs, num_scheduled_tokens, spec_decode_tokens, req_to_new_blocks):
        try:
            return make_data(**fast.make(self, running_reqs, resumed_reqs, num_scheduled_tokens,
                                         spec_decode_tokens, req_to_new_blocks))
        except InvalidSchedulerInput:
            return None

    if "resumed_reqs" in inspect.signature(upstream).parameters:  # to 0.33
        def _make_cached_request_data(self, running_reqs, resumed_reqs, num_scheduled_tokens, spec_decode_tokens,
                                      req_to_new_blocks):
            data = made(self, running_reqs, resumed_reqs, num_scheduled_tokens, spec_decode_tokens, req_to_new_blocks)
            return data if data is not None else upstream(
                self, running_reqs, resumed_reqs, num_scheduled_tokens, spec_decode_tokens, req_to_new_blocks)
    else:
        def _make_cached_request_data(self, running_reqs, num_scheduled_tokens, spec_decode_tokens,
                                      req_to_new_blocks):
            data = made(self, running_reqs, [], num_scheduled_tokens, spec_decode_tokens, req_to_new_blocks)
            return data if data is not None else upstream(
                self, running_reqs, num_scheduled_tokens, spec_decode_tokens, req_to_new_blocks)

    _make_cached_request_data.hotpaths_upstream = upstream
    UPSTREAM["_make_cached_request_data"] = upstream
    module.Scheduler._make_cached_request_data = _make_cached_request_data
    return REPLACED


def uninstall() -> None:
    """Put upstream's method back (the properties patch one test at a time)."""
    if UPSTREAM:
        vllm_env.import_vllm(SCHEDULER).Scheduler._make_cached_request_data = UPSTREAM.pop("_make_cached_request_data")
