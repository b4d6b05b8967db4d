"""Sampling-pass generators: `logits_copy`'s programs with top-k / top-p always neutral (the hot
path does not state them), vocabularies of one to three 1024-id blocks (the sampler's block), and
seeds over all of int64 (vLLM keeps any but -1, its "random"), with its 32-bit and sign edges."""

from __future__ import annotations

from hypothesis import strategies as st

from strategies.logits_copy import SEEDS, bad_input_cases, logits_programs, pair_programs
from vllm_hotpaths.testing.cases.logits_copy import BadInputCase

VOCABS = (1, 5, 17, 1024, 1025, 2047, 3072, 3000)
SEED_EDGES = (2**32 - 1, 2**32, -2, -(2**31), 2**63 - 1, -(2**63))


def sampler_seeds() -> st.SearchStrategy[int]:
    return st.one_of(SEEDS, st.sampled_from(SEED_EDGES), st.integers(-(2**63), 2**63 - 1).filter(lambda s: s != -1))


BLOCK = 1024  # the sampler's block of ids
# What the fused pass computes itself (sampler_mrv2.fast.fused_covers); a step with any other
# knob off neutral goes to its reference.
FUSED_KNOBS = ("temperature", "repetition_penalty", "frequency_penalty", "presence_penalty")


UNSTATED = ("top_k", "top_p")
# Logits far above a row's normal ones (scale 4), whose other ids the lazy pass need not draw; and
# 2**30, where the noise rounds away (fp32's step there is 128): equal scores on several ids.
PEAKS = (60.0, 1000.0, 2.0 ** 30)


def sampler_programs():
    return logits_programs(vocabs=VOCABS, neutral_only=UNSTATED, seeds=sampler_seeds(), nan_block=BLOCK,
                           narrow=FUSED_KNOBS, peaks=PEAKS)


def sampler_pair_programs(pair: tuple[str, str]):
    """Both knobs of `pair` off neutral in one request, beside another or alone."""
    return pair_programs(pair, vocabs=VOCABS, seeds=sampler_seeds(), neutral_only=UNSTATED)


# What the sampling pass refuses at its step beyond what `logits_copy` refuses: the random seed
# (-1), seeds outside int64, and the top-k / top-p it does not state.
SAMPLING_REFUSALS = (("seed", -1), ("seed", 2**63), ("seed", -(2**63) - 1), ("top_k", 3), ("top_p", 0.5))


def sampler_bad_inputs():
    return st.one_of(bad_input_cases(), st.sampled_from(SAMPLING_REFUSALS).map(
        lambda fv: BadInputCase(fv[0], fv[1], "float32")))
