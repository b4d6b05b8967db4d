"""Known divergences between a frozen reference and the installed vLLM.

The only way a conformance property may accept a difference between a reference and upstream is
an entry here: the hot path, the vLLM versions affected, the upstream issue or PR, and a predicate
that picks out the affected inputs. For an affected input the property requires the difference
(an entry whose divergence has disappeared fails, so fixed upstream bugs leave the ledger); every
other input must agree exactly. An entry with `required=False` marks inputs whose upstream result
is not decided by the semantics (a Triton reduction order, a rounding of two arithmetics): there
the two may differ, and the property reports when they did.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, replace
from typing import Callable

from vllm_hotpaths.registry import version_key


@dataclass(frozen=True)
class KnownDivergence:
    hotpath: str
    first_version: str  # first affected vLLM version (inclusive)
    last_version: str | None  # last affected version (inclusive); None while upstream is unfixed
    link: str
    summary: str
    affects: Callable[[object], bool]  # predicate over the property's case
    fixed_in: str | None = None  # a version checked to be unaffected: the range ends before it
    required: bool = True  # False: the affected inputs may agree too
    # "divergence": upstream vs the frozen reference (conformance); "change": a deliberate
    # upstream semantic change, between the references of the versions before and from it
    kind: str = "divergence"
    shows: str | None = None  # a "change": a regex the difference's message must match, if given
    # "runner-change" entries: what Model Runner V2 does differently from v1 for the same
    # requests (the runner-change law: the v1 hot path's reference against live MRv2 code)
    devices: tuple[str, ...] = ("cpu", "cuda")  # where the difference can show

    def applies_to(self, hotpath: str, vllm_version: str) -> bool:
        version = version_key(vllm_version)
        if hotpath != self.hotpath or version < version_key(self.first_version):
            return False
        if self.last_version is not None and version > version_key(self.last_version):
            return False
        return self.fixed_in is None or version < version_key(self.fixed_in)

    @property
    def label(self) -> str:
        """The entry in a report line: its summary's first clause."""
        return self.summary.split(":")[0]

    def covers(self, hotpath: str, vllm_version: str, case: object) -> bool:
        if not self.applies_to(hotpath, vllm_version):
            return False
        affected = self.affects(case)
        return bool(affected.any() if hasattr(affected, "any") else affected)


# swap_states: both mask bugs are in every release before 0.31.0 (read in the source and checked by
# conformance on each release: docs/release-changes.md).
LEDGER: list[KnownDivergence] = [
    KnownDivergence(
        hotpath="swap_states", first_version="0.16.0", last_version=None, fixed_in="0.31.0",
        link="https://github.com/vllm-project/vllm/pull/48419",
        summary="swap_states assigns allowed-token mask row views to each other: both rows end up "
                "with the second row's mask",
        affects=lambda case: getattr(case, "swaps_different_masks", False),
    ),
    KnownDivergence(
        hotpath="swap_states", first_version="0.16.0", last_version=None, fixed_in="0.31.0",
        link="https://github.com/vllm-project/vllm/issues/43894",
        summary="condense leaves the moved request's allowed-token mask in the vacated row; the next "
                "request without allowed ids added there inherits it",
        affects=lambda case: getattr(case, "unmasked_add_to_stale_row", False),
    ),
    KnownDivergence(
        hotpath="swap_states", first_version="0.19.0", last_version=None, required=False, kind="change",
        link="https://github.com/vllm-project/vllm/pull/34733",
        summary="swap_states exchanges the token rows' first max(A1, A2) columns, no longer whole "
                "max_model_len rows: columns past the longer active prefix stay with their row",
        affects=lambda case: bool(_ops(case, "swap")), shows="token_ids_cpu|is_token_ids",
    ),
]


# recovered_tokens: predicates mark draft positions (one bool per position), not whole cases.
LEDGER += [
    KnownDivergence(
        hotpath="recovered_tokens", first_version="0.16.0", last_version=None, required=False,
        link="https://github.com/vllm-project/vllm/pull/44744",
        summary="a NaN score (NaN probability, or q = 0 against a zero residual) wins or loses by "
                "Triton's reduction order upstream, and past-the-vocabulary lanes could win before "
                "this PR (ids >= V); the references never let a NaN score win",
        affects=lambda case: case.nan_positions(),
    ),
    KnownDivergence(
        hotpath="recovered_tokens", first_version="0.17.0", last_version=None, required=False,
        kind="change", link="https://github.com/vllm-project/vllm/pull/34974",
        summary="0.17 scores residual * (1/q) where 0.16 divided residual / q: the two roundings "
                "pick different ids on near-ties (and where 1/q leaves fp32's normal range)",
        affects=lambda case: case.near_tie_positions(),
    ),
]


def older_reference_version(hotpath: str, vllm_version: str) -> str | None:
    """The newest frozen reference older than the one `vllm_version` is checked against: the
    semantics a fast path validated for an earlier vLLM implements (None when there is none)."""
    from vllm_hotpaths.registry import get

    spec = get(hotpath)
    current = version_key(spec.reference_version_for(vllm_version))
    older = [v for v in spec.references if version_key(v) < current]
    return max(older, key=version_key) if older else None


def explain_drift(hotpath: str, vllm_version: str, case: object, message: str = "",
                  since: str | None = None) -> list[KnownDivergence]:
    """The deliberate upstream changes (entries of kind "change") that cover `case` and whose
    `shows` pattern, if any, is in the difference's `message`: the names of a difference between
    an older reference and the installed vLLM. `since`: the older reference's version; a change
    first in it or before is part of that reference, so it names nothing."""
    return [e for e in LEDGER if e.kind == "change" and e.covers(hotpath, vllm_version, case)
            and (since is None or version_key(e.first_version) > version_key(since))
            and (e.shows is None or re.search(e.shows, message))]


def position_entries(hotpath: str, vllm_version: str, case: object,
                     kind: str = "divergence") -> list[tuple[KnownDivergence, object]]:
    """(entry, per-position mask) for every entry of this kind, hot path and version."""
    return [(entry, entry.affects(case)) for entry in LEDGER
            if entry.kind == kind and entry.applies_to(hotpath, vllm_version)]


class LedgerEntryStale(AssertionError):
    """A ledger entry predicted a divergence that did not happen."""


