"""cached_request_data benchmark: vLLM's own scheduler in decode (`testing.scheduler_loop`, the
AsyncScheduler, B = 256 and 1,024 requests; quick: 256), on the CPU.

Side by side in one run:
- the call: the arguments `schedule()` handed `_make_cached_request_data` at a decode step,
  captured, then upstream's method against the plugin's patched method (the fast fields made
  into vLLM's `CachedRequestData`), called in turn, medians;
- the step: `Scheduler.schedule()` of one scheduler, its decode steps taken in turn upstream and
  patched, medians (what the patch saves of the scheduler's whole step);
- secondary, labelled: the frozen reference against the fast path on the same arguments.
Host work only: records for "cpu" only; none without vLLM.
"""

from __future__ import annotations

import statistics
import time

from vllm_hotpaths import registry, vllm_env

WARM_STEPS = 8


def _captured_arguments(loop):
    """The arguments of `_make_cached_request_data` at the loop's next step (which it takes)."""
    from vllm.v1.core.sched.scheduler import Scheduler

    captured = []
    upstream = Scheduler._make_cached_request_data

    def capture(self, *args):
        captured.append(args)
        return upstream(self, *args)

    Scheduler._make_cached_request_data = capture
    try:
        output = loop.schedule()
    finally:
        Scheduler._make_cached_request_data = upstream
    loop.update(output, loop.sampled(output))
    return captured[0]


def _in_turn(first, second, repeats: int) -> tuple[float, float]:
    times = ([], [])
    for _ in range(repeats):
        for side, call in enumerate((first, second)):
            start = time.perf_counter()
            call()
            times[side].append(time.perf_counter() - start)
    return statistics.median(times[0]), statistics.median(times[1])


def steps_in_turn(loop, patch, steps: int) -> tuple[float, float]:
    times = ([], [])
    for step in range(steps):
        patched = step % 2 == 1
        if patched:
            patch.install()
        start = time.perf_counter()
        output = loop.schedule()
        times[patched].append(time.perf_counter() - start)
        if patched:
            patch.uninstall()
        loop.update(output, loop.sampled(output))
    return statistics.median(times[0]), statistics.median(times[1])


def run(device: str = "cpu", quick: bool = False) -> list[dict]:
    installed = vllm_env.installed_version()
    if device != "cpu" or installed is None:
        return []
    from vllm_hotpaths.cached_request_data import patch
    from vllm_hotpaths.testing.scheduler_loop import DecodeLoop

    hotpath = registry.get("cached_request_data")
    version = hotpath.reference_version_for(installed)
    reference, fast = hotpath.reference(version)(), hotpath.fast_for(version)()
    records = []
    repeats, steps = (50, 16) if quick else (300, 256)
    for batch in (256,) if quick else (256, 1024):
        loop = DecodeLoop(batch, WARM_STEPS + steps + 2)
        for _ in range(WARM_STEPS):
            output = loop.schedule()
            loop.update(output, loop.sampled(output))
        scheduler, args = loop.scheduler, _captured_arguments(loop)
        upstream = type(scheduler)._make_cached_request_data
        patch.install()
        patched = type(scheduler)._make_cached_request_data
        patch.uninstall()
        up_s, patched_s = _in_turn(lambda: upstream(scheduler, *args), lambda: patched(scheduler, *args), repeats)
        records.append(_record(f"decode step's call: installed vLLM {installed} "
                               "Scheduler._make_cached_request_data vs the patched method", batch, up_s, patched_s))
        # the contract takes resumed requests; vLLM's method does not from 0.34
        own = args if len(args) == 5 else (args[0], [], *args[1:])
        ref_s, fast_s = _in_turn(lambda: reference.make(scheduler, *own), lambda: fast.make(scheduler, *own), repeats)
        records.append(_record(f"decode step's call: frozen {version} reference vs columnwise", batch, ref_s, fast_s))
        up_s, patched_s = steps_in_turn(loop, patch, steps)
        records.append(_record(f"Scheduler.schedule() per decode step: installed vLLM {installed} vs patched",
                               batch, up_s, patched_s))
    return records


def _record(what: str, batch: int, base_s: float, fast_s: float) -> dict:
    return {"hotpath": "cached_request_data", "case": what, "size": {"B": batch}, "device": "cpu",
            "reference_s": base_s, "fast_s": fast_s, "ratio": base_s / fast_s}
