"""A standalone `InputBatch`: the fields swap and condense touch, under vLLM's names.

Requests arrive as `Request`s and are added, removed, given drafts and tokens the way vLLM's
`InputBatch` of the given version does it (`add_request`,
`remove_request`, `update_req_spec_token_ids`, the model runner appending sampled ids), so a
property can drive this state and vLLM's own `InputBatch` through the same operations and
compare them. `swap_states` and `condense` are not methods here: they are the hot path's
implementations, called as `impl.swap_states(batch, i, j)`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from vllm_hotpaths.registry import version_key
from vllm_hotpaths.think_budget import Move

_V019, _V021, _V031 = version_key("0.19.0"), version_key("0.21.0"), version_key("0.31.0")


@dataclass(eq=False)
class Request:
    """One request as the model runner hands it to the batch (`CachedRequestState` + params).

    `prompt_token_ids` is None for a prompt given only as embeddings; `prompt_is_token_ids` marks
    the token positions of a mixed prompt. Objects (output list, generator, embeddings, bad
    words) are compared by identity after moves, so each batch gets its own output list."""

    req_id: str
    prompt_token_ids: list[int] | None
    output_token_ids: list[int]
    num_computed_tokens: int
    block_ids: tuple[list[int], ...]
    prompt_embeds: torch.Tensor | None = None
    prompt_is_token_ids: list[bool] | None = None
    pooling: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    generator: torch.Generator | None = None
    allowed_token_ids: list[int] | None = None
    bad_words_token_ids: list[list[int]] | None = None
    lora_id: int = 0

    @property
    def num_prompt_tokens(self) -> int:
        if self.prompt_token_ids is not None:
            return len(self.prompt_token_ids)
        return int(self.prompt_embeds.shape[0])


class MoveLog:
    """vLLM's `BatchUpdateBuilder`, the part swap and condense use: removed rows (read lowest
    first) and the recorded moves."""

    def __init__(self) -> None:
        self._removed: list[int] = []
        self._is_removed_sorted = False
        self.moved: list[tuple[int, int, Move]] = []

    @property
    def removed(self) -> list[int]:
        if not self._is_removed_sorted:
            self._removed.sort(reverse=True)
            self._is_removed_sorted = True
        return self._removed

    def removed_append(self, index: int) -> None:
        if self._is_removed_sorted:
            raise RuntimeError("a removal was registered after this step's removals were read")
        self._removed.append(index)

    def peek_removed(self) -> int | None:
        return self.removed[-1] if self._removed else None

    def pop_removed(self) -> int | None:
        return self.removed.pop() if self._removed else None

    def reset(self) -> None:
        self._removed, self._is_removed_sorted, self.moved = [], False, []


class _Rows:
    def __init__(self, rows: int, cols: int) -> None:
        self.np = np.zeros((rows, cols), dtype=np.int32)


class GroupTable:
    """One KV-cache group's block table (vLLM's `BlockTable`): rows of block ids and their counts."""

    def __init__(self, max_num_reqs: int, max_num_blocks: int) -> None:
        self.block_table = _Rows(max_num_reqs, max_num_blocks)
        self.num_blocks_per_row = np.zeros(max_num_reqs, dtype=np.int32)

    def add_row(self, block_ids: list[int], row: int) -> None:
        self.num_blocks_per_row[row] = len(block_ids)
        self.block_table.np[row, :len(block_ids)] = block_ids

    def clear_row(self, row: int) -> None:
        self.block_table.np[row, :self.num_blocks_per_row[row]] = 0
        self.num_blocks_per_row[row] = 0


class BlockTables:
    """vLLM's `MultiGroupBlockTable`: one `GroupTable` per KV-cache group."""

    def __init__(self, max_num_reqs: int, max_num_blocks: tuple[int, ...]) -> None:
        self.block_tables = [GroupTable(max_num_reqs, n) for n in max_num_blocks]


