"""Makes each request's output list a `TrackedTokenList` as it joins vLLM's `InputBatch`.

The list object stays shared by the request state (which the model runner appends to, repairs
and trims) and the batch row, so every consumer that watches it (the penalties builder, the
thinking-budget holder) learns what changed instead of comparing. Installed by the patches that
use it; the wrapper is removed when the last of them is uninstalled.
"""

from __future__ import annotations

import functools

from vllm_hotpaths import vllm_env
from vllm_hotpaths.tracked_list import TrackedTokenList

INPUT_BATCH = "vllm.v1.worker.gpu_input_batch"
UPSTREAM: dict[str, object] = {}
_users: set[str] = set()


def install(user: str) -> None:
    _users.add(user)
    if UPSTREAM:
        return
    batch_class = vllm_env.import_vllm(INPUT_BATCH).InputBatch
    upstream_add = batch_class.add_request

    @functools.wraps(upstream_add)
    def add_request(self, request, *args, **kwargs):
        if type(request.output_token_ids) is list:
            request.output_token_ids = TrackedTokenList(request.output_token_ids)
        return upstream_add(self, request, *args, **kwargs)

    UPSTREAM["add_request"] = upstream_add
    batch_class.add_request = add_request


def uninstall(user: str) -> None:
    _users.discard(user)
    if UPSTREAM and not _users:
        vllm_env.import_vllm(INPUT_BATCH).InputBatch.add_request = UPSTREAM.pop("add_request")
