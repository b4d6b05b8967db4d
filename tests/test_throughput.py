"""`vllm-hotpaths throughput` and the decode profile's tables: what runs without a GPU (the turn
order, the summary, the engine's arguments, py-spy's and torch's files read back)."""

import argparse
import gzip
import json
import os
import re
import subprocess
import sys

import pytest

from vllm_hotpaths import cli, vllm_env
from vllm_hotpaths.testing import decode_profile, throughput


def test_sides_take_turns_and_neither_always_goes_first():
    orders = [throughput.order(run, shape) for run in range(4) for shape in range(2)]
    assert all(sorted(o) == sorted(throughput.SIDES) for o in orders)
    firsts = [o[0] for o in orders]
    assert firsts.count("upstream") == firsts.count("plugin") == 4
    assert throughput.order(0, 0) != throughput.order(1, 0) and throughput.order(0, 0) != throughput.order(0, 1)


def run_of(seconds, tokens=2560, ids="a"):
    return {"seconds": seconds, "tokens": tokens, "ids": ids}


def test_a_run_cut_off_keeps_the_pairs_it_finished(tmp_path):
    shapes = throughput.shapes([10, 20], [0.0], 256)
    runs = {0: {"upstream": [run_of(2.0), run_of(2.0)], "plugin": [run_of(1.0), run_of(1.0)]},
            1: {"upstream": [], "plugin": []}}
    meta = {side: {"device": "d", "vllm": "v", "torch": "t", "patched": [], "runner": "mrv2"} for side in throughput.SIDES}
    args = argparse.Namespace(runs=3, out=tmp_path)
    rows = throughput.save(tmp_path, args, {"engine": {}}, meta, shapes, runs, {}, complete=False)
    saved = json.loads((tmp_path / "throughput.json").read_text())
    assert [row["shape"] for row in rows] == [shapes[0]["name"]] == [row["shape"] for row in saved["rows"]]
    assert saved["complete"] is False and saved["rows"][0]["pairs"]["n"] == 2
    assert list(saved["runs"]) == [shapes[0]["name"]]
    assert "cut off: 2 pairs of 6" in (tmp_path / "throughput.md").read_text()
    throughput.save(tmp_path, args, {"engine": {}}, meta, shapes, runs, {}, complete=True)
    assert json.loads((tmp_path / "throughput.json").read_text())["complete"] is True
    assert "cut off" not in (tmp_path / "throughput.md").read_text()


def test_summary_gives_medians_ranges_pair_ratios_and_whether_ids_agree():
    shape = {"name": "B=10", "batch": 10, "presence": 0.0, "tokens": 256}
    runs = {"upstream": [run_of(1.0), run_of(2.0), run_of(4.0)], "plugin": [run_of(1.0), run_of(1.0), run_of(2.0)]}
    row = throughput.summarize(shape, runs)
    assert row["upstream"] == {"median": 1280.0, "min": 640.0, "max": 2560.0, "n": 3}
    assert row["plugin"]["median"] == 2560.0
    assert row["ratio"] == 2.0
    assert row["pairs"]["min"] == 1.0 and row["pairs"]["max"] == 2.0 and row["pairs"]["median"] == 2.0
    assert row["ids_equal"]
    assert row["ms_per_step"]["upstream"] == pytest.approx(2.0 / 256 * 1e3)
    runs["plugin"][2] = run_of(2.0, ids="b")
    assert not throughput.summarize(shape, runs)["ids_equal"]
    assert "equal" in throughput.report([row], {"device": "d", "vllm": "v", "torch": "t", "patched": [], "runner": "mrv2"})


def test_a_runs_median_step_is_not_moved_by_a_slow_first_step():
    quick = throughput.step_times([0.0, 0.010, 0.020, 0.031, 0.041])
    slow_prefill = throughput.step_times([0.0, 0.900, 0.910, 0.921, 0.931])
    assert quick["steps"] == slow_prefill["steps"] == 5
    assert quick["step_ms"] == pytest.approx(10.0) and slow_prefill["step_ms"] == pytest.approx(10.5)
    assert slow_prefill["step_ms_p90"] > 600  # the slow step shows in the tail
    assert throughput.step_times([0.0])["step_ms"] is None


