"""`cached_request_data` cases: one scheduler step's requests scheduled again, as plain data.

A `ScheduledStep` (its repr is valid Python, its JSON is a fixture) holds the scheduler's flags,
the requests in batch order (the last `resumed` of them resumed after a preemption), and the ids
the previous step scheduled (some may have left the batch). Each `ScheduledRequest` has its
prompt and outputs, its computed tokens, its async placeholders, the tokens and drafts
scheduled for it, and its new KV blocks: `SHARED_EMPTY` (the manager's one empty
`KVCacheBlocks`, what most decode steps hand every request) or block ids per KV cache group
(all groups empty: an empty object of its own).

A `BadStep` is a step with entries removed from the scheduler's tables (the errors law).
`CachedRequestDataChecks` runs both on stand-ins of vLLM's objects (`StandInRequest`,
`StandInBlocks`); the live adapter rebuilds them as vLLM's own `Request` and `KVCacheBlocks`.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

from vllm_hotpaths.testing.cases import note
from vllm_hotpaths.testing.laws import CaseLog, Checks, Side

SHARED_EMPTY = "shared-empty"


@dataclass(frozen=True)
class ScheduledRequest:
    request_id: str
    prompt: tuple[int, ...]
    outputs: tuple[int, ...]
    num_computed_tokens: int
    placeholders: int  # async scheduling: outputs scheduled but not yet sampled
    scheduled: int  # tokens scheduled this step, drafts included
    drafts: tuple[int, ...]  # its speculative tokens this step (-1: a placeholder)
    blocks: str | tuple[tuple[int, ...], ...]  # SHARED_EMPTY, or new block ids per KV cache group


@dataclass(frozen=True)
class ScheduledStep:
    use_pp: bool
    async_scheduling: bool
    use_v2_model_runner: bool
    requests: tuple[ScheduledRequest, ...]
    resumed: int  # the last `resumed` requests are resumed ones
    previous: tuple[str, ...]  # prev_step_scheduled_req_ids

    def __post_init__(self) -> None:  # a fixture's requests are read back as mappings
        object.__setattr__(self, "requests", tuple(
            r if isinstance(r, ScheduledRequest) else ScheduledRequest(**{
                k: tuple(tuple(g) for g in v) if k == "blocks" and v != SHARED_EMPTY else
                tuple(v) if isinstance(v, list) else v for k, v in r.items()})
            for r in self.requests))
        object.__setattr__(self, "previous", tuple(self.previous))


@dataclass(frozen=True)
class BadStep:
    step: ScheduledStep
    dropped: tuple[tuple[str, str], ...]  # (table, request id): entries the scheduler left out

    def __post_init__(self) -> None:
        if isinstance(self.step, dict):
            object.__setattr__(self, "step", ScheduledStep(**self.step))


class TokenList:
    """vLLM's `ConstantList` over a request's tokens: read-only, a slice or a copy is a list."""

    def __init__(self, tokens: list[int]) -> None:
        self._tokens = tokens

    def __getitem__(self, item):
        return self._tokens[item]

    def __iter__(self):
        return iter(self._tokens)

    def __len__(self) -> int:
        return len(self._tokens)

    def copy(self) -> list[int]:
        return self._tokens.copy()


class StandInRequest:
    def __init__(self, row: ScheduledRequest) -> None:
        self.request_id = row.request_id
        self._output_token_ids = list(row.outputs)
        self._all_token_ids = list(row.prompt) + list(row.outputs)
        self.all_token_ids = TokenList(self._all_token_ids)
        self.num_computed_tokens = row.num_computed_tokens
        self.num_output_placeholders = row.placeholders

    @property
    def num_output_tokens(self) -> int:
        return len(self._output_token_ids)


class StandInBlocks:
    """vLLM's `KVCacheBlocks.get_block_ids`: None (when allowed) where every group is empty."""

    def __init__(self, groups: tuple[tuple[int, ...], ...]) -> None:
        self.groups = groups

    def get_block_ids(self, allow_none: bool = False):
        if allow_none and all(len(g) == 0 for g in self.groups):
            return None
        return tuple(list(g) for g in self.groups)


