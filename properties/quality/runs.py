"""How each planted bug of the quality set is run: the pytest command that must fail on it.

`planted_runs()` lists every planted bug of every hot path as a `PlantedRun`; `tests/test_quality.py`
runs each once (its profile, derandomized) and `python -m properties.quality.sweep` runs each under
fresh seeds (generation-only power, docs/quality.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

LAWS = ("equivalence", "errors", "conformance", "drift", "patch")


@dataclass(frozen=True)
class PlantedRun:
    hotpath: str
    mutant: str
    target: str  # the property module: a generic law's, or the hot path's own
    keyword: str  # pytest -k
    option: str  # --impl (a candidate) or --reference (a planted reference, law conformance)
    spec: str  # the option's value: hotpath[@version]=module:attr
    profile: str  # the profile that catches it derandomized: ci, or quality (NEED_MORE_EXAMPLES)
    interpreted: bool = False  # Triton kernels: TRITON_INTERPRET=1
    fixture: str | None = None  # fresh seeds reach it on fewer than 8 of 10: this committed fixture catches it
    since: str | None = None  # the installed vLLM must be this release or later (the hot path, or the class)

    @property
    def name(self) -> str:
        return f"{self.hotpath}-{self.mutant}"

    def skip_reason(self) -> str | None:
        """Why this run cannot run under the installed vLLM (None: it can)."""
        if self.since is None:
            return None
        from vllm_hotpaths import registry, vllm_env

        version = vllm_env.installed_version()
        if version is None or registry.version_key(version) < registry.version_key(self.since):
            return f"needs vLLM {self.since} or later, installed: {version}"
        return None

    def args(self, out: Path, profile: str | None = None, seed: int | None = None) -> list[str]:
        """pytest's arguments: fixtures written under `out`, the failure types in `out/junit.xml`;
        `profile` and `seed` in place of the run's own derandomized profile."""
        args = ["-m", "pytest", self.target, "-q", "-x", "-p", "no:cacheprovider", "-p", "no:xdist", "--no-shrink",
                f"--junitxml={out / 'junit.xml'}", "-k", self.keyword, "--hypothesis-profile", profile or self.profile,
                self.option, self.spec, "--fixture-dir", str(out)]
        return args + (["--hypothesis-seed", str(seed)] if seed is not None else [])

    def env(self, out: Path) -> dict[str, str]:
        """Committed fixtures neither replayed nor consulted (generation alone must find the bug)."""
        empty = out / "no-committed-fixtures"
        empty.mkdir(parents=True, exist_ok=True)
        env = {"VLLM_HOTPATHS_NO_REPLAY": "1", "VLLM_HOTPATHS_REGRESSIONS": str(empty)}
        return {**env, "TRITON_INTERPRET": "1"} if self.interpreted else env


def failure_types(junit_xml: Path) -> list[str]:
    """The exception type of each failure in a JUnit report (none where there is no report)."""
    import xml.etree.ElementTree as ET

    if not Path(junit_xml).exists():
        return []
    return [f.get("message", "").split(":", 1)[0].split(".")[-1] for f in ET.parse(junit_xml).getroot().iter("failure")]


def _law_or_own(hotpath: str, prop: str) -> tuple[str, str]:
    """(module, -k) of a generic law, or of a property in the hot path's own module."""
    if prop in LAWS:
        return f"properties/test_{prop}.py", f"{hotpath} and cpu"
    return f"properties/test_{hotpath}.py", f"{prop} and not fixtures and not cuda"


def _profile(module, mutant: str) -> str:
    return "quality" if mutant in getattr(module, "NEED_MORE_EXAMPLES", ()) else "ci"


def _fixture(module, mutant: str) -> str | None:
    return getattr(module, "CAUGHT_BY_FIXTURE", {}).get(mutant)


