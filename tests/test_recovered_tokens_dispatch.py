"""The recovered-tokens dispatch: which shapes take the split kernel, from a measured grid, and the
patch's routing of each call (recovered_tokens/dispatch.py, recovered_tokens/patch.py)."""

from __future__ import annotations

import json

import pytest
import torch

from vllm_hotpaths.recovered_tokens import dispatch

UP, FAST = 100e-6, 80e-6  # a point won: 1.25x, above the margin


def grid(lost=()):
    """B in (4, 16), k in (1, 4), V in (1000, 2000), both draft kinds: won except at `lost`."""
    return dispatch.GpuDispatch("GPU", [dispatch.Point(b, k, v, p, UP, UP if (b, k, v, p) in lost else FAST)
                                        for b in (4, 16) for k in (1, 4) for v in (1000, 2000) for p in (False, True)])


def test_a_shape_inside_the_grid_takes_the_fast_path_only_where_every_point_around_it_won():
    assert grid().takes_fast(8, 2, 1500, False)
    assert grid().takes_fast(4, 1, 1000, True)  # on a measured point: that point alone
    lost = grid(lost={(16, 4, 2000, False)})  # one corner of the cell
    assert not lost.takes_fast(8, 2, 1500, False)
    assert lost.takes_fast(8, 2, 1500, True)  # the other draft kind's corner won
    assert lost.takes_fast(4, 1, 1000, False)  # a measured point away from the lost one
    assert not lost.takes_fast(16, 2, 2000, False)  # on the lost point's edge
    assert lost.wins_anywhere()


@pytest.mark.parametrize("shape", [(2, 2, 1500), (32, 2, 1500), (8, 8, 1500), (8, 2, 999), (8, 2, 2001)],
                         ids=["fewer requests", "more requests", "more drafts", "smaller vocabulary", "larger vocabulary"])
def test_a_shape_outside_the_grid_keeps_upstreams_call(shape):
    assert not grid().takes_fast(*shape, False)


def test_a_point_counts_as_won_only_by_the_margin():
    just = dispatch.Point(1, 1, 1, False, dispatch.MARGIN * FAST, FAST)
    short = dispatch.Point(1, 1, 1, False, dispatch.MARGIN * FAST * 0.999, FAST)
    assert just.won and not short.won
    assert not dispatch.GpuDispatch("GPU", [short]).wins_anywhere()


def test_the_shipped_file_reads_and_a_gpu_it_does_not_name_takes_upstreams_call():
    table = dispatch.load()
    assert all(isinstance(d, dispatch.GpuDispatch) for d in table.values())
    unknown = dispatch.for_gpu("a GPU model nobody measured")
    assert not unknown.wins_anywhere() and not unknown.takes_fast(16, 3, 129_280, False)


@pytest.mark.parametrize("text", ["not json", "{}", '{"gpus": {"G": {}}}', '{"gpus": {"G": {"points": [[1, 2, 3]]}}}',
                                  '{"gpus": {"G": {"points": [[1, 2, "V", false, 1e-6, 1e-6]]}}}'],
                         ids=["not json", "no gpus", "no points", "a short point", "a vocabulary in letters"])
def test_a_malformed_dispatch_file_is_refused_naming_it(tmp_path, text):
    path = tmp_path / "dispatch.json"
    path.write_text(text)
    with pytest.raises(dispatch.DispatchFileError, match="dispatch.json: not a recovered-tokens dispatch file"):
        dispatch.load(path)


def test_the_patch_is_held_back_unless_some_gpu_model_won_a_shape(tmp_path, monkeypatch):
    from vllm_hotpaths.recovered_tokens import patch

    path = tmp_path / "dispatch.json"
    monkeypatch.setattr(dispatch, "DISPATCH_FILE", path)
    path.write_text(json.dumps({"gpus": {"G": {"points": [[16, 3, 1000, False, UP, UP]]}}}))
    assert "measured faster" in patch.held_back()
    path.write_text(json.dumps({"gpus": {"G": {"points": [[16, 3, 1000, False, UP, FAST]]}}}))
    assert patch.held_back() is None


@pytest.fixture
def rejection_sampler():
    from vllm_hotpaths import vllm_env

    try:
        return vllm_env.import_vllm("vllm.v1.sample.rejection_sampler")
    except Exception as error:  # noqa: BLE001
        pytest.skip(f"vLLM's rejection sampler cannot be imported: {error}")


class Counted:
    def __init__(self, takes):
        self.gpu, self.takes, self.asked = "test GPU", takes, []

    def wins_anywhere(self):
        return True

    def takes_fast(self, *shape):
        self.asked.append(shape)
        return self.takes(*shape)


