"""Longest tests first: each test's recorded seconds order what pytest-xdist hands its workers.

xdist gives out tests in collection order. A long test left for last keeps one worker busy while
the others have nothing to do (in the 0.22.0 gate, 730 s of 1,588 s: the sampling pass's rows ran
last, one after another). Sorted by their recorded seconds, longest first, the long tests start at
once and the short ones fill the end. `ci/durations.json` holds the seconds (setup, call and
teardown) of each test of a `CI=true pytest -n auto --store-durations` run; a test it does not
name (a new one) is placed as its median. Only xdist runs are reordered; the seconds only decide
the order, never what runs.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

FILE = Path("ci") / "durations.json"


def pytest_addoption(parser):
    parser.getgroup("vllm-hotpaths").addoption(
        "--store-durations", action="store_true",
        help=f"write each test's seconds into {FILE}, which orders the tests of an xdist run, longest first")


def distributed(config) -> bool:
    return hasattr(config, "workerinput") or config.getoption("dist", "no") != "no"


def recorded(config) -> dict[str, float]:
    try:
        return json.loads((config.rootpath / FILE).read_text())
    except (OSError, ValueError):
        return {}


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    if not distributed(config):
        return
    seconds = recorded(config)
    guess = statistics.median(seconds.values()) if seconds else 0.0
    items.sort(key=lambda item: -seconds.get(item.nodeid, guess))  # stable: ties keep their order


class Recorder:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report):
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration

    def pytest_sessionfinish(self, session):
        path = session.config.rootpath / FILE
        merged = {**recorded(session.config), **{k: round(v, 1) for k, v in self.seconds.items()}}
        path.write_text(json.dumps(dict(sorted(merged.items())), indent=0) + "\n")


def pytest_configure(config):
    if config.getoption("store_durations") and not hasattr(config, "workerinput"):  # workers report to the controller
        config.pluginmanager.register(Recorder(), "store-durations")