def test_steal_time_is_read_from_the_cpu_line_and_none_where_absent():
    tick = os.sysconf("SC_CLK_TCK")
    assert throughput.steal_seconds(f"cpu  1 2 3 4 5 6 7 {3 * tick} 0 0\ncpu0 1 2 3 4 5 6 7 8") == 3.0
    assert throughput.steal_seconds("cpu  1 2 3 4 5 6 7") is None
    assert throughput.steal_seconds("intr 1 2 3 4 5 6 7 8 9") is None


def test_step_pairs_compare_each_turns_median_steps():
    shape = {"name": "B=10", "batch": 10, "presence": 0.0, "tokens": 256}
    runs = {"upstream": [dict(run_of(1.0), step_ms=50.0), dict(run_of(1.0), step_ms=40.0)],
            "plugin": [dict(run_of(1.0), step_ms=25.0), dict(run_of(1.0), step_ms=50.0)]}
    row = throughput.summarize(shape, runs)
    assert row["step_ms"]["upstream"] == {"median": 45.0, "min": 40.0, "max": 50.0, "n": 2}
    assert row["step_pairs"]["min"] == 0.8 and row["step_pairs"]["max"] == 2.0
    assert "0.800-2.000" in throughput.report([row], {"device": "d", "vllm": "v", "torch": "t", "patched": [],
                                                      "runner": "mrv2"})
    runs["plugin"][1] = run_of(1.0)  # a run without step times: no step columns
    assert "step_ms" not in throughput.summarize(shape, runs)


def test_cpus_are_parsed_as_ranges_and_refused_beyond_the_machine(monkeypatch):
    assert throughput.cpu_list("0") == [0]
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    assert throughput.cpu_list("2-4,7") == [2, 3, 4, 7]
    with pytest.raises(Exception, match="cannot use"):
        throughput.cpu_list("6-9")
    with pytest.raises(Exception, match="2-9 or 2,4,6"):
        throughput.cpu_list("two")


def test_every_request_has_its_own_seed_and_both_sides_get_the_same_prompts():
    shape = throughput.shapes([4], [1.5], 8)[0]
    prompts, params = throughput.requests(shape, 100)
    assert prompts == throughput.requests(shape, 100)[0]
    assert len({p["seed"] for p in params}) == 4
    assert all(p["presence_penalty"] == 1.5 and p["max_tokens"] == 8 and p["ignore_eos"] for p in params)
    assert all(len(p) == throughput.PROMPT_LEN and max(p) < 100 for p in prompts)


def test_the_engine_gets_vllms_defaults_but_the_model_the_cache_and_what_is_asked(tmp_path, monkeypatch):
    args = parsed(monkeypatch, "--model-dir", str(tmp_path / "model"), "--attention", "TRITON_ATTN", "--engine-arg",
                  'compilation_config={"max_cudagraph_capture_size": 1024}')
    kwargs = throughput.engine_kwargs(args)
    assert set(kwargs) == {"model", "load_format", "skip_tokenizer_init", "seed", "gpu_memory_utilization",
                           "kv_cache_memory_bytes", "attention_config", "compilation_config"}
    assert kwargs["compilation_config"] == {"max_cudagraph_capture_size": 1024}
    assert kwargs["kv_cache_memory_bytes"] >= 1024 * (throughput.PROMPT_LEN + 256) * throughput.KV_BYTES_PER_TOKEN


def parsed(monkeypatch, *argv):
    """The arguments `vllm-hotpaths throughput ARGV` hands its run (which does not run)."""
    captured = {}
    monkeypatch.setattr(throughput, "run", lambda args: captured.setdefault("args", args) and 0)
    cli.main(["throughput", *argv])
    return captured["args"]


