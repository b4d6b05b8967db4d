"""The sampler_mrv2 plugin patch on the installed vLLM's own sampler (CPU, in Triton's interpreter:
on a GPU machine those tests skip): what it leaves to the `sample` it replaced before any kernel
runs, and the life of its compact penalty tables (their bytes, the warm-up exception). (Its
equivalence with upstream is the patch law, `properties/test_patch.py`.)"""

import inspect

import pytest

from vllm_hotpaths import vllm_env


@pytest.mark.needs_interpreter  # vLLM's Triton kernels on CPU tensors
@pytest.mark.skipif(vllm_env.installed_version() is None, reason="vLLM is not installed")
def test_the_patch_leaves_logits_it_cannot_load_to_upstream():
    """Logits the kernel does not read as upstream's copy does (a view whose ids are not adjacent,
    fp64) go to the replaced `sample` (`fused_or_none` is None) before any kernel runs."""
    import torch

    from vllm_hotpaths import registry
    from vllm_hotpaths.logits_copy import RequestParams
    from vllm_hotpaths.sampler_mrv2 import patch

    if registry.get("sampler_mrv2").patch_needed(vllm_env.installed_version()):
        pytest.skip("the patch is not written for the installed vLLM")
    patch.install_methods()
    live = registry.get("sampler_mrv2").live_factory()(64, 2, "cpu")
    live.add_request(0, [1, 2], [], RequestParams(temperature=0.9, seed=3))  # a batch needing processing
    live.add_request(1, [3], [], RequestParams(temperature=0.0, seed=4))
    args = live.sampler_args(torch.zeros(2, 64), [0, 1], [0, 0], [5, 6], [2, 1])
    assert live.sampler.__dict__["_hotpaths_fused"][:2].all()
    for logits in (torch.zeros(2, 128)[:, ::2], torch.zeros(2, 64, dtype=torch.float64)):
        assert vllm_env.call(patch.fused_or_none, live.sampler, **{**args, "logits": logits}) is None


@pytest.mark.needs_interpreter  # vLLM's Triton kernels on CPU tensors
@pytest.mark.skipif(vllm_env.installed_version() is None, reason="vLLM is not installed")
def test_the_patched_penalty_tables_hold_rows_only_for_penalized_requests():
    """vLLM's PenaltiesState under the patch: no bytes until a penalized request is admitted,
    then a row per penalized request, none again after they leave and a request is admitted; with
    every slot penalized, exactly upstream's dense tables' bytes."""
    from vllm_hotpaths import registry
    from vllm_hotpaths.logits_copy import RequestParams
    from vllm_hotpaths.sampler_mrv2 import patch

    if not patch.compact_tables(vllm_env.installed_version()):
        pytest.skip("the patch keeps compact tables on vLLM 0.22 to 0.30 only")
    patch.install_methods()
    factory = registry.get("sampler_mrv2").live_factory()
    vocab, slots = 100, 4
    dense = factory(vocab, slots, "cpu").sampler.penalties_state  # compact tables only where asked for
    dense_bytes = dense.output_bin_counts.nbytes + dense.prompt_bin_mask.nbytes
    assert patch.table_of(dense) is None and dense.output_bin_counts.shape == (slots, vocab)
    with patch.penalty_tables("compact"):
        live = factory(vocab, slots, "cpu")
    table = patch.table_of(live.sampler.penalties_state)
    plain, penalized = RequestParams(temperature=1.0, seed=1), RequestParams(temperature=1.0, seed=1,
                                                                              presence_penalty=1.5)
    live.add_request(0, [1, 2], [], plain)
    assert table.nbytes == 0
    live.add_request(1, [3], [4, 4], penalized)
    assert list(table.row_of) == [-1, 0, -1, -1] and table.nbytes == (vocab + 4) * 4
    assert table.counts[0, 4] == 2 and table.prompt_bits[0, 0] == 1 << 3
    live.append_output(1, [4, 7])
    live.append_output(0, [7])
    assert table.counts[0, 4] == 3 and table.counts[0, 7] == 1 and int(table.counts.sum()) == 4
    live.remove_request(1)
    live.add_request(2, [5], [], plain)
    assert table.nbytes == 0 and (table.row_of == -1).all()
    for slot in (0, 2):
        live.remove_request(slot)
    for slot in range(slots):
        live.add_request(slot, [slot], [], penalized)
    assert table.nbytes == dense_bytes


