"""Frozen references of vLLM's Model Runner v2 `Sampler.apply_sampling_params`: 0.22.0's
(`Sampler022`, below), then one subclass per release where what the properties compare changed,
each overriding the hooks its release changed: `Sampler023` (top-k/top-p left to sampling),
`Sampler024` (min tokens), `Sampler026` (no fp32 copy), `Sampler027` (the copy back) and
`Sampler028` (bad words on drafts, thinking forcing; through 0.33.0).

0.22.0: always a fresh fp32 copy of the logits, then, per logits row of request `r` (its slot):
1. logit bias: with allowed ids, every other lane becomes -inf (the allowed lanes keep their
   values); each (id, bias) adds `bias` to its lane; while `pos < len(prompt) + min_tokens`,
   the stop ids' lanes become -inf (min tokens needs stop ids).
2. penalties, unless all three are neutral: `counts` = the request's output tokens (those given
   at admission and appended since) plus the row's earlier speculative inputs (`input_ids` of
   the request's rows 1..local_pos); a lane seen in the prompt or counted gets the repetition
   penalty `x * (1/p)` if `x > 0` else `x * p`; then `x -= frequency * counts`,
   `x -= presence * (counts > 0)`.
3. bad words: a word whose all-but-last tokens end the request's history (its outputs, then
   `input_ids` of the request's rows 0..local_pos-1) bans its last token (-inf). A one-token
   word always bans.
4. temperature: rows with temperature other than 0 and 1 become `x / t`.
5. min_p: rows with min_p > 0: lanes below `max(x) + log(min_p)` become -inf.
6. top-k / top-p, only if some request of the batch has top_k (clamped to [1, V]) other than V
   or top_p other than 1; then every row: sorted ascending, lanes below the k-th largest -inf,
   then on the sorted row `softmax`, its running sum, and lanes whose running sum is <= 1 - p
   (never the last) -inf. A row without top-p in such a batch still loses lanes whose
   probability rounds to 0 under a batch's top-p pass (its p is 1: running sum <= 0).

Steps 2, 4 and 5 are Triton kernels, as upstream's (step 2: `penalties_mrv2`'s): on CUDA Triton's fp32 `/` and `log` are
approximate, so each device runs upstream's arithmetic (the interpreter on CPU). The vocabulary
size is a compile-time constant in them (a runtime argument upstream; the same lane arithmetic):
Triton 3.6's interpreter cannot loop to a runtime bound under NumPy >= 2.5. Step 6 states
upstream's PyTorch path (its CPU path, and CUDA below 8 rows); upstream runs a Triton top-k/top-p
kernel on CUDA from 8 rows, which this reference does not state.
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from vllm_hotpaths.logits_copy import InvalidSamplingInput, ReasoningMarkers, RequestParams
from vllm_hotpaths.penalties_mrv2.reference import penalize_rows_
from vllm_hotpaths.think_budget_mrv2.reference import forced_end_id

BLOCK = 1024


@triton.jit
def _temperature_kernel(logits_ptr, temperature_ptr, vocab_size: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    t = tl.load(temperature_ptr + row)
    if t == 0.0 or t == 1.0:
        return
    for first in range(0, vocab_size, BLOCK):
        lanes = first + tl.arange(0, BLOCK)
        inside = lanes < vocab_size
        x = tl.load(logits_ptr + row * vocab_size + lanes, mask=inside)
        tl.store(logits_ptr + row * vocab_size + lanes, x / t, mask=inside)


@triton.jit
def _min_p_kernel(logits_ptr, min_p_ptr, vocab_size: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    min_p = tl.load(min_p_ptr + row)
    if min_p == 0.0:
        return
    top = float("-inf")
    for first in range(0, vocab_size, BLOCK):
        lanes = first + tl.arange(0, BLOCK)
        x = tl.load(logits_ptr + row * vocab_size + lanes, mask=lanes < vocab_size, other=float("-inf"))
        top = tl.max(tl.maximum(x, top))
    threshold = top + tl.log(min_p)
    for first in range(0, vocab_size, BLOCK):
        lanes = first + tl.arange(0, BLOCK)
        inside = lanes < vocab_size
        x = tl.load(logits_ptr + row * vocab_size + lanes, mask=inside)
        tl.store(logits_ptr + row * vocab_size + lanes, tl.where(x < threshold, float("-inf"), x),
                 mask=inside)


class _Request:
    def __init__(self, prompt, output, params: RequestParams):
        self.prompt = list(prompt)
        self.output = list(output)
        self.params = params


def as_ints(values) -> list[int]:
    """A list of Python ints from a list or a NumPy array."""
    return values.tolist() if isinstance(values, np.ndarray) else list(values)


def check_rows(logits: torch.Tensor, rows, local_pos, input_ids, pos, occupied: np.ndarray,
               vocab: int) -> np.ndarray:
    """Raise InvalidSamplingInput naming the first thing that does not describe one batch;
    return `rows` as an int64 array. Vectorized, the common case in a few whole-array tests:
    this runs on every call of the fast path too."""
    def fail(message):
        raise InvalidSamplingInput(message)

    if logits.dim() != 2 or logits.shape[1] != vocab:
        fail(f"logits must be [num_rows, {vocab}], got {list(logits.shape)}")
    if logits.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        fail(f"logits must be float32, bfloat16 or float16, got {logits.dtype}")
    if logits.stride(1) != 1:
        fail("logits rows must be contiguous (stride 1 along the vocabulary)")
    n = logits.shape[0]
    for name, values in (("rows", rows), ("local_pos", local_pos), ("input_ids", input_ids), ("pos", pos)):
        if len(values) != n:
            fail(f"{name} has {len(values)} entries for {n} logits rows")
    rows, local_pos, input_ids = (np.asarray(a, dtype=np.int64) for a in (rows, local_pos, input_ids))
    if not n:
        return rows
    if rows.min() < 0 or rows.max() >= len(occupied) or not occupied[rows].all():
        inside = (rows >= 0) & (rows < len(occupied))
        i = int(np.flatnonzero(~inside | ~occupied[np.where(inside, rows, 0)])[0])
        fail(f"logits row {i} names slot {rows[i]}, which holds no request")
    same = rows[1:] == rows[:-1]  # row i + 1 continues row i's request
    expected = np.concatenate(([0], np.where(same, local_pos[:-1] + 1, 0)))
    if not np.array_equal(local_pos, expected):
        i = int(np.flatnonzero(local_pos != expected)[0])
        fail(f"logits row {i}: local_pos {local_pos[i]}, expected {expected[i]} (a request's rows "
             f"are consecutive and numbered from 0)")
    if np.bincount(rows[local_pos == 0], minlength=1).max() > 1:
        fail("a request's rows must be consecutive")
    if input_ids.min() < 0 or input_ids.max() >= vocab:
        i = int(np.flatnonzero((input_ids < 0) | (input_ids >= vocab))[0])
        fail(f"logits row {i}: input id {input_ids[i]} outside [0, {vocab})")
    return rows


class Sampler022:
    """vLLM 0.22.0 semantics (the module docstring). Its Model Runner v2 sampler has no thinking
    forcing: `reasoning` and thinking budgets are accepted and change nothing."""

    # Whether processed logits come back in the caller's dtype (0.26.0) rather than in fp32.
    keeps_logits_dtype = False
    _temperature = _temperature_kernel

    def __init__(self, vocab_size: int, max_num_reqs: int, device, reasoning: ReasoningMarkers | None = None):
        self.vocab_size = vocab_size
        self.max_num_reqs = max_num_reqs
        self.device = torch.device(device)
        self.reasoning = reasoning.checked(vocab_size) if reasoning is not None else None
        self.requests: dict[int, _Request] = {}
        self.occupied = np.zeros(max_num_reqs, dtype=bool)

    # -- the request table ----------------------------------------------------------------
    def add_request(self, slot: int, prompt, output, params: RequestParams) -> None:
        if not 0 <= slot < self.max_num_reqs:
            raise InvalidSamplingInput(f"slot {slot} outside [0, {self.max_num_reqs})")
        if slot in self.requests:
            raise InvalidSamplingInput(f"slot {slot} already holds a request")
        bad = [t for t in list(prompt) + list(output) if not 0 <= t < self.vocab_size]
        if bad:
            raise InvalidSamplingInput(f"prompt or output holds token ids outside [0, {self.vocab_size}): {bad}")
        self.requests[slot] = _Request(prompt, output, params.checked(self.vocab_size))
        self.occupied[slot] = True

    def remove_request(self, slot: int) -> None:
        if self.requests.pop(slot, None) is None:
            raise InvalidSamplingInput(f"slot {slot} holds no request")
        self.occupied[slot] = False

    def append_output(self, slot: int, tokens) -> None:
        if slot not in self.requests:
            raise InvalidSamplingInput(f"slot {slot} holds no request")
        bad = [t for t in tokens if not 0 <= t < self.vocab_size]
        if bad:
            raise InvalidSamplingInput(f"sampled token ids outside [0, {self.vocab_size}): {bad}")
        self.requests[slot].output.extend(tokens)

    # -- the sampler step -----------------------------------------------------------------
    def apply_sampling_params(self, logits: torch.Tensor, rows, local_pos, input_ids, pos) -> torch.Tensor:
        check_rows(logits, rows, local_pos, input_ids, pos, self.occupied, self.vocab_size)
        return self.process(logits, *map(as_ints, (rows, local_pos, input_ids, pos)))

    def process(self, logits, rows, local_pos, input_ids, pos) -> torch.Tensor:
        out = self._working_copy(logits)
        if not rows:
            return out
        reqs = [self.requests[s] for s in rows]
        self._logit_bias(out, reqs, pos)
        self._penalties(out, reqs, rows, local_pos, input_ids)
        self._bad_words(out, reqs, local_pos, input_ids)
        self._force_thinking_end(out, reqs, local_pos, input_ids)
        self._row_kernel(self._temperature, out, [r.params.temperature for r in reqs], (0.0, 1.0))
        self._row_kernel(_min_p_kernel, out, [r.params.min_p for r in reqs])
        return self._top_k_top_p(out, reqs, rows)

    def _logit_bias(self, out, reqs, pos):
        for i, r in enumerate(reqs):
            p = r.params
            if p.allowed_token_ids:
                allowed = torch.tensor(p.allowed_token_ids, device=out.device)
                kept = out[i, allowed]
                out[i] = float("-inf")
                out[i, allowed] = kept
            if p.logit_bias:
                self._add_bias(out, i, p.logit_bias)
            if p.min_tokens > 0 and p.stop_token_ids and self._before_min_tokens(pos[i], r):
                out[i, torch.tensor(p.stop_token_ids, device=out.device)] = float("-inf")

    @staticmethod
    def _working_copy(logits: torch.Tensor) -> torch.Tensor:
        """The tensor the steps write: a fresh fp32 copy of the caller's logits."""
        return torch.empty_like(logits, dtype=torch.float32).copy_(logits)

    @staticmethod
    def _add_bias(out, i: int, logit_bias) -> None:
        """Row `i`'s biased lanes plus their fp32 biases (ids distinct)."""
        ids = torch.tensor([t for t, _ in logit_bias], device=out.device)
        out[i, ids] = out[i, ids] + torch.tensor([b for _, b in logit_bias], dtype=torch.float32,
                                                 device=out.device)

    @staticmethod
    def _before_min_tokens(pos: int, r: _Request) -> bool:
        return pos < len(r.prompt) + r.params.min_tokens

    @staticmethod
    def _drafts_before(input_ids, first: int, i: int) -> list[int]:
        """The tokens that bad words see after the outputs, for row `i` of a request whose rows
        start at `first` (0.22.0: the inputs of rows first..i-1, so the last output again)."""
        return list(input_ids[first:i])

    @property
    def forces_thinking(self) -> bool:
        return False

    def _force_thinking_end(self, out, reqs, local_pos, input_ids) -> None:
        pass

    def _penalties(self, out, reqs, rows, local_pos, input_ids):
        def uses(p):
            return p.repetition_penalty != 1.0 or p.frequency_penalty != 0.0 or p.presence_penalty != 0.0

        if not any(uses(r.params) for r in reqs):
            return
        n, vocab = out.shape
        counts = np.zeros((n, vocab), dtype=np.int32)
        prompt = np.zeros((n, vocab), dtype=np.int8)
        for i, r in enumerate(reqs):
            if not uses(r.params):
                continue
            np.add.at(counts[i], np.array(r.output, dtype=np.int64), 1)
            first = i - local_pos[i]
            np.add.at(counts[i], np.array(input_ids[first + 1:i + 1], dtype=np.int64), 1)
            prompt[i, np.array(r.prompt, dtype=np.int64)] = 1
        self._penalize(out, counts, prompt, [(r.params.repetition_penalty, r.params.frequency_penalty,
                                              r.params.presence_penalty) for r in reqs])

    @staticmethod
    def _penalize(out, counts, prompt, penalties) -> None:
        """`penalties_mrv2`'s kernel over the fp32 rows (a row with all three neutral is left)."""
        penalize_rows_(out, counts, prompt, penalties)

    def _bad_words(self, out, reqs, local_pos, input_ids):
        for i, r in enumerate(reqs):
            if not r.params.bad_words:
                continue
            history = r.output + self._drafts_before(input_ids, i - local_pos[i], i)
            for word in r.params.bad_words:
                prefix = list(word[:-1])
                if len(prefix) > len(history):
                    continue
                if not prefix or history[len(history) - len(prefix):] == prefix:
                    out[i, word[-1]] = float("-inf")

    def _row_kernel(self, kernel, out, values, neutral=(0.0,)):
        if all(v in neutral for v in values):
            return  # the kernel would leave every row as it is
        kernel[(out.shape[0],)](out, torch.tensor(values, dtype=torch.float32, device=out.device),
                                out.shape[1], BLOCK=BLOCK)

    def _top_k_top_p(self, out, reqs, rows):
        vocab = out.shape[1]
        top_k = [r.params.top_k if 0 < r.params.top_k <= vocab else vocab for r in reqs]
        top_p = [r.params.top_p for r in reqs]
        do_k, do_p = any(k != vocab for k in top_k), any(p != 1.0 for p in top_p)
        if not (do_k or do_p):
            return out
        ordered, order = out.sort(dim=-1, descending=False)
        if do_k:
            kth = ordered.gather(1, torch.tensor([vocab - k for k in top_k], device=out.device)[:, None])
            ordered.masked_fill_(ordered < kth, float("-inf"))
        if do_p:
            running = torch.cumsum(ordered.softmax(dim=-1), dim=-1)
            cut = running <= 1 - torch.tensor(top_p, dtype=torch.float32, device=out.device)[:, None]
            cut[:, -1] = False
            ordered.masked_fill_(cut, float("-inf"))
        return out.scatter_(dim=-1, index=order, src=ordered)


