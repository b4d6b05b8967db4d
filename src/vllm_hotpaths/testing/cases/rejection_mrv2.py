"""Model Runner V2 rejection sampling cases: one step of a batch of speculative requests.

A `RejectionCase` is plain data (its repr is valid Python, its JSON is a fixture):
  vocab_size, num_speculative_steps, max_num_reqs (the slot table's size),
  requests: ((slot, drafts, temperature, seed, first_pos, boosted), ...) in batch order; each
      request has one logits row plus one per draft (-1: a placeholder draft), its rows at
      positions first_pos, first_pos + 1, ..; temperature 0.0 is a greedy request; `boosted`:
      how many of its first drafts get a target logit of 16 (likely accepted);
  draft_logits: False for one-hot drafts, True for draft logits [max_num_reqs, steps, V] (each
      draft's own lane set to 8 there, as a draft model would have sampled it);
  logits_seed, share: target (and draft) logits normal with scale 4 from the seed, a `share` of
      lanes then special values;
  edits, draft_edits: ((row, lane, value), ...) written last (rows and lanes taken modulo the
      shape; draft rows are slot * steps + step): specials, engineered near-ties;
  ties: requests whose first draft's target row is rewritten after the edits (one-hot drafts):
      the draft's lane and one other at `tie_logits(u)`, the rest -inf, so that its log
      probability equals log u of the acceptance test, bit for bit as the interpreted kernels
      compute them from 0.25 (a fp32 uniform); on CUDA, whose `log` is approximate, a near-tie.

`RejectionChecks` is what the generic laws run: conformance bit for bit on the sampled ids and
counts (on CPU, libdevice log1p in the interpreter is `vllm_hotpaths.libdevice_cpu`), and, through `V1OnRejection`, the
runner-change law: v1's acceptance rule and `sample_recovered_tokens` reference given the same
uniforms.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np
import torch

from vllm_hotpaths.testing.cases import note, seeded_logits
from vllm_hotpaths.testing.fixtures import OMITTED_AT_DEFAULT
from vllm_hotpaths.testing.laws import CaseLog, Checks, Side

SPECIAL_LOGITS = (0.0, -0.0, math.inf, -math.inf, math.nan, 1e-45, -1e-45, 3.4e38, -3.4e38, 1.0, -1.0)
BOOST, DRAFT_BOOST = 16.0, 8.0


@dataclass(frozen=True)
class RejectionCase:
    vocab_size: int
    num_speculative_steps: int
    max_num_reqs: int
    requests: tuple[tuple, ...]
    draft_logits: bool
    logits_seed: int
    share: float
    edits: tuple[tuple, ...] = ()
    draft_edits: tuple[tuple, ...] = ()
    ties: tuple[int, ...] = field(default=(), metadata={OMITTED_AT_DEFAULT: True})

    def implementations(self, *factories, device):
        return [f(device) for f in factories]

    def drafts(self) -> list[tuple]:
        return [tuple(r[1]) for r in self.requests]

    def has_placeholder(self) -> bool:
        return any(-1 in d for d in self.drafts())

    def random_requests(self) -> list[tuple]:
        return [r for r in self.requests if r[2] != 0.0]

    def inputs(self, device) -> tuple:
        """`rejection_sample`'s arguments, on `device`."""
        steps, vocab = self.num_speculative_steps, self.vocab_size
        ids, pos, rows, places, cu = [], [], [], [], [0]
        for slot, drafts, _, _, first_pos, _ in self.requests:
            for j, token in enumerate((0, *drafts)):
                ids.append(token)
                pos.append(first_pos + j)
                rows.append(slot)
                places.append(j)
            cu.append(len(ids))
        target = seeded_logits(len(ids), vocab, self.logits_seed, self.share, (), SPECIAL_LOGITS)
        draft = seeded_logits(self.max_num_reqs * steps, vocab, self.logits_seed + 1, self.share, (), SPECIAL_LOGITS)
        for r, (slot, drafts, _, _, _, boosted) in enumerate(self.requests):
            for j, token in enumerate(drafts):
                if token >= 0:
                    if j < boosted:
                        target[cu[r] + j, token] = BOOST
                    draft[slot * steps + j, token] = DRAFT_BOOST
        _edit(target, self.edits)
        _edit(draft, self.draft_edits)
        for r in self.ties:
            slot, drafts, _, request_seed, first_pos, _ = self.requests[r]
            if vocab > 1 and drafts and drafts[0] >= 0 and not self.draft_logits:
                u = _acceptance_uniform(request_seed, first_pos)
                target[cu[r]] = -np.inf
                target[cu[r], drafts[0]], target[cu[r], (drafts[0] + 1) % vocab] = tie_logits(u)
        temperature = np.zeros(self.max_num_reqs, dtype=np.float32)
        seed = np.zeros(self.max_num_reqs, dtype=np.int64)
        for slot, _, temp, request_seed, _, _ in self.requests:
            temperature[slot], seed[slot] = temp, request_seed
        on = lambda values, dtype: torch.tensor(values, dtype=dtype, device=device)  # noqa: E731
        draft_logits = torch.from_numpy(draft).reshape(self.max_num_reqs, steps, vocab).to(device) \
            if self.draft_logits else None
        return (torch.from_numpy(target).to(device), draft_logits, on(ids, torch.int32), on(cu, torch.int32),
                on(pos, torch.int64), on([r[0] for r in self.requests], torch.int32), on(rows, torch.int32),
                on(places, torch.int32), torch.from_numpy(temperature).to(device), torch.from_numpy(seed).to(device),
                steps)


