"""The one place that knows which implementations exist for each hot path.

Properties, the gate, the benchmarks and the plugin ask this module; nothing else imports an
implementation directly. Implementations are named by `"module:attr"` strings and imported on
first use, so listing the registry imports neither torch kernels nor vLLM.

Every implementation of a hot path is a factory with the signature its `Contract` documents,
returning an object with the hot path's methods.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

from packaging.version import InvalidVersion, Version


@dataclass(frozen=True)
class Contract:
    """What a candidate must provide; documented in the README, checked when `--impl` names one."""

    methods: tuple[str, ...]
    doc: str


@dataclass(frozen=True)
class HotPath:
    name: str
    upstream: str
    contract: Contract
    references: dict[str, str]  # vLLM version -> "module:attr"
    fast: dict[str, tuple[str, str]]  # fast name -> ("module:attr", vLLM version it must match)
    live: str  # adapter over the installed vLLM's own function
    live_kernels: str | None = None  # adapter over vLLM's compiled CUDA ops (no Python vLLM needed)
    bench: str | None = None  # "module:attr" of the benchmark function
    triton: bool = False  # Triton kernels: CPU cases need a TRITON_INTERPRET=1 process
    patch: str | None = None  # "module:attr": installs the fast path into the running vLLM (plugin)
    since: str | None = None  # first vLLM version that has the hot path (None: all checked ones)
    # What vLLM does instead before `since`: (first version, text) pairs, oldest first; the
    # gate's skip rows for those versions say it.
    before_since: tuple[tuple[str, str], ...] = ()
    # The testing half of the entry: "module:attr" of its `testing.laws.Checks` (case schema,
    # driver, comparison), which the generic laws in properties/ run.
    checks: str | None = None
    # The model runner whose code calls `upstream` (runners.RUNNERS): an engine on the other
    # runner never calls it, patched or not; "any": the engine core's scheduler, called by both.
    runner: str = "v1"
    # Host code only (no tensor, no kernel): its CPU rows validate it for an engine on any device.
    host_only: bool = False
    # A Model Runner V2 hot path: the registry name of the v1 hot path whose semantics it replaces
    # (the runner-change law compares that hot path's reference with this one's live code).
    v1_counterpart: str | None = None
    # (first release without `upstream`, what runs in its place there and which hot path of this
    # suite checks that): the gate's rows for those releases say it, as status `removed`.
    removed: tuple[str, str] | None = None

    @property
    def family(self) -> str:
        """The hot path as the v1 sampler names it: `penalties` for both runners' entries."""
        return self.v1_counterpart or self.name

    def exists_in(self, vllm_version: str) -> bool:
        return self.since is None or version_key(vllm_version) >= version_key(self.since)

    def absence(self, vllm_version: str) -> str:
        """Why `vllm_version` is not checked for this hot path, and what it does instead."""
        text = f"vLLM {vllm_version}: {self.name} is checked from {self.since}"
        earlier = [what for first, what in self.before_since if version_key(first) <= version_key(vllm_version)]
        return f"{text}: {earlier[-1]}" if earlier else text

    def removed_in(self, vllm_version: str | None) -> str | None:
        """What a release from `removed[0]` on runs instead of `upstream`, in one sentence; None
        where `vllm_version` still has it."""
        if self.removed is None or vllm_version is None or version_key(vllm_version) < version_key(self.removed[0]):
            return None
        runner = " with Model Runner v1" if self.runner == "v1" else ""
        return f"{self.name}: vLLM {self.removed[0]} removed {self.upstream}{runner}; {self.removed[1]}"

    def patch_needed(self, vllm_version: str) -> str | None:
        """None where the patch applies to `vllm_version`, else why not (its module's
        `not_needed(version)`): what the plugin logs instead of patching."""
        if not self.patch:
            return "no patch"
        module = importlib.import_module(self.patch.partition(":")[0])
        return module.not_needed(vllm_version) if hasattr(module, "not_needed") else None

    def held_back(self) -> str | None:
        """Why the plugin installs nothing for a patch that applies, or None (its module's
        `held_back()`: measured faster nowhere). The checks still run the patch."""
        if not self.patch:
            return None
        module = importlib.import_module(self.patch.partition(":")[0])
        return module.held_back() if hasattr(module, "held_back") else None

    def reference_version_for(self, vllm_version: str | None) -> str:
        """The newest frozen reference not newer than `vllm_version` (the newest if None)."""
        versions = sorted(self.references, key=version_key)
        if vllm_version is None:
            return versions[-1]
        eligible = [v for v in versions if version_key(v) <= version_key(vllm_version)]
        if not eligible:
            raise LookupError(
                f"hot path {self.name!r} has no reference for vLLM {vllm_version} "
                f"(references: {', '.join(versions)})"
            )
        return eligible[-1]

    def reference(self, vllm_version: str | None = None) -> Callable:
        version = self.reference_version_for(vllm_version)
        return resolve(_reference_overrides.get(self.name, {}).get(version, self.references[version]))

    def fast_for(self, vllm_version: str) -> Callable:
        """The shipped fast factory checked against the reference that `vllm_version` is checked
        against (what the plugin installs, whatever `--impl` candidates are under test)."""
        target = self.reference_version_for(vllm_version)
        for spec, reference_version in self.fast.values():  # shipped ones: never an --impl candidate
            if reference_version == target:
                return resolve(spec)
        raise LookupError(f"{self.name} has no fast variant for the vLLM {vllm_version} reference ({target})")

    def live_factory(self) -> Callable:
        """The adapter over the installed vLLM's own code, behind the contract (testing side)."""
        return resolve(self.live)

    def make_checks(self, draws=None):
        """The hot path's `testing.laws.Checks` (None where it has none yet), drawing its cases
        from `draws` (its module in `strategies`; without it, only what needs no draw works)."""
        return resolve(self.checks)(draws) if self.checks else None

    def candidates(self) -> list[tuple[str, Callable, str]]:
        """(name, factory, reference version) for every implementation under test."""
        if self.name in _impl_overrides:
            return [(f"{spec}@{version}", resolve(spec), version)
                    for spec, version in _impl_overrides[self.name]]
        return [(name, resolve(spec), version) for name, (spec, version) in self.fast.items()]


