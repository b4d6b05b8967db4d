import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def run_cli():
    """Run a command of this checkout's Python in a subprocess (own pytest session / CLI)."""

    def run(*args, timeout=600, **extra_env):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "src")]), **extra_env)
        env.pop("PYTEST_XDIST_WORKER", None)
        return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=timeout)

    return run