def _acceptance_uniform(seed: int, pos: int) -> np.float32:
    """The fp32 acceptance uniform (0.25 on) of one row, drawn by the reference's kernel where
    this process runs Triton (interpreted on CPU tensors, else compiled on the GPU: the same
    integer-hashed value)."""
    from vllm_hotpaths.rejection_mrv2.reference import RejectionSampler025, uniforms

    compiled = os.environ.get("TRITON_INTERPRET") != "1" and torch.cuda.is_available()
    on = lambda value: torch.tensor([value], dtype=torch.int64, device="cuda" if compiled else "cpu")  # noqa: E731
    return np.float32(uniforms(on(seed), on(pos), 1, RejectionSampler025)[0].item())


# The kernels' floor of the fp32 acceptance uniform (0.25 on).
ACCEPT_FLOOR = np.float32(4.6566127342e-10)
# The other lane's logit: each gives the draft's log probability other fp32 steps, so one of them
# usually meets log(u) exactly.
TIE_PARTNERS = (0.0, 1.0, 0.5, -1.0, 3.0, 0.25, -5.0, 7.0)


def tie_log_prob(a: np.float32, c: np.float32) -> np.float32:
    """The kernels' log probability (fp32, as NumPy computes it in the interpreter) of a lane at
    logit `a` in a row whose only other finite lane is at `c`."""
    top = max(a, c)
    with np.errstate(over="ignore"):
        total = np.exp(a - top) + np.exp(c - top)
        return a - (top + np.log(total * np.exp(top - top)))


def tie_logits(u: np.float32) -> tuple[np.float32, np.float32]:
    """Logits (the draft's lane, the other lane) whose `tie_log_prob` equals log(u) (u floored
    at 4.66e-10 first, as the kernels do): for each partner in turn, bisection, then the
    neighbours; the closest found where none is exact."""
    f = np.float32
    target = np.log(max(f(u), ACCEPT_FLOOR))
    best = None
    for c in map(f, TIE_PARTNERS):
        lo, hi = c - f(64), c + f(64)  # tie_log_prob(lo) < target <= tie_log_prob(hi) = 0
        while np.nextafter(lo, hi) != hi:
            mid = f((np.float64(lo) + np.float64(hi)) / 2)
            if mid in (lo, hi):
                break
            lo, hi = (mid, hi) if tie_log_prob(mid, c) < target else (lo, mid)
        candidates = [hi, *(np.nextafter(hi, hi + f(step)) for step in (-1, 1))]
        for a in candidates:
            gap = abs(np.float64(tie_log_prob(a, c)) - np.float64(target))
            if best is None or gap < best[0]:
                best = (gap, a, c)
        if best[0] == 0:
            break
    return best[1], best[2]


