"""What a hot path's checks run of vLLM, and whether another release has the same code there.

Tracing (`--trace-vllm DIR`, a pytest plugin: `-p vllm_hotpaths.testing.fingerprint`): while a
property of a hot path that runs vLLM's code runs (marked `needs_vllm` or `needs_vllm_ops`; the
others run without vLLM and are not traced: tracing every property of penalties, swap_states,
think_budget and logits_copy noted the same functions, in 186 s instead of 113 s), every vLLM
function that starts is noted by file and qualified name (`v1/sample/ops/penalties.py`,
`apply_all_penalties`); Triton kernels run interpreted on CPU, so they are noted too. Each process
writes its notes to DIR; `traced(DIR)` merges them.

The trace function runs on every Python call, so what runs no code of the suite's or vLLM's runs
without it: Hypothesis' engine between examples and the choices under each draw. So do the draws
themselves (strategies build data; none calls vLLM), except in each test's first example: a draw
that reaches vLLM there is noted, and every later draw is traced. A strategy that reached vLLM only
after its test's first example, in a process where no draw had before, would go unnoted. So do the
programs of an interpreted kernel launch (Triton's interpreter runs each operation of each program
as calls of its own); what of vLLM's starts in them is noted through the interpreter's own entry
points: the kernel, the device functions it calls, a reduction's or scan's combine function, and a
constexpr function, which runs traced.

Calls made while a module is imported are left out: they run once, whatever the inputs, and what
they bind is covered where a noted function reads it.

Fingerprint: the source of the noted functions in a release's files, and what they depend on
there: the non-method statements of their classes, and the module-level statements that bind the
global names they read (followed into the vLLM module a name is imported from; a class read by
name contributes its non-method statements, such as a dataclass's fields). Compared as syntax trees without docstrings, so formatting, comments and
line numbers do not count. The same inputs through the same code give the same results, so a
release whose fingerprint over another release's traced functions equals that release's shares its
verdict (the matrix says so in the cell); any difference in that code, or a function missing,
gives another fingerprint and a run of its own.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import sys
import threading
from contextlib import contextmanager
from functools import lru_cache, wraps
from pathlib import Path

import pytest

Traced = dict[str, list[tuple[str, str]]]  # hot path -> sorted (file under vllm/, qualified name)
_CO_NEWLOCALS = 0x0002  # a function's frame (not a module's or a class body's)


# -- tracing ---------------------------------------------------------------------------------

def pytest_addoption(parser):
    parser.getgroup("vllm-hotpaths").addoption(
        "--trace-vllm", metavar="DIR", help="note the vLLM functions each hot path's properties run, into DIR")


class Tracer:
    def __init__(self, folder: Path, vllm_dir: str | None = None) -> None:
        self.folder = folder
        self.found: dict[str, set[tuple[str, str]]] = {}
        self.keys: dict[object, tuple[str, str] | None] = {}  # code -> its key, None if not vLLM's
        self.draws_reach_vllm = False  # a strategy's draw started a vLLM function
        self.vllm_dir = vllm_dir

    def _note_into(self, found: set[tuple[str, str]]):
        """A trace function adding to `found` each vLLM function that starts. It runs on every call
        the test makes, so a code it has nothing more to learn from is answered by one lookup."""
        keys, vllm_dir, quiet = self.keys, self.vllm_dir, set()

        def note(frame, event, arg):
            code = frame.f_code
            if code not in quiet:
                started(code, frame)
            return None  # no line events

        def started(code, frame):
            key = keys.get(code, _UNSEEN)
            if key is _UNSEEN:
                name = code.co_filename
                key = keys[code] = (_key(name, vllm_dir, code)
                                    if name.startswith(vllm_dir) and code.co_flags & _CO_NEWLOCALS else None)
            if key is None or key in found:
                quiet.add(code)
            elif not _importing(frame):  # called again later, it is noted then
                found.add(key)
                quiet.add(code)

        note.started = started  # for a function that starts while no trace function runs
        return note

    @contextmanager
    def tracing(self, hotpath: str):
        """Note into `hotpath` the vLLM functions that start in this block, in any thread, Hypothesis'
        own work apart (`_hypothesis_untraced`)."""
        found, reached = self.found.setdefault(hotpath, set()), set()
        note, from_draws = self._note_into(found), self._note_into(reached)
        first_example = [True]

        def draw_trace():
            return from_draws if first_example[0] or reached or self.draws_reach_vllm else None

        with _hypothesis_untraced(note, draw_trace, first_example), _interpreter_untraced():
            sys.settrace(note)
            threading.settrace(note)
            try:
                yield
            finally:
                sys.settrace(None)
                threading.settrace(None)
                found |= reached
                self.draws_reach_vllm |= bool(reached)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        marker = item.get_closest_marker("hotpath")
        runs_vllm = item.get_closest_marker("needs_vllm") or item.get_closest_marker("needs_vllm_ops")
        if marker is None or not runs_vllm or self._vllm() is None:
            return (yield)
        with self.tracing(marker.args[0]):
            return (yield)

    def _vllm(self) -> str | None:
        """The installed vLLM package's folder (found without importing it), or None."""
        if self.vllm_dir is None:
            import importlib.util

            spec = importlib.util.find_spec("vllm")
            self.vllm_dir = str(Path(spec.origin).parent) + os.sep if spec and spec.origin else ""
        return self.vllm_dir or None

    def pytest_sessionfinish(self, session):
        worker = getattr(session.config, "workerinput", {}).get("workerid", "main")
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / f"traced-{worker}-{os.getpid()}.json").write_text(
            json.dumps({h: sorted(found) for h, found in self.found.items()}, indent=0) + "\n")


