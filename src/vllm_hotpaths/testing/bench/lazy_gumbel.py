"""The lazy sampling pass against the fused pass and vLLM's own `Sampler.sample` on rows shaped like a
model's (CUDA): B = 1,024 requests of one row, V = 151,936, bf16 logits. A row is a bulk of
normal logits (scale 2) and a head of 8 ids at `gap` above it (plus normal noise, scale 1); gap 0
is a flat row, where nothing can be skipped. Each point: the requests' temperature (0.6 or 1.0,
the head's gap after it is gap / t), without a penalty and with presence 1.5. Reported per point:
the share of the batch's ids whose noise the lazy pass drew, and whole-call wall times measured
side by side as `bench.sampler_mrv2` measures them (host work included; upstream with its
device-side arguments prebuilt), with `triton.testing.do_bench` device times. Where the plugin's
patch is written for the installed vLLM, also vLLM's `Sampler.sample` patched, called with the
same prebuilt arguments as upstream's (the whole call as vLLM makes it): its pass forced fused
(a batch upstream samples unprocessed, from 0.27, then goes to upstream: the patch's hand-over),
forced lazy, and chosen per batch (`sampler_mrv2.pass_choice`). The ids of all sides are
compared before timing.

At a small B a call is mostly host work: each timed loop then makes 1,024 / B calls on the same
logits, so that a loop lasts about as long at every B.

    python -m vllm_hotpaths.testing.bench.lazy_gumbel [--json FILE] [--batch B ...] [--gaps G ...] [--release X]
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from vllm_hotpaths import registry, vllm_env
from vllm_hotpaths.logits_copy import RequestParams
from vllm_hotpaths.sampler_mrv2 import lazy
from vllm_hotpaths.testing.bench.sampler_mrv2 import (KINDS, VOCAB, _upstream, plugin_applies, upstream_sample,
                                                      wall_time)

GAPS = (0.0, 10.0, 20.0, 30.0, 40.0)
TEMPERATURES = (1.0, 0.6)
HEAD = 8


def shaped_logits(batch: int, vocab: int, gap: float, generator, device) -> torch.Tensor:
    """bf16 [batch, vocab]: normal logits (scale 2), and HEAD random ids per row at gap + normal."""
    x = torch.randn((batch, vocab), generator=generator, device=device) * 2
    head = torch.randint(0, vocab, (batch, HEAD), generator=generator, device=device)
    x.scatter_(1, head, gap + torch.randn((batch, HEAD), generator=generator, device=device))
    return x.to(torch.bfloat16)


def lazy_type(fused_type: type) -> type:
    """The lazy pass over a release's fused pass (`lazy._Lazy`, as the registered ones are made)."""
    return type(f"Lazy{fused_type.__name__}", (lazy._Lazy, fused_type), {})


def plugin_times(sampler, built: dict, want: torch.Tensor, calls: int) -> dict:
    """The patched `Sampler.sample` on `built` (upstream's prebuilt arguments), its pass forced
    fused, forced lazy, then chosen by `pass_choice`'s rule from a fresh start (its steady state
    over the timing loop): wall and device seconds, after checking each one's ids."""
    import triton.testing

    from vllm_hotpaths.sampler_mrv2 import pass_choice, patch

    patch.lazy_choice(True)
    try:
        times = {}
        for name, forced in (("fused", "fused"), ("lazy", "lazy"), ("auto", None)):
            sampler._hotpaths_choice = pass_choice.PassChoice(forced)
            ids, _ = sampler.sample(**built)
            assert torch.equal(ids.view(-1).to(torch.int64), want), (name, "plugin vs fused")
            times[f"plugin_{name}_s"] = wall_time(lambda kw: sampler.sample(**kw), [built] * calls)
            times[f"plugin_{name}_device_s"] = triton.testing.do_bench(lambda: sampler.sample(**built)) * 1e-3
        times["plugin_auto_fused_left"] = sampler._hotpaths_choice.fused_left  # 0: the rule was taking lazy
    finally:
        patch.lazy_choice(False)
    return times


