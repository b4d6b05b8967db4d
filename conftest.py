"""Suite-wide configuration: Hypothesis profiles, devices, candidates, fixtures of failures.

- Profiles `smoke`, `dev` (default), `ci` (default when CI=true), `gate`, `soak`: `--hypothesis-profile`.
- Properties taking `device` run on cpu and on cuda; cuda skips without a GPU unless
  `--require-cuda`, which makes a missing GPU a failure.
- Properties taking `candidate` run once per fast implementation of their hot path (marker
  `hotpath`), or against `--impl hotpath=module:attr` instead.
- `--reference hotpath@version=module:attr` takes a planted reference in place of the frozen one
  of that version (the quality set's way of showing that conformance catches a wrong reference).
- The generic laws (properties/test_<law>.py, taking `hotpath`) run once per hot path whose
  registry entry names its `Checks`, per candidate and device.
- Every property also carries its hot path's name and its check kind as plain markers, for `-m`.
- A failing property writes its last (shrunk) case as a regression fixture and names the file.
- Under xdist (`-n`) the workers steal work (`--dist worksteal`) and the longest tests go first, by
  their seconds in ci/durations.json (`--store-durations` records them: vllm_hotpaths.testing.durations).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

# Bytecode caches (Python's, and pytest's of the rewritten test modules) are written even under
# PYTHONDONTWRITEBYTECODE: a run of the suite starts about 150 Python processes (xdist workers,
# the quality set's and the CLI's runs), and each compiled every module of this project again
# (about 85 s of CPU in the test command).
sys.dont_write_bytecode = False

import pytest
import torch
from hypothesis import HealthCheck, Phase, settings

from vllm_hotpaths.testing import drift
from vllm_hotpaths import registry, vllm_env
from properties import REGRESSIONS
from vllm_hotpaths.testing import fixtures, gate, ledger
from vllm_hotpaths.testing.laws import CaseLog, Side
from vllm_hotpaths.testing.watchdog import DEFAULT_SECONDS as DEFAULT_TIMEOUTS, TimedOut, default_seconds, limit

pytest_plugins = ["vllm_hotpaths.testing.durations"]

# Without a GPU, Triton kernels (ours and vLLM's) run in Triton's interpreter; this must happen
# before any kernel module is imported.
vllm_env.set_cpu_environment()

# Properties share one per-test recorder across examples (it counts them and keeps the last case).
# No `explain` phase: on the stateful thinking-budget machine it took most of a failure's time
# (about 80% in a measured run), and the shrunk case is already written as a fixture.
_common = dict(
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                           HealthCheck.data_too_large],
    report_multiple_bugs=False,
    print_blob=True,
)
settings.register_profile("smoke", max_examples=10, derandomize=True, **_common)  # every row runs, briefly
settings.register_profile("dev", max_examples=60, **_common)
settings.register_profile("ci", max_examples=150, derandomize=True, **_common)
settings.register_profile("gate", max_examples=1500, derandomize=True, **_common)
settings.register_profile("soak", max_examples=25_000, **_common)
# The quality set's profile for planted bugs that `ci`'s one derandomized draw of 150 examples
# catches on most seeds but not all (properties/quality/*.py names them).
settings.register_profile("quality", max_examples=600, derandomize=True, **_common)
settings.register_profile("replay", **{**_common, "max_examples": 1, "phases": [Phase.explicit]})
settings.load_profile("ci" if os.environ.get("CI", "").lower() in ("1", "true") else "dev")


def pytest_addoption(parser):
    group = parser.getgroup("vllm-hotpaths")
    group.addoption("--require-cuda", action="store_true",
                    help="fail (instead of skip) the cuda cases when no GPU is visible")
    group.addoption("--impl", action="append", default=[], metavar="HOTPATH=MODULE:ATTR",
                    help="run the hot path's equivalence properties against this candidate")
    group.addoption("--reference", action="append", default=[], metavar="HOTPATH@VERSION=MODULE:ATTR",
                    help="take this factory as the frozen reference of that version (a planted "
                         "reference, to show that conformance catches it)")
    group.addoption("--fixture-dir", default=None,
                    help="where failing properties write regression fixtures (default: "
                         "properties/regressions; with --impl, a scratch folder that later runs do "
                         f"not replay: {SCRATCH_FIXTURES})")
    group.addoption("--time-limit", type=float, default=None, metavar="SECONDS",
                    help="fail a test that runs longer (default: by Hypothesis profile, "
                         + ", ".join(f"{p} {s:g} s" for p, s in DEFAULT_TIMEOUTS.items()) + "; 0: none)")
    group.addoption("--no-replay", action="store_true",
                    help="leave out the committed fixtures: generated cases only, to measure what "
                         "generation alone finds (the same as VLLM_HOTPATHS_NO_REPLAY=1)")
    group.addoption("--no-shrink", action="store_true",
                    help="report (and write as a fixture) the first failing example as found, "
                         "without shrinking it: the same examples are drawn, the failure comes sooner")


@pytest.hookimpl(trylast=True)  # after Hypothesis' plugin has loaded the chosen profile
def pytest_configure(config):
    if config.getoption("no_replay"):  # read where fixtures are replayed, xdist workers included
        os.environ["VLLM_HOTPATHS_NO_REPLAY"] = "1"
    honour_seed(config)
    skip_shrinking(config)
    one_thread_per_worker()
    for line in (
        "hotpath(name): the hot path a property belongs to",
        "check(kind): equivalence (candidate vs reference), conformance (reference vs vLLM), "
        "drift (an older reference vs vLLM: every difference named by the ledger) or runner-change "
        "(the v1 reference vs vLLM's Model Runner V2 code: every difference named by the ledger)",
        "needs_cuda: runs only where a CUDA device is visible",
        "broken_fixture(message): a committed fixture this test replays cannot be read (it fails)",
        "needs_vllm: runs only where vLLM is installed",
        "plugin_patch: a property of the hot path's plugin patch (deselected where the patch does "
        "not apply to the installed vLLM)",
        "devices(*names): restrict the device parametrization",
        "needs_vllm_ops(name): runs only where vLLM's compiled op `name` can be loaded",
        "triton: runs Triton kernels: CPU cases need TRITON_INTERPRET=1, CUDA cases a process "
        "without it",
        "implementation(label): what the property compares, when it takes no candidate",
        "law(name): a generic law's name where its check kind does not say it (errors, patch)",
        "needs_interpreter: a Triton case on CPU tensors (set by the device parametrization)",
        "needs_compiled_triton: a Triton case on CUDA tensors (set by the device parametrization)",
    ):
        config.addinivalue_line("markers", line)
    for name in registry.HOTPATHS:
        config.addinivalue_line("markers", f"{name}: a property of the {name} hot path (from its hotpath marker)")
    for kind in CHECK_KINDS:
        config.addinivalue_line("markers", f"{kind.replace('-', '_')}: a property whose check is {kind}")
    if config.getoption("fixture_dir") is None:
        planted = config.getoption("impl") or config.getoption("reference")
        config.option.fixture_dir = str(SCRATCH_FIXTURES if planted else REGRESSIONS)
    problem = fixtures.unwritable(Path(config.getoption("fixture_dir")))
    if problem:
        raise pytest.UsageError(f"--fixture-dir {config.getoption('fixture_dir')}: {problem}")
    if config.getoption("impl") or config.getoption("reference"):
        import_from_invocation_folder(str(config.invocation_params.dir))
    for option, override in (("impl", registry.override_implementation), ("reference", registry.override_reference)):
        for assignment in config.getoption(option):
            try:
                override(assignment)
            except (ValueError, KeyError, ImportError) as err:
                raise pytest.UsageError(f"--{option} {assignment}: {err}") from err


def honour_seed(config) -> None:
    """`--hypothesis-seed N` under a derandomized profile: the same profile, drawing from seed N
    (a derandomized profile would ignore it). The gate passes a fresh seed on every run."""
    seed = config.getoption("hypothesis_seed", None)
    if seed is not None and settings.default.derandomize:
        name = settings.get_current_profile_name()
        settings.register_profile(f"{name}-seeded", parent=settings.get_profile(name), derandomize=False)
        settings.load_profile(f"{name}-seeded")


def one_thread_per_worker() -> None:
    """Under xdist each worker computes on one CPU thread (tests/forked_pytest.py does the same for
    the runs a worker starts): the workers already take every core, and torch's own pool in each
    (a thread per core) made them contend. `CI=true pytest -n 2` over the CPU equivalence and conformance rows of
    think_budget, logits_copy, penalties and recovered_tokens (2 cores, alternating): 224 s and
    216 s with torch's pool, 203 s and 192 s with one thread. A result does not depend on it: both
    sides of a comparison run in the same process."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        torch.set_num_threads(1)


