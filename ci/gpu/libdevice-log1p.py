"""vllm_hotpaths.libdevice_cpu.log1pf against the GPU's libdevice `log1p`, on every fp32 bit pattern.

Run on a GPU machine: `PYTHONPATH=src python ci/gpu/libdevice-log1p.py [--sample FILE]`. A Triton kernel computes
libdevice log1p compiled for the GPU; the emulation runs on the same inputs (torch fp64 on CUDA,
IEEE arithmetic as on CPU). Prints the device, the number of bit patterns compared, and every
mismatch (NaNs compare by bits too); exits 1 on any mismatch. `--sample FILE` writes the GPU's
results for inputs where libdevice is not the correctly rounded log1p, and for special values
(tests/data/libdevice_log1pf_gpu.json is such a file: the CPU tests replay it).
"""

from __future__ import annotations

import json
import sys
import time

import torch
import triton
import triton.language as tl

from vllm_hotpaths.libdevice_cpu import log1pf

CHUNK = 1 << 26


@triton.jit
def _log1p_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < n
    x = tl.load(x_ptr + offsets, mask=inside)
    tl.store(y_ptr + offsets, tl.extra.cuda.libdevice.log1p(x), mask=inside)


def main() -> int:
    if not torch.cuda.is_available():
        print("libdevice-log1p: no CUDA device")
        return 1
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  triton {triton.__version__}")
    started, compared, total, finite, mismatches = time.monotonic(), 0, 0, 0, []
    for start in range(0, 1 << 32, CHUNK):
        bits = torch.arange(start, start + CHUNK, dtype=torch.int64, device="cuda")
        x = (((bits + 2**31) & 0xFFFFFFFF) - 2**31).to(torch.int32).view(torch.float32)
        gpu = torch.empty_like(x)
        _log1p_kernel[(triton.cdiv(CHUNK, 1024),)](x, gpu, CHUNK, BLOCK=1024)
        emulated = log1pf(x)
        differ = (gpu.view(torch.int32) != emulated.view(torch.int32)).nonzero().flatten()
        compared += CHUNK
        total += differ.numel()
        finite += (gpu[differ].isfinite() | emulated[differ].isfinite()).sum().item()
        for i in differ[:5].tolist():
            mismatches.append((x[i].view(torch.int32).item(), x[i].item(), gpu[i].item(), emulated[i].item()))
    if "--sample" in sys.argv:
        write_sample(sys.argv[sys.argv.index("--sample") + 1])
    print(f"compared {compared} fp32 bit patterns in {time.monotonic() - started:.1f} s: {total} mismatches "
          f"({finite} where either side is finite)")
    for bits, value, gpu, emulated in mismatches[:40]:
        print(f"  bits {bits}: x={value} gpu={gpu} emulated={emulated}")
    return 1 if total else 0


def write_sample(path: str, count: int = 4000) -> None:
    """GPU results where libdevice differs from log1p rounded once from fp64, drawn over
    [-1, 0] (where vLLM calls it) and beyond, plus zeros, subnormals, -1, infinities and NaN."""
    generator = torch.Generator(device="cuda").manual_seed(0)
    u = torch.rand(1 << 24, generator=generator, device="cuda")
    x = torch.cat([-u, -u * 2.0 ** -20, u * 8 - 4])
    gpu = torch.empty_like(x)
    _log1p_kernel[(triton.cdiv(x.numel(), 1024),)](x, gpu, x.numel(), BLOCK=1024)
    inexact = (gpu != torch.log1p(x.double()).float()).nonzero().flatten()
    picked = x[inexact[torch.randperm(inexact.numel(), generator=generator, device="cuda")[:count]]]
    special = torch.tensor([0.0, -0.0, 1e-40, -1e-40, -1.0, -0.5, 1.0, float("inf"), float("-inf"),
                            float("nan"), -2.0, -4.6566e-10, 3e38], device="cuda")
    x = torch.cat([picked, special])
    gpu = torch.empty_like(x)
    _log1p_kernel[(triton.cdiv(x.numel(), 1024),)](x, gpu, x.numel(), BLOCK=1024)
    pairs = list(zip(x.view(torch.int32).tolist(), gpu.view(torch.int32).tolist()))
    with open(path, "w") as out:
        json.dump({"device": torch.cuda.get_device_name(), "triton": triton.__version__,
                   "function": "libdevice log1p (fp32)", "input_bits_output_bits": pairs}, out)
        out.write("\n")
    print(f"wrote {len(pairs)} GPU results ({inexact.numel()} of {3 << 24} drawn inputs not correctly rounded) to {path}")


if __name__ == "__main__":
    sys.exit(main())
