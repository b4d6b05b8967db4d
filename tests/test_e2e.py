"""`vllm-hotpaths e2e` without a GPU: the batches it builds, how it compares and judges the two
sides, and its refusals. (The engine runs themselves need a GPU; their results are in the README.)"""

import json

import pytest

from vllm_hotpaths.testing import e2e

MARKERS = e2e.DUMMY_MARKERS


def side(batches, patched, change=None, drafts=(12, 3)):
    """A side's results as the engine processes return them: each request's ids, optionally changed."""
    out = {"vllm": "0.22.0", "device": "GPU", "patched": patched, "batches": {}, "drafts": list(drafts)}
    for batch in batches:
        ids = [[7] * p["max_tokens"] for p in batch.params]
        if batch.name == "thinking budget":  # the budget's end marker where each budget ends
            for prompt, params, row in zip(batch.prompts, batch.params, ids):
                budget = params["thinking_token_budget"]
                if budget is not None and budget >= 0 and prompt[-1] == MARKERS[0][-1]:
                    row[budget:budget + len(MARKERS[1])] = MARKERS[1]
        if change == batch.name:
            ids[4][5] += 1
        out["batches"][batch.name] = {"seconds": [2.0], "tokens": [sum(map(len, ids))], "ids": ids}
    return out


BELOW = min(MARKERS[0] + MARKERS[1])


def engines():
    """The batches of each engine, as `vllm-hotpaths e2e` builds them (small sizes)."""
    return [e2e.main_batches(MARKERS, BELOW, 14, 12, 6, [30, 50]), e2e.speculative_batches(BELOW, 6, 12)]


@pytest.fixture
def batches():
    return [batch for engine in engines() for batch in engine]


def judged(batches, upstream, plugin):
    """Compared engine by engine, as `run` does: only the speculative engine reports drafts."""
    rows = []
    for engine in engines():
        names = {batch.name for batch in engine}
        a, b = ({**s, "batches": {k: v for k, v in s["batches"].items() if k in names}} for s in (upstream, plugin))
        if engine[0].name != "speculative":
            del a["drafts"], b["drafts"]
        rows += e2e.compare(engine, a, b, MARKERS)
    return e2e.report(rows, upstream, plugin, [30, 50])


def test_identical_sides_pass_and_the_report_names_what_was_patched(batches):
    text, ok = judged(batches, side(batches, {}), side(batches, {"penalties": ["apply_all_penalties"]}))
    assert ok, text
    assert "plugin patched: penalties (apply_all_penalties)" in text
    assert "DIFFERENT" not in text and "FAIL" not in text


@pytest.mark.parametrize("name", ["greedy", "seeded random", "penalties", "presence 1.5 @50", "thinking budget",
                                  "speculative"])
def test_one_changed_token_fails_and_is_located(batches, name):
    text, ok = judged(batches, side(batches, {}), side(batches, {"penalties": []}, change=name))
    assert not ok
    assert f"| {name} |" in text and "DIFFERENT: request 4, token 5" in text, text


def test_a_plugin_that_installed_nothing_fails(batches):
    text, ok = judged(batches, side(batches, {}), side(batches, {}))
    assert not ok and "the plugin installed nothing" in text


def test_a_patched_upstream_side_fails(batches):
    text, ok = judged(batches, side(batches, {"penalties": []}), side(batches, {"penalties": []}))
    assert not ok and "the upstream side was patched" in text


def test_a_thinking_batch_that_forced_nothing_fails(batches):
    upstream = side(batches, {})
    upstream["batches"]["thinking budget"]["ids"] = [[7] * 12 for _ in range(14)]
    plugin = json.loads(json.dumps(upstream))
    plugin["patched"] = {"think_budget": []}
    text, ok = judged(batches, upstream, plugin)
    assert not ok and "the budget was not exercised" in text


def test_a_speculative_batch_without_drafts_fails(batches):
    text, ok = judged(batches, side(batches, {}, drafts=(0, 0)), side(batches, {"penalties": []}, drafts=(0, 0)))
    assert not ok and "the rejection sampler did not run" in text
    text, ok = judged(batches, side(batches, {}), side(batches, {"penalties": []}))
    assert ok and "draft tokens proposed: 12, accepted: 3" in text, text


