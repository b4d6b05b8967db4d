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

`--runners` compares the model runners instead, on a dummy Qwen3 without a reasoning config (which
vLLM 0.22 runs on Model Runner V2): three engines, MRv2 upstream, v1 upstream and v1 with the
plugin (v1 forced by VLLM_USE_V2_MODEL_RUNNER=0), each of which must get the runner it is meant
for. The equality batches run on all three: the plugin's ids must equal v1 upstream's, and MRv2's
may differ from v1's only where a "runner-change" ledger entry of a hot path the request uses
explains it. The timed batches run on each engine alone; then the two v1 engines take turns on
the plain timed batch (`--pairs`), each run on a warm engine, for the plugin / upstream ratio.
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
DUMMY_HEAD_DIM = DUMMY_CONFIG["hidden_size"] // DUMMY_CONFIG["num_attention_heads"]
# K and V per layer and KV head, 4 bytes each (float32 at most)
DUMMY_KV_BYTES_PER_TOKEN = (2 * DUMMY_CONFIG["num_hidden_layers"] * DUMMY_CONFIG["num_key_value_heads"]
                            * DUMMY_HEAD_DIM * 4)
# Qwen2 runs on Model Runner v1 in vLLM 0.22; Qwen3 (dense, unquantized) on Model Runner V2
DUMMY_ARCHITECTURES = ("qwen2", "qwen3")
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


def write_dummy_model(folder: Path, vocab_size: int = DUMMY_VOCAB, architecture: str = "qwen2") -> Path:
    """A configuration of the dummy sizes (vLLM makes up the weights: `load_format="dummy"`)."""
    if architecture == "qwen2":
        from transformers import Qwen2Config

        config = Qwen2Config(vocab_size=vocab_size, architectures=["Qwen2ForCausalLM"], **DUMMY_CONFIG)
    elif architecture == "qwen3":
        from transformers import Qwen3Config

        config = Qwen3Config(vocab_size=vocab_size, architectures=["Qwen3ForCausalLM"], head_dim=DUMMY_HEAD_DIM,
                             **DUMMY_CONFIG)
    else:
        raise ValueError(f"dummy architectures: {', '.join(DUMMY_ARCHITECTURES)}; got {architecture!r}")
    config.save_pretrained(folder)
    return folder


def dummy_engine(model: Path, max_num_seqs: int, max_model_len: int, gpu_memory: float) -> dict:
    """`LLM` keyword arguments for the dummy model: random weights, no tokenizer, eager, and a KV
    cache of twice what every sequence at full length needs (no preemption, and no memory
    profiling that another process on the GPU could disturb)."""
    return dict(model=str(model), skip_tokenizer_init=True, enforce_eager=True, seed=0,
                attention_config={"backend": "TRITON_ATTN"}, gpu_memory_utilization=gpu_memory,
                max_num_seqs=max_num_seqs, max_model_len=max_model_len, load_format="dummy",
                kv_cache_memory_bytes=2 * max_num_seqs * max_model_len * DUMMY_KV_BYTES_PER_TOKEN)


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


def engine_phases(spec: dict) -> list[dict]:
    """What the engine runs, phase by phase: `{"batches": [...], "wait": bool}`; a waiting phase
    starts once the parent writes its go file. A spec without `phases`: its untimed batches, then
    its timed ones (`repeat` times), after a go signal where `wait_for_timed`."""
    if "phases" in spec:
        return spec["phases"]
    order = run_order(spec["batches"], spec.get("repeat", 1))
    timed = [batch for batch in order if batch["timed"]]
    return [{"batches": [batch for batch in order if not batch["timed"]], "wait": False},
            {"batches": timed, "wait": bool(timed and spec.get("wait_for_timed"))}]


