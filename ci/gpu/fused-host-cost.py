"""The host work of one `Sampler.sample` call, upstream's and the sampler_mrv2 patch's, and of the
patch's parts, on vLLM 0.22.x's own sampler (GPU machine; the staged vLLM: ci/gpu/stage-vllm.sh).

B requests (seeded temperature 1.0, no penalty or presence 1.5), V = 151,936, bf16 logits, the
sampler of `testing.live.sampler_mrv2` with upstream's dense tables. Host time of a call: the
device synchronized first, then the wall time until the call returns, before its kernels finish
(what the engine's Python thread spends on it). Each side and part is timed in turn, REPEATS
times; medians in microseconds, one JSON line per batch and kind.

    python3 ci/gpu/fused-host-cost.py [--batch 1024] [--repeats 200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="host work of Sampler.sample, upstream and patched")
    parser.add_argument("--batch", type=int, nargs="+", default=[1024])
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args(argv)
    import torch

    from vllm_hotpaths import registry, vllm_env
    from vllm_hotpaths.logits_copy import RequestParams
    from vllm_hotpaths.sampler_mrv2 import fast, patch

    patch.install_methods()
    vocab = 151_936
    for batch in args.batch:
        for kind, presence in (("no penalty", 0.0), ("presence 1.5", 1.5)):
            live = registry.get("sampler_mrv2").live_factory()(vocab, batch, "cuda")
            for slot in range(batch):
                live.add_request(slot, [slot % 1000, 7], [], RequestParams(temperature=1.0, seed=slot,
                                                                         presence_penalty=presence))
            sampler = live.sampler
            logits = torch.randn(batch, vocab, device="cuda", dtype=torch.bfloat16)
            call = live.sampler_args(logits, list(range(batch)), [0] * batch, [5] * batch, [3] * batch)
            call = {k: call[k] for k in ("logits", "expanded_idx_mapping", "idx_mapping_np", "pos", "input_ids",
                                         "expanded_local_pos")}
            upstream = patch.UPSTREAM["sample"]
            patched = type(sampler).sample
            fused = patch.fused_arguments(sampler, **call)
            n, blocks = batch, -(-vocab // 1024)
            block_ids = torch.empty((n, blocks), dtype=torch.int64, device="cuda")
            block_max = torch.empty((n, blocks), dtype=torch.float32, device="cuda")
            parts = {
                "upstream Sampler.sample": lambda: upstream(sampler, **call),
                "patched Sampler.sample": lambda: patched(sampler, **call),
                "  coverage checks": lambda: (patch.loadable(sampler, logits),
                                              sampler._hotpaths_fused[call["idx_mapping_np"]].all()),
                "  fused_arguments": lambda: patch.fused_arguments(sampler, **call),
                "  fused_sample": lambda: fast.fused_sample(**fused),
                "    two torch.empty": lambda: (torch.empty((n, blocks), dtype=torch.int64, device="cuda"),
                                                torch.empty((n, blocks), dtype=torch.float32, device="cuda")),
                "    argmax and gather": lambda: block_ids.gather(-1, block_max.argmax(-1, keepdim=True)).view(-1),
            }
            times = {name: [] for name in parts}
            for _ in range(args.repeats):
                for name, part in parts.items():
                    torch.cuda.synchronize()
                    start = time.perf_counter()
                    part()
                    times[name].append(time.perf_counter() - start)
            torch.cuda.synchronize()
            print(json.dumps({"device": torch.cuda.get_device_name(), "vllm": vllm_env.installed_version(),
                              "batch": batch, "kind": kind, "repeats": args.repeats,
                              "host_us": {k: round(statistics.median(v) * 1e6, 1) for k, v in times.items()}}),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
