"""The choice between the lazy and the fused sampling pass (`sampler_mrv2.pass_choice`): lazy
until a measured lazy batch reads again more than `FLAT_SHARE` of its ids, then `FUSED_RUN` fused
batches, then lazy again; a share is read once it has landed, and no other is measured before;
the first lazy batch after a fused run is measured, then one in `MEASURE_EVERY`."""

import pytest
import torch

from vllm_hotpaths import vllm_env
from vllm_hotpaths.sampler_mrv2.pass_choice import FLAT_SHARE, FUSED_RUN, LAZY_MIN_ROWS, MEASURE_EVERY, PassChoice

VOCAB = 1000


ROWS, BLOCKS = 4, 2
IDS = ROWS * VOCAB


def drawn_rows(share: float) -> torch.Tensor:
    """Ids read again per row and block, `share` of the batch's in all."""
    return torch.full((ROWS, BLOCKS), int(share * VOCAB / BLOCKS), dtype=torch.int32)


def test_peaked_batches_keep_the_lazy_pass():
    choice = PassChoice()
    for _ in range(3 * FUSED_RUN):
        assert choice.lazy_next(LAZY_MIN_ROWS)
        choice.lazy_done(drawn_rows(FLAT_SHARE), IDS)  # at the share itself: still lazy


def test_a_flat_batch_sends_the_next_ones_to_the_fused_pass_then_lazy_looks_again():
    choice = PassChoice()
    assert choice.lazy_next(LAZY_MIN_ROWS)
    choice.lazy_done(drawn_rows(FLAT_SHARE + 0.01), IDS)
    assert [choice.lazy_next(LAZY_MIN_ROWS) for _ in range(FUSED_RUN)] == [False] * FUSED_RUN
    assert choice.lazy_next(LAZY_MIN_ROWS)  # the look: measured, still flat
    choice.lazy_done(drawn_rows(1.0), IDS)
    assert [choice.lazy_next(LAZY_MIN_ROWS) for _ in range(FUSED_RUN)] == [False] * FUSED_RUN
    assert choice.lazy_next(LAZY_MIN_ROWS)  # peaked now
    choice.lazy_done(drawn_rows(0.05), IDS)
    assert choice.lazy_next(LAZY_MIN_ROWS) and choice.lazy_next(LAZY_MIN_ROWS)


def test_one_lazy_batch_in_measure_every_is_measured_and_an_unread_share_is_kept():
    """After a measured batch, later lazy batches are not measured until its share is read, then
    one in `MEASURE_EVERY`."""
    choice = PassChoice()
    choice.lazy_done(drawn_rows(0.05), IDS)  # measured
    choice.lazy_done(drawn_rows(1.0), IDS)  # not: the first share is still unread
    assert choice.lazy_next(LAZY_MIN_ROWS)  # reads 5%
    for _ in range(MEASURE_EVERY - 1):
        choice.lazy_done(drawn_rows(1.0), IDS)
        assert choice.lazy_next(LAZY_MIN_ROWS)
    choice.lazy_done(drawn_rows(1.0), IDS)
    assert not choice.lazy_next(LAZY_MIN_ROWS)


def test_a_forced_pass_ignores_the_shares_and_a_wrong_one_is_refused():
    choice = PassChoice(forced="lazy")
    choice.lazy_done(drawn_rows(1.0), IDS)
    assert choice.lazy_next(LAZY_MIN_ROWS) and choice.lazy_next(LAZY_MIN_ROWS)
    choice.forced = "fused"
    assert not choice.lazy_next(LAZY_MIN_ROWS)
    with pytest.raises(ValueError, match="not 'eager'"):
        choice.forced = "eager"


