"""libdevice log1p on CPU (vllm_hotpaths.libdevice_cpu): the GPU's results, in and out of Triton's
interpreter. tests/data/libdevice_log1pf_gpu.json holds the GPU's libdevice results for inputs
where they are not the correctly rounded log1p (ci/gpu/libdevice-log1p.py --sample wrote it; the
same script compares all 2**32 fp32 inputs on the GPU)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from vllm_hotpaths import libdevice_cpu

SAMPLE = json.loads((Path(__file__).parent / "data" / "libdevice_log1pf_gpu.json").read_text())


def gpu_pairs() -> tuple[torch.Tensor, torch.Tensor]:
    pairs = torch.tensor(SAMPLE["input_bits_output_bits"], dtype=torch.int64)
    as_f32 = lambda bits: bits.to(torch.int32).view(torch.float32)  # noqa: E731
    return as_f32(pairs[:, 0]), as_f32(pairs[:, 1])


def test_the_emulation_returns_the_gpu_bits():
    x, gpu = gpu_pairs()
    assert torch.equal(libdevice_cpu.log1pf(x).view(torch.int32), gpu.view(torch.int32))


def test_the_sample_tells_log1p_rounded_differently_from_the_gpu():
    # The planted bug: CPU torch's own fp32 log1p (what the interpreter would use without the
    # emulation) is not the GPU's function.
    x, gpu = gpu_pairs()
    assert (torch.log1p(x).view(torch.int32) != gpu.view(torch.int32)).sum() > len(x) // 2


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs Triton's interpreter")
def test_an_interpreted_kernel_calling_libdevice_log1p_gets_the_gpu_bits():
    import triton
    import triton.language as tl

    @triton.jit
    def kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        inside = offsets < n
        tl.store(y_ptr + offsets, tl.extra.cuda.libdevice.log1p(tl.load(x_ptr + offsets, mask=inside)), mask=inside)

    x, gpu = gpu_pairs()
    y = torch.empty_like(x)
    kernel[(triton.cdiv(len(x), 1024),)](x, y, len(x), BLOCK=1024)
    assert torch.equal(y.view(torch.int32), gpu.view(torch.int32))


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs Triton's interpreter")
def test_a_libdevice_function_without_emulation_is_named():
    import triton
    import triton.language as tl

    @triton.jit
    def kernel(x_ptr):
        tl.store(x_ptr, tl.extra.cuda.libdevice.erfcinv(tl.load(x_ptr)))

    with pytest.raises(Exception, match="libdevice erfcinv on torch.float32 has no CPU emulation"):
        kernel[(1,)](torch.ones(1))


def test_kept_results_are_the_functions_bits_call_after_call():
    """The interpreter's memo of log1p: calls overlapping earlier ones (an interpreted sampling
    pass's blocks after its reference's batch), repeated patterns, NaNs and a table that fills
    and starts again all give the function's own bits."""
    x, _ = gpu_pairs()
    patterns = torch.cat([x, torch.rand(3000) * -1, torch.tensor([float("nan"), -0.0, 0.0])])
    memo = libdevice_cpu.Memo(libdevice_cpu.log1pf, limit=4000)
    want = libdevice_cpu.log1pf(patterns).view(torch.int32)
    for start, stop in ((0, 2500), (1000, 3000), (0, len(patterns)), (2000, 5000), (10, 20), (0, len(patterns))):
        got = memo(patterns[start:stop].numpy().reshape(-1, 1 if (stop - start) % 2 else 2))
        assert torch.equal(torch.from_numpy(got).view(torch.int32).flatten(), want[start:stop])
    assert (memo.inputs[1:] > memo.inputs[:-1]).all()  # sorted, each pattern once