def version_key(version: str) -> Version:
    """Orders vLLM versions as pip does (0.22.0rc1 < 0.22.0 < 0.22.0.post1 < 0.22.1)."""
    return Version(version)


def resolve(spec: str) -> Callable:
    """Import `"module:attr"` (attr may be dotted)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"implementation must be given as module:attr, got {spec!r}")
    obj = importlib.import_module(module_name)
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"{module_name!r} has no attribute {attr!r} (from {spec!r})") from None
    return obj


PENALTIES_CONTRACT = Contract(
    methods=("output_tokens", "apply_all_penalties"),
    doc=(
        "factory(vocab_size: int, device, batch=None) -> object with\n"
        "  output_tokens(rows: list[list[int]]) -> int64 tensor [len(rows), max len] on device,\n"
        "      pad = vocab_size, every -1 mapped to the pad; raises InvalidTokenId (a ValueError)\n"
        "      for ids outside [-1, vocab_size]\n"
        "  apply_all_penalties(logits, prompt_tokens, presence, frequency, repetition, rows)\n"
        "      -> logits penalized in place (float32 [B, vocab_size])\n"
        "the checks call apply_all_penalties once per sampler step, as vLLM does, and\n"
        "output_tokens only on deep copies of the implementation, before and after it.\n"
        "batch: the InputBatch-like state (token_ids_cpu, num_prompt_tokens, num_tokens_no_spec,\n"
        "       req_output_token_ids, max_num_reqs, max_model_len); may be None."
    ),
)

THINK_BUDGET_CONTRACT = Contract(
    methods=("sync_batch", "has_tracked_requests", "update_state", "apply_to_logits", "states"),
    doc=(
        "factory(config: ThinkConfig, device) -> holder with vLLM's ThinkingBudgetStateHolder API\n"
        "  sync_batch(batch_update)   removed, added (index, params, prompt, output list), moved\n"
        "  has_tracked_requests() -> bool   asked before each sampler pass; False skips the pass\n"
        "  update_state(rows, spec_token_ids, repeat_indices=None)\n"
        "  apply_to_logits(logits, predict_bonus_token, spec_token_ids) -> logits (in place)\n"
        "  states() -> {row: normalized state} (think_budget.reference.normalized_states),\n"
        "      read from a deep copy of the holder (vLLM never calls it)\n"
        "raising InvalidThinkConfig for marker ids outside [0, vocab_size) and InvalidBudget\n"
        "for budgets the targeted version refuses, with the reference's messages."
    ),
)

SWAP_STATES_CONTRACT = Contract(
    methods=("swap_states", "condense"),
    doc=(
        "factory(moves) -> object with\n"
        "  swap_states(batch, i1, i2)  InputBatch.swap_states; raises InvalidRow (a ValueError) for\n"
        "      an empty row or an index outside the batch, before anything moves\n"
        "  condense(batch)             InputBatch.condense\n"
        "batch: vLLM's InputBatch or vllm_hotpaths.testing.batches.swap_states.BatchState (same attribute names);\n"
        "moves: has SWAP and UNIDIRECTIONAL, the directions recorded in batch_update_builder.moved."
    ),
)

RECOVERED_TOKENS_CONTRACT = Contract(
    methods=("recover",),
    doc=(
        "factory(device, tiles: recovered_tokens.Tiles | None = None) -> object with\n"
        "  recover(max_spec_len, num_draft_tokens: list[int], cu_num_draft_tokens, draft_token_ids,\n"
        "          draft_probs | None, target_probs, q) -> ids [num_tokens], draft_token_ids' dtype\n"
        "      vLLM's sample_recovered_tokens with the noise q [B, V] fp32 given; every id in\n"
        "      [0, V); raises InvalidRecoveryInput (a ValueError) for inconsistent shapes, dtypes,\n"
        "      devices or counts\n"
        "tiles: test-sized tiling (a candidate may ignore it; results must not depend on it)."
    ),
)

LOGITS_COPY_CONTRACT = Contract(
    methods=("add_request", "remove_request", "append_output", "apply_sampling_params"),
    doc=(
        "factory(vocab_size: int, max_num_reqs: int, device, reasoning=None) -> object with\n"
        "  (reasoning: logits_copy.ReasoningMarkers or None, the engine's reasoning config)\n"
        "  add_request(slot, prompt: list[int], output: list[int], params: logits_copy.RequestParams)\n"
        "  remove_request(slot)\n"
        "  append_output(slot, tokens: list[int])   sampled tokens join the request's outputs\n"
        "  apply_sampling_params(logits, rows, local_pos, input_ids, pos) -> processed logits\n"
        "      one entry per logits row (slot, place among the request's rows, token fed, its\n"
        "      position); equal bit for bit to the reference after upcasting to fp32; never\n"
        "      writes the caller's logits; raises InvalidSamplingInput (a ValueError) for\n"
        "      parameters or rows vLLM refuses, with the reference's messages."
    ),
)

PENALTIES_MRV2_CONTRACT = Contract(
    methods=("add_request", "remove_request", "apply_penalties", "commit"),
    doc=(
        "factory(vocab_size: int, max_num_reqs: int, max_model_len: int, device) -> object with\n"
        "  add_request(slot, prompt: list[int], resumed: list[int], penalties)  a request enters\n"
        "      free slot `slot`; resumed: its outputs from before a preemption (they count as\n"
        "      outputs); penalties: (repetition, frequency, presence)\n"
        "  remove_request(slot)\n"
        "  apply_penalties(logits, rows, local_pos, input_ids) -> logits penalized in place\n"
        "      (contiguous float32 [len(rows), vocab_size]); per logits row: its slot, its place\n"
        "      among its request's rows (0, then 1, 2, .. for drafts), the token fed there\n"
        "      (row j > 0: the j-th draft, -1 a placeholder draft)\n"
        "  commit(slots, sampled: list[list[int]])  after sampling: each request of the step\n"
        "      appends its accepted drafts and its recovered or bonus token (vLLM's post_update)\n"
        "raising penalties_mrv2.InvalidPenaltiesInput for slots, ids or layouts vLLM never hands over."
    ),
)

THINK_BUDGET_MRV2_CONTRACT = Contract(
    methods=("add_request", "remove_request", "apply", "commit"),
    doc=(
        "factory(config: think_budget_mrv2.ThinkSlotsConfig, device) -> object with\n"
        "  (config: start ids, forced end ids, natural end ids, vocab_size, max_num_reqs,\n"
        "  max_model_len; budgets are enforced only when all three id lists are non-empty)\n"
        "  add_request(slot, prompt: list[int], resumed: list[int], budget: int | None)  a request\n"
        "      enters free slot `slot`; resumed: its outputs from before a preemption; budget:\n"
        "      its thinking budget (None: none; clamped to 2**31 - 1)\n"
        "  remove_request(slot)\n"
        "  apply(logits, rows, local_pos, input_ids) -> logits forced in place (contiguous\n"
        "      float32 [len(rows), vocab_size]); per logits row: its slot, its place among its\n"
        "      request's rows (0, then 1, 2, .. for drafts), the token fed there (row j > 0: the\n"
        "      j-th draft, -1 a placeholder); a forced row gets 1e9 at one id, nothing else changes\n"
        "  commit(slots, sampled: list[list[int]])  after sampling: each request of the step\n"
        "      appends its accepted drafts and its recovered or bonus token (vLLM's post_update)\n"
        "raising think_budget_mrv2.InvalidThinkingInput for marker ids outside the vocabulary,\n"
        "negative budgets, slots in use or empty, ids or layouts vLLM never hands over."
    ),
)

# v1's thinking budget before the holder (read in each release's source: docs/release-changes.md).
THINK_BUDGET_BEFORE = (
    ("0.16.0", "no thinking budget: SamplingParams has no thinking_token_budget"),
    ("0.19.0", "budgets are enforced by a logits processor (ThinkingTokenBudgetLogitsProcessor, "
               "v1/sample/logits_processor/builtin.py), before the penalties and without speculative "
               "decoding; not checked by this suite"),
)

# Model Runner v1 and with it the v1 hot paths' upstream code: gone from 0.34.0 (its
# vllm/platforms/interface.py refuses VLLM_USE_V2_MODEL_RUNNER=0: "Model Runner V1 has been removed").
V1_REMOVED = "0.34.0"
# How a skipped property says its upstream code is gone (`HotPath.removed`): the gate's status `removed`.
REMOVED_MARK = "removed upstream: "


def removal(skip_reason: str) -> str | None:
    """What a skip reason says the release runs instead of removed code (pytest's report puts
    "Skipped: " before the reason), or None for any other skip."""
    reason = skip_reason.removeprefix("Skipped: ")
    return reason[len(REMOVED_MARK):] if reason.startswith(REMOVED_MARK) else None

# Model Runner V2 before 0.22: opt-in (VLLM_USE_V2_MODEL_RUNNER=1); engines run v1 by default.
MRV2_OPT_IN = "Model Runner V2 is opt-in (VLLM_USE_V2_MODEL_RUNNER=1; engines run Model Runner v1 by default)"

# Model Runner V2 and a thinking budget before 0.28 (read in each version's config and engine).
THINK_BUDGET_MRV2_BEFORE = (
    ("0.16.0", f"{MRV2_OPT_IN} and its code (v1/worker/gpu/) reads no thinking budget; budgets are "
               "enforced by Model Runner v1 (from 0.19)"),
    ("0.22.0", "Model Runner V2 refuses a thinking budget: an engine with a reasoning config runs on Model "
               "Runner v1, and forcing V2 (VLLM_USE_V2_MODEL_RUNNER=1) fails at start-up with 'does not yet "
               "support: reasoning budget enforcement' (config/vllm.py); budgets are enforced by v1's "
               "think_budget"),
    ("0.25.0", "Model Runner V2 warns at start-up that it does not support thinking_token_budget, and refuses "
               "each request that sets one with a ValueError (v1/engine/input_processor.py); budgets are "
               "enforced only on Model Runner v1 (VLLM_USE_V2_MODEL_RUNNER=0), by v1's think_budget"),
)

# Model Runner V2's draft verification before 0.22 (read in each release's spec_decode/).
REJECTION_MRV2_BEFORE = (
    ("0.16.0", f"{MRV2_OPT_IN}; it verifies drafts strictly: a draft is accepted while it equals the token "
               "the target sampled at its position (spec_decode/rejection_sample.py), no draft "
               "probabilities: another contract, not checked by this suite"),
    ("0.18.0", f"{MRV2_OPT_IN}; its default rejection is still strict (rejection_sample_method='strict'); "
               "the probabilistic one is opt-in, needs draft logits and was reworked in 0.19 and 0.20 "
               "(docs/release-changes.md); not checked by this suite, whose first reference is 0.21's "
               "default ('standard')"),
)

# Model Runner V2's sampling steps before 0.22.
LOGITS_COPY_BEFORE = (
    ("0.16.0", f"{MRV2_OPT_IN}; Sampler.sample copies every logit to fp32 before its steps, with no "
               "apply_sampling_params (sample/sampler.py); not checked by this suite"),
    ("0.18.0", f"{MRV2_OPT_IN}; its Sampler.apply_sampling_params makes the same fp32 copy; not checked by "
               "this suite: its top-k and top-p run inside it, from 8 rows through vLLM's Triton top-k/top-p "
               "kernel, which needs the GPU's compute-unit count (no CPU run), and the releases before 0.22 "
               "have no reference yet"),
)

REJECTION_MRV2_CONTRACT = Contract(
    methods=("rejection_sample",),
    doc=(
        "factory(device) -> object with\n"
        "  rejection_sample(target_logits, draft_logits, draft_sampled, cu_num_logits, pos, idx_mapping,\n"
        "                   expanded_idx_mapping, expanded_local_pos, temperature, seed,\n"
        "                   num_speculative_steps) -> (sampled, num_sampled)\n"
        "      vLLM's Model Runner V2 rejection_sample (default path), its arguments as upstream's:\n"
        "      fp32 target logits [num_logits, V], fp32 draft logits [max_num_reqs, steps, V] or\n"
        "      None (one-hot drafts), draft ids [num_logits] (-1: a placeholder draft, 0.25 on),\n"
        "      int32 cu_num_logits / idx_mapping / expanded_idx_mapping / expanded_local_pos,\n"
        "      int64 positions, per-slot fp32 temperatures (0: greedy) and int64 seeds (the noise);\n"
        "      returns int64 [num_reqs, steps + 1] ids (-1 past each request's count) and int32\n"
        "      [num_reqs] counts; raises rejection_mrv2.InvalidRejectionInput (a ValueError) for\n"
        "      shapes, dtypes, devices, ids or layouts vLLM never hands over."
    ),
)

SAMPLER_MRV2_CONTRACT = Contract(
    methods=("add_request", "remove_request", "append_output", "sample"),
    doc=(
        "factory(vocab_size: int, max_num_reqs: int, device, reasoning=None) -> object with\n"
        "  add_request / remove_request / append_output   as logits_copy's (the request table)\n"
        "  sample(logits, rows, local_pos, input_ids, pos, processed=True) -> (ids, processed)\n"
        "      vLLM's Model Runner V2 Sampler.sample for one step: int64 [num_rows] ids (greedy:\n"
        "      the argmax; else Gumbel-max with the release's noise of (seed, position, id);\n"
        "      lowest id on ties), bit for bit; processed: the processed logits, equal to the\n"
        "      reference's after upcasting to fp32 (None where `processed` is False); never writes\n"
        "      the caller's logits; raises sampler_mrv2.NotStated for a batch with top-k / top-p\n"
        "      and InvalidSamplingInput (a ValueError) as logits_copy does, and for a seed of -1\n"
        "      or outside int64."
    ),
)

CACHED_REQUEST_DATA_CONTRACT = Contract(
    methods=("make",),
    doc=(
        "factory() -> object with\n"
        "  make(scheduler, running, resumed, num_scheduled_tokens, spec_decode_tokens, req_to_new_blocks)\n"
        "      -> {field: value} for vLLM's CachedRequestData (cached_request_data.FIELDS; from 0.34\n"
        "      FIELDS_034, the resumed requests left out: vLLM schedules them as new ones), as\n"
        "      Scheduler._make_cached_request_data builds it: fresh lists, a set, a dict in batch order;\n"
        "      scheduler: use_pp, scheduler_config.async_scheduling, prev_step_scheduled_req_ids (to\n"
        "      0.33), use_v2_model_runner (0.24 to 0.33); requests: request_id, all_token_ids,\n"
        "      num_computed_tokens, num_output_tokens, num_output_placeholders; blocks: vLLM's\n"
        "      KVCacheBlocks (get_block_ids(allow_none=True)); raises\n"
        "      cached_request_data.InvalidSchedulerInput (a ValueError) for a request missing from a\n"
        "      table and, to 0.23, a resumed request scheduled in the previous step."
    ),
)

NEW_BLOCK_IDS_CONTRACT = Contract(
    methods=("held",),
    doc=(
        "factory() -> object with\n"
        "  held(allocated: list[int], zeroing: bool) -> list[int]\n"
        "      -> the block ids a scheduler's KV cache managers hold between steps after allocating\n"
        "      `allocated` (in order) over a run; `zeroing`: the model's KV cache needs zeroing (the\n"
        "      scheduler then takes the ids at every step)."
    ),
)

ALLOCATE_SLOTS_CONTRACT = Contract(
    methods=("decide",),
    doc=(
        "factory() -> object with\n"
        "  decide(step: allocate_slots.DecodeStep) -> allocate_slots.Decision\n"
        "      -> a decode step's KVCacheManager.allocate_slots: the blocks it takes for the request\n"
        "      (None: fewer free blocks than that, nothing taken) and the tokens whose full blocks it\n"
        "      caches (None: no new full block); raises ValueError for no new tokens. A fast path\n"
        "      also has method(upstream) -> the replacement of vLLM's method, which the patch installs."
    ),
)

REQUEST_OUTPUT_CONTRACT = Contract(
    methods=("apply",),
    doc=(
        "factory() -> object with\n"
        "  apply(step: request_output.OutputStep) -> request_output.Applied\n"
        "      -> Scheduler._update_request_with_output on one request: the tokens it keeps and\n"
        "      returns, the stop and status it sets, the request's output, computed, placeholder and\n"
        "      to-drop counts and its cached blocks after the call; raises AssertionError where the\n"
        "      placeholders would fall below zero. A fast path also has method(upstream, asynchronous)\n"
        "      -> the replacement of the AsyncScheduler's or the base Scheduler's method."
    ),
)

HOTPATHS: dict[str, HotPath] = {
    "penalties": HotPath(
        name="penalties",
        upstream="vllm.v1.sample.ops.penalties.apply_all_penalties",
        contract=PENALTIES_CONTRACT,
        references={"0.16.0": "vllm_hotpaths.penalties.reference:ReferencePenalties"},
        fast={"incremental": ("vllm_hotpaths.penalties.fast:IncrementalPenalties", "0.16.0")},
        live="vllm_hotpaths.testing.live.penalties:LivePenalties",
        live_kernels="vllm_hotpaths.testing.live.penalties:LiveRepetitionOp",
        bench="vllm_hotpaths.testing.bench.penalties:run",
        triton=True,
        patch="vllm_hotpaths.penalties.patch:install",
        checks="vllm_hotpaths.testing.cases.penalties:PenaltiesChecks",
        removed=(V1_REMOVED, "Model Runner V2's PenaltiesState runs in its place, checked by penalties_mrv2 and by sampler_mrv2's fused pass"),
    ),
    "think_budget": HotPath(
        name="think_budget",
        upstream="vllm.v1.sample.thinking_budget_state.ThinkingBudgetStateHolder",
        contract=THINK_BUDGET_CONTRACT,
        references={"0.21.0": "vllm_hotpaths.think_budget.reference:ThinkBudgetReference",
                    "0.23.0": "vllm_hotpaths.think_budget.reference:ThinkBudgetReference023",
                    "0.25.0": "vllm_hotpaths.think_budget.reference:ThinkBudgetReference025",
                    "0.26.0": "vllm_hotpaths.think_budget.reference:ThinkBudgetReference026",
                    "0.28.0": "vllm_hotpaths.think_budget.reference:ThinkBudgetReference028"},
        fast={"watermark@0.21.0": ("vllm_hotpaths.think_budget.fast:WatermarkThinkBudget", "0.21.0"),
              "watermark@0.23.0": ("vllm_hotpaths.think_budget.fast:WatermarkThinkBudget023", "0.23.0"),
              "watermark@0.25.0": ("vllm_hotpaths.think_budget.fast:WatermarkThinkBudget025", "0.25.0"),
              "watermark@0.26.0": ("vllm_hotpaths.think_budget.fast:WatermarkThinkBudget026", "0.26.0"),
              "watermark@0.28.0": ("vllm_hotpaths.think_budget.fast:WatermarkThinkBudget028", "0.28.0")},
        live="vllm_hotpaths.testing.live.think_budget:LiveThinkBudget",
        bench="vllm_hotpaths.testing.bench.think_budget:run",
        patch="vllm_hotpaths.think_budget.patch:install",
        checks="vllm_hotpaths.testing.cases.think_budget:ThinkBudgetChecks",
        since="0.21.0",  # the holder; before it, see THINK_BUDGET_BEFORE
        before_since=THINK_BUDGET_BEFORE,
        removed=(V1_REMOVED, "Model Runner V2's ThinkingBudgetState runs in its place, checked by think_budget_mrv2"),
    ),
    "swap_states": HotPath(
        name="swap_states",
        upstream="vllm.v1.worker.gpu_input_batch.InputBatch.swap_states / condense",
        contract=SWAP_STATES_CONTRACT,
        references={"0.16.0": "vllm_hotpaths.swap_states.reference:FullRowSwap",
                    "0.19.0": "vllm_hotpaths.swap_states.reference:MaxPrefixSwap",
                    "0.27.0": "vllm_hotpaths.swap_states.reference:MaxPrefixSwap033"},
        fast={"memmove@0.16.0": ("vllm_hotpaths.swap_states.fast:MemmoveSwap", "0.16.0"),
              "memmove@0.19.0": ("vllm_hotpaths.swap_states.fast:MemmoveSwap022", "0.19.0"),
              "memmove@0.27.0": ("vllm_hotpaths.swap_states.fast:MemmoveSwap033", "0.27.0")},
        live="vllm_hotpaths.testing.live.swap_states:live_batch",
        bench="vllm_hotpaths.testing.bench.swap_states:run",
        patch="vllm_hotpaths.swap_states.patch:install",
        checks="vllm_hotpaths.testing.cases.swap_states:SwapStatesChecks",
        removed=(V1_REMOVED, "Model Runner V2 keeps each request in a fixed slot and moves no rows: nothing runs in its place, nothing to check"),
    ),
    "recovered_tokens": HotPath(
        name="recovered_tokens",
        upstream="vllm.v1.sample.rejection_sampler.sample_recovered_tokens",
        contract=RECOVERED_TOKENS_CONTRACT,
        references={"0.16.0": "vllm_hotpaths.recovered_tokens.reference:DivisionReference",
                    "0.17.0": "vllm_hotpaths.recovered_tokens.reference:ReciprocalReference"},
        fast={"split-vocab@0.16.0": ("vllm_hotpaths.recovered_tokens.fast:SplitVocabDivision", "0.16.0"),
              "split-vocab@0.17.0": ("vllm_hotpaths.recovered_tokens.fast:SplitVocabReciprocal", "0.17.0")},
        live="vllm_hotpaths.testing.live.recovered_tokens:LiveRecovery",
        bench="vllm_hotpaths.testing.bench.recovered_tokens:run",
        triton=True,
        patch="vllm_hotpaths.recovered_tokens.patch:install",
        checks="vllm_hotpaths.testing.cases.recovered_tokens:RecoveredTokensChecks",
        removed=(V1_REMOVED, "Model Runner V2's rejection_sample resamples one token per request in its place, checked by rejection_mrv2"),
    ),
    "logits_copy": HotPath(
        name="logits_copy",
        upstream="vllm.v1.worker.gpu.sample.sampler.Sampler.apply_sampling_params",
        contract=LOGITS_COPY_CONTRACT,
        # Keyed at the releases whose sampler changed what the properties compare
        # (docs/logits_copy.md#references): 0.23 top-k/top-p left to sampling, 0.24 min tokens,
        # 0.26 no fp32 copy, 0.27 the copy back, 0.28 bad words on drafts and thinking forcing.
        references={"0.22.0": "vllm_hotpaths.logits_copy.reference:Sampler022",
                    "0.23.0": "vllm_hotpaths.logits_copy.reference:Sampler023",
                    "0.24.0": "vllm_hotpaths.logits_copy.reference:Sampler024",
                    "0.26.0": "vllm_hotpaths.logits_copy.reference:Sampler026",
                    "0.27.0": "vllm_hotpaths.logits_copy.reference:Sampler027",
                    "0.28.0": "vllm_hotpaths.logits_copy.reference:Sampler028"},
        fast={"skip-unprocessed@0.22.0": ("vllm_hotpaths.logits_copy.fast:SkipUnprocessed", "0.22.0"),
              "skip-unprocessed@0.23.0": ("vllm_hotpaths.logits_copy.fast:SkipUnprocessed023", "0.23.0"),
              "skip-unprocessed@0.24.0": ("vllm_hotpaths.logits_copy.fast:SkipUnprocessed024", "0.24.0"),
              "skip-unprocessed@0.26.0": ("vllm_hotpaths.logits_copy.fast:SkipUnprocessed026", "0.26.0"),
              "skip-unprocessed@0.27.0": ("vllm_hotpaths.logits_copy.fast:SkipUnprocessed027", "0.27.0"),
              "skip-unprocessed@0.28.0": ("vllm_hotpaths.logits_copy.fast:SkipUnprocessed028", "0.28.0")},
        live="vllm_hotpaths.testing.live.logits_copy:live_sampler",
        bench="vllm_hotpaths.testing.bench.logits_copy:run",
        triton=True,
        patch="vllm_hotpaths.logits_copy.patch:install",
        checks="vllm_hotpaths.testing.cases.logits_copy:LogitsCopyChecks",
        runner="mrv2",
        since="0.22.0",
        before_since=LOGITS_COPY_BEFORE,
    ),
    # Model Runner V2's penalties: the same upstream semantics as `penalties` on a different
    # state (slots, device-side counts), and on CUDA a different arithmetic. No fast path yet:
    # its rows are conformance and runner-change (v1's reference on the same request streams).
    "penalties_mrv2": HotPath(
        name="penalties_mrv2",
        upstream="vllm.v1.worker.gpu.sample.penalties.PenaltiesState + input_batch.post_update",
        contract=PENALTIES_MRV2_CONTRACT,
        references={"0.16.0": "vllm_hotpaths.penalties_mrv2.reference:SlotPenalties"},
        fast={},
        live="vllm_hotpaths.testing.live.penalties_mrv2:live_slot_penalties",
        triton=True,
        checks="vllm_hotpaths.testing.cases.penalties_mrv2:SlotPenaltiesChecks",
        runner="mrv2",
        # 0.16-0.21: Model Runner V2 is opt-in (VLLM_USE_V2_MODEL_RUNNER=1), its penalties the same.
        v1_counterpart="penalties",
    ),
    # Model Runner V2's thinking budget (PR #46727): stateless forcing from the last start and
    # natural end markers of each request's committed tokens plus the row's draft prefix. Its
    # reference is keyed 0.28.0 (the first release with it) and was checked against 0.33.0.
    "think_budget_mrv2": HotPath(
        name="think_budget_mrv2",
        upstream="vllm.v1.worker.gpu.sample.thinking_budget.ThinkingBudgetState + input_batch.post_update",
        contract=THINK_BUDGET_MRV2_CONTRACT,
        references={"0.28.0": "vllm_hotpaths.think_budget_mrv2.reference:SlotThinkBudget"},
        fast={},
        live="vllm_hotpaths.testing.live.think_budget_mrv2:live_slot_think_budget",
        triton=True,
        checks="vllm_hotpaths.testing.cases.think_budget_mrv2:SlotThinkBudgetChecks",
        runner="mrv2",
        since="0.28.0",  # 0.22 and 0.25 Model Runner V2 have no thinking budget
        before_since=THINK_BUDGET_MRV2_BEFORE,
        v1_counterpart="think_budget",
    ),
    # Model Runner V2's rejection sampling: accepts drafts and samples one token per request
    # (Gumbel-max with noise from the request's seed); replaces v1's recovered-token sampling.
    "rejection_mrv2": HotPath(
        name="rejection_mrv2",
        upstream="vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils.rejection_sample",
        contract=REJECTION_MRV2_CONTRACT,
        references={"0.21.0": "vllm_hotpaths.rejection_mrv2.reference:RejectionSampler021",
                    "0.22.0": "vllm_hotpaths.rejection_mrv2.reference:RejectionSampler022",
                    "0.24.0": "vllm_hotpaths.rejection_mrv2.reference:RejectionSampler024",
                    "0.25.0": "vllm_hotpaths.rejection_mrv2.reference:RejectionSampler025",
                    "0.28.0": "vllm_hotpaths.rejection_mrv2.reference:RejectionSampler028",
                    "0.31.0": "vllm_hotpaths.rejection_mrv2.reference:RejectionSampler031"},
        fast={},
        live="vllm_hotpaths.testing.live.rejection_mrv2:live_rejection_sampler",
        triton=True,
        checks="vllm_hotpaths.testing.cases.rejection_mrv2:RejectionChecks",
        runner="mrv2",
        since="0.21.0",  # the first release whose default path is this rejection
        before_since=REJECTION_MRV2_BEFORE,
        v1_counterpart="recovered_tokens",
    ),
    # Model Runner V2's sampling pass: apply_sampling_params then gumbel_sample, one token a row
    # (no top-k / top-p); its references pair logits_copy's processing with each release's noise.
    "sampler_mrv2": HotPath(
        name="sampler_mrv2",
        upstream="vllm.v1.worker.gpu.sample.sampler.Sampler.sample",
        contract=SAMPLER_MRV2_CONTRACT,
        references={"0.22.0": "vllm_hotpaths.sampler_mrv2.reference:SamplerPass022",
                    "0.24.0": "vllm_hotpaths.sampler_mrv2.reference:SamplerPass024",
                    "0.26.0": "vllm_hotpaths.sampler_mrv2.reference:SamplerPass026",
                    "0.27.0": "vllm_hotpaths.sampler_mrv2.reference:SamplerPass027",
                    "0.28.0": "vllm_hotpaths.sampler_mrv2.reference:SamplerPass028",
                    "0.31.0": "vllm_hotpaths.sampler_mrv2.reference:SamplerPass031"},
        fast={"fused@0.22.0": ("vllm_hotpaths.sampler_mrv2.fast:FusedSamplingPass", "0.22.0"),
              "fused@0.24.0": ("vllm_hotpaths.sampler_mrv2.fast:FusedSamplingPass024", "0.24.0"),
              "fused@0.26.0": ("vllm_hotpaths.sampler_mrv2.fast:FusedSamplingPass026", "0.26.0"),
              "fused@0.27.0": ("vllm_hotpaths.sampler_mrv2.fast:FusedSamplingPass027", "0.27.0"),
              "fused@0.28.0": ("vllm_hotpaths.sampler_mrv2.fast:FusedSamplingPass028", "0.28.0"),
              "fused@0.31.0": ("vllm_hotpaths.sampler_mrv2.fast:FusedSamplingPass031", "0.31.0"),
              # exact lazy Gumbel where the noise is bounded: Philox with log1p on fp32 copies (0.24)
              # and on the caller's logits too (0.27), murmur3 (0.31). 0.26 and 0.28 add to the
              # fused pass only processing the lazy kernel shares with it.
              "lazy@0.24.0": ("vllm_hotpaths.sampler_mrv2.lazy:LazySamplingPass024", "0.24.0"),
              "lazy@0.27.0": ("vllm_hotpaths.sampler_mrv2.lazy:LazySamplingPass027", "0.27.0"),
              "lazy@0.31.0": ("vllm_hotpaths.sampler_mrv2.lazy:LazySamplingPass031", "0.31.0")},
        live="vllm_hotpaths.testing.live.sampler_mrv2:live_sampling_pass",
        bench="vllm_hotpaths.testing.bench.sampler_mrv2:run",
        triton=True,
        patch="vllm_hotpaths.sampler_mrv2.patch:install",
        checks="vllm_hotpaths.testing.cases.sampler_mrv2:SamplingPassChecks",
        runner="mrv2",
        since="0.22.0",
        before_since=LOGITS_COPY_BEFORE,
    ),
    # The scheduler's per-step message about requests scheduled again: host bookkeeping over
    # the whole batch, the same for both model runners (the 0.24 reference reads which one).
    "cached_request_data": HotPath(
        name="cached_request_data",
        upstream="vllm.v1.core.sched.scheduler.Scheduler._make_cached_request_data",
        contract=CACHED_REQUEST_DATA_CONTRACT,
        references={"0.16.0": "vllm_hotpaths.cached_request_data.reference:CachedRequestData016",
                    "0.24.0": "vllm_hotpaths.cached_request_data.reference:CachedRequestData024",
                    "0.34.0": "vllm_hotpaths.cached_request_data.reference:CachedRequestData034"},
        fast={"columnwise@0.16.0": ("vllm_hotpaths.cached_request_data.fast:ColumnwiseCachedRequestData", "0.16.0"),
              "columnwise@0.24.0": ("vllm_hotpaths.cached_request_data.fast:ColumnwiseCachedRequestData024",
                                    "0.24.0"),
              "columnwise@0.34.0": ("vllm_hotpaths.cached_request_data.fast:ColumnwiseCachedRequestData034",
                                    "0.34.0")},
        live="vllm_hotpaths.testing.live.cached_request_data:LiveCachedRequestData",
        bench="vllm_hotpaths.testing.bench.cached_request_data:run",
        patch="vllm_hotpaths.cached_request_data.patch:install",
        checks="vllm_hotpaths.testing.cases.cached_request_data:CachedRequestDataChecks",
        runner="any",
        host_only=True,
    ),
    "allocate_slots": HotPath(
        name="allocate_slots",
        upstream="vllm.v1.core.kv_cache_manager.KVCacheManager.allocate_slots",
        contract=ALLOCATE_SLOTS_CONTRACT,
        references={"0.21.0": "vllm_hotpaths.allocate_slots.reference:DecodeAllocation021"},
        fast={"decode@0.21.0": ("vllm_hotpaths.allocate_slots.fast:DecodeAllocateSlots021", "0.21.0")},
        live="vllm_hotpaths.testing.live.allocate_slots:watched",
        bench="vllm_hotpaths.testing.bench.allocate_slots:run",
        patch="vllm_hotpaths.allocate_slots.patch:install",
        since="0.21.0",
        before_since=(("0.16.0", "allocate_slots of 0.16.0 to 0.20.2 has no reference yet"),),
        runner="any",
        host_only=True,
    ),
    "new_block_ids": HotPath(
        name="new_block_ids",
        upstream="vllm.v1.core.sched.scheduler.Scheduler.schedule",
        contract=NEW_BLOCK_IDS_CONTRACT,
        references={"0.16.0": "vllm_hotpaths.new_block_ids.reference:NotKept",
                    "0.17.1": "vllm_hotpaths.new_block_ids.reference:KeptUntilTaken",
                    "0.26.0": "vllm_hotpaths.new_block_ids.reference:NotKept"},
        fast={"drained@0.17.1": ("vllm_hotpaths.new_block_ids.fast:Drained", "0.17.1")},
        live="vllm_hotpaths.testing.live.new_block_ids:held",
        bench="vllm_hotpaths.testing.bench.new_block_ids:run",
        patch="vllm_hotpaths.new_block_ids.patch:install",
        runner="any",
        host_only=True,
    ),
    "request_output": HotPath(
        name="request_output",
        upstream="vllm.v1.core.sched.scheduler.Scheduler._update_request_with_output",
        contract=REQUEST_OUTPUT_CONTRACT,
        references={"0.16.0": "vllm_hotpaths.request_output.reference:Appended016",
                    "0.22.0": "vllm_hotpaths.request_output.reference:Appended022",
                    "0.27.0": "vllm_hotpaths.request_output.reference:Appended027",
                    "0.29.0": "vllm_hotpaths.request_output.reference:Appended029",
                    "0.33.0": "vllm_hotpaths.request_output.reference:Appended033"},
        fast={"fused@0.16.0": ("vllm_hotpaths.request_output.fast:Fused016", "0.16.0"),
              "fused@0.22.0": ("vllm_hotpaths.request_output.fast:Fused022", "0.22.0"),
              "fused@0.27.0": ("vllm_hotpaths.request_output.fast:Fused027", "0.27.0"),
              "fused@0.29.0": ("vllm_hotpaths.request_output.fast:Fused029", "0.29.0"),
              "fused@0.33.0": ("vllm_hotpaths.request_output.fast:Fused033", "0.33.0")},
        live="vllm_hotpaths.testing.live.request_output:watched",
        bench="vllm_hotpaths.testing.bench.request_output:run",
        patch="vllm_hotpaths.request_output.patch:install",
        runner="any",
        host_only=True,
    ),
}

# Set by `--impl name[@version]=module:attr`: the candidates replace the hot path's fast
# implementations, each checked against the reference of its version (default: the newest).
_impl_overrides: dict[str, list[tuple[str, str]]] = {}
# hot path -> {version: "module:attr"}: planted references checked in place of the frozen ones
_reference_overrides: dict[str, dict[str, str]] = {}


def implementations() -> dict[tuple[str, str, str], str]:
    """Every frozen upstream implementation, keyed by (hot path, model runner, vLLM version):
    ("penalties", "v1", "0.16.0") and ("penalties", "mrv2", "0.22.0") are two of them. The value
    is the registry entry's name (its reference for that version: `get(name).references`)."""
    return {(hp.family, hp.runner, version): hp.name for hp in HOTPATHS.values() for version in hp.references}


