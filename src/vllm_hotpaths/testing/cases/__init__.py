"""Each hot path's cases: the plain-data schema a strategy draws (and a fixture stores), the driver
that runs a case through any implementation, and the comparison (its `Checks`)."""


def note(label: str) -> None:
    """`hypothesis.event`, tolerated outside a test (benchmarks replay programs too)."""
    try:
        from hypothesis import event
        from hypothesis.errors import InvalidArgument
    except ImportError:
        return
    try:
        event(label)
    except InvalidArgument:
        pass


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