def check_conformance(hotpath: str, vllm_version: str, case: object, compare: Callable[[], None],
                      device: str | None = None):
    """Run `compare` (raises AssertionError on a difference) under the ledger's rule; `device`
    (its type, "cpu" or "cuda"): only entries that can show there excuse (None: any entry).

    Returns the entry that excused a difference, or None when reference and vLLM agreed.
    """
    entries = [e for e in LEDGER if e.kind == "divergence" and e.covers(hotpath, vllm_version, case)
               and (device is None or device in e.devices)]
    if not entries:
        compare()
        return None
    try:
        compare()
    except AssertionError:
        return entries[0]
    if not all(e.required for e in entries):
        return None
    raise LedgerEntryStale(
        f"ledger entry {entries[0].link} ({entries[0].summary}) expects vLLM {vllm_version} to "
        f"diverge on this input, but it agreed: remove or narrow the entry"
    )


def conformance_judge(hotpath: str, vllm_version: str, log, device=None):
    """The conformance law's judge: a difference passes only where a divergence entry covers the
    case (and must then happen, unless the entry says upstream is undecided there); the entry's
    link goes to the log. `device`: as `check_conformance`'s (a torch device or its type)."""
    kind = None if device is None else str(device).split(":")[0]

    def judge(case, compare) -> bool:
        entry = check_conformance(hotpath, vllm_version, case, compare, kind)
        if entry is not None:
            log.excuse(entry)
        return entry is not None

    return judge


# Deliberate changes from 0.22 to 0.33, met by the drift checks (an older reference against the
# installed vLLM). The predicates read the plain-data programs and say which programs can show
# the change; the drift check names every entry whose predicate covers its shrunk case.
def _ops(case, kind: str) -> list:
    """`case`'s operations of `kind`, with the named fields of its hot path's schema."""
    from vllm_hotpaths.testing.cases import logits_copy, swap_states, think_budget

    schema = {"ThinkProgram": think_budget.OPS, "SwapProgram": swap_states.OPS,
              "LogitsProgram": logits_copy.OPS}.get(type(case).__name__)
    return schema.of(case, kind) if schema else [op for op in getattr(case, "ops", ()) if op and op[0] == kind]


def _request_params(case) -> list[dict]:
    return [dict(add.params) for add in _ops(case, "add")]


def _low_precision_arithmetic(case) -> bool:
    """A logits_copy program on bf16/fp16 logits with a step that computes on them or takes
    their maximum: a logit bias, a penalty, a temperature other than 0 and 1, or min_p."""
    def computes(p: dict) -> bool:
        return bool(p.get("logit_bias")) or p.get("temperature", 1.0) not in (0.0, 1.0) or bool(p.get("min_p")) \
            or p.get("repetition_penalty", 1.0) != 1.0 or bool(p.get("frequency_penalty")) \
            or bool(p.get("presence_penalty"))

    return getattr(case, "dtype", "float32") != "float32" and any(computes(p) for p in _request_params(case))


def _think_tokens(case) -> set[int]:
    """Every integer in a think_budget program's operations: its token ids (prompts, outputs,
    sampled and draft ids) and, coarsely, its rows and budgets too."""
    found: set[int] = set()

    def walk(value):
        if isinstance(value, int) and not isinstance(value, bool):
            found.add(value)
        elif isinstance(value, (tuple, list)):
            for item in value:
                walk(item)

    walk(getattr(case, "ops", ()))
    return found


# The think_budget changes from 0.25 on are met only by drift checks whose older reference
# validates budgets too (0.23.0 on: a -1 budget tracks nothing on both sides), so their
# predicates need not set negative budgets apart.
def _exits_thinking(case) -> bool:
    """A think_budget program that can leave a think block: it feeds an end marker, or a row
    emits the end marker its budget forces ("obey")."""
    return bool(set(case.end_ids) & _think_tokens(case)) or bool(_ops(case, "obey"))


def _rewrites_searched(case) -> bool:
    """A think_budget program that can change output positions a search already passed: trims,
    rewrites, repaired or filled placeholders, or a swap (before 0.28 one state then reads two
    rows' outputs). 0.25's resumed searches miss markers written there."""
    return any(_ops(case, kind) for kind in ("trim", "regrow", "repair", "fill", "swap"))


def _change_from(first_version: str, hotpath: str, link: str, summary: str, affects: Callable[[object], bool],
                 shows: str | None = None) -> KnownDivergence:
    """A deliberate change first in release `first_version`, still in place; affected programs may agree."""
    return KnownDivergence(hotpath=hotpath, first_version=first_version, last_version=None, link=link,
                           summary=summary, affects=affects, required=False, kind="change", shows=shows)