def for_runner(family: str, runner: str) -> HotPath:
    """The registry entry of hot path `family` (as the v1 sampler names it) on model runner `runner`."""
    found = [hp for hp in HOTPATHS.values() if hp.family == family and hp.runner == runner]
    if not found:
        known = sorted({(hp.family, hp.runner) for hp in HOTPATHS.values()})
        raise KeyError(f"no hot path {family!r} on runner {runner!r}; known: "
                       + ", ".join(f"{f} ({r})" for f, r in known))
    return found[0]


def contracts_text() -> str:
    """Every hot path's `--impl` contract, as docs/checking-your-patch.md shows it."""
    blocks = []
    for name, hotpath in HOTPATHS.items():
        versions = ", ".join(sorted(hotpath.references, key=version_key))
        blocks.append(f"{name} (references: {versions})\n" + "\n".join(
            "  " + line for line in hotpath.contract.doc.splitlines()))
    return "\n\n".join(blocks)


def get(name: str) -> HotPath:
    try:
        return HOTPATHS[name]
    except KeyError:
        raise KeyError(f"unknown hot path {name!r}; known: {', '.join(sorted(HOTPATHS))}") from None


def override_implementation(assignment: str) -> None:
    """Apply one `--impl hotpath[@version]=module:attr` option. `@version` may be any vLLM release:
    the candidate is checked against the reference in force there (the newest not newer)."""
    target, sep, spec = assignment.partition("=")
    if not sep:
        raise ValueError(f"--impl takes hotpath[@version]=module:attr, got {assignment!r}")
    name, _, version = target.partition("@")
    hotpath = get(name)
    if version:
        try:
            version_key(version)
        except InvalidVersion:
            raise ValueError(f"--impl {target}: {version!r} is not a vLLM version (such as 0.22.0)") from None
        try:
            version = hotpath.reference_version_for(version)
        except LookupError as err:
            raise ValueError(f"--impl {target}: {err}") from None
    factory = resolve(spec)  # fail early, with the import error, not in the middle of a property
    if not callable(factory):
        raise ValueError(f"{spec!r} is not callable: expected a factory {hotpath.contract.doc}")
    missing = [m for m in hotpath.contract.methods if isinstance(factory, type) and not hasattr(factory, m)]
    if missing:
        raise ValueError(f"{spec!r} lacks {', '.join(missing)}; the {name} contract is:\n"
                         f"{hotpath.contract.doc}")
    candidate = (spec, version or hotpath.reference_version_for(None))
    if candidate not in _impl_overrides.setdefault(name, []):  # two releases of one reference: one candidate
        _impl_overrides[name].append(candidate)


def override_reference(assignment: str) -> None:
    """Apply one `--reference hotpath@version=module:attr` option: the laws take that factory as
    the frozen reference of `version` (how the quality set shows conformance catching a wrong
    reference)."""
    target, sep, spec = assignment.partition("=")
    name, _, version = target.partition("@")
    if not sep or not version:
        raise ValueError(f"--reference takes hotpath@version=module:attr, got {assignment!r}")
    hotpath = get(name)
    if version not in hotpath.references:
        raise ValueError(f"{name} has no reference for vLLM {version} "
                         f"(references: {', '.join(sorted(hotpath.references, key=version_key))})")
    if not callable(resolve(spec)):
        raise ValueError(f"{spec!r} is not callable: expected a factory {hotpath.contract.doc}")
    _reference_overrides.setdefault(name, {})[version] = spec


def reference_overrides(name: str) -> dict[str, str]:
    """The planted references (`--reference`) of hot path `name`, by version."""
    return dict(_reference_overrides.get(name, {}))
