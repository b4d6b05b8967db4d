"""CUDA libdevice functions for Triton's interpreter, bit for bit as the GPU computes them.

vLLM's Model Runner V2 kernels call libdevice `log1p` (Gumbel noise from 0.24, the rejection
residual with draft logits from 0.25); Triton's interpreter has no libdevice and refuses any
extern call, so on CPU those kernels could not run at all. `install()` gives the interpreter the
functions below.

`log1pf` follows `__nv_log1pf` as Triton links it for an NVIDIA GPU (the LLVM IR of a kernel that
calls it, compiled for sm_90 by Triton 3.7 with `nvvm-reflect-ftz` = 1): `1 + a` rounded toward
zero, a split of that into 2^k * m with m in [0.75, 1.5), a degree-9 polynomial in m - 1 by fused
multiply-adds, and k * ln2 added by one more. Its FMAs and its round-toward-zero add flush
subnormal inputs and results to zero (FTZ); its one plain add and multiply do not. Every NaN
it returns is the GPU's canonical one (bits 0x7fffffff).
`ci/gpu/libdevice-log1p.py` checks it against the GPU's libdevice on every fp32 bit pattern.

Float32 FMA here: the product of two fp32 values is exact in fp64; the fp64 sum with the third is
rounded to odd (the round-to-nearest sum, moved one ulp towards the exact value when inexact and
even), and rounding that to fp32 is then the correctly rounded FMA (53 >= 2 * 24 + 2 bits). The
round-toward-zero add is computed the same way from the exact fp64 sum and its error. All of it in
torch fp64, so it runs on CPU and on CUDA alike.
"""

from __future__ import annotations

import numpy as np
import torch

F32_MIN_NORMAL = 2.0 ** -126
_CANONICAL_NAN = torch.tensor(0x7FFFFFFF, dtype=torch.int32).view(torch.float32)


def _f32(x: float) -> float:
    """A constant as the fp32 value libdevice holds (given here as its fp64 hex)."""
    return float(np.float32(x))


# The polynomial's coefficients, highest degree first (fp32 values written as fp64 hex in the IR).
_COEFFS = [_f32(float.fromhex(h)) for h in (
    "-0x1.737ef00000000p-5", "0x1.b000240000000p-4", "-0x1.0ef1c00000000p-3", "0x1.28c8ea0000000p-3",
    "-0x1.54d1ba0000000p-3", "0x1.995f3c0000000p-3", "-0x1.0000840000000p-2", "0x1.5555cc0000000p-2")]
_LN2 = _f32(float.fromhex("0x1.62e4300000000p-1"))


def _two_sum(a: torch.Tensor, b) -> tuple[torch.Tensor, torch.Tensor]:
    """fp64 a + b rounded to nearest, and its exact error (Knuth; 0 where the sum is not finite)."""
    s = a + b
    bb = s - a
    err = (a - (s - bb)) + (b - bb)
    return s, err.nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)


def _ftz(x: torch.Tensor) -> torch.Tensor:
    """Flush fp32 subnormals to a zero of the same sign."""
    return torch.where(x.abs() < F32_MIN_NORMAL, x * 0.0, x)


def _round_to_odd(s: torch.Tensor, err: torch.Tensor) -> torch.Tensor:
    even = (s.view(torch.int64) & 1) == 0
    return torch.where((err != 0) & even, torch.nextafter(s, torch.copysign(torch.full_like(s, float("inf")), err)), s)


def _fma_ftz_f64(a: torch.Tensor, b, c) -> torch.Tensor:
    """`fma_ftz` on operands already flushed and widened to fp64 (`b`, `c` may be fp32 constants
    as Python floats: normal numbers, which flushing leaves)."""
    s, err = _two_sum(a * b, c)
    return _ftz(_round_to_odd(s, err).float())


