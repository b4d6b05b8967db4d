"""Installs the fused sampling pass into Model Runner V2's `Sampler.sample`, vLLM 0.22 to 0.34,
with the release's own noise and copy rules (the reference in force there: `reference.SamplerPass*`).

`Sampler.add_request` also sets the slot's flag: the fused kernel covers the request
(`fast.fused_covers`: temperature and penalties only; no top-k/top-p, logit bias, allowed ids, min
tokens with stop ids, bad words, min_p or thinking budget). `Sampler.sample`, when every request of
the batch is flagged, runs `fast.fused_sample` (or, where `lazy_choice` allows it on a release whose
noise has a bound, the lazy pass that `pass_choice` picks per batch) on vLLM's own state: the row
tensors it is called with, the temperatures and seeds of `sampling_states`, the penalties, prompt
bitmask and output counts of `penalties_state`. It returns the ids and the processed logits where
`Sampler.__call__` reads them (a processed logprobs mode, and from 0.23 only when logprobs were
asked for), None elsewhere instead of a tensor nobody reads. From 0.27, a batch in which no request
needs processing (upstream's own flags) is sampled from the caller's logits, which come back as the
processed ones, as upstream returns them: by the lazy pass where it is chosen for the batch, else by
upstream's own pass (the fused one would read the logits as often, after more host work). Batches it
cannot vouch for go to the `sample` it replaced: a request it does not cover, parameters
`RequestParams` refuses, the fp64 noise option, a padded row (slot -1), logits other than
fp32/bf16/fp16 rows of unit stride (0.26, which processes the caller's dtype: fp32 only), a row
stride whose alignment class differs from the vocabulary's (the load layout would differ from
upstream's fp32 copy's, and with it which of two NaNs wins), and every batch of a sampler that is
not vLLM's `Sampler` itself (0.30's watermarking sampler subclasses it), holds custom logits
processors (0.31) or returns a sampling mask (0.28).

Penalty state (0.22 to 0.30, whose `PenaltiesState` is 0.22's line for line; from 0.31 upstream's
dense tables are kept, a slot's counts its own row there): `PenaltiesState` keeps `CompactCounts` tables in place of its dense ones
(`output_bin_counts` `[max_num_reqs, V]` int32 and `prompt_bin_mask`, 641,777,664 B at 1,024
requests and V = 151,936): no bytes until a penalized request is admitted, then a row per
penalized request, and none again once no slot holds one. `bincount` (admission),
`apply_penalties` (the batches upstream samples) and `post_update` (each step's sampled tokens)
run on those rows when handed the compact table, and as upstream's otherwise. Only penalized rows
are ever read, so the penalties are the same. vLLM 0.22 sizes its KV cache without the dense
tables (allocated before its profiling run, they count in neither the weights nor its peak), so
the rows come from the memory outside `gpu_memory_utilization` that upstream's tables hold
always, and only while penalized requests run. vLLM's start-up warm-up requests get none.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import sys
from contextlib import contextmanager

import numpy as np
import torch
from packaging.version import Version

from vllm_hotpaths import vllm_env
from vllm_hotpaths.logits_copy import InvalidSamplingInput
from vllm_hotpaths.logits_copy.patch import request_params
from vllm_hotpaths.sampler_mrv2.fast import fused_covers, fused_sample, penalize_in_place, row_parameters
from vllm_hotpaths.sampler_mrv2.lazy import lazy_sample
from vllm_hotpaths.sampler_mrv2.pass_choice import PassChoice
from vllm_hotpaths.sampler_mrv2.penalty_tables import CompactCounts

SAMPLER = "vllm.v1.worker.gpu.sample.sampler"
PENALTIES = "vllm.v1.worker.gpu.sample.penalties"
INPUT_BATCH = "vllm.v1.worker.gpu.input_batch"
PATCHED = ["Sampler.add_request", "Sampler.sample", "PenaltiesState.__init__", "PenaltiesState.add_request",
           "PenaltiesState.apply_staged_writes", "penalties.bincount", "penalties.apply_penalties", "post_update"]
UPSTREAM: dict[str, object] = {}  # vLLM's own Sampler methods, for the properties' unpatched side
logger = logging.getLogger("vllm.vllm_hotpaths")  # the plugin's logger (vLLM's own handler shows it)
LOADED = (torch.float32, torch.bfloat16, torch.float16)  # the kernel upcasts these as upstream's copy does
# vLLM's kernel warm-up at start-up (v1/worker/gpu/warmup.py) admits `max_num_seqs` requests with
# every penalty, ids "_warmup_{i}_": they get no rows (their tokens are discarded), or the tables
# would hold upstream's full size from start-up on.
WARMUP = "_warmup_"
# What a PenaltiesState built now holds: `penalty_tables`' kind inside it, else the default, which
# the plugin's `install` makes "compact".
_tables = {"kind": None, "default": "dense"}
_patched_class: dict[str, type] = {}  # "Sampler": the class whose methods the patch replaced


FIRST, LAST = (0, 22), (0, 34)  # the releases whose Model Runner V2 sampler this patch is written for
COMPACT_UNTIL = (0, 30)  # the last release whose PenaltiesState is 0.22's
# What the patch must know of the release it runs on (`configure`): its reference, its noise;
# and whether a batch may take the lazy pass (`lazy_choice`).
_release = {"reference": None, "compact": False, "lazy": False}
NATIVE_PROCESSORS = ("LogitBiasState", "PenaltiesState", "BadWordsState")
PROCESSED_MODES = ("processed_logprobs", "processed_logits")
SAMPLER_PASS, SAMPLER_PASSES = "VLLM_HOTPATHS_SAMPLER_PASS", ("auto", "fused")


# What the patch does from each release on (`vllm-hotpaths changes X Y` prints it).
PLUGIN_CHANGES = {
    "0.22.0": "the plugin's fused pass samples batches of temperature and penalties only; compact penalty tables",
    "0.23.0": "the fused pass writes the processed logits only where a processed logprobs mode asks for logprobs",
    "0.24.0": "the fused pass draws 0.24's noise, -log(-log1p(-u))",
    "0.26.0": "the fused pass samples fp32 logits only (0.26 processes bf16/fp16 in their dtype: upstream's)",
    "0.27.0": "a batch no request needs processing is sampled from the caller's logits, as upstream: by the lazy "
              "pass where it is chosen, else by upstream's pass (the fused one would read them as often)",
    "0.28.0": "requests with a thinking budget, and engines returning a sampling mask, go to upstream's pass",
    "0.30.0": "the watermarking sampler (a Sampler subclass) goes to upstream's pass",
    "0.31.0": "the fused pass draws murmur3 noise; upstream's dense penalty tables are kept (0.31's PenaltiesState "
              "differs); engines with custom logits processors go to upstream's pass",
    "0.34.0": "the fused and lazy passes go on as on 0.33 (0.34's sampler keeps its noise, copies and "
              "argmax ties); the penalty tables stay upstream's",
    "0.35.0": "the patch is not written for 0.35 or later: upstream's pass is kept",
}


def supports(version: str | None) -> bool:
    """0.22.x to 0.34.x: the sampler layouts this patch is written for."""
    return version is not None and FIRST <= Version(version).release[:2] <= LAST


def not_needed(version: str) -> str | None:
    return None if supports(version) else f"the patch is written for vLLM 0.22.x to 0.34.x, not {version}"


def compact_tables(version: str) -> bool:
    """Whether the patch keeps compact penalty tables on `version` (0.22 to 0.30)."""
    return supports(version) and Version(version).release[:2] <= COMPACT_UNTIL


def configure(version: str) -> None:
    """The release's reference (its noise, whether it samples unprocessed logits, whether it
    processes the caller's dtype) and table kind, for the patched calls."""
    from vllm_hotpaths import registry

    hotpath = registry.get("sampler_mrv2")
    _release["reference"] = registry.resolve(hotpath.references[hotpath.reference_version_for(version)])
    _release["compact"] = compact_tables(version)