def run_engine(spec: dict, folder: Path) -> dict:
    """Start the engine and run its phases: before phase i it waits for `folder/go-i` where the
    phase says so, after it writes `folder/done-i`."""
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
    phases = engine_phases(spec)
    # Warm-up at the largest batch size, with and without penalties: kernels compiled for new
    # shapes or flags would otherwise count against the first timed batch.
    width = max((len(batch["prompts"]) for phase in phases for batch in phase["batches"]), default=1)
    for extra in ({}, {"presence_penalty": 1.5}):
        llm.generate([TokensPrompt(prompt_token_ids=[1, 2, 3, 4])] * width,
                     SamplingParams(max_tokens=32, ignore_eos=True, temperature=1.0, **extra), use_tqdm=False)
    drafts_before = draft_counts(llm) if spec.get("speculative") else None
    for number, phase in enumerate(phases):
        if phase["wait"]:
            wait_for_go(Path(folder, f"go-{number}"))
        for batch in phase["batches"]:
            run_batch(llm, batch, result["batches"])
        Path(folder, f"done-{number}").touch()
    if drafts_before is not None:
        result["drafts"] = [None if None in pair else pair[1] - pair[0] for pair in zip(drafts_before, draft_counts(llm))]
    return result


def wait_for_go(signal: Path) -> None:
    parent = os.getppid()
    while not signal.exists():
        if os.getppid() != parent:  # the parent is gone: nobody will read the result
            raise SystemExit("e2e engine: the parent process exited")
        time.sleep(0.2)


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
    plugin side runs its timed batches `repeat` times. `env` sets (None: removes) variables of
    the process. Files in `folder`: the spec, the process's log, its `done-i` markers, the
    `go-i` signals and the result."""

    def __init__(self, spec: dict, side: str, hotpaths: str, repeat: int, folder: Path,
                 wait_for_timed: bool, env: dict | None = None) -> None:
        self.label, self.side, self.folder = spec["label"], side, folder
        folder.mkdir(parents=True)
        spec = dict(spec, repeat=1 if side == "upstream" else repeat, wait_for_timed=wait_for_timed)
        self.phases = len(engine_phases(spec))
        Path(folder, "spec.json").write_text(json.dumps(spec))
        environment = dict(os.environ, VLLM_HOTPATHS="off" if side == "upstream" else hotpaths,
                           VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_USE_FLASHINFER_SAMPLER="0")
        for key, value in (env or {}).items():
            if value is None:
                environment.pop(key, None)
            else:
                environment[key] = value
        print(f"e2e: {self.label} engine, {side}: starting", flush=True)
        self.began = time.perf_counter()
        with open(folder / "log.txt", "w") as log:
            self.process = subprocess.Popen([sys.executable, "-m", "vllm_hotpaths.testing.e2e", "--engine-dir", str(folder)],
                                            env=environment, stdout=log, stderr=subprocess.STDOUT)

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
        """Until its engine is up and its first phase (the untimed batches) is done."""
        self._wait(Path(self.folder, "done-0").exists, "the end of its untimed batches", timeout)
        print(f"e2e: {self.label} engine, {self.side}: untimed batches done "
              f"({time.perf_counter() - self.began:.0f} s)", flush=True)

    def run_phase(self, number: int, timeout: float) -> float:
        """Let it run phase `number` (the others idle); seconds until it was done."""
        started = time.perf_counter()
        Path(self.folder, f"go-{number}").touch()
        self._wait(Path(self.folder, f"done-{number}").exists, f"the end of its phase {number}", timeout)
        return time.perf_counter() - started

    def finish(self, timeout: float) -> dict:
        """Let it run its remaining phases; its result once it has exited."""
        for number in range(1, self.phases):
            Path(self.folder, f"go-{number}").touch()
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
            return request_difference(request, x, y)
    return None


def request_difference(request: int, x: list[int], y: list[int]) -> str:
    """Where two requests' ids first differ."""
    at = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
    return f"request {request}, token {at}: {x[at:at + 3]} vs {y[at:at + 3]} (lengths {len(x)}, {len(y)})"


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


