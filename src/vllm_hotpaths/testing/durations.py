"""Both workers busy to the end: xdist steals work, and the longest tests go first.

xdist's default scheduler hands out tests in collection order and never takes back one it has
queued on a worker: a long test queued last keeps one worker busy while the others have nothing
left (in the 0.22.0 gate, 730 s of 1,588 s). Where pytest runs with `-n` and names no `--dist`,
this plugin picks `--dist worksteal`: a worker with nothing left takes half of another's queue,
from its end. The tests are then ordered by their recorded seconds, longest first, and dealt in
turn to the workers' initial shares (worksteal splits the collection into one run of tests per
worker), so each share starts with its long tests and ends with short ones that can be taken.
`ci/durations.json` holds the seconds (setup, call and teardown) of each test of a
`CI=true pytest -n auto --store-durations` run; a test it does not name (a new one) is placed as
its median. Only xdist runs are reordered; the seconds only decide the order, never what runs.
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


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which makes "no" into "load" under -n
def pytest_cmdline_main(config):
    if config.pluginmanager.hasplugin("xdist") and config.getoption("numprocesses", None) \
            and config.getoption("dist") == "no":
        config.option.dist = "worksteal"


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
    longest_first = sorted(items, key=lambda item: -seconds.get(item.nodeid, guess))  # stable
    workers = max(1, int(getattr(config, "workerinput", {}).get("workercount", 1)))
    items[:] = [item for share in range(workers) for item in longest_first[share::workers]]


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
