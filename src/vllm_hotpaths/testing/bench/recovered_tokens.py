"""Recovered-tokens benchmark (CUDA): the 0.16 and 0.22 reference kernels against the
split-vocabulary kernels, with the memory-bandwidth floor.

Device time: each variant's launches are captured in one CUDA graph over several copies of the
inputs (together more than twice the L2 cache, so every call reads from memory), and the graph's
replay is timed with `triton.testing.do_bench` (median, L2 flushed first), divided by the number
of copies. The floor is the bytes the sampling must read once (target and draft probabilities,
one noise row per request) divided by the device's copy rate, measured as (read + write bytes)
per second of a 1 GiB device-to-device copy. "kernels" times the launches alone (the 0.22
reference given `q.reciprocal()` made beforehand, as upstream's host does); "call" times a whole
`recover` call the same way (the reciprocal and scratch allocation included, host work not).
"read-only" times a kernel with the fast kernel's grid and tiles that reads the same bytes and
keeps a running maximum, selecting no id: what this launch shape costs before any selection.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from vllm_hotpaths import registry

SHAPES = ((16, 3, 129_280), (64, 4, 151_936), (256, 1, 32_000))
SPREAD_BYTES = 200 * 2 ** 20  # input copies per timing: more than twice an H100's 50 MB L2


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


@triton.jit
def _read_only_kernel(out_ptr, target_ptr, draft_ptr, q_ptr, vocab_size, lanes_per_program, drafts,
                      BLOCK: tl.constexpr, HAS_DRAFT: tl.constexpr):
    req = tl.program_id(0)
    token = req * drafts + tl.program_id(1)  # the benchmark's requests all have `drafts` drafts
    first_lane = tl.program_id(2) * lanes_per_program
    acc = tl.full((BLOCK,), float("-inf"), tl.float32)
    for first in range(first_lane, first_lane + lanes_per_program, BLOCK):
        lanes = first + tl.arange(0, BLOCK)
        inside = lanes < vocab_size
        value = tl.load(target_ptr + token * vocab_size + lanes, mask=inside, other=0.0)
        if HAS_DRAFT:
            value -= tl.load(draft_ptr + token * vocab_size + lanes, mask=inside, other=0.0)
        acc = tl.maximum(acc, value * tl.load(q_ptr + req * vocab_size + lanes, mask=inside, other=1.0))
    tl.store(out_ptr + token * tl.num_programs(2) + tl.program_id(2), tl.max(acc, axis=0))


def _read_only(fast, args: dict):
    """The fast kernel's launch shape reading the same bytes, with no id selected."""
    target, draft = args["target_probs"], args["draft_probs"]
    num_tokens, vocab = target.shape
    block, lanes = fast._lanes_per_program(num_tokens, vocab)
    slices = fast._slices(vocab, lanes)
    out = torch.empty(num_tokens * slices, device=target.device)
    grid = (len(args["num_draft_tokens"]), args["max_spec_len"], slices)
    return lambda: _read_only_kernel[grid](out, target, target if draft is None else draft, args["q"],
                                           vocab, lanes, args["max_spec_len"], BLOCK=block,
                                           HAS_DRAFT=draft is not None)


def _kernel_only(impl, args: dict):
    """The launch(es) alone: what runs on the device once the host has its inputs."""
    from vllm_hotpaths.recovered_tokens import fast, reference

    out = torch.empty_like(args["draft_token_ids"])
    grid = (len(args["num_draft_tokens"]), args["max_spec_len"])
    vocab = args["target_probs"].shape[1]
    common = (out, args["cu_num_draft_tokens"], args["draft_token_ids"],
              reference.draft_pointer(args["draft_probs"], args["target_probs"]), args["target_probs"])
    no_draft = args["draft_probs"] is None
    if isinstance(impl, reference.DivisionReference):
        import triton

        return lambda: reference._division_kernel[grid](
            *common, args["q"], vocab, PADDED_VOCAB=triton.next_power_of_2(vocab), NO_DRAFT_PROBS=no_draft)
    if isinstance(impl, reference.ReciprocalReference):
        inv_q = args["q"].reciprocal()
        return lambda: reference._reciprocal_kernel[grid](
            *common, inv_q, vocab, BLOCK=impl.block, NO_DRAFT_PROBS=no_draft, INTERPRETED_VOCAB=0)
    assert isinstance(impl, fast.SplitVocabDivision)
    return lambda: impl.recover(**args)  # its launches and two scratch buffers


