"""The quality set: every deliberately wrong candidate is caught by the `ci` profile, and the
failure writes a regression fixture that the failure message names.

The runs pass `--no-shrink`: the examples drawn are the profile's own, so what is caught is what
the profile catches, while shrinking (most of the time of a failing run) is left out here. The
shrunk fixture a failing run writes is tested in tests/test_gate_robustness.py.

Committed fixtures are not replayed here (VLLM_HOTPATHS_NO_REPLAY=1): generation alone must find
each bug, so the committed counterexamples are a second net, not the only one. Nor are they
consulted (VLLM_HOTPATHS_REGRESSIONS names an empty folder): where a planted bug's shrunk case is
committed, generation still writes it, instead of naming the committed file."""

import json

import pytest

from properties.quality import logits_copy as logits_copy_mutants
from properties.quality import penalties as penalties_mutants
from properties.quality import penalties_mrv2 as penalties_mrv2_mutants
from properties.quality import recovered_tokens as recovered_tokens_mutants
from properties.quality import rejection_mrv2 as rejection_mrv2_mutants
from properties.quality import swap_states as swap_states_mutants
from properties.quality import think_budget as think_budget_mutants
from properties.quality import think_budget_mrv2 as think_budget_mrv2_mutants


def generation_only(tmp_path) -> dict[str, str]:
    """The environment of a quality run: committed fixtures neither replayed nor consulted."""
    empty = tmp_path / "no-committed-fixtures"
    empty.mkdir(exist_ok=True)
    return {"VLLM_HOTPATHS_NO_REPLAY": "1", "VLLM_HOTPATHS_REGRESSIONS": str(empty)}


@pytest.mark.parametrize("mutant, law", penalties_mutants.MUTANTS.items())
def test_penalties_mutant_is_caught(mutant, law, run_cli, tmp_path):
    result = run_cli(
        "-m", "pytest", f"properties/test_{law}.py", "-q", "-x", "-p", "no:cacheprovider", "--no-shrink", f"--junitxml={tmp_path / 'junit.xml'}",
        "-k", "penalties and cpu", "--hypothesis-profile",
        "quality" if mutant in penalties_mutants.NEED_MORE_EXAMPLES else "ci",
        "--impl", f"penalties=properties.quality.penalties:{mutant}", "--fixture-dir", str(tmp_path),
        **generation_only(tmp_path),
    )
    assert_caught_with_fixture(result, tmp_path, "penalties", mutant)


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


def failure_types(junit_xml) -> list[str]:
    """The exception type of each failure in a JUnit report."""
    import xml.etree.ElementTree as ET

    failures = ET.parse(junit_xml).getroot().iter("failure")
    return [f.get("message", "").split(":", 1)[0].split(".")[-1] for f in failures]


VERSIONED_MUTANTS = [(hotpath, mutant, version, prop)
                     for hotpath, module in (("think_budget", think_budget_mutants),
                                             ("swap_states", swap_states_mutants))
                     for mutant, (version, prop) in module.MUTANTS.items()]


@pytest.mark.parametrize("hotpath, mutant, version, prop", VERSIONED_MUTANTS,
                         ids=[f"{h}-{m}" for h, m, _, _ in VERSIONED_MUTANTS])
