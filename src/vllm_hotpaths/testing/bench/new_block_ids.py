"""new_block_ids benchmark: what the drain costs the step where the plugin installs it (vLLM
0.17.1 to 0.25.1). Two of vLLM's own AsyncSchedulers in decode (`testing.scheduler_loop`, the
same prompts of 16 to 512 tokens and the same sampled tokens), one built as upstream builds it and
one built with the patch installed; B = 16, 256 and 1,024 (quick: 16 and 256), on the CPU: their
`Scheduler.schedule()` calls taken in turn, step by step, medians. The record also gives the
block ids each holds at the end. Host work only: records for "cpu" only; none without vLLM or
where the patch is not needed.
"""

from __future__ import annotations

import statistics
import time

from vllm_hotpaths import registry, vllm_env

WARM_STEPS = 8


def run(device: str = "cpu", quick: bool = False) -> list[dict]:
    installed = vllm_env.installed_version()
    if device != "cpu" or installed is None or registry.get("new_block_ids").patch_needed(installed):
        return []
    from vllm_hotpaths.new_block_ids import patch
    from vllm_hotpaths.testing.live.new_block_ids import held
    from vllm_hotpaths.testing.scheduler_loop import DecodeLoop

    records = []
    steps = 32 if quick else 200
    for batch in (16, 256) if quick else (16, 256, 1024):
        loops = [DecodeLoop(batch, WARM_STEPS + steps + 64, mixed_prompts=True)]  # room for the prefill steps
        patch.install()
        try:
            loops.append(DecodeLoop(batch, WARM_STEPS + steps + 64, mixed_prompts=True))
        finally:
            patch.uninstall()
        times = ([], [])
        for loop in loops:
            loop.prefill()
            while loop.in_flight:  # the steps below take one step at a time
                loop.update(*loop.in_flight.popleft())
        for step in range(WARM_STEPS + steps):
            for side in (step % 2, 1 - step % 2):  # who goes first alternates
                loop = loops[side]
                start = time.perf_counter()
                output = loop.schedule()
                if step >= WARM_STEPS:
                    times[side].append(time.perf_counter() - start)
                loop.update(output, loop.sampled(output))
        up_s, patched_s = statistics.median(times[0]), statistics.median(times[1])
        records.append({"hotpath": "new_block_ids", "size": {"B": batch}, "device": "cpu",
                        "case": f"Scheduler.schedule() per decode step: installed vLLM {installed} vs drained "
                                f"(block ids held at the end: {len(held(loops[0].scheduler)):,} vs "
                                f"{len(held(loops[1].scheduler)):,})",
                        "reference_s": up_s, "fast_s": patched_s, "ratio": up_s / patched_s})
    return records
