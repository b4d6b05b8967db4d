"""Measures the grid that `recovered_tokens.dispatch` reads, on this machine's GPU (CUDA only).

At every point (B requests of k drafts over V ids, without and with draft probabilities), side by
side: upstream's `sample_recovered_tokens` and the patched one taking the fast path, both called
as vLLM calls them, host work included. The two sides' ids are checked equal first. Then ROUNDS
rounds, the side that goes first alternating, each timing CALLS calls of one side by wall clock,
ended by one synchronize, over copies of the inputs (together more than twice the L2 cache, or
one per call where a round's calls cannot span that); a side's time is its median round, per
call. Points whose inputs would pass MAX_INPUT_BYTES are not measured (the dispatch then keeps
upstream's call there).

    python -m vllm_hotpaths.testing.bench.recovered_dispatch --out dispatch.json [--merge FILE]
        [--requests 1 4 ...] [--drafts 1 2 ...] [--vocab 32000 ...] [--rounds 5] [--calls 50]

`--out` gets the file `recovered_tokens/dispatch.json` takes (`--merge`: that file with this GPU
model's entry replaced), and one line per point is printed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shlex
import statistics
import sys
import time
from pathlib import Path

REQUESTS = (1, 4, 16, 64, 256, 1024)
DRAFTS = (1, 2, 4, 8)
VOCABS = (32_000, 129_280, 151_936, 262_144)
ROUNDS = 5
CALLS = 50
MAX_INPUT_BYTES = 4 * 2 ** 30  # target probabilities of one copy


def timed_rounds(calls: dict, copies: list[dict], rounds: int, per_round: int, sync) -> dict[str, float]:
    """Side -> median over `rounds` of the wall seconds per call of `per_round` calls."""
    times: dict[str, list[float]] = {side: [] for side in calls}
    for r in range(rounds):
        for side in (list(calls) if r % 2 == 0 else list(calls)[::-1]):
            call = calls[side]
            sync()
            start = time.perf_counter()
            for i in range(per_round):
                call(copies[i % len(copies)])
            sync()
            times[side].append((time.perf_counter() - start) / per_round)
    return {side: statistics.median(t) for side, t in times.items()}


def measure(requests, drafts, vocabs, rounds: int, per_round: int, device: str = "cuda", log=print) -> list[list]:
    """The grid's points: [B, k, V, draft_probs, upstream_s, fast_s] (on a CPU the kernels run
    interpreted: the code runs, its times mean nothing)."""
    import torch

    from vllm_hotpaths import vllm_env
    from vllm_hotpaths.testing.bench import recovered_tokens as bench

    version = vllm_env.installed_version()
    module = bench.upstream_module()
    if module is None:
        raise SystemExit("recovered_dispatch: vLLM cannot be imported, nothing to measure against")
    upstream, patched = bench.upstream_and_patched(module, version)
    calls = {side: bench.whole_call(function, bench.sampling_metadata({}))
             for side, function in (("upstream", upstream), ("fast", patched))}
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    points = []
    for batch, k, vocab, with_probs in itertools.product(requests, drafts, vocabs, (False, True)):
        read = batch * k * vocab * 4
        if read > MAX_INPUT_BYTES:
            log(f"B={batch} k={k} V={vocab} draft_probs={with_probs}: inputs of {read / 2 ** 30:.1f} GiB, not measured")
            continue
        args = bench.inputs(batch, k, vocab, with_probs, device)
        spread = -(-bench.SPREAD_BYTES // (read * (2 if with_probs else 1)))  # copies past the L2 cache
        copies = [args] + [bench.inputs(batch, k, vocab, with_probs, device) for _ in range(min(spread, per_round) - 1)]
        ids = []
        for side in calls:
            torch.manual_seed(0)
            ids.append(calls[side](args))
        bench._same(ids[1], ids[0], f"B={batch} k={k} V={vocab} ids")
        for copy in copies:  # warm-up: compilation, allocator, launch plans
            for call in calls.values():
                call(copy)
        got = timed_rounds(calls, copies, rounds, per_round, sync)
        points.append([batch, k, vocab, with_probs, got["upstream"], got["fast"]])
        log(f"B={batch} k={k} V={vocab} draft_probs={with_probs}: upstream {got['upstream'] * 1e6:.1f} us, "
            f"patched {got['fast'] * 1e6:.1f} us, {got['upstream'] / got['fast']:.2f}x")
        del args, copies
        if device == "cuda":
            torch.cuda.empty_cache()
    return points


def write(out: Path, gpu: str, points: list[list], command: str, merge: Path | None = None):
    """The dispatch file with `gpu`'s entry (the other GPU models of `merge` kept); returns that
    entry as the dispatch reads it."""
    import torch

    from vllm_hotpaths import vllm_env
    from vllm_hotpaths.recovered_tokens import dispatch
    from vllm_hotpaths.testing import fixtures, gate

    base = json.loads((merge or dispatch.DISPATCH_FILE).read_text())
    if not merge:
        base["gpus"] = {}
    base["gpus"][gpu] = {"vllm": vllm_env.installed_version(), "commit": gate.suite_commit(Path(__file__).parent),
                         "torch": torch.__version__, "command": command, "points": points}
    out.write_text(fixtures.encode_lines(base) + "\n")  # one line per point
    return dispatch.load(out)[gpu]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vllm_hotpaths.testing.bench.recovered_dispatch",
                                     description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--merge", type=Path, help="a dispatch file whose other GPU models are kept")
    parser.add_argument("--requests", type=int, nargs="+", default=REQUESTS)
    parser.add_argument("--drafts", type=int, nargs="+", default=DRAFTS)
    parser.add_argument("--vocab", type=int, nargs="+", default=VOCABS)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--calls", type=int, default=CALLS)
    args = parser.parse_args(argv)
    for name in ("requests", "drafts", "vocab"):
        if min(getattr(args, name)) < 1:
            parser.error(f"--{name} values must be at least 1")
    if args.rounds < 1 or args.calls < 1:
        parser.error("--rounds and --calls must be at least 1")
    import torch

    from vllm_hotpaths.recovered_tokens import dispatch

    if args.merge:
        try:
            dispatch.load(args.merge)
        except dispatch.DispatchFileError as error:
            parser.error(str(error))
    if not torch.cuda.is_available():
        print("recovered_dispatch: CUDA only (the split kernel's time means nothing interpreted); nothing measured")
        return 1
    gpu = torch.cuda.get_device_name()
    points = measure(sorted(set(args.requests)), sorted(set(args.drafts)), sorted(set(args.vocab)), args.rounds,
                     args.calls)
    given = list(argv if argv is not None else sys.argv[1:])
    # the output named by its file name alone: where it was written says nothing about the grid
    given = [args.out.name if arg == str(args.out) else arg.replace(f"={args.out}", f"={args.out.name}")
             for arg in given]
    command = ["python", "-m", "vllm_hotpaths.testing.bench.recovered_dispatch", *given]
    won = write(args.out, gpu, points, shlex.join(command), args.merge)
    print(f"{gpu}: {sum(won.won.values())} of {len(won.won)} points won by the patched call "
          f"(at least {dispatch.MARGIN}x); written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
