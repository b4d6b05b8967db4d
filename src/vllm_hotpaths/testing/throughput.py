"""Output tokens per second as users measure it (`vllm-hotpaths throughput`, GPU only).

Two engine processes on one GPU, upstream (`VLLM_HOTPATHS=off`) and the plugin, each an offline
`vllm.LLM` with vLLM's default engine settings: the engine core in its own process, async
scheduling, torch.compile with CUDA graphs at vLLM's default sizes, `max_num_seqs` at its
default. Only what the machine forces is set: dummy weights, no tokenizer, a fixed seed, the
share of GPU memory each of the two engines may take and its KV cache's size (`engine_kwargs`),
and (`--attention`) an attention backend; `--engine-arg` adds any other.

Both processes start side by side and warm up on every timed shape (a short `generate` per
batch); then they take turns: each run is one whole `generate` of B requests x TOKENS tokens
(prefill included, timed to GPU completion), the side that goes first alternating from run to
run and from shape to shape, so a drift over minutes weighs on both alike. Every request has
its own seed, so every run of a shape draws the same ids on both sides: all must be equal.

Besides a run's tokens per second, each engine records when each of its steps' outputs reached the
front end: the median step of a run is not moved by a few slow steps (a pause of the host, a
garbage collection), where the run's total is. The parent reads the machine's steal time (CPU time
the hypervisor gave to others, /proc/stat) around each run, and times a fixed Python loop just
before it (the host's speed then). `--cpus` pins both engines, with their
engine-core processes, to the same cores (they never run at once).

The model's config is written to a fixed folder (`--model-dir`): its path is part of
torch.compile's cache key, so a fresh folder would recompile in every process.

`--profile` then records one more run per side and shape: py-spy over both of vLLM's processes
(front end and engine core, their busy threads, `--windows` seconds into the run), and vLLM's
own torch profiler over `--torch-steps` engine steps in the engine core (host and GPU).
`testing/decode_profile.py` turns the files into tables.

`--setting KEY=JSON` compares an engine setting instead of the plugin: both sides run the plugin as
`--hotpaths` says ("off": upstream alone), one side without the setting, one with it, the same
requests. A setting that changes no id and raises tokens per second is proven for this engine
configuration; the command exits 1 where an id differs. The report says which timed batches run
outside the engine's CUDA graphs (`compilation_config.max_cudagraph_capture_size`, 512 by vLLM's
default): their decode steps launch each kernel from the host.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

SIDES = ("upstream", "plugin")
SETTING_SIDES = ("without", "with")  # `--setting`: the same plugin, without and with the setting
PROMPT_LEN = 16
# Qwen3-0.6B's shape (weights made up by vLLM: load_format="dummy")
QWEN3_06B = dict(vocab_size=151_936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                 num_attention_heads=16, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True,
                 architectures=["Qwen3ForCausalLM"], torch_dtype="bfloat16")
KV_BYTES_PER_TOKEN = 2 * QWEN3_06B["num_hidden_layers"] * QWEN3_06B["num_key_value_heads"] * QWEN3_06B["head_dim"] * 2
DEFAULT_MODEL_DIR = Path.home() / ".cache" / "vllm-hotpaths" / "qwen3-0.6b-dummy"


def write_model(folder: Path) -> Path:
    """The dummy model's config at `folder`, rewritten only when it differs (an unchanged file
    and path keep torch.compile's cache valid)."""
    text = json.dumps(dict(QWEN3_06B, model_type="qwen3", max_position_embeddings=40_960), indent=1,
                      sort_keys=True) + "\n"
    config = folder / "config.json"
    if not config.exists() or config.read_text() != text:
        folder.mkdir(parents=True, exist_ok=True)
        config.write_text(text)
    return folder


def shapes(batches: list[int], presences: list[float], tokens: int) -> list[dict]:
    return [{"name": f"B={batch} presence={presence:g}", "batch": batch, "presence": presence, "tokens": tokens}
            for batch in batches for presence in presences]


def order(run: int, shape: int, sides: tuple[str, str] = SIDES) -> tuple[str, str]:
    """Which side goes first: alternating from run to run and from shape to shape."""
    return sides if (run + shape) % 2 == 0 else sides[::-1]