def _edit(values: np.ndarray, edits) -> None:
    rows, lanes = values.shape
    for row, lane, value in edits:
        if rows:
            values[row % rows, lane % lanes] = value


def draft_outcomes(case: RejectionCase, sampler) -> list[list[bool | None]]:
    """Per request, each draft's acceptance test on its own (as if every earlier draft had been
    accepted) under reference class `sampler`'s uniforms, in fp64: True, False, or None where fp64
    cannot call it for the kernels' fp32 (within 1e-4 of the threshold, NaN, or a row of -inf).
    Reach statistics only: the laws compare the kernels themselves."""
    from vllm_hotpaths.testing.ledger import _row_uniforms

    target, draft = (None if t is None else t.double().numpy() for t in case.inputs("cpu")[:2])
    target_lse = _logsumexp(target)
    outcomes = []
    random_rows = [start + j for start, (_, drafts, temp, *_) in zip(_starts(case), case.requests)
                   if temp != 0.0 for j in range(len(drafts))]
    accept = dict(zip(random_rows, _row_uniforms(case, random_rows, sampler)[0].tolist())) if random_rows else {}
    for start, (slot, drafts, temp, *_) in zip(_starts(case), case.requests):
        found = []
        for j, token in enumerate(drafts):
            row = target[start + j]
            if token < 0 or np.isnan(row).any():
                found.append(False if token < 0 and sampler.PLACEHOLDERS else None)
                continue
            if temp == 0.0:
                found.append(bool(np.argmax(row) == token))
                continue
            with np.errstate(all="ignore"):
                t_lp = row[token] - target_lse[start + j]
            d_lp = 0.0
            if draft is not None:
                d_row = draft[slot, j] / (temp if sampler.DRAFT_OVER_TEMP else 1.0)
                with np.errstate(all="ignore"):
                    d_lp = d_row[token] - _logsumexp(d_row[None])[0]
            with np.errstate(all="ignore"):
                margin = t_lp - (math.log(max(accept[start + j], 4.6566127342e-10)) + d_lp)
            found.append(None if not np.isfinite(target_lse[start + j]) or np.isnan(margin) or abs(margin) < 1e-4
                         else bool(margin > 0))
        outcomes.append(found)
    return outcomes


def _starts(case: RejectionCase) -> list[int]:
    starts, row = [], 0
    for request in case.requests:
        starts.append(row)
        row += 1 + len(request[1])
    return starts


def _finite_lse(row: torch.Tensor) -> bool:
    """A row whose log-sum-exp is finite: no NaN, no +inf, some finite logit."""
    return bool(torch.isfinite(row).any() and not row.isnan().any() and not (row == math.inf).any())


def _logsumexp(rows: np.ndarray) -> np.ndarray:
    top = rows.max(axis=-1)
    safe = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(all="ignore"):
        return safe + np.log(np.exp(rows - safe[..., None]).sum(axis=-1))


def sample(impl, case: RejectionCase, device):
    """(sampled, num_sampled), or the InvalidRejectionInput raised."""
    from vllm_hotpaths.rejection_mrv2 import InvalidRejectionInput

    try:
        return impl.rejection_sample(*case.inputs(device))
    except InvalidRejectionInput as err:
        return err