_UNSEEN = object()

# Hypothesis' own work, which runs no code of the suite's or vLLM's: its engine between examples,
# and the choices and spans under every draw. More than half of a traced row's calls were there
# (61% of swap_states' InputBatch row), and the tracer costs per call. A test's own code runs in
# `execute_once`, inside the engine.
_ENGINE = ("hypothesis.internal.conjecture.engine", "ConjectureRunner", "run")
_CHOICES = [("hypothesis.internal.conjecture.data", "ConjectureData", name)
            for name in ("_draw", "start_span", "stop_span")]
_EXAMPLE = ("hypothesis.core", "StateForActualGivenExecution", "execute_once")
# A draw: a strategy building a test's data from Hypothesis, numpy, torch and the suite's cases;
# none calls vLLM. Untraced, except in each test's first example: a draw that reaches vLLM there
# is noted, and from then on every draw is traced.
_DRAW = ("hypothesis.internal.conjecture.data", "ConjectureData", "draw")


@contextmanager
def _hypothesis_untraced(note, draw_trace, first_example: list[bool]):
    """Hypothesis' engine and choices run without a trace function, each example with `note`, each
    draw with `draw_trace()`. Where Hypothesis lacks one of these methods nothing is changed:
    everything is traced, only slower."""
    def example_ran():
        first_example[0] = False

    wrappers = {_ENGINE: lambda f: _with_trace(f, lambda: None),
                **{where: lambda f: _with_trace(f, lambda: None) for where in _CHOICES},
                _EXAMPLE: lambda f: _with_trace(f, lambda: note, after=example_ran),
                _DRAW: lambda f: _with_trace(f, draw_trace)}
    with _patched(wrappers):
        yield


# Triton's interpreter, which runs a kernel's every operation for every program as Python calls of
# its own: 91% of a traced logits_copy conformance row's time was there. A launch runs its programs
# untraced (from the first program's `set_grid_idx`: its grid function and hooks stay traced); the
# vLLM functions that run in them are noted as they start: the kernel, the device functions it
# calls, the combine function of a reduction or scan, and a constexpr function, which runs traced
# (it is plain Python and may call anything).
_LAUNCH = ("triton.runtime.interpreter", "GridExecutor", "__call__")
_PROGRAM = ("triton.runtime.interpreter", "InterpreterBuilder", "set_grid_idx")
_DEVICE_CALL = ("triton.runtime.interpreter", "InterpretedFunction", "__call__")
_COMBINE = ("triton.runtime.interpreter", "ReduceScanOpInterface", "apply")
_CONSTEXPR_CALL = ("triton.runtime.jit", "ConstexprFunction", "__call__")


@contextmanager
def _interpreter_untraced():
    """A kernel launched under a trace function runs its programs without one; the vLLM functions
    that start in them are noted through that trace function's `started`."""
    launches = []  # the trace function of each launch under way, innermost last

    def launch(original):
        def run(self, *args, **kwargs):
            trace = sys.gettrace()
            if getattr(trace, "started", None) is None:
                return original(self, *args, **kwargs)
            trace.started(self.fn.__code__, sys._getframe())
            launches.append(trace)
            try:
                return original(self, *args, **kwargs)  # its grid and hooks traced, its programs not
            finally:
                launches.pop()
                sys.settrace(trace)
        return run

    def program(original):
        def run(self, *args, **kwargs):
            if launches:
                sys.settrace(None)
            return original(self, *args, **kwargs)
        return run

    def noting(code_of, original):
        def run(self, *args, **kwargs):
            code = code_of(self) if launches else None
            if code is not None:
                launches[-1].started(code, sys._getframe())
            return original(self, *args, **kwargs)
        return run

    def traced(original):
        def run(self, *args, **kwargs):
            if not launches:
                return original(self, *args, **kwargs)
            before = sys.gettrace()
            sys.settrace(launches[-1])
            try:
                return original(self, *args, **kwargs)
            finally:
                sys.settrace(before)
        return run

    wrappers = {_LAUNCH: launch, _PROGRAM: program,
                _DEVICE_CALL: lambda original: noting(lambda f: f.rewrite().__code__, original),
                _COMBINE: lambda original: noting(lambda op: getattr(getattr(op.combine_fn, "fn", None), "__code__", None),
                                                  original),
                _CONSTEXPR_CALL: traced}
    with _patched(wrappers):
        yield


