"""Host time of vLLM's scheduler in a decode step, in-process on the CPU (no GPU, no model): the
decode loop of `vllm_hotpaths.testing.scheduler_loop` (B requests of 16 prompt tokens, STEPS
steps of `schedule()` and `update_from_output()` with one sampled token per request, as the
engine core calls them). `async` uses the AsyncScheduler (vLLM's default with async
scheduling). Prints the median milliseconds per step of each call, after 8 steps, and the
medians of the first and the last quarter of the steps (how it grows with the output).

    python ci/scheduler-cost.py [B=1024] [STEPS=256] [sync|async]
"""

import statistics
import sys
import time

from vllm_hotpaths.testing.scheduler_loop import DecodeLoop


def main(batch: int, steps: int, asynchronous: bool) -> None:
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


if __name__ == "__main__":
    args = sys.argv[1:]
    main(int(args[0]) if args else 1024, int(args[1]) if len(args) > 1 else 256,
         len(args) > 2 and args[2] == "async")
