"""What the Gumbel noise costs on this GPU: `sampler_mrv2`'s reference sampling kernel (upstream's
phases: 1024-id blocks, noise, block maximum, then the argmax over blocks) timed on the same
logits with greedy rows (no noise: the kernel's read floor) and with each release era's noise.

Usage (a GPU machine, no vLLM needed): PYTHONPATH=src python ci/gpu/gumbel-cost.py
Prints, per batch size and logits dtype, milliseconds per call (triton.testing.do_bench, median)
and each era's time over the greedy row's.
"""

import torch
from triton.testing import do_bench

from vllm_hotpaths.sampler_mrv2.reference import gumbel_argmax

VOCAB = 151_936
ERAS = (("greedy (no noise)", None), ("Philox -log(-log u), 0.22-0.23", (False, False)),
        ("Philox libdevice log1p, 0.24-0.30", (True, False)), ("murmur3 + series, 0.31-0.33", (False, True)))


def main() -> None:
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  vocabulary {VOCAB}")
    for batch in (256, 1024):
        seed = torch.arange(batch, dtype=torch.int64, device="cuda") * 7919 - 3
        pos = torch.full((batch,), 100, dtype=torch.int64, device="cuda")
        for dtype in (torch.float32, torch.bfloat16):
            logits = (torch.randn(batch, VOCAB, device="cuda") * 4).to(dtype)
            times = {}
            for name, flags in ERAS:
                temperature = torch.full((batch,), 0.0 if flags is None else 1.0, device="cuda")
                log1p, murmur3 = flags or (False, False)
                times[name] = do_bench(lambda: gumbel_argmax(logits, temperature, seed, pos, log1p, murmur3),
                                       return_mode="median")
            copy = do_bench(lambda: torch.empty_like(logits, dtype=torch.float32).copy_(logits), return_mode="median")
            floor = times["greedy (no noise)"]
            gbps = batch * VOCAB * logits.element_size() / floor / 1e6
            print(f"B={batch} {str(dtype).split('.')[-1]}: fp32 copy {copy:.3f} ms; greedy {floor:.3f} ms "
                  f"({gbps:.0f} GB/s read)")
            for name, _ in ERAS[1:]:
                print(f"  {name}: {times[name]:.3f} ms, {times[name] / floor:.2f}x greedy")


if __name__ == "__main__":
    main()
