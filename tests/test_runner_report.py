"""The gate's runner-change section: counts carried from the law to the rows, merged across
processes, and the section's text and JSON (rows built by hand; no property runs)."""

import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

from vllm_hotpaths.testing import drift, ledger, runner_report
from vllm_hotpaths.testing.gate import GateOptions, GatePlugin, Row, write_reports
from vllm_hotpaths.testing.laws import CaseLog

ROOT = Path(__file__).resolve().parents[1]
VERSION = "0.22.0"
BY_LINK = {e.link: e for e in ledger.runner_changes(VERSION)}
SIGNED_ZERO = next(link for link in BY_LINK if link.endswith("#L133"))
FMA = next(link for link in BY_LINK if link.endswith("#L179"))
SAMPLING = next(e.link for e in BY_LINK.values() if e.hotpath == "sampling")


def row(device="cpu", counts=None, examples=0, outcomes=("passed",), shown=None):
    r = Row("penalties_mrv2", "runner-change", device, "reference@0.22.0 (penalties, v1)", list(outcomes))
    r.add_counts(counts or {}, examples, shown or {})
    r.excused.update(link for link, n in (counts or {}).items() if n)
    return r


def item_of(items, link):
    return next(item for item in items if item["link"] == link)


# -- counting in the law ----------------------------------------------------------------------


class Entry(SimpleNamespace):
    pass


class ScriptedChecks:
    """A law over cases 0..n-1 whose differences are scripted: case i differs where `covers[i]`
    names entries; `check` plays every case through the judge, as `Checks.check` does."""

    def __init__(self, covers: dict[int, list[str]], n: int, judgments: int = 1) -> None:
        self.covers, self.n, self.judgments = covers, n, judgments  # judgments per case (stateful laws)

    def check(self, expected, actual, device, log, judge, key=""):
        for case in range(self.n):
            log.record(case)

            def compare(case=case):
                if self.covers.get(case):
                    raise AssertionError(f"case {case} differs")

            for _ in range(self.judgments):
                judge(case, compare)


def plainly(case, compare):
    compare()
    return False


def show(covers, n, one_per_case=True, judgments=1):
    checks, log = ScriptedChecks(covers, n, judgments), CaseLog(ROOT / "properties" / "regressions")
    shown = drift.show_named_differences(
        checks, None, None, "cpu", log, key="", plain_judge=plainly,
        named=lambda case, failure: [Entry(link=link) for link in covers.get(case, [])],
        unnamed="unnamed", one_per_case=one_per_case)
    return shown, log


def test_each_example_counts_for_every_shown_entry_that_covers_it():
    # case 1 alone shows "a", case 3 alone shows "b"; case 4 is covered by both
    shown, log = show({1: ["a"], 3: ["b"], 4: ["a", "b"], 6: ["a"]}, n=8)
    assert set(shown) == {"a", "b"}
    assert log.excused_counts == Counter({"a": 3, "b": 2})
    assert log.counted_examples == 8  # the last, complete run only (earlier runs stopped at a difference)
    assert log.examples > 8


def test_an_example_judged_several_times_counts_once():
    _, log = show({1: ["a"], 3: ["a", "b"]}, n=5, one_per_case=False, judgments=3)
    assert log.excused_counts == Counter({"a": 2, "b": 1}) and log.counted_examples == 5


def test_an_entry_covering_only_cases_judged_by_another_shown_one_is_not_counted():
    # with one entry per case, "b" is never shown: its only case is judged by "a" (shown by case 0)
    shown, log = show({0: ["a"], 2: ["a", "b"]}, n=4)
    assert set(shown) == {"a"}
    assert log.excused_counts == Counter({"a": 2})


# -- rows: from the report's user properties, and across processes ------------------------------


