"""Triton's interpreter without patching `triton.language` again at every device-function call.

The interpreter runs a kernel's body as Python with `triton.language` patched (`_patch_lang`:
each builtin of `tl`, `tl.core`, `tl.math` and the tensor class wrapped, `range` and a few others
replaced), once per launch, undone when the launch ends. A call from the kernel to another
`@triton.jit` function (Triton's Philox, vLLM's helpers, ours) patches again, in every program,
and keeps that patch: about 2.4 ms a call, spent listing the modules' members to find builtins
that are no longer there. An interpreted sampling pass spent 29% of its time in it (cProfile of
`sampler_mrv2`'s equivalence property on CPU, `smoke` profile: 2,797 calls, 9.6 s of 33.5 s in
kernels, 134 of the calls launches).

`install()` lets a call patch only where something its function needs is unpatched: a language
module it sees (patched once its builtin `load` is wrapped), or the tensor class, which only a
launch's patch covers (with libdevice, `tl.math` and the reductions) and every launch's end
undoes. A launch therefore patches in full; inside it, a device function patches only a module no
call has patched before (`tl.core`, the first time), and keeps that patch as Triton does. The same
wrappers are in place at every call, so nothing changes in what a kernel computes. Compiled
kernels are not affected.
"""

from __future__ import annotations

import inspect


def install() -> None:
    from triton.runtime import interpreter

    if not getattr(interpreter._patch_lang, "once_per_launch", False):
        interpreter._patch_lang = once_per_launch(interpreter._patch_lang)


def once_per_launch(patch_lang):
    """`patch_lang` (Triton's `_patch_lang`, or libdevice_cpu's around it) where a launch or a
    device-function call needs it, an empty patch elsewhere."""
    import triton.language as tl
    from triton.runtime import interpreter

    languages = {}  # a jit function -> the language modules it sees (what `_patch_lang` patches)

    def patch_lang_once(fn):
        seen = languages.get(fn)
        if seen is None:
            seen = languages[fn] = [v for v in fn.__globals__.values() if inspect.ismodule(v) and v in (tl, tl.core)]
        if tl.core.is_builtin(tl.tensor.__add__) or any(tl.core.is_builtin(module.load) for module in seen):
            return patch_lang(fn)
        return interpreter._LangPatchScope()  # inside a launch, nothing left to patch: nothing to undo

    patch_lang_once.__dict__.update(patch_lang.__dict__)  # libdevice_cpu's mark that it is installed
    patch_lang_once.once_per_launch = True
    patch_lang_once.__wrapped__ = patch_lang
    return patch_lang_once