@pytest.mark.needs_interpreter  # vLLM's Triton kernels on CPU tensors
@pytest.mark.skipif(vllm_env.installed_version() is None, reason="vLLM is not installed")
def test_vllm_warm_up_requests_get_no_penalty_rows(monkeypatch):
    """vLLM's kernel warm-up admits `max_num_seqs` penalized requests named "_warmup_{i}_" at
    start-up: with rows for them the compact tables would start at upstream's full size."""
    from vllm_hotpaths import registry
    from vllm_hotpaths.logits_copy import RequestParams
    from vllm_hotpaths.sampler_mrv2 import patch

    if not patch.compact_tables(vllm_env.installed_version()):
        pytest.skip("the patch keeps compact tables on vLLM 0.22 to 0.30 only")
    patch.install_methods()
    with patch.penalty_tables("compact"):
        live = registry.get("sampler_mrv2").live_factory()(64, 2, "cpu")
    monkeypatch.setattr(live, "_req_id", lambda slot: f"_warmup_{slot}_")
    live.add_request(0, [1], [2], RequestParams(temperature=1.0, seed=1, repetition_penalty=1.2))
    table = patch.table_of(live.sampler.penalties_state)
    assert live.sampler.penalties_state.use_penalty[0] and table.nbytes == 0 and table.row_of[0] == -1


@pytest.mark.needs_interpreter  # vLLM's Triton kernels on CPU tensors
@pytest.mark.skipif(vllm_env.installed_version() is None, reason="vLLM is not installed")
def test_apply_sampling_params_without_sample_counts_drafts_on_compact_rows():
    """vLLM's rejection sampler calls `Sampler.apply_sampling_params` directly, never `sample`:
    a draft row of a penalized request still counts its earlier drafts on the compact rows, as
    upstream's dense tables do."""
    import torch

    from vllm_hotpaths import registry
    from vllm_hotpaths.logits_copy import RequestParams
    from vllm_hotpaths.sampler_mrv2 import patch
    from vllm_hotpaths.testing.bits import assert_same_bits

    if not patch.compact_tables(vllm_env.installed_version()):
        pytest.skip("the patch keeps compact tables on vLLM 0.22 to 0.30 only")
    patch.install_methods()
    factory = registry.get("sampler_mrv2").live_factory()
    dense = factory(8, 1, "cpu")
    with patch.penalty_tables("compact"):
        compact = factory(8, 1, "cpu")
    logits = torch.linspace(-1.0, 1.0, 16).view(2, 8)
    processed = []
    for live in (dense, compact):
        live.add_request(0, [1], [2], RequestParams(temperature=1.0, seed=1, presence_penalty=1.5))
        args = live.sampler_args(logits, [0, 0], [0, 1], [2, 5], [2, 3])
        processed.append(vllm_env.call(live.sampler.apply_sampling_params, **args))
    assert processed[0][1, 5] == logits[1, 5] - 1.5  # the draft (id 5) is counted upstream
    assert_same_bits(processed[1], processed[0], "compact rows vs upstream's dense tables")


@pytest.mark.needs_cuda
@pytest.mark.skipif(vllm_env.installed_version() is None, reason="vLLM is not installed")
def test_the_first_sample_call_compiles_what_later_batches_launch():
    """The patched sampler's first call (vLLM's start-up) compiles each kernel of the patch in
    the variants the engine's later calls launch: fused batches with and without a penalty (and
    the gathering of a large penalized batch's parameters), a penalized request's admission, a step's sampled tokens counted, the penalties on upstream's
    path, with vLLM's own tensors. Triton's in-memory caches, emptied first, hold as many variants
    after those calls as after the first one."""
    import torch

    from vllm_hotpaths import registry
    from vllm_hotpaths.logits_copy import RequestParams
    from vllm_hotpaths.sampler_mrv2 import fast, patch, penalty_tables

    if registry.get("sampler_mrv2").patch_needed(vllm_env.installed_version()):
        pytest.skip("the patch is not written for the installed vLLM")
    patch.install_methods()
    vocab = 151_936
    with patch.penalty_tables("compact"):
        live = registry.get("sampler_mrv2").live_factory()(vocab, 4, "cuda")
    sampler = live.sampler
    live.add_request(0, [1, 2], [], RequestParams(temperature=0.9, seed=3))  # a batch needing processing
    live.add_request(2, [4], [], RequestParams(temperature=1.0, seed=5, top_p=0.9))  # upstream's path
    kernels = (fast._fused_block_kernel, fast._rows_kernel, fast._penalties_kernel, penalty_tables._admit_kernel,
               penalty_tables._count_sampled_kernel)
    for kernel in kernels:
        for entry in kernel.device_caches.values():
            entry[0].clear()
    variants = lambda: [sum(len(e[0]) for e in k.device_caches.values()) for k in kernels]  # noqa: E731
    logits = torch.randn(3, vocab, device="cuda", dtype=torch.bfloat16)
    warmup = live.sampler_args(logits[:2], [2, 0], [0, 0], [7, 8], [2, 1])
    assert vllm_env.call(patch.fused_or_none, sampler, **warmup) is None  # top-p: not fused
    launches = vllm_env.call(patch.compile_variants, sampler, **warmup)
    assert launches == 2 * (1 + (sampler.num_speculative_tokens > 1)) + 4
    compiled = variants()
    assert all(compiled), compiled
    assert vllm_env.call(patch.compile_variants, sampler, **warmup) == 0  # once per sampler
    live.add_request(1, [3], [5], RequestParams(temperature=0.7, seed=4, presence_penalty=1.5))
    table, states = patch.table_of(sampler.penalties_state), sampler.penalties_state.req_states
    i32 = dict(dtype=torch.int32, device="cuda")
    table.admit(torch.tensor([1], **i32), states.all_token_ids.gpu, states.prompt_len.gpu, states.prefill_len.gpu, 2)
    for slots in ([0], [1], [0, 1]):
        rows = len(slots)
        args = live.sampler_args(logits[:rows].clone(), slots, [0] * rows, [7] * rows, [2] * rows)
        assert vllm_env.call(patch.fused_or_none, sampler, **args) is not None
    table.count_sampled(torch.tensor([0, 1], **i32), torch.tensor([[9], [11]], dtype=torch.int64, device="cuda"),
                        torch.ones(2, **i32))
    fast.penalize_in_place(logits[:2].float(), torch.tensor([1, 2], **i32), torch.zeros(2, **i32),
                           torch.tensor([7, 8], **i32), sampler.penalties_state.repetition_penalty.gpu,
                           sampler.penalties_state.frequency_penalty.gpu, sampler.penalties_state.presence_penalty.gpu,
                           table, drafts=sampler.num_speculative_tokens)
    assert variants() == compiled, f"later calls compiled variants of their own: {compiled} -> {variants()}"


