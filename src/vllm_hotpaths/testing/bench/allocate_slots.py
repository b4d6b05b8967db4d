"""allocate_slots benchmark: the scheduler's step with the decode fast path against upstream's
own (`scheduler_step`: two AsyncSchedulers in decode, pipelined, B = 16, 256 and 1,024)."""

from __future__ import annotations

from vllm_hotpaths.testing.bench.scheduler_step import records


def run(device: str = "cpu", quick: bool = False) -> list[dict]:
    return records("allocate_slots", "decode fast path", device, quick)
