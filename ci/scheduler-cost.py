"""Host time of vLLM's scheduler in a decode step, in-process on the CPU (no GPU, no model):
B requests of 16 prompt tokens, then STEPS steps of `schedule()` and `update_from_output()` with
one sampled token per request, as the engine core calls them. Prefix caching on with vLLM's
block hasher, block size 16, KV blocks for every request's full length (no preemption), the dummy
Qwen3-0.6B config of `vllm-hotpaths throughput`. `async` uses the AsyncScheduler (vLLM's default
with async scheduling). Prints the median milliseconds per step of each call, after 8 steps,
and the medians of the first and the last quarter of the steps (how it grows with the output).

    python ci/scheduler-cost.py [B=1024] [STEPS=256] [sync|async]
"""

import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from vllm_hotpaths import vllm_env

vllm_env.import_vllm("vllm.v1.core.sched.scheduler")  # the CPU platform first, where no GPU is visible

import torch  # noqa: E402
from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import get_hash_fn_by_name  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.core.sched.async_scheduler import AsyncScheduler  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec  # noqa: E402
from vllm.v1.outputs import ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

from vllm_hotpaths.testing.throughput import PROMPT_LEN, QWEN3_06B, write_model  # noqa: E402

BLOCK = 16


def main(batch: int, steps: int, asynchronous: bool) -> None:
    model = write_model(Path(tempfile.mkdtemp(), "model"))
    max_model_len = PROMPT_LEN + steps + 16
    blocks = batch * (-(-max_model_len // BLOCK) + 1)
    cache = CacheConfig(block_size=BLOCK, enable_prefix_caching=True)
    cache.num_gpu_blocks = blocks
    config = VllmConfig(model_config=ModelConfig(model=str(model), skip_tokenizer_init=True, max_model_len=max_model_len),
                        scheduler_config=SchedulerConfig(max_num_seqs=batch, max_num_batched_tokens=16384,
                                                         max_model_len=max_model_len, is_encoder_decoder=False,
                                                         async_scheduling=asynchronous),
                        cache_config=cache)
    spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=QWEN3_06B["num_key_value_heads"],
                             head_size=QWEN3_06B["head_dim"], dtype=torch.bfloat16)
    layers = [f"layer{i}" for i in range(QWEN3_06B["num_hidden_layers"])]
    kv = KVCacheConfig(num_blocks=blocks, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(layers, spec)])
    scheduler = (AsyncScheduler if asynchronous else Scheduler)(config, kv, StructuredOutputManager(config),
                                                                block_size=BLOCK, log_stats=False)
    hash_fn = get_hash_fn_by_name(cache.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    hasher = get_request_block_hasher(BLOCK, hash_fn)
    rng = np.random.default_rng(0)
    for i in range(batch):
        params = SamplingParams(max_tokens=steps + 8, ignore_eos=True, temperature=1.0, seed=i)
        scheduler.add_request(Request(str(i), rng.integers(0, QWEN3_06B["vocab_size"], PROMPT_LEN).tolist(), params,
                                      None, block_hasher=hasher))
    schedule, update = [], []
    for step in range(steps):
        start = time.perf_counter()
        output = scheduler.schedule()
        scheduled = time.perf_counter()
        ids = list(output.num_scheduled_tokens)
        if len(ids) != batch:  # every step must be a step of the whole batch
            raise SystemExit(f"scheduler-cost: step {step} scheduled {len(ids)} of {batch} requests")
        sampled = rng.integers(0, QWEN3_06B["vocab_size"], len(ids)).tolist()
        runner_output = ModelRunnerOutput(req_ids=ids, req_id_to_index={r: j for j, r in enumerate(ids)},
                                          sampled_token_ids=[[t] for t in sampled])
        before = time.perf_counter()
        scheduler.update_from_output(output, runner_output)
        if step >= 8:
            schedule.append(scheduled - start)
            update.append(time.perf_counter() - before)
    print(f"B={batch} {'async' if asynchronous else 'sync'}: schedule {statistics.median(schedule) * 1e3:.2f} ms, "
          f"update_from_output {statistics.median(update) * 1e3:.2f} ms per step (median of {len(schedule)} steps)")
    quarter = len(schedule) // 4
    if quarter:  # how it grows with the output length: the first and the last quarter of the steps
        print("  first / last quarter: schedule " + " / ".join(f"{statistics.median(part) * 1e3:.2f}" for part in
              (schedule[:quarter], schedule[-quarter:])) + " ms, update_from_output " + " / ".join(
              f"{statistics.median(part) * 1e3:.2f}" for part in (update[:quarter], update[-quarter:])) + " ms")


if __name__ == "__main__":
    args = sys.argv[1:]
    main(int(args[0]) if args else 1024, int(args[1]) if len(args) > 1 else 256,
         len(args) > 2 and args[2] == "async")
