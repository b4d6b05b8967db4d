"""Work Triton's interpreter repeats for every operation of every program that cannot change what a
kernel computes, skipped.

- **The overflow check.** `+`, `-` and `*` on 8- to 32-bit integers build an overflow check
  (both operands cast to int64, the operation again, two comparisons, an `and`) and hand it to
  `device_assert`, which does nothing unless the kernel runs with `debug`; the interpreter's
  options never set it. The check is skipped while `debug` is off, as a compiled kernel skips it.
- **The NumPy dtype of a Triton type.** `_get_np_dtype` builds a 19-entry dict (hashing each
  Triton type) at every call; its answer for a scalar type is kept by the type's name (what
  Triton's types compare by), a block's is its element type's, a pointer's is uint64.
- **The call of a builtin.** Each patched builtin (`tl.load`, `+`, ...) is a wrapper that copies
  its keyword arguments into a new dict without `_semantic`, then calls the builtin with the
  interpreter's; the wrapper here drops `_semantic` from the dict the call already made.
- **The shape of every new value.** Each operation makes a block type (its shape unwrapped from
  constexprs and validated, its element count) and a tensor (its shape wrapped in constexprs
  again). Both are kept by the shape of plain ints they come from; every attribute is set as
  before, and a shape Triton refuses still goes through Triton's own code and raises there.

Under cProfile, `sampler_mrv2`'s `fused@0.26.0` CPU row (`ci` profile) spent 62 s of its 204 s in
kernels on the overflow check and 15 s on the dtype lookup; without the profiler the row took
124 s before and 69 s after (`CI=true pytest` on that test alone, 2 cores). Keeping block shapes
(a first version, before scalar shapes and the direct builtin call) took that row from 39.2 s and
35.1 s to 36.6 s and 31.4 s (two alternating pairs, the same command).
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
    if not getattr(interpreter._patch_attr, "direct", False):
        interpreter._patch_attr = direct_builtins(interpreter)
    keep_shapes()


def direct_builtins(interpreter):
    """Triton's `_patch_attr` with a cheaper wrapper: the builtin gets the same arguments and the
    interpreter's semantic (read at each call, as Triton's wrapper reads it)."""

    def patch_attr(obj, name, member, builder, scope):
        def call(*args, **kwargs):
            kwargs.pop("_semantic", None)  # the call's own dict
            return member(*args, **kwargs, _semantic=interpreter.interpreter_semantic)

        scope.set_attr(obj, name, call)

    patch_attr.direct = True
    patch_attr.__wrapped__ = interpreter._patch_attr
    return patch_attr


def keep_shapes() -> None:
    """`tl.block_type` and `tl.tensor` set up from shapes already seen (undone by `shipped_shapes`)."""
    from triton.language import core

    if getattr(core.block_type.__init__, "kept", False):
        return
    block_init, tensor_init = core.block_type.__init__, core.tensor.__init__
    # a shape's ints -> (its tuple's type, its element count, its text) as block_type sets them
    blocks = {}
    # a block type's shape's ints, or () -> (its shape in constexprs, its element count) as tensor sets them
    tensors = {}

    def ints(shape):
        """The shape's ints where Triton takes it (a list or Triton's tuple) and each dimension is an
        int or a constexpr of one; None elsewhere."""
        if type(shape) is list:
            dims = shape
        elif type(shape) is core.tuple:
            dims = shape.values
        else:
            return None
        key = tuple(d.value if type(d) is core.constexpr else d for d in dims)
        return key if all(type(d) is int for d in key) else None

    def block_type_init(self, element_ty, shape):
        key = ints(shape)
        found = blocks.get(key) if key is not None else None
        if found is None:
            block_init(self, element_ty, shape)  # Triton's checks, and its errors
            if key is not None:
                blocks[key] = (self.shape.type, self.numel, str(self.shape))
            return
        tuple_type, numel, text = found
        self.element_ty = element_ty
        self.shape = core.tuple(list(key), tuple_type)  # a tuple of its own, as Triton makes one per type
        self.numel = numel
        self.name = f"<{text}, {element_ty}>"

    def tensor_init_kept(self, handle, type):
        key = tuple(type.shape.values) if type.is_block() else ()
        found = tensors.get(key)
        if found is None:
            tensor_init(self, handle, type)
            tensors[key] = (self.shape, self.numel)
            return
        self.handle = handle
        self.shape, self.numel = found
        self.type = type
        self.dtype = type.scalar

    for kept, shipped in ((block_type_init, block_init), (tensor_init_kept, tensor_init)):
        kept.kept, kept.__wrapped__ = True, shipped
    core.block_type.__init__, core.tensor.__init__ = block_type_init, tensor_init_kept


def shipped_shapes() -> None:
    """Triton's own `tl.block_type` and `tl.tensor` set-up again."""
    from triton.language import core

    for cls in (core.block_type, core.tensor):
        cls.__init__ = getattr(cls.__init__, "__wrapped__", cls.__init__)


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
