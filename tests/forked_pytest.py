"""`python -m MODULE ARGS` (pytest, this project's CLI) in a process forked from one that has
imported torch, Triton, NumPy, Hypothesis, pytest and vLLM's configuration already
(multiprocessing's forkserver, one per test process).

The quality set starts a fresh pytest for each planted bug (its own `--impl` or `--reference`, its
own environment), and the CLI's tests a gate or a pytest for each case: a run that imports nothing
else costs about 5 s on 2 cores, most of it those imports, and vLLM's another 3.5 s; there are
over a hundred runs. A fork of the server skips them.

What reads the environment at import time must read the run's: the server imports with the
environment of the process that started it, so a run whose environment differs from that one
(beyond the variables only the run's own modules read: `AFTER_FORK`) starts a fresh Python
instead. Of this project the server imports only `vllm_env` (tests/vllm_preload.py); this module
imports only the standard library at its top (the forked process imports it to find `_main`), and
vLLM's configuration in the starting process when it first starts the server.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path

PRELOAD = ["numpy", "torch", "triton", "triton.language", "hypothesis", "pytest", "_pytest.assertion.rewrite",
           "tests.vllm_preload"]
# Read only by the run's own imports (the suite's fixtures, its import path), after the fork.
# The plugin's variables are read when vLLM loads its plugins (`VLLM_PLUGINS`, through vLLM's envs
# module, which caches nothing until an engine has started) and when ours registers.
AFTER_FORK = ("PYTHONPATH", "VLLM_HOTPATHS_NO_REPLAY", "VLLM_HOTPATHS_REGRESSIONS", "VLLM_PLUGINS", "VLLM_HOTPATHS",
              "VLLM_HOTPATHS_VALIDATED")


def _imported_with(env) -> dict[str, str]:
    """The variables a module imported before the fork may have read."""
    return {k: v for k, v in env.items() if k not in AFTER_FORK and not k.startswith("PYTEST_")}


@cache
def _context():
    """The fork server's context and the environment it imports with (this process's, now, once
    vLLM's configuration is imported here too: importing it sets variables, and a process that
    imported it only after its first run would otherwise start every later run fresh)."""
    from tests.vllm_configuration import import_vllm_configuration

    import_vllm_configuration()
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context, _imported_with(os.environ)


def _main(module: str, args: list[str], env: dict[str, str], folder: str, paths: list[str], out: str,
          err: str, one_thread: bool) -> None:
    """The forked process: the run's environment, folder and import path, its output into files,
    then the module as `python -m` runs it (`module` "-c": the code `args[0]`, as `python -c` runs
    it), its exit handlers, and its exit code as the process's. `one_thread`: torch computes on one
    CPU thread (as the xdist worker that started the run)."""
    import atexit
    import runpy
    import traceback

    if one_thread:
        import torch

        torch.set_num_threads(1)

    os.environ.clear()
    os.environ.update(env)
    os.chdir(folder)
    sys.path[:0] = paths
    for fd, name in ((1, out), (2, err)):
        target = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(target, fd)
        os.close(target)
    sys.argv = ["-c", *args[1:]] if module == "-c" else [module, *args]
    code = 0
    try:
        if module == "-c":
            exec(compile(args[0], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
        else:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        code = stop.code
    except BaseException:  # noqa: BLE001 - as Python reports an uncaught exception
        traceback.print_exc()
        code = 1
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)


def run_module(module: str, args: list[str], root: Path, timeout: float = 600,
               **extra_env) -> subprocess.CompletedProcess:
    """`python -m MODULE *args` (MODULE "-c": `python -c CODE *args`, the code first in `args`)
    from `root` with this checkout's packages importable: the exit code and what it printed."""
    context, server_env = _context()  # first: it may set variables here
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(PYTHONPATH=os.pathsep.join([str(root), str(root / "src")]), **extra_env)
    command = [sys.executable, *(["-c"] if module == "-c" else ["-m", module]), *args]
    # Started from an xdist worker (the other workers busy on the other cores), as conftest.py's
    # one_thread_per_worker: one torch thread.
    one_thread = bool(os.environ.get("PYTEST_XDIST_WORKER"))
    if _imported_with(env) != server_env:
        if one_thread:
            env.setdefault("OMP_NUM_THREADS", "1")
        return subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
    with tempfile.TemporaryDirectory() as folder:
        out, err = Path(folder) / "stdout", Path(folder) / "stderr"
        process = context.Process(target=_main, args=(module, list(args), env, str(root),
                                                      [str(root), str(root / "src")], str(out), str(err),
                                                      one_thread))
        process.start()
        process.join(timeout)
        if process.is_alive():
            process.kill()
            process.join()
            raise subprocess.TimeoutExpired(command, timeout)
        return subprocess.CompletedProcess(command, process.exitcode, out.read_text(), err.read_text())


def run_pytest(args: list[str], root: Path, timeout: float = 600, **extra_env) -> subprocess.CompletedProcess:
    """`python -m pytest *args` (see `run_module`)."""
    return run_module("pytest", args, root, timeout, **extra_env)