@contextmanager
def _patched(wrappers: dict):
    """Each (module, class, method) replaced by `wrapper(method)` in this block; where one is
    missing, none is."""
    import importlib

    try:
        originals = [(where, importlib.import_module(where[0]).__dict__[where[1]].__dict__[where[2]])
                     for where in wrappers]
    except (ImportError, KeyError):
        yield
        return
    for (module, cls, name), function in originals:
        setattr(importlib.import_module(module).__dict__[cls], name, wraps(function)(wrappers[module, cls, name](function)))
    try:
        yield
    finally:
        for (module, cls, name), function in originals:
            setattr(importlib.import_module(module).__dict__[cls], name, function)


def _with_trace(function, trace, after=None):
    """`function` run with `trace()` as the trace function (None: untraced), then `after()`."""
    @wraps(function)
    def run(*args, **kwargs):
        before, wanted = sys.gettrace(), trace()
        try:
            if before is wanted:
                return function(*args, **kwargs)
            sys.settrace(wanted)
            try:
                return function(*args, **kwargs)
            finally:
                sys.settrace(before)
        finally:
            if after is not None:
                after()

    return run


def _importing(frame) -> bool:
    """Whether this call runs a module's import (its code runs once, whatever the inputs)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _key(filename: str, vllm_dir: str, code) -> tuple[str, str]:
    """(file under vllm/, qualified name); a lambda at module level (an entry of envs.py's table)
    is named by its syntax tree, `<lambda>@digest`, since it has no name of its own."""
    relpath = os.path.relpath(filename, vllm_dir)
    if code.co_qualname == "<lambda>":
        tree = _module(Path(filename))
        for node in ast.walk(tree) if tree else ():
            if isinstance(node, ast.Lambda) and node.lineno == code.co_firstlineno:
                return relpath, f"<lambda>@{_digest([ast.dump(node)])}"
    return relpath, code.co_qualname


def pytest_configure(config):
    folder = config.getoption("trace_vllm", None)
    if folder and not config.pluginmanager.has_plugin("trace-vllm"):
        config.pluginmanager.register(Tracer(Path(folder)), "trace-vllm")


def traced(folder: Path) -> Traced:
    """The noted functions of every process that wrote into `folder`, merged per hot path."""
    merged: dict[str, set[tuple[str, str]]] = {}
    for path in sorted(folder.glob("traced-*.json")):
        for hotpath, found in json.loads(path.read_text()).items():
            merged.setdefault(hotpath, set()).update((f, q) for f, q in found)
    return {h: sorted(found) for h, found in sorted(merged.items())}


# -- fingerprints ----------------------------------------------------------------------------

def _without_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        return body[1:]
    return body


def _dump(node: ast.AST) -> str:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        node = type(node)(**{**{f: getattr(node, f) for f in node._fields}, "body": _without_docstring(node.body)})
    return ast.dump(node)


_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


@lru_cache(maxsize=None)
def _module(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text())
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None


def _defs(body: list[ast.stmt], name: str) -> list[ast.AST]:
    """Every definition of `name` in a block, including those under if/try at that level."""
    found = []
    for stmt in body:
        if isinstance(stmt, _DEFS) and stmt.name == name:
            found.append(stmt)
        elif isinstance(stmt, (ast.If, ast.Try)):
            for block in (stmt.body, stmt.orelse, getattr(stmt, "finalbody", []),
                          *[h.body for h in getattr(stmt, "handlers", [])]):
                found += _defs(block, name)
    return found


def _lookup(tree: ast.Module, qualname: str) -> tuple[list[ast.AST], list[ast.ClassDef]]:
    """(definitions, enclosing classes) of a qualified name; a name inside a function (`<locals>`,
    `<lambda>`, a comprehension) stands for the function that holds it."""
    parts = []
    for part in qualname.split("."):
        if part.startswith("<"):
            break
        parts.append(part)
    nodes: list[ast.AST] = [tree]
    classes: list[ast.ClassDef] = []
    for part in parts:
        found = [d for node in nodes for d in _defs(node.body, part)]
        if not found:
            return [], classes
        classes += [n for n in nodes if isinstance(n, ast.ClassDef)]
        nodes = found
    return ([] if nodes == [tree] else nodes), classes


def _class_statements(node: ast.ClassDef) -> list[str]:
    head = ast.dump(ast.ClassDef(name=node.name, bases=node.bases, keywords=node.keywords, body=[],
                                 decorator_list=node.decorator_list))
    return [head] + [_dump(s) for s in _without_docstring(node.body) if not isinstance(s, _DEFS)]


def _digest(texts: list[str]) -> str:
    return hashlib.sha256("\n".join(texts).encode()).hexdigest()[:16]


def _read_names(nodes: list[ast.AST]) -> set[str]:
    """Names a definition reads that it does not bind itself: globals of its module."""
    read, bound = set(), set()
    for node in nodes:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name):
                (read if isinstance(sub.ctx, ast.Load) else bound).add(sub.id)
            elif isinstance(sub, ast.arg):
                bound.add(sub.arg)
    return read - bound

def _module_file(vllm_root: Path, module: str) -> Path | None:
    if module != "vllm" and not module.startswith("vllm."):
        return None
    base = vllm_root.parent / Path(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def _binding(vllm_root: Path, module: str, name: str, depth: int = 3) -> list[str]:
    """What binds global `name` in vLLM module `module`: its assignment (with the if/try around
    it), its class's non-method statements, or, for a name imported from another vLLM module, the
    same there. Functions are left out: a function that runs is traced itself."""
    path = _module_file(vllm_root, module)
    tree = _module(path) if path else None
    if tree is None:
        return []
    found = []
    for stmt in tree.body:
        if isinstance(stmt, ast.ClassDef) and stmt.name == name:
            found += _class_statements(stmt)
        elif isinstance(stmt, ast.ImportFrom):
            for alias in stmt.names:
                if (alias.asname or alias.name) == name and depth > 0:
                    found += _binding(vllm_root, _absolute(module, stmt, path), alias.name, depth - 1)
        elif not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Import)) and any(
                isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
                for n in ast.walk(stmt)):
            found.append(_dump(stmt))
    return found


def _absolute(module: str, stmt: ast.ImportFrom, path: Path) -> str:
    if not stmt.level:
        return stmt.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    package = package[: len(package) - (stmt.level - 1)]
    return ".".join(package + ([stmt.module] if stmt.module else []))


def parts(vllm_root: Path, functions: list[tuple[str, str]]) -> dict[str, str]:
    """Each traced function's digest in this release (its definition, its classes' non-method
    statements, the module-level bindings of the globals it reads), or "missing"."""
    out: dict[str, str] = {}
    for relpath, qualname in functions:
        path = vllm_root / relpath
        tree = _module(path)
        key = f"{relpath}:{qualname}"
        if tree is None:
            out[key] = "missing"
            continue
        if qualname.startswith("<lambda>@"):
            lambdas = {_digest([ast.dump(n)]) for n in ast.walk(tree) if isinstance(n, ast.Lambda)}
            out[key] = "present" if qualname.partition("@")[2] in lambdas else "missing"
            continue
        nodes, classes = _lookup(tree, qualname)
        if not nodes:  # other code at module level: the whole module stands for it
            out[key] = _digest([_dump(s) for s in tree.body]) if qualname.startswith("<") else "missing"
            continue
        module = "vllm." + relpath.removesuffix(".py").replace(os.sep, ".").removesuffix(".__init__")
        texts = [_dump(n) for n in nodes] + [t for c in classes for t in _class_statements(c)]
        for name in sorted(_read_names(nodes)):
            texts += [f"{name}: {t}" for t in _binding(vllm_root, module, name)]
        out[key] = _digest(texts)
    return out


def fingerprint(vllm_root: Path, functions: list[tuple[str, str]]) -> str:
    """One digest over `parts`: equal for two releases exactly when every part is equal."""
    return hashlib.sha256(json.dumps(parts(vllm_root, functions), sort_keys=True).encode()).hexdigest()[:12]


def vllm_root_of(python: str | Path) -> Path:
    """The folder of the `vllm` package that an environment's python imports."""
    import subprocess

    code = "import importlib.util, os; print(os.path.dirname(importlib.util.find_spec('vllm').origin))"
    return Path(subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip())
