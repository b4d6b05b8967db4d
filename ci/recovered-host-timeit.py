"""The host work of the patched `sample_recovered_tokens` besides its torch calls and the launch,
timed on a CPU (no GPU needed): `check_inputs`, and the launch's own preparation, the shape's
plan lookup (`SplitVocabDivision.plan`) against the same work done on every call as before the
plans (layout arithmetic, scratch views, counters). Minimum of 7 repeats of 2,000 calls, per call.

    python ci/recovered-host-timeit.py [B K V ...]     (default: 16 3 4096 256 1 1024)
"""

from __future__ import annotations

import os
import sys
import timeit

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import triton  # noqa: E402

from vllm_hotpaths.recovered_tokens import check_inputs, fast  # noqa: E402
from vllm_hotpaths.recovered_tokens.reference import draft_pointer, interpreted_bound  # noqa: E402


def per_call(function) -> float:
    return min(timeit.repeat(function, number=2000, repeat=7)) / 2000 * 1e6


def main(argv: list[str]) -> int:
    values = [int(v) for v in argv] or [16, 3, 4096, 256, 1, 1024]
    if len(values) % 3:
        raise SystemExit("shapes are given as B K V triples")
    for batch, drafts, vocab in zip(values[::3], values[1::3], values[2::3]):
        counts, tokens = [drafts] * batch, batch * drafts
        cu = torch.tensor(counts, dtype=torch.int32).cumsum(0).to(torch.int32)
        ids = torch.zeros(tokens, dtype=torch.int64)
        target, draft, q = torch.rand(tokens, vocab), torch.rand(tokens, vocab), torch.rand(batch, vocab)
        kernel = fast.SplitVocabReciprocal("cpu")

        def every_call():  # what `launch` worked out on every call before the plans
            block, lanes = kernel._lanes_per_program(tokens, vocab)
            slices = kernel._slices(vocab, lanes)
            return (torch.empty_like(ids), draft_pointer(draft, target), interpreted_bound(target, lanes),
                    triton.next_power_of_2(slices), fast._slice_scratch(target.device, tokens, slices),
                    fast._arrival_counters(target.device, tokens))

        timings = {"check_inputs": lambda: check_inputs(drafts, counts, cu, ids, draft, target, q),
                   "out + work per call (before)": every_call,
                   "out + plan lookup": lambda: (torch.empty_like(ids),
                                                 kernel.plan(batch, drafts, tokens, vocab, False, target))}
        print(f"B={batch} k={drafts} V={vocab}: " + ", ".join(f"{name} {per_call(f):.2f} us"
                                                            for name, f in timings.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