def fma_ftz(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """fp32 `fma.rn.ftz`: a * b + c rounded once to nearest, subnormals flushed."""
    a, b, c = (_ftz(torch.as_tensor(v, dtype=torch.float32, device=a.device)).double() for v in (a, b, c))
    return _fma_ftz_f64(a, b, c.expand_as(a * b))


def add_rz_ftz(a: torch.Tensor, b: float) -> torch.Tensor:
    """fp32 `add.rz.ftz`: a + b rounded toward zero, subnormals flushed."""
    s, err = _two_sum(_ftz(a).double(), b)
    nearest = s.float()
    # Truncate: step back towards zero when rounding went away from it, or when the fp64 sum is
    # itself the fp32 value but the exact sum lies below it in magnitude.
    overshoot = (nearest.double().abs() > s.abs()) | ((nearest.double() == s) & (err != 0) & ((err > 0) != (s > 0)))
    truncated = torch.where(overshoot & torch.isfinite(nearest), torch.nextafter(nearest, torch.zeros_like(nearest)), nearest)
    return _ftz(truncated)


def _int32(x: torch.Tensor) -> torch.Tensor:
    """int64 values wrapped to int32's range, as 32-bit integer arithmetic leaves them."""
    return ((x + 2**31) & 0xFFFFFFFF) - 2**31


def log1pf(a: torch.Tensor) -> torch.Tensor:
    """libdevice `__nv_log1pf` on a fp32 tensor."""
    a = a.to(torch.float32)
    bits = a.view(torch.int32).long()
    m = add_rz_ftz(a, 1.0)
    e = _int32((m.view(torch.int32).long() - 0x3F400000) & 0xFF800000)  # 2^k's exponent field: m / 2^k in [0.75, 1.5)
    scaled = _int32(bits - e).int().view(torch.float32)  # a / 2^k
    four = _int32(0x40800000 - e).int().view(torch.float32)  # 4 / 2^k
    u = _fma_ftz_f64(_ftz(four).double(), 0.25, -1.0) + scaled  # plain fp32 add
    k = e.to(torch.float32) * 2.0 ** -23
    u64 = _ftz(u).double()  # every FMA below flushes its operands: u, p, k once widened
    p = torch.full_like(u64, _COEFFS[0])
    for coeff in _COEFFS[1:]:
        p = _fma_ftz_f64(p, u64, coeff).double()
    p = _fma_ftz_f64(p, u64, -0.5)
    r = _fma_ftz_f64(_ftz(u * p).double(), u64, u64)  # u * p: plain fp32 multiply
    r = _fma_ftz_f64(_ftz(k).double(), _LN2, r.double())
    # Below -1, +inf and NaN: fma(a, inf, inf) (NaN, +inf, NaN); -0 stays -0.
    outside = (bits < 0) | (bits >= 0x7F800000)  # as unsigned: above the largest finite fp32
    beyond = outside & (bits > -0x40800000)  # as signed: above the bits of -1.0
    inf = torch.full_like(a, float("inf"))
    r = torch.where(beyond, fma_ftz(a, inf, inf), r)
    r = torch.where(outside & (a == 0), a, r)
    return torch.where(r.isnan(), _CANONICAL_NAN.to(r.device), r)  # the GPU's NaN: 0x7fffffff


class Memo:
    """An elementwise fp32 function with its results kept by input bit pattern, for the
    interpreter: an interpreted sampling pass calls log1p once per program on 1,024 uniforms that
    the reference's batched program has already met (the same seed, position and token), and
    the emulation costs over a hundred torch calls however few the elements. The function runs
    only on the bit patterns not yet kept (each once), and every element's bits are its own, as
    the function computes each element apart from the others. Past `limit` patterns the table
    starts again from the call's."""

    def __init__(self, function, limit: int = 1 << 18):
        self.function, self.limit = function, limit
        self.inputs = np.empty(0, dtype=np.uint32)  # sorted bit patterns
        self.outputs = np.empty(0, dtype=np.uint32)  # the function's result for each, as bits

    def __call__(self, x: np.ndarray) -> np.ndarray:
        assert x.dtype == np.float32, x.dtype
        bits = np.ascontiguousarray(x).view(np.uint32).ravel()
        at = np.searchsorted(self.inputs, bits)
        kept = at < len(self.inputs)
        kept[kept] = self.inputs[at[kept]] == bits[kept]
        out = np.empty_like(bits)
        out[kept] = self.outputs[at[kept]]
        if not kept.all():
            new = np.unique(bits[~kept])
            result = self.function(torch.from_numpy(new.view(np.float32))).numpy().view(np.uint32)
            out[~kept] = result[np.searchsorted(new, bits[~kept])]
            if len(self.inputs) + len(new) > self.limit:
                self.inputs, self.outputs = new, result
            else:
                where = np.searchsorted(self.inputs, new)
                self.inputs, self.outputs = np.insert(self.inputs, where, new), np.insert(self.outputs, where, result)
        return out.view(np.float32).reshape(np.shape(x))


EMULATED = {"log1p": {torch.float32: log1pf}}  # libdevice name -> {dtype: function}
# (libdevice name, dtype) -> its function kept by bit pattern, for the interpreter
_MEMOS = {(name, dtype): Memo(function) for name, functions in EMULATED.items() for dtype, function in functions.items()}
LIBDEVICE_MODULES = ("triton.language.extra.libdevice", "triton.language.extra.cuda.libdevice")


def _interpreted(name: str):
    """`name` of libdevice for the interpreter: its emulation on the interpreter's tensors, or an
    error that names it (the interpreter would otherwise fail on it without saying which)."""

    def call(*args, _semantic=None, **kwargs):
        from triton.language import core
        from triton.runtime.interpreter import TensorHandle

        x = args[0]
        dtype = torch.from_numpy(np.zeros(0, x.handle.data.dtype)).dtype
        memo = _MEMOS.get((name, dtype))
        if memo is None or len(args) != 1 or kwargs:
            raise NotImplementedError(f"libdevice {name} on {dtype} has no CPU emulation for Triton's interpreter "
                                      f"(emulated: {', '.join(f'{n} on {list(d)}' for n, d in EMULATED.items())})")
        return core.tensor(TensorHandle(memo(x.handle.data), x.handle.dtype.scalar), x.type)

    return call


def install() -> None:
    """Let Triton's interpreter run libdevice (`tl.extra.cuda.libdevice`, and the
    `tl.extra.libdevice` stubs vLLM imports as `tldevice`): the functions in EMULATED as the GPU
    computes them, any other one an error naming it. Compiled kernels are not affected."""
    import importlib

    from triton.runtime import interpreter

    if getattr(interpreter._patch_lang, "libdevice_cpu", False):
        return
    modules = [importlib.import_module(name) for name in LIBDEVICE_MODULES]
    replacements = [(module, name, _interpreted(name)) for module in modules for name, member in vars(module).items()
                    if callable(member) and not name.startswith("_")
                    and getattr(member, "__module__", None) == module.__name__]
    patch_lang = interpreter._patch_lang

    def patch_lang_with_libdevice(fn):
        scope = patch_lang(fn)
        for module, name, function in replacements:
            scope.set_attr(module, name, function)
        return scope

    patch_lang_with_libdevice.libdevice_cpu = True
    interpreter._patch_lang = patch_lang_with_libdevice