def test_versioned_mutant_is_caught(hotpath, mutant, version, prop, run_cli, tmp_path):
    """A candidate checked against the reference of `version`; generated cases only, on CPU.
    `prop` names a generic law (properties/test_<law>.py, the hot path's cases) or a property of
    the hot path's own module (properties/test_<hotpath>.py)."""
    if prop in ("equivalence", "errors", "conformance", "drift", "patch"):
        target, keyword = f"properties/test_{prop}.py", f"{hotpath} and cpu"
    else:
        target, keyword = f"properties/test_{hotpath}.py", f"{prop} and not fixtures and not cuda"
    module = {"think_budget": think_budget_mutants, "swap_states": swap_states_mutants}[hotpath]
    profile = "quality" if mutant in getattr(module, "NEED_MORE_EXAMPLES", ()) else "ci"
    fixture = getattr(module, "CAUGHT_BY_FIXTURE", {}).get(mutant)
    if fixture is not None:  # generation does not reach it reliably: its committed fixture does
        result = run_cli("-m", "pytest", target, "-q", "-x", "-p", "no:cacheprovider", "-k", keyword,
                         "--hypothesis-profile", "smoke", "--fixture-dir", str(tmp_path),
                         "--impl", f"{hotpath}@{version}=properties.quality.{hotpath}:{mutant}")
        assert result.returncode == 1 and f"committed fixture {fixture}" in result.stdout, result.stdout[-3000:]
        return
    result = run_cli(
        "-m", "pytest", target, "-q", "-x", "-p", "no:cacheprovider", "--no-shrink", f"--junitxml={tmp_path / 'junit.xml'}",
        "-k", keyword, "--hypothesis-profile", profile,
        "--impl", f"{hotpath}@{version}=properties.quality.{hotpath}:{mutant}",
        "--fixture-dir", str(tmp_path), **generation_only(tmp_path),
    )
    assert_caught_with_fixture(result, tmp_path, hotpath, mutant)


CPU_RECOVERY_MUTANTS = {name: spec for name, spec in recovered_tokens_mutants.MUTANTS.items()
                        if "cpu" in spec[2].split()}


@pytest.mark.parametrize("mutant", sorted(CPU_RECOVERY_MUTANTS))
def test_recovered_tokens_mutant_is_caught(mutant, run_cli, tmp_path):
    """Triton kernels interpreted on the CPU; `IEEEDivision` shows only on CUDA (the GPU run). A
    planted reference (law conformance) is checked against the installed vLLM in place of the
    frozen one."""
    version, law, _ = CPU_RECOVERY_MUTANTS[mutant]
    option = "--reference" if law == "conformance" else "--impl"
    result = run_cli(
        "-m", "pytest", f"properties/test_{law}.py", "-q", "-x", "-p", "no:cacheprovider", "--no-shrink", f"--junitxml={tmp_path / 'junit.xml'}",
        "-k", "recovered_tokens and cpu",
        "--hypothesis-profile", "quality" if mutant in recovered_tokens_mutants.NEED_MORE_EXAMPLES else "ci",
        option, f"recovered_tokens@{version}=properties.quality.recovered_tokens:{mutant}",
        "--fixture-dir", str(tmp_path), **generation_only(tmp_path), TRITON_INTERPRET="1",
    )
    assert_caught_with_fixture(result, tmp_path, "recovered_tokens", mutant)


@pytest.mark.parametrize("mutant", sorted(logits_copy_mutants.MUTANTS))
def test_logits_copy_mutant_is_caught(mutant, run_cli, tmp_path):
    """Each skips the copy where a step would have changed a logit (reference kernels interpreted):
    caught by a generic law (properties/test_<law>.py) or a logits-copy property."""
    caught_by = logits_copy_mutants.MUTANTS[mutant]
    if caught_by in logits_copy_mutants.LAWS:
        target, selected = f"properties/test_{caught_by}.py", "logits_copy and cpu"
    else:
        target, selected = "properties/test_logits_copy.py", f"{caught_by} and cpu"
    profile = "quality" if mutant in logits_copy_mutants.NEED_MORE_EXAMPLES else "ci"
    result = run_cli(
        "-m", "pytest", target, "-q", "-x", "-p", "no:cacheprovider", "--no-shrink", f"--junitxml={tmp_path / 'junit.xml'}",
        "-k", selected, "--hypothesis-profile", profile,
        "--impl", f"logits_copy@{logits_copy_mutants.version_of(mutant)}=properties.quality.logits_copy:{mutant}",
        "--fixture-dir", str(tmp_path), **generation_only(tmp_path), TRITON_INTERPRET="1",
    )
    assert_caught_with_fixture(result, tmp_path, "logits_copy", mutant)


