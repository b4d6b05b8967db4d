"""Model Runner V2's thinking budget (`vllm/v1/worker/gpu/sample/thinking_budget.py`, vLLM 0.28.0 on).

Model Runner V2 keeps no per-request think state machine: each step it finds, in a request's
committed tokens (prompt, resumed outputs and outputs, one sequence) plus the drafts before a
logits row, the last start marker and the last natural end marker, and forces the end string
when the thinking since that start has used up the budget. What every implementation here states:

- the configuration (`ThinkSlotsConfig`): the start marker, the forced end string (vLLM's
  `reasoning_end_token_ids`), the natural end marker (the reasoning parser's), the vocabulary
  size, the slot table's size and the model length. Budgets are enforced only when all three
  marker lists are non-empty (upstream's `enabled`).
- `add_request(slot, prompt, resumed, budget)`: a request enters a free slot with its prompt and
  the outputs it had before a preemption; `budget` is its thinking budget (None: none; above
  int32's range it is clamped to 2**31 - 1).
- `remove_request(slot)`: the slot is free again.
- `apply(logits, rows, local_pos, input_ids)`: one entry per logits row: its slot, its place among
  its request's rows (0, then 1, 2, .. for drafts) and the token fed there (row j > 0: the j-th
  draft, -1 a placeholder). For a row of a budgeted request, over the sequence "committed tokens,
  then the drafts fed at its request's rows 1..local_pos": if the last start marker begins after
  the last natural end marker (or there is no natural end) and at least `budget` tokens follow
  the start marker, the row's logit of the next forced-end id becomes 1e9: the first id of the
  forced string, or the one after the longest proper prefix of it that the sequence ends with.
  Nothing else in the logits changes.
- `commit(slots, sampled)`: vLLM's `post_update`: each request of the step appends the tokens it
  sampled (accepted drafts, then the recovered or bonus token).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

from vllm_hotpaths import vllm_env

# Triton has no CPU backend: vLLM's kernels run in Triton's interpreter without a GPU, which must
# be chosen before triton is imported.
vllm_env.set_cpu_environment()

INT32_MAX = 2**31 - 1
FORCED_LOGIT = 1e9


class InvalidThinkingInput(ValueError):
    """A configuration, request, slot or step layout that vLLM's model runner would never hand
    over (its kernels would read or write outside their tables)."""


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


@dataclass(frozen=True)
class ThinkSlotsConfig:
    """What the state is built from (vLLM: the engine's `ReasoningConfig` and the runner's sizes)."""

    start_ids: tuple[int, ...]
    end_ids: tuple[int, ...]  # the forced end string
    natural_end_ids: tuple[int, ...]  # the reasoning parser's end marker
    vocab_size: int
    max_num_reqs: int
    max_model_len: int

    @property
    def enabled(self) -> bool:
        return bool(self.start_ids and self.end_ids and self.natural_end_ids)

    def validate(self) -> None:
        for name in ("vocab_size", "max_num_reqs", "max_model_len"):
            value = getattr(self, name)
            if not _is_int(value) or value < 1:
                raise InvalidThinkingInput(f"{name} must be an integer >= 1, got {value!r}")
        for name in ("start_ids", "end_ids", "natural_end_ids"):
            for token in getattr(self, name):
                if not _is_int(token) or not 0 <= token < self.vocab_size:
                    raise InvalidThinkingInput(f"{name} {list(getattr(self, name))} has id {token!r} outside the "
                                               f"vocabulary [0, {self.vocab_size})")


def checked_budget(budget) -> int | None:
    """The budget as upstream stores it (None: no budget; clamped to int32), or
    InvalidThinkingInput for what SamplingParams refuses (0.33 normalizes -1 to None before the
    runner sees it, so a negative budget never reaches it)."""
    if budget is None:
        return None
    if not _is_int(budget) or budget < 0:
        raise InvalidThinkingInput(f"thinking budget must be None or an integer >= 0, got {budget!r}")
    return min(budget, INT32_MAX)


def checked_ids(values, vocab_size: int, what: str, lowest: int = 0) -> list[int]:
    values = list(values)
    for token in values:
        if not _is_int(token) or not lowest <= token < vocab_size:
            raise InvalidThinkingInput(f"{what}: token id {token!r} is outside [{lowest}, {vocab_size})")
    return values


def check_step(config: ThinkSlotsConfig, held, device, logits, rows, local_pos, input_ids):
    """The step's rows as lists of ints; InvalidThinkingInput naming the first thing that does not
    describe one batch of the table's requests (`held`: the slots holding a request)."""
    import torch

    vocab = config.vocab_size
    if not isinstance(logits, torch.Tensor) or logits.dtype != torch.float32 or logits.dim() != 2 \
            or logits.shape[1] != vocab or not logits.is_contiguous():
        raise InvalidThinkingInput(f"logits must be contiguous float32 [num_rows, {vocab}], got "
                                   f"{getattr(logits, 'dtype', type(logits).__name__)} "
                                   f"{list(getattr(logits, 'shape', []))}")
    device = torch.device(device)
    if logits.device.type != device.type or None not in (logits.device.index, device.index) \
            and logits.device.index != device.index:
        raise InvalidThinkingInput(f"logits are on {logits.device}, the state on {device}")
    rows, local_pos, input_ids = (list(v) for v in (rows, local_pos, input_ids))
    if not len(rows) == len(local_pos) == len(input_ids) == logits.shape[0]:
        raise InvalidThinkingInput(f"{logits.shape[0]} logits rows need as many rows, local_pos and input_ids "
                                   f"entries, got {len(rows)}, {len(local_pos)}, {len(input_ids)}")
    for slot in rows:
        if not _is_int(slot) or slot not in held:
            raise InvalidThinkingInput(f"slot {slot!r} holds no request")
    seen: set[int] = set()
    for i, (slot, place) in enumerate(zip(rows, local_pos)):
        if place == 0 and slot not in seen:
            seen.add(slot)
        elif place == 0 or i == 0 or rows[i - 1] != slot or local_pos[i - 1] != place - 1:
            raise InvalidThinkingInput("each request's rows must be adjacent, with local_pos 0, 1, 2, .. "
                                       f"(rows {rows}, local_pos {local_pos})")
    checked_ids(input_ids, vocab, "input ids", lowest=-1)
    return [int(r) for r in rows], [int(p) for p in local_pos], [int(t) for t in input_ids]