def skip_shrinking(config) -> None:
    """`--no-shrink`: the same profile without Hypothesis' shrink phase. Which examples are drawn,
    and so which bugs are found, does not change; only the time spent minimising a failure. The
    first failure is raised alone: unshrunk, two failures of one bug (a wrong id out of the
    vocabulary, then the comparison) would otherwise come as a group of "distinct" ones."""
    if config.getoption("no_shrink"):
        name = settings.get_current_profile_name()
        phases = [phase for phase in settings.default.phases if phase is not Phase.shrink]
        settings.register_profile(f"{name}-unshrunk", parent=settings.get_profile(name), phases=phases,
                                  report_multiple_bugs=False)
        settings.load_profile(f"{name}-unshrunk")


def pytest_report_header(config):
    seed = config.getoption("hypothesis_seed", None)
    limit = time_limit(config)
    return [f"vllm-hotpaths: Hypothesis profile {settings.get_current_profile_name()} "
            f"({settings.default.max_examples} examples, "
            + (f"seed {seed})" if seed is not None else
               "derandomized)" if settings.default.derandomize else "a fresh seed per test)")
            + f"; time limit per test: {f'{limit:g} s' if limit > 0 else 'none'}"
            + f"; new fixtures go to {config.getoption('fixture_dir')}"]