# -- runner comparison (`--runners`) ----------------------------------------------------------
# The engines, each on the dummy Qwen3 without a reasoning config: name -> (the runner vLLM must
# pick, side, VLLM_USE_V2_MODEL_RUNNER). Unset, vLLM 0.22 picks Model Runner V2 for that model;
# "0" forces Model Runner v1.
RUNNER_ENGINES = {"mrv2 upstream": ("mrv2", "upstream", None),
                  "v1 upstream": ("v1", "upstream", "0"),
                  "v1 plugin": ("v1", "plugin", "0")}
RUNNER_PHASES = ("equality", "timed", "pairs")
# Which hot paths' "runner-change" ledger entries may explain that a request's ids differ between
# Model Runner V2 and v1 (both upstream), by what the request uses. Per equality batch: "greedy"
# uses neither (its ids must be equal), "seeded random" draws ("sampling": MRv2 draws its Gumbel
# noise from per-request seeds, v1 from torch generators), "penalties" penalizes every request
# ("penalties_mrv2": MRv2's penalty arithmetic on CUDA, an approximate 1/p and FMA) and draws in
# half of them.
RUNNER_CHANGES = (("sampling", lambda params: params.get("temperature", 1.0) > 0),
                  ("penalties_mrv2", lambda params: params.get("presence_penalty", 0.0) != 0
                   or params.get("frequency_penalty", 0.0) != 0 or params.get("repetition_penalty", 1.0) != 1))
PAIR_BAR = 0.98  # the median plugin / upstream ratio of the plain-decode pairs that holds


def runner_change_hotpaths(params: dict) -> set[str]:
    """The hot paths whose runner changes can reach a request with these sampling parameters."""
    return {hotpath for hotpath, uses in RUNNER_CHANGES if uses(params)}


def runner_change_entries(hotpaths: set[str], vllm_version: str) -> list:
    """The ledger's "runner-change" entries of these hot paths that cover this vLLM version."""
    from vllm_hotpaths.testing import ledger

    return [entry for entry in ledger.LEDGER if entry.kind == "runner-change" and entry.hotpath in hotpaths
            and entry.applies_to(entry.hotpath, vllm_version)]


def compare_runners(batch: Batch, mrv2: dict, v1: dict, vllm_version: str) -> dict:
    """A batch's ids under Model Runner V2 against v1: every differing request must be explained
    by a runner-change entry of a hot path it uses."""
    a, b = mrv2["batches"][batch.name]["ids"], v1["batches"][batch.name]["ids"]
    row = {"batch": batch.name, "requests": len(batch.prompts), "differing": 0, "unexplained": 0,
           "explained_by": [], "difference": None}
    if len(a) != len(b):
        return dict(row, differing=max(len(a), len(b)), unexplained=max(len(a), len(b)),
                    difference=f"{len(a)} requests vs {len(b)}", ok=False)
    entries: dict[str, object] = {}
    for request, (x, y) in enumerate(zip(a, b)):
        if x == y:
            continue
        row["differing"] += 1
        explaining = runner_change_entries(runner_change_hotpaths(batch.params[request]), vllm_version)
        entries.update((entry.link, entry) for entry in explaining)
        if not explaining:
            row["unexplained"] += 1
            row["difference"] = row["difference"] or request_difference(request, x, y)
    row["explained_by"] = [{"hotpath": entry.hotpath, "link": link} for link, entry in entries.items()]
    return dict(row, ok=not row["unexplained"])


def runner_verdict(row: dict) -> str:
    if not row["differing"]:
        return "equal"
    links = ", ".join(f"{e['link']} ({e['hotpath']})" for e in row["explained_by"])
    if row["ok"]:
        return f"{row['differing']} of {row['requests']} requests differ, explained: {links}"
    return (f"DIFFERENT, {row['unexplained']} of {row['requests']} requests unexplained (first: {row['difference']})"
            + (f"; explained: {links}" if links else ""))