@pytest.mark.parametrize("argv, message", [
    (["--gpu-memory", "0.9"], "two engines share the GPU"),
    (["--engine-arg", "foo"], "KEY=JSON"),
    (["--engine-arg", "x={"], "KEY=JSON"),
    (["--setting", "compilation_config"], "--setting takes KEY=JSON"),
    (["--runs", "0"], "must be positive"),
    (["--presence", "-1"], ">= 0"),
    (["--windows", "1:x"], "START:SECONDS"),
    (["--cpus", "a-b"], "--cpus takes cores"),
])
def test_bad_options_are_refused_with_the_reason(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["throughput", *argv])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_the_model_config_is_rewritten_only_when_it_changes(tmp_path):
    folder = throughput.write_model(tmp_path / "m")
    config = folder / "config.json"
    assert json.loads(config.read_text())["num_hidden_layers"] == 28
    os.utime(config, (1, 1))
    throughput.write_model(folder)
    assert config.stat().st_mtime == 1  # unchanged: torch.compile's cache stays valid
    config.write_text("{}")
    throughput.write_model(folder)
    assert json.loads(config.read_text())["vocab_size"] == 151_936


RAW = "\n".join([
    'process 10:"/usr/bin/python -m serve --dir /a/b";thread (0x1): MainThread;main (a/serve.py:1);step (engine/core.py:5) 30',
    'process 10:"/usr/bin/python -m serve --dir /a/b";process 11:"VLLM::EngineCore -c a; b";thread (0x2): MainThread;'
    'loop (engine/core.py:1);schedule (sched/scheduler.py:9) 60',
    'process 10:"/usr/bin/python -m serve --dir /a/b";process 11:"VLLM::EngineCore -c a; b";thread (0x2): MainThread;'
    'loop (engine/core.py:1);execute (gpu/model_runner.py:3);sample (gpu/model_runner.py:7) 40',
    'process 10:"/usr/bin/python -m serve --dir /a/b";process 11:"VLLM::EngineCore -c a; b";thread (0x3): out;send (x/y.py:2) 5',
])


def test_py_spy_stacks_are_counted_per_process_and_thread_self_and_inclusive():
    threads = decode_profile.read_py_spy(RAW + "\n")
    core = threads[("process 1: VLLM::EngineCore -c a; b", "MainThread")]
    assert core.samples == 100
    assert core.self_ == {"schedule (sched/scheduler.py)": 60, "sample (gpu/model_runner.py)": 40}
    assert core.inclusive["loop (engine/core.py)"] == 100 and core.inclusive["execute (gpu/model_runner.py)"] == 40
    assert threads[("process 0: python -m serve --dir", "MainThread")].samples == 30
    assert threads[("process 1: VLLM::EngineCore -c a; b", "out")].samples == 5
    with pytest.raises(ValueError, match="raw format"):
        decode_profile.read_py_spy("main (a.py:1) 3")


def test_tables_give_milliseconds_per_step_and_leave_out_the_call_chain():
    text = decode_profile.host_tables(decode_profile.read_py_spy(RAW), rate=100, steps=10, top=5)
    assert "busy 100.00 ms per step (100 samples)" in text  # 100 samples / 100 per s / 10 steps
    assert "`schedule (sched/scheduler.py)` | 60.000 | 60.0%" in text
    assert "`execute (gpu/model_runner.py)` | 40.000" in text
    assert "`loop (engine/core.py)`" not in text  # on every stack of its thread


def test_a_window_counts_only_the_steps_inside_the_run():
    assert decode_profile.steps_in(1, 2, 10.0, 1000) == 200
    assert decode_profile.steps_in(9, 3, 10.0, 1000) == pytest.approx(100)
    assert decode_profile.steps_in(11, 3, 10.0, 1000) == 0


def test_the_gpu_table_sums_kernels_copies_and_sets_per_step(tmp_path):
    events = [{"ph": "X", "cat": "kernel", "name": "k", "ts": 0, "dur": 300},
              {"ph": "X", "cat": "gpu_memcpy", "name": "copy", "ts": 400, "dur": 100},
              {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 0, "dur": 2000}]
    trace = tmp_path / "t.pt.trace.json.gz"
    with gzip.open(trace, "wt") as handle:
        json.dump({"traceEvents": events}, handle)
    text = decode_profile.device_table(decode_profile.read_trace(trace), steps=2, top=5)
    assert text.startswith("GPU: 0.200 ms per step")  # (300 + 100) us / 2 steps
    assert "spans 1.000 ms per step" in text
    assert "| 1 | `k` | 0.50 | 0.1500 | 75.0% |" in text
    assert "aten::add" not in text