def profile_name(config) -> str:
    return (config.getoption("hypothesis_profile", None) or settings.get_current_profile_name()).removesuffix("-unshrunk").removesuffix("-seeded")


def time_limit(config) -> float:
    chosen = config.getoption("time_limit")
    return default_seconds(profile_name(config)) if chosen is None else chosen


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    with limit(time_limit(item.config)):
        return (yield)


def import_from_invocation_folder(folder: str) -> None:
    """`--impl my_patch:X` imports from the folder pytest (or the gate) was started in, here and
    in xdist's workers and the gate's interpreter run (they inherit PYTHONPATH)."""
    if folder not in sys.path:
        sys.path.insert(0, folder)
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if folder not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([folder] + [p for p in paths if p])


DEVICES = ("cpu", "cuda")
# Where a candidate's failures go (--impl): not the checkout's fixtures, which every run replays.
SCRATCH_FIXTURES = Path(tempfile.gettempdir()) / "vllm-hotpaths-fixtures"
CHECK_KINDS = gate.CHECKS


def pytest_itemcollected(item):
    """Select by plain markers: `-m "equivalence and penalties"` (check kind, hot path)."""
    for marker in ("hotpath", "check"):
        found = item.get_closest_marker(marker)
        if found is not None:
            item.add_marker(found.args[0].replace("-", "_"))


def device_marks(triton: bool) -> dict[str, list]:
    return {"cpu": [pytest.mark.needs_interpreter] if triton else [],
            "cuda": [pytest.mark.needs_cuda] + ([pytest.mark.needs_compiled_triton] if triton else [])}


def pytest_generate_tests(metafunc):
    if "hotpath" in metafunc.fixturenames and metafunc.definition.get_closest_marker("check"):
        return generate_law_tests(metafunc)
    if "device" in metafunc.fixturenames:
        only = metafunc.definition.get_closest_marker("devices")
        marks = device_marks(metafunc.definition.get_closest_marker("triton") is not None)
        metafunc.parametrize("device", [
            pytest.param(d, id=d, marks=marks[d]) for d in DEVICES if only is None or d in only.args
        ])
    if "candidate" in metafunc.fixturenames:
        marker = metafunc.definition.get_closest_marker("hotpath")
        if marker is None:
            raise pytest.UsageError(f"{metafunc.definition.nodeid}: 'candidate' needs @hotpath")
        hotpath = registry.get(marker.args[0])
        metafunc.parametrize("candidate", [
            pytest.param(c, id=c[0]) for c in hotpath.candidates()
        ])


