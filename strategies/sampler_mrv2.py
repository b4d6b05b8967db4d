"""Sampling-pass generators: `logits_copy`'s programs with top-k / top-p always neutral (the hot
path does not state them), vocabularies of one to three 1024-id blocks (the sampler's block), and
seeds over all of int64 (vLLM keeps any but -1, its "random"), with its 32-bit and sign edges."""

from __future__ import annotations

from hypothesis import strategies as st

from strategies.logits_copy import SEEDS, logits_programs

VOCABS = (1, 5, 17, 1024, 1025, 2047, 3072, 3000)
SEED_EDGES = (2**32 - 1, 2**32, -2, -(2**31), 2**63 - 1, -(2**63))


def sampler_seeds() -> st.SearchStrategy[int]:
    return st.one_of(SEEDS, st.sampled_from(SEED_EDGES), st.integers(-(2**63), 2**63 - 1).filter(lambda s: s != -1))


def sampler_programs():
    return logits_programs(vocabs=VOCABS, neutral_only=("top_k", "top_p"), seeds=sampler_seeds())
