"""bf16 constants, maxima and minima in Triton's interpreter, as the GPU computes them.

Triton's interpreter keeps a bf16 tensor as its raw 16-bit patterns (NumPy has no bf16) and
converts them only where a kernel casts to or from bf16. It has no bf16 constant at all
(`InterpreterBuilder.get_bf16`: a kernel that compares bf16 lanes with a literal such as
`float("-inf")` stops with an AttributeError), and its maximum and minimum (elementwise, and the
`tl.max`/`tl.min` reductions) compare the patterns as unsigned integers, so a negative lane is
"larger" than every positive one. vLLM 0.26.0's `_min_p_kernel` takes the row's largest logit in
the logits' own dtype (PR #48641: no fp32 copy), so on bf16 logits it could not run on CPU.

`install()` gives the interpreter:
- `get_bf16(value)`: the fp32 value rounded to bf16 (to nearest even, as a literal is
  converted when a kernel is compiled), as its pattern;
- elementwise maximum/minimum (`create_maximumf`, `create_maxnumf`, `create_minimumf`,
  `create_minnumf`) and the max/min reductions of bf16 operands computed on their exact fp32
  values with the interpreter's own fp32 functions (so NaN behaves as the interpreter's fp32 does)
  and returned as bf16 patterns; every result is one of the operands, so nothing rounds.
Other dtypes go through the interpreter's own code unchanged; compiled kernels are not affected.
bf16 arithmetic (add, multiply, ...) and comparisons of two bf16 operands are left as they are:
the kernels run here upcast before computing.
"""

from __future__ import annotations

import numpy as np
import torch


def _to_fp32(bits: np.ndarray) -> np.ndarray:
    """bf16 patterns (uint16) as fp32 values: exact."""
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


def _to_bits(values: np.ndarray) -> np.ndarray:
    """fp32 values that are bf16 values (each is one of the operands) as bf16 patterns: exact."""
    return (np.asarray(values, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def install() -> None:
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    if getattr(builder, "bf16_cpu", False):
        return
    TensorHandle = interpreter.TensorHandle

    def get_bf16(self, value):
        bits = torch.tensor([float(value)], dtype=torch.float32).to(torch.bfloat16).view(torch.int16)
        return TensorHandle(bits.numpy().view(np.uint16), tl.bfloat16)

    if not hasattr(builder, "get_bf16"):
        builder.get_bf16 = get_bf16

    def on_bf16(name: str):
        original = getattr(builder, name)

        def op(self, lhs, rhs):
            if lhs.dtype.scalar != tl.bfloat16:
                return original(self, lhs, rhs)
            as_fp32 = lambda h: TensorHandle(_to_fp32(h.data), tl.float32)  # noqa: E731
            out = original(self, as_fp32(lhs), as_fp32(rhs))
            return TensorHandle(_to_bits(out.data), tl.bfloat16)

        setattr(builder, name, op)

    for name in ("create_maximumf", "create_maxnumf", "create_minimumf", "create_minnumf"):
        on_bf16(name)

    reduce_ops = interpreter.ReduceOps
    min_max = reduce_ops.min_max

    def min_max_bf16(self, input, val_reduce_op, idx_reduce_op=None):
        value = input[0] if isinstance(input, tuple) else input
        if value.dtype.scalar != tl.bfloat16 or idx_reduce_op is not None:
            return min_max(self, input, val_reduce_op, idx_reduce_op)
        reduced = val_reduce_op(_to_fp32(value.handle.data), axis=self.axis, keepdims=self.keep_dims)
        return self.to_tensor(_to_bits(reduced), value.dtype)

    reduce_ops.min_max = min_max_bf16
    builder.bf16_cpu = True
