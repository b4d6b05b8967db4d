"""vLLM's own `InputBatch`, built and fed the same `Request`s as the standalone `BatchState`.

`live_batch` returns an `InputBatch` of the installed vLLM (CPU tensors); `add` turns a
`Request` into vLLM's `CachedRequestState` with `SamplingParams` / `PoolingParams` that give the
same per-row values. The batch's own `swap_states` / `condense` are upstream's; a hot-path
implementation runs on it as `impl.swap_states(batch, i1, i2)`.
"""

from __future__ import annotations

import dataclasses
import inspect

import torch

from vllm_hotpaths import vllm_env
from vllm_hotpaths.testing.batches.swap_states import Request


def _modules():
    gib = vllm_env.import_vllm("vllm.v1.worker.gpu_input_batch")
    from vllm.pooling_params import PoolingParams
    from vllm.sampling_params import SamplingParams
    from vllm.v1.sample.logits_processor import MoveDirectionality

    return gib, SamplingParams, PoolingParams, MoveDirectionality


def move_directions():
    """vLLM's `MoveDirectionality`: what a batch of the installed vLLM records."""
    return _modules()[3]


def live_batch(max_num_reqs: int, max_model_len: int, vocab_size: int, block_sizes: tuple[int, ...],
               is_pooling_model: bool = False, **extra):
    """`extra`: further InputBatch arguments (num_spec_tokens, reasoning_config, ...)."""
    gib = _modules()[0]
    blocks = [-(-max_model_len // b) for b in block_sizes]
    offered = dict(max_num_reqs=max_num_reqs, max_model_len=max_model_len,
                   max_num_batched_tokens=max(max_model_len, 256), device=torch.device("cpu"),
                   pin_memory=False, vocab_size=vocab_size, block_sizes=list(block_sizes),
                   kernel_block_sizes=list(block_sizes), max_num_blocks_per_req=blocks,
                   is_pooling_model=is_pooling_model, **extra)
    accepted = inspect.signature(gib.InputBatch).parameters  # 0.33 dropped pin_memory and kernel sizes
    return gib.InputBatch(**{k: v for k, v in offered.items() if k in accepted})


def add(batch, request: Request) -> int:
    gib, SamplingParams, PoolingParams, _ = _modules()
    sampling = pooling = None
    if request.pooling:
        pooling = PoolingParams()
    else:
        sampling = SamplingParams(
            temperature=request.temperature, top_p=request.top_p, top_k=request.top_k,
            frequency_penalty=request.frequency_penalty, presence_penalty=request.presence_penalty,
            repetition_penalty=request.repetition_penalty, allowed_token_ids=request.allowed_token_ids)
        sampling._bad_words_token_ids = request.bad_words_token_ids
    fields = dict(
        req_id=request.req_id, prompt_token_ids=request.prompt_token_ids, mm_features=[],
        sampling_params=sampling, pooling_params=pooling, generator=request.generator,
        block_ids=request.block_ids, num_computed_tokens=request.num_computed_tokens,
        output_token_ids=request.output_token_ids, prompt_embeds=request.prompt_embeds,
        prompt_is_token_ids=request.prompt_is_token_ids,  # mixed prompts: not in 0.16
        lora_request=_lora(request.lora_id))
    known = {f.name for f in dataclasses.fields(gib.CachedRequestState)}
    return batch.add_request(gib.CachedRequestState(**{k: v for k, v in fields.items() if k in known}))


def _lora(lora_id: int):
    if not lora_id:
        return None
    from vllm.lora.request import LoRARequest

    return LoRARequest(lora_name=f"lora-{lora_id}", lora_int_id=lora_id, lora_path="/nonexistent")


def update_spec(batch, req_id: str, drafts: list[int]) -> None:
    """`update_req_spec_token_ids` (it reads the request's id and records the draft count)."""
    request = type("DraftOwner", (), {"req_id": req_id, "prev_num_draft_len": 0})()
    batch.update_req_spec_token_ids(request, {req_id: list(drafts)} if drafts else {})


def end_step(batch) -> None:
    batch.batch_update_builder.reset()
