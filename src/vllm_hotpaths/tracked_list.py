"""A token list that tells each watcher the lowest index changed since the watcher last synced.

vLLM keeps each request's generated tokens in a plain Python list that several parties mutate in
place: appends after sampling, `-1` placeholders under async scheduling, their repair by slice
assignment, optimistic extension and trimming with `del`. A consumer that mirrors the list into a
tensor would have to rescan it to find what changed. `TrackedTokenList` records, for every
registered watcher, the lowest index any mutation touched, so a mirror can be updated from that
index on: the mirror is exact for every mutation made through the list API.
"""

from __future__ import annotations

from typing import Iterable, SupportsIndex


class TrackedTokenList(list):
    __slots__ = ("_marks",)

    def __init__(self, iterable: Iterable[int] = ()) -> None:
        super().__init__(iterable)
        # watcher key -> lowest index that may differ from what that watcher last synced.
        self._marks: dict[int, int] = {}

    def __reduce_ex__(self, protocol):
        return (TrackedTokenList, (list(self),))

    # -- watcher interface ---------------------------------------------------------------
    def watch(self, key: int) -> None:
        """Start (or restart) watching: the watcher is in sync with the whole list now."""
        self._marks[key] = len(self)

    def unwatch(self, key: int) -> None:
        self._marks.pop(key, None)

    def dirty_from(self, key: int) -> int | None:
        """Lowest index changed since `watch(key)`; None if `key` is not watching."""
        return self._marks.get(key)

    def _touch(self, index: int) -> None:
        marks = self._marks
        for key, mark in marks.items():
            if index < mark:
                marks[key] = index

    def _lowest(self, key, length: int) -> int:
        """Lowest index a mutation at `key` (int or slice) can touch in a list of `length`."""
        if isinstance(key, slice):
            start, stop, step = key.indices(length)
            return start if step == 1 else (0 if step < 0 else start)
        index = key.__index__()
        return index + length if index < 0 else index

    # -- mutators --------------------------------------------------------------------------
    def __setitem__(self, key, value) -> None:
        lowest = self._lowest(key, len(self))
        super().__setitem__(key, value)
        if self._marks:
            self._touch(max(lowest, 0))

    def __delitem__(self, key) -> None:
        lowest = self._lowest(key, len(self))
        super().__delitem__(key)
        if self._marks:
            self._touch(max(lowest, 0))

    def __iadd__(self, other: Iterable[int]):
        n = len(self)
        super().__iadd__(other)
        if self._marks:
            self._touch(n)
        return self

    def __imul__(self, count: SupportsIndex):
        super().__imul__(count)
        if self._marks:
            self._touch(0)
        return self

    def append(self, value: int) -> None:
        n = len(self)
        super().append(value)
        if self._marks:
            self._touch(n)

    def extend(self, values: Iterable[int]) -> None:
        n = len(self)
        super().extend(values)
        if self._marks:
            self._touch(n)

    def insert(self, index: SupportsIndex, value: int) -> None:
        n = len(self)
        i = index.__index__()
        i = max(0, i + n) if i < 0 else min(i, n)
        super().insert(i, value)
        if self._marks:
            self._touch(i)

    def pop(self, index: SupportsIndex = -1) -> int:
        n = len(self)
        i = index.__index__()
        value = super().pop(i)
        if self._marks:
            self._touch(i + n if i < 0 else i)
        return value

    def remove(self, value: int) -> None:
        i = self.index(value)
        super().__delitem__(i)
        if self._marks:
            self._touch(i)

    def clear(self) -> None:
        super().clear()
        if self._marks:
            self._touch(0)

    def sort(self, *args, **kwargs) -> None:
        super().sort(*args, **kwargs)
        if self._marks:
            self._touch(0)

    def reverse(self) -> None:
        super().reverse()
        if self._marks:
            self._touch(0)
