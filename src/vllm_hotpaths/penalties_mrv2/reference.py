"""Frozen reference of Model Runner V2's penalties, vLLM 0.22.0 (unchanged in 0.33.0).

The state is plain per slot: the prompt's token set, the output counts (resumed outputs at
admission, then every committed token) and the three penalties. A step counts each row's
drafts on the host and penalizes every row in one Triton kernel, whose lane arithmetic is
upstream's: on CPU it runs in Triton's interpreter (IEEE division, no fusion), on CUDA Triton
compiles `1.0 / scale` and `x -= frequency * count` as it does upstream's kernel (approximate
division, one fused multiply-add). The Model Runner V2 sampler reference (`logits_copy`) uses
the same kernel for its penalties step.
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from vllm_hotpaths.penalties_mrv2 import InvalidPenaltiesInput, uses_penalties

BLOCK = 1024


@triton.jit
def _penalties_kernel(logits_ptr, counts_ptr, prompt_ptr, rep_ptr, freq_ptr, pres_ptr,
                      vocab_size: tl.constexpr, BLOCK: tl.constexpr):
    # vocab_size is a compile-time constant (a runtime argument upstream, the same lane
    # arithmetic): Triton 3.6's interpreter cannot loop to a runtime bound under NumPy >= 2.5.
    row = tl.program_id(0)
    rep = tl.load(rep_ptr + row)
    freq = tl.load(freq_ptr + row)
    pres = tl.load(pres_ptr + row)
    if rep == 1.0 and freq == 0.0 and pres == 0.0:
        return
    for first in range(0, vocab_size, BLOCK):
        lanes = first + tl.arange(0, BLOCK)
        inside = lanes < vocab_size
        x = tl.load(logits_ptr + row * vocab_size + lanes, mask=inside)
        counts = tl.load(counts_ptr + row * vocab_size + lanes, mask=inside, other=0)
        seen = counts > 0
        if rep != 1.0:
            in_prompt = tl.load(prompt_ptr + row * vocab_size + lanes, mask=inside, other=0) != 0
            scale = tl.where(in_prompt | seen, rep, 1.0)
            x *= tl.where(x > 0, 1.0 / scale, scale)
        x -= freq * counts
        x -= pres * seen
        tl.store(logits_ptr + row * vocab_size + lanes, x, mask=inside)


def penalize_rows_(logits: torch.Tensor, counts: np.ndarray, prompt: np.ndarray, penalties,
                   **launch) -> torch.Tensor:
    """Penalize contiguous fp32 `logits` [n, V] in place: row i with `counts[i]` (int32 [n, V]),
    `prompt[i]` (nonzero: in the prompt; int8 [n, V]) and `penalties[i]` = (repetition,
    frequency, presence). `launch`: Triton launch options (compiled kernels only)."""
    n, vocab = logits.shape
    if n == 0:
        return logits
    columns = list(zip(*penalties))
    on = lambda values, dtype=torch.float32: torch.tensor(values, dtype=dtype, device=logits.device)  # noqa: E731
    _penalties_kernel[(n,)](logits, on(counts, torch.int32), on(prompt, torch.int8),
                            on(columns[0]), on(columns[1]), on(columns[2]), vocab, BLOCK=BLOCK, **launch)
    return logits


class _Slot:
    def __init__(self, prompt: np.ndarray, resumed: np.ndarray, penalties: tuple, vocab: int) -> None:
        self.prompt = np.zeros(vocab, dtype=bool)
        self.prompt[prompt] = True
        self.counts = np.bincount(resumed, minlength=vocab).astype(np.int64)
        self.penalties = tuple(float(np.float32(p)) for p in penalties)  # vLLM keeps them as fp32
        self.length = len(prompt) + len(resumed)


class SlotPenalties:
    """vLLM 0.16.0-0.33.0 Model Runner V2 penalties (the contract: `penalties_mrv2`)."""

    def __init__(self, vocab_size: int, max_num_reqs: int, max_model_len: int, device="cpu") -> None:
        if vocab_size < 1 or max_num_reqs < 1 or max_model_len < 1:
            raise InvalidPenaltiesInput(f"vocab_size, max_num_reqs and max_model_len must be >= 1, got "
                                        f"{vocab_size}, {max_num_reqs}, {max_model_len}")
        self.vocab_size, self.max_num_reqs, self.max_model_len = vocab_size, max_num_reqs, max_model_len
        self.device = torch.device(device)
        self.slots: dict[int, _Slot] = {}

    # -- the request table ------------------------------------------------------------------
    def add_request(self, slot: int, prompt, resumed, penalties) -> None:
        if not 0 <= slot < self.max_num_reqs:
            raise InvalidPenaltiesInput(f"slot {slot} is outside the table [0, {self.max_num_reqs})")
        if slot in self.slots:
            raise InvalidPenaltiesInput(f"slot {slot} is in use")
        if len(penalties) != 3:
            raise InvalidPenaltiesInput(f"penalties must be (repetition, frequency, presence), got {penalties!r}")
        prompt, resumed = self._ids(prompt, "prompt"), self._ids(resumed, "resumed outputs")
        if len(prompt) + len(resumed) > self.max_model_len:
            raise InvalidPenaltiesInput(f"{len(prompt) + len(resumed)} tokens exceed max_model_len {self.max_model_len}")
        self.slots[slot] = _Slot(prompt, resumed, tuple(penalties), self.vocab_size)

    def remove_request(self, slot: int) -> None:
        if self.slots.pop(slot, None) is None:
            raise InvalidPenaltiesInput(f"slot {slot} holds no request")

    def commit(self, slots, sampled) -> None:
        if len(slots) != len(sampled):
            raise InvalidPenaltiesInput(f"{len(slots)} slots but {len(sampled)} lists of sampled tokens")
        if len(set(slots)) != len(slots):
            raise InvalidPenaltiesInput(f"a slot appears twice in one step: {list(slots)}")
        checked = []
        for slot, tokens in zip(slots, sampled):
            state = self._held(slot)
            tokens = self._ids(tokens, f"tokens sampled for slot {slot}")
            if state.length + len(tokens) > self.max_model_len:
                raise InvalidPenaltiesInput(f"slot {slot} would pass max_model_len {self.max_model_len}")
            checked.append((state, tokens))
        for state, tokens in checked:
            np.add.at(state.counts, tokens, 1)
            state.length += len(tokens)

    # -- the sampler step ---------------------------------------------------------------------
    def apply_penalties(self, logits: torch.Tensor, rows, local_pos, input_ids) -> torch.Tensor:
        rows, local_pos, input_ids = self.check_step(logits, rows, local_pos, input_ids)
        states = [self.slots[int(s)] for s in rows]
        if not any(uses_penalties(s.penalties) for s in states):
            return logits  # upstream launches nothing
        n, vocab = len(rows), self.vocab_size
        counts = np.zeros((n, vocab), dtype=np.int32)
        prompt = np.zeros((n, vocab), dtype=np.int8)
        for i, state in enumerate(states):
            if not uses_penalties(state.penalties):
                continue
            counts[i] = state.counts
            drafts = input_ids[i - local_pos[i] + 1:i + 1]
            np.add.at(counts[i], drafts[drafts >= 0], 1)  # a -1 placeholder counts nothing
            prompt[i] = state.prompt
        return self._penalize(logits, counts, prompt, [s.penalties for s in states])

    def _penalize(self, logits, counts, prompt, penalties) -> torch.Tensor:
        return penalize_rows_(logits, counts, prompt, penalties)

    # -- checks -------------------------------------------------------------------------------
    def _held(self, slot) -> _Slot:
        state = self.slots.get(int(slot))
        if state is None:
            raise InvalidPenaltiesInput(f"slot {slot} holds no request")
        return state

    def _ids(self, values, what: str) -> np.ndarray:
        array = np.asarray(list(values), dtype=np.int64)
        bad = (array < 0) | (array >= self.vocab_size)
        if bad.any():
            raise InvalidPenaltiesInput(f"{what}: token id {int(array[bad][0])} is outside [0, {self.vocab_size})")
        return array

    def check_step(self, logits: torch.Tensor, rows, local_pos, input_ids):
        """The step's rows as int64 arrays; InvalidPenaltiesInput naming the first thing that does
        not describe one batch of the table's requests."""
        if not isinstance(logits, torch.Tensor) or logits.dtype != torch.float32 or logits.dim() != 2 \
                or logits.shape[1] != self.vocab_size or not logits.is_contiguous():
            raise InvalidPenaltiesInput(f"logits must be contiguous float32 [num_rows, {self.vocab_size}], got "
                                        f"{getattr(logits, 'dtype', type(logits).__name__)} "
                                        f"{list(getattr(logits, 'shape', []))}")
        if logits.device.type != self.device.type or None not in (logits.device.index, self.device.index) \
                and logits.device.index != self.device.index:
            raise InvalidPenaltiesInput(f"logits are on {logits.device}, the state on {self.device}")
        rows, local_pos, input_ids = (np.asarray(list(v), dtype=np.int64) for v in (rows, local_pos, input_ids))
        if not len(rows) == len(local_pos) == len(input_ids) == logits.shape[0]:
            raise InvalidPenaltiesInput(f"{logits.shape[0]} logits rows need as many rows, local_pos and input_ids "
                                        f"entries, got {len(rows)}, {len(local_pos)}, {len(input_ids)}")
        for slot in dict.fromkeys(rows.tolist()):
            self._held(slot)
        seen: set[int] = set()
        for i, (slot, place) in enumerate(zip(rows.tolist(), local_pos.tolist())):
            if place == 0 and slot not in seen:
                seen.add(slot)
            elif place == 0 or i == 0 or rows[i - 1] != slot or local_pos[i - 1] != place - 1:
                raise InvalidPenaltiesInput("each request's rows must be adjacent, with local_pos 0, 1, 2, .. "
                                            f"(rows {rows.tolist()}, local_pos {local_pos.tolist()})")
        bad = (input_ids < -1) | (input_ids >= self.vocab_size)
        if bad.any():
            raise InvalidPenaltiesInput(f"input id {int(input_ids[bad][0])} is outside [-1, {self.vocab_size})")
        return rows, local_pos, input_ids
