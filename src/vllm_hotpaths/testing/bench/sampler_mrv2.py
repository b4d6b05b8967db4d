"""Sampling-pass benchmark (CUDA): vLLM's own `Sampler.sample` (the installed release's kernel
sequence) against the fused fast path of the same release, B in {256, 1024} requests of one row,
V = 151,936, bf16 logits, every request seeded at temperature 1.0, without a penalty and with
presence 1.5. Timed side by side in one run:

- wall: per call, a synchronized loop over logits copies together more than twice the L2 cache
  (median of repeats), host work included as a decode step pays it: upstream's `sample` with its
  device-side arguments prebuilt (what its model runner hands it); the fast path with the batch
  layout as NumPy arrays (its own checks and one host-to-device copy included) and no processed
  logits asked for (the engine asks only in a processed-logprobs mode);
- device: `triton.testing.do_bench` (median, L2 flushed first) of the same calls, and of the
  fused kernel alone (its row table prebuilt, no host checks);
- floors: one read of the logits (`amax` over each row) and, for the noise, the fused kernel on a
  greedy batch (no noise drawn) against the same batch seeded;
- the reference of the same release, a secondary baseline (labelled `reference`);
- where the plugin's patch is written for the installed vLLM (0.22.x): the patched
  `Sampler.sample` itself (`plugin`), called with the same prebuilt arguments as upstream's: the
  fused kernel on vLLM's own state, no row table to build (upstream timed through the method the
  patch replaced).

Before timing, the ids of all three agree on the batch and on a copy with 5% NaN lanes (several
NaNs to a block: the block reduction's order decides where they land).

Without vLLM installed the upstream columns are empty. Memory: upstream's penalty state
(`output_bin_counts` and its prompt mask, allocated with the sampler) against the fast path's
compact counts with no request and with every request penalized.
"""

from __future__ import annotations

import inspect
import statistics
import time

import numpy as np
import torch

from vllm_hotpaths import registry, vllm_env
from vllm_hotpaths.logits_copy import RequestParams

BATCHES = (256, 1024)
VOCAB = 151_936
KINDS = {"temperature 1.0, no penalty": {}, "temperature 1.0, presence 1.5": {"presence_penalty": 1.5}}
SPREAD_BYTES = 200 * 2 ** 20  # logits copies per loop: more than twice an H100's 50 MB L2
REPEATS = 7


def wall_time(call, copies: list) -> float:
    """Seconds per call: median over repeats of a synchronized loop over the copies."""
    for args in copies[:2]:
        call(args)  # warm-up: compilation, allocator
    times = []
    for _ in range(REPEATS):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for args in copies:
            call(args)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / len(copies))
    return statistics.median(times)


def _tensor_bytes(obj) -> int:
    return sum(t.numel() * t.element_size() for t in vars(obj).values() if isinstance(t, torch.Tensor))


def _upstream(batch: int, vocab: int, params: list[RequestParams], device):
    """(the live sampler, a call taking one logits copy's prebuilt arguments), or None without vLLM."""
    if vllm_env.installed_version() is None:
        return None
    if plugin_applies():
        from vllm_hotpaths.sampler_mrv2 import patch

        patch.install_methods()  # before the requests arrive: its add_request flags them
    live = registry.get("sampler_mrv2").live_factory()(vocab, batch, device, max_model_len=64)
    for slot, p in enumerate(params):
        live.add_request(slot, [slot % vocab] * 4, [], p)
    names = inspect.signature(live.sampler.sample).parameters

    def prebuilt(logits, rows, local_pos, input_ids, pos):
        args = live.sampler_args(logits, rows.tolist(), local_pos.tolist(), input_ids.tolist(), pos.tolist())
        return {k: v for k, v in args.items() if k in names}

    live.sampler.num_speculative_tokens = 1
    return live, prebuilt


def plugin_applies() -> bool:
    """Whether the plugin's sampler_mrv2 patch is written for the installed vLLM."""
    installed = vllm_env.installed_version()
    return installed is not None and registry.get("sampler_mrv2").patch_needed(installed) is None


