"""ci/gpu/mrv2-profile.py without a GPU: its arguments, the profiled window, how profiler rows
become tables, its wrappers, and that the functions it records exist in the installed vLLM."""

import ast
import importlib.util
from types import SimpleNamespace

import pytest

from tests.conftest import gpu_script


@pytest.fixture(scope="module")
def script(pytestconfig):
    return gpu_script(pytestconfig.rootpath, "mrv2-profile.py")


def test_arguments_and_their_refusals(script, capsys):
    args = script.parse_args([])
    assert (args.length, args.batch, args.window, args.top) == (5000, 128, 200, 20)
    assert args.json is None and not args.with_stack
    assert script.parse_args(["--length", "300", "--window", "50", "--json", "p.json"]).json == "p.json"
    for bad, message in ((["--window", "0"], "must be positive"), (["--length", "210"], "must exceed --window")):
        with pytest.raises(SystemExit) as exit:
            script.parse_args(bad)
        assert exit.value.code == 2 and message in capsys.readouterr().err


def test_the_window_is_centred(script):
    assert script.window_of(5000, 200) == (2400, 200)
    first, steps = script.window_of(221, 201)
    assert first >= 1 and first + steps <= 221


class FakeProfiler:
    def __init__(self):
        self.log = []

    def start(self):
        self.log.append("start")

    def stop(self):
        self.log.append("stop")


def test_the_step_window_profiles_its_steps_only(script):
    synced = []
    window = script.StepWindow(3, 2, lambda: synced.append(True))
    window.on_step()  # not armed: nothing
    profiler = FakeProfiler()
    window.arm(profiler)
    seen = []
    for step in range(1, 9):
        window.on_step()
        seen.append(list(profiler.log))
    assert seen[1] == [] and seen[2] == ["start"] and seen[3] == ["start"] and seen[4] == ["start", "stop"]
    assert seen[-1] == ["start", "stop"] and synced == [True] and window.seconds >= 0
    again = FakeProfiler()
    window.arm(again)
    assert window.seconds is None
    for _ in range(5):
        window.on_step()
    assert again.log == ["start", "stop"]


def event(key, count, cpu, device, kind="DeviceType.CPU"):
    return SimpleNamespace(key=key, count=count, self_cpu_time_total=cpu, self_device_time_total=device,
                           device_type=kind)


ROWS_EVENTS = [event("aten::copy_", 400, 2000.0, 100.0), event("Sampler.__call__", 200, 6000.0, 0.0),
               event("_penalties_kernel", 200, 0.0, 8000.0, "DeviceType.CUDA"),
               event("Memcpy HtoD (Pinned -> Device)", 600, 0.0, 2000.0, "DeviceType.CUDA"),
               event("aten::empty", 10, 0.0, 0.0),
               SimpleNamespace(key="Sampler.__call__", count=200, self_cpu_time_total=0.0, self_device_time_total=9e3,
                               device_type="DeviceType.CUDA", is_user_annotation=True)]  # its GPU span: left out


def test_profiler_rows_split_host_from_device(script):
    rows = script.profile_rows(ROWS_EVENTS)
    assert [r["device"] for r in rows] == [False, False, True, True, False]
    assert rows[1] == {"name": "Sampler.__call__", "calls": 200, "self_cpu_us": 6000.0, "self_device_us": 0.0,
                       "device": False}
    older = SimpleNamespace(key="k", count=1, self_cpu_time_total=0.0, self_cuda_time_total=5.0)
    assert script.profile_rows([older])[0] == {"name": "k", "calls": 1, "self_cpu_us": 0.0, "self_device_us": 5.0,
                                               "device": True}


def test_tables_rank_rows_per_step(script):
    rows = script.profile_rows(ROWS_EVENTS)
    host = script.table(rows, 200, False, 5).splitlines()
    assert host[0] == "self CPU: 0.040 ms per step in all (2 rows, 200 steps)"
    assert host[2] == "| # | host function | calls | calls/step | self CPU ms/step | share |"
    assert host[4] == "| 1 | `Sampler.__call__` | 200 | 1.00 | 0.0300 | 75.0% |"
    assert host[5] == "| 2 | `aten::copy_` | 400 | 2.00 | 0.0100 | 25.0% |"
    assert len(host) == 6  # rows without self time are left out
    device = script.table(rows, 200, True, 1).splitlines()
    assert device[0] == "self CUDA: 0.050 ms per step in all (2 rows, 200 steps)"
    assert device[4:] == ["| 1 | `_penalties_kernel` | 200 | 1.00 | 0.0400 | 80.0% |"]


def test_long_or_piped_names_stay_in_their_cell(script):
    rows = [{"name": "void k<a|b>(" + "x" * 200, "calls": 1, "self_cpu_us": 0.0, "self_device_us": 1.0,
             "device": True}]
    line = script.table(rows, 1, True, 5, width=20).splitlines()[-1]
    assert line.startswith("| 1 | `void k<a\\|b>(xxxxx...` |")
    assert [r["name"] for r in script.top_rows(script.profile_rows(ROWS_EVENTS), 1)] == ["Sampler.__call__",
                                                                                         "_penalties_kernel"]


def test_the_wrappers_record_ranges_and_count_steps(script):
    entered = []

    class Range:
        def __init__(self, label):
            self.label = label

        def __enter__(self):
            entered.append(self.label)

        def __exit__(self, *exc):
            return False

    class Runner:
        def execute_model(self, x):
            """Runs a step."""
            return x + 1

    window = script.StepWindow(2, 1, lambda: None)
    profiler = FakeProfiler()
    window.arm(profiler)
    assert script.wrap(Runner, "execute_model", script.ranged(Range, "Runner.execute_model"))
    assert script.wrap(Runner, "execute_model", script.counted(window))
    assert not script.wrap(Runner, "no_such_method", script.counted(window)) and not script.wrap(None, "x", None)
    assert [Runner().execute_model(i) for i in range(3)] == [1, 2, 3]
    assert entered == ["Runner.execute_model"] * 3 and profiler.log == ["start", "stop"]
    assert Runner.execute_model.__doc__ == "Runs a step." and Runner.execute_model.__wrapped__.__wrapped__


def methods_in_source(module: str, name: str) -> set[str]:
    """The methods a class defines, read from its source (some of vLLM's GPU modules do not import
    on a machine without CUDA libraries)."""
    origin = importlib.util.find_spec(module).origin
    tree = ast.parse(open(origin).read())
    cls = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == name)
    return {node.name for node in cls.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


def test_what_it_records_exists_in_the_installed_vllm(script):
    pytest.importorskip("vllm")
    for module, name, methods in script.RANGES + ((script.STEP[0], script.STEP[1], (script.STEP[2],)),):
        assert set(methods) <= methods_in_source(module, name), (module, name)


def test_rows_from_a_real_cpu_profile(script):
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function

    window = script.StepWindow(2, 3, lambda: None)
    profiler = profile(activities=[ProfilerActivity.CPU], record_shapes=False)
    window.arm(profiler)
    step = script.counted(window)(script.ranged(record_function, "Model.step")(lambda x: x.mul(2).sum()))
    for _ in range(6):
        step(torch.ones(64))
    rows = {row["name"]: row for row in script.profile_rows(profiler.key_averages())}
    assert rows["Model.step"]["calls"] == 3 and not rows["Model.step"]["device"]
    assert rows["aten::mul"]["calls"] == 3 and rows["aten::mul"]["self_cpu_us"] > 0
    assert "| `Model.step` | 3 | 1.00 |" in script.table(list(rows.values()), 3, False, 50)
