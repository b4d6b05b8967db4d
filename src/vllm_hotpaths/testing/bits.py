"""Bitwise tensor equality: same shape, dtype and device, and the same bit pattern everywhere.

Float tensors are compared as same-width integers, so NaN equals the same NaN, -0.0 differs from
0.0, and no tolerance hides a changed rounding.
"""

from __future__ import annotations

import torch

_SAME_WIDTH_INT = {
    torch.float64: torch.int64,
    torch.float32: torch.int32,
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
}


def as_bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(_SAME_WIDTH_INT[t.dtype]) if t.dtype in _SAME_WIDTH_INT else t


def assert_same_bits(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        raise AssertionError(
            f"{what}: got {actual.dtype} {list(actual.shape)}, expected {expected.dtype} "
            f"{list(expected.shape)}"
        )
    if actual.device != expected.device:
        raise AssertionError(f"{what}: on {actual.device}, expected on {expected.device}")
    a, e = as_bits(actual), as_bits(expected)
    if torch.equal(a, e):
        return
    differ = (a != e).nonzero()
    first = tuple(differ[0].tolist())
    raise AssertionError(
        f"{what}: {differ.shape[0]} of {a.numel()} elements differ; first at {first}: "
        f"got {actual[first].item()!r}, expected {expected[first].item()!r}"
    )