def pair_runs(upstream: dict, plugin: dict) -> list[dict]:
    """Each plain-decode pair's rates and ratio; even pairs (from 0) ran upstream first."""
    return [{"pair": number + 1, "first": ("v1 upstream", "v1 plugin")[number % 2], "upstream_tok_s": up,
             "plugin_tok_s": on, "ratio": on / up}
            for number, (up, on) in enumerate(zip(rates(upstream), rates(plugin)))]


def pair_order(number: int) -> tuple[str, str]:
    """Which engine of pair `number` (from 0) runs first: upstream, then they alternate."""
    return ("v1 upstream", "v1 plugin") if number % 2 == 0 else ("v1 plugin", "v1 upstream")


def runner_report(equality: list[Batch], timed: list[Batch], pairs: Batch | None,
                  results: dict[str, dict]) -> tuple[str, bool, dict]:
    """The runner comparison as text, whether it held, and its summary for `--json`. `results`:
    engine name (of RUNNER_ENGINES) -> its result, for the engines started."""
    from vllm_hotpaths import runners

    problems, summary = [], {"runners": {}, "expected_runners": {}, "equality": [], "timed": [], "pairs": None}
    first = next(iter(results.values()))
    summary.update(vllm=first["vllm"], device=first["device"])
    titled = {}
    for name, result in results.items():
        expected, side, _ = RUNNER_ENGINES[name]
        got = result.get("runner")
        summary["runners"][name], summary["expected_runners"][name] = got, expected
        titled[name] = f"{name} ({runners.TITLES.get(got, 'runner unknown')})"
        if got != expected:
            problems.append(f"the {name} engine runs {runners.TITLES.get(got, 'an unknown runner')}, "
                            f"not {runners.TITLES[expected]}")
        if side == "upstream" and result["patched"]:
            problems.append(f"the {name} engine was patched (VLLM_HOTPATHS=off was not honoured)")
    plugin, upstream, mrv2 = (results.get(name) for name in ("v1 plugin", "v1 upstream", "mrv2 upstream"))
    if plugin is not None:
        summary["patched"] = plugin["patched"]
        if not plugin["patched"]:
            problems.append("the plugin installed nothing (is vllm-hotpaths installed where vLLM finds its "
                            "plugins, and is this vLLM version in validated.json?)")
    lines = [f"device: {first['device']}   vLLM {first['vllm']}",
             *[f"engine {name}: {runners.TITLES.get(result.get('runner'), 'runner unknown')}"
               for name, result in results.items()]]

    def plugin_verdict(batch: Batch) -> str:
        difference = first_difference(upstream["batches"][batch.name]["ids"], plugin["batches"][batch.name]["ids"])
        if difference:
            problems.append(f"{batch.name}: the plugin changed the generated ids (v1 plugin vs v1 upstream)")
        return f"DIFFERENT: {difference}" if difference else "equal"

    if equality:
        lines += ["", "| batch | requests | v1 plugin == v1 upstream | MRv2 upstream vs v1 upstream |",
                  "|---|---|---|---|"]
        for batch in equality:
            row = compare_runners(batch, mrv2, upstream, first["vllm"])
            row["plugin"] = plugin_verdict(batch)
            if not row["ok"]:
                problems.append(f"{batch.name}: Model Runner V2 and v1 generated different ids that no runner-change "
                                f"ledger entry explains ({row['unexplained']} requests; first: {row['difference']})")
            summary["equality"].append(row)
            lines.append(f"| {batch.name} | {row['requests']} | {row['plugin']} | {runner_verdict(row)} |")
    if timed:
        names = [name for name in RUNNER_ENGINES if name in results]
        lines += ["", "| batch (tok/s) | " + " | ".join(titled[name] for name in names)
                  + " | v1 plugin == v1 upstream |", "|---" * (len(names) + 2) + "|"]
        for batch in timed:
            rate = {name: rates(results[name]["batches"][batch.name])[0] for name in names}
            row = {"batch": batch.name, "tok_s": rate, "plugin": plugin_verdict(batch)}
            summary["timed"].append(row)
            lines.append(f"| {batch.name} | " + " | ".join(f"{rate[name]:,.0f}" for name in names)
                         + f" | {row['plugin']} |")
    if pairs is not None:
        runs = pair_runs(upstream["batches"][pairs.name], plugin["batches"][pairs.name])
        median = statistics.median(run["ratio"] for run in runs)
        verdict = plugin_verdict(pairs)
        summary["pairs"] = {"batch": pairs.name, "runs": runs, "median_ratio": median, "bar": PAIR_BAR,
                            "meets_bar": median >= PAIR_BAR, "plugin": verdict}
        lines += ["", f"plain-decode pairs ({pairs.name}, v1 plugin / v1 upstream; first pair's ids: {verdict}):",
                  "| pair | first | v1 upstream tok/s | v1 plugin tok/s | plugin / upstream |", "|---|---|---|---|---|"]
        lines += [f"| {run['pair']} | {run['first']} | {run['upstream_tok_s']:,.0f} | {run['plugin_tok_s']:,.0f} | "
                  f"{run['ratio']:.3f} |" for run in runs]
        lines.append(f"median plugin / upstream over {len(runs)} pairs: {median:.3f}: "
                     + (f"meets the bar (>= {PAIR_BAR})" if median >= PAIR_BAR else f"BELOW the bar ({PAIR_BAR})"))
    summary["problems"] = problems
    lines += [f"FAIL: {problem}" for problem in problems]
    return "\n".join(lines), not problems, summary


