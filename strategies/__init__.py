"""Hypothesis generators of every hot path's cases (the cases themselves, plain data, are defined
with their drivers in `vllm_hotpaths.testing.cases`). Import from here: `from strategies import
penalties_programs`. A hot path's generators are the module of its name (`strategies.penalties`);
`checks_for(name)` makes its checks drawing from them."""

import importlib

from strategies.cached_request_data import bad_steps, scheduled_steps
from strategies.logits_copy import bad_input_cases, boundary_cases, logits_programs, pair_label, pair_programs, request_params
from strategies.penalties_mrv2 import commits, penalty_triples, slot_programs
from strategies.penalties import (decode_runs, id_runs, invalid_id_cases, logit_values, penalties_programs,
                                  poisoned_programs, repair_cases, request_fields, token_ids, transition_programs)
from strategies.recovered_tokens import classify, corrupted_recovery_cases, recovery_cases, seeded_recovery_cases
from strategies.rejection_mrv2 import near_tie_edits, rejection_cases
from strategies.sampler_mrv2 import sampler_bad_inputs, sampler_pair_programs, sampler_programs
from strategies.swap_states import add_ops, programs_header
from strategies.think_budget_mrv2 import marker_triples, think_slot_programs
from strategies.think_budget import (ThinkDraws, bad_configs, budgets, invalid_budgets, long_outputs, prompts,
                                     small_counts, think_configs, token_runs, tokens)


def checks_for(name: str):
    """The `Checks` of the registered hot path `name`, drawing from `strategies.<name>`."""
    from vllm_hotpaths import registry

    return registry.get(name).make_checks(importlib.import_module(f"strategies.{name}"))


__all__ = [
    "ThinkDraws", "add_ops", "bad_steps", "scheduled_steps", "bad_configs", "bad_input_cases", "boundary_cases", "budgets", "classify",
    "corrupted_recovery_cases", "decode_runs", "id_runs", "invalid_budgets", "invalid_id_cases", "logit_values",
    "logits_programs", "long_outputs", "penalties_programs", "poisoned_programs", "programs_header", "prompts",
    "penalty_triples", "commits", "slot_programs", "checks_for",
    "marker_triples", "near_tie_edits", "pair_label", "pair_programs", "recovery_cases", "rejection_cases", "repair_cases", "request_fields",
    "request_params", "sampler_bad_inputs", "sampler_pair_programs", "sampler_programs", "seeded_recovery_cases", "small_counts", "think_configs",
    "think_slot_programs", "token_ids", "token_runs", "tokens", "transition_programs",
]
