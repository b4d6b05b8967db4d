"""Generators of recovered-token cases (`RecoveryCase`, its schema, in
`vllm_hotpaths.testing.cases.recovered_tokens`): small vocabularies with shrunk tiles, lanes at
every tile edge, and edits that place ties, near-ties, NaNs, zero residuals and extreme noise
there, some at a token's own draft id; or real vocabularies with production tiles (CUDA). Bad inputs (`CorruptedRecovery`) and
vLLM's own random streams (`SeededRecovery`) for the errors and patch laws."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from vllm_hotpaths.testing.cases import note
from vllm_hotpaths.testing.cases.recovered_tokens import (CORRUPTIONS, CorruptedRecovery, RecoveryCase,
                                                          SeededRecovery)

NOISE_EDGES = (0.0, 2.0 ** -24, 1e-30, 1e-40, 2.0 ** 126, 3e38, math.inf, 1.0)
# Noise placed on the lane that currently wins: 0 (an infinite score, or NaN where the residual is
# 0 as in a row with no residual left), infinite (the winner scores 0), subnormal, huge.
WINNER_NOISE = (0.0, 0.0, math.inf, 1e-40, 2.0 ** 126)
# vLLM's 0.22 tile, its neighbours, and real vocabularies (CUDA cases).
LARGE_VOCABS = (8191, 8192, 8193, 16385, 32000, 129280, 151936)
# CPU cases over several of upstream's 8,192-lane tiles and real vocabularies (ids past 16 bits),
# in one case of five with one or two draft tokens: the interpreter pays about 7 ms per program
# per 8,192-lane block, so the reference keeps upstream's tile and the candidate blocks of 4,096
# or 8,192 lanes in 2 to 8 slices.
WIDE_VOCABS = (16385, 24577, 32768, 32769, 65536, 151936, 262144)
UPSTREAM_TILE = 8192


def _lanes(vocab: int, widths: list[int]) -> st.SearchStrategy[int]:
    """Lanes at tile edges (each side of every multiple of each width), the ends, anywhere."""
    edges = {0, vocab - 1}
    for width in widths:
        for start in range(width, vocab, width):
            edges.update((start - 1, start))
        edges.add(vocab - 1 - (vocab - 1) % width)  # first lane of the last (partial) tile
    edges = sorted(e for e in edges if 0 <= e < vocab)
    return st.one_of(st.sampled_from(edges), st.integers(0, vocab - 1))


def _edit(vocab: int, widths: list[int], focus: int) -> st.SearchStrategy[tuple]:
    """One edit; its position is often `focus`, so that edits stack on one position (a zero
    residual and then noise at its winner, a NaN and then a tie, ...)."""
    lane = _lanes(vocab, widths)
    index = st.one_of(st.just(focus), st.integers(0, 15))
    return st.one_of(
        st.tuples(st.just("tie"), index, lane, st.just(0)),
        st.tuples(st.just("flip"), index, lane, st.integers(0, 16)),
        st.tuples(st.just("zero"), index, lane, st.integers(0, 1)),
        st.tuples(st.sampled_from(("single", "inf")), index, lane, st.just(0)),
        st.tuples(st.just("near"), index, lane, st.integers(-4, 4)),
        st.tuples(st.just("rounded"), index, lane, st.integers(0, 16)),
        st.tuples(st.just("nan"), index, lane, st.integers(0, 2)),
        st.tuples(st.just("subnormal"), index, lane, st.integers(1, 2 ** 23)),
        st.tuples(st.just("noise"), index, lane, st.sampled_from(NOISE_EDGES)),
        st.tuples(st.just("winner noise"), index, st.just(0), st.sampled_from(WINNER_NOISE)),
        st.tuples(st.just("draft"), index, st.just(0), st.sampled_from((0, 0, 1, 2))),
    )


def _last_edit(vocab: int, focus: int, tokens: int) -> st.SearchStrategy[tuple]:
    """Built on purpose, after the other edits so none undoes it: in a vocabulary past 16 bits,
    in three cases of four, the only non-zero residual at an id past 32,767 (the winner's id must
    survive whatever holds it), tied by the last id (an exact tie across upstream's tiles where
    they differ, which the lower id wins); else in one case of four each: a whole NaN target row
    (a model's NaN logits: no real lane may lose to a padding lane), and at every draft position
    the only residual at the token's own draft id (with draft probabilities it wins) or an fp32
    tie of lanes with different inputs (a rounding fault in the score flips some of them)."""
    rounded = st.lists(st.tuples(st.integers(0, vocab - 1), st.integers(0, 3)), min_size=tokens,
                       max_size=tokens).map(lambda picks: tuple(("rounded", t, lane, k)
                                                                for t, (lane, k) in enumerate(picks)))
    nan_row = st.integers(0, 3).flatmap(lambda n: st.just((("nan", focus, 0, 2),)) if n == 3 else
                                        st.just(tuple(("draft", t, 0, 0) for t in range(tokens))) if n == 2 else
                                        rounded if n == 1 else st.just(()))
    if vocab <= 2**15:
        return nan_row
    past_16_bits = st.integers(2**15, vocab - 1).map(
        lambda lane: (("single", focus, lane, 0), ("tie", focus, vocab - 1, 0)))
    return st.integers(0, 3).flatmap(lambda n: past_16_bits if n else nan_row)


@st.composite
def recovery_cases(draw, large: bool = False) -> RecoveryCase:
    """Small vocabularies with shrunk tiles (for Triton's interpreter), in one case of five
    vocabularies of several upstream tiles or real sizes (one or two draft tokens), or
    `large=True`: vLLM's tile neighbours and real vocabularies with production tiles (for CUDA)."""
    wide = not large and draw(st.integers(0, 4)) == 4  # the last value: shrinking leaves the small ones
    if large:
        vocab = draw(st.sampled_from(LARGE_VOCABS))
        reference_block, fast_tiles = None, None
        widths = [8192, 1024]
    elif wide:
        vocab = draw(st.one_of(st.sampled_from(WIDE_VOCABS), st.integers(2**15, WIDE_VOCABS[-1])))
        reference_block = UPSTREAM_TILE
        block = draw(st.sampled_from((4096, 8192)))
        slices = draw(st.integers(2, 8))  # the interpreter's cost is per program: a few slices
        fast_tiles = (block, -(-vocab // (block * slices)))
        widths = [UPSTREAM_TILE, fast_tiles[0], fast_tiles[0] * fast_tiles[1]]
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
    max_drafts = draw(st.integers(1, 2 if wide else 4))
    counts = draw(st.lists(st.integers(0, max_drafts), min_size=1, max_size=2 if wide else 4 if large else 5))
    if not any(counts) and draw(st.integers(0, 3)):  # keep "no draft tokens" a minority
        counts[draw(st.integers(0, len(counts) - 1))] = max_drafts
    if wide:  # one or two draft tokens
        counts = [min(c, 1) for c in counts] if sum(counts) > 2 else counts
        counts[-1] = max(counts[-1], int(not any(counts)))
    tokens = sum(counts)
    focus = draw(st.integers(0, 15))
    id_choice = st.one_of(st.sampled_from((-1, 0, vocab - 1)), st.integers(0, vocab - 1))
    case = RecoveryCase(
        vocab_size=vocab,
        draft_counts=tuple(counts),
        spare_spec_len=draw(st.integers(0, 2)),
        draft_probs=draw(st.booleans()),
        draft_ids=tuple(draw(st.lists(id_choice, min_size=tokens, max_size=tokens))),
        seed=draw(st.integers(0, 2 ** 32 - 1)),
        zero_share=draw(st.sampled_from((0.0, 0.5, 0.9, 1.0))),
        edits=tuple(draw(st.lists(_edit(vocab, widths, focus), max_size=8))) + draw(_last_edit(vocab, focus, tokens)),
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
    if case.vocab_size > UPSTREAM_TILE and case.fast_tiles is not None:
        labels.append("CPU vocabulary over several upstream tiles")
    if case.vocab_size >= 32768 and case.fast_tiles is not None:
        labels.append("CPU real vocabulary (>= 32,768)")
    if not any(case.draft_counts):
        labels.append("no draft tokens")
    if len(set(case.draft_counts)) > 1:
        labels.append("ragged draft counts")
    labels.append("draft probabilities" if case.draft_probs else "no draft probabilities")
    if case.num_tokens and -1 in case.draft_ids:
        labels.append("draft id -1" + (" with draft probabilities" if case.draft_probs else ""))
    if case.num_tokens:
        labels += case.build().zero_classes()
        if case.build().draft_lane_wins():
            labels.append("the draft lane wins (draft probabilities)")
        if case.vocab_size > UPSTREAM_TILE and case.build().tied_across_tiles(UPSTREAM_TILE):
            labels.append("exact tie across upstream tiles")
        labels += case.build().rounded_ties()
        if case.near_tie_positions().any():
            labels.append("near-tie position")
        if case.nan_positions().any():
            labels.append("NaN score position")
        built = case.build()
        if case.fast_tiles is not None and case.vocab_size % case.fast_tiles[0] \
                and np.isnan(built.target).all(axis=1).any():
            labels.append("a whole NaN row, the vocabulary not a multiple of the block")
        if case.fast_tiles is not None and any(built.winner(t) >= 2**15 for t in range(case.num_tokens)):
            labels.append("CPU winning id past 32,767")
    return labels


def corrupted_recovery_cases() -> st.SearchStrategy[CorruptedRecovery]:
    """A case with draft tokens, then one way of making its inputs inconsistent."""
    return st.builds(CorruptedRecovery.of, recovery_cases().filter(lambda c: c.num_tokens > 0),
                     st.sampled_from(CORRUPTIONS))


@st.composite
def seeded_recovery_cases(draw) -> SeededRecovery:
    """A case, the requests with their own generator (with and without drafts) and the global seed."""
    case = draw(recovery_cases())
    seeded = draw(st.dictionaries(st.integers(0, len(case.draft_counts) - 1), st.integers(0, 2**32 - 1)),
                  label="seeded requests")
    return SeededRecovery.of(case, tuple(seeded.items()), draw(st.integers(0, 2**32 - 1)))