LEDGER += [
    _change_from(
        "0.28.0", "think_budget", "https://github.com/vllm-project/vllm/pull/49613",
        summary="sync_batch's SWAP pops both rows' states before re-inserting them: up to 0.27 one "
                "state object was left on two rows after swapping a tracked row with an untracked one",
        affects=lambda case: bool(_ops(case, "swap")),
    ),
    _change_from(
        "0.25.0", "think_budget", "https://github.com/vllm-project/vllm/pull/43757",
        summary="scan_offset: after a forced end the markers are searched only past it, so a later "
                "start re-enters thinking (0.25: force-closed at once; from 0.26 with a fresh budget) "
                "where 0.24 kept finding the old end marker; 0.25 also resumes each search at its "
                "last miss",
        affects=lambda case: _exits_thinking(case) or _rewrites_searched(case),
    ),
    _change_from(
        "0.26.0", "think_budget", "https://github.com/vllm-project/vllm/pull/45984",
        summary="a natural end marker leaves thinking at once and resets the markers and scan_offset "
                "(early natural-end block, natural_end_with_continue); 0.25's force-close of a start "
                "after a forced end and its resumed searches are gone",
        affects=lambda case: _exits_thinking(case) or _rewrites_searched(case),
    ),
    _change_from(
        "0.26.0", "think_budget", "https://github.com/vllm-project/vllm/pull/46662",
        summary="the holder is handed committed outputs only; up to 0.25 it got outputs combined "
                "with drafts and stripped them again",
        affects=lambda case: case.num_spec_tokens > 0 and bool(_ops(case, "drafts")),
    ),
    _change_from(
        "0.23.0", "think_budget", "https://github.com/vllm-project/vllm/blob/v0.23.0/vllm/sampling_params.py#L34",
        summary="SamplingParams turns a thinking budget of -1 into None (no state is tracked; 0.22 "
                "kept an inert -1 state) and refuses other negative budgets",
        affects=lambda case: any(add.budget is not None and add.budget < 0 for add in _ops(case, "add")),
    ),
    _change_from(
        "0.31.0", "swap_states", "https://github.com/vllm-project/vllm/pull/48419",
        summary="swap_states exchanges the allowed-token mask rows (0.16-0.30 left both rows with "
                "the second row's mask)",
        affects=lambda case: any(add.allowed for add in _ops(case, "add")) and bool(_ops(case, "swap")),
        shows="allowed-token mask",
    ),
    _change_from(
        "0.31.0", "swap_states", "https://github.com/vllm-project/vllm/issues/43894",
        summary="condense clears the vacated row's allowed-token mask (0.16-0.30 left it for the "
                "next request added there)",
        affects=lambda case: any(add.allowed for add in _ops(case, "add")) and bool(_ops(case, "remove")),
        shows="allowed-token mask",
    ),
    _change_from(
        "0.27.0", "swap_states", "https://github.com/vllm-project/vllm/pull/49757",
        summary="condense clears the block-table row it vacates (dummy runs read stale rows as "
                "Mamba state slots)",
        affects=lambda case: bool(_ops(case, "remove")),
        shows="num_blocks_per_row|block_table",
    ),
    _change_from(
        "0.23.0", "logits_copy", "https://github.com/vllm-project/vllm/pull/42472",
        summary="Sampler.sample calls apply_sampling_params(skip_top_k_top_p=True) and applies "
                "top-k/top-p in its own sampling step (on CUDA, FlashInfer's sampler when some "
                "request uses them and none is greedy, seeded or wants processed logprobs); 0.22 "
                "masked the processed logits",
        affects=lambda case: any("top_k" in p or "top_p" in p for p in _request_params(case)),
    ),
    _change_from(
        "0.24.0", "logits_copy", "https://github.com/vllm-project/vllm/pull/46243",
        summary="min_tokens counts the token being sampled (pos + 1 < prompt_len + min_tokens)",
        affects=lambda case: any(p.get("min_tokens", 0) for p in _request_params(case)),
    ),
    KnownDivergence(
        hotpath="logits_copy", first_version="0.26.0", last_version="0.26.0", required=False, kind="change",
        link="https://github.com/vllm-project/vllm/pull/48641",
        summary="no fp32 copy: the steps run in the logits' own dtype, in place, so a bias, penalties "
                "and temperature round to bf16/fp16 at each step and min_p takes the row's maximum "
                "in that dtype (reverted in 0.27.0)",
        affects=lambda case: _low_precision_arithmetic(case),
    ),
    _change_from(
        "0.27.0", "logits_copy", "https://github.com/vllm-project/vllm/pull/49033",
        summary="the fp32 copy is back (reverts PR #48641): bf16/fp16 logits are processed in fp32 "
                "again",
        affects=lambda case: _low_precision_arithmetic(case),
    ),
    _change_from(
        "0.28.0", "logits_copy", "https://github.com/vllm-project/vllm/pull/52311",
        summary="bad words match against the request's draft tokens on speculative rows",
        affects=lambda case: any(p.get("bad_words") for p in _request_params(case))
        and any(drafts for step in _ops(case, "step") for _, drafts in step.batch),
    ),
    _change_from(
        "0.28.0", "logits_copy", "https://github.com/vllm-project/vllm/pull/46727",
        summary="Model Runner v2 forces the reasoning end marker (1e9) when a thinking budget runs out",
        affects=lambda case: case.reasoning is not None and all(case.reasoning)
        and any(p.get("thinking_token_budget") not in (None, -1) for p in _request_params(case)),
    ),
]


def _random_requests(case) -> bool:
    """A logits program (logits_copy's, sampler_mrv2's) over more than one id with a request
    sampled at random (the temperature is not 0) and a step."""
    return case.vocab_size > 1 and bool(_ops(case, "step")) \
        and any(p.get("temperature", 1.0) != 0.0 for p in _request_params(case))


def _allowed_ids(case) -> bool:
    """A logits program with a request that has allowed token ids, and a step."""
    return bool(_ops(case, "step")) and any(p.get("allowed_token_ids") for p in _request_params(case))


LEDGER += [
    KnownDivergence(
        hotpath="sampler_mrv2", first_version="0.22.0", last_version="0.24.0", required=False,
        link="https://github.com/vllm-project/vllm/blob/v0.25.0/vllm/v1/worker/gpu/sample/logit_bias.py#L192-L203",
        summary="allowed token ids on CUDA race in 0.22 to 0.24: the logit-bias kernel saves the allowed lanes, "
                "fills the row with -inf and restores them with no barrier between, so the restore can land "
                "before the fill and leave the row all -inf (id 0 sampled); 0.25 adds the barriers",
        affects=_allowed_ids, devices=("cuda",)),
]

# sampler_mrv2 processes the logits as logits_copy does (each of its changes, on the same
# programs), then adds the Gumbel noise, whose two changes are the rejection sampler's too.
# (Not 0.23's top-k/top-p move: sampler_mrv2 states no top-k/top-p.)
LEDGER += [replace(entry, hotpath="sampler_mrv2") for entry in LEDGER
           if entry.hotpath == "logits_copy" and entry.first_version != "0.23.0"]
LEDGER += [
    _change_from(
        "0.24.0", "sampler_mrv2", "https://github.com/vllm-project/vllm/pull/45996",
        summary="the Gumbel noise is -log(-log1p(-u)) (libdevice log1p), u floored at 4.66e-10, no longer "
                "-log(-log u): a random request samples other ids",
        affects=_random_requests),
    _change_from(
        "0.31.0", "sampler_mrv2", "https://github.com/vllm-project/vllm/pull/51367",
        summary="the Gumbel noise comes from a murmur3 hash of (seed, position, token), no longer from Philox: "
                "a random request samples other ids",
        affects=_random_requests),
]

def _rejection_requests(case, greedy: bool | None = None, drafted: bool = False) -> list[tuple]:
    """The requests of a rejection_mrv2 case (greedy or random ones; with a valid draft)."""
    return [r for r in getattr(case, "requests", ())
            if (greedy is None or (r[2] == 0.0) == greedy) and (not drafted or any(t >= 0 for t in r[1]))]


def _mrv2_blob(version: str, path: str) -> str:
    return f"https://github.com/vllm-project/vllm/blob/v{version}/vllm/v1/worker/gpu/{path}"


