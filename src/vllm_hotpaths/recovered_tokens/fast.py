"""Split-vocabulary recovered-token sampling: many programs per draft position, one launch.

Upstream runs one program per draft position; with few positions (16 requests x 3 drafts) most
of the GPU idles while each program walks a 130k-lane vocabulary. Here a program owns one draft
position's slice of the vocabulary (`lanes_per_program` lanes, tiles of `block`; enough slices
to give every SM several programs). Each lane keeps its own running best across the tiles, and one
reduction at the end gives the slice's best (score, id); the position's last
program to finish (an atomic arrival count) picks the best slice (ties: the earlier slice, whose
ids are lower). No memset either: the counters are reset by the program that read them. The
winner is the same as a single pass over the whole vocabulary: highest score, lowest id on ties,
with NaN scores and lanes past V never winning.

Two exact variants, one per reference: `SplitVocabDivision` scores `residual / q` (vLLM 0.16.0)
with the same Triton division as the reference; `SplitVocabReciprocal` scores
`residual * (1 / q)` (vLLM 0.17.0 on) with the reciprocal correctly rounded in the kernel
(`div_rn`, the value `q.reciprocal()` gives), so no `inv_q` tensor is written and read back.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field

import torch
import triton
import triton.language as tl

from vllm_hotpaths.recovered_tokens import Tiles, check_inputs
from vllm_hotpaths.triton_launch import CHECKED_TRITON
from vllm_hotpaths.recovered_tokens.reference import (_contestants, _residual, _span, draft_pointer,
                                                      interpreted_bound)

# Tuned on an H100 (sweeps of block 512-4096, 2-10,000 programs per SM, 4/8 warps, 1-4 pipeline
# stages at the benchmark's shapes): fewer, longer programs wait on memory in series; more,
# shorter ones pay their fixed cost (index loads, arrival count) too often.
BLOCK = 512
PROGRAMS_PER_SM = 8
NUM_WARPS = 4


@triton.jit
def divide(residual, q):
    return residual / q


@triton.jit
def times_reciprocal(residual, q):
    return residual * tl.math.div_rn(1.0, q)


def _slice_program(out_ptr, best_ptr, best_id_ptr, arrived_ptr, cu_ptr, draft_ids_ptr, draft_probs_ptr,
                   target_ptr, q_ptr, vocab_size, lanes_per_program, num_slices, BLOCK: tl.constexpr,
                   SLICES: tl.constexpr, NO_DRAFT_PROBS: tl.constexpr, WIDE: tl.constexpr,
                   INTERPRETED_LANES: tl.constexpr):
    """One program per (request, draft position, vocabulary slice). SCORE, CONTESTANTS, SLICE_BEST
    and PICK are the variant's functions, bound as globals by `slice_kernel`."""
    req = tl.program_id(0)
    pos = tl.program_id(1)
    piece = tl.program_id(2)
    start, count = _span(cu_ptr, req)
    if pos >= count:
        return
    token = start + pos
    draft_id = tl.load(draft_ids_ptr + token)
    if WIDE:  # 64-bit offsets only where 32 bits overflow: they cost registers per lane
        token = token.to(tl.int64)
        req = req.to(tl.int64)
    row = token * vocab_size
    noise_row = req * vocab_size
    first_lane = piece * lanes_per_program
    # Each lane keeps its own best (score, id) across the tiles, a strict `>` keeping the lower
    # id; one reduction at the end. A reduction per tile would put a block-wide barrier between
    # one tile's loads and the next.
    lane_best = tl.full((BLOCK,), float("-inf"), tl.float32)
    lane_id = first_lane + tl.arange(0, BLOCK)
    # The bound: see `interpreted_bound` (chosen in place: the interpreter makes every assigned
    # value a tensor).
    for offset in range(0, INTERPRETED_LANES if INTERPRETED_LANES > 0 else lanes_per_program, BLOCK):
        lanes = first_lane + offset + tl.arange(0, BLOCK)
        inside = lanes < vocab_size
        residual = _residual(target_ptr, draft_probs_ptr, draft_id, row, lanes, inside, NO_DRAFT_PROBS)
        q = tl.load(q_ptr + noise_row + lanes, mask=inside, other=1.0)
        score = CONTESTANTS(SCORE(residual, q), inside)
        better = score > lane_best
        lane_best = tl.where(better, score, lane_best)
        lane_id = tl.where(better, lanes, lane_id)
    best, best_id = SLICE_BEST(lane_best, lane_id)
    base = token * num_slices
    tl.store(best_ptr + base + piece, best)
    tl.store(best_id_ptr + base + piece, best_id)
    # The last program of this position to finish picks the best slice: a barrier orders every
    # thread's stores before the release of the counter; the acquiring program reads past L1.
    tl.debug_barrier()
    if tl.atomic_add(arrived_ptr + token, 1, sem="acq_rel", scope="gpu") == num_slices - 1:
        PICK(out_ptr, best_ptr, best_id_ptr, token, base, num_slices, SLICES)
        tl.atomic_xchg(arrived_ptr + token, 0, sem="relaxed", scope="gpu")  # ready for the next call