def report(counts, examples, shown, outcome="passed"):
    props = [("hotpath", "penalties_mrv2"), ("check", "runner-change"), ("device", "cpu"),
             ("implementation", "reference@0.22.0 (penalties, v1)"), ("examples", examples + 5),
             ("excused", sorted(counts)), ("excused_counts", counts), ("counted_examples", examples),
             ("shown_fixtures", shown)]
    return SimpleNamespace(user_properties=props, when="call", outcome=outcome, failed=False,
                           nodeid="properties/test_runner_change.py::t[penalties_mrv2-cpu]", longrepr=None,
                           start=0.0, stop=1.0, duration=1.0)


def test_counts_merge_across_workers_and_the_interpreted_process():
    plugin = GatePlugin()
    plugin._say = lambda line: None
    plugin.pytest_runtest_logreport(report({SIGNED_ZERO: 4}, 40, {SIGNED_ZERO: "a.json"}))
    plugin.pytest_runtest_logreport(report({SIGNED_ZERO: 1, FMA: 2}, 20, {FMA: "b.json"}))
    (merged,) = plugin.rows.values()
    # the interpreted process's rows come back as JSON
    merged.merge(json.loads(json.dumps(row(counts={SIGNED_ZERO: 3}, examples=30, shown={SIGNED_ZERO: "c.json"})
                                       .as_json())))
    assert merged.excused_counts == Counter({SIGNED_ZERO: 8, FMA: 2})
    assert merged.counted_examples == 90
    assert merged.shown_fixtures == {SIGNED_ZERO: "a.json", FMA: "b.json"}
    as_json = merged.as_json()
    assert as_json["excused_counts"] == {SIGNED_ZERO: 8, FMA: 2}
    assert as_json["counted_examples"] == 90


def test_a_row_of_an_older_report_without_counts_still_merges():
    r = row(counts={SIGNED_ZERO: 1}, examples=10)
    older = {k: v for k, v in row().as_json().items()
             if k not in ("excused_counts", "counted_examples", "shown_fixtures")}
    r.merge(older)
    assert r.excused_counts == Counter({SIGNED_ZERO: 1}) and r.counted_examples == 10


# -- the section -------------------------------------------------------------------------------


def section(rows, selected=("penalties_mrv2",), version=VERSION, left_out=None):
    items = runner_report.entries(rows, version, ROOT, list(selected))
    return items, runner_report.lines(items, version, left_out)


def test_met_not_met_and_skipped_device():
    rows = [row("cpu", {SIGNED_ZERO: 7}, 150, shown={SIGNED_ZERO: "fixtures/new.json"}),
            row("cuda", outcomes=("skipped",))]
    items, text = section(rows)
    assert text[0] == "What changes for your sampled tokens when vLLM 0.22.0 runs your model on MRv2"
    met = item_of(items, SIGNED_ZERO)
    assert met["counts"] == {"cpu": {"met": 7, "examples": 150}, "cuda": None}
    assert met["fixture"] == "fixtures/new.json"  # written in this run
    line = next(line for line in text if SIGNED_ZERO in line)
    assert line.startswith("- penalties_mrv2: a request whose penalties are all neutral but a -0.0")
    assert "How often: 7 of 150 examples on cpu; not checked: no cuda rows." in line
    assert "Fixture: fixtures/new.json." in line
    cuda_only = item_of(items, FMA)  # a CUDA-only entry on a run whose CUDA row skipped
    assert cuda_only["counts"] == {"cuda": None}
    assert cuda_only["fixture"] == "properties/regressions/penalties_mrv2/SlotProgram-5a7e3efb2f46.json"
    assert "How often: not checked: no cuda rows." in next(line for line in text if FMA in line)


def test_an_entry_not_met_names_the_committed_fixture():
    items, text = section([row("cpu", {}, 150), row("cuda", {FMA: 2}, 100)])
    zero = item_of(items, SIGNED_ZERO)
    assert zero["counts"] == {"cpu": {"met": 0, "examples": 150}, "cuda": {"met": 0, "examples": 100}}
    assert zero["fixture"] == "properties/regressions/penalties_mrv2/SlotProgram-1b188dbad21f.json"
    assert ("How often: not met in this run; 0 of 150 examples on cpu; 0 of 100 examples on cuda."
            in next(line for line in text if SIGNED_ZERO in line))
    assert "How often: 2 of 100 examples on cuda." in next(line for line in text if FMA in line)