def run(device: str = "cuda", quick: bool = False) -> list[dict]:
    if device != "cuda":
        return []  # Triton kernels: timings mean something only compiled on a GPU
    hotpath = registry.get("recovered_tokens")
    rate = copy_rate(device)
    gpu = torch.cuda.get_device_name()
    print(f"recovered_tokens on {gpu}: copy rate {rate / 1e12:.2f} TB/s (read + write)")
    print(f"{'B':>4} {'k':>2} {'V':>7} {'draft':>5} {'floor':>8} | {'0.16 ref':>9} {'fast':>8} "
          f"{'ratio':>6} | {'0.22 ref':>9} {'fast':>8} {'ratio':>6} {'x floor':>7} | "
          f"{'0.22 call':>9} {'fast call':>9} | {'read-only':>9} {'x floor':>7}")
    records = []
    shapes = SHAPES[:1] if quick else SHAPES
    for batch, drafts, vocab in shapes:
        for with_draft in (False, True):
            args = inputs(batch, drafts, vocab, with_draft, device)
            read = args["target_probs"].numel() * 4 * (2 if with_draft else 1) + args["q"].numel() * 4
            floor = read / rate
            copies = [args] + [inputs(batch, drafts, vocab, with_draft, device)
                               for _ in range(max(1, -(-SPREAD_BYTES // read) - 1))]
            times = {}
            for version in ("0.16.0", "0.22.0"):
                ref = hotpath.reference(version)(device)
                fast = next(f for _, f, v in hotpath.candidates() if v == version)(device)
                for label, impl in (("ref", ref), ("fast", fast)):
                    assert torch.equal(impl.recover(**args), ref.recover(**args)), (version, label)
                    times[version, label] = device_time(lambda a, impl=impl: _kernel_only(impl, a), copies)
                    times[version, label, "call"] = device_time(
                        lambda a, impl=impl: (lambda: impl.recover(**a)), copies)
            times["read-only"] = device_time(lambda a: _read_only(fast, a), copies)
            us = lambda key: times[key] * 1e6  # noqa: E731
            print(f"{batch:>4} {drafts:>2} {vocab:>7} {'yes' if with_draft else 'no':>5} {floor * 1e6:7.1f}u | "
                  f"{us(('0.16.0', 'ref')):8.1f}u {us(('0.16.0', 'fast')):7.1f}u "
                  f"{times['0.16.0', 'ref'] / times['0.16.0', 'fast']:5.2f}x | "
                  f"{us(('0.22.0', 'ref')):8.1f}u {us(('0.22.0', 'fast')):7.1f}u "
                  f"{times['0.22.0', 'ref'] / times['0.22.0', 'fast']:5.2f}x "
                  f"{times['0.22.0', 'fast'] / floor:6.2f}x | "
                  f"{us(('0.22.0', 'ref', 'call')):8.1f}u {us(('0.22.0', 'fast', 'call')):8.1f}u | "
                  f"{us('read-only'):8.1f}u {times['read-only'] / floor:6.2f}x")
            size = {"B": batch, "k": drafts, "V": vocab}
            for version in ("0.16.0", "0.22.0"):
                records.append({
                    "hotpath": "recovered_tokens",
                    "case": f"kernels, {version} reference vs split-vocab, draft probs {with_draft}",
                    "size": size, "device": device, "gpu": gpu, "copy_rate_Bps": rate,
                    "floor_s": floor, "reference_s": times[version, "ref"], "fast_s": times[version, "fast"],
                    "ratio": times[version, "ref"] / times[version, "fast"],
                    "reference_call_s": times[version, "ref", "call"], "fast_call_s": times[version, "fast", "call"],
                    "read_only_s": times["read-only"],
                })
    return records
