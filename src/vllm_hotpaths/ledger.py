"""Known divergences between a frozen reference and the installed vLLM.

The only way a conformance property may accept a difference between a reference and upstream is
an entry here: the hot path, the vLLM versions affected, the upstream issue or PR, and a predicate
that picks out the affected inputs. For an affected input the property requires the difference
(an entry whose divergence has disappeared fails, so fixed upstream bugs leave the ledger); every
other input must agree exactly. An entry with `required=False` marks inputs whose upstream result
is not decided by the semantics (a Triton reduction order, a rounding of two arithmetics): there
the two may differ, and the property reports when they did.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from vllm_hotpaths.registry import version_key


@dataclass(frozen=True)
class KnownDivergence:
    hotpath: str
    first_version: str  # first affected vLLM version (inclusive)
    last_version: str | None  # last affected version (inclusive); None while upstream is unfixed
    link: str
    summary: str
    affects: Callable[[object], bool]  # predicate over the property's case
    fixed_in: str | None = None  # a version checked to be unaffected: the range ends before it
    required: bool = True  # False: the affected inputs may agree too
    # "divergence": upstream vs the frozen reference (conformance); "change": a deliberate
    # upstream semantic change, between the references of the versions before and from it
    kind: str = "divergence"

    def applies_to(self, hotpath: str, vllm_version: str) -> bool:
        version = version_key(vllm_version)
        if hotpath != self.hotpath or version < version_key(self.first_version):
            return False
        if self.last_version is not None and version > version_key(self.last_version):
            return False
        return self.fixed_in is None or version < version_key(self.fixed_in)

    def covers(self, hotpath: str, vllm_version: str, case: object) -> bool:
        if not self.applies_to(hotpath, vllm_version):
            return False
        affected = self.affects(case)
        return bool(affected.any() if hasattr(affected, "any") else affected)


# swap_states: both mask bugs were seen in 0.22.0 and are gone in 0.33.0; the first fixed release
# in between is not pinned down (an entry that goes stale on one says so).
LEDGER: list[KnownDivergence] = [
    KnownDivergence(
        hotpath="swap_states", first_version="0.16.0", last_version=None, fixed_in="0.33.0",
        link="https://github.com/vllm-project/vllm/pull/48419",
        summary="swap_states assigns allowed-token mask row views to each other: both rows end up "
                "with the second row's mask",
        affects=lambda case: getattr(case, "swaps_different_masks", False),
    ),
    KnownDivergence(
        hotpath="swap_states", first_version="0.16.0", last_version=None, fixed_in="0.33.0",
        link="https://github.com/vllm-project/vllm/issues/43894",
        summary="condense leaves the moved request's allowed-token mask in the vacated row; the next "
                "request without allowed ids added there inherits it",
        affects=lambda case: getattr(case, "unmasked_add_to_stale_row", False),
    ),
]


# recovered_tokens: predicates mark draft positions (one bool per position), not whole cases.
LEDGER += [
    KnownDivergence(
        hotpath="recovered_tokens", first_version="0.16.0", last_version=None, required=False,
        link="https://github.com/vllm-project/vllm/pull/44744",
        summary="a NaN score (NaN probability, or q = 0 against a zero residual) wins or loses by "
                "Triton's reduction order upstream, and past-the-vocabulary lanes could win before "
                "this PR (ids >= V); the references never let a NaN score win",
        affects=lambda case: case.nan_positions(),
    ),
    KnownDivergence(
        hotpath="recovered_tokens", first_version="0.22.0", last_version=None, required=False,
        kind="change", link="https://github.com/vllm-project/vllm/pull/34974",
        summary="0.22 scores residual * (1/q) where 0.16 divided residual / q: the two roundings "
                "pick different ids on near-ties (and where 1/q leaves fp32's normal range)",
        affects=lambda case: case.near_tie_positions(),
    ),
]


def position_entries(hotpath: str, vllm_version: str, case: object,
                     kind: str = "divergence") -> list[tuple[KnownDivergence, object]]:
    """(entry, per-position mask) for every entry of this kind, hot path and version."""
    return [(entry, entry.affects(case)) for entry in LEDGER
            if entry.kind == kind and entry.applies_to(hotpath, vllm_version)]


class LedgerEntryStale(AssertionError):
    """A ledger entry predicted a divergence that did not happen."""


def check_conformance(hotpath: str, vllm_version: str, case: object, compare: Callable[[], None]):
    """Run `compare` (raises AssertionError on a difference) under the ledger's rule.

    Returns the entry that excused a difference, or None when reference and vLLM agreed.
    """
    entries = [e for e in LEDGER if e.kind == "divergence" and e.covers(hotpath, vllm_version, case)]
    if not entries:
        compare()
        return None
    try:
        compare()
    except AssertionError:
        return entries[0]
    if not all(e.required for e in entries):
        return None
    raise LedgerEntryStale(
        f"ledger entry {entries[0].link} ({entries[0].summary}) expects vLLM {vllm_version} to "
        f"diverge on this input, but it agreed: remove or narrow the entry"
    )
