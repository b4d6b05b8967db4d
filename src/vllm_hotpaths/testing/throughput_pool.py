"""All the alternating pairs of several `vllm-hotpaths throughput` results, pooled per shape: the
pairs' median plugin / upstream ratio (with / without for a `--setting` result), a bootstrap
interval of that median, the geometric mean.

    python -m vllm_hotpaths.testing.throughput_pool THROUGHPUT_JSON [...] [--resamples N] [--seed N]

Pairs from runs of different lengths or engines should not be pooled: every file is expected to
share the first one's sides, tokens per request, vLLM version and device (else it is refused,
naming it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from vllm_hotpaths.testing.throughput import SETTING_SIDES, SIDES


def sides_of(result: dict) -> tuple[str, str]:
    return SIDES if SIDES[1] in result["meta"] else SETTING_SIDES


def pairs_of(result: dict) -> dict[str, list[float]]:
    """Shape -> each turn's second side / first side ratio of tokens per second."""
    def rate(run):
        return run["tokens"] / run["seconds"]

    first, second = sides_of(result)
    return {shape: [rate(b) / rate(a) for a, b in zip(runs[first], runs[second])]
            for shape, runs in result["runs"].items()}


def what_was_run(result: dict) -> tuple:
    sides = sides_of(result)
    meta = result["meta"][sides[1]]
    return sides, result["args"]["tokens"], meta["vllm"], meta["device"]


def pool(results: list[dict], resamples: int = 20_000, seed: int = 0) -> list[dict]:
    """Per shape (in the order first met): the pairs, their median, the 2.5th and 97.5th
    percentiles of the median over `resamples` bootstrap resamplings, and the geometric mean."""
    pooled: dict[str, list[float]] = {}
    for result in results:
        for shape, ratios in pairs_of(result).items():
            pooled.setdefault(shape, []).extend(ratios)
    rng = np.random.default_rng(seed)
    rows = []
    for shape, ratios in pooled.items():
        values = np.asarray(ratios)
        medians = np.median(rng.choice(values, (resamples, values.size)), axis=1)
        low, high = np.percentile(medians, [2.5, 97.5])
        rows.append({"shape": shape, "pairs": int(values.size), "median": float(np.median(values)),
                     "low": float(low), "high": float(high), "geometric_mean": float(np.exp(np.log(values).mean()))})
    return rows


def table(rows: list[dict], sides: tuple[str, str] = SIDES) -> str:
    lines = [f"| shape | pairs | {sides[1]} / {sides[0]}, median of pairs | 95% interval | geometric mean |",
             "|---|---|---|---|---|"]
    lines += [f"| {r['shape']} | {r['pairs']} | {r['median']:.3f} | {r['low']:.3f}-{r['high']:.3f} | "
              f"{r['geometric_mean']:.3f} |" for r in rows]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", type=Path, help="throughput.json files")
    parser.add_argument("--resamples", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.resamples <= 0:
        parser.error("--resamples must be positive")
    results = []
    for path in args.results:
        try:
            results.append(json.loads(path.read_text()))
            what_was_run(results[-1])
        except (OSError, ValueError, KeyError) as err:
            parser.error(f"{path} is not a throughput result ({err})")
    first = what_was_run(results[0])
    for path, result in zip(args.results, results):
        if what_was_run(result) != first:
            parser.error(f"{path} ran {what_was_run(result)}, not {first} (sides, tokens, vLLM, device) as "
                         f"{args.results[0]} did")
    print(table(pool(results, args.resamples, args.seed), first[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