@dataclass
class Inputs:
    """What `Scheduler.schedule` hands `_make_cached_request_data`, built from a step."""

    scheduler: SimpleNamespace
    running: list
    resumed: list
    num_scheduled_tokens: dict
    spec_decode_tokens: dict
    req_to_new_blocks: dict

    def arguments(self) -> tuple:
        return (self.scheduler, self.running, self.resumed, self.num_scheduled_tokens, self.spec_decode_tokens,
                self.req_to_new_blocks)


# Every scheduler attribute a release's method reads; a reference names those of its release
# (`scheduler_reads`): 0.34's scheduler has no previous step's ids and no runner flag.
READS = ("use_pp", "scheduler_config", "prev_step_scheduled_req_ids", "use_v2_model_runner")


def scheduler_of(step: ScheduledStep, reads: tuple[str, ...] = READS) -> SimpleNamespace:
    """The scheduler with only the attributes `reads` names (an implementation that reads another
    meets an AttributeError, as it would in that release's scheduler)."""
    every = dict(use_pp=step.use_pp, scheduler_config=SimpleNamespace(async_scheduling=step.async_scheduling),
                 prev_step_scheduled_req_ids=set(step.previous), use_v2_model_runner=step.use_v2_model_runner)
    return SimpleNamespace(**{name: value for name, value in every.items() if name in reads})


def reads_of(*sides: Side) -> tuple[str, ...]:
    """The scheduler attributes the sides' releases have, each side's `scheduler_reads` (drift
    compares an older release's with the installed one's); a candidate naming none adds none."""
    found = set()
    for side in sides:
        reads = getattr(side.factory, "scheduler_reads", ())
        found.update(reads() if callable(reads) else reads)  # vLLM's own: the installed release's
    return tuple(name for name in READS if name in found) or READS


def inputs_of(step: ScheduledStep, dropped: tuple[tuple[str, str], ...] = (), reads: tuple[str, ...] = READS) -> Inputs:
    """The step's arguments on stand-ins, every SHARED_EMPTY request given one empty blocks
    object; `dropped`: (table, request id) entries left out; `reads`: the scheduler's attributes."""
    num_groups = next((len(r.blocks) for r in step.requests if r.blocks != SHARED_EMPTY), 1)
    shared = StandInBlocks(((),) * num_groups)
    requests = [StandInRequest(r) for r in step.requests]
    split = len(requests) - step.resumed
    tables = {
        "num_scheduled_tokens": {r.request_id: r.scheduled for r in step.requests},
        "spec_decode_tokens": {r.request_id: list(r.drafts) for r in step.requests if r.drafts},
        "req_to_new_blocks": {r.request_id: shared if r.blocks == SHARED_EMPTY else StandInBlocks(r.blocks)
                              for r in step.requests},
    }
    for table, request_id in dropped:
        tables[table].pop(request_id, None)
    return Inputs(scheduler_of(step, reads), requests[:split], requests[split:], **tables)


def outcome(side: Side, inputs: Inputs):
    """The side's fields, or the error it raised (type name and message): the contract's
    refusal is `InvalidSchedulerInput`, anything else differs from it."""
    try:
        return side.factory().make(*inputs.arguments())
    except Exception as error:  # noqa: BLE001 - any other error is a difference the law names
        return ("raised", type(error).__name__, str(error))


def typed(value):
    """`value` with the type of every container and item spelled out (a tuple where upstream
    builds a list is a difference; so is a list where it sends a set)."""
    if isinstance(value, dict):
        return ("dict", [(typed(k), typed(v)) for k, v in value.items()])
    if isinstance(value, set):
        return ("set", [typed(v) for v in value])  # iteration order too: both insert in batch order
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [typed(v) for v in value])
    return (type(value).__name__, value)


