"""vLLM's Model Runner v2 sampler (`Sampler.apply_sampling_params`, `gumbel_sample`) on request
states set up as vLLM's model runner sets them up, through each release's own signatures
(`vllm_env.call` passes the arguments a release's function names).

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

import functools
import sys
from contextlib import contextmanager

import numpy as np
import torch

from vllm_hotpaths import vllm_env


class _HostUvaBuffer:
    """`UvaBuffer` stand-in: the "device view" is the host tensor itself (0.22: attribute `uva`)."""

    def __init__(self, size, dtype: torch.dtype):
        self.cpu = torch.zeros(size, dtype=dtype)
        self.np = self.cpu.numpy()
        self.uva = self.cpu


class _HostUvaBuffer033(_HostUvaBuffer):
    """0.33's `UvaBuffer.uva(n)` is a method returning the first n rows of the view."""

    def __init__(self, size, dtype: torch.dtype):
        super().__init__(size, dtype)
        view = self.cpu
        self.uva = lambda n=None: view[:n] if n is not None else view


@contextmanager
def host_uva(buffer_utils):
    if torch.cuda.is_available():  # (0.33's is_uva_available() says True on a CPU-only host too)
        yield
        return
    original = buffer_utils.UvaBuffer
    buffer_utils.UvaBuffer = _HostUvaBuffer033 if callable(getattr(original, "uva", None)) else _HostUvaBuffer
    try:
        yield
    finally:
        buffer_utils.UvaBuffer = original


def _h2d_unpinned(data, dtype, device=None, pin_memory=False, target_device=None):
    """`async_tensor_h2d` (its third argument is `target_device` until 0.20, `device` from 0.21)."""
    return torch.tensor(data, dtype=dtype).to(device if device is not None else target_device)


@functools.lru_cache(maxsize=1)
def _h2d_callers(loaded: int) -> list:
    """The Model Runner V2 modules that call `async_tensor_h2d`, found among the `loaded` modules
    imported so far (kept until another is imported: scanning them all at every request cost the
    suite about 30 s)."""
    return [m for name, m in list(sys.modules.items())
            if name.startswith("vllm.v1.worker.gpu") and hasattr(m, "async_tensor_h2d")]


@contextmanager
def unpinned_h2d():
    """0.17 to 0.21 copy host lists to the device through pinned memory
    (`async_tensor_h2d(..., pin_memory=True)`), and 0.16 synchronizes CUDA when its staging buffer
    grows, which a host without CUDA refuses; there the same values are copied unpinned in the
    Model Runner V2 modules that call it, and there is nothing to synchronize."""
    if torch.cuda.is_available():
        yield
        return
    modules = _h2d_callers(len(sys.modules))
    originals = [m.async_tensor_h2d for m in modules]
    for module in modules:
        module.async_tensor_h2d = _h2d_unpinned
    synchronize, torch.cuda.synchronize = torch.cuda.synchronize, lambda *_: None  # (0.16's staged writes)
    try:
        yield
    finally:
        torch.cuda.synchronize = synchronize
        for module, original in zip(modules, originals):
            module.async_tensor_h2d = original


def request_state(max_num_reqs: int, max_model_len: int, vocab_size: int, device):
    """vLLM's Model Runner V2 `RequestState` as the adapters use it (one speculative step, a
    token budget of one model length; 0.18 and 0.19 also ask whether to cache draft logits: no);
    call inside `host_uva`."""
    from vllm.v1.worker.gpu.states import RequestState

    return vllm_env.call(RequestState, max_num_reqs=max_num_reqs, max_model_len=max_model_len,
                         max_num_batched_tokens=max_model_len, num_speculative_steps=1,
                         vocab_size=vocab_size, device=device, model_dtype=torch.float32, cache_draft_logits=False)


def admit(req_states, req_id: str, prompt_len: int, tokens: list[int], max_model_len: int) -> None:
    """`RequestState.add_request` for a request whose `tokens` are all computed (a resumed one:
    prefill_len = total_len = len(tokens)); from 0.23 it also takes the request's max_tokens."""
    vllm_env.call(req_states.add_request, req_id, prompt_len, tokens, num_computed_tokens=len(tokens),
                  max_tokens=max_model_len - prompt_len)


def processes_in_place(version: str | None) -> bool:
    """vLLM 0.26.x: `apply_sampling_params` runs its steps on the logits it is given, in their
    dtype (PR #48641; 0.27.0 restores the fp32 copy, PR #49033)."""
    from packaging.version import Version

    return version is not None and Version("0.26.0") <= Version(version) < Version("0.27.0")