def test_repeated_runs_report_medians_and_each_pair():
    batches = engines()[0]
    upstream, plugin = side(batches, {}), side(batches, {"penalties": []})
    for name, seconds in (("no penalty @50", [1.0, 3.0, 2.0]), ("presence 1.5 @50", [2.0, 2.0, 8.0])):
        tokens = plugin["batches"][name]["tokens"][0]
        plugin["batches"][name].update(seconds=seconds, tokens=[tokens] * 3)
    del upstream["drafts"], plugin["drafts"]
    rows = e2e.compare(batches, upstream, plugin, MARKERS)
    text, ok = e2e.report(rows, upstream, plugin, [30, 50])
    assert ok, text
    row = next(r for r in rows if r["batch"] == "presence 1.5 @50")
    assert row["plugin_tok_s"] == row["tokens"] / 2.0 and row["upstream_tok_s"] == row["tokens"] / 2.0
    # medians 2.0 s and 2.0 s: 1.00x; run by run 2/1, 2/3, 8/2 seconds
    assert "1.00x with the plugin (medians; run by run 2.00x, 0.67x, 4.00x)" in text, text
    assert f"({row['tokens'] / 8.0:,.0f}-{row['tokens'] / 2.0:,.0f}, 3 runs)" in text


def test_repeats_alternate_the_order_of_the_timed_batches():
    batches = [{"name": n, "timed": t} for n, t in (("greedy", False), ("a", True), ("b", True))]
    names = [b["name"] for b in e2e.run_order(batches, 4)]
    assert names == ["greedy", "a", "b", "b", "a", "a", "b", "b", "a"]
    assert e2e.run_order(batches, 1) == batches


def test_forced_ends_counts_requests_in_a_think_block_whose_budget_ended():
    start, end = MARKERS
    batch = e2e.Batch("t", [[1, *start], [1, *start], [1], [1, *start]],
                      [{"thinking_token_budget": 2}, {"thinking_token_budget": 0}, {"thinking_token_budget": 0},
                       {"thinking_token_budget": None}])
    outputs = [[5, 5, *end, 5], [5, *end], [*end], [*end]]
    assert e2e.forced_ends(batch, outputs, MARKERS) == 1  # row 1 misses (end at 1), rows 2-3 not eligible


def test_first_difference():
    assert e2e.first_difference([[1, 2], [3]], [[1, 2], [3]]) is None
    assert e2e.first_difference([[1, 2], [3, 4]], [[1, 2], [3, 5]]) == "request 1, token 1: [4] vs [5] (lengths 2, 2)"
    assert e2e.first_difference([[1, 2]], [[1, 2, 3]]) == "request 0, token 2: [] vs [3] (lengths 2, 3)"
    assert e2e.first_difference([[1]], [[1], [2]]) == "1 requests vs 2"


