"""Triton's interpreter without the work that cannot change a result (vllm_hotpaths.interpreter_shortcuts):
the same bits as the interpreter left as Triton ships it, on kernels whose 32-bit integer arithmetic
wraps and whose casts go through every NumPy dtype the interpreter stores."""

import dataclasses
import os
from contextlib import contextmanager
from functools import cache

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs Triton's interpreter")

BLOCK = 64


@cache
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def wrapping_kernel(out_ptr, x_ptr, y_ptr, scale):
        lanes = tl.arange(0, BLOCK)
        x, y = tl.load(x_ptr + lanes), tl.load(y_ptr + lanes)  # int32: + - * overflow and wrap
        a = x * y + scale
        b = (x - y) * 3 - scale
        h = tl.load(out_ptr + lanes)
        f = (a.to(tl.float32) * 0.5).to(tl.bfloat16).to(tl.float16).to(tl.float32)
        g = (b.to(tl.uint32) >> 3).to(tl.int16).to(tl.int8).to(tl.int64) + (a < b).to(tl.int32)
        tl.store(out_ptr + lanes, a ^ b ^ h ^ f.to(tl.int32, bitcast=True) ^ g.to(tl.int32))

    return wrapping_kernel


@contextmanager
def as_shipped():
    """The interpreter with Triton's own options, dtype lookup and shapes."""
    from triton.runtime import interpreter

    from vllm_hotpaths.interpreter_shortcuts import keep_shapes, shipped_shapes

    builder, lookup = interpreter.interpreter_builder, interpreter._get_np_dtype
    options = builder.options
    builder.options = dataclasses.replace(options, sanitize_overflow=True)
    interpreter._get_np_dtype = getattr(lookup, "__wrapped__", lookup)
    shipped_shapes()
    try:
        yield
    finally:
        builder.options, interpreter._get_np_dtype = options, lookup
        keep_shapes()


def _run(x, y, scale):
    out = torch.arange(BLOCK, dtype=torch.int32) * 7919
    _kernel()[(1,)](out, x, y, scale)
    return out


def test_the_shortcuts_keep_every_bit_of_wrapping_arithmetic_and_casts():
    import triton.language as tl
    from triton.runtime import interpreter

    from vllm_hotpaths import vllm_env

    vllm_env.set_cpu_environment()
    assert not interpreter.interpreter_builder.options.sanitize_overflow, "the overflow check is still built"
    assert getattr(interpreter._get_np_dtype, "by_name", False), "the dtype lookup is Triton's own"
    assert getattr(tl.tensor.__init__, "kept", False), "the shapes are Triton's own"
    g = torch.Generator().manual_seed(0)
    edges = torch.tensor([2**31 - 1, -(2**31), -1, 0, 1, 46341, -46341, 65536], dtype=torch.int32)
    for _ in range(4):
        x = torch.randint(-(2**31), 2**31, (BLOCK,), generator=g, dtype=torch.int64).to(torch.int32)
        y = torch.randint(-(2**31), 2**31, (BLOCK,), generator=g, dtype=torch.int64).to(torch.int32)
        x[:8], y[:8] = edges, edges.flip(0)
        for scale in (0, 2**31 - 1, -(2**31)):
            fast = _run(x, y, scale)
            with as_shipped():
                shipped = _run(x, y, scale)
            assert torch.equal(fast, shipped), f"scale {scale}: lanes {(fast != shipped).nonzero().flatten().tolist()}"


def test_the_overflow_check_the_shortcut_drops_never_fires_in_the_interpreter():
    """With the interpreter's own options (`debug` off) Triton builds the check and discards it: an
    int32 overflow wraps, as it does compiled. A Triton whose interpreter turns `debug` on keeps it."""
    from triton.runtime import interpreter

    from vllm_hotpaths import interpreter_shortcuts

    assert not interpreter.interpreter_builder.options.debug
    x = torch.full((BLOCK,), 2**31 - 1, dtype=torch.int32)
    with as_shipped():
        out = _run(x, x, 1)
    assert out.dtype == torch.int32  # wrapped, no assertion raised
    builder = interpreter.interpreter_builder
    options = builder.options
    try:
        builder.options = dataclasses.replace(options, debug=True, sanitize_overflow=True)
        interpreter_shortcuts.install()
        assert builder.options.sanitize_overflow, "the check was dropped under debug"
    finally:
        builder.options = options


def test_the_dtype_lookup_answers_as_triton_does():
    import triton.language as tl
    from triton.runtime import interpreter

    from vllm_hotpaths.interpreter_shortcuts import np_dtype_by_name

    shipped = getattr(interpreter._get_np_dtype, "__wrapped__", interpreter._get_np_dtype)
    lookup = np_dtype_by_name(shipped)
    scalars = [tl.int1, tl.int8, tl.uint8, tl.int16, tl.uint16, tl.int32, tl.uint32, tl.int64, tl.uint64,
               tl.float16, tl.bfloat16, tl.float32, tl.float64, tl.float8e5, tl.float8e4nv]
    types = [*scalars, *(tl.pointer_type(t) for t in scalars), *(tl.block_type(t, [4]) for t in scalars),
             *(tl.block_type(tl.pointer_type(t), [2, 2]) for t in scalars)]
    for _ in range(2):  # answered, then kept
        for t in types:
            assert lookup(t) == shipped(t) and isinstance(lookup(t), np.dtype), t
    with pytest.raises(KeyError):
        lookup(tl.void)


def _attributes(value) -> dict:
    return {name: (repr(v) if name == "handle" else v) for name, v in vars(value).items()}


def test_kept_shapes_give_every_attribute_triton_gives():
    """Block types and tensors made twice (made, then kept) from shapes of ints and of constexprs,
    of values and pointers: the same attributes as Triton's own set-up; a shape Triton refuses
    raises Triton's error both times."""
    import triton.language as tl

    from vllm_hotpaths import vllm_env

    vllm_env.set_cpu_environment()
    shapes = [[4], [1, 8], [tl.constexpr(2), 16], [tl.constexpr(1)], [1024], [2, 2, 2], tl.tuple([8, tl.constexpr(4)])]
    elements = [tl.float32, tl.bfloat16, tl.int64, tl.pointer_type(tl.int32)]
    made = []
    for _ in range(2):
        for shape in shapes:
            for element in elements:
                block = tl.block_type(element, shape)
                made.append((_attributes(block), _attributes(tl.tensor("h", block)), _attributes(tl.tensor("h", element))))
        for bad, error in (([3], ValueError), ([], TypeError), ([2**21, 2**10], ValueError), ((4,), AssertionError)):
            with pytest.raises(error):
                tl.block_type(tl.float32, bad)
    with as_shipped():
        shipped = [(_attributes(tl.block_type(e, s)), _attributes(tl.tensor("h", tl.block_type(e, s))),
                    _attributes(tl.tensor("h", e))) for s in shapes for e in elements]
    assert made == shipped * 2
    made_shapes = [block["shape"] for block, _, _ in made]
    assert len({id(shape) for shape in made_shapes}) == len(made_shapes), "block types share a shape tuple"
