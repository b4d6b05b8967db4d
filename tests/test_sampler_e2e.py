"""ci/gpu/sampler-e2e.py without a GPU: its arguments and refusals, the ids batch it compares
(every kind of request the patch takes or defers), and that what it patches and times exists in
the installed vLLM."""


import pytest

from tests.conftest import gpu_script

from vllm_hotpaths import vllm_env


@pytest.fixture(scope="module")
def script(pytestconfig):
    return gpu_script(pytestconfig.rootpath, "sampler-e2e.py")


def test_arguments_and_their_refusals(script, capsys):
    args = script.parse_args([])
    assert (args.batches, args.length, args.window, args.pairs) == ([128, 1024], 160, 40, 5)
    assert script.parse_args(["--batches", "1024", "--json", "e.json"]).batches == [1024]
    for bad, message in ((["--pairs", "0"], "must be positive"), (["--length", "70"], "must exceed --window")):
        with pytest.raises(SystemExit) as exit:
            script.parse_args(bad)
        assert exit.value.code == 2 and message in capsys.readouterr().err


def test_the_ids_batch_holds_what_the_patch_takes_and_defers(script):
    from vllm_hotpaths.logits_copy import RequestParams
    from vllm_hotpaths.sampler_mrv2.fast import fused_covers, penalized

    params = script.equality_params(96)
    fields = set(RequestParams.__dataclass_fields__)
    as_request = [RequestParams(**{k: v for k, v in p.items() if k in fields}) for p in params]
    covered = [fused_covers(p, script.QWEN3_06B["vocab_size"], forces_thinking=False) for p in as_request]
    assert any(p.temperature == 0.0 for p in as_request) and any(p.temperature > 0.0 for p in as_request)
    assert any(c and penalized(p) for c, p in zip(covered, as_request)), "a penalized request the kernel takes"
    assert not all(covered), "a request the patch leaves to upstream (top-k)"
    assert len({p["max_tokens"] for p in params}) > 1, "lengths that differ, so the batch shrinks"


@pytest.mark.skipif(vllm_env.installed_version() is None, reason="vLLM is not installed")
def test_what_it_patches_and_counts_exists_in_vllm():
    from vllm_hotpaths.sampler_mrv2 import patch

    sampler = vllm_env.import_vllm(patch.SAMPLER).Sampler
    runner = vllm_env.import_vllm("vllm.v1.worker.gpu.model_runner").GPUModelRunner
    assert callable(sampler.sample) and callable(runner.execute_model)
