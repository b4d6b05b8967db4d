import os
import subprocess
import sys

import pytest


@pytest.fixture
def run_cli(pytestconfig):
    """Run a command of this checkout's Python in a subprocess (own pytest session / CLI)."""
    root = pytestconfig.rootpath

    def run(*args, timeout=600, **extra_env):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), str(root / "src")]), **extra_env)
        env.pop("PYTEST_XDIST_WORKER", None)
        return subprocess.run([sys.executable, *args], cwd=root, env=env, capture_output=True,
                              text=True, timeout=timeout)

    return run
