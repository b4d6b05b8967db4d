"""Where the plugin takes the split-vocabulary kernel: the shapes at which its whole call beat
upstream's, measured side by side on the GPU model the engine runs on; upstream's own call
everywhere else.

`dispatch.json` (next to this module) holds, per GPU model as `torch.cuda.get_device_name()`
names it, a measured grid: requests B, largest draft count k and vocabulary V, each without and
with draft probabilities, and at each point the wall time per call of upstream's
`sample_recovered_tokens` and of the patched one, with the command, suite commit and vLLM release
that measured it (`python -m vllm_hotpaths.testing.bench.recovered_dispatch`). A call's shape
takes the fast path only where it lies inside the grid and every grid point around it (in each of
B, k and V the nearest measured value at or below it and at or above it) had the patched call
take at most 1 / MARGIN of upstream's time. A GPU model the file does not name, and every shape
outside its grid, gets upstream's call.

VLLM_HOTPATHS_RECOVERED_DISPATCH names another such file (a grid measured on one's own GPU), or
says `always`: the split kernel at every shape (vLLM's own unit tests with every patch forced in).
"""

from __future__ import annotations

import bisect
import itertools
import json
import os
from dataclasses import dataclass
from pathlib import Path

DISPATCH_FILE = Path(__file__).with_name("dispatch.json")
SETTING, ALWAYS = "VLLM_HOTPATHS_RECOVERED_DISPATCH", "always"
MARGIN = 1.05  # a point counts as won only if the patched call took at most 1/1.05 of upstream's
MAX_REMEMBERED = 4096  # decided shapes kept per GPU model (a step's shape moves with its batch)


class DispatchFileError(ValueError):
    """A dispatch file that cannot be read as one: the message names the file and the problem."""


@dataclass(frozen=True)
class Point:
    requests: int
    drafts: int
    vocab: int
    draft_probs: bool
    upstream_s: float
    fast_s: float

    @property
    def won(self) -> bool:
        return self.upstream_s >= MARGIN * self.fast_s


def _around(axis: list[int], value: int) -> tuple[int, ...] | None:
    """The measured values next to `value` (itself where measured), or None outside the axis."""
    if not axis or value < axis[0] or value > axis[-1]:
        return None
    i = bisect.bisect_left(axis, value)
    return (value,) if axis[i] == value else (axis[i - 1], axis[i])


class GpuDispatch:
    """One GPU model's measured grid and the rule above."""

    def __init__(self, gpu: str, points: list[Point]) -> None:
        self.gpu = gpu
        self.won = {(p.requests, p.drafts, p.vocab, p.draft_probs): p.won for p in points}
        self.axes = [sorted({key[i] for key in self.won}) for i in range(3)]
        self._decided: dict[tuple, bool] = {}

    def wins_anywhere(self) -> bool:
        return any(self.won.values())

    def takes_fast(self, requests: int, drafts: int, vocab: int, draft_probs: bool) -> bool:
        key = (requests, drafts, vocab, draft_probs)
        decided = self._decided.get(key)
        if decided is None:
            if len(self._decided) >= MAX_REMEMBERED:
                self._decided.clear()
            around = [_around(axis, value) for axis, value in zip(self.axes, key)]
            decided = self._decided[key] = None not in around and all(
                self.won.get((*corner, draft_probs), False) for corner in itertools.product(*around))
        return decided


@dataclass(frozen=True)
class Fixed:
    """The same answer at every shape: `always()` (the properties and the benchmarks, which compare
    the fast path) or `never(gpu)` (a GPU model, or a CPU, that no measurement names)."""

    gpu: str
    fast: bool

    def wins_anywhere(self) -> bool:
        return self.fast

    def takes_fast(self, requests: int, drafts: int, vocab: int, draft_probs: bool) -> bool:
        return self.fast


def always() -> Fixed:
    return Fixed("any", True)


def never(gpu: str) -> Fixed:
    return Fixed(gpu, False)


def setting() -> str:
    """VLLM_HOTPATHS_RECOVERED_DISPATCH as set (stripped; empty: the shipped file)."""
    return os.environ.get(SETTING, "").strip()


def load(path: Path | None = None) -> dict[str, GpuDispatch]:
    """GPU model -> its dispatch, from `path` (default: the file VLLM_HOTPATHS_RECOVERED_DISPATCH
    names, else the one this package ships)."""
    path = Path(path or (setting() if setting() not in ("", ALWAYS) else DISPATCH_FILE))
    try:
        data = json.loads(path.read_text())
        return {gpu: GpuDispatch(gpu, [_point(row) for row in entry["points"]])
                for gpu, entry in data["gpus"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise DispatchFileError(f"{path}: not a recovered-tokens dispatch file ({type(error).__name__}: {error})") \
            from error


def _point(row: list) -> Point:
    """[B, k, V, draft probs, upstream seconds, patched seconds]."""
    if len(row) != 6:
        raise ValueError(f"a point is [B, k, V, draft_probs, upstream_s, fast_s], got {row!r}")
    return Point(int(row[0]), int(row[1]), int(row[2]), bool(row[3]), float(row[4]), float(row[5]))


def for_gpu(gpu: str, path: Path | None = None) -> GpuDispatch | Fixed:
    if path is None and setting() == ALWAYS:
        return always()
    return load(path).get(gpu) or never(gpu)


def wins_on_some_gpu(path: Path | None = None) -> bool:
    if path is None and setting() == ALWAYS:
        return True
    return any(d.wins_anywhere() for d in load(path).values())
