"""Work Triton's interpreter repeats for every operation of every program that cannot change what a
kernel computes, skipped.

- **The overflow check.** `+`, `-` and `*` on 8- to 32-bit integers build an overflow check
  (both operands cast to int64, the operation again, two comparisons, an `and`) and hand it to
  `device_assert`, which does nothing unless the kernel runs with `debug`; the interpreter's
  options never set it. The check is skipped while `debug` is off, as a compiled kernel skips it.
- **The NumPy dtype of a Triton type.** `_get_np_dtype` builds a 19-entry dict (hashing each
  Triton type) at every call; its answer for a scalar type is kept by the type's name (what
  Triton's types compare by), a block's is its element type's, a pointer's is uint64.

Under cProfile, `sampler_mrv2`'s `fused@0.26.0` CPU row (`ci` profile) spent 62 s of its 204 s in
kernels on the overflow check and 15 s on the dtype lookup; without the profiler the row took
124 s before and 69 s after (`CI=true pytest` on that test alone, 2 cores).
"""

from __future__ import annotations

import dataclasses


def install() -> None:
    from triton.runtime import interpreter

    builder = interpreter.interpreter_builder
    if not builder.options.debug and builder.options.sanitize_overflow:
        builder.options = dataclasses.replace(builder.options, sanitize_overflow=False)
    if not getattr(interpreter._get_np_dtype, "by_name", False):
        interpreter._get_np_dtype = np_dtype_by_name(interpreter._get_np_dtype)


def np_dtype_by_name(get_np_dtype):
    """`get_np_dtype` (Triton's `_get_np_dtype`) with its answers kept."""
    import numpy as np
    import triton.language as tl

    uint64, known = np.dtype(np.uint64), {}

    def np_dtype(tt_dtype):
        scalar = tt_dtype.element_ty if isinstance(tt_dtype, tl.block_type) else tt_dtype
        if isinstance(scalar, tl.pointer_type):
            return uint64
        found = known.get(scalar.name)
        if found is None:
            found = known[scalar.name] = get_np_dtype(scalar)  # an unknown type raises here, as before
        return found

    np_dtype.by_name = True
    np_dtype.__wrapped__ = get_np_dtype
    return np_dtype