def shared_objects(fields: dict) -> list[tuple[str, str]]:
    """The pairs of places in `fields` that hold the same list object (upstream builds every
    list anew: a fast path that shares one between requests would let a consumer's change to one
    request's block ids reach another's)."""
    places: dict[int, str] = {}
    pairs = []
    lists = [(f"new_token_ids[{i}]", v) for i, v in enumerate(fields["new_token_ids"])]
    lists += [(f"all_token_ids[{k!r}]", v) for k, v in fields.get("all_token_ids", {}).items()]
    for i, groups in enumerate(fields["new_block_ids"]):
        lists += [(f"new_block_ids[{i}][{g}]", v) for g, v in enumerate(groups or ())]
    for place, value in lists:
        if id(value) in places:
            pairs.append((places[id(value)], place))
        places[id(value)] = place
    return pairs


def assert_same_fields(expected_out, actual_out, expected: Side, actual: Side, inputs: Inputs, what: str) -> None:
    if isinstance(expected_out, tuple) or isinstance(actual_out, tuple):
        assert expected_out == actual_out, (f"{what}: {actual.label} gave {str(actual_out)[:300]}, "
                                            f"{expected.label} gave {str(expected_out)[:300]}")
        return
    assert sorted(actual_out) == sorted(expected_out), (
        f"{what}: {actual.label} returned fields {sorted(actual_out)}, {expected.label} {sorted(expected_out)}")
    for name in expected_out:
        assert typed(actual_out[name]) == typed(expected_out[name]), (
            f"{what}: {name} differs: {actual.label} {actual_out[name]!r}, {expected.label} {expected_out[name]!r}")
    assert shared_objects(actual_out) == shared_objects(expected_out), (
        f"{what}: {actual.label} shares list objects {shared_objects(actual_out)}, "
        f"{expected.label} {shared_objects(expected_out)}")
    tokens = {id(r._all_token_ids) for r in inputs.running + inputs.resumed if hasattr(r, "_all_token_ids")}
    kept = [k for k, v in actual_out.get("all_token_ids", {}).items() if id(v) in tokens]
    assert not kept, f"{what}: {actual.label} sends the request's own token list for {kept}, not a copy"


def snapshot(inputs: Inputs) -> tuple:
    """Everything an implementation could change in its inputs."""
    requests = [(r.request_id, list(r.all_token_ids), r.num_computed_tokens, r.num_output_tokens,
                 r.num_output_placeholders) for r in inputs.running + inputs.resumed]
    scheduler = inputs.scheduler
    return (requests, len(inputs.running), sorted(getattr(scheduler, "prev_step_scheduled_req_ids", ())),
            scheduler.use_pp, scheduler.scheduler_config.async_scheduling, getattr(scheduler, "use_v2_model_runner", None),
            inputs.num_scheduled_tokens, inputs.spec_decode_tokens,
            [(k, b.get_block_ids()) for k, b in inputs.req_to_new_blocks.items()])


def label(step: ScheduledStep) -> None:
    """The classes a `ci` draw must reach (tests/test_reach.py)."""
    previous = set(step.previous)
    split = len(step.requests) - step.resumed
    if step.use_pp and not step.async_scheduling:
        note("pipeline parallel without async scheduling (tokens sent)")
    if step.resumed:
        note("a resumed request")
    if any(r.request_id in previous for r in step.requests[split:]):
        note("a resumed request scheduled in the previous step")
    if any(r.request_id not in previous for r in step.requests[:split]):
        note("a running request not scheduled in the previous step")
    if any(r.blocks == SHARED_EMPTY for r in step.requests) and any(r.blocks != SHARED_EMPTY for r in step.requests):
        note("shared empty blocks beside new blocks")
    if any(r.blocks != SHARED_EMPTY and not any(r.blocks) for r in step.requests):
        note("an empty blocks object of its own")
    if any(r.blocks != SHARED_EMPTY and len(r.blocks) > 1 and any(r.blocks) for r in step.requests):
        note("new blocks in several KV cache groups")
    if any(r.placeholders for r in step.requests):
        note("async placeholders")
    if any(r.drafts for r in step.requests):
        note("speculative tokens")
    if step.use_v2_model_runner and any(r.request_id not in previous for r in step.requests):
        note("Model Runner V2, a request not scheduled in the previous step")


