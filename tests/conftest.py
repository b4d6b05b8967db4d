import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.forked_pytest import run_module


def gpu_script(root: Path, filename: str):
    """A script of ci/gpu/ (hyphenated, so not importable by name) loaded as a module."""
    spec = importlib.util.spec_from_file_location(filename.removesuffix(".py").replace("-", "_"),
                                                  root / "ci" / "gpu" / filename)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def run_cli(pytestconfig):
    """Run a command of this checkout's Python in a process of its own (own pytest session / CLI):
    `-m MODULE ...`, and `-c CODE ...` with `forked=True`, in a process forked from one that has
    the suite's imports done (tests/forked_pytest.py); anything else, or with `fresh=True`, in a
    fresh Python."""
    root = pytestconfig.rootpath

    def run(*args, timeout=600, fresh=False, forked=False, **extra_env):
        if not fresh and (args[0] == "-m" or args[0] == "-c" and forked):
            module, rest = (args[1], args[2:]) if args[0] == "-m" else ("-c", args[1:])
            return run_module(module, list(rest), root, timeout, **extra_env)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), str(root / "src")]), **extra_env)
        env.pop("PYTEST_XDIST_WORKER", None)
        return subprocess.run([sys.executable, *args], cwd=root, env=env, capture_output=True,
                              text=True, timeout=timeout)

    return run