MRV2_REJECTION_025 = _mrv2_blob("0.25.0", "spec_decode/rejection_sampler_utils.py")
MRV2_REJECTION_028 = _mrv2_blob("0.28.0", "spec_decode/rejection_sampler_utils.py")


def _draft_logit_requests(case) -> bool:
    """A random request of a rejection_mrv2 case with draft logits and a draft to test."""
    return bool(getattr(case, "draft_logits", False) and _rejection_requests(case, greedy=False, drafted=True))


def _acceptance_draws_matter(case) -> bool:
    """A random request of a rejection_mrv2 case whose first draft the acceptance uniform decides:
    its target logit there is finite (a -inf, +inf or NaN logit rejects it whatever the uniform)."""
    requests = _rejection_requests(case, greedy=False, drafted=True)
    if not requests:
        return False
    inputs = case.inputs("cpu")
    target, cu = inputs[0], inputs[3].tolist()
    return any(r[1][0] >= 0 and math.isfinite(float(target[cu[i], r[1][0]]))
               for i, r in enumerate(case.requests) if r in requests)


def _random_placeholder(case) -> bool:
    """A random request of a rejection_mrv2 case with a -1 draft."""
    return any(-1 in r[1] for r in _rejection_requests(case, greedy=False))


# rejection_mrv2: each release whose default path changed has its reference (0.21.0, 0.22.0,
# 0.24.0, 0.25.0, 0.28.0, 0.31.0; read in each release's rejection_sampler_utils.py and gumbel.py,
# docs/release-changes.md H); the drift check of a release runs the previous one's reference.
LEDGER += [
    _change_from(
        "0.22.0", "rejection_mrv2", "https://github.com/vllm-project/vllm/pull/41775",
        summary="the Gumbel noise of a resampled or bonus token is fp32, -log(-log u) of a fp32 tl.rand floored "
                "at fp32's tiniest normal, no longer a fp64 uniform from 64 Philox bits added to the residual "
                "in fp64: a random request samples other ids",
        affects=lambda case: bool(_rejection_requests(case, greedy=False))),
    _change_from(
        "0.24.0", "rejection_mrv2", "https://github.com/vllm-project/vllm/pull/45996",
        summary="the Gumbel noise of a resampled or bonus token is -log(-log1p(-u)) (libdevice log1p), u "
                "floored at 4.66e-10, no longer -log(-log u): a random request samples other ids",
        affects=lambda case: bool(_rejection_requests(case, greedy=False))),
    _change_from(
        "0.25.0", "rejection_mrv2", f"{MRV2_REJECTION_025}#L534",
        summary="the acceptance test's uniform is a fp32 tl.rand floored at 4.66e-10, no longer a fp64 "
                "Philox draw: a random request's drafts are accepted or rejected on other uniforms",
        affects=_acceptance_draws_matter),
    _change_from(
        "0.25.0", "rejection_mrv2", "https://github.com/vllm-project/vllm/pull/46533",
        summary="-1 placeholder drafts are handed over and rejected (read at lane 0); up to 0.24 the "
                "kernel read the logits at -1, and the references refuse them there",
        affects=lambda case: any(-1 in r[1] for r in getattr(case, "requests", ())), shows="refused differently"),
    _change_from(
        "0.25.0", "rejection_mrv2", f"{MRV2_REJECTION_025}#L757",
        summary="the residual of a rejected draft with draft logits is log p + libdevice log1p(-q/p), no "
                "longer log p + log(1 - q/p): the resampled token may differ",
        affects=_draft_logit_requests),
    _change_from(
        "0.28.0", "rejection_mrv2", "https://github.com/vllm-project/vllm/pull/50939",
        summary="a -1 draft ends a random request's verification and its row is resampled from the target "
                "logits; 0.25 to 0.27 resampled it from the residual against that row's draft logits",
        affects=lambda case: getattr(case, "draft_logits", False) and _random_placeholder(case)),
    _change_from(
        "0.28.0", "rejection_mrv2", "https://github.com/vllm-project/vllm/pull/50910",
        summary="draft logits are cached before the temperature and divided by it on load (the test's log q "
                "and the residual): a random request at a temperature other than 1 with draft logits decides "
                "on other draft probabilities",
        affects=lambda case: _draft_logit_requests(case)
        and any(r[2] != 1.0 for r in _rejection_requests(case, greedy=False, drafted=True))),
    _change_from(
        "0.28.0", "rejection_mrv2", f"{MRV2_REJECTION_028}#L902-L910",
        summary="a NaN block maximum is mapped to -inf before the argmax over blocks: a request with a "
                "NaN logit over more than one 1024-lane block (greedy, or random: the noised NaN lane is "
                "its block's maximum) gets another block's argmax",
        affects=lambda case: getattr(case, "vocab_size", 0) > 1024
        and any(bool(r.isnan().any()) for greedy in (True, False) for r in _request_rows(case, greedy))),
    _change_from(
        "0.31.0", "rejection_mrv2", "https://github.com/vllm-project/vllm/pull/51367",
        summary="the Gumbel noise of a resampled or bonus token comes from a murmur3 hash of (seed, position, "
                "token), no longer from Philox: a random request samples other ids",
        affects=lambda case: bool(_rejection_requests(case, greedy=False))),
]


# What Model Runner V2 changes for the same requests, against v1 (kind "runner-change"). The
# runner-change law runs the v1 hot path's reference on MRv2's request streams against the live
# MRv2 code; every difference must be named here, with the device it can show on.
def _runner_change(hotpath: str, link: str, summary: str, affects: Callable[[object], bool],
                   devices=("cpu", "cuda"), shows: str | None = None, first_version: str = "0.22.0") -> KnownDivergence:
    return KnownDivergence(hotpath=hotpath, first_version=first_version, last_version=None, link=link, summary=summary,
                           affects=affects, required=False, kind="runner-change", shows=shows,
                           devices=tuple(devices))


def _penalties(case) -> list[tuple]:
    return case.penalties() if hasattr(case, "penalties") else []


def _uses(penalties) -> bool:
    from vllm_hotpaths.penalties_mrv2 import uses_penalties

    return uses_penalties(penalties)


MRV2_PENALTIES = "https://github.com/vllm-project/vllm/blob/v0.22.0/vllm/v1/worker/gpu/sample/penalties.py"


def _penalties_runner_change(link: str, summary: str, affects: Callable[[object], bool], **kw) -> KnownDivergence:
    """Model Runner V2's penalties arithmetic is the same from 0.16 (opt-in until 0.22)."""
    return _runner_change("penalties_mrv2", link, summary, affects, first_version="0.16.0", **kw)