class Sampler023(Sampler022):
    """vLLM 0.23.0's `apply_sampling_params(..., skip_top_k_top_p=True)`, the call its
    `Sampler.sample` makes from 0.23.0 on: top-k/top-p left out (step 6 of the module docstring).
    Upstream applies them while sampling, in `apply_top_k_top_p` before the Gumbel draw or, on
    CUDA, inside FlashInfer's sampler when some request uses top-k/top-p and none is greedy, has
    a seed or wants processed logprobs; neither is stated here (vLLM PR #42472)."""

    def _top_k_top_p(self, out, reqs, rows):
        return out


class Sampler024(Sampler023):
    """vLLM 0.24.0-0.25.1: min tokens count the token being sampled: the stop ids are banned
    while `pos + 1 < len(prompt) + min_tokens` (vLLM PR #46243). (0.25.0's int64 program ids and
    barriers in the kernels change no result.)"""

    @staticmethod
    def _before_min_tokens(pos: int, r: _Request) -> bool:
        return pos + 1 < len(r.prompt) + r.params.min_tokens


@triton.jit
def _to_float32_kernel(src_ptr, dst_ptr, vocab_size: tl.constexpr, BLOCK: tl.constexpr):
    # Each lane as upstream 0.26's kernels load it: `tl.load(...).to(tl.float32)`.
    row = tl.program_id(0)
    for first in range(0, vocab_size, BLOCK):
        lanes = first + tl.arange(0, BLOCK)
        inside = lanes < vocab_size
        x = tl.load(src_ptr + row * vocab_size + lanes, mask=inside)
        tl.store(dst_ptr + row * vocab_size + lanes, x.to(tl.float32), mask=inside)


