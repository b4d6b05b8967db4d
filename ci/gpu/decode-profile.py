"""Host time per decode step, function by function: where a presence-penalty step spends the
time that a no-penalty step does not. GPU machine only; needs vLLM (on our GPU machine, the staged
one: ci/gpu/stage-vllm.sh).

One in-process engine (`VLLM_ENABLE_V1_MULTIPROCESSING=0`, so the engine core's functions can be
timed) on the e2e dummy model, B requests of LENGTH generated tokens, runs alternating no penalty
/ presence 1.5 (reversed every other repeat). Each listed function is wrapped with a timer, so the
totals include the wrappers' own cost (about a microsecond per call); read them side by side, not
as absolute costs. The repair's wait for the previous step's copy is timed through the event vLLM
hands the batch. With VLLM_HOTPATHS=off the plugin stays out.

    python3 ci/gpu/decode-profile.py [LENGTH=5000] [REPEATS=2] [B=128]
"""

import collections
import functools
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from vllm import LLM, SamplingParams  # noqa: E402
from vllm.inputs import TokensPrompt  # noqa: E402

from vllm_hotpaths.testing.e2e import write_dummy_model  # noqa: E402

DEFAULTS = [5000, 2, 128]
LENGTH, REPEATS, BATCH = [int(a) for a in sys.argv[1:4]] + DEFAULTS[len(sys.argv[1:4]):]
seconds: dict[str, float] = collections.defaultdict(float)
calls: collections.Counter = collections.Counter()


def timed(name, fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            seconds[name] += time.perf_counter() - start
            calls[name] += 1
    return wrapper


def wrap(owner, attr: str, name: str) -> None:
    setattr(owner, attr, timed(name, getattr(owner, attr)))


llm = LLM(model=str(write_dummy_model(Path(tempfile.mkdtemp(), "model"))), load_format="dummy",
          skip_tokenizer_init=True, enforce_eager=True, seed=0, attention_config={"backend": "TRITON_ATTN"},
          gpu_memory_utilization=0.4, max_num_seqs=BATCH, max_model_len=LENGTH + 64)

from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.sample import sampler  # noqa: E402
from vllm.v1.worker.gpu_input_batch import InputBatch  # noqa: E402
from vllm.v1.worker.gpu_model_runner import GPUModelRunner  # noqa: E402

from vllm_hotpaths import plugin  # noqa: E402

print("plugin patched:", ", ".join(plugin.installed()) or "nothing", flush=True)
for owner, attrs in ((GPUModelRunner, ("execute_model", "sample_tokens", "_sample", "_bookkeeping_sync",
                                       "_update_states", "_prepare_inputs")),
                     (InputBatch, ("update_async_output_token_ids", "refresh_metadata")),
                     (sampler.Sampler, ("forward",)), (Scheduler, ("schedule", "update_from_output"))):
    for attr in attrs:
        wrap(owner, attr, f"{owner.__name__}.{attr}")
wrap(sampler, "apply_all_penalties", "apply_all_penalties")


class TimedEvent:
    """The copy-ready event that the placeholder repair waits on, with its waits timed."""

    def __init__(self, event) -> None:
        self.event = event
        self.synchronize = timed("wait for the previous step's sampled ids (in the repair)", event.synchronize)

    def __getattr__(self, name):
        return getattr(self.event, name)


upstream_set_async = InputBatch.set_async_sampled_token_ids


def set_async_sampled_token_ids(self, sampled_token_ids_cpu, async_copy_ready_event) -> None:
    event = async_copy_ready_event
    upstream_set_async(self, sampled_token_ids_cpu, None if event is None else TimedEvent(event))


InputBatch.set_async_sampled_token_ids = set_async_sampled_token_ids
if plugin.installed():
    from vllm_hotpaths.penalties import fast, fused
    from vllm_hotpaths.tracked_list import TrackedTokenList

    wrap(fast.IncrementalPenalties, "build", "IncrementalPenalties.build")
    wrap(fused, "apply_penalties", "fused.apply_penalties")
    wrap(TrackedTokenList, "__setitem__", "TrackedTokenList.__setitem__")

rng = np.random.default_rng(0)
prompts = [TokensPrompt(prompt_token_ids=rng.integers(0, 150_000, 16).tolist()) for _ in range(BATCH)]
runs = [("no penalty", {}), ("presence 1.5", {"presence_penalty": 1.5})]
for name, extra in runs:  # compile and warm both paths
    llm.generate(prompts, SamplingParams(max_tokens=32, ignore_eos=True, temperature=1.0, **extra), use_tqdm=False)
print(f"{torch.cuda.get_device_name()}, B={BATCH}, {LENGTH} generated tokens", flush=True)
for repeat in range(REPEATS):
    for name, extra in (runs if repeat % 2 == 0 else runs[::-1]):
        seconds.clear()
        calls.clear()
        params = SamplingParams(max_tokens=LENGTH, ignore_eos=True, temperature=1.0, **extra)
        torch.cuda.synchronize()
        start = time.perf_counter()
        llm.generate(prompts, params, use_tqdm=False)
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        steps = calls["GPUModelRunner.sample_tokens"] or LENGTH
        print(f"== {name}: {BATCH * LENGTH / elapsed:,.0f} tok/s, {elapsed / steps * 1e3:.3f} ms per step "
              f"({steps} steps)", flush=True)
        for key, total in sorted(seconds.items(), key=lambda item: -item[1]):
            print(f"   {total / steps * 1e3:7.3f} ms/step  {key} ({calls[key]} calls)", flush=True)
