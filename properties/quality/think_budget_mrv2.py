"""Deliberately wrong Model Runner V2 thinking-budget references: each must fail conformance.

There is no fast path to plant a bug in, so each is checked in place of the frozen reference:
`pytest properties/test_conformance.py -k "think_budget_mrv2 and cpu"
--reference think_budget_mrv2@0.28.0=properties.quality.think_budget_mrv2:NAME` under vLLM 0.33.0
(`tests/test_quality.py` runs them; vLLM's kernels interpreted).
"""

from __future__ import annotations

import dataclasses

from vllm_hotpaths.think_budget_mrv2.reference import SlotThinkBudget, forced_prefix, last_match


def _first_match(tokens: list[int], marker: tuple[int, ...]) -> int:
    n = len(marker)
    return next((i for i in range(len(tokens) - n + 1) if tuple(tokens[i:i + n]) == marker), -1)


class CountsFromFirstStart(SlotThinkBudget):
    """Counts the thinking from the first start marker, not the last (v1's anchor)."""

    def _forced_id(self, tokens, budget):
        c = self.config
        last = last_match(tokens, c.start_ids)
        if last < 0 or last <= last_match(tokens, c.natural_end_ids):
            return None
        if len(tokens) - (_first_match(tokens, c.start_ids) + len(c.start_ids)) < budget:
            return None
        return c.end_ids[forced_prefix(tokens, c.end_ids)]


class IgnoresDraftPrefix(SlotThinkBudget):
    """Decides every row of a request from its committed tokens alone (the drafts before a row
    neither count nor continue a marker)."""

    @staticmethod
    def sequence(request, input_ids, row, place):
        return list(request.tokens)


class RestartsForcedString(SlotThinkBudget):
    """Forces the first id of the forced end string every time, never continuing a written prefix."""

    def _forced_id(self, tokens, budget):
        token = super()._forced_id(tokens, budget)
        return None if token is None else self.config.end_ids[0]


class EndsOnForcedString(SlotThinkBudget):
    """Leaves thinking on the forced end string instead of the natural end marker."""

    def _forced_id(self, tokens, budget):
        c = self.config
        start = last_match(tokens, c.start_ids)
        if start < 0 or start <= last_match(tokens, c.end_ids):
            return None
        if len(tokens) - (start + len(c.start_ids)) < budget:
            return None
        return c.end_ids[forced_prefix(tokens, c.end_ids)]


class ForcesPastBudgetOnly(SlotThinkBudget):
    """Forces only once the thinking exceeds the budget (> instead of >=)."""

    def _forced_id(self, tokens, budget):
        return super()._forced_id(tokens, budget + 1)


class ResumedNotCommitted(SlotThinkBudget):
    """Forgets a resumed request's outputs from before its preemption."""

    def add_request(self, slot, prompt, resumed, budget):
        super().add_request(slot, prompt, [], budget)


class NaturalEndFromForcedString(SlotThinkBudget):
    """With no natural end marker known, enforces the budget with the forced end string standing
    in for it (upstream enforces nothing unless all three marker lists are known)."""

    def __init__(self, config, device="cpu"):
        if config.start_ids and config.end_ids and not config.natural_end_ids:
            config = dataclasses.replace(config, natural_end_ids=config.end_ids)
        super().__init__(config, device)


# name -> the devices it shows on (all: reference version 0.28.0, law conformance)
MUTANTS = {
    "CountsFromFirstStart": "cpu cuda",
    "IgnoresDraftPrefix": "cpu cuda",
    "RestartsForcedString": "cpu cuda",
    "EndsOnForcedString": "cpu cuda",
    "ForcesPastBudgetOnly": "cpu cuda",
    "ResumedNotCommitted": "cpu cuda",
    "NaturalEndFromForcedString": "cpu cuda",
}