def test_the_batches_cover_every_case_and_are_the_same_each_time(batches):
    again = [batch for engine in engines() for batch in engine]
    assert [b.__dict__ for b in again] == [b.__dict__ for b in batches]
    names = [b.name for b in batches]
    assert names == ["greedy", "seeded random", "penalties", "thinking budget", "no penalty @30",
                     "presence 1.5 @30", "no penalty @50", "presence 1.5 @50", "speculative"]
    assert all(0 <= t < BELOW for b in batches if b.name != "thinking budget" for p in b.prompts for t in p)
    assert len({p["max_tokens"] for p in batches[0].params}) > 1, "equality rows all stop together: no condense"
    penalized = batches[2].params
    for key, neutral in (("presence_penalty", 0.0), ("frequency_penalty", 0.0), ("repetition_penalty", 1.0)):
        alone = [p for p in penalized if p[key] != neutral and all(
            p[k] == n for k, n in (("presence_penalty", 0.0), ("frequency_penalty", 0.0), ("repetition_penalty", 1.0))
            if k != key)]
        assert alone, f"no request with {key} alone"
    assert {p["temperature"] for p in penalized} == {0.0, 1.0}
    assert all(p["seed"] is not None for p in batches[1].params)
    assert [b.timed for b in batches] == [False] * 4 + [True] * 4 + [False]
    timed = [b for b in batches if b.timed]
    assert all(len(b.prompts) == 6 and b.prompts == timed[2 * (i // 2)].prompts for i, b in enumerate(timed))
    assert all("thinking_token_budget" not in p for b in timed for p in b.params)
    thinking = batches[3]
    assert {p["thinking_token_budget"] for p in thinking.params} >= {0, None, -1}
    assert sum(p[-1] == MARKERS[0][-1] for p in thinking.prompts) > len(thinking.prompts) // 2
    speculative = batches[-1]
    assert all(p[:4] == p[4:8] for p in speculative.prompts), "ngram lookup needs repeats in the prompt"
    assert {p["temperature"] for p in speculative.params} == {0.0, 1.0}


class FakeProcess:
    """Stands in for `e2e.EngineProcess`: records what the orchestration asks, in order."""

    log: list = []

    def __init__(self, spec, side, hotpaths, repeat, folder, wait_for_timed):
        self.label, self.side = spec["label"], side
        self.log.append(("start", self.label, side, wait_for_timed))

    def wait_untimed(self, timeout):
        self.log.append(("untimed", self.label, self.side))

    def finish(self, timeout):
        self.log.append(("finish", self.label, self.side))
        return {"side": self.side}

    def stop(self):
        pass


SPECS = {"main": {"label": "main", "batches": [{"timed": False}, {"timed": True}]},
         "speculative": {"label": "speculative", "batches": [{"timed": False}]}}


def test_side_by_side_engines_start_together_and_time_one_at_a_time(monkeypatch, tmp_path):
    monkeypatch.setattr(e2e, "EngineProcess", FakeProcess)
    FakeProcess.log = []
    results = e2e.run_engines(SPECS, "all", 2, 10, tmp_path, side_by_side=True)
    assert results == {name: {side: {"side": side} for side in e2e.SIDES} for name in SPECS}
    starts = [entry for entry in FakeProcess.log if entry[0] == "start"]
    assert FakeProcess.log[:4] == starts and all(entry[3] for entry in starts)
    assert FakeProcess.log[4:8] == [("untimed", name, side) for name in SPECS for side in e2e.SIDES]
    # engines without timed batches are done before any timed batch; upstream is timed first
    assert FakeProcess.log[8:] == [("finish", "speculative", "upstream"), ("finish", "speculative", "plugin"),
                                   ("finish", "main", "upstream"), ("finish", "main", "plugin")]


def test_engines_of_a_given_model_run_one_after_the_other(monkeypatch, tmp_path):
    monkeypatch.setattr(e2e, "EngineProcess", FakeProcess)
    FakeProcess.log = []
    e2e.run_engines(SPECS, "all", 2, 10, tmp_path, side_by_side=False)
    assert FakeProcess.log == [entry for name in SPECS for side in e2e.SIDES
                               for entry in (("start", name, side, False), ("finish", name, side))]


def test_marker_ids_are_parsed_or_refused():
    assert e2e.parse_markers("5:6,7") == ((5,), (6, 7))
    for bad in ("5", "5:x", ":6", "5:-1", "1:2:3"):
        with pytest.raises(ValueError, match="--think-markers"):
            e2e.parse_markers(bad)


def test_the_dummy_model_has_the_asked_vocabulary(tmp_path):
    pytest.importorskip("transformers")
    config = json.loads((e2e.write_dummy_model(tmp_path, 1000) / "config.json").read_text())
    assert config["vocab_size"] == 1000 and config["architectures"] == ["Qwen2ForCausalLM"]


@pytest.mark.parametrize("args, message", [
    ([], "needs a CUDA GPU"),
    (["--lengths", "100,0"], "must be positive"),
    (["--repeat", "0"], "must be positive"),
    (["--think-markers", "5"], "--think-markers takes"),
    (["--engines", "main,fast"], "--engines takes some of main, speculative"),
])
def test_the_command_refuses_clearly(run_cli, args, message):
    result = run_cli("-m", "vllm_hotpaths.cli", "e2e", *args, CUDA_VISIBLE_DEVICES="")
    assert result.returncode == 2, result.stderr[-2000:]
    assert message in result.stderr


def test_each_engine_started_is_named_with_its_runner():
    results = {"main": {"upstream": {"runner": "mrv2"}, "plugin": {"runner": "mrv2"}},
               "speculative": {"upstream": {"runner": "v1"}, "plugin": {}}}
    assert e2e.runner_lines(results) == [
        "engine main, upstream side: Model Runner V2", "engine main, plugin side: Model Runner V2",
        "engine speculative, upstream side: Model Runner v1", "engine speculative, plugin side: runner unknown"]