def test_the_summary_reads_a_profile_folder(tmp_path):
    (tmp_path / "profile" / "upstream-0").mkdir(parents=True)
    (tmp_path / "profile" / "upstream-0" / "py-spy-window0.txt").write_text(RAW)
    run = {"py_spy_run_s": 2.0, "torch_run_s": 2.5, "windows": [[0, 1], [5, 1]], "rate": 100,
           "torch_steps": 2, "torch_delay": 1}
    (tmp_path / "throughput.json").write_text(json.dumps({
        "args": {"tokens": 20}, "rows": [{"shape": "B=4 presence=0"}], "profiles": {"upstream B=4 presence=0": run}}))
    text, data = decode_profile.summarize(tmp_path, top=3)
    assert "10 steps at 100 samples/s" in text  # 1 s of a 2 s run of 20 steps
    assert "starts after the run's end" in text
    assert "no trace for this run" in text
    window = data["upstream B=4 presence=0"]["windows"][0]
    assert window["threads"]["process 1: VLLM::EngineCore -c a; b / MainThread"]["busy_ms_per_step"] == 100.0


@pytest.mark.skipif(vllm_env.installed_version() is None, reason="vLLM is not installed")
def test_the_scheduler_cost_script_drives_the_installed_vllms_scheduler(pytestconfig):
    result = subprocess.run([sys.executable, str(pytestconfig.rootpath / "ci" / "scheduler-cost.py"), "6", "12", "async"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    line = re.search(r"B=6 async: schedule ([\d.]+) ms, update_from_output ([\d.]+) ms per step "
                     r"\(median of 4 steps\)", result.stdout)
    assert line and float(line.group(1)) > 0 and float(line.group(2)) > 0, result.stdout[-2000:]


def result_of(ratios_by_shape, tokens=256, vllm="0.22.0"):
    """A throughput.json whose turns give these plugin / upstream ratios (upstream 1,000 tok/s)."""
    runs = {shape: {"upstream": [run_of(1.0, tokens=1000) for _ in ratios],
                    "plugin": [run_of(1.0 / r, tokens=1000) for r in ratios]} for shape, ratios in ratios_by_shape.items()}
    return {"runs": runs, "args": {"tokens": tokens}, "meta": {"plugin": {"vllm": vllm, "device": "d"}}}


def test_pooled_pairs_give_the_median_a_bootstrap_interval_and_the_geometric_mean():
    from vllm_hotpaths.testing import throughput_pool

    rows = throughput_pool.pool([result_of({"B=1": [0.5, 2.0]}), result_of({"B=1": [1.0], "B=2": [1.1]})],
                                resamples=2000)
    assert [(r["shape"], r["pairs"]) for r in rows] == [("B=1", 3), ("B=2", 1)]
    first = rows[0]
    assert first["median"] == pytest.approx(1.0) and first["geometric_mean"] == pytest.approx(1.0)
    assert first["low"] == pytest.approx(0.5) and first["high"] == pytest.approx(2.0)
    assert rows[1]["low"] == rows[1]["high"] == pytest.approx(1.1)
    assert "| B=1 | 3 | 1.000 | 0.500-2.000 | 1.000 |" in throughput_pool.table(rows)
    assert "| with / without, median of pairs |" in throughput_pool.table(rows, throughput.SETTING_SIDES)


def test_pooling_refuses_results_of_other_lengths_or_files_that_are_not_results(tmp_path, capsys):
    from vllm_hotpaths.testing import throughput_pool

    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    a.write_text(json.dumps(result_of({"B=1": [1.0]})))
    b.write_text(json.dumps(result_of({"B=1": [1.0]}, tokens=512)))
    c.write_text("{}")
    d = tmp_path / "d.json"
    setting = result_of({"B=1": [1.0]})
    setting["runs"]["B=1"] = {"without": setting["runs"]["B=1"]["upstream"], "with": setting["runs"]["B=1"]["plugin"]}
    setting["meta"] = {"with": setting["meta"]["plugin"]}
    d.write_text(json.dumps(setting))
    for files, message in (([a, b], "not (('upstream', 'plugin'), 256, '0.22.0', 'd')"),
                           ([a, c], "is not a throughput result"), ([d, a], "not (('without', 'with'), 256")):
        with pytest.raises(SystemExit) as exit_:
            throughput_pool.main([str(f) for f in files])
        assert exit_.value.code == 2 and message in capsys.readouterr().err
    assert throughput_pool.main([str(a), "--resamples", "10"]) == 0


def test_a_setting_is_compared_on_the_same_plugin_and_merged_into_the_engine_args(tmp_path, monkeypatch):
    args = parsed(monkeypatch, "--model-dir", str(tmp_path / "m"), "--hotpaths", "off", "--engine-arg",
                  'compilation_config={"mode": 3}', "--setting",
                  'compilation_config={"max_cudagraph_capture_size": 1024}')
    spec = {"engine": throughput.engine_kwargs(args)}
    sides, specs, hotpaths = throughput.side_specs(args, spec)
    assert sides == throughput.SETTING_SIDES and hotpaths == {"without": "off", "with": "off"}
    assert specs["without"]["engine"]["compilation_config"] == {"mode": 3}
    assert specs["with"]["engine"]["compilation_config"] == {"mode": 3, "max_cudagraph_capture_size": 1024}
    assert {k: v for k, v in specs["with"]["engine"].items() if k != "compilation_config"} == \
        {k: v for k, v in specs["without"]["engine"].items() if k != "compilation_config"}
    plain = parsed(monkeypatch, "--model-dir", str(tmp_path / "m"))
    assert throughput.side_specs(plain, spec)[2] == {"upstream": "off", "plugin": "all"}


def test_the_report_names_the_side_with_the_setting_and_the_batches_outside_the_graphs():
    shape = throughput.shapes([256], [0.0], 256)[0]
    runs = {"without": [run_of(2.0)], "with": [run_of(1.0)]}
    row = throughput.summarize(shape, runs, throughput.SETTING_SIDES)
    assert row["ratio"] == 2.0 and row["ids_equal"]
    meta = {"device": "d", "vllm": "v", "torch": "t", "patched": [], "runner": "mrv2", "graphs_up_to": 512}
    setting = ['compilation_config={"max_cudagraph_capture_size": 1024}']
    text = throughput.report([row], meta, throughput.SETTING_SIDES, setting)
    assert "| with / without |" in text and "`with`: " + setting[0] in text and "outside" not in text
    outside = throughput.summarize(throughput.shapes([1024], [0.0], 256)[0], runs, throughput.SETTING_SIDES)
    text = throughput.report([row, outside], meta, throughput.SETTING_SIDES)
    assert "up to 512 tokens" in text and "B=1024 decode outside" in text and "B=256" not in text.split("\n")[-1]
    assert '"max_cudagraph_capture_size": 1024' in text.split("\n")[-1]
    sides = throughput.SETTING_SIDES
    assert "graphs are off" in throughput.report([row], dict(meta, graphs_up_to=0), sides)
    assert "outside" not in throughput.report([outside], dict(meta, graphs_up_to=None), sides)  # an older engine's meta


def test_a_setting_run_names_the_batches_outside_the_graphs_of_the_side_without_it(tmp_path):
    shape_list = throughput.shapes([1024], [0.0], 256)
    runs = {0: {"without": [run_of(2.0)], "with": [run_of(1.0)]}}
    base = {"device": "d", "vllm": "v", "torch": "t", "patched": [], "runner": "mrv2"}
    meta = {"without": dict(base, graphs_up_to=512), "with": dict(base, graphs_up_to=1024)}
    args = argparse.Namespace(runs=1, out=tmp_path, setting=['compilation_config={"max_cudagraph_capture_size": 1024}'])
    throughput.save(tmp_path, args, {"engine": {}}, meta, shape_list, runs, {}, complete=True,
                    sides=throughput.SETTING_SIDES)
    text = (tmp_path / "throughput.md").read_text()
    assert "`without`: CUDA graphs cover decode steps of up to 512 tokens" in text, text
    assert "up to 1024" not in text