def runner_specs(engine: dict, phases: set[str], equality: list[Batch], timed: list[Batch],
                 pairs: Batch | None, count: int) -> dict[str, dict]:
    """Each engine's spec: phase 0 the equality batches, phase 1 the timed ones, then (v1 engines)
    one phase per plain-decode pair. Model Runner V2 starts only for equality or timed batches."""
    specs = {}
    for name, (runner, side, _) in RUNNER_ENGINES.items():
        if runner == "mrv2" and not phases & {"equality", "timed"}:
            continue
        steps = [{"batches": [b.__dict__ for b in equality], "wait": False},
                 {"batches": [b.__dict__ for b in timed], "wait": True}]
        if runner == "v1" and pairs is not None:
            steps += [{"batches": [pairs.__dict__], "wait": True} for _ in range(count)]
        specs[name] = {"label": runner, "engine": engine, "phases": steps}
    return specs


def run_runner_engines(specs: dict[str, dict], hotpaths: str, timeout: float, root: Path,
                       count: int) -> dict[str, dict]:
    """Engine name -> result. All start at once and run their equality batches together; then each
    runs its timed batches alone (the others idle), Model Runner V2 exits, and the v1 engines run
    `count` plain-decode pairs, taking turns (upstream first in even pairs), each a warm engine."""
    processes: dict[str, EngineProcess] = {}
    results: dict[str, dict] = {}
    try:
        for name, spec in specs.items():
            _, side, v2 = RUNNER_ENGINES[name]
            processes[name] = EngineProcess(spec, side, hotpaths, 1, root / name.replace(" ", "-"), True,
                                            env={"VLLM_USE_V2_MODEL_RUNNER": v2})
        for process in processes.values():
            process.wait_untimed(timeout)
        for name, process in processes.items():
            print(f"e2e: {name}: timed batches {process.run_phase(1, timeout):.0f} s", flush=True)
        if "mrv2 upstream" in processes:
            results["mrv2 upstream"] = processes["mrv2 upstream"].finish(timeout)
        for number in range(count):
            for name in pair_order(number):
                seconds = processes[name].run_phase(2 + number, timeout)
                print(f"e2e: pair {number + 1}, {name}: {seconds:.0f} s", flush=True)
        for name, process in processes.items():
            if name not in results:
                results[name] = process.finish(timeout)
    finally:
        for process in processes.values():
            process.stop()
    return {name: results[name] for name in processes}


