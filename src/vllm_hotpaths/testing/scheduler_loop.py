"""vLLM's scheduler driven in-process on the CPU as the engine core drives it in decode (no GPU,
no model): B requests, then `schedule()` and `update_from_output()` with one sampled token per
request each step. Prefix caching on with vLLM's block hasher, block size 16, KV blocks for every
request's full length (no preemption), the dummy Qwen3-0.6B config of `vllm-hotpaths throughput`;
`asynchronous`: the AsyncScheduler (vLLM's default). Prompts are 16 tokens, or with
`mixed_prompts` 16 to 512 (so that block boundaries fall on different steps for different
requests, as in a real batch). `pipelined_step` runs a step as the engine core's batch queue does
with async scheduling: step N+1 is scheduled before step N's output is applied. Used by
`ci/scheduler-cost.py` and by the `cached_request_data` benchmark.
"""

from __future__ import annotations

import functools
import inspect
import os
import tempfile
from collections import deque
from contextlib import contextmanager
from unittest import mock
from pathlib import Path

import numpy as np

from vllm_hotpaths import vllm_env
from vllm_hotpaths.testing.throughput import PROMPT_LEN, QWEN3_06B, write_model

BLOCK = 16
MIXED_PROMPTS = (16, 512)  # the prompt lengths of `mixed_prompts`, both ends included