def lazy_choice(enabled: bool) -> None:
    """Whether samplers may take the lazy pass (`pass_choice`) where the release's noise has a
    bound (0.24 on). Off until asked for: `install` asks (`sampler_pass_setting`)."""
    _release["lazy"] = enabled


def pass_choice(sampler) -> PassChoice | None:
    """The sampler's choice between the lazy and the fused pass, or None where every batch takes
    the fused one (the lazy pass is off, or the release's noise has no bound: 0.22, 0.23)."""
    reference = release_reference()
    if not (_release["lazy"] and (reference.NOISE_LOG1P or reference.NOISE_MURMUR3)):
        return None
    choice = sampler.__dict__.get("_hotpaths_choice")
    if choice is None:
        choice = sampler._hotpaths_choice = PassChoice()
    return choice


def release_reference():
    if _release["reference"] is None:
        configure(vllm_env.installed_version())
    return _release["reference"]


@contextmanager
def penalty_tables(kind: str):
    """PenaltiesStates built inside hold `kind` tables: "dense" (upstream's) or "compact"."""
    if kind not in ("dense", "compact"):
        raise ValueError(f"penalty tables are 'dense' or 'compact', not {kind!r}")
    before, _tables["kind"] = _tables["kind"], kind
    try:
        yield
    finally:
        _tables["kind"] = before


