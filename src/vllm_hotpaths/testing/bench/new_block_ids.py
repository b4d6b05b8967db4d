"""new_block_ids benchmark: what the drain costs the step where the plugin installs it (vLLM
0.17.1 to 0.25.1). vLLM's own AsyncScheduler in decode (`testing.scheduler_loop`, prompts of 16
to 512 tokens), B = 16, 256 and 1,024 (quick: 16 and 256), on the CPU: `Scheduler.schedule()`
of one scheduler, its decode steps taken in turn upstream and patched, medians. Host work only:
records for "cpu" only; none without vLLM or where the patch is not needed.
"""

from __future__ import annotations

from vllm_hotpaths import registry, vllm_env
from vllm_hotpaths.testing.bench.cached_request_data import WARM_STEPS, steps_in_turn


def run(device: str = "cpu", quick: bool = False) -> list[dict]:
    installed = vllm_env.installed_version()
    if device != "cpu" or installed is None or registry.get("new_block_ids").patch_needed(installed):
        return []
    from vllm_hotpaths.new_block_ids import patch
    from vllm_hotpaths.testing.scheduler_loop import DecodeLoop

    records = []
    steps = 32 if quick else 200
    for batch in (16, 256) if quick else (16, 256, 1024):
        loop = DecodeLoop(batch, WARM_STEPS + steps + 64, mixed_prompts=True)  # room for the prefill steps
        loop.prefill()
        while loop.in_flight:  # the steps below take one step at a time
            loop.update(*loop.in_flight.popleft())
        for _ in range(WARM_STEPS):
            output = loop.schedule()
            loop.update(output, loop.sampled(output))
        up_s, patched_s = steps_in_turn(loop, patch, steps)
        records.append({"hotpath": "new_block_ids", "size": {"B": batch}, "device": "cpu",
                        "case": f"Scheduler.schedule() per decode step: installed vLLM {installed} vs drained",
                        "reference_s": up_s, "fast_s": patched_s, "ratio": up_s / patched_s})
    return records