def requests(shape: dict, vocab: int) -> tuple[list[list[int]], list[dict]]:
    """The shape's prompts (random ids, the same on both sides) and each request's parameters."""
    rng = np.random.default_rng(shape["batch"])
    prompts = [rng.integers(0, vocab, PROMPT_LEN).tolist() for _ in range(shape["batch"])]
    params = [dict(max_tokens=shape["tokens"], ignore_eos=True, temperature=1.0, seed=1000 + i,
                   presence_penalty=shape["presence"]) for i in range(shape["batch"])]
    return prompts, params


def run_line(result: dict) -> str:
    """One run as the parent prints it."""
    line = f"{result['tokens'] / result['seconds']:,.0f} tok/s"
    if result.get("step_ms") is not None:
        line += f", median step {result['step_ms']:.2f} ms (p90 {result['step_ms_p90']:.2f}, {result['steps']} steps)"
    if result.get("steal_s") is not None:
        line += f", steal {result['steal_s']:.2f} s"
    if result.get("probe_ms") is not None:
        line += f", host probe {result['probe_ms']:.2f} ms"
    return line


def ids_digest(ids: list[list[int]]) -> str:
    return hashlib.sha256(json.dumps(ids).encode()).hexdigest()[:16]


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def step_times(stamps: list[float]) -> dict:
    """A run's steps from the times its outputs reached the front end (`LLMEngine.step` returning):
    how many, and the median and 90th percentile of the gaps in ms (the first gap holds the
    prefill; the median is not moved by it)."""
    gaps = np.diff(np.asarray(stamps, dtype=np.float64)) * 1e3
    if gaps.size == 0:
        return {"steps": len(stamps), "step_ms": None, "step_ms_p90": None}
    return {"steps": len(stamps), "step_ms": float(np.median(gaps)), "step_ms_p90": float(np.percentile(gaps, 90))}


