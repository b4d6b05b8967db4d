"""Deliberately wrong Model Runner V2 rejection sampling references: each must fail conformance.

There is no fast path to plant a bug in, so each is checked in place of the frozen reference of
the installed vLLM (`reference_version()`, e.g. 0.31.0 under vLLM 0.33):
`pytest properties/test_conformance.py -k "rejection_mrv2 and cpu"
--reference rejection_mrv2@VERSION=properties.quality.rejection_mrv2:NAME`. `tests/test_quality.py`
runs each on the CPU (kernels interpreted) under the installed vLLM. Each is the reference's own
source with one edit (`planted`).
"""

from __future__ import annotations

from functools import partial

from properties.quality import planted
from vllm_hotpaths.rejection_mrv2 import reference


def reference_version() -> str:
    return planted.reference_version("rejection_mrv2")


_planted = partial(planted.planted, "rejection_mrv2", reference)


# `>=` for `>`: a draft both models give probability 0 (-inf = -inf) is accepted.
GreaterOrEqual = _planted("GreaterOrEqual", [
    ("accepted = (t_lp > tl.log(u) + d_lp) & valid", "accepted = (t_lp >= tl.log(u) + d_lp) & valid")])

# `>=` for `>` only where both sides are finite: an exact tie (log p = log u + log q) is accepted,
# a draft both models rule out still is not. Only the fp32 acceptance uniform of 0.25 on meets a
# fp32 log probability exactly (`SINCE`).
GreaterOrEqualWhereFinite = _planted("GreaterOrEqualWhereFinite", [
    ("accepted = (t_lp > tl.log(u) + d_lp) & valid",
     "accepted = ((t_lp > tl.log(u) + d_lp) | ((t_lp == tl.log(u) + d_lp) & (t_lp > float(\"-inf\")))) & valid")])

# Verification goes on past a rejection, and the token is resampled at the last rejected row.
ResampleAtLastRejected = _planted("ResampleAtLastRejected", [
    ("            going = accepted\n            accepted_count += accepted\n",
     "            accepted_count = tl.where(accepted, accepted_count + (i == accepted_count), i)\n")])

# Equal maxima go to the higher lane (upstream's block max keeps the lowest).
TiesToHigherLane = _planted("TiesToHigherLane", [
    ("        top, lane = tl.max(x, axis=0, return_indices=True)\n",
     "        top = tl.max(x, axis=0)\n"
     "        lane = tl.max(tl.where(x == top, tl.arange(0, BLOCK), -1), axis=0)\n"),
    ("    top, lane = tl.max(residual, axis=0, return_indices=True)\n",
     "    top = tl.max(residual, axis=0)\n"
     "    lane = tl.max(tl.where(residual == top, tl.arange(0, BLOCK), -1), axis=0)\n")])

# The Gumbel noise keyed by the next row's position (the wrong counter).
NoiseAtNextPosition = _planted("NoiseAtNextPosition", [
    ("        pos = tl.load(pos_ptr + row)\n        if GUMBEL_FP64:",
     "        pos = tl.load(pos_ptr + row) + 1\n        if GUMBEL_FP64:")])


# name -> the devices it shows on (law conformance, the installed vLLM's reference)
MUTANTS = {
    "GreaterOrEqual": "cpu cuda",
    "GreaterOrEqualWhereFinite": "cpu cuda",
    "ResampleAtLastRejected": "cpu cuda",
    "TiesToHigherLane": "cpu cuda",
    "NoiseAtNextPosition": "cpu cuda",
}
# the first release whose reference can show a planted bug (older ones are skipped)
SINCE = {"GreaterOrEqualWhereFinite": "0.25.0"}
