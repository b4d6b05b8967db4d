"""The choice between the lazy and the fused sampling pass (`sampler_mrv2.pass_choice`): lazy
until a measured lazy batch reads again more than `FLAT_SHARE` of its ids, then `FUSED_RUN` fused
batches, then lazy again; a share is read once it has landed, and no other is measured before;
the first lazy batch after a fused run is measured, then one in `MEASURE_EVERY`."""

import pytest
import torch

from vllm_hotpaths import vllm_env
from vllm_hotpaths.sampler_mrv2.pass_choice import FLAT_SHARE, FUSED_RUN, MEASURE_EVERY, PassChoice

VOCAB = 1000


ROWS, BLOCKS = 4, 2
IDS = ROWS * VOCAB


def drawn_rows(share: float) -> torch.Tensor:
    """Ids read again per row and block, `share` of the batch's in all."""
    return torch.full((ROWS, BLOCKS), int(share * VOCAB / BLOCKS), dtype=torch.int32)


def test_peaked_batches_keep_the_lazy_pass():
    choice = PassChoice()
    for _ in range(3 * FUSED_RUN):
        assert choice.lazy_next()
        choice.lazy_done(drawn_rows(FLAT_SHARE), IDS)  # at the share itself: still lazy


def test_a_flat_batch_sends_the_next_ones_to_the_fused_pass_then_lazy_looks_again():
    choice = PassChoice()
    assert choice.lazy_next()
    choice.lazy_done(drawn_rows(FLAT_SHARE + 0.01), IDS)
    assert [choice.lazy_next() for _ in range(FUSED_RUN)] == [False] * FUSED_RUN
    assert choice.lazy_next()  # the look: measured, still flat
    choice.lazy_done(drawn_rows(1.0), IDS)
    assert [choice.lazy_next() for _ in range(FUSED_RUN)] == [False] * FUSED_RUN
    assert choice.lazy_next()  # peaked now
    choice.lazy_done(drawn_rows(0.05), IDS)
    assert choice.lazy_next() and choice.lazy_next()


def test_one_lazy_batch_in_measure_every_is_measured_and_an_unread_share_is_kept():
    """After a measured batch, later lazy batches are not measured until its share is read, then
    one in `MEASURE_EVERY`."""
    choice = PassChoice()
    choice.lazy_done(drawn_rows(0.05), IDS)  # measured
    choice.lazy_done(drawn_rows(1.0), IDS)  # not: the first share is still unread
    assert choice.lazy_next()  # reads 5%
    for _ in range(MEASURE_EVERY - 1):
        choice.lazy_done(drawn_rows(1.0), IDS)
        assert choice.lazy_next()
    choice.lazy_done(drawn_rows(1.0), IDS)
    assert not choice.lazy_next()


def test_a_forced_pass_ignores_the_shares_and_a_wrong_one_is_refused():
    choice = PassChoice(forced="lazy")
    choice.lazy_done(drawn_rows(1.0), IDS)
    assert choice.lazy_next() and choice.lazy_next()
    choice.forced = "fused"
    assert not choice.lazy_next()
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
