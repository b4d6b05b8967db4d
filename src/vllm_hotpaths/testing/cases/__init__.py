"""Each hot path's cases: the plain-data schema a strategy draws (and a fixture stores), the driver
that runs a case through any implementation, and the comparison (its `Checks`)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator


_collectors: list[set[str]] = []


def note(label: str) -> None:
    """`hypothesis.event`, tolerated outside a test (benchmarks replay programs too); also added
    to every set that `collecting()` has open."""
    for seen in _collectors:
        seen.add(label)
    try:
        from hypothesis import event
        from hypothesis.errors import InvalidArgument
    except ImportError:
        return
    try:
        event(label)
    except InvalidArgument:
        pass


@contextmanager
def collecting() -> Iterator[set[str]]:
    """A set that every `note(label)` adds to while the block runs: the reach test reads it per
    example, outside Hypothesis' own statistics."""
    seen: set[str] = set()
    _collectors.append(seen)
    try:
        yield seen
    finally:
        _collectors.remove(seen)


def seeded_logits(num_rows: int, vocab_size: int, seed: int, share: float, edits, specials):
    """fp32 logits [num_rows, vocab_size] as a NumPy array: normal (scale 4) from `seed`, then a
    `share` of lanes set to values drawn from `specials`, then `edits` ((row, lane, value), rows
    and lanes taken modulo the shape) written over them."""
    import numpy as np

    rng = np.random.default_rng(seed)
    shape = (num_rows, vocab_size)
    values = (rng.standard_normal(shape) * 4).astype(np.float32)
    special = rng.random(shape) < share
    values[special] = rng.choice(np.array(specials, dtype=np.float32), size=int(special.sum()))
    for row, lane, value in edits:
        if num_rows:
            values[row % num_rows, lane % vocab_size] = value
    return values


class Ops:
    """Named fields of a program's operations. A program stores each operation as a plain tuple
    `(kind, *fields)` (the fixture format); `Ops(add="prompt output budget tracked")` gives them
    names, so readers say `op.budget`, not `op[3]`."""

    def __init__(self, **kinds: str) -> None:
        from collections import namedtuple

        self.types = {kind: namedtuple(f"{kind.title()}Op", ["kind", *fields.split()])
                      for kind, fields in kinds.items()}

    def of(self, case, kind: str) -> list:
        """The operations of `kind` in `case.ops`, with named fields (kinds without declared fields
        come back as plain tuples)."""
        found = [op for op in getattr(case, "ops", ()) if op and op[0] == kind]
        named = self.types.get(kind)
        return [named(*op) for op in found] if named else found


class NotCopyable(TypeError):
    """An implementation the checks cannot deep-copy (they read its extra state from a copy)."""


def copy_of(impl, keep=(), label: str = "the implementation"):
    """A deep copy of `impl` sharing the objects in `keep` (see `read_on_a_copy`)."""
    import copy

    try:
        return copy.deepcopy(impl, {id(obj): obj for obj in keep})
    except Exception as err:  # whatever deepcopy raises for an object it cannot copy
        raise NotCopyable(f"{label} ({type(impl).__name__}) cannot be deep-copied, which the checks need "
                          f"(they read its state from a copy, never calling it more than vLLM does): "
                          f"{type(err).__name__}: {err}") from err


def read_on_a_copy(impl, read, keep=(), label: str = "the implementation"):
    """`read(twin)`, `twin` a deep copy of `impl`: a check's extra read (a token tensor, a state
    dump, a hypothetical call), made where it cannot change `impl`'s own path. vLLM calls a hot
    path a fixed number of times per step; the checks call `impl` exactly so, and read the rest
    from copies.

    `keep`: objects the copy shares with `impl` instead of copying them (the batch's lists, which
    an implementation holds and knows by identity; a `TrackedTokenList` keeps its watchers' marks
    only this way, since a copied one starts unwatched). What the read does to them (items, marks,
    `seen`) is undone afterwards. Raises `NotCopyable` where `impl` cannot be deep-copied (an
    implementation holding a module, a stream or a compiled op defines `__deepcopy__`)."""
    from vllm_hotpaths.tracked_list import TrackedTokenList

    saved = [(obj, list(obj), dict(obj._marks) if type(obj) is TrackedTokenList else None,
              getattr(obj, "seen", None) if type(obj) is TrackedTokenList else None)
             for obj in keep if isinstance(obj, list)]
    twin = copy_of(impl, keep, label)
    try:
        return read(twin)
    finally:
        for obj, items, marks, seen in saved:
            if list(obj) != items:
                list.__setitem__(obj, slice(None), items)
            if marks is not None:
                obj._marks.clear()
                obj._marks.update(marks)
                obj.seen = seen
