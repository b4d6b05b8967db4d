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
      shape; draft rows are slot * steps + step): specials, engineered near-ties.

`RejectionChecks` is what the generic laws run: conformance bit for bit on the sampled ids and
counts (on CPU, libdevice log1p in the interpreter is `vllm_hotpaths.libdevice_cpu`), and, through `V1OnRejection`, the
runner-change law: v1's acceptance rule and `sample_recovered_tokens` reference given the same
uniforms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from vllm_hotpaths.testing.cases import note, seeded_logits
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
                  "a first draft both models rule out (log p = log q = -inf), tested")
    triton = True
    law_devices = {**Checks.law_devices, "conformance": ("cpu", "cuda"), "runner-change": ("cpu", "cuda")}

    def cases(self):
        from strategies import rejection_cases

        return rejection_cases()

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
