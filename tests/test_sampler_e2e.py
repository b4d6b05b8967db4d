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
    assert args.tables == "dense" and script.parse_args(["--tables", "compact", "--compare", "d.json"]).compare
    for bad, message in ((["--pairs", "0"], "must be positive"), (["--length", "70"], "must exceed --window"),
                         (["--compare", "d.json"], "goes with --tables compact")):
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


def test_the_compact_run_finds_ids_and_kv_blocks_that_differ_from_the_dense_run(script, tmp_path, capsys):
    import json

    dense = {"ids_batch": {"ids": [[1, 2], [3]]}, "timed_ids_sha256": {"128 no penalty": "a", "128 presence 1.5": "b"},
             "memory": {"num_gpu_blocks": 100, "table_bytes_at_start": 641_777_664, "device_used_at_start": 5000}}
    path = tmp_path / "dense.json"
    path.write_text(json.dumps(dense))
    memory = {"num_gpu_blocks": 103, "block_size": 16, "kv_bytes_per_token": 10, "table_bytes_at_start": 0,
              "device_used_at_start": 4000}
    same = script.compare(str(path), [[1, 2], [3]], {"128 no penalty": "a", "128 presence 1.5": "b"}, memory)
    assert same == {"differ": False, "ids_batch_differ": [], "timed_differ": [], "kv_blocks_gained": 3,
                    "kv_bytes_gained": 480, "device_used_change_at_start": -1000}
    other = script.compare(str(path), [[1, 2], [4]], {"128 no penalty": "a", "128 presence 1.5": "c"}, memory)
    assert other["differ"] and other["ids_batch_differ"] == [1] and other["timed_differ"] == ["128 presence 1.5"]
    assert "+3 blocks (+480 B)" in capsys.readouterr().out


@pytest.mark.skipif(vllm_env.installed_version() is None, reason="vLLM is not installed")
def test_what_it_patches_and_counts_exists_in_vllm():
    from vllm_hotpaths.sampler_mrv2 import patch

    sampler = vllm_env.import_vllm(patch.SAMPLER).Sampler
    runner = vllm_env.import_vllm("vllm.v1.worker.gpu.model_runner").GPUModelRunner
    penalties = vllm_env.import_vllm(patch.PENALTIES).PenaltiesState
    assert callable(sampler.sample) and callable(runner.execute_model) and callable(penalties.apply_staged_writes)
