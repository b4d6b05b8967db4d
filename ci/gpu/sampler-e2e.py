"""The sampler_mrv2 patch inside a real Model Runner V2 engine: plugin against upstream in
alternating pairs on one warm engine, GPU time per decode step, and generated ids compared.
GPU machine only; needs vLLM 0.22.x (on our GPU machine, the staged one: ci/gpu/stage-vllm.sh).

One in-process engine (VLLM_ENABLE_V1_MULTIPROCESSING=0) on a Qwen3 with dummy weights in
Qwen3-0.6B's shape (hidden 1024, 28 layers, 16 heads, 8 KV heads, head_dim 128, vocabulary
151,936, tied embeddings), bf16, Triton attention, full CUDA graphs for decode without
torch.compile (the sampler runs outside the graph), `max_num_seqs` = the largest batch. The plugin
installs the patch as vLLM loads it (VLLM_HOTPATHS=sampler_mrv2 and a validated record naming this
version, written here: this script measures, it does not validate); the upstream side puts vLLM's
own `Sampler.sample` back for its runs, so both sides share the engine, its graphs and its memory.

- ids: a batch of B_EQ requests (greedy and seeded temperature 0.8 alternating; no penalty,
  presence 1.5, frequency 0.7 + repetition 1.2, and a top-k 20 request the patch leaves to
  upstream; lengths that differ, so the batch shrinks) on each side: every request's ids equal.
- time: for each batch size and {no penalty, presence 1.5} (seeded temperature 1.0, LENGTH tokens),
  PAIRS pairs, the side that goes first alternating; in each run torch.profiler records a window
  of WINDOW decode steps in the middle (steps counted by calls to `execute_model`), and the GPU
  time per step is the sum of the device rows' self time over the window; then the same batch runs
  again without the profiler for the wall time (whole `generate`, prefill included, per generated
  token). Reported: median per side, the plugin's change in GPU time per step and the median of
  the pairs' wall-time changes. The timed ids of both sides are compared too.
- tables: with `--tables dense` (as above) the engine keeps upstream's dense penalty tables, so
  the upstream side is vLLM's own code throughout. With `--tables compact` the engine holds the
  patch's compact tables: only the plugin runs, and the script reports the KV-cache blocks vLLM
  sized after profiling, the penalty tables' bytes at start and their peak in each run, and (with
  `--compare` the dense run's JSON) whether every id equals the dense run's upstream ids.

    python3 ci/gpu/sampler-e2e.py [--batches 128 1024] [--length 160] [--window 40] [--pairs 3]
                                  [--tables dense|compact] [--compare DENSE_JSON] [--json PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from vllm_hotpaths.testing.throughput import KV_BYTES_PER_TOKEN, QWEN3_06B  # Qwen3-0.6B's shape

PROMPT_LEN = 16
KINDS = {"no penalty": {}, "presence 1.5": {"presence_penalty": 1.5}}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="sampler_mrv2 plugin vs upstream on a Model Runner V2 engine")
    parser.add_argument("--batches", type=int, nargs="+", default=[128, 1024])
    parser.add_argument("--length", type=int, default=160, help="generated tokens per timed request")
    parser.add_argument("--window", type=int, default=40, help="decode steps profiled per run")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--equal-batch", type=int, default=96, help="requests of the ids batch")
    parser.add_argument("--gpu-memory", type=float, default=0.6)
    parser.add_argument("--tables", choices=("dense", "compact"), default="dense")
    parser.add_argument("--compare", help="a --tables dense run's JSON (with --tables compact)")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if min(*args.batches, args.length, args.window, args.pairs, args.equal_batch) <= 0:
        parser.error("sizes must be positive")
    if args.compare and args.tables != "compact":
        parser.error("--compare goes with --tables compact")
    if args.length < args.window + 40:
        parser.error(f"--length ({args.length}) must exceed --window ({args.window}) by 40 steps at least")
    return args


def profile_helpers():
    """StepWindow, profile_rows and wrap from ci/gpu/mrv2-profile.py (one way to count steps)."""
    spec = importlib.util.spec_from_file_location("mrv2_profile", Path(__file__).with_name("mrv2-profile.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def equality_params(count: int) -> list[dict]:
    mixes = ({}, {"presence_penalty": 1.5}, {"frequency_penalty": 0.7, "repetition_penalty": 1.2})
    params = []
    for i in range(count):
        p = dict(max_tokens=24 + (i * 7) % 40, ignore_eos=True, **mixes[i % 3])
        p.update({"temperature": 0.0} if i % 2 else {"temperature": 0.8, "seed": 7000 + i})
        if i % 17 == 5:
            p.update(top_k=20, temperature=0.8, seed=9000 + i)
        params.append(p)
    return params


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ["VLLM_HOTPATHS"] = "sampler_mrv2"
    import numpy as np
    import torch
    import vllm

    validated = Path(tempfile.mkdtemp(), "validated.json")
    validated.write_text(json.dumps({"sampler_mrv2": {vllm.__version__: {
        "devices": ["cuda"], "profile": "none: written by sampler-e2e.py to measure"}}}))
    os.environ["VLLM_HOTPATHS_VALIDATED"] = str(validated)
    from torch.profiler import ProfilerActivity, profile
    from transformers import Qwen3Config
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from vllm_hotpaths import plugin, runners
    from vllm_hotpaths.sampler_mrv2 import patch

    helpers = profile_helpers()
    model = Path(tempfile.mkdtemp(), "qwen3-0.6b-shape")
    Qwen3Config(**QWEN3_06B).save_pretrained(model)
    top = max(args.batches)
    dense = args.tables == "dense"
    with patch.penalty_tables("dense") if dense else contextlib.nullcontext():
        llm = LLM(model=str(model), load_format="dummy", skip_tokenizer_init=True, seed=0, dtype="bfloat16",
                  attention_config={"backend": "TRITON_ATTN"}, max_num_seqs=top,
                  max_model_len=PROMPT_LEN + args.length + 64, gpu_memory_utilization=args.gpu_memory,
                  compilation_config={"mode": 0, "cudagraph_mode": "FULL_DECODE_ONLY",
                                      "cudagraph_capture_sizes": sorted(set(args.batches))})
    runner = runners.runner_of(llm.llm_engine.vllm_config)
    installed = plugin.installed().get("sampler_mrv2")
    print(f"{torch.cuda.get_device_name()}, vLLM {vllm.__version__}, torch {torch.__version__}, "
          f"{runners.TITLES[runner]}; plugin installed: {installed}; penalty tables: {args.tables}", flush=True)
    if runner != "mrv2" or not installed:
        print("sampler-e2e: needs a Model Runner V2 engine with the patch installed", file=sys.stderr)
        return 1
    gc.unfreeze()  # vLLM freezes its start-up objects out of gc.get_objects(); frozen again below
    states = [o for o in gc.get_objects() if type(o).__name__ == "PenaltiesState"]
    gc.freeze()
    if len(states) != 1 or (patch.table_of(states[0]) is None) != dense:
        print(f"sampler-e2e: expected one PenaltiesState with {args.tables} tables", file=sys.stderr)
        return 1
    penalties = states[0]

    def table_bytes() -> int:
        return penalties.output_bin_counts.nbytes + penalties.prompt_bin_mask.nbytes

    memory = {"num_gpu_blocks": llm.llm_engine.vllm_config.cache_config.num_gpu_blocks,
              "block_size": llm.llm_engine.vllm_config.cache_config.block_size,
              "kv_bytes_per_token": KV_BYTES_PER_TOKEN, "table_bytes_at_start": table_bytes(), "table_bytes_peak": {},
              "torch_reserved_at_start": torch.cuda.memory_reserved(), "device_used_at_start": used_memory()}
    print(f"KV cache: {memory['num_gpu_blocks']} blocks of {memory['block_size']} tokens; after start-up: penalty "
          f"tables {memory['table_bytes_at_start']:,} B, torch reserved {memory['torch_reserved_at_start']:,} B, "
          f"device memory used {memory['device_used_at_start']:,} B", flush=True)
    peak = [0]
    staged = type(penalties).apply_staged_writes

    def apply_staged_writes(self):
        staged(self)
        peak[0] = max(peak[0], table_bytes())

    type(penalties).apply_staged_writes = apply_staged_writes
    sampler_type = patch.vllm_env.import_vllm(patch.SAMPLER).Sampler
    patched = sampler_type.sample
    sides = ("upstream", "plugin") if dense else ("plugin",)

    def side(name: str) -> None:
        sampler_type.sample = patched if name == "plugin" else patch.UPSTREAM["sample"]

    rng = np.random.default_rng(0)

    def prompts(count: int):
        return [TokensPrompt(prompt_token_ids=rng.integers(0, 151_000, PROMPT_LEN).tolist()) for _ in range(count)]

    def ids_of(outputs):
        return [list(o.outputs[0].token_ids) for o in outputs]

    # ids: the same requests on each side
    eq_prompts, eq_params = prompts(args.equal_batch), equality_params(args.equal_batch)
    got = {}
    for name in sides:
        side(name)
        got[name] = ids_of(llm.generate(eq_prompts, [SamplingParams(**p) for p in eq_params], use_tqdm=False))
    differ = [i for i, (a, b) in enumerate(zip(got[sides[0]], got["plugin"])) if a != b]
    print(f"ids batch: {args.equal_batch} requests (greedy and seeded, penalties, top-k), "
          f"{sum(map(len, got['plugin']))} tokens; requests whose ids differ between the sides: "
          f"{differ or 'none'}", flush=True)

    first = args.length // 2 - args.window // 2
    window = helpers.StepWindow(first, args.window, torch.cuda.synchronize)
    model_runner = importlib.import_module("vllm.v1.worker.gpu.model_runner").GPUModelRunner
    helpers.wrap(model_runner, "execute_model", helpers.counted(window))
    with profile(activities=[ProfilerActivity.CUDA]):  # CUPTI's own start-up outside any window
        torch.ones(1, device="cuda").add_(1)
        torch.cuda.synchronize()
    results, timed_differ, timed_ids = [], 0, {}
    for batch in args.batches:
        batch_prompts = prompts(batch)
        for kind, extra in KINDS.items():
            params = [SamplingParams(max_tokens=args.length, ignore_eos=True, temperature=1.0, seed=100 + i, **extra)
                      for i in range(batch)]
            runs = {name: [] for name in sides}
            seen = {}
            peak[0] = 0
            for pair in range(args.pairs + 1):  # pair 0 warms both sides up, untimed
                for name in (sides if pair % 2 == 0 else sides[::-1]):
                    side(name)
                    profiler = profile(activities=[ProfilerActivity.CUDA])
                    window.arm(profiler)
                    outputs = llm.generate(batch_prompts, params, use_tqdm=False)
                    if window.seconds is None:
                        print("sampler-e2e: a run ended before its window", file=sys.stderr)
                        return 1
                    seen.setdefault(name, ids_of(outputs))
                    gpu_us = sum(r["self_device_us"] for r in helpers.profile_rows(profiler.key_averages())
                                 if r["device"])
                    torch.cuda.synchronize()
                    start = time.perf_counter()
                    llm.generate(batch_prompts, params, use_tqdm=False)  # no profiler: the wall time
                    torch.cuda.synchronize()
                    if pair:
                        runs[name].append({"gpu_ms": gpu_us / args.window / 1e3,
                                           "wall_ms": (time.perf_counter() - start) / args.length * 1e3})
            timed_differ += sum(a != b for a, b in zip(seen[sides[0]], seen["plugin"]))
            timed_ids[f"{batch} {kind}"] = hashlib.sha256(json.dumps(seen[sides[0]]).encode()).hexdigest()
            memory["table_bytes_peak"][f"{batch} {kind}"] = peak[0]
            row = {"batch": batch, "kind": kind, "runs": runs, "table_bytes_peak": peak[0]}
            for name in runs:
                row[f"{name}_gpu_ms"] = statistics.median(r["gpu_ms"] for r in runs[name])
                row[f"{name}_wall_ms"] = statistics.median(r["wall_ms"] for r in runs[name])
            line = (f"B={batch:5} {kind:13} GPU ms/step " + " ".join(f"{n} {row[f'{n}_gpu_ms']:.3f}" for n in sides))
            if dense:
                row["gpu_change"] = row["plugin_gpu_ms"] / row["upstream_gpu_ms"] - 1
                row["wall_change"] = statistics.median(p["wall_ms"] / u["wall_ms"] - 1
                                                       for u, p in zip(runs["upstream"], runs["plugin"]))
                line += (f" ({row['gpu_change']:+.2%}); wall ms per generated token, prefill included, no "
                         f"profiler {row['upstream_wall_ms']:.3f} / {row['plugin_wall_ms']:.3f} (median pair "
                         f"{row['wall_change']:+.2%})")
            results.append(row)
            print(f"{line}; GPU ms/step by run {[[round(r['gpu_ms'], 3) for r in runs[n]] for n in sides]}; "
                  f"penalty tables at most {peak[0]:,} B", flush=True)
    side("plugin")
    print(f"timed requests whose ids differ between the sides: {timed_differ}", flush=True)
    compared = compare(args.compare, got["plugin"], timed_ids, memory) if args.compare else {}
    if args.json:
        Path(args.json).write_text(json.dumps({
            "device": torch.cuda.get_device_name(), "vllm": vllm.__version__, "torch": torch.__version__,
            "model": QWEN3_06B, "tables": args.tables, "length": args.length,
            "window": {"first_step": first, "steps": args.window}, "memory": memory,
            "ids_batch": {"requests": args.equal_batch, "differ": differ, "ids": got[sides[0]]},
            "timed_ids_sha256": timed_ids, "timed_differ": timed_differ, "against_dense": compared,
            "results": results}, indent=1) + "\n")
    return 1 if differ or timed_differ or compared.get("differ") else 0


def used_memory() -> int:
    """Device memory in use (all processes), as the driver reports it."""
    import torch

    free, total = torch.cuda.mem_get_info()
    return total - free


def compare(path: str, eq_ids, timed_ids: dict, memory: dict) -> dict:
    """This compact-table run's plugin ids and KV blocks against a dense-table run's upstream side."""
    other = json.loads(Path(path).read_text())
    differ = [i for i, (a, b) in enumerate(zip(other["ids_batch"]["ids"], eq_ids)) if a != b]
    timed = [k for k, v in timed_ids.items() if other["timed_ids_sha256"].get(k) != v]
    blocks = memory["num_gpu_blocks"] - other["memory"]["num_gpu_blocks"]
    kv_bytes = blocks * memory["block_size"] * memory["kv_bytes_per_token"]
    print(f"against the dense-table run's upstream ids: ids batch requests that differ {differ or 'none'}, "
          f"timed runs that differ {timed or 'none'}; KV cache {blocks:+} blocks ({kv_bytes:+,} B); after start-up: "
          f"dense tables {other['memory']['table_bytes_at_start']:,} B, compact {memory['table_bytes_at_start']:,} B, "
          f"device memory used {memory['device_used_at_start'] - other['memory']['device_used_at_start']:+,} B",
          flush=True)
    return {"differ": bool(differ or timed), "ids_batch_differ": differ, "timed_differ": timed,
            "kv_blocks_gained": blocks, "kv_bytes_gained": kv_bytes,
            "device_used_change_at_start": memory["device_used_at_start"] - other["memory"]["device_used_at_start"]}


if __name__ == "__main__":
    sys.exit(main())
