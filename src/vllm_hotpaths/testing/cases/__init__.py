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
