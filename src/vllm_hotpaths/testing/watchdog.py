"""A time limit per test, so that a hanging candidate fails its own test and the run goes on.

The limit interrupts the test with SIGALRM and raises `TimedOut`. It is a BaseException on
purpose: Hypothesis shrinks any Exception (and pytest's `fail`) by replaying the example, which
would hang again with no alarm left; a BaseException ends the test at once. The case running at
that moment is the failure's fixture, as for any other failure.

Code that never returns to Python (a native call that does not finish) cannot be interrupted
this way; the limit then fires as soon as it returns.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

# Seconds per test, by Hypothesis profile: about ten times the slowest property measured under
# `ci` (109 s; docs/gate.md names the command), scaled by each profile's examples; 0: no limit.
DEFAULT_SECONDS = {"smoke": 600, "dev": 600, "ci": 1200, "quality": 2400, "gate": 7200, "replay": 600, "soak": 0}


class TimedOut(BaseException):
    def __init__(self, seconds: float) -> None:
        super().__init__(f"timed out after {seconds:g} s")
        self.seconds = seconds


def default_seconds(profile: str) -> float:
    return DEFAULT_SECONDS.get(profile, DEFAULT_SECONDS["gate"])


@contextmanager
def limit(seconds: float):
    """Raise TimedOut in this (main) thread once `seconds` have passed; 0 or less: no limit."""
    usable = seconds > 0 and hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return

    def expire(signum, frame):
        raise TimedOut(seconds)

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