class EngineTables(CompactCounts):
    """A PenaltiesState's compact tables, with what the engine's calls need besides."""

    max_drafts = 0  # the sampler's `num_speculative_tokens` (`_bound_drafts`)
    admitted = False  # a request was admitted since the last `apply_staged_writes`


def table_of(penalties) -> EngineTables | None:
    """The compact tables a PenaltiesState holds, or None where it holds upstream's."""
    return getattr(penalties.output_bin_counts, "hotpaths_table", None)


def _publish(penalties, table: EngineTables) -> None:
    """Point the state's table attributes at the current compact tensors (they move as they grow)."""
    table.counts.hotpaths_table = table
    penalties.output_bin_counts, penalties.prompt_bin_mask = table.counts, table.prompt_bits


def covered(sampler, sp) -> bool:
    """The slot's flag: True where the fused kernel computes this request's whole pass."""
    if getattr(sp, "thinking_token_budget", None) is not None:  # 0.28: MRv2's thinking forcing
        return False
    try:
        params = request_params(sp).checked(sampler.sampling_states.vocab_size)
    except (InvalidSamplingInput, TypeError):
        return False
    return fused_covers(params, sampler.sampling_states.vocab_size, forces_thinking=False)


def plain_sampler(sampler) -> bool:
    """vLLM's own `Sampler` with only its own logits processors and no sampling mask to return: a
    subclass (0.30's watermarking sampler) or a custom processor (0.31) may change any row."""
    ok = sampler.__dict__.get("_hotpaths_plain")
    if ok is None:
        processors = getattr(sampler, "logits_processors", ())
        ok = sampler._hotpaths_plain = (type(sampler) is _patched_class.get("Sampler")
                                        and not getattr(sampler, "return_sampling_mask", False)
                                        and all(type(p).__name__ in NATIVE_PROCESSORS for p in processors))
    return ok


def samples_unprocessed(sampler, idx_mapping_np) -> bool:
    """From 0.27: no request of the batch needs processing, by upstream's own flags, so upstream
    samples the caller's logits and returns them as the processed ones."""
    if not release_reference().SAMPLES_UNPROCESSED:
        return False
    if hasattr(sampler, "_requires_logits_processing"):  # 0.27
        return not sampler._requires_logits_processing(idx_mapping_np)
    if not sampler.__dict__.get("_hotpaths_processing", True):  # no slot's flag is set
        return True
    return not sampler.needs_logits_processing[idx_mapping_np].any()


def loadable(sampler, logits) -> bool:
    """Logits whose loads the fused kernel lays out as upstream's fp32 copy does (module docstring)."""
    vocab = sampler.sampling_states.vocab_size
    dtypes = (torch.float32,) if release_reference().keeps_logits_dtype else LOADED
    return not (sampler.use_fp64_gumbel or logits.dim() != 2 or logits.shape[0] == 0 or logits.shape[1] != vocab
                or logits.dtype not in dtypes or logits.stride(1) != 1
                or (logits.stride(0) % 16 == 0) != (vocab % 16 == 0))