LEDGER += [
    _penalties_runner_change(
        f"{MRV2_PENALTIES}#L176",
        summary="repetition on CUDA: Model Runner V2 multiplies a positive logit by Triton's 1.0 / p, "
                "an approximate division (div.full.f32); v1's CUDA op divides x / p exactly",
        affects=lambda case: any(rep != 1.0 for rep, _, _ in _penalties(case)), devices=("cuda",)),
    _penalties_runner_change(
        f"{MRV2_PENALTIES}#L179",
        summary="frequency on CUDA: Model Runner V2's x - f * count compiles to one fused multiply-add "
                "(one rounding); v1 rounds f * count, then the difference (named for requests without "
                "repetition: with it, the repetition entry names the request)",
        affects=lambda case: any(rep == 1.0 and freq != 0.0 for rep, freq, _ in _penalties(case)),
        devices=("cuda",)),
    _penalties_runner_change(
        f"{MRV2_PENALTIES}#L133",
        summary="a request whose penalties are all neutral but a -0.0 frequency or presence: Model "
                "Runner V2 leaves its logits alone; v1 penalizes the whole batch and its x - (-0.0) "
                "turns a -0.0 logit into +0.0 (no sampled token changes)",
        affects=lambda case: any(rep == 1.0 and freq == 0.0 and pres == 0.0
                                 and (math.copysign(1, freq) < 0 or math.copysign(1, pres) < 0)
                                 for rep, freq, pres in _penalties(case))),
    _penalties_runner_change(
        f"{MRV2_PENALTIES}#L127-L133",
        summary="a request whose penalties are all neutral, in a batch where another has penalties, on "
                "CUDA: Model Runner V2 leaves its logits alone; v1 penalizes the whole batch, and its "
                "x * 1 and x - 0 turn a NaN logit into the canonical NaN (no sampled token changes)",
        affects=lambda case: any(not _uses(p) for p in _penalties(case)) and any(_uses(p) for p in _penalties(case)),
        devices=("cuda",)),
    _runner_change(
        "sampling", "https://github.com/vllm-project/vllm/blob/v0.22.0/vllm/v1/worker/gpu/sample/gumbel.py#L126",
        summary="random sampling noise: Model Runner V2 draws Gumbel noise from Philox keyed by the "
                "request's seed and position; v1 draws exponential noise from torch generators, so a "
                "seeded request samples other ids on the other runner",
        affects=lambda case: True),
]


# think_budget_mrv2 (PR #46727): v1's holder against Model Runner V2's ThinkingBudgetState on the
# same request streams (T1-T7, docs/think_budget_mrv2.md). The predicates read a program's budgeted requests: their
# prompts, resumed outputs and scripted tokens (`ThinkSlotProgram.requests`).
MRV2_THINK = "https://github.com/vllm-project/vllm/blob/v0.33.0/vllm/v1/worker/gpu/sample/thinking_budget.py"
V1_THINK = "https://github.com/vllm-project/vllm/blob/v0.33.0/vllm/v1/sample/thinking_budget_state.py"


def _occurrences(tokens: list[int], marker) -> list[int]:
    n = len(marker)
    return [i for i in range(len(tokens) - n + 1) if n and tuple(tokens[i:i + n]) == tuple(marker)]


def _budgeted(case) -> list[tuple[list[int], list[int], list[int]]]:
    """(prompt, resumed, scripted) of each request with a thinking budget."""
    return [(p, r, s) for p, r, s, budget in case.requests() if budget is not None] \
        if hasattr(case, "requests") else []


def _second_start(case) -> bool:
    return any(len(_occurrences(p + r + s, case.start_ids)) >= 2 for p, r, s in _budgeted(case))


def _partial_forced_prefix(case) -> bool:
    return len(case.end_ids) >= 2 and any(case.end_ids[0] in p + r + s for p, r, s in _budgeted(case))


def _multi_token_start_in_prompt(case) -> bool:
    def in_think(prompt):
        return max(_occurrences(prompt, case.start_ids), default=-1) > max(_occurrences(prompt, case.end_ids),
                                                                          default=-1)
    return len(case.start_ids) >= 2 and any(in_think(p) for p, _, _ in _budgeted(case))


def _start_split_at_prompt_end(case) -> bool:
    start = tuple(case.start_ids)
    return len(start) >= 2 and any(tuple(p[-k:]) == start[:k] for p, _, _ in _budgeted(case)
                                   for k in range(1, len(start)))


def _end_before_start(case) -> bool:
    def stale(tokens):
        ends = _occurrences(tokens, case.end_ids)
        return bool(ends) and any(s > ends[0] for s in _occurrences(tokens, case.start_ids))
    return any(stale(p + r + s) for p, r, s in _budgeted(case))


def _budgeted_drafts(case) -> bool:
    if not hasattr(case, "requests"):
        return False
    budgets: dict[int, object] = {}
    for op in case.ops:
        if op[0] == "add":
            budgets[op[1]] = op[4]
        elif op[0] == "step" and any(drafts and budgets.get(slot) is not None for slot, drafts in op[1]):
            return True
    return False


def _request_rows(case, greedy: bool) -> list:
    """The target logits rows of each greedy (or each random) request of a rejection_mrv2 case."""
    if not hasattr(case, "requests") or not hasattr(case, "inputs"):
        return []
    target, found, start = case.inputs("cpu")[0], [], 0
    for _, drafts, temperature, *_ in case.requests:
        if (temperature == 0.0) == greedy:
            found.append(target[start:start + 1 + len(drafts)])
        start += 1 + len(drafts)
    return found


def _zero_probability_draft(case) -> bool:
    """A random request of a rejection_mrv2 case whose draft logits give one of its drafts a
    probability that is 0 in fp32 (from 0.28: after the temperature, as Model Runner V2 scales them)."""
    if not getattr(case, "draft_logits", False):
        return False
    draft_logits, steps = case.inputs("cpu")[1], case.num_speculative_steps
    for slot, drafts, temperature, *_ in case.requests:
        for j, token in enumerate(drafts):
            if temperature != 0.0 and token >= 0:
                for scale in (1.0, temperature):
                    if float((draft_logits[slot, j] / scale).softmax(-1)[token]) == 0.0:
                        return True
    return False


def _nan_or_inf(rows) -> bool:
    return any(bool((r.isnan() | (r == math.inf)).any()) for r in rows)


