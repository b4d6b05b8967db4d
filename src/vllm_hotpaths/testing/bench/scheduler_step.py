"""The scheduler's step with one scheduler hot path's patch, against upstream's own, as the
engine runs it: two of vLLM's own AsyncSchedulers in decode (`testing.scheduler_loop`: the same
prompts of 16 to 512 tokens and the same sampled tokens, pipelined as the batch queue steps
them), the patch bound to one; B = 16, 256 and 1,024 (quick: 16 and 256), on the CPU. Their
steps taken in turn (who goes first alternates), medians of `schedule()` and of the whole step
(`schedule()` and `update_from_output()`). Host work only: records for "cpu" only; none without
vLLM or where the patch is not installed."""

from __future__ import annotations

import statistics

from vllm_hotpaths import vllm_env

WARM_STEPS = 8


def records(hotpath: str, fast_name: str, device: str = "cpu", quick: bool = False) -> list[dict]:
    installed = vllm_env.installed_version()
    if device != "cpu" or installed is None:
        return []
    from vllm_hotpaths.testing import scheduler_twins
    from vllm_hotpaths.testing.scheduler_loop import DecodeLoop, in_turn

    patches = scheduler_twins.patched_methods([hotpath])
    if not patches:
        return []
    found = []
    steps = 40 if quick else 200
    for batch in (16, 256) if quick else (16, 256, 1024):
        loops = [DecodeLoop(batch, WARM_STEPS + steps + 64, mixed_prompts=True) for _ in range(2)]  # room for prefill
        scheduler_twins.bind(loops[1].scheduler, patches)
        for loop in loops:
            loop.prefill()
        times = dict(zip(("schedule", "step"), in_turn(loops, steps, WARM_STEPS)))
        for what, (up, fast) in times.items():
            up_s, fast_s = statistics.median(up), statistics.median(fast)
            found.append({"hotpath": hotpath, "size": {"B": batch}, "device": "cpu",
                          "case": f"{'Scheduler.schedule()' if what == 'schedule' else 'schedule() + update_from_output()'}"
                                  f" per pipelined decode step: installed vLLM {installed} vs {fast_name}",
                          "reference_s": up_s, "fast_s": fast_s, "ratio": up_s / fast_s})
    return found
