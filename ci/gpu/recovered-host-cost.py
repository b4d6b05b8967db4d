"""The host work of one `sample_recovered_tokens` call, upstream's and the plugin's, and of the
plugin's parts, on the staged vLLM (GPU machine: ci/gpu/stage-vllm.sh). On a CPU, started with
TRITON_INTERPRET=1, the kernels run interpreted: the script runs, its times mean nothing.

At each of the benchmark's shapes (`testing.bench.recovered_tokens`: B requests of k drafts over
V ids, without and with draft probabilities), host time of a call: the device synchronized first,
then the wall time until the call returns, before its kernels finish (what the engine's Python
thread spends on it). Each side and part is timed in turn, REPEATS times; medians in
microseconds, one JSON line per shape. The parts are those the plugin's function runs in order:
its noise tensor, the input checks, the noise draw, the output tensor with the shape's launch
plan (grid, slicing, scratch: kept per shape), the launch; then the plan's launch alone, which
under Triton 3.6 on CUDA relaunches the compiled kernel without Triton's argument binding
(`fast.LaunchPlan.launch`).

    python3 ci/gpu/recovered-host-cost.py [--repeats 200] [--device cuda] [--shape B K V]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="host work of sample_recovered_tokens, upstream and patched")
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--shape", type=int, nargs=3, metavar=("B", "K", "V"),
                        help="one shape instead of the benchmark's (a quick run on a CPU)")
    args = parser.parse_args(argv)
    import torch

    from vllm_hotpaths import registry, vllm_env
    from vllm_hotpaths.recovered_tokens import check_inputs
    from vllm_hotpaths.recovered_tokens.patch import draw_noise
    from vllm_hotpaths.recovered_tokens.reference import draft_pointer
    from vllm_hotpaths.testing.bench import recovered_tokens as bench

    device = torch.device(args.device)
    version = vllm_env.installed_version()
    module = bench.upstream_module()
    if module is None:
        return 1
    upstream, patched = bench.upstream_and_patched(module, version)
    metadata = bench.sampling_metadata({})
    kernel = registry.get("recovered_tokens").fast_for(version)(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for batch, drafts, vocab in [tuple(args.shape)] if args.shape else bench.SHAPES:
        for with_probs in (False, True):
            shape = bench.inputs(batch, drafts, vocab, with_probs, device)
            given = (shape["max_spec_len"], shape["num_draft_tokens"], shape["cu_num_draft_tokens"],
                     shape["draft_token_ids"], shape["draft_probs"], shape["target_probs"])
            q = shape["q"]
            tokens = shape["target_probs"].shape[0]
            parts = {
                "upstream sample_recovered_tokens": lambda: upstream(*given, metadata, device),
                "patched sample_recovered_tokens": lambda: patched(*given, metadata, device),
                "  noise tensor (torch.empty)": lambda: torch.empty((batch, vocab), dtype=torch.float32,
                                                                    device=device),
                "  check_inputs": lambda: check_inputs(*given, q),
                "  draw_noise": lambda: draw_noise(q, shape["num_draft_tokens"], {}),
                "  launch: out and the shape's plan": lambda: (
                    torch.empty_like(shape["draft_token_ids"]),
                    kernel.plan(batch, drafts, tokens, vocab, shape["draft_probs"] is None, shape["target_probs"])),
                "  launch (all of it)": lambda: kernel.launch(*given, q),
            }
            plan = kernel.plan(batch, drafts, tokens, vocab, shape["draft_probs"] is None, shape["target_probs"])
            launched = (torch.empty_like(shape["draft_token_ids"]), plan.best, plan.best_id, plan.arrived,
                        shape["cu_num_draft_tokens"], shape["draft_token_ids"],
                        draft_pointer(shape["draft_probs"], shape["target_probs"]), shape["target_probs"], q, vocab,
                        plan.lanes, plan.slices)
            parts["  launch: the plan's launch alone"] = lambda: plan.launch(*launched)
            for part in parts.values():  # warm-up: compilation, allocator
                part()
            times = {name: [] for name in parts}
            for _ in range(args.repeats):
                for name, part in parts.items():
                    sync()
                    start = time.perf_counter()
                    part()
                    times[name].append(time.perf_counter() - start)
            sync()
            line = {"batch": batch, "drafts": drafts, "vocab": vocab, "draft_probs": with_probs,
                    "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu", "vllm": version,
                    "host_us": {name: round(statistics.median(t) * 1e6, 1) for name, t in times.items()}}
            print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