def generate_law_tests(metafunc):
    """A generic law (properties/test_<law>.py): one test per hot path x candidate x device, each
    marked with its hot path, for every hot path whose checks have that law."""
    law = metafunc.definition.get_closest_marker("law")
    law = law.args[0] if law else metafunc.definition.get_closest_marker("check").args[0]
    from strategies import checks_for

    argnames = [n for n in ("hotpath", "checks", "candidate", "device") if n in metafunc.fixturenames]
    params = []
    for hotpath in registry.HOTPATHS.values():
        checks = checks_for(hotpath.name) if hotpath.checks else None
        if checks is None or not checks.has_law(law, hotpath):
            continue
        candidates = [Side(name, factory, version) for name, factory, version in hotpath.candidates()] \
            if "candidate" in argnames else [None]
        marks = device_marks(checks.triton)
        for candidate in candidates:
            for device in checks.devices(law):
                values = {"hotpath": hotpath, "checks": checks, "candidate": candidate, "device": device}
                ids = [hotpath.name, device] + ([candidate.label] if candidate else [])
                triton = [pytest.mark.triton] if checks.triton else []  # (the gate's interpreter run)
                params.append(pytest.param(*(values[n] for n in argnames), id="-".join(ids),
                                           marks=[pytest.mark.hotpath(hotpath.name), *triton, *marks[device]]))
    metafunc.parametrize(argnames, params)


VLLM_VERSION = pytest.StashKey[str | None]()


def installed_vllm(config) -> str | None:
    """The installed vLLM's version, looked up once per session."""
    if VLLM_VERSION not in config.stash:
        config.stash[VLLM_VERSION] = vllm_env.installed_version()
    return config.stash[VLLM_VERSION]


@pytest.fixture(scope="session")
def vllm_version(pytestconfig):
    """The installed vLLM's version (tests that take it are marked `needs_vllm`)."""
    return installed_vllm(pytestconfig)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """A test whose committed fixtures cannot be read fails, naming the file, instead of running."""
    broken = pyfuncitem.get_closest_marker("broken_fixture")
    if broken is not None:
        pytest.fail(broken.args[0], pytrace=False)