CPU_MRV2_PENALTIES_MUTANTS = sorted(name for name, devices in penalties_mrv2_mutants.MUTANTS.items()
                                    if "cpu" in devices.split())


@pytest.mark.parametrize("mutant", CPU_MRV2_PENALTIES_MUTANTS)
def test_penalties_mrv2_mutant_is_caught(mutant, run_cli, tmp_path):
    """A planted Model Runner V2 penalties reference, checked against the installed vLLM's own
    MRv2 code in place of the frozen one (both interpreted on the CPU)."""
    result = run_cli(
        "-m", "pytest", "properties/test_conformance.py", "-q", "-x", "-p", "no:cacheprovider", "--no-shrink",
        f"--junitxml={tmp_path / 'junit.xml'}", "-k", "penalties_mrv2 and cpu", "--hypothesis-profile", "ci",
        "--reference", f"penalties_mrv2@0.16.0=properties.quality.penalties_mrv2:{mutant}",
        "--fixture-dir", str(tmp_path), **generation_only(tmp_path), TRITON_INTERPRET="1",
    )
    assert_caught_with_fixture(result, tmp_path, "penalties_mrv2", mutant)


CPU_MRV2_THINK_BUDGET_MUTANTS = sorted(name for name, devices in think_budget_mrv2_mutants.MUTANTS.items()
                                       if "cpu" in devices.split())


@pytest.mark.parametrize("mutant", CPU_MRV2_THINK_BUDGET_MUTANTS)
def test_think_budget_mrv2_mutant_is_caught(mutant, run_cli, tmp_path):
    """A planted Model Runner V2 thinking-budget reference, checked against the installed vLLM's
    own MRv2 state in place of the frozen one (its kernels interpreted on the CPU)."""
    from vllm_hotpaths import registry, vllm_env

    version = vllm_env.installed_version()
    if version is None or not registry.get("think_budget_mrv2").exists_in(version):
        pytest.skip(f"vLLM {version} has no Model Runner V2 thinking budget")
    result = run_cli(
        "-m", "pytest", "properties/test_conformance.py", "-q", "-x", "-p", "no:cacheprovider", "--no-shrink",
        f"--junitxml={tmp_path / 'junit.xml'}", "-k", "think_budget_mrv2 and cpu", "--hypothesis-profile", "ci",
        "--reference", f"think_budget_mrv2@0.28.0=properties.quality.think_budget_mrv2:{mutant}",
        "--fixture-dir", str(tmp_path), **generation_only(tmp_path), TRITON_INTERPRET="1",
    )
    assert_caught_with_fixture(result, tmp_path, "think_budget_mrv2", mutant)


CPU_REJECTION_MRV2_MUTANTS = sorted(name for name, devices in rejection_mrv2_mutants.MUTANTS.items()
                                    if "cpu" in devices.split())


@pytest.mark.parametrize("mutant", CPU_REJECTION_MRV2_MUTANTS)
def test_rejection_mrv2_mutant_is_caught(mutant, run_cli, tmp_path):
    """A planted Model Runner V2 rejection sampling reference, checked against the installed vLLM's
    own `rejection_sample` in place of the frozen one (both interpreted on the CPU)."""
    result = run_cli(
        "-m", "pytest", "properties/test_conformance.py", "-q", "-x", "-p", "no:cacheprovider", "--no-shrink",
        f"--junitxml={tmp_path / 'junit.xml'}", "-k", "rejection_mrv2 and cpu", "--hypothesis-profile", "ci",
        "--reference",
        f"rejection_mrv2@{rejection_mrv2_mutants.reference_version()}=properties.quality.rejection_mrv2:{mutant}",
        "--fixture-dir", str(tmp_path), **generation_only(tmp_path), TRITON_INTERPRET="1",
    )
    assert_caught_with_fixture(result, tmp_path, "rejection_mrv2", mutant)


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
