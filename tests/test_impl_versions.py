"""`--impl HOTPATH@X=...` for any vLLM release X: the candidate is checked against the reference
in force at X; a release before the first reference, or no version at all, is refused by name."""

import pytest

from vllm_hotpaths import registry

CANDIDATE = "vllm_hotpaths.recovered_tokens.fast:SplitVocabDivision"


@pytest.fixture
def overrides(monkeypatch):
    monkeypatch.setattr(registry, "_impl_overrides", {})
    return registry._impl_overrides


def test_a_release_between_references_takes_the_reference_in_force_there(overrides):
    hotpath = registry.get("recovered_tokens")
    assert sorted(hotpath.references, key=registry.version_key)[:2] == ["0.16.0", "0.17.0"]
    registry.override_implementation(f"recovered_tokens@0.22.0={CANDIDATE}")
    registry.override_implementation(f"recovered_tokens@0.16.1={CANDIDATE}")
    registry.override_implementation(f"recovered_tokens@0.17.0={CANDIDATE}")  # the same check as 0.22.0
    assert overrides["recovered_tokens"] == [(CANDIDATE, "0.17.0"), (CANDIDATE, "0.16.0")]
    assert [version for _, _, version in hotpath.candidates()] == ["0.17.0", "0.16.0"]


def test_no_version_means_the_newest_reference(overrides):
    registry.override_implementation(f"recovered_tokens={CANDIDATE}")
    assert overrides["recovered_tokens"] == [(CANDIDATE, registry.get("recovered_tokens").reference_version_for(None))]


@pytest.mark.parametrize("version, message", [
    ("0.15.1", "has no reference for vLLM 0.15.1 (references: 0.16.0, 0.17.0)"),
    ("latest", "'latest' is not a vLLM version"),
])
def test_a_release_without_a_reference_in_force_is_refused_by_name(overrides, version, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        registry.override_implementation(f"recovered_tokens@{version}={CANDIDATE}")
    assert overrides == {}
