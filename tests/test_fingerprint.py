"""Fingerprints of the vLLM code a hot path runs: what counts as the same code and what not, and
the tracer that finds the functions."""

import textwrap
from pathlib import Path

import pytest

from vllm_hotpaths.testing import fingerprint

OPS = '''
"""Penalties."""
from vllm.consts import SCALE, Params

LIMIT = 4

def apply(x):
    """Scale x."""
    return helper(x) * SCALE + LIMIT

def helper(x):
    return x + 1

def unused(x):
    return x - 1
'''
CONSTS = '''
from dataclasses import dataclass
SCALE = 2.0

@dataclass
class Params:
    a: int = 0

TABLE = {"A": lambda: 1, "B": lambda: 2}
'''
TRACED = [("ops.py", "apply"), ("ops.py", "helper")]


def tree(tmp_path: Path, name: str, ops: str = OPS, consts: str = CONSTS) -> Path:
    root = tmp_path / name / "vllm"
    root.mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "ops.py").write_text(textwrap.dedent(ops))
    (root / "consts.py").write_text(textwrap.dedent(consts))
    return root


def same(tmp_path, ops=OPS, consts=CONSTS, traced=TRACED) -> bool:
    n = len(list(tmp_path.iterdir()))
    return (fingerprint.fingerprint(tree(tmp_path, f"{n}a"), traced)
            == fingerprint.fingerprint(tree(tmp_path, f"{n}b", ops, consts), traced))


def test_formatting_comments_docstrings_and_untraced_code_do_not_count(tmp_path):
    edited = OPS.replace('"""Scale x."""', '"""Scale x, then add the limit."""').replace(
        "return x + 1", "# one more\n    return (x\n            + 1)").replace("return x - 1", "return x - 2")
    assert same(tmp_path, ops="\n\n" + edited)


@pytest.mark.parametrize("ops, consts", [
    (OPS.replace("return x + 1", "return x + 2"), CONSTS),  # a traced function
    (OPS.replace("LIMIT = 4", "LIMIT = 5"), CONSTS),  # a global it reads
    (OPS, CONSTS.replace("SCALE = 2.0", "SCALE = 3.0")),  # a constant imported from another module
    (OPS.replace("def helper", "def helper2"), CONSTS),  # a traced function gone
])
def test_a_change_in_what_the_traced_functions_run_or_read_counts(tmp_path, ops, consts):
    assert not same(tmp_path, ops, consts)


def test_a_class_read_by_name_counts_with_its_fields(tmp_path):
    reads_params = OPS.replace("return helper(x) * SCALE + LIMIT", "return Params(helper(x)).a * SCALE")
    assert not same(tmp_path, reads_params, CONSTS.replace("a: int = 0", "a: int = 1"),
                    traced=[("ops.py", "apply")])


def test_a_module_level_lambda_is_known_by_its_syntax(tmp_path):
    import ast

    lam = next(n for n in ast.walk(ast.parse(CONSTS)) if isinstance(n, ast.Lambda))
    traced = [("consts.py", f"<lambda>@{fingerprint._digest([ast.dump(lam)])}")]
    assert same(tmp_path, traced=traced)
    assert not same(tmp_path, consts=CONSTS.replace('"A": lambda: 1', '"A": lambda: 3'), traced=traced)


def test_the_tracer_notes_the_vllm_functions_a_hot_path_runs_and_not_its_imports(run_cli, tmp_path):
    pytest.importorskip("vllm")
    # A fresh Python: vLLM's import-time work happens in the traced run, as in the gate's.
    result = run_cli("-m", "pytest", "properties/test_conformance.py", "-q", "-p", "no:cacheprovider",
                     "-m", "penalties", "-k", "cpu", "--hypothesis-profile", "smoke",
                     "-p", "vllm_hotpaths.testing.fingerprint", "--trace-vllm", str(tmp_path), fresh=True)
    assert result.returncode == 0, result.stdout[-2000:]
    traced = fingerprint.traced(tmp_path)
    assert ("v1/sample/ops/penalties.py", "apply_all_penalties") in traced["penalties"]
    assert ("model_executor/layers/utils.py", "apply_penalties") in traced["penalties"]
    # vLLM's import-time work (logging set-up, registries) is not what the hot path runs
    assert not [f for f, _ in traced["penalties"] if f in ("logger.py", "envs.py")], traced["penalties"]
