"""Model Runner V2's penalties (`vllm/v1/worker/gpu/sample/penalties.py`, vLLM 0.22.0 on).

Model Runner V2 keeps each request in a fixed slot of `[max_num_reqs, ...]` tables and never
rebuilds its penalty statistics from lists. What every implementation here states:

- `add_request(slot, prompt, resumed, penalties)`: a request enters a free slot. `resumed` are
  the output tokens it had before a preemption (vLLM's `prefill_len > prompt_len`): they count
  as outputs. `penalties` is (repetition, frequency, presence).
- `remove_request(slot)`: the slot is free again.
- `apply_penalties(logits, rows, local_pos, input_ids)`: one entry per logits row: the row's slot
  (vLLM's `expanded_idx_mapping`), its place among its request's rows (`expanded_local_pos`: 0,
  then 1, 2, .. for speculative rows) and the token fed at that row (row 0: the last committed
  token; row j: the j-th draft, -1 for a placeholder draft). Penalizes the fp32 logits in place.
  A row of a request with penalties counts the request's outputs plus the drafts fed at its
  request's rows 1..local_pos (a -1 counts nothing); its lanes seen in the prompt or counted
  get the repetition penalty (`x * (1/p)` if `x > 0`, else `x * p`), then `x -= frequency *
  count`, then `x -= presence * (count > 0)`. A request whose three penalties are neutral is
  left as it is.
- `commit(slots, sampled)`: vLLM's `post_update` after sampling: each request of the step
  appends the tokens it sampled (accepted drafts, then the recovered or bonus token; none for a
  request that sampled nothing), in that order.

On CUDA, Triton compiles `1.0 / p` to an approximate division and `x - f * c` to one fused
multiply-add, so the bits differ from any PyTorch arithmetic; each device is checked on its own.
"""

from __future__ import annotations

from vllm_hotpaths import vllm_env

# Triton has no CPU backend: without a GPU the kernels run in Triton's interpreter, which must
# be chosen before triton is imported.
vllm_env.set_cpu_environment()


class InvalidPenaltiesInput(ValueError):
    """A slot, token id, tensor or batch layout that vLLM's model runner would never hand over
    (upstream would read past its tables, or count into another request's row)."""


def uses_penalties(penalties) -> bool:
    """Whether (repetition, frequency, presence) changes any logit (vLLM's `use_penalty`)."""
    repetition, frequency, presence = penalties
    return repetition != 1.0 or frequency != 0.0 or presence != 0.0
