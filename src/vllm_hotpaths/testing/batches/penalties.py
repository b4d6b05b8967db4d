"""A standalone batch state driven through vLLM 0.22.0's own transitions.

It holds the slice of `InputBatch` that the sampler hot paths read, under the same attribute
names (`token_ids_cpu`, `num_prompt_tokens`, `num_tokens_no_spec`, `req_output_token_ids`,
`spec_token_ids`, the penalty arrays), and moves it the way the model runner does: requests
added with prompt and output, sampled tokens appended, async `-1` placeholders and their later
repair (trailing-run replacement that can shrink the list), optimistic placeholder extension and
trim, KV-load discards, spec drafts, swaps, removals with condense.

Like upstream, `token_ids_cpu` is written by bookkeeping only and never repaired: under async
scheduling it keeps `-1` where the lists already hold real ids, and after a trim it keeps stale
entries. That disagreement between lists and storage is real upstream state, so it is modelled.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from vllm_hotpaths.penalties.reference import repair_row
from vllm_hotpaths.tracked_list import TrackedTokenList


class TokenBatch:
    def __init__(self, max_num_reqs: int, max_model_len: int, vocab_size: int) -> None:
        self.max_num_reqs = max_num_reqs
        self.max_model_len = max_model_len
        self.vocab_size = vocab_size
        self.token_ids_cpu = np.zeros((max_num_reqs, max_model_len), dtype=np.int32)
        self.num_prompt_tokens = np.zeros(max_num_reqs, dtype=np.int32)
        self.num_tokens_no_spec = np.zeros(max_num_reqs, dtype=np.int32)
        self.presence_penalties_cpu = np.zeros(max_num_reqs, dtype=np.float32)
        self.frequency_penalties_cpu = np.zeros(max_num_reqs, dtype=np.float32)
        self.repetition_penalties_cpu = np.ones(max_num_reqs, dtype=np.float32)
        self.req_output_token_ids: list[list[int]] = []
        self.spec_token_ids: list[list[int]] = []
        # Async scheduling: the ids sampled last step, per row (upstream keeps them on the GPU).
        self.pending: list[list[int] | None] = []

    @property
    def num_reqs(self) -> int:
        return len(self.req_output_token_ids)

    # -- requests -------------------------------------------------------------------------
    def add_request(
        self,
        prompt: Sequence[int],
        output: Sequence[int],
        penalties: tuple[float, float, float] = (0.0, 0.0, 1.0),
        tracked: bool = True,
    ) -> int:
        """Append a request in the next free row (rows stay dense: removals condense)."""
        r = self.num_reqs
        if r >= self.max_num_reqs:
            raise ValueError(f"batch is full ({self.max_num_reqs} requests)")
        p, n = len(prompt), len(output)
        if p + n > self.max_model_len:
            raise ValueError(f"prompt + output ({p + n}) exceeds max_model_len {self.max_model_len}")
        out = TrackedTokenList(output) if tracked else list(output)
        self.req_output_token_ids.append(out)
        self.spec_token_ids.append([])
        self.pending.append(None)
        self.token_ids_cpu[r, :p] = prompt
        self.token_ids_cpu[r, p : p + n] = output
        self.num_prompt_tokens[r] = p
        self.num_tokens_no_spec[r] = p + n
        (self.presence_penalties_cpu[r], self.frequency_penalties_cpu[r],
         self.repetition_penalties_cpu[r]) = penalties
        return r

    def replace_request(
        self,
        row: int,
        prompt: Sequence[int],
        output: Sequence[int],
        penalties: tuple[float, float, float] = (0.0, 0.0, 1.0),
        tracked: bool = True,
    ) -> bool:
        """A new request in the freed row `row` (vLLM's `add_request` reuses the lowest index
        removed in the same update); False, and nothing changed, if it does not fit."""
        p, n = len(prompt), len(output)
        if p + n > self.max_model_len:
            return False
        self.req_output_token_ids[row] = TrackedTokenList(output) if tracked else list(output)
        self.spec_token_ids[row] = []
        self.pending[row] = None
        self.token_ids_cpu[row, :p] = prompt
        self.token_ids_cpu[row, p : p + n] = output
        self.num_prompt_tokens[row] = p
        self.num_tokens_no_spec[row] = p + n
        (self.presence_penalties_cpu[row], self.frequency_penalties_cpu[row],
         self.repetition_penalties_cpu[row]) = penalties
        return True

    def condense(self, freed: Sequence[int]) -> list[tuple[int, int]]:
        """vLLM's `InputBatch.condense` after removals that left the rows `freed` empty: each freed
        row, lowest first, takes the last occupied row, until none lies past it; the batch then
        ends at its last occupied row. Returns the moves (from, to)."""
        holes, empty = sorted(set(freed)), set(freed)
        last, moves = self.num_reqs - 1, []
        for hole in holes:
            while last in empty and last > hole:
                last -= 1
            if last <= hole:
                break
            self.swap(hole, last)  # the freed row's leftovers go past the end, then are dropped
            empty.discard(hole)
            empty.add(last)
            moves.append((last, hole))
            last -= 1
        for _ in range(len(holes)):
            for name in self._ROW_LISTS:
                getattr(self, name).pop()
        return moves

    _ROW_ARRAYS = (
        "token_ids_cpu", "num_prompt_tokens", "num_tokens_no_spec",
        "presence_penalties_cpu", "frequency_penalties_cpu", "repetition_penalties_cpu",
    )
    _ROW_LISTS = ("req_output_token_ids", "spec_token_ids", "pending")

    def swap(self, i: int, j: int) -> None:
        """Swap two rows; list objects move with their request."""
        for name in self._ROW_ARRAYS:
            a = getattr(self, name)
            a[[i, j]] = a[[j, i]]
        for name in self._ROW_LISTS:
            lst = getattr(self, name)
            lst[i], lst[j] = lst[j], lst[i]

    def remove_request(self, row: int) -> None:
        """Remove a request, then condense: the last row moves into the hole."""
        last = self.num_reqs - 1
        if row != last:
            self.swap(row, last)
        for name in self._ROW_LISTS:
            getattr(self, name).pop()

    # -- steps ----------------------------------------------------------------------------
    def _room(self, r: int, k: int) -> bool:
        return int(self.num_tokens_no_spec[r]) + k <= self.max_model_len

    def _bookkeep(self, r: int, ids: Sequence[int]) -> None:
        nts = int(self.num_tokens_no_spec[r])
        self.token_ids_cpu[r, nts : nts + len(ids)] = ids
        self.num_tokens_no_spec[r] = nts + len(ids)
        self.req_output_token_ids[r].extend(ids)

    def sample(self, r: int, token: int) -> None:
        """Synchronous scheduling: the sampled id is known on the host at once."""
        if self._room(r, 1):
            self._bookkeep(r, [token])

    def sample_async(self, r: int, sampled: Sequence[int]) -> None:
        """Async scheduling: the host records a -1 placeholder; the real ids stay 'on the GPU'."""
        if self._room(r, 1):
            self._bookkeep(r, [-1])
            self.pending[r] = list(sampled)

    def repair(self, r: int) -> None:
        """0.22's `update_async_output_token_ids` for one row: replace the trailing -1 run."""
        new_ids, self.pending[r] = self.pending[r], None
        if new_ids is not None:
            repair_row(self.req_output_token_ids[r], new_ids)

    def drop_pending(self, r: int) -> None:
        """The request was not in the previous step's batch: its placeholder stays unrepaired."""
        self.pending[r] = None

    def set_spec(self, r: int, drafts: Sequence[int]) -> None:
        """`update_req_spec_token_ids`: drafts written after the committed tokens."""
        spec = self.spec_token_ids[r]
        spec.clear()
        if drafts and self._room(r, len(drafts)):
            nts = int(self.num_tokens_no_spec[r])
            self.token_ids_cpu[r, nts : nts + len(drafts)] = drafts
            spec.extend(drafts)

    def extend_optimistic(self, r: int, count: int) -> None:
        """Async spec decode (0.22 zero-bubble): assume every draft accepted, as -1 placeholders."""
        self.req_output_token_ids[r].extend([-1] * count)

    def trim(self, r: int, keep: int) -> None:
        """Scheduler's count is lower (KV-load discard, optimistic over-extension): drop the tail."""
        out = self.req_output_token_ids[r]
        if keep < len(out):
            del out[keep:]
            self.num_tokens_no_spec[r] = int(self.num_prompt_tokens[r]) + keep

    # -- sampler inputs -------------------------------------------------------------------
    def combined_rows(self) -> list[list[int]]:
        """Bonus-token pass rows: `[*out, *spec]` as new lists where there are drafts."""
        return [[*out, *spec] if spec else out
                for out, spec in zip(self.req_output_token_ids, self.spec_token_ids)]

    def prompt_tokens(self, device: torch.device | str = "cpu") -> torch.Tensor:
        """`_make_prompt_token_ids_cpu_tensor`: prompt ids as int64, padded with the vocab size."""
        b = self.num_reqs
        max_p = int(self.num_prompt_tokens[:b].max()) if b else 0
        prompt = self.token_ids_cpu[:b, :max_p].astype(np.int64)
        for i in range(b):
            prompt[i, self.num_prompt_tokens[i]:] = self.vocab_size
        return torch.from_numpy(prompt).to(device)

    def penalty_tensors(self, device: torch.device | str = "cpu") -> tuple[torch.Tensor, ...]:
        b = self.num_reqs
        return tuple(
            torch.from_numpy(a[:b].copy()).to(device)
            for a in (self.presence_penalties_cpu, self.frequency_penalties_cpu,
                      self.repetition_penalties_cpu)
        )
