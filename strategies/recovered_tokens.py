"""Recovered-token cases: a speculative batch's probabilities and noise, built from a seed and a
list of edits that place ties, near-ties, NaNs, zero residuals and extreme noise exactly where the
kernels' tile boundaries are.

A `RecoveryCase` is plain data (its repr is valid Python, its JSON is a fixture). `build()` makes
the numpy inputs: seeded base probabilities (a share of exact zeros), seeded Exp(1) noise, then
`edits` applied in order, each resolved against the arrays as they stand (so a near-tie is a
near-tie of whatever currently wins):
  ("zero", token, lane, 0)      the token's residual is all zero (draft = target; without draft
                                probabilities only the draft id's lane is non-zero)
  ("single", token, lane, 0)    only `lane` has a non-zero residual
  ("tie", token, lane, 0)       `lane` copies the winner's target, draft and noise: an exact tie
  ("near", token, lane, ulps)   `lane`'s score is the winner's, moved by `ulps` fp32 steps
  ("flip", token, lane, k)      the k-th (modulo their number) of the target values within 8 fp32
                                steps of the winner's ratio that make `lane` win under one of
                                `residual / q` and `residual * (1/q)` and lose under the other
                                (IEEE; a "near" edit when there is none)
  ("nan", token, lane, which)   NaN target (which 0) or NaN draft (which 1) probability, or
                                a whole NaN target row (which 2: a model's NaN logits)
  ("subnormal", token, lane, m) target probability m * 2**-149
  ("inf", token, lane, 0)       infinite target probability
  ("noise", request, lane, v)   q[request, lane] = v (0, tiny, huge, subnormal, inf)
Lanes are taken modulo the vocabulary size, tokens and requests modulo their counts.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch
from hypothesis import strategies as st

from vllm_hotpaths.testing.cases import note
from vllm_hotpaths.recovered_tokens import Tiles

NOISE_EDGES = (0.0, 2.0 ** -24, 1e-30, 1e-40, 2.0 ** 126, 3e38, math.inf, 1.0)
# vLLM's 0.22 tile, its neighbours, and real vocabularies (CUDA cases).
LARGE_VOCABS = (8191, 8192, 8193, 16385, 32000, 129280, 151936)


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
            diff = self.target - self.draft
            return np.where(np.isnan(diff), diff, np.maximum(diff, np.float32(0)))
        residual = self.target.copy()
        rows = np.flatnonzero((self.draft_ids >= 0) & (self.draft_ids < self.target.shape[1]))
        residual[rows, self.draft_ids[rows]] = 0
        return residual

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
            steps = [value]
            for direction in (np.inf, 0):
                v = value
                for _ in range(8):
                    v = np.nextafter(v, f32(direction))
                    steps.append(v)
            if ulps is not None:  # steps: value, 8 steps up, 8 steps down
                return steps[min(ulps, 8)] if ulps >= 0 else steps[8 + min(-ulps, 8)]

            def lane_wins(s_a, s_b):
                return bool(s_b > s_a or (s_b == s_a and lane < a))

            flips = [v for v in sorted(steps) if lane_wins(res_a / q_a, v / q_b)
                     != lane_wins(res_a * (f32(1) / q_a), v * (f32(1) / q_b))]
        return flips[k % len(flips)] if flips else steps[0]

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
        if kind == "zero":
            if self.draft is not None:
                self.draft[t] = self.target[t]
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


# -- generation ----------------------------------------------------------------------------
def _lanes(vocab: int, widths: list[int]) -> st.SearchStrategy[int]:
    """Lanes at tile edges (each side of every multiple of each width), the ends, anywhere."""
    edges = {0, vocab - 1}
    for width in widths:
        for start in range(width, vocab, width):
            edges.update((start - 1, start))
        edges.add(vocab - 1 - (vocab - 1) % width)  # first lane of the last (partial) tile
    edges = sorted(e for e in edges if 0 <= e < vocab)
    return st.one_of(st.sampled_from(edges), st.integers(0, vocab - 1))


def _edit(vocab: int, widths: list[int]) -> st.SearchStrategy[tuple]:
    lane = _lanes(vocab, widths)
    index = st.integers(0, 15)
    return st.one_of(
        st.tuples(st.just("tie"), index, lane, st.just(0)),
        st.tuples(st.just("flip"), index, lane, st.integers(0, 16)),
        st.tuples(st.sampled_from(("zero", "single", "inf")), index, lane, st.just(0)),
        st.tuples(st.just("near"), index, lane, st.integers(-4, 4)),
        st.tuples(st.just("nan"), index, lane, st.integers(0, 2)),
        st.tuples(st.just("subnormal"), index, lane, st.integers(1, 2 ** 23)),
        st.tuples(st.just("noise"), index, lane, st.sampled_from(NOISE_EDGES)),
    )


@st.composite
def recovery_cases(draw, large: bool = False) -> RecoveryCase:
    """Small vocabularies with shrunk tiles (for Triton's interpreter), or `large=True`: vLLM's
    tile neighbours and real vocabularies with production tiles (for CUDA)."""
    if large:
        vocab = draw(st.sampled_from(LARGE_VOCABS))
        reference_block, fast_tiles = None, None
        widths = [8192, 1024]
    else:
        reference_block = draw(st.sampled_from((4, 8, 16, 32)))
        fast_tiles = (draw(st.sampled_from((4, 8, 16))), draw(st.integers(1, 3)))
        widths = [reference_block, fast_tiles[0], fast_tiles[0] * fast_tiles[1]]
        width = draw(st.sampled_from(widths))
        vocab = draw(st.one_of(
            st.integers(1, 80),
            st.integers(1, 4).map(lambda m: m * width) | st.integers(1, 4).map(lambda m: m * width + 1)
            | st.integers(1, 4).map(lambda m: m * width - 1),
        ).filter(lambda v: v >= 1))
    max_drafts = draw(st.integers(1, 4))
    counts = draw(st.lists(st.integers(0, max_drafts), min_size=1, max_size=4 if large else 5))
    if not any(counts) and draw(st.integers(0, 3)):  # keep "no draft tokens" a minority
        counts[draw(st.integers(0, len(counts) - 1))] = max_drafts
    tokens = sum(counts)
    id_choice = st.one_of(st.sampled_from((-1, 0, vocab - 1)), st.integers(0, vocab - 1))
    case = RecoveryCase(
        vocab_size=vocab,
        draft_counts=tuple(counts),
        spare_spec_len=draw(st.integers(0, 2)),
        draft_probs=draw(st.booleans()),
        draft_ids=tuple(draw(st.lists(id_choice, min_size=tokens, max_size=tokens))),
        seed=draw(st.integers(0, 2 ** 32 - 1)),
        zero_share=draw(st.sampled_from((0.0, 0.5, 0.9, 1.0))),
        edits=tuple(draw(st.lists(_edit(vocab, widths), max_size=8))),
        reference_block=reference_block,
        fast_tiles=fast_tiles,
        ids_dtype=draw(st.sampled_from(("int32", "int64"))),
        cu_dtype=draw(st.sampled_from(("int32", "int64"))),
    )
    for label in classify(case):
        note(label)
    return case


def classify(case: RecoveryCase) -> list[str]:
    """Events for --hypothesis-show-statistics: which input classes a run reached."""
    labels = [f"edit {kind}" for kind in sorted({e[0] for e in case.edits})]
    if not any(case.draft_counts):
        labels.append("no draft tokens")
    if len(set(case.draft_counts)) > 1:
        labels.append("ragged draft counts")
    labels.append("draft probabilities" if case.draft_probs else "no draft probabilities")
    if case.num_tokens and not case.draft_probs and -1 in case.draft_ids:
        labels.append("draft id -1")
    if case.num_tokens:
        if case.near_tie_positions().any():
            labels.append("near-tie position")
        if case.nan_positions().any():
            labels.append("NaN score position")
    return labels
