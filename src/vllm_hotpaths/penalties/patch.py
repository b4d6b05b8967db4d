"""Installs the incremental output-token tensor into vLLM's v1 penalties.

Replacements:
- `InputBatch.add_request` first turns the request's output list into a `TrackedTokenList`
  (`tracked_outputs`), so the fast builder can update each staging row from its change mark;
- `apply_all_penalties`, as the v1 sampler and the rejection sampler call it, builds the padded
  output-token tensor with `IncrementalPenalties.build`, then penalizes with
  `IncrementalPenalties.penalize`: the fused kernels (upstream's arithmetic on contiguous CUDA
  logits) or, for any other logits, upstream's own `apply_penalties`. Each caller keeps its own
  staging rows (the rejection sampler's rows are outputs combined with drafts);
- from vLLM 0.22.0 on (its trailing-run rule), `InputBatch.update_async_output_token_ids`, the
  placeholder repair that runs before output ids are read, becomes the bulk repair
  (`fast.repair_placeholders_in_bulk`: whole-batch checks for the usual decode step, the
  reference's loop otherwise).

Rows it cannot vouch for are rebuilt from the list, as upstream does (plain lists, lists seen
twice); a step with an id outside [-1, V] goes to upstream's function as a whole.
"""

from __future__ import annotations

import functools

from vllm_hotpaths import registry, tracked_outputs, vllm_env
from vllm_hotpaths.penalties.fast import IncrementalPenalties, repair_placeholders_in_bulk
from vllm_hotpaths.penalties.reference import REPAIR_SINCE, InvalidTokenId
from vllm_hotpaths.tracked_outputs import INPUT_BATCH

PENALTIES = "vllm.v1.sample.ops.penalties"
CALLERS = ("vllm.v1.sample.sampler", "vllm.v1.sample.rejection_sampler")  # import it by name
UPSTREAM: dict[str, object] = {}  # the replaced functions, for the properties' unpatched side
REPLACED: list[str] = []


def incremental_apply_all_penalties(upstream):
    """An `apply_all_penalties` with its own staging rows (one builder per vocabulary and device)."""
    penalties = vllm_env.import_vllm(PENALTIES)
    builders: dict[tuple, IncrementalPenalties] = {}

    @functools.wraps(upstream)
    def apply_all_penalties(logits, prompt_token_ids, presence_penalties, frequency_penalties,
                            repetition_penalties, output_token_ids):
        key = (logits.shape[-1], logits.device)
        builder = builders.get(key)
        if builder is None:
            builder = builders[key] = IncrementalPenalties(*key)
        try:
            output_tokens, new = builder.build(output_token_ids)
        except InvalidTokenId:  # the builder refuses before changing its rows
            return upstream(logits, prompt_token_ids, presence_penalties, frequency_penalties,
                            repetition_penalties, output_token_ids)
        return builder.penalize(logits, prompt_token_ids, output_tokens, presence_penalties, frequency_penalties,
                                repetition_penalties, fallback=penalties.apply_penalties, new=new)

    return apply_all_penalties


def install(version: str | None = None) -> list[str]:
    """Install into the running vLLM (`version`: its version, found when not given)."""
    if UPSTREAM:
        return list(REPLACED)
    upstream = vllm_env.import_vllm(PENALTIES).apply_all_penalties
    tracked_outputs.install("penalties")
    UPSTREAM["apply_all_penalties"] = upstream
    for name in CALLERS:
        vllm_env.import_vllm(name).apply_all_penalties = incremental_apply_all_penalties(upstream)
    REPLACED[:] = ["InputBatch.add_request", "apply_all_penalties"]
    if registry.version_key(version or vllm_env.installed_version()) >= registry.version_key(REPAIR_SINCE):
        batch_class = vllm_env.import_vllm(INPUT_BATCH).InputBatch
        UPSTREAM["update_async_output_token_ids"] = batch_class.update_async_output_token_ids
        batch_class.update_async_output_token_ids = repair_placeholders_in_bulk  # (self) is the batch
        REPLACED.append("InputBatch.update_async_output_token_ids")
    return list(REPLACED)


def uninstall() -> None:
    """Put upstream's functions back (the properties patch one test at a time)."""
    if UPSTREAM:
        tracked_outputs.uninstall("penalties")
        upstream = UPSTREAM.pop("apply_all_penalties")
        for name in CALLERS:
            vllm_env.import_vllm(name).apply_all_penalties = upstream
        if "update_async_output_token_ids" in UPSTREAM:
            vllm_env.import_vllm(INPUT_BATCH).InputBatch.update_async_output_token_ids = (
                UPSTREAM.pop("update_async_output_token_ids"))
        REPLACED.clear()
