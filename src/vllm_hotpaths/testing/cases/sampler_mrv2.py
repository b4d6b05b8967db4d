"""Sampling-pass cases: `logits_copy`'s programs (`LogitsProgram`: requests entering and leaving
sampler slots, with sampler steps), drawn without top-k / top-p, with seeds over all of int64 and
vocabularies of one to three 1024-id blocks, each cut short of a multiple of the block or not.

At every step, each side's `sample` returns the batch's ids and processed logits: the ids are
compared exactly, the processed logits bit for bit after upcasting to fp32, and neither side may
write the caller's logits. The equivalence law then also runs each request alone (on copies of
both sides taken before the step), as `logits_copy`'s does: a batch can hide one request's path.
There, on odd steps, the candidate samples the batch without its processed logits (what the
plugin asks for unless a processed logprobs mode reads them: its kernels without the write), its
ids compared with the reference's; each request alone still returns them.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from vllm_hotpaths.testing.bits import assert_same_bits
from vllm_hotpaths.testing.cases import copy_of, note
from vllm_hotpaths.testing.cases.logits_copy import (BadInputCase, LogitsProgram, Step, assert_refused_alike,
                                                     params_of, run)
from vllm_hotpaths.testing.laws import CaseLog, Checks, Side

BLOCK = 1024
LAZY_MARGIN = 24.0  # above the largest noise (22.9): ids further below a row's largest cannot win


def sampled(impl, step: Step, label: str):
    """(ids, processed logits) of `impl` for `step`, checking that the caller's logits stay as given."""
    before = step.logits.clone()
    ids, out = impl.sample(*step.args(), processed=True)
    assert_same_bits(step.logits, before, f"{label}: the caller's logits after the call")
    assert ids.dtype == torch.int64 and ids.shape == (len(step.rows),), \
        f"{label}: ids are {ids.dtype} {list(ids.shape)}, expected int64 [{len(step.rows)}]"
    return ids, out


def _assert_same_ids(got_ids, want_ids, label: str, got_label: str, want_label: str) -> None:
    if not torch.equal(got_ids, want_ids):
        rows = (got_ids != want_ids).nonzero().flatten().tolist()
        raise AssertionError(f"{label}: {got_label} sampled {got_ids.tolist()}, {want_label} "
                             f"{want_ids.tolist()} (rows {rows} differ)")


def assert_same_step(step: Step, want_from, got_from, expected: Side, actual: Side, label: str,
                     unprocessed: bool = False) -> None:
    """The step's ids and processed logits on both sides; `unprocessed`: the actual side samples
    without its processed logits (its kernels' other variant): the same ids, and None."""
    want_ids, want = sampled(want_from, step, f"{label}, {expected.label}")
    if unprocessed:
        before = step.logits.clone()
        got_ids, got = got_from.sample(*step.args(), processed=False)
        assert_same_bits(step.logits, before, f"{label}, {actual.label}: the caller's logits after the call")
        assert got is None, f"{label}: {actual.label} returned processed logits nobody asked for"
        _assert_same_ids(got_ids, want_ids, label, f"{actual.label} (no processed logits asked for)", expected.label)
        return
    got_ids, got = sampled(got_from, step, f"{label}, {actual.label}")
    _assert_same_ids(got_ids, want_ids, label, actual.label, expected.label)
    assert_same_bits(got.float(), want.float(), f"{label} ({actual.label} vs {expected.label}): processed "
                                                "logits, upcast to fp32")


def assert_same_sampling(program: LogitsProgram, expected: Side, actual: Side, device, alone: bool,
                         per_block: bool = False) -> None:
    """Every step's whole batch; with `alone`, each request of the step alone too, on copies of
    both sides taken before the batch's call; then on odd steps the actual side samples the batch
    without its processed logits (each request alone still returns them). `per_block`: a
    reference samples with one program per row and block in Triton's interpreter too (the launch
    CUDA runs)."""
    first, second = program.samplers(expected.factory, actual.factory, device=device)
    for impl in (first, second):
        if hasattr(impl, "per_block"):
            impl.per_block = per_block
    for i, batch in enumerate(run(program, (first, second), device)):
        requests = list(batch.per_request()) if alone else []
        copies = [[copy_of(impl, label=f"step {i}, {side.label}") for _ in requests]
                  for impl, side in ((first, expected), (second, actual))]
        for j, (step, (want_from, got_from)) in enumerate(zip([batch, *requests],
                                                                [(first, second), *zip(*copies)])):
            label = f"step {i}" + (f", request {step.rows[0]} alone" if j else "")
            unprocessed = alone and j == 0 and i % 2 == 1
            assert_same_step(step, want_from, got_from, expected, actual, label, unprocessed)


