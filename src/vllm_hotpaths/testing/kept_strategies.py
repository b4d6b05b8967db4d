"""Hypothesis' strategies, each built once per distinct arguments.

A state machine's rules draw at every step from strategies made of its state: `sampled_from` a
list of the live rows, a `one_of` of those. Hypothesis keeps the strategies it makes from hashable
arguments, but not one made from a list, so every step built new ones, validated them and worked
out, recursively through `one_of`, whether they can be empty: more than the draw itself cost. A
strategy is an immutable value, so equal arguments can share one object and the draws stay the same
choices. `KEPT.sampled_from(live)` is `strategies.sampled_from(live)`, kept.
"""

from __future__ import annotations

from hypothesis import strategies

LIMIT = 1 << 14  # strategies kept per function; past it the table starts again


def _key(value):
    """A key equal only for arguments that make the same strategy: 0, False and 0.0 compare equal
    (as do 0.0 and -0.0), so the type and a float's exact bits are part of it."""
    if isinstance(value, (list, tuple)):  # the rules pass lists of live rows; a list cannot be a key
        return (type(value), *map(_key, value))
    if isinstance(value, float):
        return (float, value.hex())
    return (type(value), value)


class KeptStrategies:
    """`hypothesis.strategies` with each strategy-making function's results kept by argument."""

    def __init__(self) -> None:
        self._kept: dict[str, dict] = {}

    def __getattr__(self, name: str):
        make = getattr(strategies, name)
        table = self._kept.setdefault(name, {})

        def kept(*args, **kwargs):
            key = (_key(args), _key(tuple(sorted(kwargs.items()))))
            try:
                found = table.get(key)
            except TypeError:  # an argument that cannot be a key (a dict, an array): made each time
                return make(*args, **kwargs)
            if found is None:
                if len(table) >= LIMIT:
                    table.clear()
                found = table[key] = make(*args, **kwargs)
            return found

        setattr(self, name, kept)  # later lookups skip __getattr__
        return kept


KEPT = KeptStrategies()
