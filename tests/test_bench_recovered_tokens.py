"""The recovered-tokens benchmark's upstream baselines, checked where no GPU is needed: its
launch of vLLM's own kernel gives the ids of vLLM's own `sample_recovered_tokens` (kernel
interpreted on the CPU), its whole-call pair gives equal ids, and bench records with an upstream
baseline make results pages."""

import pytest
import torch

from vllm_hotpaths import vllm_env
from vllm_hotpaths.testing import results
from vllm_hotpaths.testing.bits import assert_same_bits

vllm_env.set_cpu_environment()  # Triton's interpreter where no GPU is visible, before any kernel import
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
needs_vllm = pytest.mark.skipif(vllm_env.installed_version() is None, reason="vLLM is not installed")


@needs_vllm
@pytest.mark.parametrize("draft_probs", [False, True])
def test_the_upstream_kernel_launch_is_upstreams_own(draft_probs):
    from vllm_hotpaths.testing.bench import recovered_tokens as bench
    from vllm_hotpaths.testing.live.recovered_tokens import LiveRecovery

    if not vllm_env.installed_version().startswith("0.22."):
        pytest.skip("the bench's kernel-only launch is vLLM 0.22's")
    module = bench.upstream_module()
    args = bench.inputs(3, 2, 40, draft_probs, DEVICE)
    args["num_draft_tokens"] = [2, 0, 1]  # ragged: a request without drafts, programs that exit
    args["cu_num_draft_tokens"] = torch.tensor([2, 2, 3], dtype=torch.int32, device=DEVICE)
    args["draft_token_ids"] = args["draft_token_ids"][:3].contiguous()
    args["target_probs"] = args["target_probs"][:3].contiguous()
    if draft_probs:
        args["draft_probs"] = args["draft_probs"][:3].contiguous()
    expected = LiveRecovery(DEVICE).recover(**args)  # vLLM's own function, its noise draw given q
    assert_same_bits(bench.upstream_kernel_launch(module, args)(), expected, "upstream launch ids")


@needs_vllm
@pytest.mark.parametrize("seeded", [False, True])
def test_the_whole_call_pair_agrees_and_leaves_vllm_unpatched(seeded):
    from vllm_hotpaths.testing.bench import recovered_tokens as bench

    module = bench.upstream_module()
    before = module.sample_recovered_tokens
    upstream, patched = bench.upstream_and_patched(module, vllm_env.installed_version())
    assert module.sample_recovered_tokens is before and upstream is before and patched is not before
    args = bench.inputs(5, 2, 24, True, DEVICE)
    ids = []
    for function in (upstream, patched):
        torch.manual_seed(0)
        generators = bench.seeded_generators(5, DEVICE) if seeded else {}
        ids.append(bench.whole_call(function, bench.sampling_metadata(generators))(args))
    assert_same_bits(ids[1], ids[0], "whole-call ids")


def test_results_pages_take_an_upstream_baseline():
    record = {"hotpath": "recovered_tokens", "case": "call: vLLM 0.22.0 vs split-vocab, draft probs no",
              "size": {"B": 16}, "device": "cuda", "measure": "call", "baseline": "upstream",
              "baseline_label": "vLLM 0.22.0", "upstream_s": 4e-5, "fast_s": 2e-5, "ratio": 2.0}
    reference = dict(record, baseline="reference", upstream_s=None, reference_s=3e-5)
    del reference["upstream_s"]
    page = results.bench_page({"command": "vllm-hotpaths bench", "cuda_device": "H100",
                               "records": [record, reference]}, "bench.json")
    assert "| 0.040 ms | 0.020 ms | 2.00x |" in page and "| 0.030 ms | 0.020 ms | 2.00x |" in page, page


def test_without_vllm_the_bench_says_so_in_one_line(monkeypatch, capsys):
    from vllm_hotpaths.testing.bench import recovered_tokens as bench

    def no_vllm(module):
        raise ImportError("vLLM is not installed")

    monkeypatch.setattr(vllm_env, "import_vllm", no_vllm)
    assert bench.upstream_module() is None
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "vLLM cannot be imported" in out and "references timed" in out, out
