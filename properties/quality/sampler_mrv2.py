"""Deliberately wrong sampling passes, each the source of a module here with one edit (`planted`).

`MUTANTS`: references that must fail conformance against the installed vLLM's `Sampler.sample`,
each checked in place of the frozen reference of the installed vLLM (`reference_version()`):
`pytest properties/test_conformance.py -k "sampler_mrv2 and cpu"
--reference sampler_mrv2@VERSION=properties.quality.sampler_mrv2:NAME`.

`FAST_MUTANTS`: fused fast paths (0.22.0's `FusedSamplingPass`) that must fail equivalence (or,
`RandomSeedSampled`, the errors law) with the 0.22.0 reference: `pytest properties/test_equivalence.py -k "sampler_mrv2 and cpu"
--impl sampler_mrv2@0.22.0=properties.quality.sampler_mrv2:NAME` (`and cuda` for those that show
only where Triton's division is approximate). `tests/test_quality.py` runs each CPU one (kernels
interpreted); `ci/gpu/cuda-suite.sh` (PARTS=quality) the CUDA ones.
"""

from __future__ import annotations

from functools import partial

from properties.quality import planted
from vllm_hotpaths.sampler_mrv2 import fast, lazy, reference


def reference_version() -> str:
    return planted.reference_version("sampler_mrv2")


_planted = partial(planted.planted, "sampler_mrv2", reference)

# Equal scores inside a block go to the higher id (upstream's block maximum keeps the lowest).
TiesToHigherLane = _planted("TiesToHigherLane", [
    ("    top, lane = tl.max(x, axis=0, return_indices=True)\n",
     "    top = tl.max(x, axis=0)\n"
     "    lane = tl.max(tl.where(x == top, tl.arange(0, BLOCK), -1), axis=0)\n")])

# Equal block maxima go to the last block (upstream takes the first).
LastBlockWinsTies = _planted("LastBlockWinsTies", [
    ("    return block_ids.gather(-1, block_max.argmax(-1, keepdim=True)).view(-1)\n",
     "    last = blocks - 1 - block_max.flip(-1).argmax(-1, keepdim=True)\n"
     "    return block_ids.gather(-1, last).view(-1)\n")])

# The noise keyed by the position of the token being sampled (the row's position + 1).
NoiseAtNextPosition = _planted("NoiseAtNextPosition", [
    ("tl.load(pos_ptr + row), lanes,", "tl.load(pos_ptr + row) + 1, lanes,")])

# A NaN block maximum loses to every other block (upstream's argmax over blocks takes it).
NaNBlockLoses = _planted("NaNBlockLoses", [
    ("block_max.argmax(-1, keepdim=True)", "torch.nan_to_num(block_max, nan=float('-inf')).argmax(-1, keepdim=True)")])

# The noise of a seed's low 32 bits only.
SeedLow32Bits = _planted("SeedLow32Bits", [
    ("noise = gumbel_noise(tl.load(seed_ptr + row),", "noise = gumbel_noise(tl.load(seed_ptr + row) & 0xFFFFFFFF,")])

# name -> the devices it shows on (law conformance, the installed vLLM's reference)
MUTANTS = {name: "cpu cuda" for name in ("TiesToHigherLane", "LastBlockWinsTies", "NoiseAtNextPosition",
                                          "NaNBlockLoses", "SeedLow32Bits")}


_fast = partial(planted.planted, "sampler_mrv2", fast, attr="FusedSamplingPass")

# A penalized row's earlier drafts are not counted (a count missed on a speculative row).
DraftsNotCounted = _fast("DraftsNotCounted", [
    ("for j in tl.static_range(MAX_DRAFTS):", "for j in tl.static_range(0):")])

# The repetition penalty ignores the prompt: only output and draft tokens are scaled.
PromptNotPenalized = _fast("PromptNotPenalized", [
    ("in_prompt = ((word >> (lanes % 32)) & 1) != 0", "in_prompt = word != word")])

# Equal scores inside a block go to the higher id.
FusedTiesToHigherLane = _fast("FusedTiesToHigherLane", [
    ("    top, lane = tl.max(x, axis=0, return_indices=True)\n",
     "    top = tl.max(x, axis=0)\n"
     "    lane = tl.max(tl.where(x == top, tl.arange(0, BLOCK), -1), axis=0)\n")])

# The noise keyed by the position of the token being sampled (the row's position + 1).
FusedNoiseAtNextPosition = _fast("FusedNoiseAtNextPosition", [
    ("pos = tl.load(pos_ptr + row)", "pos = tl.load(pos_ptr + row) + 1")])

# A correctly rounded temperature division where upstream's compiled kernel divides approximately
# (the same in Triton's interpreter: CUDA only).
FusedIEEEDivision = _fast("FusedIEEEDivision", [("x = x / t", "x = tl.math.div_rn(x, t)")])