class CachedRequestDataChecks(Checks):
    hotpath = "cached_request_data"
    case_type = ScheduledStep
    error_type = BadStep
    boundaries = (
        "pipeline parallel without async scheduling (tokens sent)",
        "a resumed request",
        "a resumed request scheduled in the previous step",
        "a running request not scheduled in the previous step",
        "shared empty blocks beside new blocks",
        "an empty blocks object of its own",
        "new blocks in several KV cache groups",
        "async placeholders",
        "speculative tokens",
        "Model Runner V2, a request not scheduled in the previous step",
    )
    # Host code only: what runs on a GPU machine is the same Python.
    law_devices = {"equivalence": ("cpu",), "errors": ("cpu",), "conformance": ("cpu",), "drift": ("cpu",),
                   "patch": ("cpu",), "runner-change": ()}

    def cases(self):
        return self.draws.scheduled_steps()

    def error_cases(self):
        return self.draws.bad_steps()

    def agree(self, case: ScheduledStep, expected: Side, actual: Side, device, log: CaseLog) -> None:
        reads = reads_of(expected, actual)
        first_inputs, second_inputs = inputs_of(case, reads=reads), inputs_of(case, reads=reads)
        first, second = outcome(expected, first_inputs), outcome(actual, second_inputs)
        assert_same_fields(first, second, expected, actual, second_inputs, f"step of {len(case.requests)} requests")
        assert snapshot(second_inputs) == snapshot(inputs_of(case, reads=reads)), f"{actual.label} changed its inputs"

    def refuse_alike(self, case: BadStep, expected: Side, actual: Side, device, log: CaseLog) -> None:
        reads = reads_of(expected, actual)
        first = outcome(expected, inputs_of(case.step, dropped=case.dropped, reads=reads))
        second_inputs = inputs_of(case.step, dropped=case.dropped, reads=reads)
        second = outcome(actual, second_inputs)
        resumed = {r.request_id for r in case.step.requests[len(case.step.requests) - case.step.resumed:]}
        if not isinstance(first, tuple) and {request_id for _, request_id in case.dropped} <= resumed:
            # from 0.34 resumed requests never reach the call: their entries are not read
            assert_same_fields(first, second, expected, actual, second_inputs, f"step without {case.dropped}")
            return
        assert isinstance(first, tuple), f"{expected.label} accepted a step with {case.dropped} left out"
        assert first == second, f"{actual.label} gave {str(second)[:300]}, {expected.label} refused: {first}"

    def patch_agrees(self, case: ScheduledStep, device, log: CaseLog) -> None:
        from vllm_hotpaths.cached_request_data import patch
        from vllm_hotpaths.testing.live import cached_request_data as live

        expected = live.call(live.upstream_method(), live.vllm_inputs(case))
        patch.install()
        try:
            actual = live.call(live.scheduler_class()._make_cached_request_data, live.vllm_inputs(case))
        finally:
            patch.uninstall()
        if actual != expected and isinstance(actual, list) and isinstance(expected, list):
            field = next(a for a, e in zip(actual, expected) if a != e)[0]
            actual, expected = dict(actual)[field], dict(expected)[field]
            raise AssertionError(f"the patched scheduler's {field} differs: {str(actual)[:300]}, upstream {str(expected)[:300]}")
        assert actual == expected, f"the patched scheduler gave {str(actual)[:400]}, upstream {str(expected)[:400]}"
