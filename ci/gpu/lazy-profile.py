"""Where a lazy sampling call's time goes, on the staged vLLM (GPU machine: ci/gpu/stage-vllm.sh,
with a bounded release's Python files overlaid, e.g. 0.33.0). B = 1,024 rows of V = 151,936 bf16
logits shaped as `testing.bench.lazy_gumbel` shapes them (gap 30, t 0.6: 5% of the ids drawn),
without a penalty and with presence 1.5. For each side: host time per call (50 calls queued
without a synchronization, divided), `triton.testing.do_bench` device time; then the lazy pass
with other block chunks per program (`lazy.TOPS_CHUNK`, `lazy.DRAW_CHUNK`) and the threshold
raised per block or per program (`lazy.THRESHOLD_PER_BLOCK`), and a torch profiler
table per kernel of the standalone pass and the patched `Sampler.sample`. The sides:
- the standalone lazy pass (`testing.bench.lazy_gumbel.lazy_type`, its parameters in device memory);
- vLLM's `Sampler.sample` patched, its pass forced lazy, on upstream's prebuilt arguments;
- `lazy_sample` and `fused_sample` on the arguments the patch hands them (vLLM's tensors: the
  slot parameters behind UVA views), `fused_sample` on them gathered first, `row_parameters` alone.

    python3 ci/gpu/lazy-profile.py
"""

from __future__ import annotations

import time

import numpy as np
import torch
import triton.testing
from torch.profiler import ProfilerActivity, profile

from vllm_hotpaths import registry, vllm_env
from vllm_hotpaths.logits_copy import RequestParams
from vllm_hotpaths.sampler_mrv2 import lazy, pass_choice, patch
from vllm_hotpaths.sampler_mrv2.fast import fused_sample, row_parameters
from vllm_hotpaths.testing.bench import lazy_gumbel, sampler_mrv2

SLOT_PARAMETERS = ("slots", "temperature", "seeds", "repetition", "frequency", "presence", "penalty_rows")
# (tops blocks, draw blocks, each tops block's top raising the threshold) a program
CHUNKS = ((1, 1, True), (4, 1, True), (8, 1, True), (4, 1, False), (8, 1, False), (16, 1, False), (8, 4, False))


def patch_arguments(sampler, built: dict) -> dict:
    """The keyword arguments the patched `sample` hands `lazy_sample` for this batch."""
    captured = {}
    real = patch.lazy_sample

    def spy(**arguments):
        captured.update(arguments)
        return real(**arguments)

    patch.lazy_sample = spy
    try:
        sampler.sample(**built)
    finally:
        patch.lazy_sample = real
    return captured


def host_and_device(call) -> tuple[float, float]:
    call()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(50):
        call()
    host = (time.perf_counter() - start) / 50
    torch.cuda.synchronize()
    return host, triton.testing.do_bench(call) * 1e-3


def main() -> None:
    batch, vocab, device = 1024, sampler_mrv2.VOCAB, "cuda"
    hotpath, installed = registry.get("sampler_mrv2"), vllm_env.installed_version()
    fused_type = registry.resolve(hotpath.fast[f"fused@{hotpath.reference_version_for(installed)}"][0])
    print(f"{torch.cuda.get_device_name()}, vLLM {installed}, B={batch}, V={vocab}, gap 30, t 0.6")
    logits = lazy_gumbel.shaped_logits(batch, vocab, 30.0, torch.Generator(device=device).manual_seed(37), device)
    rows = np.arange(batch)
    args = (logits, rows, np.zeros(batch, np.int64), (rows + 1) % vocab, np.full(batch, 8))
    patch.lazy_choice(True)
    for kind, knobs in (("no penalty", {}), ("presence 1.5", {"presence_penalty": 1.5})):
        params = [RequestParams(temperature=0.6, seed=1000 + slot, **knobs) for slot in range(batch)]
        standalone = lazy_gumbel.lazy_type(fused_type)(vocab, batch, device)
        for slot in range(batch):
            standalone.add_request(slot, [slot % vocab] * 4, [], params[slot])
        live, prebuilt = sampler_mrv2._upstream(batch, vocab, params, device)
        built = prebuilt(*args)
        live.sampler._hotpaths_choice = pass_choice.PassChoice("lazy")
        given = patch_arguments(live.sampler, built)
        gathered = dict(given, **dict(zip(SLOT_PARAMETERS, [t.clone() for t in row_parameters(
            *(given[name] for name in SLOT_PARAMETERS))])))
        calls = {"standalone lazy pass": lambda: standalone.sample(*args, processed=False),
                 "patched Sampler.sample, lazy": lambda: live.sampler.sample(**built),
                 "lazy_sample (patch's arguments)": lambda: lazy.lazy_sample(**given),
                 "fused_sample (patch's arguments)": lambda: fused_sample(**given),
                 "fused_sample (gathered)": lambda: fused_sample(**gathered),
                 "row_parameters": lambda: row_parameters(*(given[name] for name in SLOT_PARAMETERS))}
        for name, call in calls.items():
            host, device_time = host_and_device(call)
            print(f"{kind:12} {name:34} host {host * 1e6:7.1f} us  device {device_time * 1e6:7.1f} us", flush=True)
        chunks = lazy.TOPS_CHUNK, lazy.DRAW_CHUNK, lazy.THRESHOLD_PER_BLOCK
        try:
            for lazy.TOPS_CHUNK, lazy.DRAW_CHUNK, lazy.THRESHOLD_PER_BLOCK in CHUNKS:
                device_time = triton.testing.do_bench(lambda: lazy.lazy_sample(**given)) * 1e-3
                print(f"{kind:12} lazy_sample, {lazy.TOPS_CHUNK:2} tops blocks and {lazy.DRAW_CHUNK} draw blocks a "
                      f"program, threshold per {'block' if lazy.THRESHOLD_PER_BLOCK else 'program'}: "
                      f"device {device_time * 1e6:7.1f} us", flush=True)
        finally:
            lazy.TOPS_CHUNK, lazy.DRAW_CHUNK, lazy.THRESHOLD_PER_BLOCK = chunks
        for name in ("standalone lazy pass", "patched Sampler.sample, lazy"):
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiled:
                for _ in range(5):
                    calls[name]()
                torch.cuda.synchronize()
            print(f"{kind}, {name}, 5 calls:")
            print(profiled.key_averages().table(sort_by="cuda_time_total", row_limit=8, max_name_column_width=50))
        del live, standalone
    patch.lazy_choice(False)


if __name__ == "__main__":
    main()