# The temperature divides before the penalties (upstream penalizes first): a row differs only
# where a penalized request also has a temperature other than 0 and 1.
FusedTemperatureFirst = _fast("FusedTemperatureFirst", [
    ("    if PENALTIES:\n"
     "        x = _penalize(x, lanes, inside, row, slot, local_pos_ptr, input_ids_ptr, rep_ptr, freq_ptr, pres_ptr,\n"
     "                      pen_row_ptr, counts_ptr, prompt_bits_ptr, words, vocab_size, CONTIG, MAX_DRAFTS)\n"
     "    t = tl.load(temp_ptr + slot)\n"
     "    if t != 0.0 and t != 1.0:\n"
     "        x = x / t\n",
     "    t = tl.load(temp_ptr + slot)\n"
     "    if t != 0.0 and t != 1.0:\n"
     "        x = x / t\n"
     "    if PENALTIES:\n"
     "        x = _penalize(x, lanes, inside, row, slot, local_pos_ptr, input_ids_ptr, rep_ptr, freq_ptr, pres_ptr,\n"
     "                      pen_row_ptr, counts_ptr, prompt_bits_ptr, words, vocab_size, CONTIG, MAX_DRAFTS)\n")])

# The presence penalty subtracted before the frequency penalty (upstream: frequency first): the
# same value but for the rounding, on a token seen with both penalties off neutral.
FusedPresenceFirst = _fast("FusedPresenceFirst", [
    ("            x -= freq * counts\n            x -= pres * seen\n",
     "            x -= pres * seen\n            x -= freq * counts\n")])

# A request with the random seed (-1) sampled with the seed word -1 instead of refused.
RandomSeedSampled = _fast("RandomSeedSampled", [("and p.seed != -1 and", "and")])

# name -> (the law, or the property of properties/test_sampler_mrv2.py, that catches it against the
# 0.22.0 reference; the devices it shows on)
FAST_MUTANTS = {"DraftsNotCounted": ("equivalence", "cpu cuda"), "PromptNotPenalized": ("equivalence", "cpu cuda"),
                "FusedTiesToHigherLane": ("equivalence", "cpu cuda"),
                "FusedNoiseAtNextPosition": ("equivalence", "cpu cuda"), "FusedIEEEDivision": ("equivalence", "cuda"),
                "RandomSeedSampled": ("errors", "cpu cuda"), "FusedTemperatureFirst": ("equivalence", "cpu cuda"),
                "FusedPresenceFirst": ("test_candidate_matches_reference_for_each_pair_of_fused_knobs", "cpu cuda")}
# (DraftsNotCounted needed the `quality` profile's 600 examples until one program in two set only
# the knobs the fused kernel computes: strategies/sampler_mrv2.py.)
NEED_MORE_EXAMPLES: set[str] = set()


_lazy = partial(planted.planted, "sampler_mrv2", lazy, attr="LazySamplingPass031")

# The bound one fp32 step below the largest noise: a token drawing exactly the bound, whose noisy
# value ties the threshold or passes it, is skipped.
LazyBoundOneUlpTight = _lazy("LazyBoundOneUlpTight", [
    ("    bound = noise_bound(NOISE_LOG1P, NOISE_MURMUR3, FLOOR)\n",
     "    bound = noise_bound(NOISE_LOG1P, NOISE_MURMUR3, FLOOR)\n"
     "    bound = (bound.to(tl.int32, bitcast=True) - 1).to(tl.float32, bitcast=True)\n")])

# A block holding a NaN is drawn only where its other ids reach the threshold: its NaN may be
# skipped, where upstream's first NaN block wins.
LazyNaNLaneLeftOut = _lazy("LazyNaNLaneLeftOut", [
    ("            nan = x != x\n", "            nan = x != x\n            nan = nan & (x == x)\n")])

# Ties decided among the candidates only: a block whose top plus the bound only reaches the
# threshold (a token that can tie it, the lower id winning) is not drawn.
LazyTiesLeftOut = _lazy("LazyTiesLeftOut", [
    ("+ bound >= best", "+ bound > best")])

# Every penalized row's tops taken as bounds: a repetition below 1 or a negative frequency or
# presence raises logits, so a block whose unpenalized top plus the bound misses the threshold
# may hold the winner.
LazyRaisingPenaltyBounded = _lazy("LazyRaisingPenaltyBounded", [
    ("    return (rep >= 1.0) & (rep < float(\"inf\"))", "    return (rep == rep) | (rep < float(\"inf\"))")])

# The threshold from the top id's unpenalized logit: above its noisy value where a penalty
# lowers it, so blocks that hold the winner are skipped.
LazyThresholdUnpenalized = _lazy("LazyThresholdUnpenalized", [
    ("words, vocab_size, 0, PENALTIES, MAX_DRAFTS)", "words, vocab_size, 0, False, MAX_DRAFTS)")])

# name -> (the law or property that catches it against the 0.31.0 reference, the devices)
LAZY_MUTANTS = {"LazyBoundOneUlpTight": ("test_candidate_matches_reference_where_a_token_draws_the_largest_noise",
                                         "cpu cuda"),
                "LazyNaNLaneLeftOut": ("equivalence", "cpu cuda"), "LazyTiesLeftOut": ("equivalence", "cpu cuda"),
                "LazyRaisingPenaltyBounded": (
                    "test_candidate_matches_reference_where_a_penalty_raises_an_id_of_a_later_block", "cpu cuda"),
                "LazyThresholdUnpenalized": ("equivalence", "cpu cuda")}
