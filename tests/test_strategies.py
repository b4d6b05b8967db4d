"""`strategies` is the public face of the generators: every generator function a hot path's module
defines is exported from `strategies/__init__.py`, and the modules hold no case schemas (those
live with their drivers in `vllm_hotpaths.testing.cases`)."""

import dataclasses
import inspect

import strategies
from strategies import logits_copy, penalties, recovered_tokens, swap_states, think_budget


def test_every_generator_is_exported():
    for module in (logits_copy, penalties, recovered_tokens, swap_states, think_budget):
        defined = [name for name, obj in vars(module).items()
                   if not name.startswith("_") and inspect.isfunction(obj) and obj.__module__ == module.__name__]
        missing = [name for name in defined if name not in strategies.__all__]
        assert not missing, f"{module.__name__} defines {missing}, not exported from strategies"
    assert all(hasattr(strategies, name) for name in strategies.__all__)


def test_no_case_schema_is_defined_in_strategies():
    for module in (logits_copy, penalties, recovered_tokens, swap_states, think_budget):
        schemas = [name for name, obj in vars(module).items() if inspect.isclass(obj)
                   and dataclasses.is_dataclass(obj) and obj.__module__ == module.__name__]
        assert not schemas, f"{module.__name__} defines case schemas {schemas}"
