"""Triton's interpreter with `triton.language` patched once per process, not at every launch and
device-function call.

The interpreter runs a kernel's body as Python with `triton.language` patched (`_patch_lang`:
each builtin of `tl`, `tl.core`, `tl.math` and the tensor class wrapped, `range` and a few others
replaced) at every launch, undone when the launch ends. A call from the kernel to another
`@triton.jit` function (Triton's Philox, vLLM's helpers, ours) patches again, in every program,
and keeps that patch: about 2.4 ms a call, spent listing the modules' members to find builtins
that are no longer there. An interpreted sampling pass spent 29% of its time in it (cProfile of
`sampler_mrv2`'s equivalence property on CPU, `smoke` profile: 2,797 calls, 9.6 s of 33.5 s in
kernels, 134 of the calls launches). Patching once per launch instead still took 9.6 s of a
`ci` row's 100 s in kernels (cProfile of `fused@0.26.0`'s CPU row: 3,530 launches, each listing
four modules' members to patch them and undoing it at its end).

`install()` lets a launch or call patch only where something its function needs is unpatched: a
language module it sees (patched once its builtin `load` is wrapped) or the tensor class, and keeps
the patch. In a process whose kernels are interpreted (TRITON_INTERPRET=1 is read when a kernel
is defined, so every kernel of the process is) nothing but a kernel's body uses the wrappers, and
the same wrappers are in place at every launch and call, so nothing changes in what a kernel
computes. Compiled kernels are not affected.
"""

from __future__ import annotations

import inspect


def install() -> None:
    from triton.runtime import interpreter

    if not getattr(interpreter._patch_lang, "once_per_process", False):
        interpreter._patch_lang = once_per_process(interpreter._patch_lang)


def once_per_process(patch_lang):
    """`patch_lang` (Triton's `_patch_lang`, or libdevice_cpu's around it) where a launch or a
    device-function call finds something it needs unpatched, its patch kept (nothing undone)."""
    import triton.language as tl
    from triton.runtime import interpreter

    languages = {}  # a jit function -> the language modules it sees (what `_patch_lang` patches)

    def patch_lang_once(fn):
        seen = languages.get(fn)
        if seen is None:
            seen = languages[fn] = [v for v in fn.__globals__.values() if inspect.ismodule(v) and v in (tl, tl.core)]
        if tl.core.is_builtin(tl.tensor.__add__) or any(tl.core.is_builtin(module.load) for module in seen):
            patch_lang(fn)  # its scope is dropped: what it patched stays patched
        return interpreter._LangPatchScope()  # nothing for the launch's end to undo

    patch_lang_once.__dict__.update(patch_lang.__dict__)  # libdevice_cpu's mark that it is installed
    patch_lang_once.once_per_process = True
    patch_lang_once.__wrapped__ = patch_lang
    return patch_lang_once
