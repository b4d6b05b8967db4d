"""Logits-copy cases: programs of requests entering and leaving sampler slots, with sampler steps.

A `LogitsProgram` is plain data (its repr is valid Python, its JSON is a fixture): a vocabulary
size, the number of slots, the logits' dtype, the reasoning markers (start, end, natural end;
None: no reasoning config) and a list of operations:
  ("add", slot, prompt, output, params)   params: ((name, value), ...) for RequestParams
  ("remove", slot)
  ("append", slot, tokens)                sampled tokens join the request's outputs
  ("step", batch, seed, share, edits)     batch: ((slot, drafts), ...); each request gets one
                                          logits row plus one per draft (speculative rows);
                                          logits from `seed` (normal, scale 4), a `share` of
                                          lanes then special values (-0.0, infinities, NaN,
                                          -60, -200, ...), then `edits` =
                                          ((row, lane, value), ...) written over them

A `BoundaryCase` is one request with one setting next to a boundary of the "needs processing"
rule, alone in its batch (`program()` makes it a `LogitsProgram`). A `BadInputCase` is a parameter
vLLM refuses, or a call whose rows do not describe one batch (the errors law's case).

`run` replays a program on any number of samplers and yields each step's inputs; `processed` runs
one sampler call and checks that the caller's logits stay as given. `LogitsCopyChecks` is what the
generic laws (properties/test_{equivalence,errors,conformance,drift,patch}.py) run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import torch

from vllm_hotpaths.logits_copy import InvalidSamplingInput, ReasoningMarkers, RequestParams
from vllm_hotpaths.testing.bits import assert_same_bits
from vllm_hotpaths.testing.cases import Ops, copy_of, note, seeded_logits
from vllm_hotpaths.testing.laws import CaseLog, Checks, Side

OPS = Ops(add="slot prompt output params", remove="slot", append="slot tokens", step="batch seed share edits")

# What a step's `share` of lanes is set to (and what its edits draw from).
SPECIAL_LOGITS = (0.0, -0.0, math.inf, -math.inf, math.nan, 1e-45, -60.0, -200.0, 30.0)


@dataclass(frozen=True)
class LogitsProgram:
    vocab_size: int
    max_num_reqs: int
    dtype: str
    ops: tuple[tuple, ...]
    reasoning: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None = None

    def samplers(self, *factories, device):
        """Each factory's sampler for this program's table size and reasoning markers."""
        markers = ReasoningMarkers(*self.reasoning) if self.reasoning is not None else None
        return [f(self.vocab_size, self.max_num_reqs, device, reasoning=markers) for f in factories]


@dataclass(frozen=True)
class BoundaryCase:
    """One request with one boundary setting, sampled (temperature 1) or greedy, in a batch of
    its own rows (one plus its drafts); the setting's token id gets a special logit. Its prompt
    and output are that token; for a thinking budget, that token starts reasoning (`reasoning`:
    the markers). `value` may name "V-1", "V", "V+1" (the vocabulary size's neighbours), "id"
    (`token`) and "all" (every id)."""

    vocab_size: int
    knob: str
    value: object
    temperature: float
    token: int
    special: float
    drafts: tuple[int, ...]
    seed: int
    dtype: str
    reasoning: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None = None

    def program(self) -> LogitsProgram:
        v, t = self.vocab_size, self.token

        def resolve(x):
            if isinstance(x, tuple):
                return tuple(resolve(e) for e in x)
            return {"V-1": v - 1, "V": v, "V+1": v + 1, "id": t, "all": tuple(range(v))}.get(x, x) \
                if isinstance(x, str) else x

        value = resolve(self.value)
        if self.knob == "min_tokens":
            pairs = (("min_tokens", value[0]), ("stop_token_ids", value[1]))
        else:
            pairs = ((self.knob, value),)
        params = (("temperature", self.temperature), *pairs, ("seed", self.seed))
        if self.knob == "temperature":
            params = params[1:]
        edits = tuple((row, t, self.special) for row in range(1 + len(self.drafts)))
        return LogitsProgram(v, 1, self.dtype, (
            ("add", 0, (t,), (t,), params),
            ("step", ((0, self.drafts),), self.seed, 0.0, edits)), self.reasoning)


# -- bad input ------------------------------------------------------------------------------
# field -> values outside what vLLM accepts (or would misread: ids outside the vocabulary of 10)
FIELD_EDGES = {"temperature": (-1e-9, float("nan")), "top_p": (0.0, 1.5), "top_k": (-2,),
               "min_p": (-1e-9, 1.5), "repetition_penalty": (0.0, -1.0),
               "frequency_penalty": (2.5, -2.5), "presence_penalty": (2.5,), "min_tokens": (-1,),
               "logit_bias": (((0, 1.0), (0, 2.0)), ((-1, 1.0),)), "allowed_token_ids": ((-1,), (99,)),
               "stop_token_ids": ((99,),), "bad_words": (((),), ((99, 1),))}
# what is wrong -> the call's arguments: logits rows, slots, local_pos, input_ids, pos
BAD_ROWS = {
    "a slot without a request": (1, (1,), (0,), (3,), (1,)),
    "a slot outside the table": (1, (7,), (0,), (3,), (1,)),
    "local_pos not from 0": (2, (0, 0), (1, 2), (3, 4), (1, 2)),
    "a request's rows apart": (3, (0, 2, 0), (0, 0, 1), (3, 3, 4), (1, 1, 2)),
    "an input id past V": (1, (0,), (0,), (10,), (1,)),
    "fewer entries than rows": (2, (0,), (0,), (3,), (1,)),
}


@dataclass(frozen=True)
class BadInputCase:
    """A parameter outside what vLLM accepts (`field`, `value`), or a call whose rows do not
    describe one batch (`field` "rows", `value` a key of BAD_ROWS), on `dtype` logits."""

    field: str
    value: object
    dtype: str


def assert_refused_alike(case: BadInputCase, expected: Side, actual: Side, device, step) -> None:
    """Both sides raise InvalidSamplingInput with the same message: for bad rows at the step
    (`step(impl, logits, rows, local_pos, input_ids, pos)`), for a parameter when the request is
    added or, where adding it is allowed, at a step over it; a refused request's slot stays free."""
    errors = []
    for side in (expected, actual):
        impl = side.factory(10, 4, device)
        impl.add_request(0, [1], [2], RequestParams(temperature=0.0))
        added = False
        try:
            if case.field == "rows":
                num_rows, *args = BAD_ROWS[case.value]
                logits = torch.zeros((num_rows, 10), dtype=getattr(torch, case.dtype), device=device)
                step(impl, logits, *(list(a) for a in args))
            else:
                impl.add_request(2, [1], [], RequestParams(**{case.field: case.value}))
                added = True
                step(impl, torch.zeros((1, 10), dtype=getattr(torch, case.dtype), device=device), [2], [0], [1], [1])
        except InvalidSamplingInput as err:
            errors.append(str(err))
        else:
            raise AssertionError(f"{side.label} raised no InvalidSamplingInput for {case}")
        if added:
            impl.remove_request(2)
        impl.add_request(2, [1], [], RequestParams())  # the slot is free
    assert errors[1] == errors[0], f"{actual.label}: {errors[1]!r}, {expected.label}: {errors[0]!r}"


# -- replay ---------------------------------------------------------------------------------
@dataclass
class Step:
    """One sampler call: a logits row per request row, and what each row describes."""

    logits: torch.Tensor
    rows: list[int]
    local_pos: list[int]
    input_ids: list[int]
    pos: list[int]

    def args(self):
        return self.logits, self.rows, self.local_pos, self.input_ids, self.pos

    def per_request(self) -> Iterator["Step"]:
        """The step cut down to each request's own rows (a batch of one request)."""
        first = 0
        for end in range(1, len(self.rows) + 1):
            if end == len(self.rows) or self.rows[end] != self.rows[first]:
                yield Step(self.logits[first:end], self.rows[first:end], self.local_pos[first:end],
                           self.input_ids[first:end], self.pos[first:end])
                first = end


def params_of(pairs) -> RequestParams:
    return RequestParams(**dict(pairs))


def run(program: LogitsProgram, samplers, device) -> Iterator[Step]:
    """Apply the program's table operations to every sampler in `samplers`; yield each step's
    inputs (the caller runs the sampler call)."""
    history: dict[int, list[int]] = {}  # slot -> prompt + outputs
    for op in program.ops:
        kind = op[0]
        if kind == "add":
            _, slot, prompt, output, pairs = op
            for s in samplers:
                s.add_request(slot, list(prompt), list(output), params_of(pairs))
            history[slot] = list(prompt) + list(output)
            if any(len(v) >= 128 for _, v in pairs if isinstance(v, tuple)):
                note("a request list of 128 or more entries")
        elif kind == "remove":
            for s in samplers:
                s.remove_request(op[1])
            del history[op[1]]
        elif kind == "append":
            for s in samplers:
                s.append_output(op[1], list(op[2]))
            history[op[1]].extend(op[2])
        elif kind == "step":
            _, batch, seed, share, edits = op
            spread = sum(1 for _, drafts in batch if drafts)  # requests with speculative rows
            if spread:
                note("several requests with several rows" if spread > 1 else "one request with several rows")
            rows, local_pos, input_ids, pos = [], [], [], []
            for slot, drafts in batch:
                fed = [history[slot][-1]] + list(drafts)
                for i, token in enumerate(fed):
                    rows.append(slot)
                    local_pos.append(i)
                    input_ids.append(token)
                    pos.append(len(history[slot]) - 1 + i)
            yield Step(build_logits(program, len(rows), seed, share, edits, device), rows, local_pos,
                       input_ids, pos)
        else:
            raise ValueError(f"unknown operation {op!r}")


def build_logits(program: LogitsProgram, num_rows: int, seed: int, share: float, edits,
                 device) -> torch.Tensor:
    values = seeded_logits(num_rows, program.vocab_size, seed, share, edits, SPECIAL_LOGITS)
    return torch.from_numpy(values).to(device=device, dtype=getattr(torch, program.dtype))


# -- the comparisons ------------------------------------------------------------------------
def processed(impl, step: Step, label: str) -> torch.Tensor:
    """The implementation's output for `step`, checking that the caller's logits stay as given.
    Processed logits are fp32, or the caller's dtype where the implementation says it keeps it
    (`keeps_logits_dtype`: vLLM 0.26.0's sampler and what states it)."""
    logits = step.logits
    before = logits.clone()
    out = impl.apply_sampling_params(*step.args())
    assert_same_bits(logits, before, f"{label}: the caller's logits after the call")
    if out is not logits:
        dtype = logits.dtype if getattr(impl, "keeps_logits_dtype", False) else torch.float32
        assert out.dtype == dtype, f"{label}: processed logits are {out.dtype}, expected {dtype}"
        assert out.data_ptr() != logits.data_ptr(), f"{label}: processing wrote into the caller's logits"
    return out


def assert_same_processing(program: LogitsProgram, expected: Side, actual: Side, device) -> None:
    """Equivalence: at every step, the whole batch, then each request alone (a request that needs
    processing is then checked without the others' flags hiding it): `actual`'s processed logits,
    upcast to fp32, == `expected`'s (fp32), bit for bit; neither writes the caller's logits.
    Each sampler gets one call a step, the batch's, as vLLM's sampler makes it; each request
    alone is a batch that step could have been, run on a copy of the sampler taken before the
    batch's call (one copy per request), so no extra call changes the path of either."""
    first, second = program.samplers(expected.factory, actual.factory, device=device)
    for i, batch in enumerate(run(program, (first, second), device)):
        alone = list(batch.per_request())
        copies = [[copy_of(impl, label=f"step {i}, {side.label}") for _ in alone]
                  for impl, side in ((first, expected), (second, actual))]
        samplers = [(first, second)] + list(zip(*copies))
        for j, (step, (want_from, got_from)) in enumerate(zip([batch, *alone], samplers)):
            label = f"step {i}" + (f", request {step.rows[0]} alone" if j else "")
            want = processed(want_from, step, f"{label}, {expected.label}")
            got = processed(got_from, step, f"{label}, {actual.label}")
            if not j:
                note("copy skipped" if got is step.logits else "processed")
            assert_same_bits(got.float(), want.float(), f"{label} ({actual.label} vs {expected.label}): "
                                                        "processed logits, upcast to fp32")


def assert_conforms(program: LogitsProgram, reference: Side, live: Side, device) -> None:
    """Conformance (and drift): at every step, the whole batch: the reference's processed logits
    == vLLM's `Sampler.apply_sampling_params`'s, both in fp32 (0.33 hands back the caller's
    tensor when nothing is processed), and vLLM's Gumbel sampler, with the requests' seeds, draws
    the same ids from both."""
    ours, theirs = program.samplers(reference.factory, live.factory, device=device)
    for i, step in enumerate(run(program, (ours, theirs), device)):
        expected = processed(theirs, step, f"step {i}, {live.label}")
        actual = processed(ours, step, f"step {i}, {reference.label}")
        assert_same_bits(actual.float(), expected.float(), f"step {i} ({reference.label} vs {live.label})")
        ids = [theirs.gumbel_sample(out, step.rows, step.pos) for out in (actual, expected)]
        assert torch.equal(ids[0], ids[1]), (
            f"step {i}: vLLM's Gumbel sampler drew different ids from {reference.label}'s output "
            f"({ids[0].tolist()}) and {live.label}'s ({ids[1].tolist()})")


def is_live(side: Side) -> bool:
    """Whether `side` is the installed vLLM's own sampler (the registry's live adapter)."""
    from vllm_hotpaths import registry

    return side.factory is registry.get("logits_copy").live_factory()


NEEDY_LEFT = "a step holding a request that needs processing after one admitted before it, that did too, left"


class LogitsCopyChecks(Checks):
    """Processed logits bit for bit after upcasting to fp32, the caller's logits never written.

    `agree` dispatches on whether `actual` is the live sampler (`is_live`: its factory is the
    registry's live adapter), because the laws compare different things today: the equivalence
    law (candidate vs reference) compares each step's whole batch, then each request alone
    (`assert_same_processing`); the conformance and drift laws (reference vs the installed vLLM)
    compare each step's whole batch in fp32 and the ids vLLM's Gumbel sampler draws from both
    outputs (`assert_conforms`). Bad parameters and rows: InvalidSamplingInput with the
    reference's message. Patch: vLLM 0.22's `Sampler.sample` patched == upstream."""

    hotpath = "logits_copy"
    case_type = LogitsProgram
    boundaries = ("a step no request needs processing (copy skipped)", "a step some request needs processing",
                  "one request with several rows", "several requests with several rows",
                  "a request list of 128 or more entries", "reasoning markers partly known (budgets not enforced)",
                  "only requests whose rows lie past the first one per request need processing",
                  NEEDY_LEFT)
    error_type = BadInputCase
    triton = True

    def cases(self):
        return self.draws.logits_programs()

    def reached(self, case: LogitsProgram) -> None:
        from vllm_hotpaths.logits_copy import needs_processing

        markers = case.reasoning
        if markers is not None and not all(markers):
            note("reasoning markers partly known (budgets not enforced)")
        forces = markers is not None and all(markers)  # as from 0.28
        params: dict[int, RequestParams] = {}
        needy: list[int] = []  # live slots that need processing, in the order they were admitted
        after_a_needy_left: set[int] = set()
        for op in case.ops:
            if op[0] == "add":
                params[op[1]] = params_of(op[4])
                if needs_processing(params[op[1]], case.vocab_size, forces):
                    needy.append(op[1])
            elif op[0] == "remove":
                del params[op[1]]
                after_a_needy_left.discard(op[1])
                if op[1] in needy:
                    after_a_needy_left.update(needy[needy.index(op[1]) + 1:])
                    needy.remove(op[1])
            elif op[0] == "step":
                if after_a_needy_left & {slot for slot, _ in op[1]}:
                    note(NEEDY_LEFT)
                needs = [needs_processing(params[slot], case.vocab_size, forces) for slot, _ in op[1]]
                note("a step some request needs processing" if any(needs)
                     else "a step no request needs processing (copy skipped)")
                first_rows = [sum(1 + len(drafts) for _, drafts in op[1][:k]) for k in range(len(op[1]))]
                if any(needs) and not any(need for need, row in zip(needs, first_rows) if row < len(op[1])):
                    note("only requests whose rows lie past the first one per request need processing")
        for _ in run(case, [], "cpu"):  # the program's own labels; no sampler runs
            pass

    def agree(self, case: LogitsProgram, expected: Side, actual: Side, device, log: CaseLog) -> None:
        if is_live(actual):
            assert_conforms(case, expected, actual, device)
        else:
            assert_same_processing(case, expected, actual, device)

    def error_cases(self):
        return self.draws.bad_input_cases()

    def refuse_alike(self, case: BadInputCase, expected: Side, actual: Side, device, log: CaseLog) -> None:
        """A parameter vLLM refuses (or would misread: ids outside the vocabulary) and rows that
        do not describe one batch (upstream would read past its tables or mix requests up) raise
        InvalidSamplingInput with the reference's message; a refused request leaves its slot free."""
        assert_refused_alike(case, expected, actual, device, lambda impl, *args: impl.apply_sampling_params(*args))

    def patch_agrees(self, case: LogitsProgram, device, log: CaseLog) -> None:
        """vLLM's `Sampler.sample` with the plugin's patch installed draws the same ids as the
        upstream method it replaced, and its processed logits are equal after upcasting to fp32.
        The patch runs directly over vLLM's own methods (`patch.alone`), whichever patch an
        earlier law left installed in this process (sampler_mrv2's would stand between them)."""
        from vllm_hotpaths.logits_copy import patch

        with patch.alone():
            self._patch_agrees(case, device)

    def _patch_agrees(self, case: LogitsProgram, device) -> None:
        from vllm_hotpaths import registry, vllm_env
        from vllm_hotpaths.logits_copy import patch

        (live,) = case.samplers(registry.get(self.hotpath).live_factory(), device=device)
        for i, step in enumerate(run(case, (live,), device)):
            args = live.sampler_args(*step.args())
            ids, out = vllm_env.call(live.sampler.sample, **args)
            upstream_ids, upstream_out = vllm_env.call(patch.UPSTREAM["sample"], live.sampler, **args)
            note("copy skipped" if out is step.logits else "processed")
            assert torch.equal(ids, upstream_ids), \
                f"step {i}: patched {ids.tolist()}, upstream {upstream_ids.tolist()}"
            assert_same_bits(out.float(), upstream_out, f"step {i}: processed logits, patched vs upstream")
