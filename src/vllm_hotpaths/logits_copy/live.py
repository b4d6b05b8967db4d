"""vLLM 0.22's Model Runner v2 sampler (`Sampler.apply_sampling_params`, `gumbel_sample`) on
request states set up as vLLM's model runner sets them up.

The states are vLLM's own `RequestState` and `Sampler`, fed through their `add_request` /
`apply_staged_writes` / `remove_request` and vLLM's `post_update`. Where UVA (pinned memory) is
not available, `buffer_utils.UvaBuffer` is replaced by a plain host tensor while these two
objects are built (its only construction point), then restored.

`params` are keyword arguments of `vllm.SamplingParams`, passed unchanged except:
`bad_words_token_ids` goes to the private `_bad_words_token_ids` field (the engine fills it from
`bad_words` strings); `max_tokens` defaults to None (the default 16 rejects `min_tokens > 16`).
`SamplingParams.__post_init__` (vllm/sampling_params.py) then normalizes: 0 < temperature < 1e-2
is raised to 1e-2 (l.399-408); seed -1 becomes None (l.409-410); temperature < 1e-5 resets top_p=1,
top_k=0, min_p=0 (l.436-440); `all_stop_token_ids` is the set of `stop_token_ids` (l.444; the
engine would add EOS, not done here). The sampler then maps top_k <= 0 or > vocab to vocab and a
None seed to a random one (sample/states.py l.241, l.247).
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import torch

from vllm_hotpaths import vllm_env


class _HostUvaBuffer:
    """`UvaBuffer` stand-in: the "device view" is the host tensor itself."""

    def __init__(self, size, dtype: torch.dtype):
        self.cpu = torch.zeros(size, dtype=dtype)
        self.np = self.cpu.numpy()
        self.uva = self.cpu


@contextmanager
def _host_uva(buffer_utils):
    from vllm.utils.platform_utils import is_uva_available

    if is_uva_available():
        yield
        return
    original = buffer_utils.UvaBuffer
    buffer_utils.UvaBuffer = _HostUvaBuffer
    try:
        yield
    finally:
        buffer_utils.UvaBuffer = original


class LiveSampler022:
    """`reasoning` is accepted and unused: 0.22's Model Runner v2 sampler has no thinking forcing
    (its `SamplingParams` still carries `thinking_token_budget`)."""

    def __init__(self, vocab_size: int, max_num_reqs: int, device="cpu", max_model_len: int = 256,
                 reasoning=None):
        self._sampler_mod = vllm_env.import_vllm("vllm.v1.worker.gpu.sample.sampler")
        from vllm.sampling_params import SamplingParams
        from vllm.v1.worker.gpu import buffer_utils
        from vllm.v1.worker.gpu.input_batch import post_update
        from vllm.v1.worker.gpu.states import RequestState

        self._SamplingParams, self._post_update = SamplingParams, post_update
        self.device = torch.device(device)
        self.vocab_size, self.max_model_len = vocab_size, max_model_len
        with _host_uva(buffer_utils):
            self.req_states = RequestState(
                max_num_reqs=max_num_reqs, max_model_len=max_model_len,
                max_num_batched_tokens=max_model_len, num_speculative_steps=1,
                vocab_size=vocab_size, device=self.device)
            self.sampler = self._sampler_mod.Sampler(
                max_num_reqs=max_num_reqs, vocab_size=vocab_size, device=self.device,
                req_states=self.req_states)
        self.params: dict[int, object] = {}  # slot -> the SamplingParams given to vLLM

    @staticmethod
    def _req_id(slot: int) -> str:
        return f"slot-{slot}"

    def add_request(self, slot: int, prompt: list[int], output: list[int], params) -> None:
        """`params`: a RequestParams or SamplingParams keyword arguments."""
        kwargs = dict(params.as_sampling_params_kwargs() if hasattr(params, "as_sampling_params_kwargs")
                      else params)
        bad_words = kwargs.pop("bad_words_token_ids", None)
        kwargs.setdefault("max_tokens", None)
        if bad_words is not None:
            kwargs["_bad_words_token_ids"] = [list(w) for w in bad_words]
        sp = self._SamplingParams(**kwargs)
        tokens = list(prompt) + list(output)
        if len(tokens) > self.max_model_len:
            raise ValueError(f"{len(tokens)} tokens > max_model_len {self.max_model_len}")
        rs = self.req_states
        if slot in rs.index_to_req_id:
            raise ValueError(f"slot {slot} is in use")
        # RequestState.add_request takes free_indices.pop(): put `slot` last.
        rs.free_indices.remove(slot)
        rs.free_indices.append(slot)
        # Resumed request: prefill_len = total_len = len(prompt + output), all computed.
        rs.add_request(self._req_id(slot), len(prompt), tokens, num_computed_tokens=len(tokens))
        assert rs.req_id_to_index[self._req_id(slot)] == slot
        self.sampler.add_request(slot, len(prompt), sp)
        rs.apply_staged_writes()
        self.sampler.apply_staged_writes()
        self.params[slot] = sp

    def remove_request(self, slot: int) -> None:
        if not self.req_states.remove_request(self._req_id(slot)):
            raise KeyError(f"no request in slot {slot}")
        self.params.pop(slot, None)

    def append_output(self, slot: int, tokens: list[int]) -> None:
        """vLLM's `post_update` for one request that sampled `tokens` (none rejected)."""
        n = len(tokens)
        if n == 0:
            return
        rs, dev = self.req_states, self.device
        if int(rs.total_len.gpu[slot]) + n > self.max_model_len:
            raise ValueError("append_output past max_model_len")
        i32 = dict(dtype=torch.int32, device=dev)
        self._post_update(
            torch.tensor([slot], **i32), rs.num_computed_tokens.gpu, rs.last_sampled_tokens,
            self.sampler.penalties_state.output_bin_counts,
            torch.tensor([list(tokens)], dtype=torch.int64, device=dev),  # sampled [1, n]
            torch.tensor([n], **i32), torch.zeros(1, **i32),  # num_sampled, num_rejected
            torch.tensor([0, n], **i32),  # query_start_loc
            rs.all_token_ids.gpu, rs.total_len.gpu)

    def _mapping(self, rows: list[int], pos: list[int]):
        if len(rows) != len(pos):
            raise ValueError("rows and pos differ in length")
        expanded = torch.tensor(rows, dtype=torch.int32, device=self.device)
        idx_mapping_np = np.array(list(dict.fromkeys(rows)), dtype=np.int32)
        positions = torch.tensor(pos, dtype=torch.int64, device=self.device)
        return expanded, idx_mapping_np, positions

    def sampler_args(self, logits, rows: list[int], local_pos: list[int], input_ids: list[int],
                     pos: list[int]) -> tuple:
        """The arguments of 0.22's `Sampler.apply_sampling_params` and `Sampler.sample`."""
        if not (logits.shape[0] == len(rows) == len(local_pos) == len(input_ids)):
            raise ValueError("one rows/local_pos/input_ids/pos entry per logits row")
        expanded, idx_mapping_np, positions = self._mapping(rows, pos)
        # Model-runner dtypes: input_ids int32, positions int64, mappings and local pos int32.
        return (logits, expanded, idx_mapping_np, positions,
                torch.tensor(input_ids, dtype=torch.int32, device=self.device),
                torch.tensor(local_pos, dtype=torch.int32, device=self.device))

    def apply_sampling_params(self, logits, rows: list[int], local_pos: list[int],
                              input_ids: list[int], pos: list[int]) -> torch.Tensor:
        return self.sampler.apply_sampling_params(*self.sampler_args(logits, rows, local_pos, input_ids, pos))

    def sample(self, processed_logits, rows: list[int], pos: list[int]) -> torch.Tensor:
        expanded, _, positions = self._mapping(rows, pos)
        states = self.sampler.sampling_states
        return self._sampler_mod.gumbel_sample(
            processed_logits, expanded, states.temperature.gpu, states.seeds.gpu, positions,
            apply_temperature=False, use_fp64=self.sampler.use_fp64_gumbel)