def planted_runs() -> list[PlantedRun]:
    from properties.quality import (cached_request_data, logits_copy, penalties, penalties_mrv2, recovered_tokens, rejection_mrv2,
                                    sampler_mrv2, swap_states, think_budget, think_budget_mrv2)

    runs = [PlantedRun("penalties", m, f"properties/test_{law}.py", "penalties and cpu", "--impl",
                       f"penalties=properties.quality.penalties:{m}", _profile(penalties, m),
                       fixture=_fixture(penalties, m))
            for m, law in penalties.MUTANTS.items()]
    for hotpath, module in (("think_budget", think_budget), ("swap_states", swap_states)):
        for m, (version, prop) in module.MUTANTS.items():
            runs.append(PlantedRun(hotpath, m, *_law_or_own(hotpath, prop), "--impl",
                                   f"{hotpath}@{version}=properties.quality.{hotpath}:{m}", _profile(module, m),
                                   fixture=_fixture(module, m)))
    for m, (version, law, devices) in recovered_tokens.MUTANTS.items():
        if "cpu" in devices.split():
            runs.append(PlantedRun("recovered_tokens", m, *_law_or_own("recovered_tokens", law),
                                   "--reference" if law == "conformance" else "--impl",
                                   f"recovered_tokens@{version}=properties.quality.recovered_tokens:{m}",
                                   _profile(recovered_tokens, m), interpreted=True))
    for m, caught_by in logits_copy.MUTANTS.items():
        target, keyword = (f"properties/test_{caught_by}.py", "logits_copy and cpu") if caught_by in logits_copy.LAWS \
            else ("properties/test_logits_copy.py", f"{caught_by} and cpu")
        runs.append(PlantedRun("logits_copy", m, target, keyword, "--impl",
                               f"logits_copy@{logits_copy.version_of(m)}=properties.quality.logits_copy:{m}",
                               _profile(logits_copy, m), interpreted=True, fixture=_fixture(logits_copy, m)))
    for hotpath, module, version, since in (
            ("penalties_mrv2", penalties_mrv2, "0.16.0", None),
            ("think_budget_mrv2", think_budget_mrv2, "0.28.0", "0.28.0"),
            ("rejection_mrv2", rejection_mrv2, None, None),
            ("sampler_mrv2", sampler_mrv2, None, "0.22.0")):
        for m, devices in module.MUTANTS.items():
            if "cpu" in devices.split():
                at = version or module.reference_version()
                runs.append(PlantedRun(hotpath, m, "properties/test_conformance.py", f"{hotpath} and cpu",
                                       "--reference", f"{hotpath}@{at}=properties.quality.{hotpath}:{m}", "ci",
                                       interpreted=True, since=getattr(module, "SINCE", {}).get(m, since)))
    for m, caught_by in logits_copy.REFERENCE_MUTANTS.items():  # 0.22.0's reference, two steps swapped
        runs.append(PlantedRun("logits_copy", m, *_law_or_own("logits_copy", caught_by), "--reference",
                               f"logits_copy@0.22.0=properties.quality.logits_copy:{m}", "ci", interpreted=True,
                               since="0.22.0"))
    for m, (law, devices) in sampler_mrv2.FAST_MUTANTS.items():
        if "cpu" in devices.split():
            runs.append(PlantedRun("sampler_mrv2", m, *_law_or_own("sampler_mrv2", law),
                                   "--impl", f"sampler_mrv2@0.22.0=properties.quality.sampler_mrv2:{m}",
                                   _profile(sampler_mrv2, m), interpreted=True))
    for m, (law, devices) in sampler_mrv2.LAZY_MUTANTS.items():  # the lazy pass of 0.31.0 (murmur3)
        if "cpu" in devices.split():
            runs.append(PlantedRun("sampler_mrv2", m, *_law_or_own("sampler_mrv2", law),
                                   "--impl", f"sampler_mrv2@0.31.0=properties.quality.sampler_mrv2:{m}",
                                   _profile(sampler_mrv2, m), interpreted=True))
    for m, (version, law) in cached_request_data.MUTANTS.items():
        runs.append(PlantedRun("cached_request_data", m, f"properties/test_{law}.py", "cached_request_data and cpu",
                               "--impl", f"cached_request_data@{version}=properties.quality.cached_request_data:{m}",
                               _profile(cached_request_data, m)))
    for m in cached_request_data.REFERENCE_MUTANTS:  # subclasses of the 0.16.0 reference
        runs.append(PlantedRun("cached_request_data", m, "properties/test_conformance.py", "cached_request_data and cpu",
                               "--reference", f"cached_request_data@0.16.0=properties.quality.cached_request_data:{m}",
                               "ci"))
    return runs
