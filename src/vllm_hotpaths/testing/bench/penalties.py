"""Penalties benchmark: per-step cost of the reference and the fast path as outputs grow.

A batch of B requests whose outputs hold L tokens decodes one more token per row per step; each
timed step is the sampler's work for that step. On CPU the timed work is building the output
token tensor (the part upstream rebuilds from lists); on CUDA it is the whole penalties call on
`[B, V]` fp32 logits, host-to-device copy and kernels included, timed to GPU completion. When vLLM
is installed, its own builder is timed in the same run as a second baseline.
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import torch

from vllm_hotpaths import registry
from vllm_hotpaths.tracked_list import TrackedTokenList

BATCH = 128
VOCAB = 151_936
LENGTHS = (1_000, 4_000, 12_000, 32_000)


def _median_step(run_step, grow, steps: int, sync) -> float:
    times = []
    for _ in range(steps):
        grow()
        sync()
        start = time.perf_counter()
        run_step()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _case(device: str, length: int, steps: int, impls: dict) -> dict[str, float]:
    rng = np.random.default_rng(length)
    rows = [TrackedTokenList(rng.integers(0, VOCAB, length).tolist()) for _ in range(BATCH)]
    next_ids = rng.integers(0, VOCAB, BATCH).tolist()
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def grow():
        for row, token in zip(rows, next_ids):
            row.append(token)

    prompt = torch.full((BATCH, 16), VOCAB, dtype=torch.int64, device=device)
    presence = torch.full((BATCH,), 1.5, device=device)
    frequency = torch.zeros(BATCH, device=device)
    repetition = torch.full((BATCH,), 1.1, device=device)
    logits = torch.randn((BATCH, VOCAB), device=device)
    scratch = logits.clone()
    results = {}
    for name, factory in impls.items():
        impl = factory(VOCAB, device, None)
        if device == "cpu":
            step = lambda impl=impl: impl.output_tokens(rows)  # noqa: E731
        else:
            def step(impl=impl):
                scratch.copy_(logits)
                impl.apply_all_penalties(scratch, prompt, presence, frequency, repetition, rows)
        step()  # warm-up; the fast path claims its rows here
        results[name] = _median_step(step, grow, steps, sync)
    return results


def run(device: str = "cpu", quick: bool = False) -> list[dict]:
    hotpath = registry.get("penalties")
    impls = {"reference": hotpath.reference(), "fast": hotpath.candidates()[0][1]}
    try:
        impls["vllm"] = registry.resolve(hotpath.live)
        impls["vllm"](VOCAB, "cpu", None)
    except ImportError:
        del impls["vllm"]
    lengths = LENGTHS[:2] if quick else LENGTHS
    records = []
    for length in lengths:
        steps = 5 if quick else 20
        timed = _case(device, length, steps, impls)
        size = {"B": BATCH, "V": VOCAB, "L": length}
        what = "output token tensor" if device == "cpu" else "apply_all_penalties, end to end"
        for baseline, label in (("reference", "frozen reference"), ("vllm", "installed vLLM")):
            if baseline in timed:
                records.append({
                    "hotpath": "penalties",
                    "case": f"{what} ({label} vs fast)",
                    "size": size,
                    "device": device,
                    "reference_s": timed[baseline],
                    "fast_s": timed["fast"],
                    "ratio": timed[baseline] / timed["fast"],
                })
    return records
