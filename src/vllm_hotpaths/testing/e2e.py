"""End to end: the plugin inside a real vLLM engine (`vllm-hotpaths e2e`, GPU only).

The same batches run through an offline `vllm.LLM` twice, in fresh processes: once with the
plugin switched off (`VLLM_HOTPATHS=off`: vLLM as upstream ships it) and once with it on. Every
request's generated ids must be identical between the two; the timed batches also give decode
throughput side by side. Two engines per side:
- `main`: a reasoning config with start/end marker ids; greedy, seeded random, penalized
  (presence, frequency, repetition) and thinking-budget batches for equality (the budget
  requests' prompts mostly end inside a think block, so the budget forces the end marker), then
  the timed batches: B requests at each generated length, without penalties and with
  presence_penalty 1.5 (unseeded temperature 1.0: vLLM's global stream, seeded per engine). No
  timed request has a budget, so vLLM's think-state work stays off for them on both sides;
- `speculative`: ngram speculative decoding over periodic prompts, greedy and seeded random
  requests with and without presence penalty, so the rejection sampler runs (its penalties and
  its recovered-token sampling).
Equality requests stop at different lengths, so rows leave the batch and it condenses.

With the dummy model the KV cache size is fixed (no memory profiling that another process could
disturb), so all engine processes start side by side and run their equality batches together;
then the timed batches run one process at a time, nothing else running on the GPU (upstream's,
then the plugin's). With `--model` each process runs alone, one after the other.

Throughput drifts within a process by tens of percent over minutes, so the plugin side runs its
timed batches `--repeat` times, every other time in reverse order (no penalty, presence, then
presence, no penalty: a steady drift weighs on both alike), and reports medians; its first run
is the one compared with upstream's ids. Upstream runs each timed batch once: its slowdown is
several-fold, and a repeat of its presence batch at 5,000 tokens costs minutes.

Without `--model`, a Qwen2 configuration with random (dummy) weights is written: vocabulary
151,936, 2 layers, so the sampler's share of a step is large. Prompts are token ids (no tokenizer).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DUMMY_VOCAB = 151_936
DUMMY_CONFIG = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2)
# K and V per layer and KV head, 4 bytes each (float32 at most)
DUMMY_KV_BYTES_PER_TOKEN = (2 * DUMMY_CONFIG["num_hidden_layers"] * DUMMY_CONFIG["num_key_value_heads"]
                            * DUMMY_CONFIG["hidden_size"] // DUMMY_CONFIG["num_attention_heads"] * 4)
PROMPT_LEN = 16
DUMMY_MARKERS = ((151_650,), (151_651, 151_652))  # think start / end ids at the vocabulary's top
SIDES = ("upstream", "plugin")
ENGINES = ("main", "speculative")
SPECULATIVE = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 3}
# (presence, frequency, repetition): each alone, then together (an odd count, so each mix meets
# both greedy and seeded requests)
PENALTY_MIXES = ((1.5, 0.0, 1.0), (0.0, 1.0, 1.0), (0.0, 0.0, 1.2), (0.0, 0.0, 0.8), (0.5, 0.3, 1.2),
                 (1.5, 1.0, 0.8), (0.5, 0.3, 1.0))


@dataclass
class Batch:
    name: str
    prompts: list[list[int]]
    params: list[dict]  # SamplingParams keyword arguments, one per request
    timed: bool = False


def write_dummy_model(folder: Path, vocab_size: int = DUMMY_VOCAB) -> Path:
    from transformers import Qwen2Config

    Qwen2Config(vocab_size=vocab_size, architectures=["Qwen2ForCausalLM"], **DUMMY_CONFIG).save_pretrained(folder)
    return folder


def prompts(rng: np.random.Generator, count: int, below: int, suffix: tuple = ()) -> list[list[int]]:
    """`count` prompts of random ids in [0, below), each followed by `suffix`."""
    return [rng.integers(0, below, PROMPT_LEN).tolist() + list(suffix) for _ in range(count)]


def alternating(i: int, seed_base: int) -> dict:
    """Odd requests greedy, even ones random with their own seed."""
    return dict(temperature=0.0, seed=None) if i % 2 else dict(temperature=1.0, seed=seed_base + i)


def lengths_for(requests: int, tokens: int) -> list[int]:
    """Generated lengths from `tokens` down to a quarter of it: rows finish at different steps."""
    return [max(1, tokens - (i % 4) * (tokens // 4)) for i in range(requests)]


def equality_batches(below: int, requests: int, tokens: int) -> list[Batch]:
    """Greedy, seeded random and penalized batches; prompt ids in [0, below)."""
    rng = np.random.default_rng(0)
    base = [dict(max_tokens=n, ignore_eos=True) for n in lengths_for(requests, tokens)]
    penalized = []
    for i in range(requests):  # each penalty alone, then mixed; greedy and seeded alternate
        presence, frequency, repetition = PENALTY_MIXES[i % len(PENALTY_MIXES)]
        penalized.append(dict(base[i], presence_penalty=presence, frequency_penalty=frequency,
                              repetition_penalty=repetition, **alternating(i, 1000)))
    return [Batch("greedy", prompts(rng, requests, below), [dict(b, temperature=0.0) for b in base]),
            Batch("seeded random", prompts(rng, requests, below),
                  [dict(b, temperature=1.0, seed=1000 + i, top_k=(0, 50)[i % 2]) for i, b in enumerate(base)]),
            Batch("penalties", prompts(rng, requests, below), penalized)]


def timed_batches(below: int, batch: int, lengths: list[int]) -> list[Batch]:
    """At each length, `batch` requests without penalties and the same prompts with presence 1.5."""
    rng = np.random.default_rng(3)
    out = []
    for length in lengths:
        timed = prompts(rng, batch, below)
        for name, extra in (("no penalty", {}), ("presence 1.5", {"presence_penalty": 1.5})):
            params = [dict(max_tokens=length, ignore_eos=True, temperature=1.0, **extra)] * batch
            out.append(Batch(f"{name} @{length}", timed, params, timed=True))
    return out


def main_batches(markers: tuple, below: int, requests: int, tokens: int, batch: int,
                 lengths: list[int]) -> list[Batch]:
    """The main engine's batches: equality ones first, the timed ones last."""
    return (equality_batches(below, requests, tokens) + reasoning_batches(markers, below, requests, tokens)
            + timed_batches(below, batch, lengths))


