"""Logits-copy benchmark (CUDA): B in {64, 256} requests, V = 151,936, bf16 logits, one row per
request; a batch where no request needs processing (plain temperature-1 and greedy requests)
and one where a single request does (temperature 0.7). Timed side by side in one run: the fp32
copy alone (`empty_like(float32).copy_`, which upstream 0.22 pays on every step), device time
from `triton.testing.do_bench` (median, L2 flushed first); the 0.22.0 reference's
`apply_sampling_params` and the fast one per call (the batch layout given as NumPy arrays), host
work included as a decode step pays it (the fast path's is checking the layout and its flags):
wall time of a synchronized loop over logits copies together more than twice the L2 cache
(median of repeats; do_bench's events would hide host work behind its L2 flush), and the copy
alone timed the same way. "saved" is the
traffic the fast path does not move when it skips: each bf16 logit read (2 bytes) and its fp32
copy written (4 bytes).
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import torch

from vllm_hotpaths import registry
from vllm_hotpaths.logits_copy import RequestParams

BATCHES = (64, 256)
VOCAB = 151_936
KINDS = ("none needs processing", "one request needs processing")
SPREAD_BYTES = 200 * 2 ** 20  # logits copies per loop: more than twice an H100's 50 MB L2
REPEATS = 7


def wall_time(call, copies: list[tuple]) -> float:
    """Seconds per call: median over repeats of a synchronized loop over the copies."""
    for args in copies[:2]:
        call(*args)  # warm-up: compilation, allocator
    times = []
    for _ in range(REPEATS):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for args in copies:
            call(*args)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / len(copies))
    return statistics.median(times)


def _samplers(batch: int, kind: str, device):
    hotpath = registry.get("logits_copy")
    fast_factory = next(f for _, f, v in hotpath.candidates() if v == "0.22.0")
    samplers = [hotpath.reference("0.22.0")(VOCAB, batch, device), fast_factory(VOCAB, batch, device)]
    for slot in range(batch):
        params = RequestParams(temperature=0.0 if slot % 2 else 1.0, seed=slot)
        if kind == KINDS[1] and slot == batch // 2:
            params = RequestParams(temperature=0.7, seed=slot)
        for s in samplers:
            s.add_request(slot, [slot % VOCAB] * 4, [(slot + 1) % VOCAB] * 4, params)
    return samplers


def run(device: str = "cuda", quick: bool = False) -> list[dict]:
    if device != "cuda":
        return []  # the copy and the kernels are device work: timings mean something on a GPU
    import triton.testing

    gpu = torch.cuda.get_device_name()
    print(f"logits_copy on {gpu}: V={VOCAB}, bf16 logits, one row per request")
    print(f"{'B':>4} {'batch':30} {'copy: device':>12} {'wall':>8} | {'reference':>10} {'fast':>10} "
          f"{'ratio':>6} {'saved':>9}")
    records = []
    for batch in BATCHES[:1] if quick else BATCHES:
        gen = torch.Generator(device=device).manual_seed(batch)
        # host arrays, as a model runner holds its batch layout
        rows = np.arange(batch)
        layout = (rows, np.zeros(batch, np.int64), (rows + 1) % VOCAB, np.full(batch, 8))
        copies = [((torch.randn((batch, VOCAB), generator=gen, device=device) * 4).to(torch.bfloat16), *layout)
                  for _ in range(-(-SPREAD_BYTES // (batch * VOCAB * 2)))]
        args = copies[0]
        logits = args[0]
        copy_s = triton.testing.do_bench(
            lambda: torch.empty_like(logits, dtype=torch.float32).copy_(logits)) * 1e-3
        copy_wall_s = wall_time(lambda x, *_: torch.empty_like(x, dtype=torch.float32).copy_(x), copies)
        for kind in KINDS:
            reference, fast = _samplers(batch, kind, device)
            expected = reference.apply_sampling_params(*args)
            actual = fast.apply_sampling_params(*args)
            assert torch.equal(actual.float(), expected), (batch, kind)
            skipped = actual is logits
            ref_s = wall_time(reference.apply_sampling_params, copies)
            fast_s = wall_time(fast.apply_sampling_params, copies)
            saved = batch * VOCAB * (2 + 4) if skipped else 0
            print(f"{batch:>4} {kind:30} {copy_s * 1e6:10.1f}us {copy_wall_s * 1e6:6.1f}us | "
                  f"{ref_s * 1e6:8.1f}us {fast_s * 1e6:8.1f}us {ref_s / fast_s:5.1f}x {saved / 1e6:7.1f}MB")
            records.append({
                "hotpath": "logits_copy", "case": f"{kind}: 0.22.0 reference vs skip-unprocessed",
                "size": {"B": batch, "V": VOCAB}, "device": device, "gpu": gpu, "dtype": "bfloat16",
                "copy_s": copy_s, "copy_wall_s": copy_wall_s, "reference_s": ref_s, "fast_s": fast_s, "ratio": ref_s / fast_s,
                "copy_skipped": skipped, "bytes_saved": saved,
            })
    return records
