"""Recovered-tokens benchmark (CUDA): vLLM's own code against the split-vocabulary kernel, with
this project's frozen reference kernels as a secondary baseline.

For each shape, without and with draft probabilities, side by side in one run:

- kernel: vLLM's own `sample_recovered_tokens_kernel`, launched as the installed vLLM's
  `sample_recovered_tokens` launches it (0.22: grid (requests, max drafts), `inv_q = 1/q` made by
  the host beforehand, 8,192-lane tiles), against the split-vocab launch (which takes `1/q` in the
  kernel). Each side's launches are captured in one CUDA graph over input copies together more
  than twice the L2 cache, the replay timed with `triton.testing.do_bench`, divided by the copies.
- call: upstream's `rejection_sampler.sample_recovered_tokens` against the plugin's patched
  function, both called with vLLM's arguments (a `SamplingMetadata` without per-request
  generators), host work included: `do_bench` on the call (no graph), and "wall", a loop of
  WALL_CALLS calls over the copies ended by one synchronize. "seeded" is the do_bench call with
  every SEEDED_EVERY-th request drawing from its own generator.
- reference: the 0.16.0 and 0.17.0 reference kernels of this project (the upstream kernels'
  structure, frozen), timed as "kernel"; labelled "reference", never "upstream".

The floor is the bytes read once (target and draft probabilities, one noise row per request)
divided by the device's copy rate, measured as (read + write) bytes per second of a 1 GiB copy.
"""

from __future__ import annotations

import dataclasses
import time

import torch

from vllm_hotpaths import registry, vllm_env

SHAPES = ((16, 3, 129_280), (64, 4, 151_936), (256, 1, 32_000))
SPREAD_BYTES = 200 * 2 ** 20  # input copies per timing: more than twice an H100's 50 MB L2
WALL_CALLS = 200
SEEDED_EVERY = 4
UPSTREAM_BLOCK = 8192  # vLLM 0.22's BLOCK_SIZE for sample_recovered_tokens_kernel
MEASURES = ("kernel", "call", "wall", "seeded")


REFERENCE_VERSIONS = ("0.16.0", "0.17.0")  # division, then the reciprocal (PR #34974)

def device_time(make_launch, copies: list[dict]) -> float:
    """Seconds per call of the launches `make_launch(args)` returns, from a CUDA graph."""
    import triton.testing

    launches = [make_launch(args) for args in copies]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up (compilation) outside the capture
        for launch in launches:
            launch()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for launch in launches:
            launch()
    return triton.testing.do_bench(graph.replay) * 1e-3 / len(copies)


def call_time(call, copies: list[dict]) -> tuple[float, float]:
    """Seconds per whole call, host work included: (do_bench median, wall-clock mean of
    WALL_CALLS calls cycling over the copies, one synchronize at the end)."""
    import triton.testing

    bench_s = triton.testing.do_bench(lambda: call(copies[0])) * 1e-3
    for args in copies:
        call(args)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for i in range(WALL_CALLS):
        call(copies[i % len(copies)])
    torch.cuda.synchronize()
    return bench_s, (time.perf_counter() - start) / WALL_CALLS