def measure(device: str = "cuda", batch: int = 1024, vocab: int = VOCAB, release: str | None = None,
            gaps: tuple = GAPS) -> list[dict]:
    """`release`: whose noise and copy rules (default: the installed vLLM's, else 0.33.0)."""
    import triton.testing

    hotpath = registry.get("sampler_mrv2")
    installed = vllm_env.installed_version()
    version = hotpath.reference_version_for(release or installed or "0.33.0")
    fused_type = registry.resolve(hotpath.fast[f"fused@{version}"][0])  # every reference has its fused pass
    if not (fused_type.reference_type.NOISE_LOG1P or fused_type.reference_type.NOISE_MURMUR3):
        raise SystemExit(f"vLLM {installed}: the noise of reference {version} has no bound (0.22, 0.23)")
    gpu = torch.cuda.get_device_name()
    print(f"lazy Gumbel on {gpu}: vLLM {installed or 'not installed'} (reference {version}), B={batch}, V={vocab}, "
          f"bf16, head of {HEAD} ids at `gap` over normal logits (scale 2)")
    print(f"{'gap':>4} {'t':>4} {'kind':12} {'drawn':>7} | {'upstream':>9} {'fused':>8} {'lazy':>8} | "
          f"{'up/lazy':>7} {'fused/lazy':>10} | device: {'up':>7} {'fused':>7} {'lazy':>7}")
    rows = np.arange(batch)
    layout = (rows, np.zeros(batch, np.int64), (rows + 1) % vocab, np.full(batch, 8))
    records, calls = [], max(1, 1024 // batch)
    for gap in gaps:
        gen = torch.Generator(device=device).manual_seed(int(gap) + 7)
        logits = shaped_logits(batch, vocab, gap, gen, device)
        args = (logits, *layout)
        for t in TEMPERATURES:
            for kind, knobs in KINDS.items():
                kind = kind.replace("temperature 1.0, ", "")  # the temperature is the point's
                params = [RequestParams(temperature=t, seed=1000 + slot, **knobs) for slot in range(batch)]
                fused, lazy_pass = fused_type(vocab, batch, device), lazy_type(fused_type)(vocab, batch, device)
                for slot in range(batch):
                    for impl in (fused, lazy_pass):
                        impl.add_request(slot, [slot % vocab] * 4, [], params[slot])
                want, _ = fused.sample(*args, processed=False)
                got, _ = lazy_pass.sample(*args, processed=False)
                assert torch.equal(got, want), (gap, t, kind, "lazy vs fused")
                drawn = lazy_pass.last_drawn.sum().item() / (batch * vocab)
                record = {"hotpath": "sampler_mrv2", "case": f"lazy Gumbel, gap {gap:g}, t {t:g}, {kind}",
                          "gap": gap, "temperature": t, "kind": kind, "size": {"B": batch}, "vocab": vocab,
                          "device": device, "gpu": gpu, "vllm": installed, "reference_version": version,
                          "drawn_share": drawn}
                record["fused_s"] = wall_time(lambda a: fused.sample(*a, processed=False), [args] * calls)
                record["lazy_s"] = wall_time(lambda a: lazy_pass.sample(*a, processed=False), [args] * calls)
                record["fused_device_s"] = triton.testing.do_bench(lambda: fused.sample(*args, processed=False)) * 1e-3
                record["lazy_device_s"] = triton.testing.do_bench(
                    lambda: lazy_pass.sample(*args, processed=False)) * 1e-3
                record["fused_ratio"] = record["fused_s"] / record["lazy_s"]
                upstream = _upstream(batch, vocab, params, device)
                if upstream is not None:
                    live, prebuilt = upstream
                    built = prebuilt(*args)
                    vllm_sample = upstream_sample()
                    up_ids, _ = vllm_sample(live.sampler, **built)
                    assert torch.equal(up_ids.view(-1).to(torch.int64), want), (gap, t, kind, "upstream vs fused")
                    record["upstream_s"] = wall_time(lambda kw: vllm_sample(live.sampler, **kw), [built] * calls)
                    record["upstream_device_s"] = triton.testing.do_bench(
                        lambda: vllm_sample(live.sampler, **built)) * 1e-3
                    record["ratio"] = record["upstream_s"] / record["lazy_s"]
                    if plugin_applies():
                        record.update(plugin_times(live.sampler, built, want, calls))
                        record["plugin_ratio"] = record["upstream_s"] / record["plugin_lazy_s"]
                        record["plugin_auto_ratio"] = record["upstream_s"] / record["plugin_auto_s"]
                    del live, built
                print(f"{gap:4g} {t:4g} {kind:12} {drawn:7.2%} | "
                      f"{record.get('upstream_s', float('nan')) * 1e3:7.3f}ms {record['fused_s'] * 1e3:6.3f}ms "
                      f"{record['lazy_s'] * 1e3:6.3f}ms | {record.get('ratio', float('nan')):6.2f}x "
                      f"{record['fused_ratio']:9.2f}x | {record.get('upstream_device_s', float('nan')) * 1e3:8.3f} "
                      f"{record['fused_device_s'] * 1e3:7.3f} {record['lazy_device_s'] * 1e3:7.3f}", flush=True)
                if "plugin_auto_s" in record:
                    print(f"{'':4} {'':4} {'plugin':12} {'':7} | {'':9} {record['plugin_fused_s'] * 1e3:6.3f}ms "
                          f"{record['plugin_lazy_s'] * 1e3:6.3f}ms | {record['plugin_ratio']:6.2f}x "
                          f"{record['plugin_fused_s'] / record['plugin_lazy_s']:9.2f}x | chosen: "
                          f"{record['plugin_auto_s'] * 1e3:.3f}ms, {record['plugin_auto_ratio']:.2f}x upstream, "
                          f"{record['plugin_fused_s'] / record['plugin_auto_s']:.2f}x fused", flush=True)
                records.append(record)
                del fused, lazy_pass
                torch.cuda.empty_cache()
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="write the records here")
    parser.add_argument("--batch", type=int, nargs="+", default=[1024])
    parser.add_argument("--gaps", type=float, nargs="+", default=list(GAPS))
    parser.add_argument("--release", help="the vLLM release whose noise to draw (default: the installed one)")
    args = parser.parse_args()
    records = [record for batch in args.batch
               for record in measure(batch=batch, release=args.release, gaps=tuple(args.gaps))]
    if args.json:
        with open(args.json, "w") as out:
            json.dump(records, out, indent=1)


if __name__ == "__main__":
    main()
