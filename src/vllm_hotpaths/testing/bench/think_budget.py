"""Thinking-budget benchmark: per-step cost of the holder as outputs grow.

B = 128 requests think with a huge budget: each output opens with the start marker and never
contains the two-token end marker, so upstream searches the whole output for it at every step.
A timed step is the sampler's holder work: `update_state` then `apply_to_logits` on `[B, V]` fp32
logits on the device, after every row has grown by one token. Rows are `TrackedTokenList`s (what
the plugin installs) or plain lists (compared with a private copy instead). When vLLM is
installed, its own holder is timed in the same run as a further baseline.
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import torch

from vllm_hotpaths import registry
from vllm_hotpaths.think_budget import BatchUpdate, Params, ThinkConfig
from vllm_hotpaths.tracked_list import TrackedTokenList

BATCH = 128
VOCAB = 151_936
START, END = (151_667,), (151_668, 151_669)  # ids no generated token takes
LENGTHS = (1_000, 4_000, 12_000, 32_000)
BUDGET = 10**9


def _rows(length: int, tracked: bool, rng) -> list[list[int]]:
    kind = TrackedTokenList if tracked else list
    return [kind([*START, *rng.integers(0, 151_000, length - len(START)).tolist()]) for _ in range(BATCH)]


def _median_step(holder, rows, logits, steps: int, sync, rng) -> float:
    times = []
    for _ in range(steps):
        for row, token in zip(rows, rng.integers(0, 151_000, BATCH).tolist()):
            row.append(token)
        sync()
        start = time.perf_counter()
        holder.update_state(rows, None)
        holder.apply_to_logits(logits, False, None)
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _time(factory, config, device, length, tracked, steps) -> float:
    rng = np.random.default_rng(length)
    rows = _rows(length, tracked, rng)
    holder = factory(config, device)
    holder.sync_batch(BatchUpdate(BATCH, (), [(i, Params(BUDGET), [1, 2, 3], row) for i, row in enumerate(rows)], []))
    logits = torch.randn((BATCH, VOCAB), device=device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    _median_step(holder, rows, logits, 1, sync, rng)  # warm-up: the first step searches everything
    return _median_step(holder, rows, logits, steps, sync, rng)


def run(device: str = "cpu", quick: bool = False) -> list[dict]:
    hotpath = registry.get("think_budget")
    config = ThinkConfig(START, END, VOCAB, max_num_seqs=BATCH)
    fast = {version: factory for _, factory, version in hotpath.candidates()}
    pairs = [(version, "frozen reference", hotpath.reference(version), fast[version], True)
             for version in sorted(fast)]
    first = min(fast, key=registry.version_key)  # the holder's first semantics
    pairs.append((first, "frozen reference, plain-list rows", hotpath.reference(first), fast[first], False))
    try:
        live = registry.resolve(hotpath.live)
        live(config, "cpu")
        from vllm_hotpaths import vllm_env

        installed = vllm_env.installed_version()
        pairs.append((hotpath.reference_version_for(installed), f"installed vLLM {installed}", live,
                      fast[hotpath.reference_version_for(installed)], True))
    except ImportError:
        pass
    records = []
    for length in LENGTHS[:2] if quick else LENGTHS:
        steps = 3 if quick else 10
        for version, label, baseline, candidate, tracked in pairs:
            base_s = _time(baseline, config, device, length, tracked, steps)
            fast_s = _time(candidate, config, device, length, tracked, 3 * steps)  # cheap: more steps
            records.append({
                "hotpath": "think_budget",
                "case": f"update_state + apply_to_logits, {version} semantics ({label} vs watermark)",
                "size": {"B": BATCH, "L": length},
                "device": device,
                "reference_s": base_s,
                "fast_s": fast_s,
                "ratio": base_s / fast_s,
            })
    return records
