"""What vLLM loads stays apart from the test machinery: the plugin, the registry and every
reference, fast path and patch the registry names import in a process where pytest and
Hypothesis cannot be imported, and none of them pulls in `vllm_hotpaths.testing`."""

import subprocess
import sys

from vllm_hotpaths import registry

BLOCKED = """
import importlib, sys
class NoTestTools:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("pytest", "_pytest", "hypothesis"):
            raise ImportError(f"{name} is a test tool: the shipped package must not import it")
sys.meta_path.insert(0, NoTestTools())
for module in sys.argv[1:]:
    importlib.import_module(module)
leaked = sorted(m for m in sys.modules if m.startswith(("vllm_hotpaths.testing", "pytest", "hypothesis")))
assert not leaked, f"imported: {leaked}"
print("ok", len(sys.argv) - 1)
"""


def shipped_modules() -> list[str]:
    modules = {"vllm_hotpaths.plugin", "vllm_hotpaths.registry", "vllm_hotpaths.cli"}
    for hotpath in registry.HOTPATHS.values():
        specs = [*hotpath.references.values(), *(spec for spec, _ in hotpath.fast.values())]
        modules.update(spec.partition(":")[0] for spec in specs + ([hotpath.patch] if hotpath.patch else []))
    return sorted(modules)


def test_shipped_modules_import_without_test_tools():
    modules = shipped_modules()
    assert any(m.endswith(".patch") for m in modules) and any(m.endswith(".fast") for m in modules)
    done = subprocess.run([sys.executable, "-c", BLOCKED, *modules], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["ok", str(len(modules))]