def fused_arguments(sampler, logits, expanded_idx_mapping, idx_mapping_np, pos, input_ids, expanded_local_pos,
                    raw: bool = False, write: bool = False) -> dict:
    """`fast.fused_sample`'s arguments for this batch, read from vLLM's own state. `raw`: upstream
    samples the caller's logits (`samples_unprocessed`); `write`: the processed logits are read."""
    penalties = sampler.penalties_state
    table = table_of(penalties)
    if table is not None:
        rows, counts, prompt_bits = table.row_of_device, table.counts, table.prompt_bits
    else:  # upstream's dense tables: a slot's row is the slot itself
        rows = sampler.__dict__.get("_hotpaths_slots")
        if rows is None:
            rows = sampler._hotpaths_slots = torch.arange(sampler.sampling_states.max_num_reqs, dtype=torch.int32,
                                                          device=logits.device)
        counts, prompt_bits = penalties.output_bin_counts, penalties.prompt_bin_mask
    source = logits
    if not raw and logits.device.type == "cpu" and logits.dtype != torch.float32:
        source = torch.empty_like(logits, dtype=torch.float32).copy_(logits)  # as fast.FusedSamplingPass.sample
    expanded = logits.shape[0] != idx_mapping_np.shape[0]
    states, reference = sampler.sampling_states, release_reference()
    return dict(
        logits=source, slots=expanded_idx_mapping, pos=pos, local_pos=expanded_local_pos, input_ids=input_ids,
        temperature=states.temperature.gpu, seeds=states.seeds.gpu, repetition=penalties.repetition_penalty.gpu,
        frequency=penalties.frequency_penalty.gpu, presence=penalties.presence_penalty.gpu, penalty_rows=rows,
        counts=counts, prompt_bits=prompt_bits, noise=(reference.NOISE_LOG1P, reference.NOISE_MURMUR3), raw=raw,
        penalized=bool(np.any(penalties.use_penalty[idx_mapping_np])),
        drafts=sampler.num_speculative_tokens if expanded else 0, write=write and not raw)


def reads_processed(sampler, return_logprobs: bool) -> bool:
    """Whether `Sampler.__call__` reads the processed logits `sample` returns: a processed mode
    (0.22: "processed_logprobs" whatever the batch; from 0.23 only where logprobs were asked for)."""
    return sampler.logprobs_mode in PROCESSED_MODES and return_logprobs


def fused_or_none(sampler, logits, expanded_idx_mapping, idx_mapping_np, pos, input_ids, expanded_local_pos,
                  return_logprobs: bool = True):
    """(ids, processed logits or None) through the fused kernel, or None where the batch is not
    one it vouches for."""
    flags = sampler.__dict__.get("_hotpaths_fused")
    if flags is None:
        return None
    raw = samples_unprocessed(sampler, idx_mapping_np)
    choice = pass_choice(sampler)
    lazy = choice is not None and choice.lazy_next(logits.shape[0])
    if raw and not lazy:
        # Upstream samples these logits as they are: the fused pass would read them as often, after
        # more host work. Decided first, so that handing the batch over costs little.
        return None
    if not plain_sampler(sampler) or not loadable(sampler, logits) or np.any(idx_mapping_np < 0) or \
            not flags[idx_mapping_np].all():
        return None
    arguments = fused_arguments(sampler, logits, expanded_idx_mapping, idx_mapping_np, pos, input_ids,
                                expanded_local_pos, raw, reads_processed(sampler, return_logprobs))
    if lazy:
        ids, processed, drawn = lazy_sample(**arguments)
        choice.lazy_done(drawn, logits.numel())
    else:
        ids, processed = fused_sample(**arguments)
    return ids, (logits if raw else processed)


def compile_variants(sampler, logits, expanded_idx_mapping, idx_mapping_np, pos, input_ids, expanded_local_pos) -> int:
    """On a sampler's first `sample` call (vLLM's start-up: its memory profiling, then its warm-up,
    whose requests take upstream's path and get no penalty rows: `SamplingParams.for_sampler_warmup`
    sets top-k, top-p and min_p), launch each of the patch's kernels once per variant this engine
    can meet, on the batch's first row, so that Triton compiles them at start-up and not on the
    first requests they serve: the fused kernel (and the lazy pass's, where a batch may take it:
    `pass_choice`; only the lazy pass samples the caller's logits) with and without penalties,
    without drafts and, where speculative decoding is on (the sampler's bound, vLLM's
    `num_speculative_steps + 1`, is then above 1), with the bound, the processed logits written as
    the logprobs mode asks; the gathering of a large penalized batch's parameters
    (`fast.row_parameters`); and with compact tables their kernels (`compile_table_kernels`). Their
    results are dropped. Returns the launches made (none on the CPU, where nothing is compiled)."""
    if sampler.__dict__.get("_hotpaths_compiled") is not None:
        return 0
    sampler._hotpaths_compiled = 0
    if logits.device.type != "cuda" or not loadable(sampler, logits):
        return 0
    try:
        _launch_variants(sampler, logits, expanded_idx_mapping, idx_mapping_np, pos, input_ids, expanded_local_pos)
    except Exception as error:  # noqa: BLE001 - a start-up optimization must never stop the engine
        logger.warning("vllm-hotpaths: sampler_mrv2's kernels were not compiled at start-up (%s: %s); they compile "
                       "on first use", type(error).__name__, error)
    return sampler._hotpaths_compiled