@triton.jit
def lowest_best_id(lane_best, lane_id):
    """The slice's best score and, on ties, the lowest id among the lanes holding it (the lanes'
    ids are not in lane order once later tiles have won some lanes). All -inf: the first lane."""
    best = tl.max(lane_best, axis=0)
    return best, tl.min(tl.where(lane_best == best, lane_id, 2 ** 31 - 1), axis=0)


@triton.jit
def pick_first_best(out_ptr, best_ptr, best_id_ptr, token, base, num_slices, SLICES: tl.constexpr):
    slices = tl.arange(0, SLICES)
    best = tl.load(best_ptr + base + slices, mask=slices < num_slices, other=float("-inf"),
                   cache_modifier=".cg")
    winner = tl.argmax(best, axis=0)  # ties: the earliest slice, whose ids are lower
    tl.store(out_ptr + token, tl.load(best_id_ptr + base + winner, cache_modifier=".cg"))



_kernels: dict[type, object] = {}


def slice_kernel(kind: type):
    """`_slice_program` compiled with `kind`'s score, contestants, slice best and pick bound as
    globals. (Passed as constexpr arguments instead, jit functions crash Triton 3.6 whenever a
    compile hook is registered, as vLLM registers one: it cannot serialize them.)"""
    kernel = _kernels.get(kind)
    if kernel is None:
        scope = dict(globals(), SCORE=kind.score, CONTESTANTS=kind.contestants, SLICE_BEST=kind.slice_best,
                     PICK=kind.pick)
        program = types.FunctionType(_slice_program.__code__, scope)
        program.__annotations__ = _slice_program.__annotations__  # which parameters are constexpr
        kernel = _kernels[kind] = triton.jit(program)
    return kernel


_arrivals: dict[tuple, torch.Tensor] = {}


def _arrival_counters(device: torch.device, num_tokens: int) -> torch.Tensor:
    """Zeroed per-position counters, one set per device and stream, kept between calls (each
    call's last programs put them back to zero), so no call pays a memset."""
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    key = (str(device), stream)
    counters = _arrivals.get(key)
    if counters is None or counters.numel() < num_tokens:
        counters = _arrivals[key] = torch.zeros(max(num_tokens, 1024), dtype=torch.int32, device=device)
    return counters


_slice_bests: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}


