"""Hypothesis generators of every hot path's cases (the cases themselves, plain data, are defined
with their drivers in `vllm_hotpaths.testing.cases`). Import from here: `from strategies import
penalties_programs`."""

from strategies.logits_copy import bad_input_cases, boundary_cases, logits_programs
from strategies.penalties import (invalid_id_cases, logit_values, penalties_programs, poisoned_programs,
                                  repair_cases, token_ids)
from strategies.recovered_tokens import corrupted_recovery_cases, recovery_cases, seeded_recovery_cases
from strategies.swap_states import add_ops, programs_header
from strategies.think_budget import bad_configs, small_counts, think_configs

__all__ = [
    "add_ops", "bad_configs", "bad_input_cases", "boundary_cases", "corrupted_recovery_cases", "invalid_id_cases", "logit_values", "logits_programs",
    "penalties_programs", "poisoned_programs", "programs_header", "recovery_cases",
    "repair_cases", "seeded_recovery_cases", "small_counts", "think_configs", "token_ids",
]
