"""Where the fused sampling pass's Triton kernel compiles: during vLLM's start-up (the plugin's
`sampler_mrv2.patch.compile_variants`, on the sampler's first call) or on the first requests it
samples. GPU machine only; vLLM 0.22.x (the staged one: ci/gpu/stage-vllm.sh).

One in-process engine (VLLM_ENABLE_V1_MULTIPROCESSING=0) on vLLM's defaults but the attention
backend (TRITON_ATTN) and the KV cache size: a Qwen3 with dummy weights in Qwen3-0.6B's shape
(`vllm-hotpaths throughput`'s config, at a fixed path), bf16. Triton's cache is a fresh folder, so
nothing comes from an earlier process. The plugin installs sampler_mrv2 as vLLM loads it (a
validated record for this version written here: this script measures, it does not validate);
`--before` replaces `compile_variants` by a no-op first (the plugin as it was).

Reported, as one JSON line: the compiled variants of the patch's four kernels (fused pass,
penalties on upstream's path, admission, sampled-token counts) after start-up, after a first
`generate` of B seeded requests without a penalty, after one with presence 1.5 and after one with
presence 1.5 and top-p 0.9 (upstream's path, the patch's tables); each variant compiled after
start-up is a Triton compile on a request's path. And the wall time of those first calls and of
the same calls again.

    python3 ci/gpu/warmup-compile.py [--before] [--batch 256] [--length 32]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from vllm_hotpaths.testing.throughput import DEFAULT_MODEL_DIR


def compiled(kernel) -> int:
    """The variants Triton holds compiled for `kernel` in this process (every device)."""
    return sum(len(entry[0]) for entry in kernel.device_caches.values())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="where the fused sampling kernel compiles")
    parser.add_argument("--before", action="store_true", help="no compile_variants (the plugin before it)")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--length", type=int, default=32, help="generated tokens per request")
    parser.add_argument("--model-dir", default=str(DEFAULT_MODEL_DIR) + "-warmup")
    args = parser.parse_args(argv)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ["VLLM_HOTPATHS"] = "sampler_mrv2"
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton-")
    import torch
    import vllm

    validated = Path(tempfile.mkdtemp(), "validated.json")
    validated.write_text(json.dumps({"sampler_mrv2": {vllm.__version__: {
        "devices": ["cuda"], "profile": "none: written by warmup-compile.py to measure"}}}))
    os.environ["VLLM_HOTPATHS_VALIDATED"] = str(validated)
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from vllm_hotpaths import plugin
    from vllm_hotpaths.sampler_mrv2 import fast, patch, penalty_tables
    from vllm_hotpaths.testing.throughput import KV_BYTES_PER_TOKEN, PROMPT_LEN, write_model

    if args.before:
        patch.compile_variants = lambda *a, **k: 0
    model = write_model(Path(args.model_dir))
    started = time.perf_counter()
    llm = LLM(model=str(model), load_format="dummy", skip_tokenizer_init=True, seed=0,
              attention_config={"backend": "TRITON_ATTN"}, max_num_seqs=args.batch,
              kv_cache_memory_bytes=(args.batch * (PROMPT_LEN + args.length) + 40_960) * KV_BYTES_PER_TOKEN)
    start_s = time.perf_counter() - started
    if not plugin.installed().get("sampler_mrv2"):
        print("warmup-compile: the sampler_mrv2 patch is not installed", file=sys.stderr)
        return 1
    kernels = (fast._fused_block_kernel, fast._penalties_kernel, penalty_tables._admit_kernel,
               penalty_tables._count_sampled_kernel)
    counts = {"after start-up": [compiled(k) for k in kernels]}
    prompts = [TokensPrompt(prompt_token_ids=[(7 * i + j) % 1000 for j in range(PROMPT_LEN)])
               for i in range(args.batch)]
    times = {}
    for label, extra in (("no penalty", {}), ("presence 1.5", {"presence_penalty": 1.5}),
                         ("presence 1.5 and top-p 0.9", {"presence_penalty": 1.5, "top_p": 0.9})):
        params = [SamplingParams(temperature=1.0, seed=i, max_tokens=args.length, ignore_eos=True, **extra)
                  for i in range(args.batch)]
        for attempt in ("first", "again"):
            torch.cuda.synchronize()
            begin = time.perf_counter()
            llm.generate(prompts, params, use_tqdm=False)
            torch.cuda.synchronize()
            times[f"{label}, {attempt}"] = round(time.perf_counter() - begin, 3)
            if attempt == "first":
                counts[f"after the first {label} generate"] = [compiled(k) for k in kernels]
    print(json.dumps({"device": torch.cuda.get_device_name(), "vllm": vllm.__version__, "before": args.before,
                      "batch": args.batch, "length": args.length, "engine_start_s": round(start_s, 1),
                      "compiled_variants": counts, "generate_s": times}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