def _all_minus_inf(rows) -> bool:
    """A position whose logits are all -inf: every token masked."""
    return any(bool((r == -math.inf).all(-1).any()) for r in rows)


MRV2_GUMBEL = "https://github.com/vllm-project/vllm/blob/v0.22.0/vllm/v1/worker/gpu/sample/gumbel.py"


def _rejection_runner_change(link: str, summary: str, affects: Callable[[object], bool], first_version="0.21.0",
                             **kw) -> KnownDivergence:
    """What Model Runner V2's rejection changes against v1, from 0.21 (its default path) unless later."""
    return _runner_change("rejection_mrv2", link, summary, affects, first_version=first_version, **kw)


LEDGER += [
    _rejection_runner_change(
        f"{MRV2_GUMBEL}#L133-L138",
        summary="a NaN or +inf target logit in a random request: Model Runner V2 adds Gumbel noise lane by "
                "lane and its block max returns the NaN or +inf lane; v1's softmax turns the whole row into "
                "NaN probabilities, and its argmax returns lane 0 (or the lowest lane of its contest)",
        affects=lambda case: _nan_or_inf(_request_rows(case, greedy=False))),
    _rejection_runner_change(
        f"{MRV2_GUMBEL}#L133-L138",
        summary="a random request whose target logits are all -inf at a position (every token masked): no "
                "token can be sampled there, v1's softmax turns the row into NaN probabilities and Model "
                "Runner V2 adds Gumbel noise to -inf lanes, and the two return different ids (a rejected "
                "draft's recovered token: lane 0 from Model Runner V2, the draft's own lane from v1 in the "
                "committed two-token case)",
        affects=lambda case: _all_minus_inf(_request_rows(case, greedy=False))),
    _rejection_runner_change(
        f"{MRV2_REJECTION_028}#L902-L910",
        summary="a NaN target logit in a greedy request over more than one 1024-lane block, from 0.28: Model "
                "Runner V2 maps a NaN block maximum to -inf and returns another block's argmax; v1's "
                "torch argmax returns the first NaN lane",
        affects=lambda case: getattr(case, "vocab_size", 0) > 1024
        and any(bool(r.isnan().any()) for r in _request_rows(case, greedy=True)),
        first_version="0.28.0"),
    _rejection_runner_change(
        "https://github.com/vllm-project/vllm/blob/v0.22.0/vllm/v1/worker/gpu/spec_decode/"
        "rejection_sampler_utils.py#L97-L108",
        summary="a NaN target logit in a greedy request, on CUDA: Model Runner V2's compiled block max with "
                "indices passes over NaN lanes and returns another lane (on the H100: the largest finite one, "
                "and with every lane NaN the first lane past the vocabulary, an id outside it); v1's torch "
                "argmax returns the first NaN lane",
        affects=lambda case: any(bool(r.isnan().any()) for r in _request_rows(case, greedy=True)),
        devices=("cuda",)),
    _rejection_runner_change(
        "https://github.com/vllm-project/vllm/blob/v0.22.0/vllm/v1/worker/gpu/spec_decode/"
        "rejection_sampler_utils.py#L271-L287",
        summary="a draft whose draft probability is 0 in fp32 (its log-probability finite): Model Runner V2 "
                "tests log p > log u + log q in log space and may accept it; v1 requires q > 0 and rejects it",
        affects=_zero_probability_draft),
    _rejection_runner_change(
        "https://github.com/vllm-project/vllm/blob/v0.22.0/vllm/v1/worker/gpu/spec_decode/"
        "rejection_sampler_utils.py#L296-L298",
        summary="a draft whose target/draft probability ratio is within rounding of the uniform: Model Runner V2 "
                "accepts on log p > log u + log q (strict, fp32 log-probabilities), v1 on p / q >= u (fp32 "
                "probabilities): given the same u, one may accept where the other rejects",
        affects=lambda case: _near_acceptance_threshold(case)),
    _rejection_runner_change(
        "https://github.com/vllm-project/vllm/blob/v0.22.0/vllm/v1/worker/gpu/spec_decode/"
        "rejection_sampler_utils.py#L405-L419",
        summary="two lanes tied within rounding once the noise is added (near-equal logits, or logits so large "
                "that fp32 absorbs the noise): Model Runner V2 compares logit + Gumbel noise (log space, fp32; "
                "fp64 in 0.21), v1 compares p * (1 / E) (probability space) with the same uniforms, so the tie "
                "can go to different lanes",
        affects=lambda case: _near_gumbel_tie(case)),
    _rejection_runner_change(
        "https://github.com/vllm-project/vllm/blob/v0.22.0/vllm/v1/worker/gpu/spec_decode/"
        "rejection_sampler_utils.py#L388-L393",
        summary="a rejected draft with draft logits, two residual lanes tied within rounding once the noise is "
                "added: Model Runner V2 scores log p + log(1 - q/p) + Gumbel noise (0.25 on: log1p), v1 "
                "max(p - q, 0) * (1 / E), so a near-tie can go to different lanes",
        affects=lambda case: _near_residual_tie(case)),
]


def _mrv2_samplers(*behaviours: str) -> list:
    """The frozen Model Runner V2 rejection references, one per distinct value of `behaviours`
    (their class attributes: the uniforms and noise of each release)."""
    from vllm_hotpaths import registry

    spec, found = registry.get("rejection_mrv2"), {}
    for version in sorted(spec.references, key=version_key):
        sampler = registry.resolve(spec.references[version])
        found.setdefault(tuple(getattr(sampler, b) for b in behaviours), sampler)
    return list(found.values())


def _row_uniforms(case, rows: list[int], sampler):
    """Model Runner V2's (acceptance, per-token) uniforms at `rows` of a rejection_mrv2 case, as the
    reference class `sampler` draws them."""
    import torch

    from vllm_hotpaths.rejection_mrv2.reference import uniforms

    # Triton sees CPU tensors only in its interpreter: a process that compiles it (a CUDA run)
    # draws the same integer-hashed uniforms on the GPU.
    compiled = os.environ.get("TRITON_INTERPRET") != "1" and torch.cuda.is_available()
    _, _, _, _, pos, _, row_slots, _, _, seeds, _ = case.inputs("cuda" if compiled else "cpu")
    index = torch.tensor(rows, dtype=torch.int64, device=pos.device)
    accept, tokens = uniforms(seeds[row_slots.long()][index].contiguous(), pos[index].contiguous(),
                              case.vocab_size, sampler)
    return accept.cpu(), tokens.cpu()


