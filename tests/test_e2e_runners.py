"""`vllm-hotpaths e2e --runners` without a GPU: the engines it starts and in which order, how it
compares Model Runner V2 with v1 (differences only where a runner-change ledger entry explains
them), the plugin with upstream, and how it reports rates and the plain-decode pairs."""

import json
from types import SimpleNamespace

import pytest

from vllm_hotpaths.testing import e2e, ledger

VERSION = "0.22.0"


def entry(hotpath, first_version="0.22.0", link=None):
    return ledger.KnownDivergence(hotpath=hotpath, first_version=first_version, last_version=None,
                                  link=link or f"https://example.org/{hotpath}", summary="a runner change",
                                  affects=lambda case: True, kind="runner-change")


@pytest.fixture
def entries(monkeypatch):
    """The ledger with only the entries a test sets."""
    monkeypatch.setattr(ledger, "LEDGER", [])
    return ledger.LEDGER


def batches():
    equality = e2e.equality_batches(1000, 8, 6)
    timed = e2e.timed_batches(1000, 4, [20])
    plain = timed[0]
    return equality, timed, e2e.Batch(f"pairs: {plain.name}", plain.prompts, plain.params, timed=True)


def engine_result(runner, patched, batch_list, change=(), seconds=None):
    """An engine's result: every request's ids, with ids[request][1] changed for each
    (batch name, request) in `change`; `seconds` gives a batch's runs."""
    out = {"vllm": VERSION, "device": "GPU", "patched": patched, "runner": runner, "batches": {}}
    for batch in batch_list:
        ids = [[7] * p["max_tokens"] for p in batch.params]
        for name, request in change:
            if name == batch.name:
                ids[request][1] += 1
        runs = (seconds or {}).get(batch.name, [2.0])
        out["batches"][batch.name] = {"seconds": runs, "tokens": [sum(map(len, ids))] * len(runs), "ids": ids}
    return out


def three(change_mrv2=(), change_plugin=(), runners=("mrv2", "v1", "v1"), seconds=None):
    equality, timed, pairs = batches()
    everything = equality + timed + [pairs]
    patched = {"penalties": ["apply_all_penalties"]}
    return {"mrv2 upstream": engine_result(runners[0], {}, equality + timed, change_mrv2),
            "v1 upstream": engine_result(runners[1], {}, everything, seconds=seconds),
            "v1 plugin": engine_result(runners[2], patched, everything, change_plugin, seconds)}


def report(results, **kwargs):
    equality, timed, pairs = batches()
    return e2e.runner_report(kwargs.get("equality", equality), kwargs.get("timed", timed),
                             kwargs.get("pairs", pairs), results)


