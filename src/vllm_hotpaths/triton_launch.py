"""Launching a Triton kernel again without Triton's per-call argument binding.

`kernel[grid](*args)` binds every argument, works out its specialization (types, integers equal
to 1 or divisible by 16, pointers aligned to 16 bytes), hashes that into a cache key and looks the
compiled kernel up, on every call (`ci/gpu/launch-cost.py` measures what skipping that saves: on
an H100 host, 21 against 16 us per launch of the counting kernel). A decode step that penalizes
launches two kernels with the same argument kinds every time, so `Relauncher` keeps the compiled
kernel per argument kind and launches it as Triton's own launch path does.

Reuse is sound only if Triton's specialization depends on nothing but what the key holds. So a
relaunched kernel specializes on no value: every parameter but the constexprs is in both
`do_not_specialize` and `do_not_specialize_on_alignment` (`unspecialized` gives both lists;
checked when the `Relauncher` is made), which leaves tensor dtypes, each integer's width and the
constexpr values: the key. The first launch of each key, and every launch where Triton has no
compiled kernel to hand back (its interpreter), goes through `kernel[grid]`; so do launches under
any Triton other than the version this was checked with (`CHECKED_TRITON`), where the launch call
itself may differ.
"""

from __future__ import annotations

import torch
import triton

CHECKED_TRITON = ("3.6.",)  # CompiledKernel.run's calling convention as used below


def _width(value: int) -> str | None:
    """The integer type Triton gives an unspecialized int argument (None: none fits)."""
    if -(2**31) <= value < 2**31:
        return "i32"
    if -(2**63) <= value < 2**63:
        return "i64"
    return "u64" if 0 <= value < 2**64 else None


def unspecialized(*params: str) -> dict:
    """`triton.jit` options that specialize on none of these parameters' values (all but the
    constexprs, for a kernel to be relaunched)."""
    return {"do_not_specialize": list(params), "do_not_specialize_on_alignment": list(params)}


class Relauncher:
    def __init__(self, kernel, **options) -> None:
        self.kernel, self.options = kernel, options
        params = getattr(kernel, "params", None)  # none in Triton's interpreter
        loose = [p.name for p in params or () if not p.is_constexpr
                 and not (p.do_not_specialize and p.do_not_specialize_on_alignment)]
        if loose:
            raise ValueError(f"{kernel.fn.__name__}: parameters {loose} must be in do_not_specialize and "
                             "do_not_specialize_on_alignment to be relaunched")
        self.constexpr = [p.is_constexpr for p in params or ()]
        self.compiled: dict[tuple, object] = {}
        self.enabled = params is not None and triton.__version__.startswith(CHECKED_TRITON)

    def key(self, args) -> tuple | None:
        """What Triton specializes these arguments on, or None for an argument this does not
        know (then Triton's own path launches)."""
        key = [torch.cuda.current_device()]
        for arg, constexpr in zip(args, self.constexpr):
            if constexpr:
                key.append(arg)
            elif isinstance(arg, torch.Tensor):
                key.append(arg.dtype)
            elif type(arg) is int:
                key.append(_width(arg))
            else:
                return None
        return tuple(key)

    def __call__(self, grid: tuple[int, int], *args) -> None:
        """`kernel[grid](*args, **options)`; `args` are all the kernel's parameters in order,
        constexprs included."""
        key = self.key(args) if self.enabled else None
        compiled = self.compiled.get(key) if key is not None else None
        if compiled is None:
            compiled = self.kernel[grid](*args, **self.options)
            if key is not None and hasattr(compiled, "run") and hasattr(compiled, "packed_metadata"):
                self.compiled[key] = compiled
            return
        knobs = triton.knobs.runtime
        stream = triton.runtime.driver.active.get_current_stream(key[0])
        compiled.run(grid[0], grid[1], 1, stream, compiled.function, compiled.packed_metadata,
                     compiled.launch_metadata(grid, stream, *args), knobs.launch_enter_hook,
                     knobs.launch_exit_hook, *args)