def assert_same_samples(case: RejectionCase, expected: Side, actual: Side, device) -> None:
    """`actual`'s accepted counts and sampled ids == `expected`'s, bit for bit (or both refuse)."""
    first, second = case.implementations(expected.factory, actual.factory, device=device)
    want, got = sample(first, case, device), sample(second, case, device)
    pair = f"{actual.label} vs {expected.label}"
    if isinstance(want, Exception) or isinstance(got, Exception):
        if type(want) is not type(got) or str(want) != str(got):
            raise AssertionError(f"{pair}: refused differently: {got!r} vs {want!r}")
        note("refused alike")
        return
    (want_ids, want_counts), (got_ids, got_counts) = want, got
    for name, a, e in (("num_sampled", got_counts, want_counts), ("sampled", got_ids, want_ids)):
        if a.dtype != e.dtype or a.shape != e.shape or a.device.type != e.device.type:
            raise AssertionError(f"{pair}: {name} is {a.dtype} {list(a.shape)} on {a.device}, expected "
                                 f"{e.dtype} {list(e.shape)} on {e.device}")
    if not torch.equal(got_counts, want_counts):
        raise AssertionError(f"{pair}: accepted counts differ: num_sampled {got_counts.tolist()}, expected "
                             f"{want_counts.tolist()} (sampled {got_ids.tolist()} vs {want_ids.tolist()})")
    if not torch.equal(got_ids, want_ids):
        raise AssertionError(f"{pair}: sampled ids differ: {got_ids.tolist()}, expected {want_ids.tolist()} "
                             f"(num_sampled {got_counts.tolist()})")


class RejectionChecks(Checks):
    """Accepted counts and sampled ids bit for bit, on each device (vLLM's kernels interpreted on
    CPU, compiled on CUDA)."""

    hotpath = "rejection_mrv2"
    case_type = RejectionCase
    boundaries = ("greedy request with drafts", "random request with drafts", "draft logits", "a -1 draft",
                  "near-ties", "a rejected draft followed by drafts that would be accepted (random)",
                  "a first draft both models rule out (log p = log q = -inf), tested",
                  "a first draft at an exact tie (log p = log u, finite), tested")
    triton = True
    law_devices = {**Checks.law_devices, "conformance": ("cpu", "cuda"), "runner-change": ("cpu", "cuda")}

    def cases(self):
        return self.draws.rejection_cases()

    def reached(self, case: RejectionCase) -> None:
        from vllm_hotpaths import registry

        sampler = registry.get(self.hotpath).reference()  # the newest release's behaviours
        target, draft = case.inputs("cpu")[:2]
        outcomes = draft_outcomes(case, sampler)
        for start, (slot, drafts, temp, *_), found in zip(_starts(case), case.requests, outcomes):
            kind = "greedy" if temp == 0.0 else "random"
            note(f"{kind} request with drafts" if drafts else f"{kind} request without drafts")
            rejected = next((j for j, ok in enumerate(found) if ok is not True), None)
            if rejected is not None and found[rejected] is False and any(found[rejected + 1:]):
                note(f"a rejected draft followed by drafts that would be accepted ({kind})")
            if draft is not None and temp != 0.0 and drafts and drafts[0] >= 0 \
                    and target[start, drafts[0]] == -math.inf and draft[slot, 0, drafts[0]] == -math.inf \
                    and all(_finite_lse(row) for row in (target[start], draft[slot, 0])):
                note("a first draft both models rule out (log p = log q = -inf), tested")
        for r in case.ties:
            start, (slot, drafts, _, seed, first_pos, _) = _starts(case)[r], case.requests[r]
            row, other = target[start].numpy(), (drafts[0] + 1) % case.vocab_size
            if np.isfinite(row).sum() == 2 and np.isfinite(row[[drafts[0], other]]).all():
                u = _acceptance_uniform(seed, first_pos)  # floored by the kernel
                if tie_log_prob(row[drafts[0]], row[other]) == np.log(u):
                    note("a first draft at an exact tie (log p = log u, finite), tested")

    def agree(self, case: RejectionCase, expected: Side, actual: Side, device, log: CaseLog) -> None:
        assert_same_samples(case, expected, actual, device)

    def v1_counterpart(self, vllm_version: str) -> Side:
        """The runner-change law's side: v1's acceptance rule and recovered-token reference for
        `vllm_version`, given Model Runner V2's uniforms."""
        from functools import partial

        from vllm_hotpaths import registry
        from vllm_hotpaths.testing.cases.rejection_v1 import V1OnRejection

        version = registry.get("recovered_tokens").reference_version_for(vllm_version)
        mrv2 = registry.get("rejection_mrv2").reference_version_for(vllm_version)
        return Side(f"v1 recovered_tokens reference {version}",
                    partial(V1OnRejection, v1_version=version, mrv2_version=mrv2), vllm_version)