def _gumbel_noise(u, sampler):
    """The Gumbel noise of the uniforms `u` (float64) under `sampler`'s formula."""
    import torch

    return -torch.log(-torch.log1p(-u)) if sampler.NOISE_LOG1P else -torch.log(-torch.log(u))


def _random_rows(case) -> list[tuple[int, int, int]]:
    """(request, row, the draft tested at that row or -1 for a bonus row) of each random request."""
    found, start = [], 0
    for r, (_, drafts, temperature, *_) in enumerate(getattr(case, "requests", ())):
        if temperature != 0.0:
            found += [(r, start + j, drafts[j] if j < len(drafts) else -1) for j in range(1 + len(drafts))]
        start += 1 + len(drafts)
    return found


def _near_acceptance_threshold(case, tolerance: float = 1e-5) -> bool:
    """A random request's draft (one-hot) whose fp32 target probability is within `tolerance`
    (relative) of the acceptance uniform of any release's noise."""
    tested = [(row, token) for _, row, token in _random_rows(case) if token >= 0]
    if not tested or getattr(case, "draft_logits", True):
        return False
    probs = case.inputs("cpu")[0].softmax(-1)
    for sampler in _mrv2_samplers("ACCEPT_FP32"):
        accept, _ = _row_uniforms(case, [row for row, _ in tested], sampler)
        for (row, token), u in zip(tested, accept.tolist()):
            if abs(float(probs[row, token]) - u) <= tolerance * u:
                return True
    return False


def _near_residual_tie(case, tolerance: float = 1e-6) -> bool:
    """A random request's drafted row (draft logits; no NaN or +inf logit, -inf lanes are masked
    tokens) whose two best residual
    log(max(p - q, 0)) + Gumbel noise scores, with any release's noise and draft scaling, are
    within `tolerance` of each other."""
    import torch

    if not getattr(case, "draft_logits", False):
        return False
    target, draft_logits = case.inputs("cpu")[:2]
    samplers = _mrv2_samplers("GUMBEL_FP64", "NOISE_LOG1P", "NOISE_MURMUR3", "DRAFT_OVER_TEMP")
    for r, row, token in _random_rows(case):
        if token < 0:
            continue
        slot, drafts, temperature, *_ = case.requests[r]
        step = row - sum(1 + len(q[1]) for q in case.requests[:r])
        logits = target[row].double()
        if bool((logits.isnan() | (logits == math.inf)).any()):
            continue
        p = logits.softmax(-1)
        for sampler in samplers:
            scale = temperature if sampler.DRAFT_OVER_TEMP else 1.0
            q = (draft_logits[slot, step].double() / scale).softmax(-1)
            _, u = _row_uniforms(case, [row], sampler)
            scores = torch.log((p - q).clamp(min=0)) + _gumbel_noise(u[0].double(), sampler)
            top = scores.topk(min(2, scores.numel())).values
            if top.numel() == 2 and bool(top.isfinite().all()) \
                    and float((top[0] - top[1]).abs()) <= tolerance * (1 + float(top[0].abs())):
                return True
    return False


def _near_gumbel_tie(case, tolerance: float = 1e-6) -> bool:
    """A random request's bonus row, or (one-hot drafts) any of its rows, without NaN or +inf
    logits (those are the NaN/+inf entry's; -inf lanes are masked tokens), whose two best
    logit + Gumbel noise scores, with any release's noise, are within `tolerance` (relative)
    of each other: near-equal logits, or logits so large that fp32 absorbs the noise."""
    one_hot = not getattr(case, "draft_logits", True)
    rows = [row for _, row, token in _random_rows(case) if token < 0 or one_hot]
    if not rows or case.vocab_size < 2:
        return False
    logits = case.inputs("cpu")[0][rows].double()
    finite = ~(logits.isnan() | (logits == math.inf)).any(dim=-1)
    if not bool(finite.any()):
        return False
    for sampler in _mrv2_samplers("GUMBEL_FP64", "NOISE_LOG1P", "NOISE_MURMUR3"):
        _, u = _row_uniforms(case, rows, sampler)
        top = (logits + _gumbel_noise(u.double(), sampler))[finite].topk(2, dim=-1).values
        if bool(((top[:, 0] - top[:, 1]).abs() <= tolerance * (1 + top[:, 0].abs())).any()):
            return True
    return False


def _think_change(link: str, summary: str, affects) -> KnownDivergence:
    return _runner_change("think_budget_mrv2", link, summary, affects, first_version="0.28.0")


LEDGER += [
    _think_change(
        f"{MRV2_THINK}#L310-L327",
        summary="T1, forced end string != natural end marker: Model Runner V2 leaves thinking on the "
                "reasoning parser's natural end marker; v1 only on the forced string (so after a natural "
                "end v1 still forces, and where the forced string lacks the natural end MRv2 keeps forcing)",
        affects=lambda case: tuple(case.end_ids) != tuple(case.natural_end_ids)),
    _think_change(
        f"{MRV2_THINK}#L337-L364",
        summary="T2, a partly written forced end string: Model Runner V2 forces the id after the longest "
                "prefix of the forced string that the sequence ends with, also one the model wrote itself; "
                "v1 starts the forced string at its first id",
        affects=_partial_forced_prefix),
    _think_change(
        f"{MRV2_THINK}#L290-L308",
        summary="T3, a second start marker while thinking: Model Runner V2 counts from the last start "
                "marker; v1 keeps its first anchor (the prompt's start, or the first one found in the "
                "output) and forces earlier",
        affects=_second_start),
    _think_change(
        f"{V1_THINK}#L201",
        summary="T4, a multi-token start marker in the prompt: v1 anchors the prompt's thinking at the "
                "start marker's last id and counts its length again, so it undercounts by |start| - 1 "
                "and forces later; Model Runner V2 counts from the marker's end",
        affects=_multi_token_start_in_prompt),
    _think_change(
        f"{V1_THINK}#L186-L192",
        summary="T5, a start marker split across the prompt/output boundary: v1 searches the prompt and "
                "the outputs apart and never sees it; Model Runner V2 searches them as one sequence",
        affects=_start_split_at_prompt_end),
    _think_change(
        f"{V1_THINK}#L248-L256",
        summary="T6, an end marker before the start: v1 keeps the first end marker it finds, even one "
                "before the start, and ignores a later real end (so it forces); Model Runner V2 compares "
                "the last start with the last end",
        affects=_end_before_start),
    _think_change(
        f"{MRV2_THINK}#L279-L282",
        summary="T7, speculative decoding: Model Runner V2 decides each logits row from the committed "
                "tokens plus that row's draft prefix, so every row past the budget is forced and a "
                "draft that ends thinking stops it; v1 decides once per request from the committed "
                "outputs and forces one place (force_index) whatever the drafts hold",
        affects=_budgeted_drafts),
]


