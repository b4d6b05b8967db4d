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


def test_the_package_never_imports_the_generators():
    """`strategies` imports the cases it draws; the package (`src/`) never imports `strategies`:
    whoever makes a hot path's checks hands them its generators (`strategies.checks_for`)."""
    import ast
    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "src"
    found = []
    for path in sorted(src.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            found += [f"{path.relative_to(src)}:{node.lineno}" for n in names if n.split(".")[0] == "strategies"]
    assert not found, f"the package imports strategies at {found}"


def test_checks_draw_from_the_module_of_their_hot_path():
    import pytest

    from vllm_hotpaths import registry

    for name, hotpath in registry.HOTPATHS.items():
        if hotpath.checks:
            assert strategies.checks_for(name).draws is getattr(strategies, name)
    bare = registry.get("sampler_mrv2").make_checks()
    with pytest.raises(TypeError, match=r"sampler_mrv2's checks were made without its generators: make them with "
                                        r"strategies.checks_for\('sampler_mrv2'\)"):
        bare.cases()
