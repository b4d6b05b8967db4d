"""Thinking-token budget: per-request think state, and the end marker forced into the logits.

The holder's inputs mirror vLLM's: `sync_batch(batch_update)` with `removed`, `added`
(index, params, prompt ids, live output list) and `moved` (i1, i2, direction) processed in that
order; `update_state(rows, spec)`; `apply_to_logits(logits, predict_bonus_token, spec)`. vLLM's own
`BatchUpdate`, `SamplingParams` and `MoveDirectionality` are accepted as they are; the types here
are plain stand-ins with the same attribute names.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Sequence


class InvalidThinkConfig(ValueError):
    """Marker ids or holder sizes that cannot be right (ids outside the vocabulary, ...)."""


class InvalidBudget(ValueError):
    """A `thinking_token_budget` the targeted vLLM version rejects."""


class Move(enum.Enum):
    """Same member names as vLLM's `MoveDirectionality`."""

    SWAP = "swap"
    UNIDIRECTIONAL = "unidirectional"


def is_swap(direction) -> bool:
    return getattr(direction, "name", direction) == "SWAP"


@dataclass(frozen=True)
class Params:
    thinking_token_budget: int | None


@dataclass
class BatchUpdate:
    batch_size: int
    removed: Sequence[int] = ()
    added: Sequence[tuple[int, Params, list[int] | None, list[int]]] = ()
    moved: Sequence[tuple[int, int, Move]] = field(default_factory=list)


@dataclass(frozen=True)
class ThinkConfig:
    """What a holder is built from (vLLM: `ReasoningConfig` plus the scheduler's sizes)."""

    start_ids: tuple[int, ...]
    end_ids: tuple[int, ...]
    vocab_size: int
    max_num_seqs: int
    num_spec_tokens: int = 0

    def validate(self) -> None:
        if self.vocab_size < 1 or self.max_num_seqs < 1 or self.num_spec_tokens < 0:
            raise InvalidThinkConfig(
                f"need vocab_size >= 1, max_num_seqs >= 1, num_spec_tokens >= 0; got "
                f"{self.vocab_size}, {self.max_num_seqs}, {self.num_spec_tokens}")
        for name, ids in (("start", self.start_ids), ("end", self.end_ids)):
            for token in ids:
                if isinstance(token, bool) or not isinstance(token, int) \
                        or not 0 <= token < self.vocab_size:
                    raise InvalidThinkConfig(
                        f"think {name} marker {list(ids)} has id {token!r} outside the "
                        f"vocabulary [0, {self.vocab_size})")


__all__ = ["BatchUpdate", "InvalidBudget", "InvalidThinkConfig", "Move", "Params", "ThinkConfig",
           "is_swap"]
