"""What the recovered-token properties compare: the ids, position by position, bit for bit.

Every id must lie in [0, V). Positions a ledger entry marks (NaN scores; near-ties between the
0.16 and 0.22 arithmetic) may differ; every other position must be equal.
"""

from __future__ import annotations

import numpy as np
import torch


def assert_in_vocab(ids: torch.Tensor, vocab_size: int, what: str) -> None:
    outside = ((ids < 0) | (ids >= vocab_size)).nonzero()
    if outside.numel():
        first = int(outside[0, 0])
        raise AssertionError(f"{what}: {outside.shape[0]} ids outside [0, {vocab_size}); first at "
                             f"position {first}: {int(ids[first])}")


def compare_ids(actual: torch.Tensor, expected: torch.Tensor, what: str,
                excusable: list[tuple[object, np.ndarray]] = ()) -> set[str]:
    """Raise on a difference outside the excusable positions; return the links of the entries
    whose positions did differ."""
    if actual.shape != expected.shape or actual.dtype != expected.dtype or actual.device != expected.device:
        raise AssertionError(f"{what}: got {actual.dtype} {list(actual.shape)} on {actual.device}, "
                             f"expected {expected.dtype} {list(expected.shape)} on {expected.device}")
    differ = (actual != expected).cpu().numpy()
    allowed = np.zeros_like(differ)
    for _, mask in excusable:
        allowed |= np.asarray(mask, dtype=bool)
    wrong = np.flatnonzero(differ & ~allowed)
    if wrong.size:
        p = int(wrong[0])
        raise AssertionError(f"{what}: {wrong.size} of {differ.size} ids differ; first at position {p}: "
                             f"got {int(actual[p])}, expected {int(expected[p])}")
    return {entry.link for entry, mask in excusable if (differ & np.asarray(mask, dtype=bool)).any()}