def is_live(side: Side) -> bool:
    from vllm_hotpaths import registry

    return side.factory is registry.get("sampler_mrv2").live_factory()


def _note_rows(step: Step, temperatures: list[float], vocab: int) -> None:
    """Labels of one step's rows, from its raw logits (what any processing keeps: an infinity or a
    NaN stays one)."""
    x = step.logits.float().cpu().numpy()
    for row, t in zip(x, temperatures):
        if t == 0.0:
            note("a greedy row")
            finite = row[~np.isnan(row)]
            if finite.size and (finite == finite.max()).sum() > 1:
                note("a greedy row whose largest logit is on several ids")
        else:
            note("a seeded random row")
            if (row == math.inf).sum() > 1:
                note("a random row with +inf on several ids (a tie after the noise)")
            finite = row[np.isfinite(row)]
            if finite.size and (finite < finite.max() - LAZY_MARGIN).any():
                note("a random row with ids far below its largest (the lazy pass skips them)")
            if (finite == 2.0 ** 30).sum() > 1 and finite.max() == 2.0 ** 30:
                note("a random row whose largest logit, 2**30, is on several ids (a tie after the noise)")
        if np.isnan(row).any():
            note("a NaN logit")
            blocks_with_nan = [np.isnan(row[i:i + BLOCK]).any() for i in range(0, vocab, BLOCK)]
            if not all(blocks_with_nan):
                note("a NaN in some 1024-id blocks of a row, not all")
        if (row == -math.inf).all():
            note("a row of -inf only")
    if vocab > BLOCK:
        note("several 1024-id blocks" + ("" if vocab % BLOCK == 0 else ", the last one cut short"))


def _note_fused(step: Step, params: dict, case: LogitsProgram, prompt_only: dict) -> None:
    """Labels of the steps the fused fast path samples itself rather than deferring;
    `prompt_only`: slot -> the prompt's ids not in the request's output."""
    from vllm_hotpaths.sampler_mrv2.fast import fused_covers, penalized

    forces = case.reasoning is not None and all(case.reasoning)
    if not all(fused_covers(params[s], case.vocab_size, forces) for s in step.rows):
        return
    note("a step the fused kernel samples")
    for slot, local in zip(step.rows, step.local_pos):
        if penalized(params[slot]):
            note("a penalized row the fused kernel samples")
            drafted = {t for t, s in zip(step.input_ids, step.rows) if s == slot}
            if params[slot].repetition_penalty != 1.0 and prompt_only[slot] - drafted:
                note("a repetition-penalized row the fused kernel samples, a prompt id not in its output")
            if local > 0:
                note("a penalized draft row the fused kernel samples")


def _assert_rows_held(penalties, dense, params: dict, step: int) -> None:
    """The patched PenaltiesState's compact tables: a row for each penalized request in a slot,
    none for the others, nothing allocated while no row is held, never more than upstream's."""
    from vllm_hotpaths.sampler_mrv2.patch import table_of

    table = table_of(penalties)
    assert table is not None, "the patched sampler holds upstream's dense penalty tables"
    for slot in params:
        held, penalized = table.row_of[slot] >= 0, penalties.use_penalty[slot]
        assert held == penalized, f"step {step}: slot {slot} {'holds' if held else 'lacks'} a count row, " \
                                  f"penalized: {penalized}"
    if not (table.row_of >= 0).any():
        assert table.nbytes == 0, f"step {step}: {table.nbytes} bytes of tables with no penalized request"
    dense_bytes = dense.output_bin_counts.nbytes + dense.prompt_bin_mask.nbytes
    assert table.nbytes <= dense_bytes, f"step {step}: {table.nbytes} bytes of tables, upstream's {dense_bytes}"


