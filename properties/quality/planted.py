"""Planted bugs: a frozen reference module's (or a fast path's) own source with one edit (a Triton kernel
cannot be patched from outside). The edited module is written once to a temporary file, named by
its content, and imported from there, so Triton can read its kernels' source."""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import sys
import tempfile
from pathlib import Path

from vllm_hotpaths import registry, vllm_env


def reference_version(hotpath: str) -> str:
    """The key of the reference the installed vLLM is checked against (the newest without vLLM)."""
    spec, installed = registry.get(hotpath), vllm_env.installed_version()
    return spec.reference_version_for(installed if installed and spec.exists_in(installed) else None)


def planted(hotpath: str, module, name: str, edits: list[tuple[str, str]], attr: str | None = None):
    """`hotpath`'s reference class for the installed vLLM (`reference_version`), or the class
    `attr`, from `module`'s source (the module defining it) with each (old, new) edit made once."""
    source = inspect.getsource(module)
    for old, new in edits:
        if source.count(old) != 1:
            raise AssertionError(f"planted bug {name}: {old!r} occurs {source.count(old)} times in the reference")
        source = source.replace(old, new)
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    module_name = f"vllm_hotpaths_planted_{hotpath}_{name}_{digest}"
    path = Path(tempfile.gettempdir()) / f"{module_name}.py"
    if not path.exists():
        staged = path.with_suffix(f".{id(source)}.tmp")
        staged.write_text(source)
        staged.replace(path)  # atomic: parallel workers may write the same file
    spec = importlib.util.spec_from_file_location(module_name, path)
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = loaded
    spec.loader.exec_module(loaded)
    return getattr(loaded, attr or registry.get(hotpath).references[reference_version(hotpath)].rpartition(":")[2])
