"""The generation-only sweep (`python -m properties.quality.sweep`): one seed's run counts as caught
only when a comparison fails, and a correct candidate is never counted."""

import dataclasses

import pytest
import torch

from properties.quality import sweep
from properties.quality.runs import planted_runs


def penalties_run():
    return next(run for run in planted_runs() if run.hotpath == "penalties" and run.profile == "ci")


def test_a_planted_bug_counts_as_caught():
    ok, seconds, note = sweep.caught(penalties_run(), seed=1)
    assert ok and note == "" and seconds > 0


def test_a_correct_candidate_is_not_counted():
    shipped = dataclasses.replace(penalties_run(), spec="penalties=vllm_hotpaths.penalties.fast:IncrementalPenalties")
    ok, _, note = sweep.caught(shipped, seed=1, profile="smoke")
    assert not ok and note == ""


def test_an_error_on_the_way_is_not_counted():
    broken = dataclasses.replace(penalties_run(), spec="penalties=vllm_hotpaths.penalties.fast:NoSuchClass")
    ok, _, note = sweep.caught(broken, seed=1, profile="smoke")
    assert not ok and "exit" in note


def test_an_unknown_hot_path_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_:
        sweep.main(["--hotpath", "no_such_hotpath"])
    assert exit_.value.code == 2 and "no planted bugs for ['no_such_hotpath']" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine whose cuda rows skip")
def test_a_bug_whose_tests_all_skip_is_listed_as_skipped_not_missed(monkeypatch, capsys):
    # every cuda row skips without a GPU, as a conformance bug's rows do without vLLM
    on_cuda = dataclasses.replace(penalties_run(), keyword="penalties and cuda")
    monkeypatch.setattr(sweep, "planted_runs", lambda: [on_cuda])
    assert sweep.main(["--seeds", "1", "-n", "1"]) == 0
    assert f"{on_cuda.name}: skipped (every selected test skipped on every seed" in capsys.readouterr().out
