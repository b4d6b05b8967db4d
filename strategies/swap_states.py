"""swap_states cases: batches driven through vLLM's add / remove / drafts / tokens / swap /
condense, recorded as a replayable `SwapProgram`.

The machine in `properties/test_swap_states.py` draws one operation at a time; `SwapRun.apply`
runs it on every side (a batch and the implementation that swaps and condenses it). Requests are
built from their op by `make_request`, so a program is plain data and replays exactly.

Operations:
  ("add", n, seed, prompt_len, output_len, async_tail, prompt_kind, allowed, generator,
   bad_words, lora, sampling)   request "r{n}" (skipped while r{n} is live) in the lowest hole or
                                the next row (after a condense: in the next step); prompt_kind
                                0: token ids, 1: embeddings only, 2: mixed; the last
                                `async_tail` output ids are -1 placeholders; `allowed` > 0:
                                that many allowed ids (a mask row)
  ("remove", n)                 request r{n} leaves (ends the step first if this step's removals
                                were already read, as the next step would)
  ("remove_all",)               every request leaves
  ("drafts", n, drafts)         r{n}'s speculative drafts (cut to fit max_model_len)
  ("token", n, token)           r{n} appends a sampled id (-1: async placeholder); its drafts
                                are used up
  ("swap", i1, i2)              the hot path; rows may be empty or out of range: a clear error
  ("condense",)                 the hot path; a second one in a step must be refused clearly
  ("end_step",)                 condense (unless this step did), then the step's removals and
                                moves are handed on
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch
from hypothesis import strategies as st

from vllm_hotpaths.testing.cases import note
from vllm_hotpaths.swap_states import CondensedAlready, InvalidRow, check_swap_rows
from vllm_hotpaths.testing.live import swap_states as live
from vllm_hotpaths.testing.oracles.swap_states import Lists
from vllm_hotpaths.testing.batches.swap_states import BatchState, Request, book_token


@dataclass(frozen=True)
class SwapProgram:
    max_num_reqs: int
    max_model_len: int
    vocab_size: int
    block_sizes: tuple[int, ...]
    pooling: bool
    ops: tuple[tuple, ...]


SAMPLINGS = (  # (temperature, top_p, top_k, frequency, presence, repetition)
    (1.0, 1.0, 0, 0.0, 0.0, 1.0), (0.0, 1.0, 0, 0.0, 0.0, 1.0), (0.7, 0.9, 5, 0.5, -0.25, 1.2),
    (0.05, 0.5, 1, -2.0, 2.0, 0.5), (1.3, 0.999, 100000, 1.5, 0.1, 1.0000001),
)
HIDDEN = 3  # width of the prompt-embedding rows


def make_request(program: SwapProgram, op: tuple) -> Request:
    _, n, seed, prompt_len, output_len, async_tail, prompt_kind, allowed, generator, bad_words, lora, sampling = op
    rng = np.random.default_rng(seed)
    v = program.vocab_size
    prompt = rng.integers(0, v, prompt_len).tolist()
    output = rng.integers(0, v, output_len).tolist()
    output[len(output) - async_tail:] = [-1] * async_tail
    num_tokens = prompt_len + output_len
    block_ids = tuple(rng.integers(1, 1000, -(-num_tokens // b)).tolist() for b in program.block_sizes)
    temperature, top_p, top_k, frequency, presence, repetition = SAMPLINGS[sampling % len(SAMPLINGS)]
    return Request(
        req_id=f"r{n}",
        prompt_token_ids=None if prompt_kind == 1 else prompt,
        output_token_ids=output,
        num_computed_tokens=int(rng.integers(0, num_tokens + 1)),
        block_ids=block_ids,
        prompt_embeds=torch.from_numpy(rng.standard_normal((prompt_len, HIDDEN), dtype=np.float32))
        if prompt_kind else None,
        prompt_is_token_ids=(rng.random(prompt_len) < 0.5).tolist() if prompt_kind == 2 else None,
        pooling=program.pooling,
        temperature=temperature, top_p=top_p, top_k=top_k, frequency_penalty=frequency,
        presence_penalty=presence, repetition_penalty=repetition,
        generator=torch.Generator().manual_seed(seed) if generator else None,
        allowed_token_ids=sorted(set(rng.integers(0, v, allowed).tolist())) if allowed else None,
        bad_words_token_ids=[rng.integers(0, v, 1 + k).tolist() for k in range(bad_words)] or None,
        lora_id=lora,
    )


class UpstreamMethods:
    """The batch's own `swap_states` / `condense` (vLLM's, on vLLM's InputBatch)."""

    @staticmethod
    def swap_states(batch, i1, i2):
        batch.swap_states(i1, i2)

    @staticmethod
    def condense(batch):
        batch.condense()