def _launch_variants(sampler, logits, expanded_idx_mapping, idx_mapping_np, pos, input_ids, expanded_local_pos):
    first = dict(fused_arguments(sampler, logits[:1], expanded_idx_mapping[:1], idx_mapping_np[:1], pos[:1],
                                 input_ids[:1], expanded_local_pos[:1]))
    bounds = [0] + ([sampler.num_speculative_tokens] if sampler.num_speculative_tokens > 1 else [])
    raws = (False, True) if release_reference().SAMPLES_UNPROCESSED else (False,)
    writes = {False, sampler.logprobs_mode in PROCESSED_MODES}
    for drafts in bounds:
        for penalized in (False, True):
            for raw in raws:
                for write in writes - ({True} if raw else set()):
                    for sample in (fused_sample, lazy_sample) if pass_choice(sampler) else (fused_sample,):
                        if raw and sample is fused_sample:  # such batches go to upstream (`fused_or_none`)
                            continue
                        sample(**{**first, "penalized": penalized, "drafts": drafts, "raw": raw, "write": write})
                        sampler._hotpaths_compiled += 1
    # A penalized batch of GATHER_MIN_ROWS rows or more gathers its parameters first; one row does not.
    row_parameters(*(first[name] for name in ("slots", "temperature", "seeds", "repetition", "frequency",
                                              "presence", "penalty_rows")))
    sampler._hotpaths_compiled += 1 + compile_table_kernels(sampler, first, bounds)


def compile_table_kernels(sampler, first: dict, bounds: list[int]) -> int:
    """The compact tables' kernels (a penalized request's admission, each step's sampled tokens,
    the penalties on the batches upstream samples), launched on a scratch table of one row with
    vLLM's own token, length and penalty tensors as arguments, nothing admitted or counted: the
    variants a penalized request will launch. None where the sampler keeps upstream's tables."""
    table = table_of(sampler.penalties_state)
    if table is None:
        return 0
    penalties, states = sampler.penalties_state, sampler.penalties_state.req_states
    scratch = CompactCounts(table.vocab_size, table.max_num_reqs, table.device)
    scratch.assign(0)
    slot = torch.zeros(1, dtype=torch.int32, device=table.device)
    prefill = states.prefill_len.gpu
    scratch.admit(slot, states.all_token_ids.gpu, states.prompt_len.gpu, torch.zeros_like(prefill), 1)
    launches = 1
    for width in sorted({max(bound, 1) for bound in bounds}):  # a step's sampled tokens per request
        scratch.count_sampled(slot, torch.zeros((1, width), dtype=torch.int64, device=table.device),
                              torch.zeros(1, dtype=torch.int32, device=table.device))
        launches += 1
    logits = torch.zeros((1, table.vocab_size), dtype=torch.float32, device=table.device)
    penalize_in_place(logits, slot, first["local_pos"], first["input_ids"], penalties.repetition_penalty.gpu,
                      penalties.frequency_penalty.gpu, penalties.presence_penalty.gpu, scratch,
                      drafts=sampler.num_speculative_tokens)
    return launches + 1


def _bound_drafts(sampler) -> None:
    """The bound of `apply_penalties`' draft loop over the compact rows: the sampler's own
    `num_speculative_tokens`, set before any call reaches it (the rejection sampler calls
    `apply_sampling_params` without `sample`)."""
    table = table_of(sampler.penalties_state)
    if table is not None:
        table.max_drafts = sampler.num_speculative_tokens


def _sampling_params(args, kwargs):
    """`Sampler.add_request`'s request parameters: its last argument (0.22 to 0.30 pass
    `prompt_len` before them, 0.31 does not)."""
    return kwargs["sampling_params"] if "sampling_params" in kwargs else args[-1]