def test_the_dummy_qwen3_is_what_vllm_runs_on_model_runner_v2(tmp_path):
    pytest.importorskip("transformers")
    config = json.loads((e2e.write_dummy_model(tmp_path, architecture="qwen3") / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForCausalLM"] and config["model_type"] == "qwen3"
    assert config["vocab_size"] == 151_936 and config["head_dim"] == 256 // 4
    assert {k: config[k] for k in e2e.DUMMY_CONFIG} == e2e.DUMMY_CONFIG
    assert "quantization_config" not in config and "num_experts" not in config  # dense, unquantized
    with pytest.raises(ValueError, match="qwen2, qwen3"):
        e2e.write_dummy_model(tmp_path, architecture="llama")


def test_what_each_equality_batch_may_be_explained_by():
    equality, _, _ = batches()
    uses = {batch.name: {frozenset(e2e.runner_change_hotpaths(p)) for p in batch.params} for batch in equality}
    assert uses["greedy"] == {frozenset()}
    assert uses["seeded random"] == {frozenset({"sampling"})}
    assert uses["penalties"] == {frozenset({"penalties_mrv2"}), frozenset({"penalties_mrv2", "sampling"})}


def test_identical_runners_pass(entries):
    text, ok, summary = report(three())
    assert ok, text
    assert "FAIL" not in text and "DIFFERENT" not in text
    assert "| greedy | 8 | equal | equal |" in text
    assert summary["runners"] == {"mrv2 upstream": "mrv2", "v1 upstream": "v1", "v1 plugin": "v1"}
    assert "engine mrv2 upstream: Model Runner V2" in text and "engine v1 plugin: Model Runner v1" in text


def test_an_unexplained_runner_difference_fails_naming_the_batch_and_where(entries):
    text, ok, summary = report(three(change_mrv2=[("seeded random", 3)]))
    assert not ok
    assert ("FAIL: seeded random: Model Runner V2 and v1 generated different ids that no runner-change ledger "
            "entry explains (1 requests; first: request 3, token 1: [8, 7] vs [7, 7]") in text, text
    row = next(r for r in summary["equality"] if r["batch"] == "seeded random")
    assert row["differing"] == row["unexplained"] == 1 and not row["ok"]


def test_an_explained_runner_difference_passes_with_its_links_and_count(entries):
    entries += [entry("sampling", link="https://example.org/gumbel"), entry("penalties_mrv2"), entry("swap_states")]
    text, ok, summary = report(three(change_mrv2=[("seeded random", 3), ("seeded random", 6), ("penalties", 1)]))
    assert ok, text
    assert ("| seeded random | 8 | equal | 2 of 8 requests differ, explained: https://example.org/gumbel "
            "(sampling) |") in text
    row = next(r for r in summary["equality"] if r["batch"] == "penalties")
    assert row["ok"] and row["differing"] == 1
    assert row["explained_by"] == [{"hotpath": "penalties_mrv2", "link": "https://example.org/penalties_mrv2"}]


def test_greedy_differences_are_never_explained(entries):
    entries += [entry("sampling"), entry("penalties_mrv2")]
    text, ok, _ = report(three(change_mrv2=[("greedy", 0)]))
    assert not ok and "FAIL: greedy: Model Runner V2 and v1" in text


def test_a_greedy_penalized_request_needs_a_penalties_entry(entries):
    entries.append(entry("sampling"))
    equality, _, _ = batches()
    penalties = equality[2]
    greedy_row = next(i for i, p in enumerate(penalties.params) if p["temperature"] == 0)
    seeded_row = next(i for i, p in enumerate(penalties.params) if p["temperature"] > 0)
    _, ok, _ = report(three(change_mrv2=[("penalties", seeded_row)]))
    assert ok
    text, ok, _ = report(three(change_mrv2=[("penalties", greedy_row)]))
    assert not ok and f"first: request {greedy_row}, token 1" in text


def test_entries_of_other_kinds_or_versions_explain_nothing(entries):
    entries += [entry("sampling", first_version="0.25.0"),
                ledger.KnownDivergence(hotpath="sampling", first_version="0.16.0", last_version=None,
                                       link="x", summary="s", affects=lambda case: True, kind="change")]
    _, ok, _ = report(three(change_mrv2=[("seeded random", 0)]))
    assert not ok


def test_timed_batches_are_not_compared_across_runners(entries):
    text, ok, _ = report(three(change_mrv2=[("no penalty @20", 0)]))
    assert ok, text


@pytest.mark.parametrize("batch", ["greedy", "presence 1.5 @20", "pairs: no penalty @20"])
def test_the_plugin_changing_ids_fails(entries, batch):
    text, ok, _ = report(three(change_plugin=[(batch, 2)]))
    assert not ok
    assert f"FAIL: {batch}: the plugin changed the generated ids (v1 plugin vs v1 upstream)" in text
    assert "DIFFERENT: request 2, token 1" in text


@pytest.mark.parametrize("runners, wrong", [(("v1", "v1", "v1"), "mrv2 upstream engine runs Model Runner v1"),
                                            (("mrv2", "mrv2", "v1"), "v1 upstream engine runs Model Runner V2"),
                                            (("mrv2", "v1", None), "v1 plugin engine runs an unknown runner")])
def test_an_engine_on_the_wrong_runner_fails(entries, runners, wrong):
    text, ok, _ = report(three(runners=runners))
    assert not ok and f"FAIL: the {wrong}, not" in text


def test_patching_is_checked_on_each_side(entries):
    results = three()
    results["mrv2 upstream"]["patched"] = {"penalties": []}
    results["v1 plugin"]["patched"] = {}
    text, ok, _ = report(results)
    assert not ok
    assert "FAIL: the mrv2 upstream engine was patched" in text and "the plugin installed nothing" in text


def test_timed_rates_side_by_side_with_each_runner_named(entries):
    results = three(seconds={"no penalty @20": [4.0], "presence 1.5 @20": [8.0]})
    results["mrv2 upstream"]["batches"]["no penalty @20"]["seconds"] = [2.0]
    text, ok, summary = report(results)
    assert ok, text
    assert ("| batch (tok/s) | mrv2 upstream (Model Runner V2) | v1 upstream (Model Runner v1) | "
            "v1 plugin (Model Runner v1) | v1 plugin == v1 upstream |") in text
    assert "| no penalty @20 | 40 | 20 | 20 | equal |" in text  # 80 tokens in 2 s and 4 s
    assert "| presence 1.5 @20 | 40 | 10 | 10 | equal |" in text
    assert summary["timed"][0]["tok_s"] == {"mrv2 upstream": 40.0, "v1 upstream": 20.0, "v1 plugin": 20.0}


@pytest.mark.parametrize("plugin_seconds, median, verdict", [
    ([2.0, 1.0, 4.0], 1.0, "meets the bar (>= 0.98)"),
    ([2.05, 2.0, 2.1], 2.0 / 2.05, "BELOW the bar (0.98)"),
])
def test_pairs_report_each_ratio_and_the_median(entries, plugin_seconds, median, verdict):
    results = three(seconds={"pairs: no penalty @20": [2.0, 2.0, 2.0]})
    plugin = results["v1 plugin"]["batches"]["pairs: no penalty @20"]
    plugin["seconds"], plugin["tokens"] = plugin_seconds, plugin["tokens"][:1] * 3
    text, ok, summary = report(results)
    assert ok, text  # the bar is reported, not enforced
    assert [run["first"] for run in summary["pairs"]["runs"]] == ["v1 upstream", "v1 plugin", "v1 upstream"]
    assert [run["ratio"] for run in summary["pairs"]["runs"]] == pytest.approx([2.0 / s for s in plugin_seconds])
    assert summary["pairs"]["median_ratio"] == pytest.approx(median)
    assert summary["pairs"]["meets_bar"] == (median >= 0.98)
    assert f"median plugin / upstream over 3 pairs: {median:.3f}: {verdict}" in text
    # 80 tokens a run: upstream 40 tok/s in each pair
    assert f"| 2 | v1 plugin | 40 | {80 / plugin_seconds[1]:,.0f} | {2.0 / plugin_seconds[1]:.3f} |" in text


def test_pairs_alone_need_only_the_v1_engines(entries):
    results = three()
    del results["mrv2 upstream"]
    text, ok, summary = report(results, equality=[], timed=[])
    assert ok, text
    assert "mrv2" not in text and summary["equality"] == [] and summary["pairs"]["runs"]
    assert json.loads(json.dumps(summary)) == summary


def test_specs_give_each_engine_its_phases():
    equality, timed, pairs = batches()
    specs = e2e.runner_specs({"model": "m"}, set(e2e.RUNNER_PHASES), equality, timed, pairs, 3)
    assert list(specs) == ["mrv2 upstream", "v1 upstream", "v1 plugin"]
    mrv2, v1 = specs["mrv2 upstream"]["phases"], specs["v1 plugin"]["phases"]
    assert [len(phase["batches"]) for phase in mrv2] == [3, 2] and [p["wait"] for p in mrv2] == [False, True]
    assert [len(phase["batches"]) for phase in v1] == [3, 2, 1, 1, 1] and all(p["wait"] for p in v1[1:])
    assert v1[2]["batches"][0]["name"] == "pairs: no penalty @20" and v1[2]["batches"][0]["prompts"] == timed[0].prompts
    assert e2e.engine_phases(specs["v1 upstream"]) == specs["v1 upstream"]["phases"]
    only_pairs = e2e.runner_specs({}, {"pairs"}, [], [], pairs, 3)
    assert list(only_pairs) == ["v1 upstream", "v1 plugin"]


def test_a_spec_without_phases_runs_untimed_then_timed_batches():
    spec = {"batches": [{"name": "a", "timed": False}, {"name": "t", "timed": True}], "repeat": 2,
            "wait_for_timed": True}
    assert e2e.engine_phases(spec) == [{"batches": [{"name": "a", "timed": False}], "wait": False},
                                       {"batches": [{"name": "t", "timed": True}] * 2, "wait": True}]
    assert e2e.engine_phases(dict(spec, batches=spec["batches"][:1]))[1] == {"batches": [], "wait": False}


class FakeProcess:
    """Stands in for `e2e.EngineProcess`: records what the orchestration asks, in order."""

    log: list = []

    def __init__(self, spec, side, hotpaths, repeat, folder, wait_for_timed, env=None):
        self.name = f"{spec['label']} {side}"
        self.log.append(("start", self.name, env))

    def wait_untimed(self, timeout):
        self.log.append(("untimed", self.name))

    def run_phase(self, number, timeout):
        self.log.append(("phase", self.name, number))
        return 1.0

    def finish(self, timeout):
        self.log.append(("finish", self.name))
        return {"name": self.name}

    def stop(self):
        pass


def test_engines_start_together_then_run_alone_then_take_turns(monkeypatch, tmp_path):
    monkeypatch.setattr(e2e, "EngineProcess", FakeProcess)
    FakeProcess.log = []
    equality, timed, pairs = batches()
    specs = e2e.runner_specs({}, set(e2e.RUNNER_PHASES), equality, timed, pairs, 3)
    results = e2e.run_runner_engines(specs, "all", 10, tmp_path, 3)
    assert results == {name: {"name": name} for name in specs}
    assert FakeProcess.log == [
        ("start", "mrv2 upstream", {"VLLM_USE_V2_MODEL_RUNNER": None}),
        ("start", "v1 upstream", {"VLLM_USE_V2_MODEL_RUNNER": "0"}),
        ("start", "v1 plugin", {"VLLM_USE_V2_MODEL_RUNNER": "0"}),
        ("untimed", "mrv2 upstream"), ("untimed", "v1 upstream"), ("untimed", "v1 plugin"),
        ("phase", "mrv2 upstream", 1), ("phase", "v1 upstream", 1), ("phase", "v1 plugin", 1),
        ("finish", "mrv2 upstream"),
        ("phase", "v1 upstream", 2), ("phase", "v1 plugin", 2),
        ("phase", "v1 plugin", 3), ("phase", "v1 upstream", 3),
        ("phase", "v1 upstream", 4), ("phase", "v1 plugin", 4),
        ("finish", "v1 upstream"), ("finish", "v1 plugin")]


def test_an_unset_variable_is_removed_from_the_engine_environment(monkeypatch, tmp_path):
    started = {}

    class Popen:
        def __init__(self, command, env, **kwargs):
            started.update(env)

    monkeypatch.setattr(e2e.subprocess, "Popen", Popen)
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    spec = {"label": "mrv2", "phases": [{"batches": [], "wait": False}]}
    e2e.EngineProcess(spec, "upstream", "all", 1, tmp_path / "a", True, env={"VLLM_USE_V2_MODEL_RUNNER": None})
    assert "VLLM_USE_V2_MODEL_RUNNER" not in started and started["VLLM_HOTPATHS"] == "off"
    e2e.EngineProcess(spec, "plugin", "all", 1, tmp_path / "b", True, env={"VLLM_USE_V2_MODEL_RUNNER": "0"})
    assert started["VLLM_USE_V2_MODEL_RUNNER"] == "0" and started["VLLM_HOTPATHS"] == "all"


@pytest.mark.parametrize("args, message", [
    (["--runners"], "needs a CUDA GPU"),
    (["--runners", "--only", "pairs,warmup"], "--only takes some of equality, timed, pairs"),
    (["--runners", "--model", "x"], "no --model"),
    (["--only", "pairs"], "--only belongs to --runners"),
    (["--runners", "--pairs", "-1"], "--pairs must not be negative"),
])
def test_the_runner_mode_refuses_clearly(run_cli, args, message):
    result = run_cli("-m", "vllm_hotpaths.cli", "e2e", *args, CUDA_VISIBLE_DEVICES="")
    assert result.returncode == 2, result.stderr[-2000:]
    assert message in result.stderr


FAKE_VLLM = '''
"""A stand-in for vLLM in the engine processes: ids from the prompt, the runner from the model
config and VLLM_USE_V2_MODEL_RUNNER as vLLM 0.22 decides it, the plugin "installed" unless off."""
import json, os
from types import SimpleNamespace

import torch

torch.cuda.synchronize = lambda: None
torch.cuda.get_device_name = lambda: "fake GPU"
__version__ = "0.22.0"


class Config:
    def __init__(self, model):
        self.architectures = json.load(open(os.path.join(model, "config.json")))["architectures"]

    @property
    def use_v2_model_runner(self):
        forced = os.environ.get("VLLM_USE_V2_MODEL_RUNNER")
        return bool(int(forced)) if forced is not None else self.architectures == ["Qwen3ForCausalLM"]


class LLM:
    def __init__(self, **kwargs):
        assert "reasoning_config" not in kwargs and kwargs["load_format"] == "dummy"
        self.llm_engine = SimpleNamespace(vllm_config=Config(kwargs["model"]))
        if os.environ.get("VLLM_HOTPATHS") != "off":
            from vllm_hotpaths import plugin
            plugin._installed["penalties"] = ["apply_all_penalties"]

    def generate(self, prompts, params, use_tqdm=False):
        params = params if isinstance(params, list) else [params] * len(prompts)
        return [SimpleNamespace(outputs=[SimpleNamespace(token_ids=[sum(prompt.prompt_token_ids) % 97 + i
                                                                    for i in range(p.max_tokens)])])
                for prompt, p in zip(prompts, params)]


class SamplingParams:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)
'''


@pytest.fixture
def fake_vllm(monkeypatch, tmp_path, pytestconfig):
    """Engine processes started from here import the fake vLLM above."""
    pytest.importorskip("transformers")
    fake = tmp_path / "fake"
    (fake / "vllm").mkdir(parents=True)
    (fake / "vllm" / "__init__.py").write_text(FAKE_VLLM)
    (fake / "vllm" / "inputs.py").write_text("class TokensPrompt:\n    def __init__(self, prompt_token_ids):\n"
                                             "        self.prompt_token_ids = prompt_token_ids\n")
    root = pytestconfig.rootpath
    monkeypatch.setenv("PYTHONPATH", f"{fake}:{root / 'src'}:{root}")


def test_the_engines_signal_their_phases_and_get_their_runners(fake_vllm, monkeypatch, tmp_path):
    """Real engine processes around a fake vLLM: the phase signals, the environment of each engine,
    the results and their report."""
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "0")  # the MRv2 engine must not inherit it
    equality, timed, pairs = batches()
    model = e2e.write_dummy_model(tmp_path / "model", architecture="qwen3")
    specs = e2e.runner_specs(e2e.dummy_engine(model, 8, 64, 0.4), set(e2e.RUNNER_PHASES), equality, timed, pairs, 2)
    results = e2e.run_runner_engines(specs, "all", 120, tmp_path / "engines", 2)
    assert {name: r["runner"] for name, r in results.items()} == {"mrv2 upstream": "mrv2", "v1 upstream": "v1",
                                                                  "v1 plugin": "v1"}
    assert len(results["v1 plugin"]["batches"]["pairs: no penalty @20"]["seconds"]) == 2
    assert "pairs: no penalty @20" not in results["mrv2 upstream"]["batches"]
    text, ok, summary = e2e.runner_report(equality, timed, pairs, results)
    assert ok, text
    assert len(summary["pairs"]["runs"]) == 2 and [r["batch"] for r in summary["timed"]] == [b.name for b in timed]


def test_the_plugin_comparison_runs_its_untimed_then_timed_phase(fake_vllm, tmp_path):
    """The default mode's engines over the same phase signals: untimed batches, then, once told,
    the timed ones (the plugin side `repeat` times)."""
    model = e2e.write_dummy_model(tmp_path / "model")
    equality, timed, _ = batches()
    spec = {"label": "main", "engine": e2e.dummy_engine(model, 8, 64, 0.4),
            "batches": [b.__dict__ for b in equality + timed]}
    results = e2e.run_engines({"main": spec}, "all", 3, 120, tmp_path / "engines", side_by_side=True)["main"]
    assert results["upstream"]["runner"] == results["plugin"]["runner"] == "v1"  # the Qwen2
    assert [len(results[side]["batches"]["no penalty @20"]["seconds"]) for side in e2e.SIDES] == [1, 3]
    rows = e2e.compare(equality + timed, results["upstream"], results["plugin"], e2e.DUMMY_MARKERS)
    text, ok = e2e.report(rows, results["upstream"], results["plugin"], [20])
    assert ok, text


def test_vllm_takes_the_dummy_qwen3_for_a_model_runner_v2_model(tmp_path):
    """vLLM's own test of the model (architecture, generate, neither MoE nor quantized), on the
    configuration written here; the engine's other settings are checked on the GPU."""
    pytest.importorskip("transformers")
    config = pytest.importorskip("vllm.config")
    if not hasattr(config.VllmConfig, "_is_default_v2_model_runner_model"):
        pytest.skip("this vLLM decides the runner otherwise")
    model = config.ModelConfig(model=str(e2e.write_dummy_model(tmp_path, architecture="qwen3")),
                               skip_tokenizer_init=True, max_model_len=64)
    assert config.VllmConfig._is_default_v2_model_runner_model(SimpleNamespace(model_config=model))
    assert model.get_head_size() == e2e.DUMMY_HEAD_DIM and model.get_vocab_size() == e2e.DUMMY_VOCAB
    qwen2 = config.ModelConfig(model=str(e2e.write_dummy_model(tmp_path / "qwen2")), skip_tokenizer_init=True,
                               max_model_len=64)
    assert not config.VllmConfig._is_default_v2_model_runner_model(SimpleNamespace(model_config=qwen2))
