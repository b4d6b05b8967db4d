"""Where a Model Runner V2 decode step spends its time, host and device, function by function:
no penalty against presence 1.5. GPU machine only; needs vLLM (on our GPU machine, the staged
one: ci/gpu/stage-vllm.sh).

One in-process engine (VLLM_ENABLE_V1_MULTIPROCESSING=0, so the model runner runs in this process)
on the e2e dummy Qwen3 without a reasoning config, which vLLM 0.22 runs on Model Runner V2 (exit 1
if vLLM picks another runner). B requests of LENGTH generated tokens, temperature 1.0, no penalty,
then presence 1.5: each first timed whole (tokens per second, no profiler), then generated again up
to the end of a window of WINDOW engine steps in the middle of the sequence (steps counted by calls
to the model runner's `execute_model`), which torch.profiler records (CPU and CUDA activities,
shapes off). A few functions of the model runner, its sampler and penalties, the scheduler, the
output processor and the engine's step run inside `record_function` ranges, so their own host time
shows beside the aten ops. Prints for each run the top host rows by self CPU time and the top device rows (kernels,
copies) by self CUDA time, with calls and per-step averages, as markdown tables. The plugin stays
off (VLLM_HOTPATHS=off unless set): it patches Model Runner v1 only.

    python3 ci/gpu/mrv2-profile.py [--length 5000] [--batch 128] [--window 200] [--top 20] [--json PATH]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import time
from pathlib import Path

# (module, class, methods): host functions recorded as ranges named "Class.method". LLMEngine.step
# spans the whole step, so the ranges open at the window's edges are cut: counts may be one off.
RANGES = (
    ("vllm.v1.worker.gpu.model_runner", "GPUModelRunner",
     ("execute_model", "sample_tokens", "finish_requests", "add_requests", "update_requests", "prepare_inputs",
      "prepare_attn", "sample", "postprocess")),
    ("vllm.v1.worker.gpu.sample.sampler", "Sampler", ("__call__", "apply_sampling_params", "sample")),
    ("vllm.v1.worker.gpu.sample.penalties", "PenaltiesState", ("apply_penalties", "apply_staged_writes")),
    ("vllm.v1.core.sched.scheduler", "Scheduler", ("schedule", "update_from_output")),
    ("vllm.v1.engine.output_processor", "OutputProcessor", ("process_outputs",)),
    ("vllm.v1.engine.llm_engine", "LLMEngine", ("step",)),
)
STEP = ("vllm.v1.worker.gpu.model_runner", "GPUModelRunner", "execute_model")  # one call per engine step
RUNS = (("no penalty", {}), ("presence 1.5", {"presence_penalty": 1.5}))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Model Runner V2 decode profile, no penalty vs presence 1.5")
    parser.add_argument("--length", type=int, default=5000, help="generated tokens per request")
    parser.add_argument("--batch", type=int, default=128, help="requests")
    parser.add_argument("--window", type=int, default=200, help="engine steps profiled, in the middle")
    parser.add_argument("--top", type=int, default=20, help="rows of each table")
    parser.add_argument("--with-stack", action="store_true",
                        help="record Python functions too (torch.profiler's with_stack; slows the host)")
    parser.add_argument("--gpu-memory", type=float, default=0.4, help="vLLM's gpu_memory_utilization")
    parser.add_argument("--json", help="write the results as JSON")
    args = parser.parse_args(argv)
    if min(args.length, args.batch, args.window, args.top) <= 0:
        parser.error("--length, --batch, --window and --top must be positive")
    if args.length < args.window + 20:
        parser.error(f"--length ({args.length}) must exceed --window ({args.window}) by 20 steps at least")
    return args


def window_of(length: int, steps: int) -> tuple[int, int]:
    """(first profiled step, steps): a window centred in a sequence of `length` steps."""
    return length // 2 - steps // 2, steps


class StepWindow:
    """Profiles engine steps [first, first + steps) of the next generate: `on_step` runs at the
    start of each step. The window ends after the GPU finished its last step (`synchronize`)."""

    def __init__(self, first: int, steps: int, synchronize) -> None:
        self.first, self.steps, self.synchronize = first, steps, synchronize
        self.profiler, self.calls, self.seconds = None, 0, None

    def arm(self, profiler) -> None:
        self.profiler, self.calls, self.seconds = profiler, 0, None

    def on_step(self) -> None:
        if self.profiler is None:
            return
        self.calls += 1
        if self.calls == self.first:
            self.profiler.start()
            self.began = time.perf_counter()
        elif self.calls == self.first + self.steps:
            self.synchronize()
            self.seconds = time.perf_counter() - self.began
            self.profiler.stop()
            self.profiler = None


def profile_rows(averages) -> list[dict]:
    """torch.profiler's `key_averages()` as plain rows (times in microseconds); `device` marks
    rows that ran on the GPU (kernels, copies, sets), the rest ran on the host. A range's span on
    the GPU timeline (a device-side user annotation) is left out: its kernels have their own rows."""
    rows = []
    for event in averages:
        self_cpu = float(event.self_cpu_time_total)
        self_device = float(event.self_device_time_total if hasattr(event, "self_device_time_total")
                            else event.self_cuda_time_total)  # the older name
        kind = getattr(event, "device_type", None)
        on_device = "CUDA" in str(kind).upper() if kind is not None else (self_cpu == 0 and self_device > 0)
        if on_device and getattr(event, "is_user_annotation", False):
            continue
        rows.append({"name": event.key, "calls": int(event.count), "self_cpu_us": self_cpu,
                     "self_device_us": self_device, "device": on_device})
    return rows


def table(rows: list[dict], steps: int, on_device: bool, top: int, width: int = 90) -> str:
    """The top `top` host (or device) rows by self CPU (or CUDA) time as markdown: calls and
    milliseconds per step, and each row's share of the table's total."""
    key = "self_device_us" if on_device else "self_cpu_us"
    chosen = sorted((r for r in rows if r["device"] == on_device and r[key] > 0), key=lambda r: -r[key])
    total = sum(r[key] for r in chosen)
    what = "self CUDA" if on_device else "self CPU"
    lines = [f"{what}: {total / steps / 1e3:.3f} ms per step in all ({len(chosen)} rows, {steps} steps)", "",
             f"| # | {'device' if on_device else 'host'} function | calls | calls/step | {what} ms/step | share |",
             "|---|---|---|---|---|---|"]
    for rank, row in enumerate(chosen[:top], 1):
        name = row["name"] if len(row["name"]) <= width else row["name"][:width - 3] + "..."
        name = name.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {rank} | `{name}` | {row['calls']:,} | {row['calls'] / steps:.2f} | "
                     f"{row[key] / steps / 1e3:.4f} | {row[key] / total:.1%} |")
    return "\n".join(lines)


def top_rows(rows: list[dict], top: int) -> list[dict]:
    """The rows of both tables (for the JSON)."""
    keep = []
    for on_device, key in ((False, "self_cpu_us"), (True, "self_device_us")):
        keep += sorted((r for r in rows if r["device"] == on_device and r[key] > 0), key=lambda r: -r[key])[:top]
    return keep


def wrap(owner, attr: str, make) -> bool:
    """Replace `owner.attr` by `make(original)`; False where the installed vLLM has no such attribute."""
    original = owner.__dict__.get(attr) if owner is not None else None
    if original is None:
        return False
    setattr(owner, attr, functools.wraps(original)(make(original)))
    return True


def ranged(record_function, label: str):
    """A wrapper maker: the function runs inside a profiler range named `label`."""
    def make(fn):
        def inside(*args, **kwargs):
            with record_function(label):
                return fn(*args, **kwargs)
        return inside
    return make


def counted(window: StepWindow):
    """A wrapper maker: each call starts an engine step of `window`."""
    def make(fn):
        def step(*args, **kwargs):
            window.on_step()
            return fn(*args, **kwargs)
        return step
    return make


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_HOTPATHS", "off")
    import importlib

    import torch
    import vllm
    from torch.profiler import ProfilerActivity, profile, record_function
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from vllm_hotpaths import runners
    from vllm_hotpaths.testing.e2e import DUMMY_VOCAB, PROMPT_LEN, dummy_engine, timed_batches, write_dummy_model

    model = write_dummy_model(Path(tempfile.mkdtemp(), "dummy-qwen3"), architecture="qwen3")
    llm = LLM(**dummy_engine(model, args.batch, PROMPT_LEN + args.length + 16, args.gpu_memory))
    runner = runners.runner_of(llm.llm_engine.vllm_config)
    print(f"{torch.cuda.get_device_name()}, vLLM {vllm.__version__}, {runners.TITLES[runner]}, B={args.batch}, "
          f"{args.length} generated tokens", flush=True)
    if runner != "mrv2":
        print(f"mrv2-profile: vLLM runs this engine on {runners.TITLES[runner]}, not Model Runner V2 "
              "(is VLLM_USE_V2_MODEL_RUNNER set?)", file=sys.stderr)
        return 1
    plain = timed_batches(DUMMY_VOCAB, args.batch, [args.length])[0]  # the e2e timed prompts
    prompts = [TokensPrompt(prompt_token_ids=p) for p in plain.prompts]

    def generate(extra: dict, max_tokens: int) -> float:
        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=1.0, **extra)
        torch.cuda.synchronize()
        start = time.perf_counter()
        llm.generate(prompts, params, use_tqdm=False)
        torch.cuda.synchronize()
        return time.perf_counter() - start

    for _, extra in RUNS:  # compile and warm both paths
        generate(extra, 32)
    results = {name: {"tok_s": args.batch * args.length / generate(extra, args.length)} for name, extra in RUNS}
    for name, result in results.items():
        print(f"{name}: {result['tok_s']:,.0f} tok/s ({args.batch * 1e3 / result['tok_s']:.3f} ms per step), "
              "no profiler", flush=True)

    # installed after the timed runs, so those run without them
    missing = [f"{class_name}.{method}" for module_name, class_name, methods in RANGES for method in methods
               if not wrap(getattr(importlib.import_module(module_name), class_name, None), method,
                           ranged(record_function, f"{class_name}.{method}"))]
    if missing:
        print(f"not in this vLLM, not recorded: {', '.join(missing)}", flush=True)
    first, steps = window_of(args.length, args.window)
    window = StepWindow(first, steps, torch.cuda.synchronize)
    module_name, class_name, method = STEP  # outermost: the profiler starts before the step's range opens
    if not wrap(getattr(importlib.import_module(module_name), class_name, None), method, counted(window)):
        print(f"mrv2-profile: this vLLM has no {class_name}.{method} to count steps by", file=sys.stderr)
        return 1

    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    with profile(activities=activities):  # the profiler's own start-up (CUPTI) before any window
        torch.ones(1, device="cuda").add_(1)
        torch.cuda.synchronize()
    for name, extra in RUNS:
        profiler = profile(activities=activities, record_shapes=False, with_stack=args.with_stack)
        window.arm(profiler)
        generate(extra, first + steps + 8)
        if window.seconds is None:
            print(f"mrv2-profile: the {name} run ended before step {first + steps}", file=sys.stderr)
            return 1
        rows = profile_rows(profiler.key_averages())
        result = results[name]
        result.update(profiled_step_ms=window.seconds / steps * 1e3, rows=top_rows(rows, args.top))
        print(f"\n## {name}: steps {first} to {first + steps - 1} profiled, {result['profiled_step_ms']:.3f} ms per "
              f"step under the profiler ({args.batch * 1e3 / result['tok_s']:.3f} without)\n", flush=True)
        print(table(rows, steps, False, args.top) + "\n\n" + table(rows, steps, True, args.top), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"device": torch.cuda.get_device_name(), "vllm": vllm.__version__, "torch": torch.__version__,
             "runner": runner, "batch": args.batch, "length": args.length,
             "window": {"first_step": first, "steps": steps}, "runs": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
