"""Frozen reference of Model Runner V2's thinking budget, vLLM 0.28.0 (checked against 0.33.0,
whose `ThinkingBudgetState` has the same semantics; 0.28.0 itself was not run).

Plain Python over each slot's committed tokens: upstream's marker cache (a backwards cold scan,
then incremental scans) only remembers where the last start and natural end markers are, so the
reference searches the whole sequence every step. Upstream's kernel writes one fp32 1e9 per
forced row and nothing else, so the logits' bits follow from the decision alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from vllm_hotpaths.think_budget_mrv2 import (FORCED_LOGIT, InvalidThinkingInput, ThinkSlotsConfig, check_step,
                                             checked_budget, checked_ids)


def last_match(tokens: list[int], marker: tuple[int, ...]) -> int:
    """Start of the last occurrence of `marker` in `tokens`, or -1."""
    n = len(marker)
    for start in range(len(tokens) - n, -1, -1):
        if tuple(tokens[start:start + n]) == marker:
            return start
    return -1


def forced_prefix(tokens: list[int], end: tuple[int, ...]) -> int:
    """Length of the longest proper prefix of `end` that `tokens` ends with (0: none)."""
    return max((k for k in range(1, min(len(end) - 1, len(tokens)) + 1) if tuple(tokens[-k:]) == end[:k]),
               default=0)


def forced_end_id(tokens: list[int], start_ids: tuple[int, ...], end_ids: tuple[int, ...],
                  natural_end_ids: tuple[int, ...], budget: int) -> int | None:
    """The end id a row with this sequence (committed tokens, then its draft prefix) is forced
    to, or None: inside a think block (the last start after the last natural end) whose thinking
    since the start has reached the budget. Model Runner V2's sampler applies the same decision
    (the `logits_copy` reference calls this)."""
    start = last_match(tokens, start_ids)
    if start < 0 or start <= last_match(tokens, natural_end_ids):
        return None
    if len(tokens) - (start + len(start_ids)) < budget:
        return None
    return end_ids[forced_prefix(tokens, end_ids)]


def forced_id(config: ThinkSlotsConfig, tokens: list[int], budget: int) -> int | None:
    return forced_end_id(tokens, config.start_ids, config.end_ids, config.natural_end_ids, budget)


@dataclass
class _Request:
    tokens: list[int]  # committed: prompt, resumed outputs, then every committed token
    budget: int | None


class SlotThinkBudget:
    """vLLM 0.28.0-0.33.0 Model Runner V2 thinking budget (the contract: `think_budget_mrv2`)."""

    def __init__(self, config: ThinkSlotsConfig, device="cpu") -> None:
        config.validate()
        self.config = ThinkSlotsConfig(*(tuple(int(t) for t in getattr(config, f)) for f in
                                         ("start_ids", "end_ids", "natural_end_ids")),
                                       config.vocab_size, config.max_num_reqs, config.max_model_len)
        self.device = torch.device(device)
        self.slots: dict[int, _Request] = {}

    # -- the request table ------------------------------------------------------------------
    def add_request(self, slot: int, prompt, resumed, budget) -> None:
        config = self.config
        if isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot < config.max_num_reqs:
            raise InvalidThinkingInput(f"slot {slot!r} is outside the table [0, {config.max_num_reqs})")
        if slot in self.slots:
            raise InvalidThinkingInput(f"slot {slot} is in use")
        budget = checked_budget(budget)
        prompt = checked_ids(prompt, config.vocab_size, "prompt")
        resumed = checked_ids(resumed, config.vocab_size, "resumed outputs")
        if not prompt:
            raise InvalidThinkingInput("a request needs a prompt of at least one token")
        if len(prompt) + len(resumed) > config.max_model_len:
            raise InvalidThinkingInput(f"{len(prompt) + len(resumed)} tokens exceed max_model_len "
                                       f"{config.max_model_len}")
        self.slots[slot] = _Request(prompt + resumed, budget)

    def remove_request(self, slot: int) -> None:
        if self.slots.pop(slot, None) is None:
            raise InvalidThinkingInput(f"slot {slot!r} holds no request")

    def commit(self, slots, sampled) -> None:
        slots, sampled = list(slots), [list(t) for t in sampled]
        if len(slots) != len(sampled):
            raise InvalidThinkingInput(f"{len(slots)} slots but {len(sampled)} lists of sampled tokens")
        if len(set(slots)) != len(slots):
            raise InvalidThinkingInput(f"a slot appears twice in one step: {slots}")
        for slot, tokens in zip(slots, sampled):
            request = self.slots.get(slot)
            if request is None:
                raise InvalidThinkingInput(f"slot {slot!r} holds no request")
            checked_ids(tokens, self.config.vocab_size, f"tokens sampled for slot {slot}")
            if len(request.tokens) + len(tokens) > self.config.max_model_len:
                raise InvalidThinkingInput(f"slot {slot} would pass max_model_len {self.config.max_model_len}")
        for slot, tokens in zip(slots, sampled):
            self.slots[slot].tokens.extend(tokens)

    # -- the sampler step ---------------------------------------------------------------------
    def apply(self, logits: torch.Tensor, rows, local_pos, input_ids) -> torch.Tensor:
        rows, local_pos, input_ids = self.check(logits, rows, local_pos, input_ids)
        if not self.config.enabled:
            return logits
        forced = []
        for i, slot in enumerate(rows):
            request = self.slots[slot]
            if request.budget is None:
                continue
            token = self._forced_id(self.sequence(request, input_ids, i, local_pos[i]), request.budget)
            if token is not None:
                forced.append((i, token))
        for i, token in forced:
            logits[i, token] = FORCED_LOGIT
        return logits

    def _forced_id(self, tokens: list[int], budget: int) -> int | None:
        return forced_id(self.config, tokens, budget)

    def check(self, logits, rows, local_pos, input_ids):
        """The step's rows, local positions and input ids as lists of ints, or InvalidThinkingInput."""
        return check_step(self.config, self.slots, self.device, logits, rows, local_pos, input_ids)

    @staticmethod
    def sequence(request: _Request, input_ids: list[int], row: int, place: int) -> list[int]:
        """What row `row` sees: the committed tokens, then the drafts fed at its request's rows
        1..place (-1 placeholders included: they match no marker id)."""
        return request.tokens + input_ids[row - place + 1:row + 1]
