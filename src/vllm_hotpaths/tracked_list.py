"""A token list that tells each watcher the lowest index changed since the watcher last synced.

vLLM keeps each request's generated tokens in a plain Python list that several parties mutate in
place: appends after sampling, `-1` placeholders under async scheduling, their repair by slice
assignment, optimistic extension and trimming with `del`. A consumer that mirrors the list into a
tensor would have to rescan it to find what changed. `TrackedTokenList` records, for every
registered watcher, the lowest index any mutation other than growth at the end touched
(`UNCHANGED` if none did). A watcher that remembers the length it synced reads from
`min(mark, that length)` on: its mirror is exact for every mutation made through the list API.

Growth at the end (append, extend, +=) changes nothing a watcher synced, so it leaves the marks
alone and those stay list's own methods, at full speed: vLLM appends to every request's list each
decode step. The item assignment that repairs async placeholders runs as often, hence its inlined
mark update.

The list also keeps `seen`, an index from which no watcher needs telling: every watcher will
re-read from `min(its mark, the length it synced)`, at or below `seen`. `watch` raises it to the
length; a change below it lowers the marks, then `seen`, to the changed index. A change at or past
`seen` is growth too and lowers no mark. vLLM appends each step's placeholder after the watchers
synced and repairs it before they sync again: that repair is past `seen`, so a bulk repair may
assign it with `list.__setitem__` once `seen` says so.
"""

from __future__ import annotations

import sys
from typing import Iterable, SupportsIndex

UNCHANGED = sys.maxsize  # a watcher's mark when nothing it synced has changed


class TrackedTokenList(list):
    __slots__ = ("_marks", "seen")

    def __init__(self, iterable: Iterable[int] = ()) -> None:
        super().__init__(iterable)
        # watcher key -> lowest index changed in place or removed since that watcher last synced
        # (changes at or past `seen` excepted).
        self._marks: dict[int, int] = {}
        self.seen = 0  # no watcher re-reads from past it (module docstring)

    def __reduce_ex__(self, protocol):
        return (TrackedTokenList, (list(self),))

    # -- watcher interface ---------------------------------------------------------------
    def watch(self, key: int) -> None:
        """Start (or restart) watching: the watcher is in sync with the whole list now."""
        self._marks[key] = UNCHANGED
        if len(self) > self.seen:
            self.seen = len(self)

    def unwatch(self, key: int) -> None:
        self._marks.pop(key, None)

    def dirty_from(self, key: int) -> int | None:
        """Lowest index changed in place or removed since `watch(key)` (`UNCHANGED` if the list
        only grew at the end or changed at or past `seen`); None if `key` is not watching."""
        return self._marks.get(key)

    def _touch(self, index: int) -> None:
        if index >= self.seen:
            return
        self.seen = index
        marks = self._marks
        for key, mark in marks.items():
            if index < mark:
                marks[key] = index

    # -- mutators (append, extend and += are list's own: see the module docstring) ------------
    def __setitem__(self, key, value) -> None:
        marks = self._marks
        if not marks:
            return list.__setitem__(self, key, value)
        n = len(self)
        if type(key) is slice:
            start, _, step = key.indices(n)
            lowest = 0 if step < 0 else start  # a reversed slice can touch anything up to start
        else:
            lowest = key.__index__()
            if lowest < 0:
                lowest += n
        list.__setitem__(self, key, value)
        if lowest < 0:
            lowest = 0
        if lowest < self.seen:
            self.seen = lowest
            for watcher, mark in marks.items():
                if lowest < mark:
                    marks[watcher] = lowest

    def __delitem__(self, key) -> None:
        marks = self._marks
        if not marks:
            return list.__delitem__(self, key)
        n = len(self)
        if type(key) is slice:
            start, _, step = key.indices(n)
            lowest = 0 if step < 0 else start
        else:
            lowest = key.__index__()
            if lowest < 0:
                lowest += n
        list.__delitem__(self, key)
        self._touch(max(lowest, 0))

    def __imul__(self, count: SupportsIndex):
        list.__imul__(self, count)
        if self._marks:
            self._touch(0)
        return self

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