def _logit_bias_state(sampler):
    """The sampler's LogitBiasState: an attribute up to 0.30, one of its logits processors from 0.31."""
    found = getattr(sampler, "logit_bias_state", None)
    return found if found is not None else next(p for p in sampler.logits_processors
                                                if type(p).__name__ == "LogitBiasState")


class SamplingPassChecks(Checks):
    """Ids exactly and processed logits bit for bit (fp32 upcast), step by step. Bad parameters and
    rows: InvalidSamplingInput (NotStated for top-k / top-p) with the reference's message."""

    hotpath = "sampler_mrv2"
    case_type = LogitsProgram
    error_type = BadInputCase
    boundaries = ("a greedy row", "a seeded random row", "a greedy row whose largest logit is on several ids",
                  "a random row with +inf on several ids (a tie after the noise)", "a NaN logit",
                  "a NaN in some 1024-id blocks of a row, not all", "several 1024-id blocks",
                  "several 1024-id blocks, the last one cut short",
                  "a seed past 32 bits", "a negative seed", "one request with several rows",
                  "a step the fused kernel samples", "a penalized row the fused kernel samples",
                  "a repetition-penalized row the fused kernel samples, a prompt id not in its output",
                  "a penalized draft row the fused kernel samples",
                  "a random row with ids far below its largest (the lazy pass skips them)",
                  "a random row whose largest logit, 2**30, is on several ids (a tie after the noise)")
    triton = True
    law_devices = {**Checks.law_devices, "conformance": ("cpu", "cuda"), "patch": ("cpu", "cuda")}

    def cases(self):
        return self.draws.sampler_programs()

    def reached(self, case: LogitsProgram) -> None:
        params, prompt_only = {}, {}
        steps = run(case, [], "cpu")  # each step's inputs; the walk below keeps its requests
        for op in case.ops:
            if op[0] == "add":
                params[op[1]] = params_of(op[4]).checked(case.vocab_size)
                prompt_only[op[1]] = set(op[2]) - set(op[3])
                seed = params[op[1]].seed
                if not 0 <= seed < 2**32:
                    note("a negative seed" if seed < 0 else "a seed past 32 bits")
            elif op[0] == "remove":
                del params[op[1]]
            elif op[0] == "append":
                prompt_only[op[1]] -= set(op[2])
            elif op[0] == "step":
                step = next(steps)
                _note_rows(step, [params[s].temperature for s in step.rows], case.vocab_size)
                _note_fused(step, params, case, prompt_only)

    def agree(self, case: LogitsProgram, expected: Side, actual: Side, device, log: CaseLog) -> None:
        # Against vLLM (conformance, drift) the reference runs the kernel CUDA runs; a fast path
        # is held to the batched launch that test_sampler_mrv2_reference.py proves the same.
        live = is_live(actual)
        assert_same_sampling(case, expected, actual, device, alone=not live, per_block=live)

    def patch_agrees(self, case: LogitsProgram, device, log: CaseLog) -> None:
        """vLLM's `Sampler.sample` with the plugin's patch installed draws the same ids as the
        upstream method it replaced on a sampler holding upstream's dense penalty tables. Each step
        runs under the `raw_logprobs` and `processed_logprobs` modes, logprobs asked for: where
        `Sampler.__call__` reads the processed logits (a processed mode) they are upstream's bit for
        bit; under `raw_logprobs` the fused pass returns None for them, or from 0.27, for a batch
        no request needs processing, the caller's logits as upstream does. The caller's logits are
        left as given (0.26 processes them in place: there each side gets its own copy). Both
        samplers take the program's admissions and sampled tokens through vLLM's own calls
        (`bincount`, `post_update`); on 0.22 to 0.30 the patched one into its compact tables, which
        hold a row for each penalized request and none for the others. Where the release's noise
        has a bound (0.24 on), the patched sampler takes the lazy pass on odd steps, the fused one
        on even steps (`patch.pass_choice`, forced).

        A step the patch hands to upstream whose batch holds allowed ids is compared on CPU only:
        on CUDA, vLLM 0.22's `_bias_kernel` fills the row with -inf and restores the allowed
        logits with no barrier between the two stores, so two upstream calls on the same inputs
        may differ (vLLM added `tl.debug_barrier()` there later). There the law checks that the
        patch defers."""
        from vllm_hotpaths import registry, vllm_env
        from vllm_hotpaths.sampler_mrv2 import patch

        version = vllm_env.installed_version()
        patch.install_methods()
        compact = patch.compact_tables(version)
        in_place = patch.release_reference().keeps_logits_dtype
        factory = registry.get(self.hotpath).live_factory()
        with patch.penalty_tables("dense"):
            (upstream,) = case.samplers(factory, device=device)
        with patch.penalty_tables("compact" if compact else "dense"):
            (live,) = case.samplers(factory, device=device)
        patch.lazy_choice(True)
        try:
            self._patch_steps(case, upstream, live, device, compact, in_place)
        finally:
            patch.lazy_choice(False)

    def _patch_steps(self, case: LogitsProgram, upstream, live, device, compact: bool, in_place: bool) -> None:
        from vllm_hotpaths import vllm_env
        from vllm_hotpaths.sampler_mrv2 import patch

        sampler = live.sampler
        for i, step in enumerate(run(case, (upstream, live), device)):
            choice = patch.pass_choice(sampler)  # None where the release's noise has no bound
            if choice is not None:
                choice.forced = "lazy" if i % 2 else "fused"
            if compact:
                _assert_rows_held(sampler.penalties_state, upstream.sampler.penalties_state, live.params, i)
            else:
                assert patch.table_of(sampler.penalties_state) is None, "compact tables where upstream's are kept"
            args, upstream_args = live.sampler_args(*step.args()), upstream.sampler_args(*step.args())
            for s in (sampler, upstream.sampler):
                s.num_speculative_tokens = max(step.local_pos, default=0) + 1  # as the engine's bound
            deferred = vllm_env.call(patch.fused_or_none, sampler, **{**args, "logits": step.logits.clone()}) is None
            allowed = _logit_bias_state(sampler).num_allowed_token_ids.np[args["idx_mapping_np"]].any()
            if deferred and allowed and step.logits.is_cuda:
                note("a step with allowed ids the patch defers (CUDA: upstream races)")
                continue
            if deferred and sampler.penalties_state.use_penalty[args["idx_mapping_np"]].any():
                note("a penalized step the patch hands to upstream")
            for mode in ("raw_logprobs", "processed_logprobs"):
                for s in (sampler, upstream.sampler):
                    s.logprobs_mode = mode
                given = step.logits.clone() if in_place else step.logits
                want_ids, want = vllm_env.call(patch.UPSTREAM["sample"], upstream.sampler,
                                               **{**upstream_args, "logits": given, "return_logprobs": True})
                logits = step.logits.clone() if in_place else step.logits
                before = logits.clone()
                ids, out = vllm_env.call(sampler.sample, **{**args, "logits": logits, "return_logprobs": True})
                if not in_place:
                    assert_same_bits(logits, before, f"step {i}, {mode}: the caller's logits after the patched call")
                assert torch.equal(ids.view(-1).to(torch.int64), want_ids.view(-1).to(torch.int64)), \
                    f"step {i}, {mode}: patched {ids.tolist()}, upstream {want_ids.tolist()}"
                if out is None:
                    assert mode == "raw_logprobs" and not deferred, f"step {i}: no processed logits under {mode}"
                    note("a step the patch samples with the " + ("lazy pass" if choice and i % 2 else "fused kernel"))
                else:
                    assert_same_bits(out.float(), want.float(), f"step {i}, {mode}: processed logits, patched vs "
                                                                "upstream")
                    if out is logits and not deferred:
                        note("a step the patch samples from the caller's logits")

    def error_cases(self):
        return self.draws.sampler_bad_inputs()

    def refuse_alike(self, case: BadInputCase, expected: Side, actual: Side, device, log: CaseLog) -> None:
        assert_refused_alike(case, expected, actual, device, lambda impl, *args: impl.sample(*args))