class LiveSampler:
    """The installed release's sampler, whatever its signatures (vllm_env.call): a `Sampler` built
    with the reasoning markers where the release takes them (0.28-0.30: `reasoning_config`; from
    0.31: a `VllmConfig` that carries them; vLLM forces thinking budgets only when all three are
    known; earlier releases have no forcing and `reasoning` is unused), and
    `apply_sampling_params(..., skip_top_k_top_p=True)` where the release has it, as its
    `Sampler.sample` calls it (from 0.23: top-k/top-p are applied in the sampling step, which the
    references leave out). When no request of the batch needs processing, 0.27 on return the
    caller's tensor itself. 0.26.0 makes no fp32 copy: its steps write the logits they are given,
    in their dtype; it is handed a copy of the caller's logits (the engine's logits are its own
    scratch tensor; the contract's caller keeps its own) and returns that copy, processed, in
    the logits' dtype (`keeps_logits_dtype`)."""

    def __init__(self, vocab_size: int, max_num_reqs: int, device="cpu", max_model_len: int = 256,
                 reasoning=None):
        self._sampler_mod = vllm_env.import_vllm("vllm.v1.worker.gpu.sample.sampler")
        from vllm.sampling_params import SamplingParams
        from vllm.v1.worker.gpu import buffer_utils
        from vllm.v1.worker.gpu.input_batch import post_update

        self._SamplingParams, self._post_update, self._buffer_utils = SamplingParams, post_update, buffer_utils
        self.keeps_logits_dtype = processes_in_place(vllm_env.installed_version())
        self.device = torch.device(device)
        self.vocab_size, self.max_model_len = vocab_size, max_model_len
        with host_uva(buffer_utils):
            self.req_states = request_state(max_num_reqs, max_model_len, vocab_size, self.device)
            self.sampler = self._sampler(max_num_reqs, vocab_size, reasoning)
        self.params: dict[int, object] = {}  # slot -> the SamplingParams given to vLLM

    def _sampler(self, max_num_reqs: int, vocab_size: int, reasoning):
        import inspect

        takes = inspect.signature(self._sampler_mod.Sampler).parameters
        config = markers = None
        if reasoning is not None and ("vllm_config" in takes or "reasoning_config" in takes):
            from vllm.config.reasoning import ReasoningConfig

            markers = ReasoningConfig()
            # The token ids vLLM derives from the tokenizer's marker strings, given directly.
            markers._reasoning_start_token_ids = list(reasoning.start)
            markers._reasoning_end_token_ids = list(reasoning.end)
            markers._natural_reasoning_end_token_ids = list(reasoning.natural_end)
        if "vllm_config" in takes:
            from vllm.config import VllmConfig

            config = VllmConfig()
            config.reasoning_config = markers
        return vllm_env.call(self._sampler_mod.Sampler, vllm_config=config, reasoning_config=markers,
                             max_num_reqs=max_num_reqs, vocab_size=vocab_size, device=self.device,
                             req_states=self.req_states)

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
        admit(rs, self._req_id(slot), len(prompt), tokens, self.max_model_len)
        vllm_env.call(self.sampler.add_request, req_idx=slot, prompt_len=len(prompt), sampling_params=sp)
        assert rs.req_id_to_index[self._req_id(slot)] == slot
        with unpinned_h2d(), host_uva(self._buffer_utils):
            rs.apply_staged_writes()
            self.sampler.apply_staged_writes()
        self.params[slot] = sp

    def remove_request(self, slot: int) -> None:
        if self._req_id(slot) not in self.req_states.req_id_to_index:  # (until 0.21 removing one is silent)
            raise KeyError(f"no request in slot {slot}")
        self.req_states.remove_request(self._req_id(slot))
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
                     pos: list[int]) -> dict:
        """`Sampler.apply_sampling_params`'s arguments by name, every release's (each takes its own)."""
        if not (logits.shape[0] == len(rows) == len(local_pos) == len(input_ids)):
            raise ValueError("one rows/local_pos/input_ids/pos entry per logits row")
        expanded, idx_mapping_np, positions = self._mapping(rows, pos)
        # Each request's sequence length this step is at most its last row's position + 1.
        last_pos = {slot: p for slot, p in zip(rows, pos)}
        upper = np.array([last_pos[int(s)] + 1 for s in idx_mapping_np], dtype=np.int32)
        # Model-runner dtypes: input_ids int32, positions int64, mappings and local pos int32.
        return dict(logits=logits, expanded_idx_mapping=expanded,
                    idx_mapping=torch.from_numpy(idx_mapping_np).to(self.device), idx_mapping_np=idx_mapping_np,
                    pos=positions, input_ids=torch.tensor(input_ids, dtype=torch.int32, device=self.device),
                    expanded_local_pos=torch.tensor(local_pos, dtype=torch.int32, device=self.device),
                    seq_lens_upper_bound_np=upper, skip_top_k_top_p=True)

    def apply_sampling_params(self, logits, rows: list[int], local_pos: list[int],
                              input_ids: list[int], pos: list[int]) -> torch.Tensor:
        args = self.sampler_args(logits, rows, local_pos, input_ids, pos)
        # The engine builds its sampler with num_speculative_steps + 1, up to which 0.18-0.21's
        # penalties count a row's earlier drafts: any length covering this step's drafts agrees.
        self.sampler.num_speculative_tokens = max(local_pos, default=0) + 1
        if self.keeps_logits_dtype:  # 0.26.0 processes the tensor it is given, in place
            args["logits"] = logits.clone()
        return vllm_env.call(self.sampler.apply_sampling_params, **args)

    def gumbel_sample(self, processed_logits, rows: list[int], pos: list[int]) -> torch.Tensor:
        """vLLM's own `gumbel_sample` of these processed logits, with the requests' seeds."""
        expanded, _, positions = self._mapping(rows, pos)
        states = self.sampler.sampling_states
        return vllm_env.call(self._sampler_mod.gumbel_sample, processed_logits, expanded, states.temperature.gpu,
                             states.seeds.gpu, positions, apply_temperature=False, is_drafting=False,
                             use_fp64=getattr(self.sampler, "use_fp64_gumbel", False))


def live_sampler(vocab_size: int, max_num_reqs: int, device="cpu", max_model_len: int = 256,
                 reasoning=None):
    """The installed vLLM's sampler behind the hot path's contract."""
    return LiveSampler(vocab_size, max_num_reqs, device, max_model_len, reasoning=reasoning)