def call(module, batch, drafts, vocab, generator_seed=None):
    from vllm_hotpaths.testing.bench import recovered_tokens as bench

    args = bench.inputs(batch, drafts, vocab, False, "cpu")
    generators = {} if generator_seed is None else {0: torch.Generator().manual_seed(generator_seed)}
    torch.manual_seed(0)
    ids = module.sample_recovered_tokens(args["max_spec_len"], args["num_draft_tokens"], args["cu_num_draft_tokens"],
                                         args["draft_token_ids"], None, args["target_probs"],
                                         bench.sampling_metadata(generators), torch.device("cpu"))
    return ids, torch.get_rng_state()


def test_the_patch_routes_each_call_by_its_shape(rejection_sampler, monkeypatch):
    """Shapes the dispatch refuses go to upstream's function untouched; the others to the split
    kernel (asked once per call with B, k, V and the draft kind)."""
    from vllm_hotpaths.recovered_tokens import fast, patch

    launched = []
    real_launch = fast.SplitVocabDivision.launch

    def spy(self, *args):
        launched.append(args[0])
        return real_launch(self, *args)

    monkeypatch.setattr(fast.SplitVocabDivision, "launch", spy)
    shapes = Counted(lambda requests, drafts, vocab, probs: requests == 2)
    upstream = rejection_sampler.sample_recovered_tokens
    patch.install(choose=lambda device: shapes)
    try:
        fast_ids, fast_rng = call(rejection_sampler, 2, 3, 300)
        up_ids, up_rng = call(rejection_sampler, 3, 2, 300)
    finally:
        patch.uninstall()
    assert shapes.asked == [(2, 3, 300, False), (3, 2, 300, False)]
    assert launched == [3]  # the first call's max_spec_len: only it reached the kernel
    for batch, drafts, ids, rng in ((2, 3, fast_ids, fast_rng), (3, 2, up_ids, up_rng)):
        expected, expected_rng = call(rejection_sampler, batch, drafts, 300)
        assert torch.equal(ids, expected) and torch.equal(rng, expected_rng)
    assert rejection_sampler.sample_recovered_tokens is upstream


def test_on_a_gpu_model_measured_faster_nowhere_the_first_call_puts_upstream_back(rejection_sampler):
    from vllm_hotpaths.recovered_tokens import patch

    upstream = rejection_sampler.sample_recovered_tokens
    patch.install(choose=lambda device: dispatch.never("test GPU"))
    try:
        patched = rejection_sampler.sample_recovered_tokens
        assert patched is not upstream
        ids, rng = call(rejection_sampler, 2, 2, 300, generator_seed=1)
        assert rejection_sampler.sample_recovered_tokens is upstream
    finally:
        patch.uninstall()
    expected, expected_rng = call(rejection_sampler, 2, 2, 300, generator_seed=1)
    assert torch.equal(ids, expected) and torch.equal(rng, expected_rng)


def test_the_grid_measurement_writes_a_file_the_dispatch_reads(rejection_sampler, tmp_path):
    """`recovered_dispatch` on a tiny grid, interpreted (its times mean nothing here): every
    point measured once, both sides' ids checked equal, and the file it writes loads, with the
    other GPU models of the merged file kept."""
    from vllm_hotpaths.testing.bench import recovered_dispatch

    lines = []
    points = recovered_dispatch.measure([1, 2], [1], [300], rounds=1, per_round=1, device="cpu", log=lines.append)
    assert [p[:4] for p in points] == [[1, 1, 300, False], [1, 1, 300, True], [2, 1, 300, False], [2, 1, 300, True]]
    assert all(p[4] > 0 and p[5] > 0 for p in points) and len(lines) == 4
    merged = tmp_path / "merged.json"
    merged.write_text(json.dumps({"about": "x", "gpus": {"Other": {"points": [[1, 1, 1, False, UP, FAST]]}}}))
    out = tmp_path / "dispatch.json"
    entry = recovered_dispatch.write(out, "This GPU", points, "the command", merged)
    assert set(entry.won) == {tuple(p[:4]) for p in points}
    written = json.loads(out.read_text())
    assert set(written["gpus"]) == {"Other", "This GPU"} and written["gpus"]["This GPU"]["command"] == "the command"


@pytest.mark.parametrize("extra, message", [(["--drafts", "0"], "--drafts values must be at least 1"),
                                            (["--rounds", "0"], "--rounds and --calls must be at least 1"),
                                            (["--merge", "MISSING"], "not a recovered-tokens dispatch file")],
                         ids=["no drafts", "no rounds", "a missing merge file"])
