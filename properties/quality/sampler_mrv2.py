"""Deliberately wrong sampling-pass references: each must fail conformance against the installed
vLLM's `Sampler.sample`. Until the hot path has a fast path, each is checked in place of the
frozen reference of the installed vLLM (`reference_version()`):
`pytest properties/test_conformance.py -k "sampler_mrv2 and cpu"
--reference sampler_mrv2@VERSION=properties.quality.sampler_mrv2:NAME`. `tests/test_quality.py`
runs each on the CPU (kernels interpreted). Each is the reference's own source with one edit
(`planted`).
"""

from __future__ import annotations

from functools import partial

from properties.quality import planted
from vllm_hotpaths.sampler_mrv2 import reference


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