@triton.jit
def _store_rows_kernel(src_ptr, dst_ptr, vocab_size: tl.constexpr, BLOCK: tl.constexpr):
    # fp32 lanes stored through a pointer of the logits' dtype, as upstream 0.26's kernels store
    # their fp32 results (the store converts, with each device's conversion).
    row = tl.program_id(0)
    for first in range(0, vocab_size, BLOCK):
        lanes = first + tl.arange(0, BLOCK)
        inside = lanes < vocab_size
        tl.store(dst_ptr + row * vocab_size + lanes, tl.load(src_ptr + row * vocab_size + lanes, mask=inside),
                 mask=inside)


@triton.jit
def _bias_in_dtype_kernel(logits_ptr, ids_ptr, bias_ptr, num_ids, BLOCK: tl.constexpr):
    # One row's biased lanes: loaded, upcast to fp32, plus the fp32 bias, stored back.
    lanes = tl.arange(0, BLOCK)
    inside = lanes < num_ids
    ids = tl.load(ids_ptr + lanes, mask=inside)
    bias = tl.load(bias_ptr + lanes, mask=inside)
    x = tl.load(logits_ptr + ids, mask=inside).to(tl.float32)
    tl.store(logits_ptr + ids, x + bias, mask=inside)


@triton.jit
def _temperature_in_dtype_kernel(logits_ptr, temperature_ptr, vocab_size: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    t = tl.load(temperature_ptr + row)
    if t == 0.0 or t == 1.0:
        return
    for first in range(0, vocab_size, BLOCK):
        lanes = first + tl.arange(0, BLOCK)
        inside = lanes < vocab_size
        x = tl.load(logits_ptr + row * vocab_size + lanes, mask=inside).to(tl.float32)
        tl.store(logits_ptr + row * vocab_size + lanes, x / t, mask=inside)


class Sampler026(Sampler024):
    """vLLM 0.26.0: no fp32 copy (vLLM PR #48641, reverted in 0.27.0). The steps run on the logits
    in their own dtype, upstream in place in the caller's tensor; here on a copy in that dtype
    (the contract: the caller's logits are never written), which comes back in that dtype. Each
    step that computes loads its lanes, upcasts them to fp32, computes as 0.24.0 does and stores
    the result back in the logits' dtype: a logit bias (the biased lanes), penalties (every lane
    of a penalized row) and temperature (every lane of a row with a temperature other than 0
    and 1). Masking steps (allowed ids, min tokens, bad words) write -inf or keep a lane as it is;
    min_p compares its lanes with an fp32 threshold from the row's largest logit taken in the
    logits' dtype, as upstream's kernel does. With fp32 logits this is 0.24.0's result.

    The conversions are Triton's, as upstream's are: compiled on CUDA a store rounds to nearest
    even; Triton's interpreter (the CPU) truncates fp32 to bf16."""

    keeps_logits_dtype = True

    @staticmethod
    def _working_copy(logits: torch.Tensor) -> torch.Tensor:
        return logits.clone(memory_format=torch.contiguous_format)

    @staticmethod
    def _add_bias(out, i: int, logit_bias) -> None:
        if out.dtype == torch.float32:
            return Sampler022._add_bias(out, i, logit_bias)
        ids = torch.tensor([t for t, _ in logit_bias], dtype=torch.int64, device=out.device)
        bias = torch.tensor([b for _, b in logit_bias], dtype=torch.float32, device=out.device)
        _bias_in_dtype_kernel[(1,)](out[i], ids, bias, len(logit_bias),
                                    BLOCK=triton.next_power_of_2(len(logit_bias)))

    @staticmethod
    def _penalize(out, counts, prompt, penalties) -> None:
        if out.dtype == torch.float32:
            return penalize_rows_(out, counts, prompt, penalties)
        # The rows upstream's kernel stores: a penalty off its neutral value in fp32.
        rows = [i for i, p in enumerate(penalties) if tuple(np.float32(p)) != (1.0, 0.0, 0.0)]
        if not rows:
            return
        vocab = out.shape[1]
        picked = out[rows].contiguous()
        wide = torch.empty_like(picked, dtype=torch.float32)
        _to_float32_kernel[(len(rows),)](picked, wide, vocab, BLOCK=BLOCK)
        penalize_rows_(wide, counts[rows], prompt[rows], [penalties[i] for i in rows])
        _store_rows_kernel[(len(rows),)](wide, picked, vocab, BLOCK=BLOCK)
        out[rows] = picked

    _temperature = _temperature_in_dtype_kernel


class Sampler027(Sampler024):
    """vLLM 0.27.0-0.27.1: the fp32 copy is back (vLLM PR #49033 reverts PR #48641), so the
    processed logits are 0.24.0's. Upstream also returns the caller's logits untouched when no
    request of the batch needs processing (`_requires_logits_processing`); this reference always
    processes, and that early return is the rule the fast path states, checked against it."""


class Sampler028(Sampler027):
    """vLLM 0.28.0-0.33.0's `apply_sampling_params(..., skip_top_k_top_p=True)`, always
    processing (upstream's cached per-request early return is the fast path's rule, checked
    against this). Against 0.27.0:
    - bad words: after the outputs come the row's draft tokens (`input_ids` of the request's
      rows 1..local_pos), not the last output again (vLLM PR #52311);
    - thinking budget (after bad words, before temperature), for a request with a budget when
      all three reasoning markers are known (vLLM PR #46727): over its tokens (prompt, outputs,
      then its draft tokens as above), if the last start marker begins after the last natural
      end marker and at least `budget` tokens follow it, the row's logit for the next token of
      the forced end marker is set to 1e9: its first token, or the one after the longest proper
      prefix of the end marker that the tokens end with.
    0.29.0-0.33.0 change nothing compared here: 0.29's stop-id restore applies to structured
    outputs only, 0.31's processors run in the same order with the budget after them, and 0.31's
    rule that a greedy request with only min_p/top_k/top_p needs no processing meets no request
    (`SamplingParams` resets those for greedy requests).
    """

    FORCED_LOGIT = 1e9

    @staticmethod
    def _drafts_before(input_ids, first: int, i: int) -> list[int]:
        return list(input_ids[first + 1:i + 1])

    @property
    def forces_thinking(self) -> bool:
        return self.reasoning is not None and self.reasoning.enabled

    def _force_thinking_end(self, out, reqs, local_pos, input_ids) -> None:
        if not self.forces_thinking:
            return
        markers = self.reasoning
        for i, r in enumerate(reqs):
            budget = r.params.thinking_token_budget
            if budget is None:
                continue
            tokens = r.prompt + r.output + self._drafts_before(input_ids, i - local_pos[i], i)
            forced = forced_end_id(tokens, tuple(markers.start), tuple(markers.end), tuple(markers.natural_end),
                                   budget)
            if forced is not None:
                out[i, forced] = self.FORCED_LOGIT
