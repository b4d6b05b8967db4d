"""Host time of vLLM's scheduler in a decode step, in-process on the CPU (no GPU, no model): the
decode loop of `vllm_hotpaths.testing.scheduler_loop`, STEPS steps of `schedule()` and
`update_from_output()` with one sampled token per request, as the engine core calls them.
`async` uses the AsyncScheduler (vLLM's default with async scheduling). Prints the median
milliseconds per step of each call, after 8 steps, and the medians of the first and the last
quarter of the steps (how it grows with the output).

    python ci/scheduler-cost.py [B=1024] [STEPS=256] [sync|async]

As the engine runs it (`--engine`): prompts of 16 to 512 tokens, prefilled first; the batch
queue's pipelining (step N+1 scheduled before step N's output is applied); the garbage collector
as `--gc` says: `engine` (the heap frozen before any request arrives, as vLLM's engine core
does at start-up), `off` (disabled over the timed steps) or `on` (Python's defaults, nothing
frozen). It prints microseconds per request per step and the collections per step with their
time. Several B and several `--gc` run one process each:

    python ci/scheduler-cost.py --engine --batch 128 256 512 1024 2048 --gc engine off on [--steps 160]

The plugin against upstream (`--plugin`): two such schedulers with the same requests and sampled
tokens, every scheduler patch the plugin would install on this vLLM bound to one, their steps
taken in turn (who goes first alternates); the medians of each and their ratio:

    python ci/scheduler-cost.py --plugin --batch 16 256 1024 [--steps 200]
"""

import argparse
import gc
import json
import statistics
import subprocess
import sys
import time

from vllm_hotpaths.testing.scheduler_loop import DecodeLoop, in_turn


def plain(batch: int, steps: int, asynchronous: bool) -> None:
    loop = DecodeLoop(batch, steps, asynchronous)
    schedule, update = [], []
    for step in range(steps):
        start = time.perf_counter()
        try:
            output = loop.schedule()
        except RuntimeError as error:
            raise SystemExit(f"scheduler-cost: {error}") from None
        scheduled = time.perf_counter()
        runner_output = loop.sampled(output)
        before = time.perf_counter()
        loop.update(output, runner_output)
        if step >= 8:
            schedule.append(scheduled - start)
            update.append(time.perf_counter() - before)
    print(f"B={batch} {'async' if asynchronous else 'sync'}: schedule {statistics.median(schedule) * 1e3:.2f} ms, "
          f"update_from_output {statistics.median(update) * 1e3:.2f} ms per step (median of {len(schedule)} steps)")
    quarter = len(schedule) // 4
    if quarter:  # how it grows with the output length: the first and the last quarter of the steps
        print("  first / last quarter: schedule " + " / ".join(f"{statistics.median(part) * 1e3:.2f}" for part in
              (schedule[:quarter], schedule[-quarter:])) + " ms, update_from_output " + " / ".join(
              f"{statistics.median(part) * 1e3:.2f}" for part in (update[:quarter], update[-quarter:])) + " ms")


class Collections:
    """Every collection of the garbage collector while `counting`: its generation and seconds."""

    def __init__(self) -> None:
        self.counting, self.found, self._start = False, [], 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        elif self.counting:
            self.found.append((info["generation"], time.perf_counter() - self._start))


def engine_like(batch: int, steps: int, gc_mode: str) -> dict:
    loop = DecodeLoop(batch, steps + 64, True, mixed_prompts=True)
    if gc_mode == "engine":  # vLLM's freeze_gc_heap() at the engine core's start-up
        for generation in range(3):
            gc.collect(generation)
        gc.freeze()
    loop.prefill()
    for _ in range(8):
        loop.pipelined_step()
    collections = Collections()
    if gc_mode == "off":
        gc.disable()
    schedule, update = [], []
    collections.counting = True
    for _ in range(steps):
        s, u = loop.pipelined_step()
        schedule.append(s)
        update.append(u)
    collections.counting = False
    gc.enable()
    step = [s + u for s, u in zip(schedule, update)]
    return {"B": batch, "gc": gc_mode, "steps": steps,
            "schedule_ms": statistics.median(schedule) * 1e3, "update_ms": statistics.median(update) * 1e3,
            "step_ms": statistics.median(step) * 1e3, "mean_step_ms": statistics.fmean(step) * 1e3,
            "collections_per_step": [sum(1 for g, _ in collections.found if g == k) / steps for k in range(3)],
            "gc_ms_per_step": sum(t for _, t in collections.found) / steps * 1e3}


