"""Host time of the fused sampling pass, phase by phase (CUDA): how long `FusedSamplingPass.sample`
keeps the host busy before its work is queued, at B = 256 and 1,024, V = 151,936, bf16 logits,
temperature 1.0 seeded requests. Each phase is timed from a synchronized start to its return
(no synchronization after: the host's own time), median of 50. Run:
`PYTHONPATH=src python ci/gpu/sampler-host-cost.py`."""

import statistics
import time

import numpy as np
import torch

from vllm_hotpaths.logits_copy import RequestParams
from vllm_hotpaths.logits_copy.reference import check_rows
from vllm_hotpaths.sampler_mrv2.fast import FusedSamplingPass031

V = 151_936


def host_us(call, repeats=50):
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    torch.cuda.synchronize()
    return statistics.median(times) * 1e6


def main():
    print(f"device: {torch.cuda.get_device_name()}")
    for batch in (256, 1024):
        fast = FusedSamplingPass031(V, batch, "cuda")
        for slot in range(batch):
            fast.add_request(slot, [slot], [], RequestParams(temperature=0.7, seed=slot))
        rows = np.arange(batch)
        local_pos, input_ids, pos = np.zeros(batch, np.int64), (rows + 1) % V, np.full(batch, 8)
        logits = torch.randn((batch, V), device="cuda").to(torch.bfloat16)
        args = (logits, rows, local_pos, input_ids, pos)
        fast.sample(*args, processed=False)
        table = fast._row_table(rows, pos, local_pos, input_ids)
        phases = {
            "check_rows": lambda: check_rows(logits, rows, local_pos, input_ids, pos, fast.reference.occupied, V),
            "row table (pinned copy)": lambda: fast._row_table(rows, pos, local_pos, input_ids),
            "sample_rows (launches)": lambda: fast.sample_rows(logits, table, False, False, 0, False),
            "empty x2": lambda: (torch.empty((batch, 149), dtype=torch.int64, device="cuda"),
                                 torch.empty((batch, 149), dtype=torch.float32, device="cuda")),
            "sample (whole call)": lambda: fast.sample(*args, processed=False),
        }
        for name, call in phases.items():
            print(f"B={batch:5} {name:26} {host_us(call):8.1f} us host")
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(20):
            fast.sample_rows(logits, table, False, False, 0, False)
        end.record()
        torch.cuda.synchronize()
        print(f"B={batch:5} {'device, back to back':26} {start.elapsed_time(end) / 20 * 1e3:8.1f} us")


if __name__ == "__main__":
    main()