def reasoning_batches(markers: tuple, below: int, requests: int, tokens: int) -> list[Batch]:
    """Prompts of ids in [0, below); most end with the start marker (inside a think block)."""
    rng = np.random.default_rng(1)
    budgets = (0, 1, 3, 10, 40, None, -1)
    params, shaped = [], []
    thinking = prompts(rng, requests, below, markers[0])
    plain = prompts(rng, requests, below)
    for i, length in enumerate(lengths_for(requests, tokens)):
        params.append(dict(max_tokens=length, ignore_eos=True, thinking_token_budget=budgets[i % len(budgets)],
                           presence_penalty=(0.0, 1.5)[i // 2 % 2], **alternating(i, 2000)))
        shaped.append(thinking[i] if i % 4 else plain[i])  # every fourth starts outside a think block
    return [Batch("thinking budget", shaped, params)]


def speculative_batches(below: int, requests: int, tokens: int) -> list[Batch]:
    """Prompts repeating a 4-token pattern, so ngram lookup proposes drafts from the first step
    (and greedy rows, which loop on dummy weights, keep proposing); seeded random rows make the
    batch not all-greedy, so recovered tokens are sampled."""
    rng = np.random.default_rng(2)
    shaped = [(rng.integers(0, below, 4).tolist() * PROMPT_LEN)[:PROMPT_LEN] for _ in range(requests)]
    params = [dict(max_tokens=n, ignore_eos=True, presence_penalty=(0.0, 1.5)[i // 2 % 2], **alternating(i, 3000))
              for i, n in enumerate(lengths_for(requests, tokens))]
    return [Batch("speculative", shaped, params)]


def forced_ends(batch: Batch, outputs: list[list[int]], markers: tuple) -> int:
    """Requests in a think block whose output has the end marker right where the budget ends."""
    start, end = map(tuple, markers)
    hits = 0
    for prompt, params, ids in zip(batch.prompts, batch.params, outputs):
        budget = params.get("thinking_token_budget")
        if budget is not None and budget >= 0 and tuple(prompt[-len(start):]) == start:
            hits += tuple(ids[budget:budget + len(end)]) == end
    return hits


# -- one engine in this process ---------------------------------------------------------------
def run_order(batches: list[dict], repeat: int) -> list[dict]:
    """Every batch once, then the timed ones `repeat - 1` more times, every other time reversed."""
    timed = [batch for batch in batches if batch["timed"]]
    return batches + [batch for i in range(1, repeat) for batch in (timed[::-1] if i % 2 else timed)]


def run_engine(spec: dict, folder: Path) -> dict:
    """Start the engine, run the untimed batches, write `folder/untimed`; then (once
    `folder/go-timed` exists, where the spec says to wait) the timed batches."""
    import torch
    import vllm
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    kwargs = dict(spec["engine"])
    if spec.get("think_markers"):
        from vllm.config import ReasoningConfig

        config = ReasoningConfig()  # ids set directly: without a tokenizer nothing can encode markers
        config._reasoning_start_token_ids, config._reasoning_end_token_ids = map(list, spec["think_markers"])
        kwargs["reasoning_config"] = config
    if spec.get("speculative"):  # counters of proposed and accepted draft tokens need stats on
        kwargs.update(speculative_config=SPECULATIVE, disable_log_stats=False)
    began = time.perf_counter()
    llm = LLM(**kwargs)
    from vllm_hotpaths import plugin, runners

    result = {"vllm": vllm.__version__, "device": torch.cuda.get_device_name(), "patched": plugin.installed(),
              "runner": runners.runner_of(llm.llm_engine.vllm_config),
              "startup_s": time.perf_counter() - began, "batches": {}}
    # Warm-up at the largest batch size, with and without penalties: kernels compiled for new
    # shapes or flags would otherwise count against the first timed batch.
    width = max(len(batch["prompts"]) for batch in spec["batches"])
    for extra in ({}, {"presence_penalty": 1.5}):
        llm.generate([TokensPrompt(prompt_token_ids=[1, 2, 3, 4])] * width,
                     SamplingParams(max_tokens=32, ignore_eos=True, temperature=1.0, **extra), use_tqdm=False)
    drafts_before = draft_counts(llm) if spec.get("speculative") else None
    order = run_order(spec["batches"], spec.get("repeat", 1))
    untimed = [batch for batch in order if not batch["timed"]]
    timed = [batch for batch in order if batch["timed"]]
    for batch in untimed:
        run_batch(llm, batch, result["batches"])
    if drafts_before is not None:
        result["drafts"] = [None if None in pair else pair[1] - pair[0] for pair in zip(drafts_before, draft_counts(llm))]
    Path(folder, "untimed").touch()
    if timed and spec.get("wait_for_timed"):
        parent = os.getppid()
        while not Path(folder, "go-timed").exists():
            if os.getppid() != parent:  # the parent is gone: nobody will read the result
                raise SystemExit("e2e engine: the parent process exited")
            time.sleep(0.2)
    for batch in timed:
        run_batch(llm, batch, result["batches"])
    return result


def run_batch(llm, batch: dict, results: dict) -> None:
    """Generate one batch, timed to GPU completion; the first run's ids are kept."""
    import torch
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    requests = [TokensPrompt(prompt_token_ids=p) for p in batch["prompts"]]
    params = [SamplingParams(**p) for p in batch["params"]]
    torch.cuda.synchronize()
    start = time.perf_counter()
    outputs = llm.generate(requests, params, use_tqdm=False)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    ran = results.setdefault(batch["name"], {"seconds": [], "tokens": []})
    ran["seconds"].append(seconds)
    ran["tokens"].append(sum(len(o.outputs[0].token_ids) for o in outputs))
    ran.setdefault("ids", [list(o.outputs[0].token_ids) for o in outputs])


def draft_counts(llm) -> list[int | None]:
    """vLLM's counters of proposed and accepted draft tokens (None where it has no such counter)."""
    counters = {m.name: getattr(m, "value", None) for m in llm.get_metrics()}
    return [counters.get(f"vllm:spec_decode_num_{kind}_tokens") for kind in ("draft", "accepted")]


# -- engine processes -------------------------------------------------------------------------
class EngineProcess:
    """One engine in a fresh process: the plugin off (upstream) or as `hotpaths` selects; the
    plugin side runs its timed batches `repeat` times. Files in `folder`: the spec, the process's
    log, its `untimed` marker, the `go-timed` signal and the result."""

    def __init__(self, spec: dict, side: str, hotpaths: str, repeat: int, folder: Path,
                 wait_for_timed: bool) -> None:
        self.label, self.side, self.folder = spec["label"], side, folder
        folder.mkdir(parents=True)
        Path(folder, "spec.json").write_text(json.dumps(dict(
            spec, repeat=1 if side == "upstream" else repeat, wait_for_timed=wait_for_timed)))
        env = dict(os.environ, VLLM_HOTPATHS="off" if side == "upstream" else hotpaths,
                   VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_USE_FLASHINFER_SAMPLER="0")
        print(f"e2e: {self.label} engine, {side}: starting", flush=True)
        self.began = time.perf_counter()
        with open(folder / "log.txt", "w") as log:
            self.process = subprocess.Popen([sys.executable, "-m", "vllm_hotpaths.testing.e2e", "--engine-dir", str(folder)],
                                            env=env, stdout=log, stderr=subprocess.STDOUT)

    def _wait(self, done, what: str, timeout: float) -> None:
        deadline = time.perf_counter() + timeout
        while not done():
            if self.process.poll() is not None:
                self._failed(what)
            if time.perf_counter() > deadline:
                self.process.kill()
                raise SystemExit(f"e2e: the {self.label} engine ({self.side}) took over {timeout:.0f} s for {what}")
            time.sleep(0.2)

    def _failed(self, what: str):
        log = Path(self.folder, "log.txt").read_text(errors="replace")
        raise SystemExit(f"e2e: the {self.label} engine ({self.side}) failed (exit {self.process.returncode}) "
                         f"before {what}:\n{log[-4000:]}")

    def wait_untimed(self, timeout: float) -> None:
        """Until its engine is up and its untimed batches are done."""
        self._wait(Path(self.folder, "untimed").exists, "the end of its untimed batches", timeout)
        print(f"e2e: {self.label} engine, {self.side}: untimed batches done "
              f"({time.perf_counter() - self.began:.0f} s)", flush=True)

    def finish(self, timeout: float) -> dict:
        """Let it run its timed batches; its result once it has exited."""
        Path(self.folder, "go-timed").touch()
        started = time.perf_counter()
        self._wait(lambda: self.process.poll() is not None, "the end of its batches", timeout)
        if self.process.returncode != 0:
            self._failed("writing its result")
        result = json.loads(Path(self.folder, "result.json").read_text())
        print(f"e2e: {self.label} engine, {self.side}: done (engine start {result['startup_s']:.0f} s; "
              f"{time.perf_counter() - started:.0f} s since its go)", flush=True)
        return result

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def run_engines(specs: dict[str, dict], hotpaths: str, repeat: int, timeout: float, root: Path,
                side_by_side: bool) -> dict[str, dict[str, dict]]:
    """engine name -> side -> result. Side by side: every process starts at once and runs its
    untimed batches; then the timed batches run one process at a time, upstream's first, with
    every other process idle or gone. Otherwise each process runs alone, one after the other."""
    results: dict[str, dict[str, dict]] = {name: {} for name in specs}
    processes: list[EngineProcess] = []
    try:
        if side_by_side:
            for name, spec in specs.items():
                for side in SIDES:
                    processes.append(EngineProcess(spec, side, hotpaths, repeat, root / f"{name}-{side}", True))
            for process in processes:
                process.wait_untimed(timeout)
            untimed_only = [p for p in processes if not any(b["timed"] for b in specs[p.label]["batches"])]
            for process in untimed_only + [p for p in processes if p not in untimed_only]:
                results[process.label][process.side] = process.finish(timeout)
        else:
            for name, spec in specs.items():
                for side in SIDES:
                    process = EngineProcess(spec, side, hotpaths, repeat, root / f"{name}-{side}", False)
                    processes.append(process)
                    results[name][side] = process.finish(timeout)
    finally:
        for process in processes:
            process.stop()
    return results


# -- comparison and report --------------------------------------------------------------------
def first_difference(a: list[list[int]], b: list[list[int]]) -> str | None:
    if len(a) != len(b):
        return f"{len(a)} requests vs {len(b)}"
    for request, (x, y) in enumerate(zip(a, b)):
        if x != y:
            at = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
            return f"request {request}, token {at}: {x[at:at + 3]} vs {y[at:at + 3]} (lengths {len(x)}, {len(y)})"
    return None


def rates(ran: dict) -> list[float]:
    """Tokens per second of each run of a batch."""
    return [tokens / seconds for tokens, seconds in zip(ran["tokens"], ran["seconds"])]


def compare(batches: list[Batch], upstream: dict, plugin: dict, markers: tuple) -> list[dict]:
    """A row per batch: equality of every request's ids (first runs), throughput of both sides
    (medians over runs), and what shows the batch reached its hot path (end markers forced by a
    budget; draft tokens proposed)."""
    rows = []
    for batch in batches:
        a, b = upstream["batches"][batch.name], plugin["batches"][batch.name]
        difference = first_difference(a["ids"], b["ids"])
        upstream_runs, plugin_runs = rates(a), rates(b)
        row = {"batch": batch.name, "requests": len(batch.prompts), "tokens": sum(map(len, a["ids"])),
               "equal": difference is None, "difference": difference, "timed": batch.timed,
               "upstream_runs": upstream_runs, "plugin_runs": plugin_runs,
               "upstream_tok_s": statistics.median(upstream_runs), "plugin_tok_s": statistics.median(plugin_runs)}
        if any("thinking_token_budget" in p for p in batch.params):
            row["forced_ends"] = [forced_ends(batch, a["ids"], markers), forced_ends(batch, b["ids"], markers)]
        if "drafts" in upstream:
            row["drafts"] = [upstream["drafts"], plugin["drafts"]]
        rows.append(row)
    return rows


def runner_lines(results: dict[str, dict[str, dict]]) -> list[str]:
    """The model runner of each engine started (as vLLM decided it for that engine)."""
    from vllm_hotpaths import runners

    return [f"engine {name}, {side} side: {runners.TITLES.get(result.get('runner'), 'runner unknown')}"
            for name, by_side in results.items() for side, result in by_side.items()]


def report(rows: list[dict], upstream: dict, plugin: dict, lengths: list[int]) -> tuple[str, bool]:
    """The table and the throughput ratios as text, and whether everything held."""
    problems = []
    if not plugin["patched"]:
        problems.append("the plugin installed nothing (is vllm-hotpaths installed where vLLM finds its "
                        "plugins, and is this vLLM version in validated.json?)")
    if upstream["patched"]:
        problems.append("the upstream side was patched (VLLM_HOTPATHS=off was not honoured)")
    lines = [f"device: {upstream['device']}   vLLM {upstream['vllm']}",
             "plugin patched: " + (", ".join(f"{k} ({', '.join(v) or 'left to upstream'})"
                                             for k, v in plugin["patched"].items()) or "nothing"),
             "", "| batch | requests | generated tokens | ids with plugin == without | upstream tok/s | "
                 "plugin tok/s (median, range) |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        verdict = "equal" if r["equal"] else f"DIFFERENT: {r['difference']}"
        if not r["equal"]:
            problems.append(f"{r['batch']}: the plugin changed the generated ids")
        if "forced_ends" in r:
            verdict += f" (end marker forced by the budget: {r['forced_ends'][0]} requests)"
            if not r["forced_ends"][0]:
                problems.append(f"{r['batch']}: no request had its end marker forced: the budget was not exercised")
        if "drafts" in r:
            proposed, accepted = r["drafts"][0]
            verdict += f" (draft tokens proposed: {proposed}, accepted: {accepted})"
            if not proposed:
                problems.append(f"{r['batch']}: no draft token was proposed: the rejection sampler did not run")
        runs = r["plugin_runs"]
        spread = f" ({min(runs):,.0f}-{max(runs):,.0f}, {len(runs)} runs)" if len(runs) > 1 else ""
        rate = (f"{r['upstream_tok_s']:,.0f} | {r['plugin_tok_s']:,.0f}{spread}" if r["timed"] else "- | -")
        lines.append(f"| {r['batch']} | {r['requests']} | {r['tokens']:,} | {verdict} | {rate} |")
    by_name = {r["batch"]: r for r in rows}
    lines.append("")
    for length in [n for n in lengths if f"no penalty @{n}" in by_name]:
        base, pen = by_name[f"no penalty @{length}"], by_name[f"presence 1.5 @{length}"]
        paired = ", ".join(f"{x / y:.2f}x" for x, y in zip(base["plugin_runs"], pen["plugin_runs"]))
        lines.append(f"@{length} tokens: presence 1.5 / no penalty = {base['upstream_tok_s'] / pen['upstream_tok_s']:.2f}x "
                     f"slower upstream, {base['plugin_tok_s'] / pen['plugin_tok_s']:.2f}x with the plugin "
                     f"(medians; run by run {paired}); plugin / upstream with presence: "
                     f"{pen['plugin_tok_s'] / pen['upstream_tok_s']:.2f}x")
    lines += [f"FAIL: {p}" for p in problems]
    return "\n".join(lines), not problems


def parse_markers(text: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """"START_IDS:END_IDS", each a comma-separated list of token ids."""
    try:
        start, end = (tuple(int(x) for x in part.split(",")) for part in text.split(":"))
    except ValueError:
        raise ValueError(f"--think-markers takes START_IDS:END_IDS (ids separated by commas), got {text!r}")
    if not start or not end or min(start + end) < 0:
        raise ValueError(f"--think-markers needs non-negative start and end ids, got {text!r}")
    return start, end


def run(args) -> int:
    try:
        import torch
    except ImportError:
        torch = None
    lengths = [int(x) for x in args.lengths.split(",") if x.strip()]
    if any(n <= 0 for n in lengths) or min(args.batch, args.requests, args.tokens, args.repeat) <= 0:
        print("e2e: --batch, --requests, --tokens, --lengths and --repeat must be positive", file=sys.stderr)
        return 2
    try:
        markers = parse_markers(args.think_markers) if args.think_markers else DUMMY_MARKERS
    except ValueError as err:
        print(f"e2e: {err}", file=sys.stderr)
        return 2
    engines = [name.strip() for name in args.engines.split(",") if name.strip()]
    if not engines or set(engines) - set(ENGINES):
        print(f"e2e: --engines takes some of {', '.join(ENGINES)}, got {args.engines!r}", file=sys.stderr)
        return 2
    if torch is None or not torch.cuda.is_available():
        print("e2e: needs a CUDA GPU (and vLLM installed for it)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(args.model) if args.model else write_dummy_model(Path(tmp, "dummy-qwen2"))
        vocab = json.loads(Path(model, "config.json").read_text())["vocab_size"]
        if max(markers[0] + markers[1]) >= vocab:
            print(f"e2e: marker ids {markers} are outside the model's vocabulary ({vocab})", file=sys.stderr)
            return 2
        max_model_len = PROMPT_LEN + len(markers[0]) + max(lengths + [args.tokens]) + 16
        max_num_seqs = max(args.batch, args.requests)
        engine = dict(model=str(model), skip_tokenizer_init=True, enforce_eager=True, seed=0,
                      attention_config={"backend": "TRITON_ATTN"}, gpu_memory_utilization=args.gpu_memory,
                      max_num_seqs=max_num_seqs, max_model_len=max_model_len)
        if not args.model:  # twice what every sequence at full length needs: no preemption
            engine.update(load_format="dummy",
                          kv_cache_memory_bytes=2 * max_num_seqs * max_model_len * DUMMY_KV_BYTES_PER_TOKEN)
        below = min(markers[0] + markers[1])  # prompt ids stay below every marker id
        built = {"main": (main_batches(markers, below, args.requests, args.tokens, args.batch, lengths),
                          {"think_markers": markers}),
                 "speculative": (speculative_batches(below, args.requests, args.tokens), {"speculative": True})}
        specs = {name: dict(built[name][1], label=name, engine=engine,
                            batches=[b.__dict__ for b in built[name][0]]) for name in engines}
        results = run_engines(specs, args.hotpaths, args.repeat, args.timeout, Path(tmp, "engines"),
                              side_by_side=not args.model)
    rows = [row for name in engines
            for row in compare(built[name][0], results[name]["upstream"], results[name]["plugin"], markers)]
    sides = results[engines[0]]
    text, ok = report(rows, sides["upstream"], sides["plugin"], lengths)
    print("\n".join(runner_lines(results)))
    print(text)
    if args.json:
        summary = {key: sides["upstream"][key] for key in ("vllm", "device")}
        runners = {name: {side: result.get("runner") for side, result in by_side.items()}
                   for name, by_side in results.items()}
        Path(args.json).write_text(json.dumps(dict(summary, patched=sides["plugin"]["patched"], runners=runners,
                                                   rows=rows), indent=1) + "\n")
    return 0 if ok else 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="a model folder (default: a dummy-weight Qwen2 written here)")
    parser.add_argument("--think-markers", metavar="START:END",
                        help="reasoning start and end token ids, e.g. 151667:151668 (default: ids at "
                             "the top of the dummy model's vocabulary)")
    parser.add_argument("--engines", default=",".join(ENGINES), help="which engines run (comma-separated)")
    parser.add_argument("--batch", type=int, default=128, help="requests in each timed batch")
    parser.add_argument("--lengths", default="1500,5000", help="generated tokens of the timed batches")
    parser.add_argument("--repeat", type=int, default=2,
                        help="runs of each timed batch on the plugin side (medians reported; upstream runs once)")
    parser.add_argument("--requests", type=int, default=32, help="requests in each equality batch")
    parser.add_argument("--tokens", type=int, default=256, help="generated tokens in each equality batch")
    parser.add_argument("--hotpaths", default="all", help="VLLM_HOTPATHS for the plugin side")
    parser.add_argument("--gpu-memory", type=float, default=0.4, help="vLLM's gpu_memory_utilization")
    parser.add_argument("--timeout", type=float, default=900,
                        help="seconds an engine process may take to start and run its untimed batches, "
                             "and again for its timed batches")
    parser.add_argument("--json", help="write the rows as JSON")


if __name__ == "__main__":  # one engine, in the process `EngineProcess` starts
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine-dir", required=True, type=Path)
    folder = parser.parse_args().engine_dir
    result = run_engine(json.loads(Path(folder, "spec.json").read_text()), folder)
    Path(folder, "result.tmp").write_text(json.dumps(result))
    Path(folder, "result.tmp").replace(Path(folder, "result.json"))
