"""Installs the watermark thinking-budget holder into vLLM's `InputBatch`.

`InputBatch.__init__` runs as upstream's, then the batch's `ThinkingBudgetStateHolder` (present
when the engine has a reasoning config) is replaced by `FastHolder`: the same API (`sync_batch`,
`update_state`, `apply_to_logits`, `has_tracked_requests`, the marker lists) over the watermark
variant whose reference the installed vLLM is checked against: `watermark@0.21.0` for 0.21.0 to
0.22.1, `watermark@0.23.0` for 0.23.0 and 0.24.0, `watermark@0.25.0` for 0.25.x, `watermark@0.26.0`
for 0.26.0 to 0.27.1, `watermark@0.28.0` from 0.28.0 (through 0.33.x). The fast holder takes
vLLM's `BatchUpdate`, `SamplingParams` and `MoveDirectionality` as they are, and
`InputBatch.add_request` makes each request's output list a `TrackedTokenList` (`tracked_outputs`),
which the holder reads in O(1) instead of comparing. A reasoning config the fast holder refuses (a
marker id outside the vocabulary) keeps upstream's holder for that batch.
"""

from __future__ import annotations

import functools
import logging

from vllm_hotpaths import registry, tracked_outputs, vllm_env
from vllm_hotpaths.think_budget import InvalidThinkConfig, ThinkConfig

INPUT_BATCH = "vllm.v1.worker.gpu_input_batch"
UPSTREAM: dict[str, object] = {}  # the replaced method, for the properties' unpatched side
REPLACED = ["InputBatch.thinking_budget_state_holder", "InputBatch.add_request"]
logger = logging.getLogger("vllm.vllm_hotpaths")


class FastHolder:
    """vLLM's `ThinkingBudgetStateHolder` interface, answered by a fast holder."""

    def __init__(self, fast, upstream) -> None:
        self.fast = fast
        self.is_enabled = upstream.is_enabled
        self.think_start_token_ids = upstream.think_start_token_ids
        self.think_end_token_ids = upstream.think_end_token_ids
        self.in_spec_mode, self.num_spec_tokens = upstream.in_spec_mode, upstream.num_spec_tokens
        self.device = upstream.device

    @property
    def _state(self) -> dict:
        """Row -> state, as upstream names it (the rows a budget tracks)."""
        return self.fast.rows

    def has_tracked_requests(self) -> bool:
        return bool(self.fast.rows)

    def sync_batch(self, batch_update) -> None:
        self.fast.sync_batch(batch_update)

    def update_state(self, output_token_ids, spec_token_ids=None, repeat_indices=None) -> None:
        self.fast.update_state(output_token_ids, spec_token_ids, repeat_indices)

    def apply_to_logits(self, logits, predict_bonus_token, spec_token_ids=None):
        return self.fast.apply_to_logits(logits, predict_bonus_token, spec_token_ids)


def fast_holder(upstream, vocab_size: int, max_num_reqs: int, version: str):
    """A `FastHolder` standing in for `upstream`, or `upstream` itself where the fast holder
    refuses the configuration."""
    config = ThinkConfig(tuple(upstream.think_start_token_ids), tuple(upstream.think_end_token_ids),
                         vocab_size, max_num_reqs, upstream.num_spec_tokens)
    try:
        fast = registry.get("think_budget").fast_for(version)(config, upstream.device)
    except InvalidThinkConfig as refused:
        logger.warning("vllm-hotpaths: think_budget keeps upstream's holder for this batch: %s", refused)
        return upstream
    return FastHolder(fast, upstream)


def install(version: str | None = None) -> list[str]:
    version = version or vllm_env.installed_version()
    batch_class = vllm_env.import_vllm(INPUT_BATCH).InputBatch
    if UPSTREAM:
        return REPLACED
    upstream_init = batch_class.__init__

    @functools.wraps(upstream_init)  # keeps the signature callers inspect
    def __init__(self, *args, **kwargs):
        upstream_init(self, *args, **kwargs)
        holder = self.thinking_budget_state_holder
        if holder is not None:
            self.thinking_budget_state_holder = fast_holder(holder, self.vocab_size, self.max_num_reqs, version)

    UPSTREAM["__init__"] = upstream_init
    batch_class.__init__ = __init__
    tracked_outputs.install("think_budget")
    return REPLACED


def uninstall() -> None:
    """Put upstream's constructor back (the properties patch one test at a time)."""
    if UPSTREAM:
        vllm_env.import_vllm(INPUT_BATCH).InputBatch.__init__ = UPSTREAM.pop("__init__")
        tracked_outputs.uninstall("think_budget")
