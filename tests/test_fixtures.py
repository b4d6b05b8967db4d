"""Fixture files round-trip a case exactly and replay as explicit examples."""

import math

from hypothesis import given, settings

from strategies import penalties_programs
from vllm_hotpaths.testing.cases.penalties import PenaltiesProgram
from properties import REGRESSIONS
from vllm_hotpaths.testing import fixtures


def same(a, b):
    """Equality that treats NaN as equal to NaN and tells -0.0 from 0.0."""
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    return type(a) is type(b) and a == b


@settings(max_examples=30)
@given(program=penalties_programs())
def test_round_trip(tmp_path_factory, program):
    directory = tmp_path_factory.mktemp("fx")
    path = fixtures.save(directory, "penalties", program, source="test")
    assert fixtures.save(directory, "penalties", program, source="test") == path  # idempotent
    [(loaded_path, loaded)] = fixtures.load(directory, "penalties", PenaltiesProgram)
    assert loaded_path == path
    assert all(same(getattr(loaded, f), getattr(program, f)) for f in
               ("vocab_size", "max_num_reqs", "max_model_len", "ops"))


def test_committed_fixtures_are_replayed_as_examples():
    committed = fixtures.load(REGRESSIONS, "penalties", PenaltiesProgram)
    assert committed, "the upstream-bug fixtures are committed"
    seen = []

    @fixtures.replayed("penalties", PenaltiesProgram, "program", REGRESSIONS)
    @settings(phases=[__import__("hypothesis").Phase.explicit], database=None)
    @given(program=penalties_programs())
    def probe(program):
        seen.append(program)

    probe()
    assert len(seen) == len(committed)
    assert all(same(a, b) for a, (_, b) in zip(seen, committed))


BAD_FIXTURES = [
    ("{not json", "not readable JSON"),
    ('["a list"]', 'no "case" object'),
    ('{"case_type": "RepairCase", "case": {}}', "its case_type is 'RepairCase', its name says PenaltiesProgram"),
    ('{"case": {"vocab_size": 4, "max_num_reqs": 1, "max_model_len": 8, "ops": [], "colour": 1}}',
     "unknown fields ['colour']"),
    ('{"case": {"vocab_size": 4}}', "missing fields ['max_model_len', 'max_num_reqs', 'ops']"),
]


def test_a_fixture_that_is_not_a_case_is_named_with_its_problem(tmp_path):
    import pytest

    for i, (text, problem) in enumerate(BAD_FIXTURES):
        folder = tmp_path / str(i)
        path = folder / "penalties" / "PenaltiesProgram-000000000000.json"
        path.parent.mkdir(parents=True)
        path.write_text(text)
        with pytest.raises(fixtures.FixtureError) as raised:
            fixtures.load(folder, "penalties", PenaltiesProgram)
        assert str(raised.value).startswith(f"fixture {path}: ") and problem in str(raised.value), raised.value


def test_a_field_at_its_default_is_left_out_where_marked(tmp_path):
    """A field added to a case type later leaves the fixtures written before it unchanged (their
    JSON, so their names); set, it is written and read back."""
    from vllm_hotpaths.testing.cases.rejection_mrv2 import RejectionCase

    plain = RejectionCase(3, 1, 1, ((0, (1,), 1.0, 7, 0, 0),), False, 5, 0.0)
    assert "ties" not in fixtures.to_jsonable(plain) and "edits" in fixtures.to_jsonable(plain)
    tied = RejectionCase(3, 1, 1, ((0, (1,), 1.0, 7, 0, 0),), False, 5, 0.0, ties=(0,))
    assert fixtures.to_jsonable(tied)["ties"] == [0]
    for case in (plain, tied):
        path = fixtures.save(tmp_path, "rejection_mrv2", case, source="test")
        assert [loaded for p, loaded in fixtures.load(tmp_path, "rejection_mrv2", RejectionCase) if p == path] == [case]
    assert fixtures.path_for(tmp_path, "rejection_mrv2", plain) != fixtures.path_for(tmp_path, "rejection_mrv2", tied)