def probe_ms(repeats: int = 5) -> float:
    """The host's single-thread speed now: the fastest of a few timings of a fixed pure-Python
    loop (about 10 ms), taken by the parent just before each run; it moves with the core's clock
    and with whatever else the machine's hardware is serving."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        total = 0
        for i in range(100_000):
            total += i * i % 7
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def steal_seconds(stat: str | None = None) -> float | None:
    """The machine's steal time so far (the `cpu` line of /proc/stat, in USER_HZ), None where not
    readable (not Linux, or a kernel without the field)."""
    try:
        text = stat if stat is not None else Path("/proc/stat").read_text()
        fields = text.splitlines()[0].split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK") if fields[0] == "cpu" and len(fields) > 8 else None
    except (OSError, ValueError, IndexError):
        return None


def summarize(shape: dict, runs: dict[str, list[dict]], sides: tuple[str, str] = SIDES) -> dict:
    """One shape's tokens per second per side (median, range), the second side's over the first's
    (plugin / upstream, with / without) for the medians and for each pair (the two runs of one
    turn), and whether every run drew the same ids; where the runs carry step times, the median
    step per side (over the runs' medians) and each pair's first / second ratio of median steps
    (above 1: the second side's steps are shorter)."""
    first, second = sides
    rates = {side: [r["tokens"] / r["seconds"] for r in runs[side]] for side in sides}
    pairs = [b / a for a, b in zip(rates[first], rates[second])]
    digests = {r["ids"] for side in sides for r in runs[side]}
    row = {"shape": shape["name"], "batch": shape["batch"], **{side: spread(rates[side]) for side in sides},
           "ratio": statistics.median(rates[second]) / statistics.median(rates[first]),
           "pairs": spread(pairs), "ids_equal": len(digests) == 1,
           "ms_per_step": {side: statistics.median(r["seconds"] for r in runs[side]) / shape["tokens"] * 1e3
                           for side in sides}}
    steps = {side: [r.get("step_ms") for r in runs[side]] for side in sides}
    if all(ms is not None for side in sides for ms in steps[side]):
        row["step_ms"] = {side: spread(steps[side]) for side in sides}
        row["step_pairs"] = spread([a / b for a, b in zip(steps[first], steps[second])])
    return row


def report(rows: list[dict], meta: dict, sides: tuple[str, str] = SIDES, setting: list[str] | None = None) -> str:
    """`meta`: the second side's engine's; `setting`: what the second side adds (`--setting`)."""
    first, second = sides
    head = f"{meta['device']}, vLLM {meta['vllm']}, torch {meta['torch']}; plugin patched: " \
           f"{', '.join(meta['patched']) or 'nothing'}; runner {meta['runner']}"
    if setting:
        head += f"; `{second}`: {', '.join(setting)}"
    lines = [head, "",
             f"| shape | {first} tok/s, median (range) | {second} tok/s, median (range) | {second} / {first} "
             f"| pairs: median (range) | ms per step ({first} / {second}) | median step ms, {first} / {second} "
             f"(ranges) | pairs by median step: {first} / {second} | ids |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        u, p, q = row[first], row[second], row["pairs"]
        if "step_ms" in row:
            su, sp, sq = row["step_ms"][first], row["step_ms"][second], row["step_pairs"]
            steps = (f"{su['median']:.2f} / {sp['median']:.2f} ({su['min']:.2f}-{su['max']:.2f} / "
                     f"{sp['min']:.2f}-{sp['max']:.2f}) | {sq['median']:.3f} ({sq['min']:.3f}-{sq['max']:.3f})")
        else:
            steps = "- | -"
        lines.append(f"| {row['shape']} | {u['median']:,.0f} ({u['min']:,.0f}-{u['max']:,.0f}) | "
                     f"{p['median']:,.0f} ({p['min']:,.0f}-{p['max']:,.0f}) | {row['ratio']:.3f} | "
                     f"{q['median']:.3f} ({q['min']:.3f}-{q['max']:.3f}), {q['n']} pairs | "
                     f"{row['ms_per_step'][first]:.1f} / {row['ms_per_step'][second]:.1f} | {steps} | "
                     f"{'equal' if row['ids_equal'] else 'DIFFER'} |")
    return "\n".join(lines + graph_notes([row["batch"] for row in rows if "batch" in row], meta))


def graph_notes(batches: list[int], meta: dict) -> list[str]:
    """Lines saying which timed batches decode outside the engine's CUDA graphs (one token per
    request and step: a batch of B requests is a step of B tokens), and the setting that covers
    them. `meta["graphs_up_to"]`: the engine's largest captured size, 0 where graphs are off."""
    covered = meta.get("graphs_up_to")
    outside = sorted({b for b in batches if covered is not None and b > covered})
    if not outside:
        return []
    if covered == 0:
        return ["", "CUDA graphs are off in this engine: every decode step launches its kernels from the host."]
    names = ", ".join(f"B={b}" for b in outside)
    setting = f'compilation_config={{"max_cudagraph_capture_size": {max(outside)}}}'
    return ["", f"CUDA graphs cover decode steps of up to {covered} tokens in this engine "
                f"(compilation_config.max_cudagraph_capture_size): {names} decode outside them, each kernel "
                f"launched from the host. `--engine-arg '{setting}'` covers them (more graphs to capture at "
                f"start-up, more GPU memory); `--setting '{setting}'` measures what it does to these requests' "
                "ids and tokens per second."]


# -- one engine, in its own process -----------------------------------------------------------
def engine_kwargs(args) -> dict:
    """vLLM's defaults but for the dummy model, and a KV cache sized for a quarter more than every
    timed sequence at its full length (two engines share the GPU, so vLLM's sizing from free memory
    would see the other engine's; with no preemption the size does not change a step's work)."""
    tokens = 1.25 * max(args.batch) * (PROMPT_LEN + args.tokens + 16)
    kwargs = dict(model=str(args.model_dir), load_format="dummy", skip_tokenizer_init=True, seed=0,
                  gpu_memory_utilization=args.gpu_memory, kv_cache_memory_bytes=int(tokens * KV_BYTES_PER_TOKEN))
    if args.attention:
        kwargs["attention_config"] = {"backend": args.attention}
    for item in args.engine_arg or []:
        key, _, value = item.partition("=")
        kwargs[key] = json.loads(value)
    return kwargs


def serve(folder: Path) -> None:
    """Start the engine, warm up, then run what the parent asks: `go-N` holds a shape (and
    whether to profile); `done-N.json` the result; `stop` ends it."""
    import torch
    import vllm
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    spec = json.loads((folder / "spec.json").read_text())
    if spec.get("cpus"):  # before vLLM starts its engine-core process, which inherits it
        os.sched_setaffinity(0, spec["cpus"])
    kwargs = dict(spec["engine"])
    if spec.get("profile_dir"):  # inert until start_profile (vLLM makes the profiler then)
        kwargs["profiler_config"] = {"profiler": "torch", "torch_profiler_dir": spec["profile_dir"],
                                     "torch_profiler_with_stack": False, "ignore_frontend": True,
                                     "delay_iterations": spec["torch_delay"], "max_iterations": spec["torch_steps"]}
    began = time.perf_counter()
    llm = LLM(**kwargs)
    from vllm_hotpaths import plugin, runners

    vocab = llm.llm_engine.model_config.get_vocab_size()
    stamps: list[float] = []
    engine_step = llm.llm_engine.step

    def timed_step():  # LLM.generate calls llm_engine.step() once per engine step's outputs
        outputs = engine_step()
        stamps.append(time.perf_counter())
        return outputs

    llm.llm_engine.step = timed_step

    def generate(shape: dict, max_tokens: int | None = None) -> tuple[float, list[list[int]]]:
        prompts, params = requests(shape, vocab)
        if max_tokens is not None:
            params = [dict(p, max_tokens=max_tokens) for p in params]
        torch.cuda.synchronize()
        start = time.perf_counter()
        stamps[:] = [start]
        outputs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts],
                               [SamplingParams(**p) for p in params], use_tqdm=False)
        torch.cuda.synchronize()
        return time.perf_counter() - start, [list(o.outputs[0].token_ids) for o in outputs]

    warm = time.perf_counter()
    for shape in spec["shapes"]:
        generate(shape, max_tokens=16)
    config = llm.llm_engine.vllm_config
    meta = {"vllm": vllm.__version__, "torch": torch.__version__, "device": torch.cuda.get_device_name(),
            "patched": plugin.installed(), "runner": runners.runner_of(config),
            "graphs_up_to": int(getattr(config.compilation_config, "max_cudagraph_capture_size", None) or 0),
            "cpus": sorted(os.sched_getaffinity(0)),
            "startup_s": warm - began, "warmup_s": time.perf_counter() - warm}
    (folder / "ready.json").write_text(json.dumps(meta))
    number, parent = 0, os.getppid()
    while True:
        go = folder / f"go-{number}"
        while not go.exists():
            if (folder / "stop").exists() or os.getppid() != parent:  # asked to stop, or nobody left to ask
                return
            time.sleep(0.05)
        ask = json.loads(go.read_text())
        shape = spec["shapes"][ask["shape"]]
        if ask.get("profile"):
            result = profile_run(llm, generate, shape, Path(ask["profile"]), spec)
        else:
            seconds, ids = generate(shape)
            result = {"seconds": seconds, "tokens": sum(map(len, ids)), "ids": ids_digest(ids), **step_times(stamps)}
            keep = folder / f"ids-{ask['shape']}.json"
            if not keep.exists():
                keep.write_text(json.dumps(ids))
        (folder / f"done-{number}.tmp").write_text(json.dumps(result))
        (folder / f"done-{number}.tmp").replace(folder / f"done-{number}.json")
        number += 1


def profile_run(llm, generate, shape: dict, out: Path, spec: dict) -> dict:
    """py-spy over this process and its children during one run (in windows of seconds from its
    start), then vLLM's torch profiler during another."""
    import threading

    out.mkdir(parents=True, exist_ok=True)
    spy = spec["py_spy"]
    samplers: list[subprocess.Popen] = []

    def sample(number: int, start: float, seconds: float) -> None:
        time.sleep(start)
        samplers.append(subprocess.Popen(
            [spy, "record", "--pid", str(os.getpid()), "--subprocesses", "--threads", "--function", "--nonblocking",
             "--rate", str(spec["py_spy_rate"]), "--duration", str(round(seconds)), "--format", "raw",
             "--output", str(out / f"py-spy-window{number}.txt")],
            stdout=subprocess.DEVNULL, stderr=open(out / f"py-spy-window{number}.log", "w")))

    timers = [threading.Thread(target=sample, args=(n, start, seconds), daemon=True)
              for n, (start, seconds) in enumerate(spec["windows"])]
    for timer in timers:
        timer.start()
    sampled, _ = generate(shape)
    for timer in timers:
        timer.join()
    codes = [p.wait() for p in samplers]
    llm.start_profile()
    profiled, _ = generate(shape)
    llm.stop_profile()
    return {"py_spy_run_s": sampled, "py_spy_exit": codes, "torch_run_s": profiled,
            "windows": spec["windows"], "rate": spec["py_spy_rate"], "torch_steps": spec["torch_steps"],
            "torch_delay": spec["torch_delay"]}


# -- the parent -------------------------------------------------------------------------------
class Engine:
    """`hotpaths`: the engine process's VLLM_HOTPATHS ("off": upstream alone)."""

    def __init__(self, side: str, folder: Path, spec: dict, hotpaths: str) -> None:
        self.side, self.folder, self.asked = side, folder, 0
        folder.mkdir(parents=True, exist_ok=True)
        for stale in folder.glob("*"):
            if stale.is_file():
                stale.unlink()
        (folder / "spec.json").write_text(json.dumps(spec))
        env = dict(os.environ, VLLM_HOTPATHS=hotpaths)
        self.log = open(folder / "log.txt", "w")
        self.process = subprocess.Popen([sys.executable, "-m", "vllm_hotpaths.testing.throughput",
                                         "--engine-dir", str(folder)], env=env, stdout=self.log, stderr=subprocess.STDOUT)

    def wait_for(self, path: Path, timeout: float) -> dict:
        deadline = time.perf_counter() + timeout
        while not path.exists():
            if self.process.poll() is not None:
                tail = (self.folder / "log.txt").read_text(errors="replace")[-4000:]
                raise SystemExit(f"throughput: the {self.side} engine exited ({self.process.returncode}):\n{tail}")
            if time.perf_counter() > deadline:
                raise SystemExit(f"throughput: the {self.side} engine took over {timeout:.0f} s for {path.name}")
            time.sleep(0.05)
        return json.loads(path.read_text())

    def ask(self, request: dict, timeout: float) -> dict:
        number, self.asked = self.asked, self.asked + 1
        (self.folder / f"go-{number}").write_text(json.dumps(request))
        return self.wait_for(self.folder / f"done-{number}.json", timeout)

    def stop(self) -> None:
        (self.folder / "stop").touch()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


def first_difference(root: Path, shapes_: list[dict], sides: tuple[str, str] = SIDES) -> str:
    for number, shape in enumerate(shapes_):
        up, plug = (json.loads((root / side / f"ids-{number}.json").read_text()) for side in sides)
        for request, (a, b) in enumerate(zip(up, plug)):
            if a != b:
                at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
                return f"{shape['name']}: request {request} first differs at token {at}"
    return "the first runs agree; a later run drew other ids"


def run(args) -> int:
    try:
        import torch
        import vllm  # noqa: F401
    except ImportError as err:
        print(f"throughput: needs vLLM and a CUDA torch ({err})", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("throughput: needs a CUDA GPU", file=sys.stderr)
        return 2
    root = Path(args.out).resolve()
    shape_list = shapes(args.batch, args.presence, args.tokens)
    spec = {"engine": engine_kwargs(args), "shapes": shape_list, "cpus": args.cpus}
    if args.profile:
        spy = args.py_spy or shutil.which("py-spy")
        if spy is None:
            raise SystemExit("throughput: --profile needs py-spy (on PATH, or --py-spy PATH)")
        spec.update(torch_delay=args.torch_delay, torch_steps=args.torch_steps,
                    py_spy=spy, py_spy_rate=args.py_spy_rate, windows=[list(w) for w in args.windows])
    write_model(args.model_dir)
    sides, specs, hotpaths = side_specs(args, spec)
    engines = {side: Engine(side, root / side, dict(specs[side], profile_dir=str(root / "torch" / side))
                            if args.profile else specs[side], hotpaths[side]) for side in sides}
    runs: dict[int, dict[str, list[dict]]] = {n: {side: [] for side in sides} for n in range(len(shape_list))}
    try:
        meta = {side: engine.wait_for(engine.folder / "ready.json", args.timeout) for side, engine in engines.items()}
        for side in sides:
            print(f"throughput: {side}: engine up in {meta[side]['startup_s']:.0f} s, warm-up "
                  f"{meta[side]['warmup_s']:.0f} s, patched: {', '.join(meta[side]['patched']) or 'nothing'}", flush=True)
        for run_number in range(args.runs):
            for number, shape in enumerate(shape_list):
                for side in order(run_number, number, sides):
                    probe, steal = probe_ms(), steal_seconds()
                    result = engines[side].ask({"shape": number}, args.timeout)
                    result["probe_ms"] = probe
                    if steal is not None:
                        result["steal_s"] = steal_seconds() - steal
                    runs[number][side].append(result)
                    print(f"throughput: run {run_number + 1}, {shape['name']}, {side}: {run_line(result)}", flush=True)
                save(root, args, spec, meta, shape_list, runs, {}, complete=False, sides=sides)  # kept if cut off
        profiles = {}
        if args.profile:
            for number, shape in enumerate(shape_list):
                for side in sides:
                    out = root / "profile" / f"{side}-{number}"
                    profiles[f"{side} {shape['name']}"] = engines[side].ask({"shape": number, "profile": str(out)}, args.timeout)
    finally:
        for engine in engines.values():
            engine.stop()
    for engine in engines.values():  # the turn-taking files (their contents are in throughput.json)
        for used in [*engine.folder.glob("go-*"), *engine.folder.glob("done-*")]:
            used.unlink()
    rows = save(root, args, spec, meta, shape_list, runs, profiles, complete=True, sides=sides)
    print((root / "throughput.md").read_text(), end="", flush=True)
    differ = [row["shape"] for row in rows if not row["ids_equal"]]
    if differ:
        print(f"throughput: ids DIFFER ({first_difference(root, shape_list, sides)})", flush=True)
    else:
        for ids in root.glob("*/ids-*.json"):
            ids.unlink()
    return 1 if differ else 0


def side_specs(args, spec: dict) -> tuple[tuple[str, str], dict[str, dict], dict[str, str]]:
    """The two sides, each one's engine spec and VLLM_HOTPATHS: upstream and the plugin, or with
    `--setting` the plugin as `--hotpaths` says, without and with the setting (a dict value merged
    into the same key's `--engine-arg` dict)."""
    if not getattr(args, "setting", None):
        return SIDES, {side: spec for side in SIDES}, {"upstream": "off", "plugin": args.hotpaths}
    engine = dict(spec["engine"])
    for key, value in (item.partition("=")[::2] for item in args.setting):
        value = json.loads(value)
        merged = isinstance(value, dict) and isinstance(engine.get(key), dict)
        engine[key] = {**engine[key], **value} if merged else value
    without, with_ = SETTING_SIDES
    specs = {without: spec, with_: dict(spec, engine=engine)}
    return SETTING_SIDES, specs, {side: args.hotpaths for side in SETTING_SIDES}


def save(root: Path, args, spec: dict, meta: dict, shape_list: list[dict], runs: dict[int, dict[str, list[dict]]],
         profiles: dict, complete: bool, sides: tuple[str, str] = SIDES) -> list[dict]:
    """throughput.json and throughput.md from the pairs run so far (the shapes with at least one);
    `complete` False: written after each pair, so that a run cut off keeps its finished pairs.
    Returns the rows."""
    first, second = sides
    done = [n for n in range(len(shape_list)) if runs[n][first] and runs[n][second]]
    rows = [summarize(shape_list[n], runs[n], sides) for n in done]
    text = report(rows, meta[second], sides, getattr(args, "setting", None))
    if meta[first].get("graphs_up_to") != meta[second].get("graphs_up_to"):  # `--setting` changed them
        notes = graph_notes([row["batch"] for row in rows], meta[first])
        text += "".join(f"\n`{first}`: {line}" if line else "\n" for line in notes)
    if not complete:
        text += f"\n\n(cut off: {sum(len(runs[n][second]) for n in done)} pairs of {args.runs * len(shape_list)})"
    (root / "throughput.json").write_text(home_as_tilde(json.dumps(
        {"meta": meta, "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                                if k not in ("func", "check_arguments")},
         "engine": spec["engine"], "complete": complete, "rows": rows,
         "runs": {shape_list[n]["name"]: runs[n] for n in done}, "profiles": profiles}, indent=1)) + "\n")
    (root / "throughput.md").write_text(text + "\n")
    return rows


def home_as_tilde(text: str) -> str:
    """Paths under the home folder written as ~/... (the results are shared)."""
    return text.replace(str(Path.home()) + "/", "~/")


def window(text: str) -> tuple[float, int]:
    start, _, seconds = text.partition(":")
    try:
        value = float(start), int(seconds)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a window is START:SECONDS, got {text!r}") from None
    if value[0] < 0 or value[1] <= 0:
        raise argparse.ArgumentTypeError(f"a window needs START >= 0 and SECONDS > 0, got {text!r}")
    return value


def cpu_list(text: str) -> list[int]:
    """`2-9,12` as [2, ..., 9, 12]: cores this machine has."""
    cpus: set[int] = set()
    try:
        for part in text.split(","):
            low, _, high = part.partition("-")
            cpus.update(range(int(low), int(high or low) + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--cpus takes cores like 2-9 or 2,4,6, got {text!r}") from None
    available = os.sched_getaffinity(0)
    if not cpus or not cpus <= available:
        raise argparse.ArgumentTypeError(f"--cpus {text!r} names cores this process cannot use "
                                         f"(it can use {min(available)}-{max(available)}, {len(available)} cores)")
    return sorted(cpus)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--batch", type=int, nargs="+", default=[256, 1024], help="requests per generate")
    parser.add_argument("--presence", type=float, nargs="+", default=[0.0, 1.5], help="presence penalties")
    parser.add_argument("--tokens", type=int, default=256, help="generated tokens per request")
    parser.add_argument("--runs", type=int, default=5, help="timed runs per side and shape")
    parser.add_argument("--hotpaths", default="all", help="VLLM_HOTPATHS for the plugin side (both sides with --setting)")
    parser.add_argument("--model-dir", type=Path, default=DEFAULT_MODEL_DIR,
                        help="where the dummy model's config is written (keep it fixed: torch.compile's cache key)")
    parser.add_argument("--gpu-memory", type=float, default=0.42, help="gpu_memory_utilization of each engine")
    parser.add_argument("--attention", help="attention backend, e.g. TRITON_ATTN (not given: vLLM chooses)")
    parser.add_argument("--engine-arg", action="append", metavar="KEY=JSON",
                        help="another LLM keyword argument, e.g. compilation_config={\"max_cudagraph_capture_size\":1024}")
    parser.add_argument("--setting", action="append", metavar="KEY=JSON",
                        help="compare this engine setting instead of the plugin: one side without it, one with it, "
                             "e.g. compilation_config={\"max_cudagraph_capture_size\":1024}")
    parser.add_argument("--cpus", type=cpu_list, help="pin both engines to these cores, e.g. 2-9 or 2,4,6 (default: not pinned)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds an engine may take for one step")
    parser.add_argument("--out", default="throughput-out", help="folder of the engines' files and the results")
    parser.add_argument("--profile", action="store_true", help="then profile one run per side and shape")
    parser.add_argument("--py-spy", help="the py-spy program (default: on PATH)")
    parser.add_argument("--py-spy-rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument("--windows", type=window, nargs="+", default=[(2.0, 3)], metavar="START:SECONDS",
                        help="py-spy windows, seconds from the run's start (SECONDS whole: py-spy's --duration)")
    parser.add_argument("--torch-delay", type=int, default=60, help="engine steps before the torch profiler starts")
    parser.add_argument("--torch-steps", type=int, default=20, help="engine steps the torch profiler records")


def check_arguments(parser: argparse.ArgumentParser, args) -> None:
    if min(*args.batch, args.tokens, args.runs) <= 0:
        parser.error("--batch, --tokens and --runs must be positive")
    if any(p < 0 for p in args.presence):
        parser.error("--presence values must be >= 0")
    if not 0 < args.gpu_memory < 0.5:
        parser.error("--gpu-memory must be in (0, 0.5): two engines share the GPU")
    for option, items in (("--engine-arg", args.engine_arg), ("--setting", args.setting)):
        for item in items or []:
            key, sep, value = item.partition("=")
            try:
                json.loads(value)
            except ValueError:
                sep = ""
            if not sep or not key:
                parser.error(f"{option} takes KEY=JSON, got {item!r}")


if __name__ == "__main__":  # one engine, in the process `Engine` starts
    engine_parser = argparse.ArgumentParser()
    engine_parser.add_argument("--engine-dir", required=True, type=Path)
    serve(engine_parser.parse_args().engine_dir)
