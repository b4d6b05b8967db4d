"""Strategies built once per distinct arguments (`vllm_hotpaths.testing.kept_strategies`): the same
object for the same arguments, another for arguments that only compare equal, and the same draws
as Hypothesis' own functions."""

from hypothesis import given, settings
from hypothesis import strategies

from vllm_hotpaths.testing import kept_strategies
from vllm_hotpaths.testing.kept_strategies import KEPT, KeptStrategies


def test_equal_arguments_share_one_strategy():
    live = [0, 2, 5]
    assert KEPT.sampled_from(live) is KEPT.sampled_from(list(live))
    assert KEPT.integers(0, 7) is KEPT.integers(0, 7)
    assert KEPT.one_of(KEPT.sampled_from(live), KEPT.integers(0, 7)) is \
        KEPT.one_of(KEPT.sampled_from([0, 2, 5]), KEPT.integers(0, 7))
    assert KEPT.integers(min_value=0, max_value=3) is KEPT.integers(max_value=3, min_value=0)


def test_arguments_that_only_compare_equal_make_their_own_strategies():
    assert KEPT.just(0) is not KEPT.just(False) and KEPT.just(0) is not KEPT.just(0.0)
    assert KEPT.just(0.0) is not KEPT.just(-0.0)
    assert KEPT.sampled_from([1, 2]) is not KEPT.sampled_from((1, 2)) is not KEPT.sampled_from([1, 3])
    assert KEPT.just({"a": 1}) is not KEPT.just({"a": 1})  # not a key: made each time


def test_a_full_table_starts_again(monkeypatch):
    monkeypatch.setattr(kept_strategies, "LIMIT", 3)
    kept = KeptStrategies()
    for n in range(4):
        kept.integers(0, n)
    assert list(kept._kept["integers"].values()) == [strategies.integers(0, 3)]


def _drawn(source) -> list:
    """Everything one derandomized run draws from `source`'s strategies, as a rule does."""
    seen = []

    @settings(max_examples=60, derandomize=True, database=None)
    @given(strategies.data())
    def run(data):
        live = sorted(set(data.draw(strategies.lists(strategies.integers(0, 9), max_size=5))))
        anyone = source.integers(0, 12)
        pick = source.one_of(*[source.sampled_from(live)] * 4, anyone) if live else anyone
        seen.append((live, data.draw(pick), data.draw(source.one_of(source.just(0), source.integers(1, 3)))))

    run()
    return seen


def test_the_draws_are_hypothesis_own():
    assert _drawn(KEPT) == _drawn(strategies)