@pytest.mark.skipif(vllm_env.installed_version() is None, reason="vLLM is not installed")
def test_the_patch_takes_the_lazy_pass_only_where_asked_and_the_noise_has_a_bound():
    """Off unless `lazy_choice(True)`; on, a sampler gets its choice only from 0.24 (0.22 and 0.23
    can draw a noise of +inf: no bound)."""
    from vllm_hotpaths import registry
    from vllm_hotpaths.registry import version_key
    from vllm_hotpaths.sampler_mrv2 import patch

    version = vllm_env.installed_version()
    if registry.get("sampler_mrv2").patch_needed(version):
        pytest.skip("the patch is not written for the installed vLLM")
    patch.install_methods()
    live = registry.get("sampler_mrv2").live_factory()(64, 2, "cpu")
    assert patch.pass_choice(live.sampler) is None
    patch.lazy_choice(True)
    try:
        choice = patch.pass_choice(live.sampler)
        assert (choice is not None) == (version_key(version) >= version_key("0.24.0"))
        assert patch.pass_choice(live.sampler) is choice  # one per sampler
    finally:
        patch.lazy_choice(False)


@pytest.mark.parametrize("value, lazy, warned", [(None, True, False), ("auto", True, False), (" Fused ", False, False),
                                                 ("lazy", True, True)])
def test_install_takes_the_lazy_pass_unless_the_variable_says_fused(monkeypatch, caplog, value, lazy, warned):
    """`install` turns the choice on by default; VLLM_HOTPATHS_SAMPLER_PASS=fused keeps the fused
    pass alone; an unknown value is logged with the known ones and taken as the default."""
    from vllm_hotpaths.sampler_mrv2 import patch

    if value is None:
        monkeypatch.delenv(patch.SAMPLER_PASS, raising=False)
    else:
        monkeypatch.setenv(patch.SAMPLER_PASS, value)
    monkeypatch.setattr(patch, "install_methods", lambda version=None: [])
    monkeypatch.setitem(patch._tables, "default", patch._tables["default"])
    monkeypatch.setitem(patch._release, "lazy", not lazy)
    with caplog.at_level("WARNING", logger="vllm.vllm_hotpaths"):
        patch.install()
    assert patch._release["lazy"] is lazy
    assert ("is none of auto, fused" in caplog.text) is warned


def test_a_batch_of_fewer_rows_takes_the_fused_pass_and_leaves_the_choice_as_it_was():
    """Below `LAZY_MIN_ROWS` the lazy pass's host work is more than it saves: such a batch is
    fused, reads no share and does not count against a fused run."""
    choice = PassChoice()
    choice.lazy_done(drawn_rows(1.0), IDS)  # measured flat, not read yet
    assert not choice.lazy_next(LAZY_MIN_ROWS - 1)
    assert choice.fused_left == 0  # the share is still unread
    assert not choice.lazy_next(LAZY_MIN_ROWS)  # read now: a fused run starts
    assert choice.fused_left == FUSED_RUN - 1
    assert not choice.lazy_next(1) and choice.fused_left == FUSED_RUN - 1


@pytest.mark.skipif(vllm_env.installed_version() is None, reason="vLLM is not installed")
@pytest.mark.parametrize("temperature, forced, sampled_by",
                         [(1.0, "fused", "upstream"), (1.0, "lazy", "patch"), (0.6, "fused", "patch")])
def test_the_patch_leaves_to_upstream_a_batch_it_would_read_no_fewer_times(temperature, forced, sampled_by):
    """From 0.27 upstream samples a batch that no request needs processing (temperature 1.0, no
    penalty) from the caller's logits as they are: the fused pass reads them as often, after more
    host work, so such a batch goes to upstream unless the lazy pass samples it. A batch that needs
    processing takes the fused pass."""
    from vllm_hotpaths import registry
    from vllm_hotpaths.logits_copy import RequestParams
    from vllm_hotpaths.registry import version_key
    from vllm_hotpaths.sampler_mrv2 import patch

    version = vllm_env.installed_version()
    if registry.get("sampler_mrv2").patch_needed(version) or version_key(version) < version_key("0.27.0"):
        pytest.skip("no batch sampled from the caller's logits before 0.27")
    patch.install_methods()
    live = registry.get("sampler_mrv2").live_factory()(VOCAB, ROWS, "cpu")
    for slot in range(ROWS):
        live.add_request(slot, [slot + 1] * 3, [], RequestParams(temperature=temperature, seed=slot))
    args = live.sampler_args(torch.randn(ROWS, VOCAB), list(range(ROWS)), [0] * ROWS, [0] * ROWS, [3] * ROWS)
    patch.lazy_choice(True)
    try:
        patch.pass_choice(live.sampler).forced = forced
        fused = vllm_env.call(patch.fused_or_none, live.sampler, **args)
    finally:
        patch.lazy_choice(False)
    assert (fused is None) == (sampled_by == "upstream")