def test_a_failed_start_up_compile_is_logged_and_never_stops_the_engine(monkeypatch, caplog):
    """compile_variants is a start-up optimization: where its launches fail, it logs why, the
    sampler's call goes on, and it is not tried again (the kernels compile on first use)."""
    from types import SimpleNamespace

    from vllm_hotpaths.sampler_mrv2 import patch

    def fail(*args):
        raise RuntimeError("no such tensor")

    monkeypatch.setattr(patch, "loadable", lambda sampler, logits: True)
    monkeypatch.setattr(patch, "_launch_variants", fail)
    sampler = SimpleNamespace()
    logits = SimpleNamespace(device=SimpleNamespace(type="cuda"))
    with caplog.at_level("WARNING", logger="vllm.vllm_hotpaths"):
        assert patch.compile_variants(sampler, logits, None, None, None, None, None) == 0
    assert "not compiled at start-up (RuntimeError: no such tensor)" in caplog.text
    monkeypatch.setattr(patch, "_launch_variants", lambda *args: pytest.fail("tried again"))
    assert patch.compile_variants(sampler, logits, None, None, None, None, None) == 0


@pytest.mark.needs_interpreter  # vLLM's Triton kernels on CPU tensors
@pytest.mark.skipif(vllm_env.installed_version() is None, reason="vLLM is not installed")
def test_the_patched_sample_names_its_arguments_as_the_signature_binds_them():
    """Positional, keyword and mixed calls of the patched `Sampler.sample` sample what upstream's
    does; a call upstream's signature refuses (an argument given twice, an unknown keyword, one
    too many) raises the TypeError upstream's would."""
    import torch

    from vllm_hotpaths import registry
    from vllm_hotpaths.logits_copy import RequestParams
    from vllm_hotpaths.sampler_mrv2 import patch

    if registry.get("sampler_mrv2").patch_needed(vllm_env.installed_version()):
        pytest.skip("the patch is not written for the installed vLLM")
    patch.install_methods()
    live = registry.get("sampler_mrv2").live_factory()(64, 2, "cpu")
    live.add_request(0, [1, 2], [], RequestParams(temperature=0.9, seed=3))  # a batch needing processing
    live.add_request(1, [3], [], RequestParams(temperature=1.0, seed=4))
    args = live.sampler_args(torch.randn(2, 64, generator=torch.Generator().manual_seed(0)), [0, 1], [0, 0],
                             [5, 6], [2, 1])
    sampler = live.sampler
    want, _ = vllm_env.call(patch.UPSTREAM["sample"], sampler, **args)
    names = list(inspect.signature(patch.UPSTREAM["sample"]).parameters)[1:]
    values = [args[name] for name in names if name in args]
    for call in (lambda: sampler.sample(*values), lambda: sampler.sample(**dict(zip(names, values))),
                 lambda: sampler.sample(*values[:2], **dict(zip(names[2:], values[2:])))):
        ids, _ = call()
        assert torch.equal(ids.view(-1), want.view(-1))
    for wrong in (lambda: sampler.sample(*values, **{names[0]: values[0]}),
                  lambda: sampler.sample(*values, logits_typo=values[0]),
                  lambda: sampler.sample(*values, *values)):
        with pytest.raises(TypeError):
            wrong()
