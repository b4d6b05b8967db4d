"""The quality set: every deliberately wrong candidate is caught by the `ci` profile, and the
failure writes a regression fixture that the failure message names.

Each run is a fresh pytest process, forked from one that has imported torch and pytest
(tests/forked_pytest.py). The runs pass `--no-shrink`: the examples drawn are the profile's own,
so what is caught is what the profile catches, while shrinking (most of the time of a failing
run) is left out here. The shrunk fixture a failing run writes is tested in
tests/test_gate_robustness.py.

Committed fixtures are not replayed here (VLLM_HOTPATHS_NO_REPLAY=1): generation alone must find
each bug, so the committed counterexamples are a second net, not the only one. Nor are they
consulted (VLLM_HOTPATHS_REGRESSIONS names an empty folder): where a planted bug's shrunk case is
committed, generation still writes it, instead of naming the committed file."""

import importlib
import json
import pkgutil
import re

import pytest

from properties import quality
from properties.quality.runs import failure_types, planted_runs
from tests.forked_pytest import run_pytest

PLANTED = planted_runs()


@pytest.mark.parametrize("run", PLANTED, ids=[run.name for run in PLANTED])
def test_planted_bug_is_caught(run, pytestconfig, tmp_path):
    """A candidate (`--impl`) or a planted reference (`--reference`, law conformance against the
    installed vLLM) fails its property on the CPU, found by generated cases (its profile,
    derandomized); one that fresh seeds' generation reaches on fewer than 8 of 10 also fails on
    the committed fixture named for it, replayed."""
    if run.skip_reason():
        pytest.skip(run.skip_reason())
    root = pytestconfig.rootpath
    args = run.args(tmp_path)
    assert args[:2] == ["-m", "pytest"], args
    result = run_pytest(args[2:], root, **run.env(tmp_path))
    assert_caught_with_fixture(result, tmp_path, run.hotpath, run.mutant)
    if run.fixture is not None:
        replayed = tmp_path / "replayed"
        result = run_pytest([run.target, "-q", "-x", "-p", "no:cacheprovider", "-k", run.keyword, "--hypothesis-profile",
                             "smoke", "--fixture-dir", str(replayed), run.option, run.spec], root)
        named = [line for line in result.stdout.splitlines() if "committed fixture" in line and run.fixture in line]
        assert result.returncode == 1 and named, result.stdout[-3000:]


def assert_caught_with_fixture(result, fixture_dir, hotpath: str, mutant: str) -> None:
    """The run failed on a comparison (an AssertionError naming a difference, not an error on the
    way to it) and wrote exactly one fixture, named in its output, from this mutant."""
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    assert failure_types(fixture_dir / "junit.xml") == ["AssertionError"], result.stdout[-3000:]
    written = list((fixture_dir / hotpath).glob("*.json"))
    assert len(written) == 1
    assert str(written[0]) in result.stdout
    record = json.loads(written[0].read_text())
    assert record["hotpath"] == hotpath and mutant in record["source"]


# The committed fixtures that show each flaw of prime-rl PR #2772's watermark (candidate-fixture).
PRIME_RL_FLAWS = {
    "PrimeRLWatermark@0.21.0-ThinkProgram-e180b62b7191": "0.22: output shrinks below a found end",
    "PrimeRLWatermark@0.21.0-ThinkProgram-574be9a32454": "0.22: interior placeholder becomes a marker",
    "PrimeRLWatermark028@0.28.0-ThinkProgram-3bcfb5ba8c78": "0.28: -2 read as a found end",
}


def test_prime_rl_flaws_fail_on_their_fixtures(run_cli, tmp_path):
    """The equivalence law replays every committed program before generating any, and its failure
    names each one the candidate differs on: each flaw's fixture is named for its candidate."""
    result = run_cli(
        "-m", "pytest", "properties/test_equivalence.py", "-q", "-p", "no:cacheprovider",
        "-k", "think_budget and cpu", "--fixture-dir", str(tmp_path),
        "--impl", "think_budget@0.21.0=properties.quality.think_budget:PrimeRLWatermark",
        "--impl", "think_budget@0.28.0=properties.quality.think_budget:PrimeRLWatermark028",
    )
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    named = [line for line in result.stdout.splitlines() if "committed fixture ThinkProgram-" in line]
    for key, flaw in PRIME_RL_FLAWS.items():
        candidate, _, fixture = key.partition("-")
        assert any(f"committed fixture {fixture}: " in line and f":{candidate} vs " in line for line in named), \
            f"{flaw}: not caught\n{result.stdout[-3000:]}"


def test_the_gpu_script_plants_every_cuda_only_bug(pytestconfig):
    """The planted bugs that show only on CUDA are not in `planted_runs()` (CI has no GPU), and
    `ci/gpu/cuda-suite.sh`'s quality part names them by hand: its list holds exactly the
    (hot path, planted bug) pairs whose quality module marks them "cuda" alone in a MUTANTS
    table, each run with its own module's class."""
    script = (pytestconfig.rootpath / "ci" / "gpu" / "cuda-suite.sh").read_text()
    listed = set(re.findall(r'"(\w+)-(\w+)\|[^"]*=properties\.quality\.\1:\2"', script))
    cuda_only = set()
    for info in pkgutil.iter_modules(quality.__path__):
        module = importlib.import_module(f"properties.quality.{info.name}")
        for attr, table in vars(module).items():
            if not (attr.endswith("MUTANTS") and isinstance(table, dict)):
                continue
            for name, value in table.items():
                devices = value[-1] if isinstance(value, tuple) else value
                if isinstance(devices, str) and devices.split() == ["cuda"]:
                    cuda_only.add((info.name, name))
    assert cuda_only, "no quality module marks a planted bug as CUDA-only"
    assert listed == cuda_only, (f"missing from ci/gpu/cuda-suite.sh: {sorted(cuda_only - listed)}; "
                                 f"listed but not CUDA-only: {sorted(listed - cuda_only)}")
