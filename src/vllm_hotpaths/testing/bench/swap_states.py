"""swap_states benchmark: the configuration of vLLM PR #34733's microbenchmark.

512 requests, active lengths 512-2,048 tokens (prompt only), 1,000 random row swaps, at
max_model_len 32,768 (and 4,096 / 131,072 to show what grows with it); then condense after
removing a random half of the rows. Timed side by side in one run: the frozen 0.16.0 reference
(whole rows) and the fast version on the standalone batch; the installed vLLM's own
`InputBatch.swap_states` / `condense` and the fast version on that same kind of `InputBatch`.
The fast version writes what each version writes (whole arrays bit for bit).
Host-side work: it runs on the CPU whatever device is asked for (records only for "cpu").
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from vllm_hotpaths import registry, vllm_env
from vllm_hotpaths.testing.batches.swap_states import BatchState, Request
from vllm_hotpaths.think_budget import Move

BATCH = 512
ACTIVE = (512, 2048)
SWAPS = 1000
VOCAB = 32_000
BLOCK = 16
LENGTHS = (4_096, 32_768, 131_072)


def _requests(rng) -> list[Request]:
    out = []
    for i in range(BATCH):
        n = int(rng.integers(ACTIVE[0], ACTIVE[1] + 1))
        out.append(Request(req_id=f"r{i}", prompt_token_ids=rng.integers(0, VOCAB, n).tolist(),
                           output_token_ids=[], num_computed_tokens=n,
                           block_ids=(rng.integers(1, 10**6, -(-n // BLOCK)).tolist(),),
                           temperature=0.7, top_p=0.9, top_k=50))
    return out


def _filled(kind: str, length: int, requests):
    if kind == "standalone":
        batch = BatchState(BATCH, length, VOCAB, (BLOCK,))
        for request in requests:
            batch.add_request(request)
        return batch
    from vllm_hotpaths.testing.live import swap_states as live

    batch = live.live_batch(BATCH, length, VOCAB, (BLOCK,))
    for request in requests:
        live.add(batch, request)
    return batch


def _time_swaps(swap, batch, pairs, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for i1, i2 in pairs:
            swap(batch, i1, i2)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _time_condense(condense, make_batch, victims, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        batch = make_batch()
        for req_id in victims:
            batch.remove_request(req_id)
        start = time.perf_counter()
        condense(batch)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _implementations():
    """(label, batch kind, baseline swap, baseline condense, fast)."""
    hotpath = registry.get("swap_states")
    fast_factory = dict((version, factory) for _, factory, version in hotpath.candidates())
    reference = hotpath.reference("0.16.0")(Move)
    fast = fast_factory["0.16.0"](Move)
    rows = [("vLLM 0.16.0 semantics (frozen reference)", "standalone", reference.swap_states,
             reference.condense, fast)]
    installed = vllm_env.installed_version()
    if installed is not None:
        from vllm_hotpaths.testing.live.swap_states import move_directions

        version = hotpath.reference_version_for(installed)
        on_vllm = fast_factory[version](move_directions())
        rows.append((f"installed vLLM {installed} InputBatch", "vllm",
                     lambda b, i, j: b.swap_states(i, j), lambda b: b.condense(), on_vllm))
    return rows


def run(device: str = "cpu", quick: bool = False) -> list[dict]:
    if device != "cpu":
        return []
    records = []
    repeats = 3 if quick else 5
    for length in (32_768,) if quick else LENGTHS:
        rng = np.random.default_rng(length)
        requests = _requests(rng)
        pairs = rng.integers(0, BATCH, (SWAPS, 2)).tolist()
        victims = [f"r{i}" for i in rng.choice(BATCH, BATCH // 2, replace=False)]
        for label, kind, base_swap, base_condense, fast in _implementations():
            batch = _filled(kind, length, requests)
            base_s = _time_swaps(base_swap, batch, pairs, repeats)
            fast_s = _time_swaps(fast.swap_states, batch, pairs, repeats)
            records.append(_record("1,000 random swaps", label, length, base_s, fast_s))
            make = lambda: _filled(kind, length, requests)  # noqa: E731
            base_s = _time_condense(base_condense, make, victims, repeats)
            fast_s = _time_condense(fast.condense, make, victims, repeats)
            records.append(_record("condense after removing half", label, length, base_s, fast_s))
    return records


def _record(what: str, label: str, length: int, base_s: float, fast_s: float) -> dict:
    return {"hotpath": "swap_states", "case": f"{what}: {label} vs memmove",
            "size": {"B": BATCH, "L": length}, "device": "cpu",
            "reference_s": base_s, "fast_s": fast_s, "ratio": base_s / fast_s}
