"""Recovered-token cases: a speculative batch's probabilities and noise, built from a seed and a
list of edits that place ties, near-ties, NaNs, zero residuals and extreme noise exactly where the
kernels' tile boundaries are.

A `RecoveryCase` is plain data (its repr is valid Python, its JSON is a fixture). `build()` makes
the numpy inputs: seeded base probabilities (a share of exact zeros), seeded Exp(1) noise, then
`edits` applied in order, each resolved against the arrays as they stand (so a near-tie is a
near-tie of whatever currently wins):
  ("zero", token, lane, above)  the token's residual is all zero (draft = target; without draft
                                probabilities only the draft id's lane is non-zero); with
                                `above` 1 each draft probability is one fp32 step above the
                                target's (target - draft < 0 wherever the target is non-zero)
  ("single", token, lane, 0)    only `lane` has a non-zero residual
  ("tie", token, lane, 0)       `lane` copies the winner's target, draft and noise: an exact tie
  ("near", token, lane, ulps)   `lane`'s score is the winner's, moved by `ulps` fp32 steps
  ("flip", token, lane, k)      the k-th (modulo their number) of the target values within 8 fp32
                                steps of the winner's ratio that make `lane` win under one of
                                `residual / q` and `residual * (1/q)` and lose under the other
                                (IEEE; a "near" edit when there is none)
  ("rounded", token, lane, k)   a target value for `lane` (its draft probability 0) whose fp32
                                score equals the fp32 winner's exactly, from other inputs: under
                                `residual * (1/q)` for even k, `residual / q` for odd k (the
                                smallest such value for even k // 2, else the largest; where none
                                exists, the value whose score is the closest above). Only the
                                lower id's win decides it, so a change to the score's rounding
                                (of the order of an fp32 step) can flip it
  ("nan", token, lane, which)   NaN target (which 0) or NaN draft (which 1) probability, or
                                a whole NaN target row (which 2: a model's NaN logits)
  ("subnormal", token, lane, m) target probability m * 2**-149
  ("inf", token, lane, 0)       infinite target probability
  ("noise", request, lane, v)   q[request, lane] = v (0, tiny, huge, subnormal, inf)
  ("winner noise", token, _, v) the noise of the lane that currently wins the token's race is v
                                (its request's row: a zero residual under zero noise scores NaN)
  ("draft", token, _, mode)     at the token's own draft id (nothing when the id is outside
                                [0, V)): mode 0 "single" (with draft probabilities the draft lane
                                then wins; without, its masked residual leaves the row all zero),
                                1 "tie", 2 "near" one fp32 step above
Lanes are taken modulo the vocabulary size, tokens and requests modulo their counts.

A `CorruptedRecovery` is a case whose inputs are then made inconsistent one way (`how`, one of
`CORRUPTIONS`): the errors law. A `SeededRecovery` is a case with the random streams vLLM draws
its noise from (the global seed, and the seeded requests' generators): the patch law.

`RecoveredTokensChecks` compares the ids position by position, bit for bit (every id of ours in
[0, V)); against the installed vLLM, the positions a ledger divergence entry marks may differ.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, fields, replace

import numpy as np
import torch

from vllm_hotpaths import registry
from vllm_hotpaths.recovered_tokens import InvalidRecoveryInput, Tiles
from vllm_hotpaths.testing import ledger
from vllm_hotpaths.testing.laws import CaseLog, Checks, Judge, Side, compare_plainly
from vllm_hotpaths.testing.oracles.recovered_tokens import assert_in_vocab, compare_ids

HOTPATH = "recovered_tokens"


@dataclass(frozen=True)
class RecoveryCase:
    vocab_size: int
    draft_counts: tuple[int, ...]  # per request
    spare_spec_len: int  # max_spec_len = max(draft_counts) + spare_spec_len
    draft_probs: bool
    draft_ids: tuple[int, ...]  # per draft token, -1 .. V-1
    seed: int
    zero_share: float  # share of exact zeros in the base probabilities
    edits: tuple[tuple, ...]
    reference_block: int | None = None  # None: upstream's tiles
    fast_tiles: tuple[int, int] | None = None  # (block, split); None: production sizes
    ids_dtype: str = "int32"
    cu_dtype: str = "int32"

    @property
    def num_tokens(self) -> int:
        return sum(self.draft_counts)

    @property
    def max_spec_len(self) -> int:
        return max(self.draft_counts, default=0) + self.spare_spec_len

    def reference_tiles(self) -> Tiles | None:
        return None if self.reference_block is None else Tiles(self.reference_block)

    def candidate_tiles(self) -> Tiles | None:
        return None if self.fast_tiles is None else Tiles(*self.fast_tiles)

    def siblings(self) -> list["RecoveryCase"]:
        """Cases one launch shape away, each in one of what a launch plan is kept by
        (`fast.LaunchPlan`): draft probabilities or not, `max_spec_len`, the number of draft
        tokens (one more request of one draft), the vocabulary (one id more: every edit's lane
        stays inside)."""
        return [replace(self, draft_probs=not self.draft_probs),
                replace(self, spare_spec_len=self.spare_spec_len + 1),
                replace(self, draft_counts=(*self.draft_counts, 1), draft_ids=(*self.draft_ids, 0)),
                replace(self, vocab_size=self.vocab_size + 1)]

    def build(self) -> "Inputs":
        """The inputs (shared between calls for the same case: read them, do not write)."""
        return _build(self)

    def _make(self) -> "Inputs":
        rng = np.random.default_rng(self.seed)
        tokens, vocab, reqs = self.num_tokens, self.vocab_size, len(self.draft_counts)

        def probs():
            p = rng.random((tokens, vocab), dtype=np.float32)
            p[rng.random((tokens, vocab)) < self.zero_share] = 0
            return p / np.maximum(p.sum(axis=1, keepdims=True), np.float32(1e-30))

        inputs = Inputs(
            counts=list(self.draft_counts),
            request=np.repeat(np.arange(reqs), self.draft_counts),
            target=probs().astype(np.float32),
            draft=probs().astype(np.float32) if self.draft_probs else None,
            q=rng.standard_exponential((reqs, vocab), dtype=np.float32),
            draft_ids=np.array(self.draft_ids, dtype=np.int64),
        )
        for edit in self.edits:
            inputs.apply(edit)
        return inputs

    def tensors(self, device) -> dict:
        """The keyword arguments of `recover`, on `device`."""
        built = self.build()
        to = lambda a, dtype=torch.float32: torch.from_numpy(np.array(a)).to(device, dtype)  # noqa: E731 (a copy)
        return dict(
            max_spec_len=self.max_spec_len,
            num_draft_tokens=list(self.draft_counts),
            cu_num_draft_tokens=to(np.cumsum(self.draft_counts, dtype=np.int64), getattr(torch, self.cu_dtype)),
            draft_token_ids=to(built.draft_ids, getattr(torch, self.ids_dtype)),
            draft_probs=None if built.draft is None else to(built.draft),
            target_probs=to(built.target),
            q=to(built.q),
        )

    # -- the input classes the ledger names --------------------------------------------------
    def nan_positions(self) -> np.ndarray:
        """Draft positions where some lane's score is NaN under either arithmetic."""
        built = self.build()
        residual, noise = built.residual(), built.q[built.request]
        with np.errstate(all="ignore"):
            nan = np.isnan(residual / noise) | np.isnan(residual * (np.float32(1) / noise))
        return nan.any(axis=1)

    def near_tie_positions(self, relative: float = 2.0 ** -20) -> np.ndarray:
        """Draft positions whose winner is not decided by more than fp32 rounding: another lane
        (with different inputs) scores within `relative` of the winner's exact ratio (about 8
        fp32 steps), or a lane's reciprocal noise leaves fp32's normal range (q below 2**-126
        overflows 1/q, q above 2**126 makes it subnormal)."""
        built = self.build()
        residual = built.residual().astype(np.float64)
        noise = built.q[built.request].astype(np.float64)
        target, draft = built.target, built.draft if built.draft is not None else built.target
        flags = np.zeros(self.num_tokens, dtype=bool)
        with np.errstate(all="ignore"):
            ratio = residual / noise
            for t in range(self.num_tokens):
                valid = ~np.isnan(ratio[t])
                if not valid.any():
                    continue
                live = valid & (residual[t] > 0)
                extreme = live & ((noise[t] < 2.0 ** -126) | (noise[t] > 2.0 ** 126))
                best = np.nanmax(np.where(valid, ratio[t], -np.inf))
                winners = np.flatnonzero(valid & (ratio[t] == best))
                a = winners[0]
                if math.isinf(best):
                    close = valid & (ratio[t] == best)
                else:
                    close = valid & (best - ratio[t] <= relative * best + 2.0 ** -146)
                same_inputs = ((target[t] == target[t, a]) & (draft[t] == draft[t, a])
                               & (built.q[built.request[t]] == built.q[built.request[t], a]))
                flags[t] = bool(extreme.any() or (close & ~same_inputs).any())
        return flags