def make_scheduler(asynchronous: bool, *, max_num_seqs: int, max_num_batched_tokens: int, max_model_len: int,
                   num_blocks: int, block_size: int = BLOCK, policy: str = "fcfs", prefix_caching: bool = True,
                   chunked_prefill: bool = True, long_prefill_token_threshold: int = 0, zeroing: bool = False,
                   count: int = 1):
    """vLLM's scheduler (the AsyncScheduler when `asynchronous`) over one full-attention KV cache
    group of `num_blocks` blocks, for the dummy Qwen3-0.6B config, and the block hasher its
    requests take; with `count`, that many schedulers of one configuration (a list). `zeroing`:
    the KV cache config says new blocks must be zeroed, as a model with Mamba layers has it (the
    scheduler then hands each step's new block ids to the model runner). Every release from
    0.16.0 on."""
    vllm_env.import_vllm("vllm.v1.core.sched.scheduler")  # the CPU platform first, where no GPU is visible
    import torch
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    model = _model_dir()
    cache = CacheConfig(block_size=block_size, enable_prefix_caching=prefix_caching)
    cache.num_gpu_blocks = num_blocks
    # vLLM's config sets the platform's process variables (LD_PRELOAD, VLLM_WORKER_MULTIPROC_METHOD,
    # ...): none concerns the scheduler, and a test process whose environment changed would no
    # longer match its fork server's (tests/forked_pytest.py).
    with _plugins_listed_once(), mock.patch.dict(os.environ):
        config = VllmConfig(
            model_config=ModelConfig(model=str(model), skip_tokenizer_init=True, max_model_len=max_model_len),
            scheduler_config=vllm_env.call(
                SchedulerConfig, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                max_model_len=max_model_len, is_encoder_decoder=False, async_scheduling=asynchronous, policy=policy,
                enable_chunked_prefill=chunked_prefill, long_prefill_token_threshold=long_prefill_token_threshold),
            cache_config=cache)
    spec = FullAttentionSpec(block_size=block_size, num_kv_heads=QWEN3_06B["num_key_value_heads"],
                             head_size=QWEN3_06B["head_dim"], dtype=torch.bfloat16)
    layers = [f"layer{i}" for i in range(QWEN3_06B["num_hidden_layers"])]
    kv = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(layers, spec)])
    if zeroing:
        try:  # a field from 0.34
            kv.needs_kv_cache_zeroing = True
        except AttributeError:  # to 0.33 a property (of the Mamba layers)
            object.__setattr__(kv, "__class__", type("ZeroingKVCacheConfig", (type(kv),), {"needs_kv_cache_zeroing": True}))
    with _plugins_listed_once(), mock.patch.dict(os.environ):
        schedulers = [(AsyncScheduler if asynchronous else Scheduler)(
            config, kv, StructuredOutputManager(config), block_size=block_size, log_stats=False) for _ in range(count)]
    hash_fn = get_hash_fn_by_name(cache.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    return schedulers[0] if count == 1 else schedulers, get_request_block_hasher(block_size, hash_fn)


_MODEL: list[Path] = []


@contextmanager
def _plugins_listed_once():
    """`importlib.metadata.entry_points` answered once per group and process while a scheduler is
    built: vLLM's config and scheduler ask for plugin groups several times each, most of the time
    a state machine's scheduler takes to build (the installed packages do not change)."""
    from importlib import metadata

    real = metadata.entry_points
    cached = functools.lru_cache(maxsize=None)(lambda **kw: real(**kw))
    if not hasattr(_plugins_listed_once, "cache"):
        _plugins_listed_once.cache = cached
    with mock.patch.object(metadata, "entry_points", lambda **kw: _plugins_listed_once.cache(**kw)):
        yield


def _model_dir() -> Path:
    """The dummy model's config, written once per process."""
    if not _MODEL:
        _MODEL.append(write_model(Path(tempfile.mkdtemp(), "model")))
    return _MODEL[0]


def samples(scheduler, scheduler_output) -> list[str]:
    """The scheduled requests the model runner samples a token for: those whose computed tokens
    reach every known token once this step is counted (the scheduler counts them when it
    schedules)."""
    requests = scheduler.requests
    return [r for r in scheduler_output.num_scheduled_tokens
            if r in requests and requests[r].num_computed_tokens >= requests[r].num_tokens]


def runner_output(scheduler_output, tokens: dict[str, list[int]]):
    """vLLM's ModelRunnerOutput for a step: `tokens[id]` for each scheduled request (none where
    `tokens` has no entry)."""
    from vllm.v1.outputs import ModelRunnerOutput

    ids = list(scheduler_output.num_scheduled_tokens)
    index = {"req_id_to_index": {r: j for j, r in enumerate(ids)}}  # a field to 0.33
    return ModelRunnerOutput(req_ids=ids, sampled_token_ids=[list(tokens.get(r, [])) for r in ids],
                             **{k: v for k, v in index.items() if k in ModelRunnerOutput.__dataclass_fields__})


class DecodeLoop:
    def __init__(self, batch: int, steps: int, asynchronous: bool = True, seed: int = 0,
                 mixed_prompts: bool = False) -> None:
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        self.batch = batch
        self.rng = np.random.default_rng(seed)
        prompt_lens = (self.rng.integers(MIXED_PROMPTS[0], MIXED_PROMPTS[1] + 1, batch) if mixed_prompts
                       else np.full(batch, PROMPT_LEN)).tolist()
        max_model_len = max(prompt_lens) + steps + 16
        self.scheduler, hasher = make_scheduler(
            asynchronous, max_num_seqs=batch, max_num_batched_tokens=16384, max_model_len=max_model_len,
            num_blocks=sum(-(-(n + steps + 16) // BLOCK) + 1 for n in prompt_lens))
        # to 0.16 the request takes its eos id (None: ignored, as with ignore_eos)
        eos = {"eos_token_id": None} if "eos_token_id" in inspect.signature(Request).parameters else {}

        def requests(tag: str) -> list:
            return [Request(f"{tag}{i}", self.rng.integers(0, QWEN3_06B["vocab_size"], length).tolist(),
                            SamplingParams(max_tokens=steps + 8, ignore_eos=True, temperature=1.0, seed=i),
                            None, block_hasher=hasher, **eos) for i, length in enumerate(prompt_lens)]

        self.make_requests = requests
        self.requests = requests("")
        self.steps = 0
        self.in_flight: deque = deque()

    def rollout(self, tag: str) -> int:
        """Another batch of B requests (ids prefixed by `tag`), as an RL loop sends the next
        rollout, stepped as the batch queue steps until every request has finished. Returns the
        steps taken."""
        for request in self.make_requests(tag):
            self.scheduler.add_request(request)
        taken = 0
        while self.scheduler.has_requests() or self.in_flight:
            if self.scheduler.has_requests():
                output = self.scheduler.schedule()
                self.in_flight.append((output, self.sampled(output)))
            if len(self.in_flight) == 2 or not self.scheduler.has_requests():
                self.update(*self.in_flight.popleft())
            taken += 1
        return taken

    def add_requests(self) -> None:
        """Hands the requests to the scheduler (separate, so that a caller can freeze the garbage
        collector's heap first, as the engine core does at start-up, before any request)."""
        for request in self.requests:
            self.scheduler.add_request(request)
        self.requests = []

    def prefill(self) -> int:
        """Steps (the batch queue's, `pipelined_step`) until every request is in decode: its
        prompt computed and one token sampled. Returns the steps taken."""
        self.add_requests()
        taken = 0
        while True:
            output = self.scheduler.schedule()
            self.in_flight.append((output, self.sampled(output)))
            taken += 1
            if len(self.in_flight) == 2:
                self.update(*self.in_flight.popleft())
            decoding = sum(1 for n in output.num_scheduled_tokens.values() if n == 1)
            if decoding == self.batch:
                return taken
            if taken > 10_000:
                raise RuntimeError("the batch never reached decode")

    def pipelined_step(self, timer=None) -> tuple[float, float]:
        """One step of the engine core's batch queue (two steps in flight): schedule the next
        step, then apply the oldest step's output. Returns the seconds of each call (`timer`
        defaults to time.perf_counter)."""
        import time

        timer = timer or time.perf_counter
        start = timer()
        output = self.schedule()
        scheduled = timer()
        runner_output = self.sampled(output)
        self.in_flight.append((output, runner_output))
        oldest = self.in_flight.popleft()
        before = timer()
        self.update(*oldest)
        return scheduled - start, timer() - before

    def schedule(self):
        """One `schedule()`; every step must be a step of the whole batch."""
        if self.requests:
            self.add_requests()
        output = self.scheduler.schedule()
        if len(output.num_scheduled_tokens) != self.batch:
            raise RuntimeError(f"step {self.steps} scheduled {len(output.num_scheduled_tokens)} of {self.batch} requests")
        return output

    def sampled(self, output):
        """What the model runner returns for the step: one random token for every scheduled request
        that reaches the end of its known tokens (none for a prefill chunk short of it)."""
        sampled = self.rng.integers(0, QWEN3_06B["vocab_size"], len(output.num_scheduled_tokens)).tolist()
        return runner_output(output, {r: [t] for r, t in zip(samples(self.scheduler, output), sampled)})

    def update(self, output, runner_output) -> None:
        self.scheduler.update_from_output(output, runner_output)
        self.steps += 1


def in_turn(loops: list, steps: int, warm: int = 8) -> tuple[list, list]:
    """Pipelined steps of two prefilled loops taken in turn (who goes first alternates), `warm`
    steps each first: per loop, the seconds of each `schedule()` and of each whole step."""
    scheduled, whole = ([], []), ([], [])
    for step in range(warm + steps):
        for side in (step % 2, 1 - step % 2):
            s, u = loops[side].pipelined_step()
            if step >= warm:
                scheduled[side].append(s)
                whole[side].append(s + u)
    return scheduled, whole