def run_runners(args, lengths: list[int]) -> int:
    """`--runners`: Model Runner V2 and v1 upstream and v1 with the plugin, on the dummy Qwen3."""
    phases = {name.strip() for name in (args.only or ",".join(RUNNER_PHASES)).split(",") if name.strip()}
    if not phases or phases - set(RUNNER_PHASES):
        print(f"e2e: --only takes some of {', '.join(RUNNER_PHASES)}, got {args.only!r}", file=sys.stderr)
        return 2
    if args.model or args.think_markers:
        print("e2e: --runners runs the dummy Qwen3 model without a reasoning config: no --model or "
              "--think-markers", file=sys.stderr)
        return 2
    try:
        import torch
    except ImportError:
        torch = None
    if torch is None or not torch.cuda.is_available():
        print("e2e: needs a CUDA GPU (and vLLM installed for it)", file=sys.stderr)
        return 2
    equality = equality_batches(DUMMY_VOCAB, args.requests, args.tokens) if "equality" in phases else []
    timed = timed_batches(DUMMY_VOCAB, args.batch, lengths) if "timed" in phases else []
    count = args.pairs if "pairs" in phases else 0
    pairs = None
    if count:
        plain = timed_batches(DUMMY_VOCAB, args.batch, [max(lengths)])[0]
        pairs = Batch(f"pairs: {plain.name}", plain.prompts, plain.params, timed=True)
    with tempfile.TemporaryDirectory() as tmp:
        model = write_dummy_model(Path(tmp, "dummy-qwen3"), architecture="qwen3")
        max_num_seqs = max(args.batch, args.requests)
        engine = dummy_engine(model, max_num_seqs, PROMPT_LEN + max(lengths + [args.tokens]) + 16, args.gpu_memory)
        specs = runner_specs(engine, phases, equality, timed, pairs, count)
        results = run_runner_engines(specs, args.hotpaths, args.timeout, Path(tmp, "engines"), count)
    text, ok, summary = runner_report(equality, timed, pairs, results)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1) + "\n")
    return 0 if ok else 1


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
    lengths = [int(x) for x in (args.lengths or ("5000" if args.runners else "1500,5000")).split(",") if x.strip()]
    if not lengths or any(n <= 0 for n in lengths) or min(args.batch, args.requests, args.tokens, args.repeat) <= 0:
        print("e2e: --batch, --requests, --tokens, --lengths and --repeat must be positive", file=sys.stderr)
        return 2
    if args.pairs < 0:
        print("e2e: --pairs must not be negative", file=sys.stderr)
        return 2
    if args.runners:
        return run_runners(args, lengths)
    if args.only:
        print("e2e: --only belongs to --runners", file=sys.stderr)
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
        if args.model:
            engine = dict(model=str(model), skip_tokenizer_init=True, enforce_eager=True, seed=0,
                          attention_config={"backend": "TRITON_ATTN"}, gpu_memory_utilization=args.gpu_memory,
                          max_num_seqs=max_num_seqs, max_model_len=max_model_len)
        else:
            engine = dummy_engine(model, max_num_seqs, max_model_len, args.gpu_memory)
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
    parser.add_argument("--lengths", help="generated tokens of the timed batches (default 1500,5000; "
                                           "with --runners 5000)")
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
    parser.add_argument("--runners", action="store_true",
                        help="instead: Model Runner V2 upstream, v1 upstream and v1 with the plugin on a dummy Qwen3")
    parser.add_argument("--only", metavar="PHASES",
                        help=f"with --runners: which phases run, comma-separated (default {','.join(RUNNER_PHASES)})")
    parser.add_argument("--pairs", type=int, default=3,
                        help="with --runners: plain-decode pairs, v1 upstream and v1 plugin taking turns")


if __name__ == "__main__":  # one engine, in the process `EngineProcess` starts
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine-dir", required=True, type=Path)
    folder = parser.parse_args().engine_dir
    result = run_engine(json.loads(Path(folder, "spec.json").read_text()), folder)
    Path(folder, "result.tmp").write_text(json.dumps(result))
    Path(folder, "result.tmp").replace(Path(folder, "result.json"))