def test_an_entry_outside_the_registry_is_listed_as_measured_end_to_end():
    items, text = section([row("cpu", {}, 10)])
    sampling = item_of(items, SAMPLING)
    assert sampling["hotpath"] == "sampling" and sampling["counts"] is None and sampling["fixture"] is None
    assert sampling["measured"] == "measured outside the properties (docs/e2e.md)"
    line = next(line for line in text if SAMPLING in line)
    assert line.startswith("- sampling: random sampling noise")
    assert line.endswith(f"How often: measured outside the properties (docs/e2e.md). {SAMPLING}")
    assert len(text) == 2 + len(ledger.runner_changes(VERSION))


def test_a_run_without_mrv2_hot_paths_says_which_option_left_them_out():
    v1_only = GateOptions(profile="smoke", root=ROOT, report_dir=ROOT, runner="v1")
    assert runner_report.left_out(v1_only) == "--runner v1"
    named = GateOptions(profile="smoke", root=ROOT, report_dir=ROOT, hotpaths=["penalties"])
    assert runner_report.left_out(named) == "--hotpath penalties"
    both = GateOptions(profile="smoke", root=ROOT, report_dir=ROOT)
    assert runner_report.left_out(both) is None
    _, text = section([], selected=v1_only.selected_hotpaths(), left_out="--runner v1")
    assert text[2:] == ["- not checked: --runner v1 leaves out every Model Runner V2 hot path"]


def test_without_vllm_the_section_says_so():
    items, text = section([], version=None)
    assert items == []
    assert text[0].endswith("when vLLM (not installed) runs your model on MRv2")
    assert text[2:] == ["- vLLM is not installed: no runner change was checked"]


def test_the_markdown_report_carries_the_section(tmp_path):
    rows = [row("cpu", {SIGNED_ZERO: 7}, 150)]
    items, text = section(rows)
    env = dict.fromkeys(("date", "commit", "python", "torch", "triton", "hypothesis", "cuda_device"), "x")
    report = {"vllm_version": VERSION, "profile": "smoke", "seed": 1, "devices": ["cpu"], "duration_s": 1.0,
              "verdict": "PASS", "partial": False, "problems": [], "runner_choice": [], "command": "gate",
              "environment": env, "results": [r.as_json() for r in rows], "runner_changes": items}
    write_reports(report, rows, tmp_path, text)
    md = (tmp_path / "gate-report.md").read_text()
    assert f"## {runner_report.title(VERSION)}" in md
    assert "How often: 7 of 150 examples on cpu; not checked: no cuda rows." in md
    written = json.loads((tmp_path / "gate-report.json").read_text())["runner_changes"]
    assert {"hotpath", "summary", "link", "devices", "counts", "fixture"} <= set(item_of(written, SIGNED_ZERO))


def test_the_results_page_carries_the_section_with_machine_folders_shortened():
    from vllm_hotpaths.testing import results

    rows = [row("cuda", {FMA: 3}, 40, shown={FMA: "/runner/out/gate/regressions/penalties_mrv2/f.json"})]
    items, _ = section(rows)
    report = {"vllm_version": VERSION, "profile": "ci", "seed": 1, "devices": ["cuda"], "verdict": "PASS",
              "command": "vllm-hotpaths gate --report-dir /runner/out/gate --suite /home/ci/repo -n 8",
              "environment": {}, "results": [r.as_json() for r in rows], "runner_changes": items}
    page = results.gate_page(report, "gate-x.json")
    assert "`vllm-hotpaths gate --report-dir OUT/gate --suite . -n 8`" in page
    assert f"## {runner_report.title(VERSION)}" in page
    fma = next(line for line in page.splitlines() if line.startswith("- penalties_mrv2") and line.endswith(FMA))
    assert "How often: 3 of 40 examples on cuda." in fma and "OUT/gate/regressions/penalties_mrv2/f.json" in fma
    assert "/runner/out" not in page and "/home/ci" not in page
