"""Host time per launch of the fused penalty kernels, Triton's `kernel[grid]` against
`triton_launch.Relauncher`, and GPU time of the relaunched (unspecialized) kernels against the same
kernels jitted with Triton's default specialization. GPU machine only; no vLLM needed.

Host time: a tight loop of launches on a one-program grid (the same host path as any grid, and
the GPU keeps up, so the loop measures the host). GPU time: `triton.testing.do_bench` on the
decode step's real grid. B = 128 rows, V = 151,936, L = 5,000 output ids, 16 prompt ids.

    python3 ci/gpu/launch-cost.py
"""

import time

import torch
import triton
from triton.testing import do_bench

from vllm_hotpaths.penalties import fused
from vllm_hotpaths.triton_launch import Relauncher

B, V, L, P = 128, 151_936, 5_000, 16
device = "cuda"
logits = torch.randn(B, V, device=device)
output = torch.randint(0, V, (B, L + 64), device=device)[:, :L]
prompt = torch.randint(0, V, (B, P), device=device)
new = torch.stack([torch.full((B,), L - 1), torch.randint(0, V, (B,))]).to(device)
presence, frequency, repetition = (torch.full((B,), 1.5, device=device), torch.zeros(B, device=device),
                                   torch.ones(B, device=device))
counts = torch.zeros(B * V, dtype=torch.int32, device=device)
count_args = (counts, output, *output.stride(), L, prompt, *prompt.stride(), P, new, B, V, fused.COUNT_BLOCK)
penalize_args = (logits, counts, presence, frequency, repetition, V, fused.PENALIZE_BLOCK)
kernels = {"_count_tokens": (fused._count_tokens, {}, count_args, (B, triton.cdiv(L, fused.COUNT_BLOCK))),
           "_penalize": (fused._penalize, {"enable_fp_fusion": False}, penalize_args,
                         (B, triton.cdiv(V, fused.PENALIZE_BLOCK)))}


def host_us(launch, calls: int = 5000) -> float:
    for _ in range(50):
        launch()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        launch()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, Triton {triton.__version__}")
for name, (kernel, options, args, grid) in kernels.items():
    relaunch = Relauncher(kernel, **options)
    jit = host_us(lambda: kernel[(1, 1)](*args, **options))
    fast = host_us(lambda: relaunch((1, 1), *args))
    specialized = triton.jit(kernel.fn)  # Triton's default specialization: values and alignment
    gpu_relaunched = do_bench(lambda: relaunch(grid, *args)) * 1e3
    gpu_specialized = do_bench(lambda: specialized[grid](*args, **options)) * 1e3
    print(f"{name}: host {jit:.1f} us per kernel[grid], {fast:.1f} us relaunched ({jit / fast:.2f}x); "
          f"GPU {gpu_relaunched:.1f} us unspecialized, {gpu_specialized:.1f} us specialized")
