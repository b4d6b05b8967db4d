"""What the sampler_mrv2 patch adds to a batch it hands to upstream (CPU, vLLM 0.28 or later in
the environment): the patched `Sampler.sample` over an upstream that does nothing, against that
upstream called alone, B requests at temperature 1.0 without a penalty (a batch upstream samples
from the caller's logits, which the patch leaves to it unless the lazy pass takes it).

    python ci/sampler-handoff-cost.py [--batch 64] [--calls 20000]
"""

from __future__ import annotations

import argparse
import inspect
import timeit

import torch

from vllm_hotpaths import registry, vllm_env
from vllm_hotpaths.logits_copy import RequestParams
from vllm_hotpaths.sampler_mrv2 import patch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--calls", type=int, default=20_000)
    args = parser.parse_args()
    version = vllm_env.installed_version()
    too_old = registry.version_key(version) < registry.version_key("0.28.0")
    if registry.get("sampler_mrv2").patch_needed(version) or too_old:
        raise SystemExit(f"needs a vLLM from 0.28 the patch is written for, not {version}")
    patch.install_methods()
    vocab, batch = 1024, args.batch
    live = registry.get("sampler_mrv2").live_factory()(vocab, batch, "cpu")
    for slot in range(batch):
        live.add_request(slot, [slot + 1] * 3, [], RequestParams(temperature=1.0, seed=slot))
    named = live.sampler_args(torch.randn(batch, vocab), list(range(batch)), [0] * batch, [0] * batch, [3] * batch)
    parameters = list(inspect.signature(patch.UPSTREAM["sample"]).parameters)[1:]
    call = [named.get(name) for name in parameters if name != "return_logprobs"]

    def nothing(self, *args, **kwargs):
        return None

    nothing.__signature__ = inspect.signature(patch.UPSTREAM["sample"])  # what the patch binds by

    sampler = live.sampler
    # The patch installed over an upstream that does nothing, on a subclass of this sampler's class.
    sampler.__class__ = type("NoOpSampler", (type(sampler),), {"sample": nothing})
    patch._install_sampler(sampler.__class__)
    sampler._hotpaths_compiled = 0
    patch.lazy_choice(True)
    wrapped = sampler.__class__.sample
    for name, run in (("upstream (no-op)", lambda: nothing(sampler, *call)),
                      ("patched, handing over", lambda: wrapped(sampler, *call))):
        best = min(timeit.timeit(run, number=args.calls) for _ in range(5)) / args.calls * 1e6
        print(f"{name}: {best:.2f} us a call (B = {batch}, vLLM {version})")


if __name__ == "__main__":
    main()
