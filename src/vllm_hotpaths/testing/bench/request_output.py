"""request_output benchmark: the scheduler's step with `_update_request_with_output` in one frame
against upstream's own (`scheduler_step`: two AsyncSchedulers in decode, pipelined, B = 16, 256
and 1,024)."""

from __future__ import annotations

from vllm_hotpaths.testing.bench.scheduler_step import records


def run(device: str = "cpu", quick: bool = False) -> list[dict]:
    return records("request_output", "fused fast path", device, quick)