@dataclass
class Side:
    """One batch and the implementation that swaps and condenses it."""

    batch: object
    impl: object
    vllm: bool = False  # vLLM's InputBatch (fed through `live`) or the standalone BatchState
    lists: Lists = dataclasses.field(default_factory=Lists)

    def add(self, request: Request) -> None:
        own = dataclasses.replace(request, output_token_ids=list(request.output_token_ids))
        live.add(self.batch, own) if self.vllm else self.batch.add_request(own)
        self.lists.record_add(self.batch, own.req_id, own.output_token_ids)

    def drafts(self, req_id: str, drafts: list[int]) -> None:
        if self.vllm:
            live.update_spec(self.batch, req_id, drafts)
        else:
            self.batch.update_req_spec_token_ids(req_id, drafts)

    def token(self, req_id: str, token: int) -> None:
        """The sampled id is booked; the row's drafts are used up (the next step sets new ones
        before anything swaps or condenses, so no unwritten column is ever inside a row's prefix)."""
        book_token(self.batch, req_id, token)
        self.drafts(req_id, [])

    def end_step(self) -> None:
        self.batch.batch_update_builder.reset()


def standalone(program: SwapProgram, vllm_version: str = "0.22.0") -> BatchState:
    """The standalone batch, adding and removing requests as `vllm_version`'s InputBatch does."""
    return BatchState(program.max_num_reqs, program.max_model_len, program.vocab_size,
                      program.block_sizes, program.pooling, vllm_version)


def vllm_batch(program: SwapProgram):
    return live.live_batch(program.max_num_reqs, program.max_model_len, program.vocab_size,
                           program.block_sizes, program.pooling)


