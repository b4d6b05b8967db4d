"""`python -m pytest ARGS` in a process forked from one that has imported torch, Triton, NumPy,
Hypothesis and pytest already (multiprocessing's forkserver, one per test process).

The quality set starts a fresh pytest for each planted bug (its own `--impl` or `--reference`, its
own environment): a run that imports nothing else costs about 5 s on 2 cores, most of it those
imports, and there are over a hundred runs. A fork of the server skips them. Nothing of this
project is imported before the fork, so what reads the environment at import time (Triton's
TRITON_INTERPRET, this suite's VLLM_HOTPATHS_REGRESSIONS) reads the run's; this module imports
only the standard library for the same reason (the forked process imports it to find `_main`).
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path

PRELOAD = ["numpy", "torch", "triton", "triton.language", "hypothesis", "pytest", "_pytest.assertion.rewrite"]


@cache
def _context():
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context


def _main(args: list[str], env: dict[str, str], folder: str, paths: list[str], out: str, err: str) -> None:
    """The forked process: the run's environment, folder and import path, its output into files,
    then pytest as `python -m pytest` runs it, and its exit code as the process's."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(folder)
    sys.path[:0] = paths
    for fd, name in ((1, out), (2, err)):
        target = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(target, fd)
        os.close(target)
    import pytest

    code = pytest.main(args)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(code))


def run_pytest(args: list[str], root: Path, timeout: float = 600, **extra_env) -> subprocess.CompletedProcess:
    """`python -m pytest *args` from `root` with this checkout's packages importable (as the
    `run_cli` fixture runs it): the exit code and what it printed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(PYTHONPATH=os.pathsep.join([str(root), str(root / "src")]), **extra_env)
    with tempfile.TemporaryDirectory() as folder:
        out, err = Path(folder) / "stdout", Path(folder) / "stderr"
        process = _context().Process(target=_main, args=(list(args), env, str(root), [str(root), str(root / "src")],
                                                         str(out), str(err)))
        process.start()
        process.join(timeout)
        if process.is_alive():
            process.kill()
            process.join()
            raise subprocess.TimeoutExpired(["pytest", *args], timeout)
        return subprocess.CompletedProcess(["pytest", *args], process.exitcode, out.read_text(), err.read_text())