def _ranked(residual: np.ndarray, q: np.ndarray, divide: bool) -> np.ndarray:
    """The fp32 scores the kernels rank, `residual / q` (0.16) or `residual * (1/q)` (0.17 on),
    a NaN score as -inf (it never wins)."""
    with np.errstate(all="ignore"):
        score = residual / q if divide else residual * (np.float32(1) / q)
    score[np.isnan(score)] = -np.inf
    return score


def _steps_around(value: np.float32) -> list:
    """`value`, the 8 fp32 values above it, then the 8 below it (nearest first)."""
    steps = [value]
    for direction in (np.inf, 0):
        v = value
        for _ in range(8):
            v = np.nextafter(v, np.float32(direction))
            steps.append(v)
    return steps


@functools.lru_cache(maxsize=4)
def _build(case: RecoveryCase) -> "Inputs":
    """One build per case for the strategy's events, the ledger's predicates and the tensors."""
    return case._make()


@dataclass
class Inputs:
    counts: list[int]
    request: np.ndarray  # request of each draft token
    target: np.ndarray
    draft: np.ndarray | None
    q: np.ndarray
    draft_ids: np.ndarray

    def residual(self) -> np.ndarray:
        """What the kernels rank (IEEE, NaN kept): max(target - draft, 0) or the masked target."""
        if self.draft is not None:
            with np.errstate(invalid="ignore"):  # inf - inf: NaN, kept
                diff = self.target - self.draft
            return np.where(np.isnan(diff), diff, np.maximum(diff, np.float32(0)))
        residual = self.target.copy()
        rows = np.flatnonzero((self.draft_ids >= 0) & (self.draft_ids < self.target.shape[1]))
        residual[rows, self.draft_ids[rows]] = 0
        return residual

    def zero_classes(self) -> list[str]:
        """Events: positions with no residual left, and zero noise on a zero residual (a NaN
        score, `0 * (1/0)`) there or anywhere."""
        residual = self.residual()
        zero_noise = self.q[self.request] == 0
        empty = (residual == 0).all(axis=1)
        labels = []
        if empty.any():
            labels.append("all-zero residual position")
            if (zero_noise & empty[:, None]).any():
                labels.append("zero noise in an all-zero residual position")
            if zero_noise[empty, 0].any():
                labels.append("zero noise at lane 0 of an all-zero residual position")
        if (zero_noise & (residual == 0)).any():
            labels.append("zero noise on a zero residual")
        return labels

    def tied_across_tiles(self, width: int) -> bool:
        """Whether some position's best score (`residual * (1/q)` in fp32, as vLLM 0.22 ranks)
        is held by lanes of two different `width`-lane tiles: an exact tie across tiles."""
        for row in _ranked(self.residual(), self.q[self.request], divide=False):
            tied = np.flatnonzero(row == row.max())
            if tied[0] // width != tied[-1] // width:
                return True
        return False

    def rounded_ties(self) -> list[str]:
        """Events: some position's best fp32 score held by two lanes of different inputs (target,
        draft, noise), under `residual * (1/q)` (vLLM 0.17 on) and under `residual / q` (0.16)."""
        residual, q = self.residual(), self.q[self.request]
        draft = self.draft if self.draft is not None else self.target
        labels = []
        for name, divide in (("residual * (1/q)", False), ("residual / q", True)):
            for t, row in enumerate(_ranked(residual, q, divide)):
                tied = np.flatnonzero(row == row.max())
                a, others = tied[0], tied[1:]
                if np.isfinite(row[a]) and row[a] > 0 and (
                        (self.target[t, others] != self.target[t, a]) | (draft[t, others] != draft[t, a])
                        | (q[t, others] != q[t, a])).any():
                    labels.append(f"an fp32 tie of different inputs, {name}")
                    break
        return labels

    def draft_lane_wins(self) -> bool:
        """Whether, with draft probabilities, some token's own draft id has a non-zero residual
        and wins its race (the lowest lane on ties)."""
        with np.errstate(invalid="ignore"):
            residual = self.residual()
        return self.draft is not None and any(
            0 <= d < residual.shape[1] and residual[t, d] > 0 and self.winner(t) == d
            for t, d in enumerate(self.draft_ids.tolist()))

    def winner(self, token: int) -> int:
        with np.errstate(all="ignore"):
            ratio = self.residual()[token].astype(np.float64) / self.q[self.request[token]]
        ratio[np.isnan(ratio)] = -np.inf
        return int(np.argmax(ratio))

    def _near_value(self, t: int, lane: int, ulps: int | None, k: int):
        """A target value for `lane` whose score is within fp32 rounding of the winner's."""
        a, r = self.winner(t), self.request[t]
        f32 = np.float32
        res_a, q_a, q_b = self.residual()[t, a], self.q[r, a], self.q[r, lane]
        with np.errstate(all="ignore"):
            value = f32(np.float64(res_a) / np.float64(q_a) * np.float64(q_b))
            if not np.isfinite(value) or lane == a:
                return None
            steps = _steps_around(value)
            if ulps is not None:  # steps: value, 8 steps up, 8 steps down
                return steps[min(ulps, 8)] if ulps >= 0 else steps[8 + min(-ulps, 8)]

            def lane_wins(s_a, s_b):
                return bool(s_b > s_a or (s_b == s_a and lane < a))

            flips = [v for v in sorted(steps) if lane_wins(res_a / q_a, v / q_b)
                     != lane_wins(res_a * (f32(1) / q_a), v * (f32(1) / q_b))]
        return flips[k % len(flips)] if flips else steps[0]

    def _rounded_value(self, t: int, lane: int, k: int):
        """A target value for `lane` whose fp32 score ties the fp32 winner's (see "rounded")."""
        divide = k % 2 == 1
        r = self.request[t]
        scores = _ranked(self.residual()[t], self.q[r], divide)
        a = int(np.argmax(scores))
        best, q_b = scores[a], self.q[r, lane]

        def score(value):
            return _ranked(np.array([value]), np.array([q_b]), divide)[0]

        with np.errstate(all="ignore"):
            value = np.float32(np.float64(best) * np.float64(q_b))
            if lane == a or not np.isfinite(best) or not np.isfinite(value) or best <= 0:
                return None
            steps = sorted(_steps_around(value))
            tied = [v for v in steps if score(v) == best and not (v == self.residual()[t, a]
                                                                 and q_b == self.q[r, a])]
            if tied:  # the smallest or the largest: its exact product farthest from the winner's
                return tied[-1 if (k // 2) % 2 else 0]
            above = [v for v in steps if score(v) > best]
            return above[0] if above else None

    def apply(self, edit: tuple) -> None:
        kind, index, lane, arg = edit
        vocab = self.target.shape[1]
        lane %= vocab
        if kind == "noise":
            if len(self.counts):
                self.q[index % len(self.counts), lane] = np.float32(arg)
            return
        if not len(self.target):
            return
        t = index % len(self.target)
        if kind == "draft":
            if not 0 <= self.draft_ids[t] < vocab:
                return
            kind, lane, arg = ("single", "tie", "near")[arg % 3], int(self.draft_ids[t]), 1
        if kind == "winner noise":
            self.q[self.request[t], self.winner(t)] = np.float32(arg)
        elif kind == "zero":
            if self.draft is not None:
                self.draft[t] = np.nextafter(self.target[t], np.float32(np.inf)) if arg else self.target[t]
            else:
                keep = self.draft_ids[t]
                self.target[t] = 0
                if 0 <= keep < vocab:
                    self.target[t, keep] = 0.5
        elif kind == "single":
            self.target[t] = 0
            self.target[t, lane] = 0.25
            if self.draft is not None:
                self.draft[t, lane] = 0
        elif kind == "tie":
            a = self.winner(t)
            r = self.request[t]
            self.target[t, lane] = self.target[t, a]
            self.q[r, lane] = self.q[r, a]
            if self.draft is not None:
                self.draft[t, lane] = self.draft[t, a]
        elif kind in ("near", "flip"):
            value = self._near_value(t, lane, arg if kind == "near" else None, arg)
            if value is None:
                return
            self.target[t, lane] = value
            if self.draft is not None:
                self.draft[t, lane] = 0
        elif kind == "rounded":
            value = self._rounded_value(t, lane, arg)
            if value is None:
                return
            self.target[t, lane] = value
            if self.draft is not None:
                self.draft[t, lane] = 0
        elif kind == "nan" and arg == 2:
            self.target[t] = np.nan
        elif kind == "nan":
            (self.draft if arg and self.draft is not None else self.target)[t, lane] = np.nan
        elif kind == "subnormal":
            self.target[t, lane] = np.float32(arg * 2.0 ** -149)
            if self.draft is not None:
                self.draft[t, lane] = 0
        elif kind == "inf":
            self.target[t, lane] = np.inf
        else:
            raise ValueError(f"unknown edit {edit!r}")


def _fields_of(case: RecoveryCase) -> dict:
    return {f.name: getattr(case, f.name) for f in fields(RecoveryCase)}


# -- bad input (the errors law) -------------------------------------------------------------
CORRUPTIONS = ("count sum", "spec len", "negative count", "target dtype", "noise shape",
               "ids shape", "cu dtype", "not contiguous")


def corrupt(args: dict, how: str) -> dict:
    """`recover`'s keyword arguments made inconsistent one way."""
    bad = dict(args)
    if how == "count sum":
        bad["num_draft_tokens"] = args["num_draft_tokens"] + [1]
    elif how == "spec len":
        bad["max_spec_len"] = max(args["num_draft_tokens"]) - 1
    elif how == "negative count":
        bad["num_draft_tokens"] = [-1] + args["num_draft_tokens"][1:]
    elif how == "target dtype":
        bad["target_probs"] = args["target_probs"].double()
    elif how == "noise shape":
        bad["q"] = torch.cat([args["q"], args["q"][:, :1]], dim=1)
    elif how == "ids shape":
        bad["draft_token_ids"] = args["draft_token_ids"][:-1]
    elif how == "cu dtype":
        bad["cu_num_draft_tokens"] = args["cu_num_draft_tokens"].float()
    elif how == "not contiguous":
        bad["target_probs"] = torch.cat([args["target_probs"]] * 2, dim=1)[:, ::2]
    else:
        raise ValueError(f"unknown corruption {how!r}")
    return bad


@dataclass(frozen=True)
class CorruptedRecovery(RecoveryCase):
    """A case (with draft tokens) whose inputs are then made inconsistent: `how` is one of
    `CORRUPTIONS`."""

    how: str = "count sum"

    @classmethod
    def of(cls, case: RecoveryCase, how: str = "count sum") -> "CorruptedRecovery":
        return cls(**_fields_of(case), how=how)

    @property
    def case(self) -> RecoveryCase:
        return RecoveryCase(**_fields_of(self))

    def bad_tensors(self, device) -> dict:
        return corrupt(self.tensors(device), self.how)


# -- vLLM's own call, random streams included (the patch law) -------------------------------
@dataclass(frozen=True)
class SeededRecovery(RecoveryCase):
    """A case drawn the way vLLM draws its noise: from the global stream seeded with
    `global_seed`, then, for each (request, seed) of `seeded` whose request has drafts, from that
    request's own generator."""

    seeded: tuple[tuple[int, int], ...] = ()
    global_seed: int = 0

    @classmethod
    def of(cls, case: RecoveryCase, seeded: tuple[tuple[int, int], ...] = (),
           global_seed: int = 0) -> "SeededRecovery":
        return cls(**_fields_of(case), seeded=tuple(seeded), global_seed=global_seed)


def upstream_call(function, case: SeededRecovery, device):
    """`function` called as the rejection sampler calls it, the random streams seeded afresh:
    the ids, and where each stream stands afterwards (the next step draws from there)."""
    from types import SimpleNamespace

    args = case.tensors(device)
    del args["q"]  # drawn inside, from the streams
    generators = {i: torch.Generator(device).manual_seed(s) for i, s in case.seeded}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(case.global_seed)
        ids = function(*args.values(), SimpleNamespace(generators=generators), torch.device(device))
        streams = {"the global stream": torch.get_rng_state()}
        streams |= {f"request {i}'s generator": g.get_state() for i, g in generators.items()}
    return ids, streams


# -- the comparison -------------------------------------------------------------------------
def recovered(impl, case: RecoveryCase, device) -> torch.Tensor:
    """`impl`'s ids for `case`, every one of them in [0, V)."""
    ids = impl.recover(**case.tensors(device))
    assert_in_vocab(ids, case.vocab_size, type(impl).__name__)
    return ids


class _DivergencesJudgedByPosition:
    """A case as a whole-case judge (the ledger's conformance judge, the drift check's) sees it
    once `agree` has judged the ledger's divergence entries position by position: those entries
    cover none of its positions here, so a difference elsewhere is never excused for them; the
    change entries (drift) read the case itself."""

    def __init__(self, case: RecoveryCase) -> None:
        self._case = case

    def __getattr__(self, name):
        return getattr(self._case, name)

    def nan_positions(self) -> np.ndarray:  # the NaN entry (vLLM PR #44744): judged in `agree`
        return np.zeros(self._case.num_tokens, dtype=bool)


class RecoveredTokensChecks(Checks):
    """The recovered ids, position by position, bit for bit, and every id of ours in [0, V).
    Candidate vs reference: on test-sized tiles (the reference's and the candidate's own), no
    position excused. Reference vs the installed vLLM (conformance, drift): upstream's tiles; a
    position the ledger marks for the installed version (a NaN score: upstream's pick is
    undecided) may differ, and its entry's link goes to the log. Bad input: InvalidRecoveryInput
    on both sides. Patched vLLM vs upstream: the ids and the random streams' states afterwards."""

    hotpath = HOTPATH
    case_type = RecoveryCase
    boundaries = ("edit tie", "edit near", "edit flip", "edit rounded", "an fp32 tie of different inputs, "
                  "residual * (1/q)", "an fp32 tie of different inputs, residual / q", "near-tie position",
                  "NaN score position",
                  "all-zero residual position", "ragged draft counts", "CPU vocabulary over several upstream tiles",
                  "draft id -1 with draft probabilities", "the draft lane wins (draft probabilities)",
                  "exact tie across upstream tiles", "a whole NaN row, the vocabulary not a multiple of the block",
                  "CPU winning id past 32,767")
    error_type = CorruptedRecovery
    # committed cases replay in the patch law too, with no seeded request and global seed 0
    converted = ((SeededRecovery, RecoveryCase, SeededRecovery.of),)
    triton = True

    def cases(self):
        return self.draws.recovery_cases()

    @staticmethod
    def upstream(side: Side) -> bool:
        """Whether `side` is the installed vLLM's own function (conformance and drift)."""
        return side.factory is registry.get(HOTPATH).live_factory()

    def check(self, expected: Side, actual: Side, device, log: CaseLog, judge: Judge = compare_plainly,
              key: str = "") -> None:
        if self.upstream(actual):  # the divergence entries are judged position by position in agree
            whole_case = judge

            def judge(case, compare):
                view = _DivergencesJudgedByPosition(case)
                covering = [entry.link for entry, mask in ledger.position_entries(HOTPATH, actual.version, view)
                            if np.any(mask)]
                if covering:  # not a difference: the view must hide every divergence entry
                    raise RuntimeError(f"ledger divergence entries {covering} are not judged position by "
                                       "position: extend _DivergencesJudgedByPosition")
                return whole_case(view, compare)

        super().check(expected, actual, device, log, judge, key)

    def agree(self, case: RecoveryCase, expected: Side, actual: Side, device, log: CaseLog) -> None:
        if self.upstream(actual):  # upstream's tiles on both sides; vLLM's ids may leave [0, V) where excused
            expected_ids = recovered(expected.factory(device), case, device)
            actual_ids = actual.factory(device).recover(**case.tensors(device))
            excusable = ledger.position_entries(HOTPATH, actual.version, case)
        else:
            expected_ids = recovered(expected.factory(device, case.reference_tiles()), case, device)
            actual_ids = recovered(actual.factory(device, case.candidate_tiles()), case, device)
            excusable = []
        for link in compare_ids(actual_ids, expected_ids, f"{actual.label} vs {expected.label}", excusable):
            log.excuse_link(link)

    def error_cases(self):
        return self.draws.corrupted_recovery_cases()

    def refuse_alike(self, case: CorruptedRecovery, expected: Side, actual: Side, device, log: CaseLog) -> None:
        """Inputs that do not describe one batch raise InvalidRecoveryInput, never a tensor."""
        from hypothesis import assume

        bad = case.bad_tensors(device)
        assume(case.how != "not contiguous" or not bad["target_probs"].is_contiguous())  # one row, one lane
        for side in (expected, actual):
            try:
                ids = side.factory(device).recover(**bad)
            except InvalidRecoveryInput:
                continue
            raise AssertionError(f"{side.label} accepted inputs with a {case.how!r} corruption "
                                 f"({actual.label} vs {expected.label}): returned {ids!r}")

    def check_patch(self, device, log: CaseLog, key: str = "") -> None:
        self.explore(self.draws.seeded_recovery_cases(), SeededRecovery, key, log,
                     lambda case: self.patch_agrees(case, device, log))

    def patch_agrees(self, case: SeededRecovery, device, log: CaseLog) -> None:
        """vLLM's `sample_recovered_tokens` with the plugin's patch installed == upstream's, ids bit
        for bit, from the same global seed and per-request generators (seeded requests with and
        without drafts), and every stream left where upstream leaves it; where upstream's pick is
        undecided (the ledger's NaN positions) it is excused, as in conformance."""
        from vllm_hotpaths import vllm_env
        from vllm_hotpaths.recovered_tokens import dispatch, patch

        patch.install(choose=lambda device: dispatch.always())  # the fast path at every shape
        try:
            module = vllm_env.import_vllm(patch.REJECTION_SAMPLER)
            upstream, upstream_streams = upstream_call(patch.UPSTREAM["sample_recovered_tokens"], case, device)
            patched, patched_streams = upstream_call(module.sample_recovered_tokens, case, device)
        finally:
            patch.uninstall()
        for stream, state in upstream_streams.items():
            assert torch.equal(patched_streams[stream], state), f"{stream} advanced differently"
        assert patched.dtype == upstream.dtype, f"patched ids are {patched.dtype}, upstream's {upstream.dtype}"
        version = vllm_env.installed_version()
        excusable = ledger.position_entries(HOTPATH, version, case)  # where upstream is undecided
        for link in compare_ids(patched, upstream, f"patched vLLM {version} vs upstream", excusable):
            log.excuse_link(link)
