"""swap_states properties: candidate == frozen reference on the standalone batch and on vLLM's
own InputBatch, and reference == the installed vLLM's InputBatch.

A Hypothesis state machine adds requests (prompts up to max_model_len, outputs with async -1
placeholders, embedding prompts, allowed-token masks, generators, bad words, LoRA ids), removes
them (one, several, all; re-adds fill the holes), sets drafts, appends tokens, swaps rows
(equal and unequal active lengths, a row with itself, empty rows, rows out of range) and
condenses. After every operation the batches must agree under the oracle
(`vllm_hotpaths.testing.oracles.swap_states`); a refused call (a swap of an empty or out-of-range row, a
second condense in one step) must be refused the same way, before anything moved. The
operations run are the case: a failure writes them as a fixture.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule, run_state_machine_as_test

from vllm_hotpaths.testing import drift
from vllm_hotpaths.testing.cases import note
from strategies.swap_states import (Side, SwapProgram, SwapRun, UpstreamMethods, add_ops, programs_header,
                                    standalone, vllm_batch)
from properties import REGRESSIONS
from vllm_hotpaths import registry, vllm_env
from vllm_hotpaths.testing import fixtures, ledger
from vllm_hotpaths.swap_states import patch as swap_states_patch
from vllm_hotpaths.testing.oracles.swap_states import MASK, assert_same_on_device, differences, mask_rows_differing
from vllm_hotpaths.think_budget import Move

HOTPATH = registry.get("swap_states")

pytestmark = pytest.mark.hotpath("swap_states")


class Equivalence:
    """Second side (candidate) == first side (reference) after every operation."""

    def __init__(self, device: str) -> None:
        self.device = device

    def before(self, run: SwapRun, op: tuple) -> None:
        pass

    def finish(self, run: SwapRun) -> None:
        """What the model runner uploads, compared on the device (also at every step's end)."""
        if self.device != "cpu":
            expected, actual = run.sides
            assert_same_on_device(expected.batch, actual.batch, self.device)

    def after(self, run: SwapRun, op: tuple, outcome: tuple) -> None:
        (expected, actual) = run.sides
        status, detail = outcome
        if status == "refused":
            want, got = detail
            assert got == want, f"op {op}: outcome {got!r}, expected {want!r}"
            note(f"{op[0]} refused")
        found = differences(expected.batch, actual.batch, expected.lists, actual.lists)
        assert not found, f"after op {op}: {found}"
        if op[0] == "end_step":
            self.finish(run)


class MaskCase:
    """What the ledger's swap_states entries look at: the operation about to run; whether it swaps
    two rows with different allowed masks; whether it adds a request without allowed ids to a row
    that holds no request but still a mask (only vLLM's condense leaves one: removal clears it)."""

    def __init__(self, op: tuple, swaps_different_masks: bool, unmasked_add_to_stale_row: bool) -> None:
        self.op = op
        self.swaps_different_masks = swaps_different_masks
        self.unmasked_add_to_stale_row = unmasked_add_to_stale_row


class Conformance:
    """Second side (the installed vLLM's InputBatch and its own methods) == first side (reference
    on the standalone batch). The ledger excuses exactly its allowed-mask divergences; the rows
    it excused then get the reference's mask, so later operations are judged on their own."""

    def __init__(self, case_log) -> None:
        self.case_log = case_log
        self.version = vllm_env.installed_version()
        self.case = None

    def finish(self, run: SwapRun) -> None:
        pass

    def before(self, run: SwapRun, op: tuple) -> None:
        reference, upstream = run.sides[0].batch, run.sides[1].batch
        mask = reference.allowed_token_ids_mask_cpu_tensor
        swaps = adds = False
        if op[0] == "swap" and mask is not None and _live(reference, op[1]) and _live(reference, op[2]):
            swaps = not torch.equal(mask[op[1]], mask[op[2]])
        if op[0] == "add" and mask is not None and op[7] == 0 and f"r{op[1]}" not in reference.req_id_to_index:
            holes = [] if run.condensed else reference.batch_update_builder._removed  # (a new step)
            row = min(holes) if holes else reference.num_reqs
            adds = row < reference.max_num_reqs and bool(upstream.allowed_token_ids_mask_cpu_tensor[row].any())
        self.case = MaskCase(op, swaps, adds)

    def after(self, run: SwapRun, op: tuple, outcome: tuple) -> None:
        reference, upstream = run.sides[0].batch, run.sides[1].batch
        found = differences(reference, upstream, run.sides[0].lists, run.sides[1].lists)
        mask_difference = found.pop(MASK, None)
        assert not found, f"after op {op}: vLLM {self.version} differs from the reference: {found}"

        def compare():
            assert mask_difference is None, f"after op {op}: allowed-token mask {mask_difference}"

        entry = ledger.check_conformance("swap_states", self.version, self.case, compare)
        if entry is not None:
            self.case_log.excuse(entry)
            note(f"excused: {entry.link}")
            for row in mask_rows_differing(reference, upstream):
                upstream.allowed_token_ids_mask_cpu_tensor[row] = reference.allowed_token_ids_mask_cpu_tensor[row]


def _live(batch, row) -> bool:
    return 0 <= row < len(batch._req_ids) and batch._req_ids[row] is not None


def machine(make_sides, checker, case_log, valid_only: bool = False):
    class SwapStatesMachine(RuleBasedStateMachine):
        @initialize(header=programs_header(), data=st.data(), requests=st.integers(1, 6))
        def start(self, header, data, requests):
            self.header = header
            self.adds = add_ops(header)
            self.ops: list[tuple] = []
            program = SwapProgram(**header, ops=())
            case_log.record(program)
            self.run = SwapRun(program, make_sides(program), valid_only)
            # vLLM allocates the allowed-token mask on first use: half the runs start without it.
            late_mask = data.draw(st.booleans(), label="mask allocated later")
            for _ in range(min(requests, header["max_num_reqs"])):  # swarm testing may switch `add` off
                op = data.draw(self.adds, label="add")
                self.do(op[:7] + (0,) + op[8:] if late_mask else op)

        def teardown(self):
            if hasattr(self, "run"):
                checker.finish(self.run)

        def do(self, *op) -> None:
            if getattr(self, "stopped", False):
                return
            op = op[0] if len(op) == 1 and isinstance(op[0], tuple) else op
            self.ops.append(op)
            case_log.last = SwapProgram(**self.header, ops=tuple(self.ops))
            checker.before(self.run, op)
            try:
                checker.after(self.run, op, self.run.apply(op))
            except AssertionError as failure:  # a drift check goes on past a difference it names
                if not case_log.tolerates(failure):
                    raise
                self.stopped = True

        def _request(self, data) -> int:
            """Mostly a live request (else any id, which the run skips when it is not live)."""
            live = sorted(int(i[1:]) for i in self.run.lead.req_id_to_index)
            anyone = st.integers(0, 2 * self.header["max_num_reqs"])
            return data.draw(st.one_of(*[st.sampled_from(live)] * 4, anyone) if live else anyone, label="request")

        @rule(data=st.data())
        def add(self, data):
            """Mostly a new id (a live one is skipped); removed ids come back as re-adds."""
            op = data.draw(self.adds, label="add")
            live = self.run.lead.req_id_to_index
            free = [n for n in range(2 * self.header["max_num_reqs"] + 1) if f"r{n}" not in live]
            if free and data.draw(st.integers(0, 4), label="new id") > 0:
                op = (op[0], data.draw(st.sampled_from(free), label="id"), *op[2:])
            self.do(op)

        @rule(data=st.data(), everything=st.integers(0, 7))
        def remove(self, data, everything):
            if everything == 0:
                self.do("remove_all",)
            else:
                self.do("remove", self._request(data))

        @rule(data=st.data(), drafts=st.lists(st.integers(0, 23), min_size=1, max_size=4).map(tuple))
        def drafts(self, data, drafts):
            self.do("drafts", self._request(data), tuple(d % self.header["vocab_size"] for d in drafts))

        @rule(data=st.data(), token=st.integers(-1, 23))
        def token(self, data, token):
            self.do("token", self._request(data), min(token, self.header["vocab_size"] - 1))

        @rule(data=st.data())
        def swap(self, data):
            ids = self.run.lead._req_ids
            live = [r for r, i in enumerate(ids) if i is not None]
            holes = [r for r, i in enumerate(ids) if i is None]
            choices = [st.sampled_from(live)] * 6 if live else []
            choices += [st.sampled_from(holes)] if holes else []
            index = st.one_of(*choices, st.integers(-2, self.header["max_num_reqs"] + 1))
            self.do("swap", data.draw(index, label="i1"), data.draw(index, label="i2"))

        @rule(data=st.data(), removals=st.integers(0, 2), additions=st.integers(0, 2), swaps=st.integers(0, 2))
        def turn(self, data, removals, additions, swaps):
            """One scheduler step in upstream's order: removals, additions (filling the holes),
            condense, reordering swaps, then the step's moves are handed on."""
            for _ in range(removals):
                self.remove(data, 1)
            for _ in range(additions):
                self.add(data)
            self.condense()
            for _ in range(swaps):
                self.swap(data)
            self.end_step()

        @rule()
        def condense(self):
            self.do("condense",)

        @rule()
        def end_step(self):
            self.do("end_step",)

    return SwapStatesMachine


def run_machine(machine_class) -> None:
    """Runs of up to 100 operations (Hypothesis' default is 50; the planted bugs that need a
    removal, a condense and a re-add in a later step were missed by some 50-operation seeds)."""
    run_state_machine_as_test(machine_class, settings=settings(stateful_step_count=100))


def replay(program: SwapProgram, make_sides, checker, valid_only: bool = False) -> None:
    run = SwapRun(program, make_sides(program), valid_only)
    for op in program.ops:
        checker.before(run, op)
        checker.after(run, op, run.apply(op))
    checker.finish(run)


def _candidate_sides(candidate, on_vllm: bool):
    _, factory, version = candidate
    reference = HOTPATH.reference(version)

    def make_sides(program):
        if on_vllm:
            from vllm_hotpaths.testing.live.swap_states import move_directions

            return [Side(standalone(program, vllm_env.installed_version()), reference(Move)),
                    Side(vllm_batch(program), factory(move_directions()), vllm=True)]
        return [Side(standalone(program), reference(Move)), Side(standalone(program), factory(Move))]

    return make_sides


def _upstream_sides(case_log):
    version = vllm_env.installed_version()
    reference = drift.conformance_reference("swap_states", case_log)

    def make_sides(program):
        return [Side(standalone(program, version), reference(Move)),
                Side(vllm_batch(program), UpstreamMethods(), vllm=True)]

    return make_sides


FIXTURES = fixtures.load(REGRESSIONS, "swap_states", SwapProgram)
FIXTURE_IDS = [path.stem for path, _ in FIXTURES]


@pytest.mark.check("equivalence")
def test_candidate_matches_reference(candidate, device, case_log):
    run_machine(machine(_candidate_sides(candidate, False), Equivalence(device), case_log))


@pytest.mark.check("equivalence")
@pytest.mark.parametrize("program", [p for _, p in FIXTURES], ids=FIXTURE_IDS)
def test_candidate_matches_reference_on_fixtures(candidate, device, program, case_log):
    case_log.record(program)
    replay(program, _candidate_sides(candidate, False), Equivalence(device))


@pytest.mark.needs_vllm
@pytest.mark.devices("cpu")
@pytest.mark.check("equivalence")
def test_candidate_on_vllm_input_batch(candidate, device, case_log):
    """The candidate runs on vLLM's own InputBatch (what the plugin installs) as on the standalone."""
    run_machine(machine(_candidate_sides(candidate, True), Equivalence(device), case_log))


class UnpatchedMethods:
    """vLLM's own `swap_states` / `condense`, as they were before the plugin's patch."""

    @staticmethod
    def swap_states(batch, i1, i2):
        swap_states_patch.UPSTREAM["swap_states"](batch, i1, i2)

    @staticmethod
    def condense(batch):
        swap_states_patch.UPSTREAM["condense"](batch)


@pytest.mark.needs_vllm
@pytest.mark.devices("cpu")
@pytest.mark.check("equivalence")
@pytest.mark.implementation("plugin patch")
@pytest.mark.plugin_patch
def test_patched_vllm_matches_upstream(device, case_log):
    """vLLM's InputBatch with the plugin's patch installed == the same batch with upstream's
    methods, field by field; the ledger's upstream mask bugs (which the patch does not copy) are
    the only differences allowed, as in conformance."""
    swap_states_patch.install()
    try:
        def sides(program):
            return [Side(vllm_batch(program), UpstreamMethods(), vllm=True),  # patched
                    Side(vllm_batch(program), UnpatchedMethods(), vllm=True)]

        run_machine(machine(sides, Conformance(case_log), case_log, valid_only=True))
    finally:
        swap_states_patch.uninstall()


@pytest.mark.needs_vllm
@pytest.mark.check("conformance")
def test_reference_matches_installed_vllm(case_log):
    run_machine(machine(_upstream_sides(case_log), Conformance(case_log), case_log, valid_only=True))


@pytest.mark.needs_vllm
@pytest.mark.check("conformance")
@pytest.mark.parametrize("program", [p for _, p in FIXTURES], ids=FIXTURE_IDS)
def test_reference_matches_installed_vllm_on_fixtures(program, case_log):
    case_log.record(program)
    replay(program, _upstream_sides(case_log), Conformance(case_log), valid_only=True)


@pytest.mark.needs_vllm
@pytest.mark.check("drift")
def test_older_reference_against_installed_vllm(case_log, request):
    """The older reference against the installed vLLM's InputBatch: every difference must be a
    ledger change (vllm_hotpaths/testing/drift.py)."""
    drift.against_older_reference("swap_states", case_log, request,
                                  lambda: test_reference_matches_installed_vllm(case_log))