def copy_rate(device) -> float:
    """Bytes per second moved (read + write) by a 1 GiB device copy."""
    import triton.testing

    src = torch.empty(2 ** 28, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    ms = triton.testing.do_bench(lambda: dst.copy_(src), warmup=50, rep=500)
    return 2 * src.numel() * 4 / (ms * 1e-3)


def inputs(batch: int, drafts: int, vocab: int, draft_probs: bool, device) -> dict:
    gen = torch.Generator(device=device).manual_seed(batch * drafts + vocab)
    tokens = batch * drafts

    def probs():
        p = torch.rand((tokens, vocab), generator=gen, device=device)
        return p / p.sum(dim=1, keepdim=True)

    counts = [drafts] * batch
    return dict(
        max_spec_len=drafts,
        num_draft_tokens=counts,
        cu_num_draft_tokens=torch.tensor(counts, device=device).cumsum(0).to(torch.int32),
        draft_token_ids=torch.randint(0, vocab, (tokens,), generator=gen, device=device, dtype=torch.int32),
        draft_probs=probs() if draft_probs else None,
        target_probs=probs(),
        q=torch.empty((batch, vocab), device=device).exponential_(generator=gen),
    )


def upstream_module():
    """vLLM's `rejection_sampler` module, or None with one line saying why."""
    try:
        return vllm_env.import_vllm("vllm.v1.sample.rejection_sampler")
    except Exception as error:  # noqa: BLE001 - any import failure means: no upstream columns
        print(f"recovered_tokens: vLLM cannot be imported ({type(error).__name__}: {error}); "
              "upstream columns skipped, references timed")
        return None


def upstream_kernel_launch(module, args: dict):
    """vLLM 0.22's launch of its own kernel, as its `sample_recovered_tokens` makes it: the host
    passes `1/q` (made here, before the timed launches) and `draft_probs` as given (None too)."""
    inv_q = args["q"].reciprocal()
    out = torch.empty_like(args["draft_token_ids"])
    grid = (len(args["num_draft_tokens"]), args["max_spec_len"])

    def launch():
        module.sample_recovered_tokens_kernel[grid](
            out, args["cu_num_draft_tokens"], args["draft_token_ids"], args["draft_probs"],
            args["target_probs"], inv_q, args["target_probs"].shape[1], UPSTREAM_BLOCK,
            NO_DRAFT_PROBS=args["draft_probs"] is None)
        return out

    return launch


def upstream_and_patched(module, version: str):
    """(upstream's sample_recovered_tokens, the plugin's replacement taking the fast path at every
    shape); the module is left as found (a patch installed before is installed again, with the
    shipped dispatch)."""
    from vllm_hotpaths.recovered_tokens import dispatch, patch

    was_installed = bool(patch.UPSTREAM)
    if was_installed:
        patch.uninstall()
    patch.install(version, choose=lambda device: dispatch.always())
    pair = patch.UPSTREAM["sample_recovered_tokens"], module.sample_recovered_tokens
    patch.uninstall()
    if was_installed:
        patch.install(version)
    return pair


def sampling_metadata(generators: dict):
    """vLLM's SamplingMetadata with `generators` (the only field `sample_recovered_tokens` reads;
    the others None)."""
    cls = vllm_env.import_vllm("vllm.v1.sample.metadata").SamplingMetadata
    required = [f.name for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    return cls(**dict(dict.fromkeys(required), generators=generators))


def seeded_generators(batch: int, device) -> dict:
    return {i: torch.Generator(device=device).manual_seed(i) for i in range(0, batch, SEEDED_EVERY)}


def whole_call(function, metadata):
    def call(args):
        return function(args["max_spec_len"], args["num_draft_tokens"], args["cu_num_draft_tokens"],
                        args["draft_token_ids"], args["draft_probs"], args["target_probs"], metadata,
                        args["target_probs"].device)

    return call


def _reference_kernel(impl, args: dict):
    """A frozen reference's launch alone (the 0.22 one given `1/q` made beforehand)."""
    import triton

    from vllm_hotpaths.recovered_tokens import reference

    out = torch.empty_like(args["draft_token_ids"])
    grid = (len(args["num_draft_tokens"]), args["max_spec_len"])
    vocab = args["target_probs"].shape[1]
    common = (out, args["cu_num_draft_tokens"], args["draft_token_ids"],
              reference.draft_pointer(args["draft_probs"], args["target_probs"]), args["target_probs"])
    no_draft = args["draft_probs"] is None
    if isinstance(impl, reference.DivisionReference):
        return lambda: reference._division_kernel[grid](
            *common, args["q"], vocab, PADDED_VOCAB=triton.next_power_of_2(vocab), NO_DRAFT_PROBS=no_draft)
    inv_q = args["q"].reciprocal()
    return lambda: reference._reciprocal_kernel[grid](
        *common, inv_q, vocab, BLOCK=impl.block, NO_DRAFT_PROBS=no_draft, INTERPRETED_VOCAB=0)


def _same(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    from vllm_hotpaths.testing.bits import assert_same_bits

    assert_same_bits(a, b, what)


def _upstream_times(module, version: str, args: dict, copies: list[dict]) -> dict:
    """measure -> (upstream seconds, fast seconds), ids checked equal first."""
    device = args["target_probs"].device
    fast = registry.get("recovered_tokens").fast_for(version)(device)
    times = {}
    if version.startswith("0.22."):
        _same(upstream_kernel_launch(module, args)(), fast.recover(**args), "kernel ids")
        times["kernel"] = (device_time(lambda a: upstream_kernel_launch(module, a), copies),
                           device_time(lambda a: (lambda: fast.recover(**a)), copies))
    else:
        print(f"recovered_tokens: the kernel-only launch is vLLM 0.22's; vLLM {version} is installed, "
              "kernel column skipped")
    upstream, patched = upstream_and_patched(module, version)
    batch = len(args["num_draft_tokens"])
    for label, make in (("call", dict), ("seeded", lambda: seeded_generators(batch, device))):
        ids = []
        for function in (upstream, patched):
            torch.manual_seed(0)
            ids.append(whole_call(function, sampling_metadata(make()))(args))
        _same(ids[1], ids[0], f"{label} ids")
        pair = [call_time(whole_call(f, sampling_metadata(make())), copies) for f in (upstream, patched)]
        times[label] = (pair[0][0], pair[1][0])
        if label == "call":
            times["wall"] = (pair[0][1], pair[1][1])
    return times


def run(device: str = "cuda", quick: bool = False) -> list[dict]:
    if device != "cuda":
        print("recovered_tokens: CUDA only (Triton kernels time nothing meaningful interpreted), skipped on cpu")
        return []
    hotpath = registry.get("recovered_tokens")
    version = vllm_env.installed_version()
    module = upstream_module()
    rate = copy_rate(device)
    gpu = torch.cuda.get_device_name()
    upstream_label = f"vLLM {version}" if module else "upstream (not importable)"
    print(f"recovered_tokens on {gpu}: copy rate {rate / 1e12:.2f} TB/s (read + write); upstream = "
          f"{upstream_label}'s own code; reference = this project's frozen kernels; ratio = baseline / fast")
    columns = [f"{m} up/fast" for m in MEASURES] + ["0.16 ref/fast", "0.22 ref/fast"]
    print(f"{'B':>4} {'k':>2} {'V':>7} {'draft':>5} {'floor':>7} | " + " | ".join(f"{c:>21}" for c in columns))
    records = []
    for batch, drafts, vocab in SHAPES[:1] if quick else SHAPES:
        for with_draft in (False, True):
            args = inputs(batch, drafts, vocab, with_draft, device)
            read = args["target_probs"].numel() * 4 * (2 if with_draft else 1) + args["q"].numel() * 4
            floor = read / rate
            copies = [args] + [inputs(batch, drafts, vocab, with_draft, device)
                               for _ in range(max(1, -(-SPREAD_BYTES // read) - 1))]
            size = {"B": batch, "k": drafts, "V": vocab}
            draft = "yes" if with_draft else "no"
            common = {"hotpath": "recovered_tokens", "size": size, "device": device, "gpu": gpu,
                      "draft_probs": with_draft, "floor_s": floor, "copy_rate_Bps": rate}
            cells = {}
            upstream = _upstream_times(module, version, args, copies) if module else {}
            for measure, (base_s, fast_s) in upstream.items():
                cells[measure] = (base_s, fast_s)
                records.append(dict(common, case=f"{measure}: {upstream_label} vs split-vocab, draft probs {draft}",
                                    measure=measure, baseline="upstream", baseline_label=upstream_label,
                                    upstream_s=base_s, fast_s=fast_s, ratio=base_s / fast_s))
            for ref_version in REFERENCE_VERSIONS:
                ref = hotpath.reference(ref_version)(device)
                fast = hotpath.fast_for(ref_version)(device)
                _same(fast.recover(**args), ref.recover(**args), f"{ref_version} reference ids")
                base_s = device_time(lambda a, ref=ref: _reference_kernel(ref, a), copies)
                fast_s = device_time(lambda a, fast=fast: (lambda: fast.recover(**a)), copies)
                cells[ref_version] = (base_s, fast_s)
                label = f"{ref_version} reference"
                records.append(dict(common, case=f"kernel: {label} vs split-vocab, draft probs {draft}",
                                    measure="kernel", baseline="reference", baseline_label=label,
                                    reference_s=base_s, fast_s=fast_s, ratio=base_s / fast_s))

            def cell(key):
                if key not in cells:
                    return f"{'-':>21}"
                base_s, fast_s = cells[key]
                return f"{base_s * 1e6:7.1f} {fast_s * 1e6:7.1f} {base_s / fast_s:5.2f}x"

            print(f"{batch:>4} {drafts:>2} {vocab:>7} {draft:>5} {floor * 1e6:6.1f}u | "
                  + " | ".join(cell(k) for k in (*MEASURES, *REFERENCE_VERSIONS)))
    print("times in us: baseline, fast, baseline / fast; kernel = CUDA graph over input copies; call/seeded = "
          f"do_bench of whole calls; wall = mean of {WALL_CALLS} calls, one synchronize")
    return records