class BatchState:
    def __init__(self, max_num_reqs: int, max_model_len: int, vocab_size: int, block_sizes: tuple[int, ...],
                 is_pooling_model: bool = False, vllm_version: str = "0.22.0") -> None:
        self.max_num_reqs, self.max_model_len, self.vocab_size = max_num_reqs, max_model_len, vocab_size
        self.is_pooling_model = is_pooling_model
        # Where vLLM's own add / remove / drafts differ by version (not swap or condense):
        version = version_key(vllm_version)
        self.mixed_prompts = version >= _V021  # before 0.21: no mixed token/embedding prompts
        self.removal_clears_blocks = version >= _V019  # before 0.19: a removed request's block ids stay
        self.drafts_mark_token_ids = version >= _V021  # before 0.21: is_token_ids of drafts stay
        self.removal_drops_embeds = version >= _V031  # before 0.31: kept under the row index
        self._req_ids: list[str | None] = []
        self.req_id_to_index: dict[str, int] = {}
        self.req_output_token_ids: list[list[int] | None] = []
        self.spec_token_ids: list[list[int]] = [[] for _ in range(max_num_reqs)]
        self.token_ids_cpu = np.zeros((max_num_reqs, max_model_len), dtype=np.int32)
        self.is_token_ids = np.zeros((max_num_reqs, max_model_len), dtype=bool)
        self.req_prompt_embeds: dict[int, torch.Tensor] = {}
        for name, dtype, fill in (
            ("num_tokens_no_spec", np.int32, 0), ("num_prompt_tokens", np.int32, 0),
            ("num_computed_tokens_cpu", np.int32, 0), ("request_lora_mapping", np.int64, 0),
            ("temperature_cpu", np.float32, 0), ("top_p_cpu", np.float32, 0), ("top_k_cpu", np.int32, 0),
            ("frequency_penalties_cpu", np.float32, 0), ("presence_penalties_cpu", np.float32, 0),
            ("repetition_penalties_cpu", np.float32, 0), ("num_accepted_tokens_cpu", np.int32, 1),
        ):
            setattr(self, name, np.full(max_num_reqs, fill, dtype=dtype))
        self.block_table = BlockTables(max_num_reqs, tuple(-(-max_model_len // b) for b in block_sizes))
        self.generators: dict[int, torch.Generator] = {}
        self.bad_words_token_ids: dict[int, list[list[int]]] = {}
        self.allowed_token_ids_mask_cpu_tensor: torch.Tensor | None = None
        self.batch_update_builder = MoveLog()

    @property
    def num_reqs(self) -> int:
        return len(self.req_id_to_index)

    def add_request(self, request: Request) -> int:
        index = self.batch_update_builder.pop_removed()
        if index is None:
            index = self.num_reqs
        if index >= self.max_num_reqs:
            raise ValueError(f"batch is full ({self.max_num_reqs} requests)")
        if index == len(self._req_ids):
            self._req_ids.append(request.req_id)
            self.req_output_token_ids.append(request.output_token_ids)
            self.spec_token_ids.append([])
        else:
            self._req_ids[index] = request.req_id
            self.req_output_token_ids[index] = request.output_token_ids
            self.spec_token_ids[index].clear()
        self.req_id_to_index[request.req_id] = index
        p, out = request.num_prompt_tokens, request.output_token_ids
        self.num_prompt_tokens[index] = p
        if request.prompt_token_ids is not None:
            self.token_ids_cpu[index, :p] = request.prompt_token_ids
            mixed = request.prompt_is_token_ids if self.mixed_prompts else None
            self.is_token_ids[index, :p] = True if mixed is None else mixed
        else:
            self.is_token_ids[index, :p] = False
        if request.prompt_embeds is not None:
            self.req_prompt_embeds[index] = request.prompt_embeds
        self.token_ids_cpu[index, p:p + len(out)] = out
        self.is_token_ids[index, p:p + len(out)] = True
        self.num_tokens_no_spec[index] = p + len(out)
        self.num_computed_tokens_cpu[index] = request.num_computed_tokens
        for group, ids in zip(self.block_table.block_tables, request.block_ids):
            group.add_row(ids, index)
        if not request.pooling:
            self._add_sampling(request, index)
        self.num_accepted_tokens_cpu[index] = 1
        self.request_lora_mapping[index] = request.lora_id
        return index

    def _add_sampling(self, request: Request, index: int) -> None:
        self.temperature_cpu[index] = 0.0 if request.temperature < 1e-5 else request.temperature
        self.top_p_cpu[index] = request.top_p
        self.top_k_cpu[index] = request.top_k if 0 < request.top_k < self.vocab_size else self.vocab_size
        self.frequency_penalties_cpu[index] = request.frequency_penalty
        self.presence_penalties_cpu[index] = request.presence_penalty
        self.repetition_penalties_cpu[index] = request.repetition_penalty
        if request.generator is not None:
            self.generators[index] = request.generator
        if request.allowed_token_ids:
            if self.allowed_token_ids_mask_cpu_tensor is None:
                self.allowed_token_ids_mask_cpu_tensor = torch.zeros(
                    self.max_num_reqs, self.vocab_size, dtype=torch.bool)
            row = self.allowed_token_ids_mask_cpu_tensor.numpy()[index]  # numpy: torch's bool fills are slow
            row[:] = True
            row[request.allowed_token_ids] = False
        if request.bad_words_token_ids:
            self.bad_words_token_ids[index] = request.bad_words_token_ids

    def remove_request(self, req_id: str) -> int | None:
        index = self.req_id_to_index.pop(req_id, None)
        if index is None:
            return None
        self.batch_update_builder.removed_append(index)
        self._req_ids[index] = None
        self.req_output_token_ids[index] = None
        self.spec_token_ids[index].clear()
        for group in self.block_table.block_tables if self.removal_clears_blocks else ():
            group.clear_row(index)
        self.request_lora_mapping[index] = 0
        if self.removal_drops_embeds:
            self.req_prompt_embeds.pop(index, None)
        if self.is_pooling_model:
            return index
        self.generators.pop(index, None)
        if self.allowed_token_ids_mask_cpu_tensor is not None:
            self.allowed_token_ids_mask_cpu_tensor.numpy()[index] = False
        self.bad_words_token_ids.pop(index, None)
        return index

    def update_req_spec_token_ids(self, req_id: str, drafts: list[int]) -> None:
        index = self.req_id_to_index[req_id]
        spec = self.spec_token_ids[index]
        spec.clear()
        if drafts:
            start = int(self.num_tokens_no_spec[index])
            self.token_ids_cpu[index, start:start + len(drafts)] = drafts
            if self.drafts_mark_token_ids:
                self.is_token_ids[index, start:start + len(drafts)] = True
            spec.extend(drafts)

    def append_token(self, req_id: str, token: int) -> None:
        book_token(self, req_id, token)

    def end_step(self) -> None:
        """`refresh_metadata`: the step's removals and moves have been handed on."""
        self.batch_update_builder.reset()


def book_token(batch, req_id: str, token: int) -> None:
    """The model runner's bookkeeping of one sampled id (-1: async placeholder), on this batch or
    vLLM's InputBatch."""
    index = batch.req_id_to_index[req_id]
    end = int(batch.num_tokens_no_spec[index])
    batch.token_ids_cpu[index, end] = token
    batch.is_token_ids[index, end] = True
    batch.num_tokens_no_spec[index] = end + 1
    batch.req_output_token_ids[index].append(token)


def record_accepted(batch, req_id: str, count: int) -> None:
    """The model runner's write of a row's spec-decode counter after a verified step (hybrid
    models read it as the number of accepted tokens plus one), on this batch or vLLM's InputBatch."""
    batch.num_accepted_tokens_cpu[batch.req_id_to_index[req_id]] = count
