"""Known divergences between a frozen reference and the installed vLLM.

The only way a conformance property may accept a difference between a reference and upstream is
an entry here: the hot path, the vLLM versions affected, the upstream issue or PR, and a predicate
that picks out the affected inputs. For an affected input the property requires the difference
(an entry whose divergence has disappeared fails, so fixed upstream bugs leave the ledger); every
other input must agree exactly.
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

    def covers(self, hotpath: str, vllm_version: str, case: object) -> bool:
        if hotpath != self.hotpath or version_key(vllm_version) < version_key(self.first_version):
            return False
        if self.last_version is not None and version_key(vllm_version) > version_key(self.last_version):
            return False
        return bool(self.affects(case))


# Penalties in 0.22.0 have no known divergence from the reference; later hot paths add theirs.
LEDGER: list[KnownDivergence] = []


class LedgerEntryStale(AssertionError):
    """A ledger entry predicted a divergence that did not happen."""


def check_conformance(hotpath: str, vllm_version: str, case: object, compare: Callable[[], None]):
    """Run `compare` (raises AssertionError on a difference) under the ledger's rule.

    Returns the entry that excused a difference, or None when reference and vLLM agreed.
    """
    entries = [e for e in LEDGER if e.covers(hotpath, vllm_version, case)]
    if not entries:
        compare()
        return None
    try:
        compare()
    except AssertionError:
        return entries[0]
    raise LedgerEntryStale(
        f"ledger entry {entries[0].link} ({entries[0].summary}) expects vLLM {vllm_version} to "
        f"diverge on this input, but it agreed: remove or narrow the entry"
    )
