"""Finding the installed vLLM and making its sampler modules run on a CPU-only machine.

vLLM's hot-path modules import and run on CPU torch. Where no GPU is visible, variables are set
before vLLM or any Triton kernel is imported (Triton kernels run in Triton's interpreter, vLLM
keeps Triton although no driver is active, no torch.compile of the CPU sampler, CPU target), and after
`import vllm` vLLM's own `CpuPlatform` becomes the current platform (the unspecified fallback asks
for pinned memory) and pinned memory is switched off where vLLM reads it from a module constant.
With a GPU, vLLM is left as it configures itself.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import os
import sys
from types import ModuleType

_adjusted = False


def installed_version() -> str | None:
    """The installed vLLM's version, or None when vLLM is not installed."""
    return _version_on(tuple(sys.path))


@functools.lru_cache(maxsize=8)
def _version_on(path: tuple[str, ...]) -> str | None:
    """vLLM's version where `path` (the import path) finds it: reading it means parsing its
    metadata file, which cost the suite about 50 s when every live side asked again."""
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None


def gpu_visible() -> bool:
    """Whether a CUDA device is visible, without touching the CUDA runtime.

    `torch.cuda.device_count()` asks NVML first; `torch.cuda.is_available()` asks the CUDA
    runtime, after which a forked child can no longer use CUDA ("Cannot re-initialize CUDA in
    forked subprocess"): vLLM forks workers, and its own tests fork per test, after plugins load.
    """
    import torch

    return torch.cuda.device_count() > 0


def _no_gpu() -> bool:
    return not gpu_visible()


def set_cpu_environment() -> None:
    """Variables read at import time, set where no GPU is visible; call before importing vLLM or
    a module defining Triton kernels."""
    if _no_gpu():
        os.environ.setdefault("TRITON_INTERPRET", "1")  # Triton has no CPU backend
        os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")  # vLLM's "no driver: disable Triton" check
        os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")  # no torch.compile of the CPU sampler
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    if os.environ.get("TRITON_INTERPRET") == "1":
        from vllm_hotpaths import (interpreter_bf16, interpreter_patching, interpreter_random, interpreter_shortcuts,
                                   libdevice_cpu)

        interpreter_random.install()  # Triton's Philox in NumPy: most of an interpreted sampling pass
        libdevice_cpu.install()  # vLLM's kernels call libdevice log1p from 0.24
        interpreter_bf16.install()  # 0.26.0's min_p takes a bf16 row's maximum in bf16
        interpreter_patching.install()  # after libdevice_cpu: launches patch libdevice too
        interpreter_shortcuts.install()  # no overflow check that `debug` off discards, dtypes looked up


def _cpu_platform():
    """vLLM's `CpuPlatform`, except that loading its compiled CPU kernels may fail quietly: this
    vLLM is a CUDA build (no CPU kernels to load), and releases up to 0.21 ask torch for
    `torch._C._cpu._is_avx512_supported`, which the CPU torch used here no longer has."""
    from vllm.platforms.cpu import CpuPlatform

    class CpuPlatformWithoutKernels(CpuPlatform):
        @classmethod
        def import_kernels(cls) -> None:
            try:
                super().import_kernels()
            except (AttributeError, ImportError):
                pass

    return CpuPlatformWithoutKernels()


def _adjust_for_cpu() -> None:
    global _adjusted
    if _adjusted:
        return
    if _no_gpu():
        import vllm.platforms

        vllm.platforms._current_platform = _cpu_platform()
        from vllm.utils import platform_utils, torch_utils

        platform_utils.is_pin_memory_available.cache_clear()
        if hasattr(torch_utils, "PIN_MEMORY"):
            torch_utils.PIN_MEMORY = False
        # 0.22 binds PIN_MEMORY as `async_tensor_h2d`'s default when the module is imported.
        h2d = getattr(torch_utils, "async_tensor_h2d", None)
        if h2d is not None and h2d.__defaults__ == (True,):
            h2d.__defaults__ = (False,)
    _adjusted = True


def import_vllm(module: str) -> ModuleType:
    """Import a vLLM module, adjusted to run here. Raises ImportError without vLLM."""
    if installed_version() is None:
        raise ImportError("vLLM is not installed")
    set_cpu_environment()
    importlib.import_module("vllm")
    _adjust_for_cpu()
    return importlib.import_module(module)


def call(fn, *args, **kwargs):
    """`fn(*args, **kwargs)` with only the keyword arguments `fn`'s signature names: releases add
    and drop optional arguments (0.23's `RequestState.add_request(..., max_tokens)`, 0.31's
    `Sampler.add_request` without `prompt_len`). An argument a release requires that is not given
    still fails, as a TypeError naming it."""
    import inspect

    params = inspect.signature(fn).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        kwargs = {k: v for k, v in kwargs.items() if k in params}
    return fn(*args, **kwargs)


def compiled_op(name: str):
    """`torch.ops._C.<name>` from vLLM's compiled library, or None where it cannot be loaded.

    The library comes from the installed vLLM (`vllm._C`), or from the file that
    VLLM_HOTPATHS_VLLM_C names (a `_C.abi3.so` taken from a vLLM wheel built for this torch):
    the way to check the CUDA ops on a GPU machine without a vLLM install.
    """
    import torch

    path = os.environ.get("VLLM_HOTPATHS_VLLM_C")
    try:
        if path:
            if path not in _loaded_libraries:
                torch.ops.load_library(path)
                _loaded_libraries.add(path)
        elif installed_version() is not None:
            importlib.import_module("vllm._C")
        return getattr(torch.ops._C, name)
    except (ImportError, OSError, AttributeError, RuntimeError):
        return None


_loaded_libraries: set[str] = set()