def explain_runner_change(hotpath: str, vllm_version: str, device: str, case: object,
                          message: str = "") -> list[KnownDivergence]:
    """The runner-change entries that name a difference on `device` for `case`."""
    return [e for e in LEDGER if e.kind == "runner-change" and device in e.devices
            and e.covers(hotpath, vllm_version, case) and (e.shows is None or re.search(e.shows, message))]


def runner_changes(vllm_version: str | None = None) -> list[KnownDivergence]:
    """Every runner-change entry (of `vllm_version`, where given)."""
    return [e for e in LEDGER if e.kind == "runner-change"
            and (vllm_version is None or e.applies_to(e.hotpath, vllm_version))]


# cached_request_data: 0.24.0's `Scheduler._make_cached_request_data` (read in the release's source).
CACHED_REQUEST_DATA_024 = "https://github.com/vllm-project/vllm/blob/v0.24.0/vllm/v1/core/sched/scheduler.py"


def _history_not_sent_to_v2(case) -> bool:
    """A step on Model Runner V2 with a request that was not scheduled in the previous step."""
    return bool(getattr(case, "use_v2_model_runner", False)) and any(
        r.request_id not in case.previous for r in case.requests)


def _resumed_scheduled_before(case) -> bool:
    """A step whose resumed requests include one scheduled in the previous step."""
    requests = getattr(case, "requests", ())
    return any(r.request_id in case.previous for r in requests[len(requests) - case.resumed:]) if requests else False


LEDGER += [
    _change_from(
        "0.24.0", "cached_request_data", CACHED_REQUEST_DATA_024 + "#L1259-L1261",
        summary="token lists go to Model Runner v1 only: a request not scheduled in the previous "
                "step sends none when use_v2_model_runner is set (MRv2 keeps its own history)",
        affects=_history_not_sent_to_v2, shows="all_token_ids",
    ),
    _change_from(
        "0.24.0", "cached_request_data", CACHED_REQUEST_DATA_024 + "#L1257-L1258",
        summary="a resumed request scheduled in the previous step is accepted, listed as resumed, "
                "with no token list; 0.16-0.23 asserted there was none",
        affects=_resumed_scheduled_before,
    ),
]

# cached_request_data: 0.34.0's scheduler (read in the release's source): a resumed request is
# scheduled as a new one, and the message loses the resumed ids and the token lists.
CACHED_REQUEST_DATA_034 = "https://github.com/vllm-project/vllm/blob/v0.34.0/vllm/v1/core/sched/scheduler.py"

LEDGER += [
    _change_from(
        "0.34.0", "cached_request_data", CACHED_REQUEST_DATA_034 + "#L1979-L2025",
        summary="CachedRequestData has no resumed_req_ids and no all_token_ids (Model Runner V2, the only "
                "runner, keeps its own token history), and a resumed request is scheduled as a new one, "
                "re-sent in full (L1619-L1626), so it is not in this message: every step's message differs",
        affects=lambda case: hasattr(case, "requests"), shows="fields",
    ),
]

# new_block_ids: what the KV cache managers keep of the blocks they allocate (read in each
# release's source). 0.17.1 records every full-attention block, and the scheduler drains the list
# only where KV blocks are zeroed; 0.26.0 records only there.
NEW_BLOCK_IDS_0171 = "https://github.com/vllm-project/vllm/blob/v0.17.1/vllm/v1/core/single_type_kv_cache_manager.py"
NEW_BLOCK_IDS_026 = "https://github.com/vllm-project/vllm/blob/v0.26.0/vllm/v1/core/single_type_kv_cache_manager.py"

LEDGER += [
    _change_from(
        "0.17.1", "new_block_ids", NEW_BLOCK_IDS_0171 + "#L213-L247",
        summary="KV cache managers record every full-attention block they allocate in new_block_ids, "
                "taken only where KV blocks are zeroed: without zeroing every block id ever allocated stays held",
        affects=lambda case: True,
    ),
    _change_from(
        "0.26.0", "new_block_ids", NEW_BLOCK_IDS_026 + "#L86-L92",
        summary="new block ids are recorded only where KV blocks are zeroed (_record_new_block_ids): "
                "without zeroing none is held",
        affects=lambda case: True,
    ),
]

# request_output: what _update_request_with_output does with a request's sampled tokens (read in
# each release's source; the direct-call property of properties/test_request_output.py shows
# each change: the reference before it disagrees with the release's scheduler).
REQUEST_OUTPUT = "https://github.com/vllm-project/vllm/blob/v{}/vllm/v1/core/sched/{}"

LEDGER += [
    _change_from(
        "0.22.0", "request_output", REQUEST_OUTPUT.format("0.22.0", "async_scheduler.py") + "#L40-L45",
        summary="after reset_prefix_cache of the running requests the AsyncScheduler drops as many outputs "
                "as were in flight (a counter, one per call); to 0.21 it dropped one (a flag)",
        affects=lambda case: True,
    ),
    _change_from(
        "0.27.0", "request_output", REQUEST_OUTPUT.format("0.27.0", "async_scheduler.py") + "#L51-L63",
        summary="a stale output (scheduled before the request was preempted) no longer settles placeholders, "
                "and nothing is dropped after reset_prefix_cache",
        affects=lambda case: True,
    ),
    _change_from(
        "0.29.0", "request_output", REQUEST_OUTPUT.format("0.29.0", "utils.py") + "#L94-L123",
        summary="check_stop tests min_tokens after the end-of-sequence, stop-id and length checks: an "
                "end-of-sequence or stop id sampled before min_tokens now stops the request",
        affects=lambda case: True,
    ),
    _change_from(
        "0.33.0", "request_output", REQUEST_OUTPUT.format("0.33.0", "scheduler.py") + "#L2744-L2770",
        summary="one method for both schedulers: a stop trims the tokens after it from num_computed_tokens, "
                "every returned token settles a placeholder, and the caching of full blocks moves to the caller",
        affects=lambda case: True,
    ),
]