def _slice_scratch(device: torch.device, num_tokens: int, slices: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each (position, slice)'s best score and id, [num_tokens, slices] float32 and int32, kept
    between calls per device and stream (grown to the most asked for): every program writes its
    own entry before the position's last program reads them, and the next call on that stream
    runs after this one. Two allocations fewer a call (on the GPU machine's host the four
    allocations of a call took 21-33 us: ci/gpu/recovered-host-cost.py)."""
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    key = (str(device), stream)
    held = _slice_bests.get(key)
    if held is None or held[0].numel() < num_tokens * slices:
        size = max(num_tokens * slices, 4096)
        held = _slice_bests[key] = (torch.empty(size, dtype=torch.float32, device=device),
                                    torch.empty(size, dtype=torch.int32, device=device))
    return tuple(t[:num_tokens * slices].view(num_tokens, slices) for t in held)


def _sm_count(device: torch.device) -> int:
    if device.type != "cuda":
        return 1
    return torch.cuda.get_device_properties(device).multi_processor_count


# Shapes whose launch plans an instance keeps (a decode step's shape changes with its batch and
# drafts; past this many, they are worked out again).
MAX_PLANS = 1024
TENSOR_ARGS = 9  # the split kernel's first parameters, its tensors
# Whether a plan launches its compiled kernel again itself (`LaunchPlan.launch`): only under the
# Triton whose `CompiledKernel.run` convention `triton_launch` was checked with.
RELAUNCH = triton.__version__.startswith(CHECKED_TRITON)


@dataclass(frozen=True)
class LaunchPlan:
    """A launch's grid, slicing, scratch and compile options at one shape and stream, kept by the
    instance (`SplitVocabDivision.plan`): on the H200 machine's host the layout arithmetic took
    10-15 us a call and the scratch 22-33 us with `out` (docs/recovered_tokens.md), against one
    dictionary lookup here. Its scratch views stay valid: the buffers behind them are replaced when
    they grow, never resized in place, and each call's last programs zero the counters it used."""

    kernel: object
    grid: tuple[int, int, int]
    lanes: int
    slices: int
    best: torch.Tensor
    best_id: torch.Tensor
    arrived: torch.Tensor
    options: dict
    stream: int  # the CUDA stream the plan is for (0 on the CPU)
    constexprs: tuple  # the kernel's constexpr arguments in order (none interpreted)
    compiled: dict = field(default_factory=dict)  # each tensor's (dtype, 16-byte aligned) -> compiled kernel

    def kind(self, args) -> tuple:
        """What Triton specializes these tensor arguments on: each one's dtype and 16-byte alignment."""
        return tuple((a.dtype, a.data_ptr() % 16 == 0) for a in args[:TENSOR_ARGS])

    def launch(self, *args) -> None:
        """`kernel[grid](*args, **options)`, `args` the kernel's parameters before its constexprs.
        Triton specializes a launch on each tensor's dtype and 16-byte alignment, on the integers
        and on the constexprs; the plan fixes the integers (vocabulary, lanes, slices) and the
        constexprs. So after the first launch of each kind of tensors, the kernel Triton compiled
        for it is launched again here without Triton's per-call binding, as Triton's own launch
        path launches it. Interpreted, or under another Triton than `CHECKED_TRITON`, every launch
        goes through `kernel[grid]`."""
        key = self.kind(args)
        compiled = self.compiled.get(key)
        if compiled is None:
            compiled = self.kernel[self.grid](*args, **self.options)
            if RELAUNCH and self.constexprs and hasattr(compiled, "run") and hasattr(compiled, "packed_metadata"):
                self.compiled[key] = compiled
            return
        every = (*args, *self.constexprs)
        runtime = triton.knobs.runtime
        compiled.run(*self.grid, self.stream, compiled.function, compiled.packed_metadata,
                     compiled.launch_metadata(self.grid, self.stream, *every), runtime.launch_enter_hook,
                     runtime.launch_exit_hook, *every)


class SplitVocabDivision:
    """Exact to `DivisionReference` (vLLM 0.16.0)."""

    score = divide
    contestants = _contestants
    slice_best = lowest_best_id
    pick = pick_first_best

    def __init__(self, device, tiles: Tiles | None = None):
        self.device = torch.device(device)
        self.tiles = tiles
        self.sms = _sm_count(self.device)
        self._plans: dict[tuple, LaunchPlan] = {}

    def _lanes_per_program(self, num_tokens: int, vocab: int) -> tuple[int, int]:
        if self.tiles is not None:
            return self.tiles.block, self.tiles.block * self.tiles.split
        blocks = triton.cdiv(vocab, BLOCK)
        wanted_slices = max(1, triton.cdiv(self.sms * PROGRAMS_PER_SM, num_tokens))
        return BLOCK, BLOCK * triton.cdiv(blocks, min(blocks, wanted_slices))

    def recover(self, max_spec_len, num_draft_tokens, cu_num_draft_tokens, draft_token_ids,
                draft_probs, target_probs, q):
        check_inputs(max_spec_len, num_draft_tokens, cu_num_draft_tokens, draft_token_ids,
                     draft_probs, target_probs, q)
        return self.launch(max_spec_len, num_draft_tokens, cu_num_draft_tokens, draft_token_ids, draft_probs,
                           target_probs, q)

    def launch(self, max_spec_len, num_draft_tokens, cu_num_draft_tokens, draft_token_ids,
               draft_probs, target_probs, q):
        """`recover` on inputs that `check_inputs` has passed (the patch checks them once, before
        it draws the noise)."""
        out = torch.empty_like(draft_token_ids)
        num_tokens, vocab = target_probs.shape
        if num_tokens == 0:
            return out
        plan = self.plan(len(num_draft_tokens), max_spec_len, num_tokens, vocab, draft_probs is None, target_probs)
        plan.launch(out, plan.best, plan.best_id, plan.arrived, cu_num_draft_tokens, draft_token_ids,
                    draft_pointer(draft_probs, target_probs), target_probs, q, vocab, plan.lanes, plan.slices)
        return out

    def plan(self, requests: int, max_spec_len: int, num_tokens: int, vocab: int, no_draft_probs: bool,
             target_probs: torch.Tensor) -> LaunchPlan:
        """What a launch at this shape needs besides its tensors, worked out once per shape and
        stream (`LaunchPlan`)."""
        device = target_probs.device
        stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
        key = (device, stream, requests, max_spec_len, num_tokens, vocab, no_draft_probs)
        plan = self._plans.get(key)
        if plan is None:
            if len(self._plans) >= MAX_PLANS:
                self._plans.clear()
            block, lanes = self._lanes_per_program(num_tokens, vocab)
            slices = self._slices(vocab, lanes)
            best, best_id = _slice_scratch(device, num_tokens, slices)
            options = dict(BLOCK=block, SLICES=triton.next_power_of_2(slices), NO_DRAFT_PROBS=no_draft_probs,
                           WIDE=max(num_tokens * max(vocab, slices), requests * vocab) >= 2 ** 31,
                           INTERPRETED_LANES=interpreted_bound(target_probs, lanes), num_warps=NUM_WARPS)
            kernel = slice_kernel(type(self))
            constexprs = tuple(options[p.name] for p in getattr(kernel, "params", ()) if p.is_constexpr)
            plan = self._plans[key] = LaunchPlan(kernel, (requests, max_spec_len, slices), lanes, slices, best,
                                                 best_id, _arrival_counters(device, num_tokens), options, stream,
                                                 constexprs)
        return plan

    @staticmethod
    def _slices(vocab: int, lanes: int) -> int:
        return triton.cdiv(vocab, lanes)


class SplitVocabReciprocal(SplitVocabDivision):
    """Exact to `ReciprocalReference` (vLLM 0.17.0 on)."""

    score = times_reciprocal