def _install_sampler(sampler) -> None:
    replaced_add, replaced_sample = sampler.add_request, sampler.sample  # upstream's, or another patch's
    sample_args = inspect.signature(replaced_sample)
    positional = [p.name for p in sample_args.parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    keywords = {p.name for p in sample_args.parameters.values() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}

    def named(args: tuple, kwargs: dict) -> dict:
        """`sample`'s arguments by name, as `Signature.bind` names them (defaults not applied: a
        caller that leaves `return_logprobs` out gets the processed logits where a processed mode
        is set, as before). Binding costs 4.3 us a call against 0.6 us named here (timeit, 2-core
        CPU host, 0.28.0's signature: docs/sampler_mrv2.md). So a call whose positional arguments
        fit the signature's and whose keywords are the signature's, none given twice, is named
        directly; any other is bound (which raises the TypeError a wrong call gets)."""
        if len(args) > len(positional) or not kwargs.keys() <= keywords or \
                not kwargs.keys().isdisjoint(positional[:len(args)]):
            return sample_args.bind(*args, **kwargs).arguments
        return {**dict(zip(positional, args)), **kwargs}

    @functools.wraps(replaced_add)
    def add_request(self, req_idx, *args, **kwargs):
        out = replaced_add(self, req_idx, *args, **kwargs)
        flags = self.__dict__.get("_hotpaths_fused")
        if flags is None:
            flags = self._hotpaths_fused = np.zeros(self.sampling_states.max_num_reqs, dtype=bool)
        flags[req_idx] = covered(self, _sampling_params(args, kwargs))
        needs = getattr(self, "needs_logits_processing", None)  # 0.28 on: set only here, per slot
        if needs is not None:
            self._hotpaths_processing = bool(needs.any())
        _bound_drafts(self)
        return out

    @functools.wraps(replaced_sample)
    def sample(self, *args, **kwargs):
        arguments = named((self, *args), kwargs)
        batch = {name: arguments[name] for name in ("logits", "expanded_idx_mapping", "idx_mapping_np", "pos",
                                                    "input_ids", "expanded_local_pos")}
        compile_variants(self, **batch)
        fused = fused_or_none(self, **batch, return_logprobs=arguments.get("return_logprobs", True))
        if fused is not None:
            return fused
        _bound_drafts(self)
        return replaced_sample(self, *args, **kwargs)

    UPSTREAM.update(add_request=getattr(replaced_add, "hotpaths_upstream", replaced_add),
                    sample=getattr(replaced_sample, "hotpaths_upstream", replaced_sample))
    add_request.hotpaths_upstream, sample.hotpaths_upstream = UPSTREAM["add_request"], UPSTREAM["sample"]
    sampler.add_request, sampler.sample = add_request, sample
    _patched_class["Sampler"] = sampler


def _install_tables(penalties_module, input_batch_module) -> None:
    state = penalties_module.PenaltiesState
    upstream = dict(init=state.__init__, add=state.add_request, staged=state.apply_staged_writes,
                    bincount=penalties_module.bincount, apply_penalties=penalties_module.apply_penalties,
                    post_update=input_batch_module.post_update)
    post_update_args = inspect.signature(upstream["post_update"])

    def __init__(self, req_states):
        upstream["init"](self, req_states)
        if (_tables["kind"] or _tables["default"]) == "compact":  # dense ones dropped before vLLM profiles
            _publish(self, EngineTables(self.vocab_size, req_states.max_num_reqs, self.device))

    def add_request(self, req_idx, sampling_params):
        upstream["add"](self, req_idx, sampling_params)
        table = table_of(self)
        if table is not None:
            if self.use_penalty[req_idx] and not self.req_states.index_to_req_id.get(req_idx, "").startswith(WARMUP):
                table.assign(req_idx)
            else:
                table.remove(req_idx)
            table.admitted = True
            _publish(self, table)

    def apply_staged_writes(self):
        table = table_of(self)
        if table is not None and table.admitted:  # rows of requests gone since: free them
            table.release_vacated(self.req_states.index_to_req_id)
            table.admitted = False
            # A warm-up request, or a slot re-admitted without a penalty since, has no row to rebuild.
            self._new_penalties_reqs[:] = [slot for slot in self._new_penalties_reqs if table.row_of[slot] >= 0]
            _publish(self, table)
        upstream["staged"](self)

    def bincount(expanded_idx_mapping, all_token_ids, prompt_len, prefill_len, prompt_bin_mask, output_bin_counts,
                 max_prefill_len):
        table = getattr(output_bin_counts, "hotpaths_table", None)
        if table is None:
            return upstream["bincount"](expanded_idx_mapping, all_token_ids, prompt_len, prefill_len,
                                        prompt_bin_mask, output_bin_counts, max_prefill_len)
        table.admit(expanded_idx_mapping, all_token_ids, prompt_len, prefill_len, max_prefill_len)

    def apply_penalties(logits, expanded_idx_mapping, token_ids, expanded_local_pos, repetition_penalty,
                        frequency_penalty, presence_penalty, prompt_bin_mask, output_bin_counts):
        table = getattr(output_bin_counts, "hotpaths_table", None)
        if table is None:
            return upstream["apply_penalties"](logits, expanded_idx_mapping, token_ids, expanded_local_pos,
                                               repetition_penalty, frequency_penalty, presence_penalty,
                                               prompt_bin_mask, output_bin_counts)
        penalize_in_place(logits, expanded_idx_mapping, expanded_local_pos, token_ids, repetition_penalty,
                          frequency_penalty, presence_penalty, table, drafts=table.max_drafts)

    def post_update(*args, **kwargs):
        bound = post_update_args.bind(*args, **kwargs)
        table = getattr(bound.arguments["output_bin_counts"], "hotpaths_table", None)
        if table is None:
            return upstream["post_update"](*args, **kwargs)
        bound.arguments["output_bin_counts"] = None  # upstream's kernel then counts nothing
        upstream["post_update"](*bound.args, **bound.kwargs)
        table.count_sampled(bound.arguments["idx_mapping"], bound.arguments["sampled_tokens"],
                            bound.arguments["num_sampled"])

    for name, fn in (("init", __init__), ("add", add_request), ("staged", apply_staged_writes),
                     ("bincount", bincount), ("apply_penalties", apply_penalties), ("post_update", post_update)):
        fn.hotpaths_upstream = upstream[name]
    state.__init__, state.add_request, state.apply_staged_writes = __init__, add_request, apply_staged_writes
    penalties_module.bincount, penalties_module.apply_penalties = bincount, apply_penalties
    # The model runner imports `post_update` by name: every module already holding it gets ours.
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("vllm.v1.worker.gpu") and \
                getattr(module, "post_update", None) is upstream["post_update"]:
            module.post_update = post_update


def install(version: str | None = None) -> list[str]:
    """The plugin's entry: the patched methods, (0.22 to 0.30) compact tables in every
    PenaltiesState built from now on (the engine's, built after the plugin loads), and the lazy
    pass chosen per batch where the release's noise has a bound (`lazy_choice`) unless
    VLLM_HOTPATHS_SAMPLER_PASS=fused."""
    names = install_methods(version)
    _tables["default"] = "compact"
    lazy_choice(sampler_pass_setting() == "auto")
    return names


def sampler_pass_setting() -> str:
    """VLLM_HOTPATHS_SAMPLER_PASS: "auto" (default: the lazy or the fused pass per batch, where the
    release's noise has a bound) or "fused" (the fused pass alone). Another value is logged and
    taken as the default, so that a typo never stops vLLM from starting."""
    value = os.environ.get(SAMPLER_PASS, "auto").strip().lower() or "auto"
    if value not in SAMPLER_PASSES:
        logger.warning("vllm-hotpaths: %s=%s is none of %s; taking auto", SAMPLER_PASS, os.environ[SAMPLER_PASS],
                       ", ".join(SAMPLER_PASSES))
        return "auto"
    return value


def install_methods(version: str | None = None) -> list[str]:
    """The patched methods alone: a PenaltiesState holds compact tables only where built inside
    `penalty_tables("compact")` (the properties, which build upstream's side in the same process)."""
    version = version or vllm_env.installed_version()
    if not supports(version):
        raise RuntimeError(f"the sampler_mrv2 patch is written for vLLM 0.22.x to 0.34.x, not {version}")
    if not UPSTREAM:
        configure(version)
        _install_sampler(vllm_env.import_vllm(SAMPLER).Sampler)
        if _release["compact"]:
            _install_tables(vllm_env.import_vllm(PENALTIES), vllm_env.import_vllm(INPUT_BATCH))
    return list(PATCHED if _release["compact"] else PATCHED[:2])
