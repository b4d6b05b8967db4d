"""vLLM's scheduler driven in-process on the CPU as the engine core drives it in decode (no GPU,
no model): B requests of 16 prompt tokens, then `schedule()` and `update_from_output()` with one
sampled token per request each step. Prefix caching on with vLLM's block hasher, block size 16,
KV blocks for every request's full length (no preemption), the dummy Qwen3-0.6B config of
`vllm-hotpaths throughput`; `asynchronous`: the AsyncScheduler (vLLM's default). Used by
`ci/scheduler-cost.py` and by the `cached_request_data` benchmark.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from vllm_hotpaths import vllm_env
from vllm_hotpaths.testing.throughput import PROMPT_LEN, QWEN3_06B, write_model

BLOCK = 16


class DecodeLoop:
    def __init__(self, batch: int, steps: int, asynchronous: bool = True, seed: int = 0) -> None:
        vllm_env.import_vllm("vllm.v1.core.sched.scheduler")  # the CPU platform first, where no GPU is visible
        import torch
        from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
        from vllm.sampling_params import SamplingParams
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.core.sched.async_scheduler import AsyncScheduler
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
        from vllm.v1.request import Request
        from vllm.v1.structured_output import StructuredOutputManager

        self.batch = batch
        model = write_model(Path(tempfile.mkdtemp(), "model"))
        max_model_len = PROMPT_LEN + steps + 16
        blocks = batch * (-(-max_model_len // BLOCK) + 1)
        cache = CacheConfig(block_size=BLOCK, enable_prefix_caching=True)
        cache.num_gpu_blocks = blocks
        config = VllmConfig(
            model_config=ModelConfig(model=str(model), skip_tokenizer_init=True, max_model_len=max_model_len),
            scheduler_config=SchedulerConfig(max_num_seqs=batch, max_num_batched_tokens=16384,
                                             max_model_len=max_model_len, is_encoder_decoder=False,
                                             async_scheduling=asynchronous),
            cache_config=cache)
        spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=QWEN3_06B["num_key_value_heads"],
                                 head_size=QWEN3_06B["head_dim"], dtype=torch.bfloat16)
        layers = [f"layer{i}" for i in range(QWEN3_06B["num_hidden_layers"])]
        kv = KVCacheConfig(num_blocks=blocks, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(layers, spec)])
        self.scheduler = (AsyncScheduler if asynchronous else Scheduler)(
            config, kv, StructuredOutputManager(config), block_size=BLOCK, log_stats=False)
        hash_fn = get_hash_fn_by_name(cache.prefix_caching_hash_algo)
        init_none_hash(hash_fn)
        hasher = get_request_block_hasher(BLOCK, hash_fn)
        self.rng = np.random.default_rng(seed)
        for i in range(batch):
            params = SamplingParams(max_tokens=steps + 8, ignore_eos=True, temperature=1.0, seed=i)
            self.scheduler.add_request(Request(str(i), self.rng.integers(0, QWEN3_06B["vocab_size"], PROMPT_LEN).tolist(),
                                               params, None, block_hasher=hasher))
        self.steps = 0

    def schedule(self):
        """One `schedule()`; every step must be a step of the whole batch."""
        output = self.scheduler.schedule()
        if len(output.num_scheduled_tokens) != self.batch:
            raise RuntimeError(f"step {self.steps} scheduled {len(output.num_scheduled_tokens)} of {self.batch} requests")
        return output

    def sampled(self, output):
        """What the model runner returns for the step: one random token for every scheduled request."""
        from vllm.v1.outputs import ModelRunnerOutput

        ids = list(output.num_scheduled_tokens)
        sampled = self.rng.integers(0, QWEN3_06B["vocab_size"], len(ids)).tolist()
        index = {"req_id_to_index": {r: j for j, r in enumerate(ids)}}  # a field to 0.33
        return ModelRunnerOutput(req_ids=ids, sampled_token_ids=[[t] for t in sampled],
                                 **{k: v for k, v in index.items() if k in ModelRunnerOutput.__dataclass_fields__})

    def update(self, output, runner_output) -> None:
        self.scheduler.update_from_output(output, runner_output)
        self.steps += 1
