"""Upstream's semantics, frozen: which block ids a scheduler's KV cache managers hold after a
run, given the ids allocated (in order) and whether the model's KV cache needs zeroing. A held
id is taken (and handed to the model runner) only where zeroing is needed, at each step's
`schedule()`; so with zeroing nothing is held between steps in any release.

`NotKept`: vLLM 0.16.0 to 0.17.0 (no list) and 0.26.0 on (recorded only for zeroing).
`KeptUntilTaken`: vLLM 0.17.1 to 0.25.1: without zeroing, every id ever allocated.
"""

from __future__ import annotations


class NotKept:
    def held(self, allocated: list[int], zeroing: bool) -> list[int]:
        return []


class KeptUntilTaken:
    def held(self, allocated: list[int], zeroing: bool) -> list[int]:
        return [] if zeroing else list(allocated)