def upstream_sample():
    """vLLM's own `Sampler.sample`, whether or not the patch replaced it."""
    if plugin_applies():
        from vllm_hotpaths.sampler_mrv2 import patch

        if patch.UPSTREAM:
            return patch.UPSTREAM["sample"]
    return vllm_env.import_vllm("vllm.v1.worker.gpu.sample.sampler").Sampler.sample


def run(device: str = "cuda", quick: bool = False) -> list[dict]:
    if device != "cuda":
        return []  # the kernels are device work: timings mean something on a GPU
    return measure(device, BATCHES[:1] if quick else BATCHES, VOCAB)


def measure(device: str, batches, vocab: int) -> list[dict]:
    import triton.testing

    hotpath = registry.get("sampler_mrv2")
    installed = vllm_env.installed_version()
    version = hotpath.reference_version_for(installed)
    gpu = torch.cuda.get_device_name()
    print(f"sampler_mrv2 on {gpu}: vLLM {installed or 'not installed'} (reference {version}), V={vocab}, "
          f"bf16 logits, one row per request")
    print(f"{'B':>5} {'batch':31} {'upstream':>9} {'fused':>9} {'ratio':>6} | {'device: up':>10} {'fused':>8} "
          f"{'read':>7} {'greedy':>7} | {'reference':>9}")
    records = []
    for batch in batches:
        gen = torch.Generator(device=device).manual_seed(batch)
        rows = np.arange(batch)
        layout = (rows, np.zeros(batch, np.int64), (rows + 1) % vocab, np.full(batch, 8))
        copies = [((torch.randn((batch, vocab), generator=gen, device=device) * 4).to(torch.bfloat16), *layout)
                  for _ in range(-(-SPREAD_BYTES // (batch * vocab * 2)))]
        logits = copies[0][0]
        read_s = triton.testing.do_bench(lambda: torch.amax(logits, dim=-1)) * 1e-3
        for kind, knobs in KINDS.items():
            params = [RequestParams(temperature=1.0, seed=1000 + slot, **knobs) for slot in range(batch)]
            greedy = [RequestParams(temperature=0.0, seed=1000 + slot, **knobs) for slot in range(batch)]
            fast, reference, fast_greedy = (factory(vocab, batch, device) for factory in
                                            (hotpath.fast_for(version), hotpath.reference(version),
                                             hotpath.fast_for(version)))
            for slot in range(batch):
                for impl, p in ((fast, params[slot]), (reference, params[slot]), (fast_greedy, greedy[slot])):
                    impl.add_request(slot, [slot % vocab] * 4, [], p)
            want, _ = reference.sample(*copies[0], processed=False)
            got, _ = fast.sample(*copies[0], processed=False)
            assert torch.equal(got, want), (batch, kind, "fused vs reference")
            # Many NaNs to a block: where they meet, the block reduction's order decides the id.
            nans = copies[0][0].masked_fill(torch.rand(copies[0][0].shape, generator=gen, device=device) < 0.05,
                                            float("nan"))
            nan_args = (nans, *copies[0][1:])
            nan_want = reference.sample(*nan_args, processed=False)[0]
            assert torch.equal(fast.sample(*nan_args, processed=False)[0], nan_want), (batch, kind, "NaN rows")
            assert torch.equal(fast_greedy.sample(*nan_args, processed=False)[0],
                               fast_greedy.reference.sample(*nan_args, processed=False)[0]), (batch, kind, "NaN greedy")
            record = {"hotpath": "sampler_mrv2", "case": kind, "size": {"B": batch}, "vocab": vocab, "device": device,
                      "gpu": gpu, "dtype": "bfloat16", "vllm": installed, "reference_version": version,
                      "read_floor_s": read_s}
            fast_call = lambda a: fast.sample(*a, processed=False)  # noqa: E731
            record["fast_s"] = wall_time(fast_call, copies)
            record["fast_device_s"] = triton.testing.do_bench(lambda: fast_call(copies[0])) * 1e-3
            record["fast_processed_s"] = wall_time(lambda a: fast.sample(*a, processed=True), copies)
            # The device work alone: the kernel and the argmax over blocks, the row table prebuilt.
            table = fast._row_table(rows, layout[3], layout[1], layout[2])
            raw = fast.reference.SAMPLES_UNPROCESSED and not fast.needs[rows].any()
            record["fast_kernel_s"] = triton.testing.do_bench(
                lambda: fast.sample_rows(logits, table, raw, bool(knobs), 0, False)) * 1e-3
            record["greedy_device_s"] = triton.testing.do_bench(
                lambda: fast_greedy.sample(*copies[0], processed=False)) * 1e-3
            record["reference_s"] = wall_time(lambda a: reference.sample(*a, processed=False), copies)
            record["fast_state_bytes"] = fast.state.nbytes
            upstream = _upstream(batch, vocab, params, device)
            if upstream is not None:
                live, prebuilt = upstream
                built = [prebuilt(*a) for a in copies]
                vllm_sample = upstream_sample()
                up_call = lambda kwargs: vllm_sample(live.sampler, **kwargs)  # noqa: E731
                up_ids, _ = up_call(built[0])
                assert torch.equal(up_ids.view(-1).to(torch.int64), want), (batch, kind, "upstream vs reference")
                up_nan, _ = up_call(prebuilt(*nan_args))
                assert torch.equal(up_nan.view(-1).to(torch.int64), nan_want), (batch, kind, "upstream NaN rows")
                record["upstream_s"] = wall_time(up_call, built)
                record["upstream_device_s"] = triton.testing.do_bench(lambda: up_call(built[0])) * 1e-3
                record["upstream_state_bytes"] = _tensor_bytes(live.sampler.penalties_state)
                record["ratio"] = record["upstream_s"] / record["fast_s"]
                if plugin_applies():  # the patched Sampler.sample, called as the model runner calls it
                    patched = lambda kwargs: live.sampler.sample(**kwargs)  # noqa: E731
                    assert torch.equal(patched(built[0])[0].view(-1).to(torch.int64), want), (batch, kind, "plugin")
                    assert torch.equal(patched(prebuilt(*nan_args))[0].view(-1).to(torch.int64), nan_want), \
                        (batch, kind, "plugin NaN rows")
                    record["plugin_s"] = wall_time(patched, built)
                    record["plugin_device_s"] = triton.testing.do_bench(lambda: patched(built[0])) * 1e-3
                    record["plugin_ratio"] = record["upstream_s"] / record["plugin_s"]
                del live, built
            if upstream is None:
                record["case"] = f"{kind}: reference {version} vs fused"
                record["ratio"] = record["reference_s"] / record["fast_s"]
            else:
                record["case"] = f"{kind}: vLLM {installed} Sampler.sample vs fused"
            up = record.get("upstream_s")
            print(f"{batch:>5} {kind:31} {up * 1e3 if up else float('nan'):7.3f}ms {record['fast_s'] * 1e3:7.3f}ms "
                  f"{record.get('ratio', float('nan')):5.2f}x | "
                  f"{record.get('upstream_device_s', float('nan')) * 1e3:8.3f}ms "
                  f"{record['fast_device_s'] * 1e3:6.3f}ms {read_s * 1e3:5.3f}ms "
                  f"{record['greedy_device_s'] * 1e3:5.3f}ms | {record['reference_s'] * 1e3:7.3f}ms  "
                  f"(fused kernel alone {record['fast_kernel_s'] * 1e3:.3f}ms)"
                  + (f" | plugin {record['plugin_s'] * 1e3:.3f}ms {record['plugin_ratio']:.2f}x, device "
                     f"{record['plugin_device_s'] * 1e3:.3f}ms" if "plugin_s" in record else ""))
            records.append(record)
            del fast, reference, fast_greedy
            torch.cuda.empty_cache()
    for r in records:
        print(f"state bytes, B={r['size']['B']} {r['case']}: upstream {r.get('upstream_state_bytes')}, "
              f"fused {r['fast_state_bytes']}")
    return records
