"""Fingerprints of the vLLM code a hot path runs: what counts as the same code and what not, and
the tracer that finds the functions."""

import os
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


# -- the tracer, in this process, over a package standing for vLLM -------------------------------

TRACED_OPS = '''
def from_body(x):
    return None

def from_draw(x):
    return x + 1  # (Hypothesis skips mapping a function that returns its argument)

def from_a_later_draw(x):
    return x + 1

def at_import():
    return 1

def rare(x):
    return x + 1
'''
IMPORTED_LATE = '''
from {package}.ops import at_import

VALUE = at_import()
'''


KERNELS = '''
import torch
import triton
import triton.language as tl

def helper_of_constexpr(n):
    return n

@triton.constexpr_function
def block(n):
    return helper_of_constexpr(n)

@triton.jit
def add_one(x):
    return x + 1

@triton.jit
def larger(a, b):
    return tl.maximum(a, b)

@triton.jit
def unused(x):
    return x

@triton.jit
def kernel(out_ptr, in_ptr, N: tl.constexpr):
    offs = tl.arange(0, block(N))
    y = add_one(tl.load(in_ptr + offs))
    tl.store(out_ptr + offs, y + tl.reduce(y, 0, larger))

def launch(x, programs=1):
    out = torch.empty_like(x)
    kernel[(programs,)](out, x, N=x.numel())
    return after_launch(out)

def after_launch(out):
    return out
'''


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    """(a Tracer whose "vLLM" is a fresh package, that package's `ops` module)."""
    import importlib

    package = f"standin_{abs(hash(tmp_path)) % 10**9}"
    root = tmp_path / package
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "ops.py").write_text(TRACED_OPS)
    (root / "late.py").write_text(IMPORTED_LATE.format(package=package))
    (root / "kernels.py").write_text(KERNELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return fingerprint.Tracer(tmp_path / "notes", vllm_dir=str(root) + os.sep), importlib.import_module(f"{package}.ops")


def run_given(strategy, body, examples=30):
    from hypothesis import HealthCheck, given, settings

    settings(max_examples=examples, database=None, derandomize=True,
             suppress_health_check=list(HealthCheck))(given(strategy)(body))()


def test_the_tracer_notes_calls_from_a_test_body_and_from_draws(stand_in):
    from hypothesis import strategies as st

    tracer, ops = stand_in
    with tracer.tracing("hp"):
        run_given(st.integers(0, 3).map(ops.from_draw), ops.from_body)
    assert {("ops.py", "from_body"), ("ops.py", "from_draw")} <= tracer.found["hp"]
    assert ("ops.py", "rare") not in tracer.found["hp"]
    assert tracer.draws_reach_vllm
    # once a draw has reached "vLLM", every later draw is traced, not only a test's first example's
    with tracer.tracing("hp2"):
        run_given(st.integers(0, 3).map(lambda x: ops.from_a_later_draw(x) if x == 3 else x), lambda x: None)
    assert tracer.found["hp2"] == {("ops.py", "from_a_later_draw")}


def test_a_draw_is_traced_in_a_tests_first_example(stand_in):
    from hypothesis import strategies as st

    tracer, ops = stand_in
    with tracer.tracing("hp"):
        run_given(st.just(1).map(ops.rare), lambda x: None)
    assert tracer.found["hp"] == {("ops.py", "rare")} and tracer.draws_reach_vllm


def test_a_function_called_on_import_is_noted_when_called_again(stand_in):
    import importlib

    tracer, ops = stand_in
    with tracer.tracing("hp"):
        importlib.import_module(ops.__name__.replace(".ops", ".late"))
        assert tracer.found["hp"] == set()
        ops.at_import()
    assert tracer.found["hp"] == {("ops.py", "at_import")}


def test_hypothesis_own_work_and_later_draws_are_left_untraced(stand_in, monkeypatch):
    """What makes tracing cheap: the trace function never sees Hypothesis' engine or its choices,
    nor a draw after a test's first example while no draw has reached vLLM."""
    from collections import Counter

    from hypothesis import strategies as st

    tracer, ops = stand_in
    seen, make_note = Counter(), tracer._note_into

    def counting(found):
        note = make_note(found)

        def counted(frame, event, arg):
            seen[frame.f_code] += 1
            return note(frame, event, arg)
        return counted

    monkeypatch.setattr(tracer, "_note_into", counting)
    calls = []
    with tracer.tracing("hp"):
        run_given(st.lists(st.integers(0, 9)).map(lambda xs: calls.append(xs) or xs), ops.from_body)
    mapped = [code for code in seen if code.co_name == "<lambda>" and code.co_filename == __file__]
    assert len(calls) > 10 and [seen[code] for code in mapped] == [1]
    assert seen[ops.from_body.__code__] == len(calls)
    internal = {code.co_filename.replace(os.sep, "/").rpartition("/conjecture/")[2] + ":" + code.co_qualname
                for code in seen if "/hypothesis/internal/conjecture/" in code.co_filename.replace(os.sep, "/")}
    assert not internal & {"engine.py:ConjectureRunner.test_function", "engine.py:ConjectureRunner.cached_test_function",
                           "engine.py:ConjectureRunner.generate_new_examples", "data.py:ConjectureData._draw",
                           "data.py:ConjectureData.start_span", "data.py:ConjectureData.stop_span"}, internal
    assert not [name for name in internal if name.startswith("providers.py") and ".draw_" in name], internal


@pytest.fixture
def interpreted_kernels(stand_in, monkeypatch):
    """(the stand-in's Tracer, its `kernels` module with Triton's interpreter running them)."""
    import importlib

    triton = pytest.importorskip("triton")
    monkeypatch.setattr(triton.knobs.runtime, "interpret", True)
    tracer, ops = stand_in
    return tracer, importlib.import_module(ops.__name__.replace(".ops", ".kernels"))


def test_a_kernel_launch_notes_what_full_tracing_notes_without_tracing_the_interpreter(interpreted_kernels, monkeypatch):
    """The kernel, its device function, its reduction's combine function and a constexpr function
    with what it calls, as tracing every call notes them; the interpreter's calls for each program
    unseen."""
    import torch
    from collections import Counter
    from contextlib import nullcontext

    tracer, kernels = interpreted_kernels
    x = torch.arange(4, dtype=torch.float32)
    assert torch.equal(kernels.launch(x), x + 1 + 4)  # (the kernel rewritten once, untraced)
    seen, make_note = Counter(), tracer._note_into

    def counting(found):
        note = make_note(found)

        def counted(frame, event, arg):
            if frame.f_code.co_filename.replace(os.sep, "/").endswith("triton/runtime/interpreter.py"):
                seen[programs] += 1
            return note(frame, event, arg)
        counted.started = note.started
        return counted

    monkeypatch.setattr(tracer, "_note_into", counting)
    for programs in (1, 8):
        with tracer.tracing(f"launch of {programs}"):
            kernels.launch(x, programs)
    assert 0 < seen[1] == seen[8], seen  # the launch's set-up only
    monkeypatch.setattr(fingerprint, "_interpreter_untraced", nullcontext)
    with tracer.tracing("every call"):
        kernels.launch(x, 8)
    expected = {("kernels.py", name) for name in ("launch", "kernel", "add_one", "larger", "block", "helper_of_constexpr",
                                               "after_launch")}
    assert tracer.found["every call"] == expected
    assert tracer.found["launch of 1"] == tracer.found["launch of 8"] == expected