@pytest.mark.triton
@pytest.mark.skipif(vllm_env.installed_version() is None, reason="vLLM is not installed")
def test_a_penalized_batch_reads_its_parameters_gathered_or_in_place_to_the_same_bits(monkeypatch, device):
    """`fast.fused_sample` gathers a penalized batch's slot parameters per row from `GATHER_MIN_ROWS`
    rows on, and below it reads them by slot where vLLM keeps them: the same ids and processed
    logits either way."""
    from vllm_hotpaths import registry
    from vllm_hotpaths.logits_copy import RequestParams
    from vllm_hotpaths.sampler_mrv2 import fast, patch

    if registry.get("sampler_mrv2").patch_needed(vllm_env.installed_version()):
        pytest.skip("the patch is not written for the installed vLLM")
    patch.install_methods()
    live = registry.get("sampler_mrv2").live_factory()(VOCAB, ROWS, device)
    knobs = [dict(presence_penalty=1.5), dict(frequency_penalty=0.5), dict(repetition_penalty=1.3), {}]
    for slot in (3, 1, 0, 2):  # slots unlike rows
        live.add_request(slot, [slot + 1, 7, 7], [9], RequestParams(temperature=0.7, seed=slot, **knobs[slot]))
    rows = [2, 0, 3, 1]
    logits = torch.randn(ROWS, VOCAB, generator=torch.Generator().manual_seed(5)).to(device)
    args = live.sampler_args(logits, rows, [0] * ROWS, [9] * ROWS, [4] * ROWS)
    arguments = vllm_env.call(patch.fused_arguments, live.sampler, **args, write=True)
    assert arguments["penalized"]
    results = []
    for least in (0, ROWS + 1):  # gathered, then read in place
        monkeypatch.setattr(fast, "GATHER_MIN_ROWS", least)
        results.append(fast.fused_sample(**arguments))
    assert torch.equal(results[0][0], results[1][0])
    assert torch.equal(results[0][1].view(torch.int32), results[1][1].view(torch.int32))


@pytest.mark.skipif(vllm_env.installed_version() is None, reason="vLLM is not installed")
def test_a_batch_is_unprocessed_only_where_none_of_its_requests_needs_processing():
    """From 0.28 the patch remembers, at each admission, whether any slot needs processing: with
    none, every batch is sampled unprocessed without looking at it; with one, each batch is
    looked at (a freed slot's flag stays set until its slot is reused)."""
    import numpy as np

    from vllm_hotpaths import registry
    from vllm_hotpaths.logits_copy import RequestParams
    from vllm_hotpaths.registry import version_key
    from vllm_hotpaths.sampler_mrv2 import patch

    version = vllm_env.installed_version()
    if registry.get("sampler_mrv2").patch_needed(version) or version_key(version) < version_key("0.28.0"):
        pytest.skip("the flags are upstream's own array from 0.28")
    patch.install_methods()
    live = registry.get("sampler_mrv2").live_factory()(VOCAB, ROWS, "cpu")
    unprocessed = lambda *slots: patch.samples_unprocessed(live.sampler, np.array(slots, dtype=np.int32))  # noqa: E731
    for slot in range(ROWS - 1):
        live.add_request(slot, [slot + 1] * 3, [], RequestParams(temperature=1.0, seed=slot))
    assert unprocessed(0, 1, 2)
    live.add_request(ROWS - 1, [4] * 3, [], RequestParams(temperature=0.6, seed=3))
    assert unprocessed(0, 1, 2) and not unprocessed(ROWS - 1) and not unprocessed(0, ROWS - 1)
    live.remove_request(ROWS - 1)
    live.add_request(ROWS - 1, [5] * 3, [], RequestParams(temperature=1.0, seed=4))
    assert unprocessed(0, ROWS - 1)