def pytest_runtest_setup(item):
    if item.get_closest_marker("needs_cuda") and not torch.cuda.is_available():
        if item.config.getoption("require_cuda"):
            pytest.fail("--require-cuda: no CUDA device is visible to torch", pytrace=False)
        pytest.skip("no CUDA device")
    interpreting = os.environ.get("TRITON_INTERPRET") == "1"
    if item.get_closest_marker("needs_interpreter") and not interpreting:
        why = (" (VLLM_HOTPATHS_INTERPRETER=off: not run on this machine)"
               if os.environ.get("VLLM_HOTPATHS_INTERPRETER") == "off" else " (`vllm-hotpaths gate` starts one)")
        pytest.skip("Triton kernels on CPU tensors run in Triton's interpreter: a process started "
                    "with TRITON_INTERPRET=1" + why)
    if item.get_closest_marker("needs_compiled_triton") and interpreting:
        pytest.skip("TRITON_INTERPRET=1: this process runs Triton interpreted, not on the GPU")
    if item.get_closest_marker("needs_vllm"):
        version = installed_vllm(item.config)
        if version is None:
            pytest.skip("vLLM is not installed")
        marker = item.get_closest_marker("hotpath")
        hotpath = registry.get(marker.args[0]) if marker else None
        if hotpath is not None and hotpath.removed_in(version):
            pytest.skip(registry.REMOVED_MARK + hotpath.removed_in(version))
        if hotpath is not None and not hotpath.exists_in(version):
            pytest.skip(hotpath.absence(version))
    ops = item.get_closest_marker("needs_vllm_ops")
    if ops is not None and vllm_env.compiled_op(ops.args[0]) is None:
        pytest.skip(f"vLLM's compiled op {ops.args[0]} cannot be loaded (no vLLM CUDA install; "
                    "VLLM_HOTPATHS_VLLM_C may name a _C.abi3.so)")


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected
def pytest_collection_modifyitems(config, items):
    """Drift checks exist only where the installed vLLM's hot path has an older reference, and a
    plugin patch's properties only where the patch applies to the installed vLLM. An `--impl`
    whose hot path no selected property checks is an error."""
    for assignment in config.getoption("impl"):
        name = assignment.split("=", 1)[0].split("@", 1)[0]
        if not any(marker.args[0] == name for item in items for marker in item.iter_markers("hotpath")):
            raise pytest.UsageError(f"--impl {assignment}: no selected property checks hot path {name!r} "
                                    "(it is left out by the paths, -k or -m given)")
    version = installed_vllm(config)
    if version is None:
        return
    keep, drop = [], []
    for item in items:
        check, hotpath = item.get_closest_marker("check"), item.get_closest_marker("hotpath")
        if hotpath is not None and registry.get(hotpath.args[0]).removed_in(version):
            keep.append(item)  # its rows say so (status `removed`): never a traceback, never silent
        elif check is not None and check.args[0] == "drift" and (
                not registry.get(hotpath.args[0]).exists_in(version)
                or ledger.older_reference_version(hotpath.args[0], version) is None):
            drop.append(item)
        elif item.get_closest_marker("plugin_patch") and registry.get(hotpath.args[0]).patch_needed(version):
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture
def case_log():
    return CaseLog(REGRESSIONS)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if call.when != "call" and report.passed:
        return
    log = item.funcargs.get("case_log") if hasattr(item, "funcargs") else None
    hotpath = item.get_closest_marker("hotpath")
    check = item.get_closest_marker("check")
    callspec = getattr(item, "callspec", None)
    params = callspec.params if callspec else {}
    if hotpath is not None and check is not None:
        candidate = params.get("candidate")
        label = item.get_closest_marker("implementation")
        if isinstance(candidate, Side):
            implementation = candidate.label
        elif candidate:
            implementation = candidate[0]
        elif label is not None:
            implementation = label.args[0]
        elif log is not None and log.reference_version:  # a generic conformance or drift law
            implementation = f"reference@{log.reference_version}"
        elif check.args[0] == "runner-change":  # (skipped before the law named its v1 reference)
            spec = registry.get(hotpath.args[0])
            try:
                version = registry.get(spec.v1_counterpart).reference_version_for(installed_vllm(item.config))
            except LookupError:  # a vLLM before the v1 hot path's first reference
                version = "none"
            implementation = f"reference@{version} ({spec.v1_counterpart}, v1)"
        else:  # conformance: the reference that the installed vLLM is checked against
            implementation = f"reference@{drift.conformance_reference_version(hotpath.args[0], log)}"
        report.user_properties += [
            ("hotpath", hotpath.args[0]),
            ("check", check.args[0]),
            ("device", params.get("device", "cpu")),
            ("implementation", implementation),
            ("examples", log.examples if log else 0),
            ("excused", sorted(log.excused) if log else []),
            # the runner-change report: how often each entry excused an example, and its fixture
            ("excused_counts", dict(log.excused_counts) if log else {}),
            ("counted_examples", log.counted_examples if log else 0),
            ("shown_fixtures", dict(log.shown_fixtures) if log else {}),
        ]
        if log is not None and log.shown_by:
            report.user_properties.append(("fixture", log.shown_by))
    if report.failed and call.excinfo is not None:
        if call.excinfo.errisinstance(TimedOut):
            report.longrepr = (f"{item.nodeid}: {call.excinfo.value} (the test's time limit: --time-limit, "
                               f"default by Hypothesis profile)")
        elif call.excinfo.errisinstance(fixtures.FixtureError):
            report.longrepr = str(call.excinfo.value)
        report.user_properties.append(("failure", first_lines(call.excinfo.exconly())))
    if report.failed and log is not None and log.last is not None and hotpath is not None:
        report_fixture(item, report, hotpath.args[0], log.last)


def report_fixture(item, report, hotpath: str, case) -> None:
    """Name the failing case's fixture: a committed one it replayed, or a new one written now."""
    committed = fixtures.committed_path(REGRESSIONS, hotpath, case)
    if committed is not None:
        shown = fixtures.shown(committed, item.config.rootpath)
        message = f"failed on the committed fixture {shown}"
    else:
        try:
            planted = registry.reference_overrides(hotpath)
            source = item.nodeid + "".join(f" (reference {v}: {spec})" for v, spec in sorted(planted.items()))
            path = fixtures.save(Path(item.config.getoption("fixture_dir")), hotpath, case, source=source)
            shown = fixtures.shown(path, item.config.rootpath)
            message = f"new counterexample shrunk to {path}"
        except TypeError as err:  # a case that is not a dataclass cannot become a fixture
            shown, message = None, f"no regression fixture written: {err}"
    if shown is not None:
        report.user_properties.append(("fixture", shown))
    if hasattr(report.longrepr, "addsection"):
        report.longrepr.addsection("regression fixture", message)
    else:
        report.longrepr = f"{report.longrepr}\n{message}"


def first_lines(message: str, lines: int = 6, width: int = 300) -> str:
    """The head of a failure's message, for the gate's report."""
    return "\n".join(line[:width] for line in message.splitlines()[:lines])