def test_the_grid_commands_bad_values_are_refused(tmp_path, capsys, extra, message):
    from vllm_hotpaths.testing.bench import recovered_dispatch

    extra = [str(tmp_path / "missing.json") if e == "MISSING" else e for e in extra]
    with pytest.raises(SystemExit) as exit_info:
        recovered_dispatch.main(["--out", str(tmp_path / "d.json"), *extra])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_the_grid_file_names_its_output_by_file_name_and_the_suites_commit(tmp_path, monkeypatch, capsys):
    """Where the grid was written is a machine's path, not a fact about the grid; a copied tree
    (the GPU machine's) is told its commit by VLLM_HOTPATHS_COMMIT, as the gate's reports are."""
    from vllm_hotpaths.testing.bench import recovered_dispatch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "This GPU")
    monkeypatch.setattr(recovered_dispatch, "measure", lambda *a: [[16, 3, 1000, False, UP, FAST]])
    monkeypatch.setenv("VLLM_HOTPATHS_COMMIT", "abc1234")
    out = tmp_path / "deep" / "folder"
    out.mkdir(parents=True)
    for given in (["--out", str(out / "grid.json")], [f"--out={out / 'grid.json'}"]):
        assert recovered_dispatch.main([*given, "--rounds", "2"]) == 0
        entry = json.loads((out / "grid.json").read_text())["gpus"]["This GPU"]
        assert entry["commit"] == "abc1234" and str(tmp_path) not in entry["command"], entry
        assert entry["command"].endswith(("--out grid.json --rounds 2", "--out=grid.json --rounds 2")), entry
    assert "1 of 1 points won" in capsys.readouterr().out


def test_the_shipped_grid_installs_the_patch_somewhere_and_names_what_measured_it(monkeypatch):
    from vllm_hotpaths.recovered_tokens import patch

    monkeypatch.delenv(dispatch.SETTING, raising=False)
    assert patch.held_back() is None
    for gpu, entry in json.loads(dispatch.DISPATCH_FILE.read_text())["gpus"].items():
        assert entry["commit"] and entry["vllm"] and entry["torch"], gpu
        assert entry["command"].startswith("python -m vllm_hotpaths.testing.bench.recovered_dispatch --out dispatch.json")


@pytest.mark.skipif(torch.cuda.is_available(), reason="measures on a GPU")
def test_the_grid_is_measured_on_cuda_only(tmp_path, capsys):
    from vllm_hotpaths.testing.bench import recovered_dispatch

    assert recovered_dispatch.main(["--out", str(tmp_path / "d.json")]) == 1
    assert "CUDA only" in capsys.readouterr().out and not (tmp_path / "d.json").exists()


def test_an_unreadable_dispatch_file_keeps_upstream_and_never_stops_vllm(tmp_path, monkeypatch):
    from vllm_hotpaths.recovered_tokens import patch

    path = tmp_path / "dispatch.json"
    path.write_text("not json")
    monkeypatch.setattr(dispatch, "DISPATCH_FILE", path)
    assert "not a recovered-tokens dispatch file" in patch.held_back()
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "some GPU")
    warned = []
    monkeypatch.setattr(patch.logger, "warning", lambda message, *args: warned.append(message % args))
    chosen = patch.device_dispatch(torch.device("cuda"))
    assert not chosen.wins_anywhere() and chosen.gpu == "some GPU"
    assert len(warned) == 1 and "recovered_tokens keeps upstream's call" in warned[0]


def test_the_variable_names_another_grid_or_takes_the_split_kernel_everywhere(tmp_path, monkeypatch):
    from vllm_hotpaths.recovered_tokens import patch

    own = tmp_path / "own.json"
    own.write_text(json.dumps({"gpus": {"My GPU": {"points": [[16, 3, 1000, False, UP, FAST]]}}}))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "My GPU")
    none = tmp_path / "none.json"
    none.write_text(json.dumps({"gpus": {}}))
    monkeypatch.setattr(dispatch, "DISPATCH_FILE", none)
    assert "measured faster" in patch.held_back()  # a file that names no GPU model
    assert not patch.device_dispatch(torch.device("cuda")).wins_anywhere()
    monkeypatch.setenv(dispatch.SETTING, str(own))
    assert patch.held_back() is None
    assert patch.device_dispatch(torch.device("cuda")).takes_fast(16, 3, 1000, False)
    assert not patch.device_dispatch(torch.device("cpu")).wins_anywhere()  # a grid measures GPUs only
    monkeypatch.setenv(dispatch.SETTING, " always ")
    assert patch.held_back() is None
    assert patch.device_dispatch(torch.device("cuda")).takes_fast(1, 1, 7, True)
    assert patch.device_dispatch(torch.device("cpu")).takes_fast(1, 1, 7, True)  # always means any device
    monkeypatch.setenv(dispatch.SETTING, str(tmp_path / "missing.json"))
    assert "missing.json: not a recovered-tokens dispatch file" in patch.held_back()