def sweep(batches: list[int], modes: list[str], steps: int) -> None:
    print("| B | gc | schedule ms | update ms | step ms (median) | step ms (mean) | µs per request (mean) "
          "| collections per step (gen 0/1/2) | gc ms per step |")
    print("|---|---|---|---|---|---|---|---|---|")
    for batch in batches:
        for mode in modes:
            found = subprocess.run([sys.executable, __file__, "--one", str(batch), mode, str(steps)],
                                   capture_output=True, text=True)
            if found.returncode:
                raise SystemExit(f"scheduler-cost: B={batch} gc={mode} failed:\n{found.stderr[-3000:]}")
            r = json.loads(found.stdout.strip().splitlines()[-1])
            print(f"| {batch:,} | {mode} | {r['schedule_ms']:.2f} | {r['update_ms']:.2f} | {r['step_ms']:.2f} "
                  f"| {r['mean_step_ms']:.2f} | {r['mean_step_ms'] * 1e3 / batch:.2f} "
                  f"| {' / '.join(f'{c:.3f}' for c in r['collections_per_step'])} | {r['gc_ms_per_step']:.2f} |",
                  flush=True)


def plugin_against_upstream(batches: list[int], steps: int) -> None:
    from vllm_hotpaths.testing import scheduler_twins

    patches = scheduler_twins.patched_methods(scheduler_twins.scheduler_hotpaths())
    print(f"scheduler patches bound: {', '.join(patches) or 'none'}")
    print("| B | upstream: schedule ms | step ms | plugin: schedule ms | step ms | step: plugin / upstream |")
    print("|---|---|---|---|---|---|")
    for batch in batches:
        inits = {r: f for methods in patches.values() for r, f in methods.items() if r.endswith(".__init__")}
        loops = [DecodeLoop(batch, steps + 72, True, mixed_prompts=True)]
        with scheduler_twins.class_attributes(inits):
            loops.append(DecodeLoop(batch, steps + 72, True, mixed_prompts=True))
        scheduler_twins.bind(loops[1].scheduler, patches)
        for loop in loops:
            loop.prefill()
        scheduled, whole = in_turn(loops, steps)
        su, sp, wu, wp = (statistics.median(t) * 1e3 for t in (*scheduled, *whole))
        print(f"| {batch:,} | {su:.2f} | {wu:.2f} | {sp:.2f} | {wp:.2f} | {wp / wu:.3f} |", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--one"]:
        print(json.dumps(engine_like(int(sys.argv[2]), int(sys.argv[4]), sys.argv[3])))
    elif "--plugin" in sys.argv:
        parser = argparse.ArgumentParser(description="the scheduler's step, the plugin's patches against upstream")
        parser.add_argument("--plugin", action="store_true")
        parser.add_argument("--batch", type=int, nargs="+", default=[16, 256, 1024])
        parser.add_argument("--steps", type=int, default=200)
        args = parser.parse_args()
        plugin_against_upstream(args.batch, args.steps)
    elif "--engine" in sys.argv:
        parser = argparse.ArgumentParser(description="the scheduler's host time per decode step, as the engine runs it")
        parser.add_argument("--engine", action="store_true")
        parser.add_argument("--batch", type=int, nargs="+", default=[128, 256, 512, 1024, 2048])
        parser.add_argument("--gc", nargs="+", choices=("engine", "off", "on"), default=["engine", "off", "on"])
        parser.add_argument("--steps", type=int, default=160)
        args = parser.parse_args()
        sweep(args.batch, args.gc, args.steps)
    else:
        args = sys.argv[1:]
        plain(int(args[0]) if args else 1024, int(args[1]) if len(args) > 1 else 256,
              len(args) > 2 and args[2] == "async")
