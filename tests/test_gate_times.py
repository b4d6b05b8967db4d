"""The gate's times: each row's seconds (setup, call and teardown of its tests) and each worker's
idle seconds, from pytest's reports as xdist's controller receives them."""

import json
from types import SimpleNamespace

from _pytest.reports import TestReport

from vllm_hotpaths.testing.gate import GatePlugin, Row, Workers, idle_text


def report(nodeid, when, start, stop, worker=None, row=None):
    props = [("hotpath", row[0]), ("check", row[1]), ("device", "cpu"), ("implementation", "fast"),
             ("examples", 3)] if row and when == "call" else []
    made = TestReport(nodeid, ("t.py", 0, nodeid), {}, "passed", None, when, [], duration=stop - start,
                      start=start, stop=stop, user_properties=props)
    if worker:  # as xdist's controller marks a worker's report
        made.node = SimpleNamespace(gateway=SimpleNamespace(id=worker))
    return made


def test_a_worker_idle_at_the_end_is_counted_and_a_busy_one_is_not():
    workers = Workers()
    for r in (report("a", "call", 0, 10, "gw0"), report("b", "call", 0, 4, "gw1"),
              report("c", "call", 5, 6, "gw1")):  # gw1: idle 4-5 and 6-10
        workers.add(r)
    assert workers.idle() == {"gw0": 0.0, "gw1": 5.0}
    assert idle_text(workers.idle()) == "gw0 0 s, gw1 5 s"


def test_overlapping_reports_of_one_worker_are_counted_once():
    workers = Workers()
    for r in (report("a", "setup", 0, 2), report("a", "call", 1, 8), report("a", "teardown", 9, 10)):
        workers.add(r)
    assert workers.idle() == {"main": 1.0}


def test_a_rows_seconds_include_its_tests_setup_and_teardown():
    plugin = GatePlugin()
    plugin.pytest_runtest_logreport(report("t1", "setup", 0, 2, "gw0"))
    plugin.pytest_runtest_logreport(report("t1", "call", 2, 7, "gw0", row=("penalties", "equivalence")))
    plugin.pytest_runtest_logreport(report("t1", "teardown", 7, 8, "gw0"))
    plugin.pytest_runtest_logreport(report("t2", "call", 0, 3, "gw1", row=("penalties", "equivalence")))
    (row,) = plugin.rows.values()
    assert row.seconds == 11
    assert row.as_json()["seconds"] == 11
    merged = Row("penalties", "equivalence", "cpu", "fast")
    merged.merge(row.as_json())
    merged.merge(row.as_json())
    assert merged.seconds == 22
    assert plugin.workers.idle() == {"gw0": 0.0, "gw1": 5.0}


def test_xdist_runs_take_the_longest_recorded_tests_first_and_unrecorded_ones_as_their_median(tmp_path):
    """Sorted by seconds (an unrecorded test as their median), then dealt to the workers' shares."""
    from vllm_hotpaths.testing import durations

    (tmp_path / "ci").mkdir()
    (tmp_path / durations.FILE).write_text('{"a": 1.0, "b": 30.0, "c": 5.0}')
    items = [SimpleNamespace(nodeid=n) for n in ("a", "new", "b", "c")]
    alone = SimpleNamespace(rootpath=tmp_path, getoption=lambda name, default=None: "no")
    durations.pytest_collection_modifyitems(alone, items)
    assert [i.nodeid for i in items] == ["a", "new", "b", "c"]  # no xdist: as collected
    worker = SimpleNamespace(rootpath=tmp_path, workerinput={"workercount": 1},
                             getoption=lambda name, default=None: "worksteal")
    durations.pytest_collection_modifyitems(worker, items)
    assert [i.nodeid for i in items] == ["b", "new", "c", "a"]
    # two workers: worksteal's two initial shares, each longest first, of about equal length
    worker.workerinput["workercount"] = 2
    durations.pytest_collection_modifyitems(worker, items)
    assert [i.nodeid for i in items] == ["b", "c", "new", "a"]


def test_stored_durations_add_a_tests_phases_and_keep_tests_that_did_not_run(tmp_path):
    from vllm_hotpaths.testing import durations

    (tmp_path / "ci").mkdir()
    (tmp_path / durations.FILE).write_text('{"old": 7.0, "t": 1.0}')
    recorder = durations.Recorder()
    for r in (report("t", "setup", 0, 1.25), report("t", "call", 1.25, 4), report("t", "teardown", 4, 4.5)):
        recorder.pytest_runtest_logreport(r)
    recorder.pytest_sessionfinish(SimpleNamespace(config=SimpleNamespace(rootpath=tmp_path)))
    assert json.loads((tmp_path / durations.FILE).read_text()) == {"old": 7.0, "t": 4.5}