class SwapRun:
    """Applies operations to every side; the first side's batch decides what is valid.

    With `valid_only` (a side that is vLLM's own InputBatch, which would fail halfway through),
    swaps of empty or out-of-range rows and a second condense in one step are skipped; otherwise
    every side runs them and must refuse them."""

    def __init__(self, program: SwapProgram, sides: list[Side], valid_only: bool = False) -> None:
        self.program, self.sides, self.valid_only = program, sides, valid_only
        self.condensed = False  # this step has condensed: its removals are settled

    @property
    def lead(self):
        return self.sides[0].batch

    def apply(self, op: tuple) -> tuple[str, object]:
        """Run `op` on every side. Returns ("ran", None), ("skipped", reason) or, for a call
        that every side refused, ("refused", [error per side])."""
        kind, lead = op[0], self.lead
        if kind == "add" and self.condensed:
            self.apply(("end_step",))  # vLLM adds before it condenses; after, only a new step adds
        if kind == "add":
            request = make_request(self.program, op)
            holes = lead.batch_update_builder._removed
            index = min(holes) if holes else lead.num_reqs
            if request.req_id in lead.req_id_to_index or index >= self.program.max_num_reqs:
                return "skipped", "live id or full batch"
            for side in self.sides:
                side.add(request)
        elif kind in ("remove", "remove_all"):
            ids = [f"r{op[1]}"] if kind == "remove" else [i for i in lead._req_ids if i is not None]
            ids = [i for i in ids if i in lead.req_id_to_index]
            if not ids:
                return "skipped", "not live"
            if lead.batch_update_builder._is_removed_sorted:
                self.apply(("end_step",))  # removals come first in a step
            for side in self.sides:
                for req_id in ids:
                    side.batch.remove_request(req_id)
        elif kind in ("drafts", "token"):
            req_id = f"r{op[1]}"
            if req_id not in lead.req_id_to_index:
                return "skipped", "not live"
            row = lead.req_id_to_index[req_id]
            room = self.program.max_model_len - int(lead.num_tokens_no_spec[row])
            if kind == "drafts":
                drafts = list(op[2][:room])
                for side in self.sides:
                    side.drafts(req_id, drafts)
            else:
                if room - len(lead.spec_token_ids[row]) < 1:
                    return "skipped", "row is full"
                for side in self.sides:
                    side.token(req_id, op[2])
        elif kind == "swap":
            if self.valid_only:
                try:
                    check_swap_rows(lead, op[1], op[2])
                except InvalidRow:
                    return "skipped", "not two live rows"
            if op[1] == op[2]:
                note("swap of a row with itself")
            return self._refusable(lambda side: side.impl.swap_states(side.batch, op[1], op[2]))
        elif kind == "condense":
            if self.valid_only and self.condensed:
                return "skipped", "condensed already"
            outcome = self._refusable(lambda side: side.impl.condense(side.batch))
            self.condensed = True
            return outcome
        elif kind == "end_step":
            if not self.condensed:
                for side in self.sides:
                    side.impl.condense(side.batch)
            for side in self.sides:
                side.end_step()
            self.condensed = False
        else:
            raise ValueError(f"unknown swap_states op {op!r}")
        return "ran", None

    def _refusable(self, call) -> tuple[str, object]:
        outcomes = []
        for side in self.sides:
            try:
                call(side)
                outcomes.append(None)
            except (InvalidRow, CondensedAlready) as err:
                outcomes.append(f"{type(err).__name__}: {err}")
        if all(o is None for o in outcomes):
            return "ran", None
        return "refused", outcomes


# -- strategies -------------------------------------------------------------------------------
@st.composite
def programs_header(draw, pooling=None) -> dict:
    max_model_len = draw(st.one_of(st.integers(9, 48), st.integers(9, 48), st.integers(1, 8)))
    return dict(
        max_num_reqs=draw(st.integers(1, 6)),
        max_model_len=max_model_len,
        vocab_size=draw(st.integers(2, 24)),
        block_sizes=tuple(draw(st.lists(st.sampled_from((1, 2, 4, 16)), min_size=1, max_size=2))),
        pooling=draw(st.sampled_from((False, False, False, True))) if pooling is None else pooling,
    )


def add_ops(header: dict) -> st.SearchStrategy:
    """An ("add", ...) op fitting the header: lengths up to max_model_len."""
    mml, v = header["max_model_len"], header["vocab_size"]

    @st.composite
    def draw_add(draw):
        # Mostly room left for drafts and tokens; now and then a row at max_model_len.
        at_limit = draw(st.integers(0, 5)) == 0
        prompt_len = mml if at_limit else draw(st.integers(1, max(1, mml // 2)))
        output_len = mml - prompt_len if at_limit else draw(st.integers(0, (mml - prompt_len) // 2))
        return ("add", draw(st.integers(0, 2 * header["max_num_reqs"])), draw(st.integers(0, 2**16)),
                prompt_len, output_len, draw(st.integers(0, output_len)),
                draw(st.sampled_from((0, 0, 1, 2))), draw(st.one_of(st.just(0), st.integers(1, v))),
                draw(st.booleans()), draw(st.integers(0, 2)), draw(st.sampled_from((0, 0, 1, 3))),
                draw(st.integers(0, len(SAMPLINGS) - 1)))

    return draw_add()
