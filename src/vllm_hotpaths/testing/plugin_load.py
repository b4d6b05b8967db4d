"""Whether vLLM loads its plugins with this package installed: vLLM's own `load_general_plugins()`
in a child process of the environment under test, and what the plugin installed or logged there.

vLLM calls every general plugin without catching what it raises, so a plugin that raises stops
every vLLM process from starting. The gate asks this on every run (and so on every release the
matrix makes) and fails its verdict where the call raised. The answer is kept in the environment
(`CACHE_NAME` under `sys.prefix`) under a digest of everything it depends on (`inputs_digest`):
the vLLM files `runner_choice` digests, this package's shipped files, the validated file, the
`VLLM_*` variables and whether a GPU is visible; a change to any asks vLLM again (about 9 s on 2
cores).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

CACHE_NAME = "vllm-hotpaths-plugin-load.json"  # {digest: answer}, in the environment's folder

CHILD = """
import json, logging
from vllm.plugins import load_general_plugins  # vLLM's logging set up first: it may disable loggers made before
said = []
class Keep(logging.Handler):
    def emit(self, record):
        said.append(f"{record.levelname} {record.getMessage()}")
logger = logging.getLogger("vllm.vllm_hotpaths")
logger.addHandler(Keep())
logger.setLevel(logging.INFO)
logger.disabled = False
load_general_plugins()
from vllm_hotpaths import plugin
print(json.dumps({"installed": plugin.installed(), "log": said}))
"""


def inputs_digest() -> str | None:
    """A digest of what the answer depends on (module docstring); None where vLLM is not found."""
    from vllm_hotpaths import plugin, vllm_env
    from vllm_hotpaths.testing import runner_choice

    vllm = runner_choice.inputs_digest()
    if vllm is None:
        return None
    digest = hashlib.sha256(f"{vllm} gpu={vllm_env.gpu_visible()}".encode())
    shipped = Path(plugin.__file__).parent
    for path in sorted(shipped.rglob("*")):
        if path.suffix in (".py", ".json") and "testing" not in path.relative_to(shipped).parts:
            digest.update(str(path.relative_to(shipped)).encode() + b"\0" + path.read_bytes() + b"\0")
    validated = plugin.validated_file()
    digest.update(validated.read_bytes() if validated.exists() else b"")
    return digest.hexdigest()


def kept_or_checked(store: Path | None = None) -> dict:
    """`check()`'s answer for this environment, kept under the inputs' digest: a call that did not
    return is asked again every time."""
    from vllm_hotpaths.testing import runner_choice

    return runner_choice.kept_under(store or Path(sys.prefix) / CACHE_NAME, inputs_digest(), lambda: check(),
                                    keep=lambda answer: answer["returned"])


def check(python: str = sys.executable, timeout: float = 300) -> dict:
    """{"returned": did load_general_plugins() return, "installed": hot path -> what it replaced,
    "log": the plugin's log lines, "error": why it did not return (or None)}."""
    try:
        child = subprocess.run([python, "-c", CHILD], capture_output=True, text=True, timeout=timeout,
                               env={**os.environ, "VLLM_PLUGINS": "vllm_hotpaths"})
    except subprocess.TimeoutExpired:
        return {"returned": False, "installed": {}, "log": [], "error": f"no answer within {timeout:g} s"}
    except OSError as err:  # no such interpreter
        return {"returned": False, "installed": {}, "log": [], "error": f"{type(err).__name__}: {err}"}
    found = [line for line in child.stdout.splitlines() if line.startswith("{")]
    if child.returncode != 0 or not found:
        last = (child.stderr.strip().splitlines() or ["no output"])[-1]
        return {"returned": False, "installed": {}, "log": [], "error": f"exit {child.returncode}: {last[:300]}"}
    return {"returned": True, **json.loads(found[-1]), "error": None}


def lines(result: dict) -> list[str]:
    """What the gate prints."""
    if not result["returned"]:
        return [f"plugin: vLLM's load_general_plugins() did not return with vllm-hotpaths installed ({result['error']})"]
    patched = sorted(name for name, replaced in result["installed"].items() if replaced)
    errors = [line for line in result["log"] if line.startswith("ERROR")]
    return ([f"plugin: vLLM's load_general_plugins() returned; installed: {', '.join(patched) or 'nothing'}"]
            + [f"  {line}" for line in errors])
