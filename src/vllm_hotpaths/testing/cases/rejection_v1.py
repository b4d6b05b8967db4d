"""v1's speculative sampling given Model Runner V2's request streams and uniforms (the
runner-change law's side of `rejection_mrv2`).

For the same (seed, position, token), Model Runner V2's Gumbel-max `argmax(logit + g)` with
`g = -log(E)` is v1's `argmax(p / E)` with the exponential E that v1 would draw: 0.22's
`g = -log(-log u)` gives `E = -log u`, the `g = -log(-log1p(-u))` of 0.24 on gives
`E = -log1p(-u)`. The acceptance test gets MRv2's acceptance uniform. The uniforms, the draft
scaling and the placeholder rule are those of the MRv2 reference of the version (its class
attributes). Per request, in MRv2's shape:

- greedy: v1's rejection accepts drafts equal to `target_logits.argmax(-1)` and emits the argmax
  at the first mismatch, or the bonus row's argmax;
- random: target probabilities `softmax(target_logits)` (the logits are processed already),
  draft probabilities the softmax of the draft logits (0.28 on: divided by the temperature, as
  MRv2 does) or one-hot; v1's test `q(d) > 0 and p(d) / q(d) >= u`; at the first rejection v1's
  `sample_recovered_tokens` reference (the version's) with that row's E; a -1 draft (0.25 on) is
  rejected and, as MRv2 does (v1 has no placeholder drafts), resampled from the target (0.28 on,
  or one-hot drafts) or from the row's residual `max(p - q, 0)` (0.25 to 0.27 with draft logits);
  with all drafts accepted, v1's random sampler `argmax(p / E)` on the bonus row.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from vllm_hotpaths.rejection_mrv2 import InvalidRejectionInput, check_inputs, fill_tail
from vllm_hotpaths.rejection_mrv2.reference import uniforms


@triton.jit
def _v1_accept_kernel(out_ptr, target_ptr, draft_ptr, uniform_ptr, ONE_HOT: tl.constexpr):
    # v1's rejection_random_sample_kernel test, one draft per program: fp32 ratio against the fp64 u.
    i = tl.program_id(0)
    target_prob = tl.load(target_ptr + i)
    if ONE_HOT:
        draft_prob = 1
    else:
        draft_prob = tl.load(draft_ptr + i)
    tl.store(out_ptr + i, (draft_prob > 0) & (target_prob / draft_prob >= tl.load(uniform_ptr + i)))


class V1OnRejection:
    def __init__(self, device="cpu", v1_version: str | None = None, mrv2_version: str | None = None) -> None:
        from vllm_hotpaths import registry

        self.device = torch.device(device)
        mrv2 = registry.get("rejection_mrv2")
        # the frozen MRv2 reference class of that version: its behaviours (uniforms, noise, drafts)
        self.mrv2 = registry.resolve(mrv2.references[mrv2.reference_version_for(mrv2_version)])
        self.v1 = registry.get("recovered_tokens").reference(v1_version)(self.device)

    def _exponential(self, u: torch.Tensor) -> torch.Tensor:
        # v1's exponential noise is fp32: 0.21's fp64 uniforms give it at v1's precision
        return (-torch.log1p(-u) if self.mrv2.NOISE_LOG1P else -torch.log(u)).to(torch.float32)

    def rejection_sample(self, target_logits, draft_logits, draft_sampled, cu_num_logits, pos, idx_mapping,
                         expanded_idx_mapping, expanded_local_pos, temperature, seed, num_speculative_steps):
        check_inputs(target_logits, draft_logits, draft_sampled, cu_num_logits, pos, idx_mapping,
                     expanded_idx_mapping, expanded_local_pos, temperature, seed, num_speculative_steps,
                     placeholders=self.mrv2.PLACEHOLDERS)
        if target_logits.device.type != self.device.type:
            raise InvalidRejectionInput(f"inputs are on {target_logits.device}, the sampler on {self.device}")
        vocab = target_logits.shape[1]
        accept_u, token_u = uniforms(seed[expanded_idx_mapping.long()].contiguous(), pos.contiguous(), vocab,
                                     self.mrv2)
        cu, ids = cu_num_logits.tolist(), draft_sampled.tolist()
        sampled = torch.full((len(cu) - 1, num_speculative_steps + 1), -1, dtype=torch.int64, device=self.device)
        counts = []
        for r, slot in enumerate(idx_mapping.tolist()):
            rows = range(cu[r], cu[r + 1])
            temp = float(temperature[slot])
            if temp == 0.0:
                out = self._greedy(target_logits, ids, rows)
            else:
                out = self._random(target_logits, draft_logits, ids, rows, slot, temp, accept_u, token_u)
            sampled[r, :len(out)] = torch.tensor(out, dtype=torch.int64)
            counts.append(len(out))
        num_sampled = torch.tensor(counts, dtype=torch.int32, device=self.device)
        return fill_tail(sampled, num_sampled), num_sampled

    @staticmethod
    def _greedy(target_logits, ids, rows) -> list[int]:
        out = []
        for row in rows:
            best = int(target_logits[row].argmax())
            if row == rows[-1] or ids[row + 1] != best:
                return out + [best]
            out.append(best)
        return out

    def _random(self, target_logits, draft_logits, ids, rows, slot, temp, accept_u, token_u) -> list[int]:
        target_probs = target_logits[rows[0]:rows[-1] + 1].softmax(dim=-1, dtype=torch.float32)
        draft_probs = None
        if draft_logits is not None:
            scaled = draft_logits[slot] / temp if self.mrv2.DRAFT_OVER_TEMP else draft_logits[slot]
            draft_probs = scaled.softmax(dim=-1, dtype=torch.float32)
        out = []
        for j, row in enumerate(rows):
            e = self._exponential(token_u[row:row + 1])
            if row == rows[-1]:  # every draft accepted: v1's sampler draws the bonus token
                return out + [int(target_probs[j:j + 1].div(e).argmax(dim=-1))]
            draft = ids[row + 1]
            if draft < 0:  # a placeholder: rejected, resampled as MRv2 does
                if draft_probs is None or self.mrv2.PLACEHOLDER_ENDS:
                    return out + [int(target_probs[j:j + 1].div(e).argmax(dim=-1))]
                return out + [self._recover(0, draft_probs[j:j + 1], target_probs[j:j + 1], e)]
            if self._accepts(target_probs[j, draft], None if draft_probs is None else draft_probs[j, draft],
                             accept_u[row]):
                out.append(draft)
                continue
            return out + [self._recover(draft, None if draft_probs is None else draft_probs[j:j + 1],
                                        target_probs[j:j + 1], e)]
        return out

    def _accepts(self, target_prob, draft_prob, u) -> bool:
        if not target_prob.is_cuda:  # IEEE fp32 division, as the interpreted kernel's NumPy
            ratio = target_prob if draft_prob is None else target_prob / draft_prob
            return (draft_prob is None or bool(draft_prob > 0)) and float(ratio) >= float(u)
        out = torch.zeros(1, dtype=torch.bool, device=self.device)
        one = lambda value, dtype: value.reshape(1).to(dtype).contiguous()  # noqa: E731
        draft = one(draft_prob, torch.float32) if draft_prob is not None else one(target_prob, torch.float32)
        _v1_accept_kernel[(1,)](out, one(target_prob, torch.float32), draft, one(u, torch.float64),
                                ONE_HOT=draft_prob is None)
        return bool(out)

    def _recover(self, draft: int, draft_probs, target_probs, e) -> int:
        ids = torch.tensor([draft], dtype=torch.int64, device=self.device)
        cu = torch.tensor([1], dtype=torch.int32, device=self.device)
        got = self.v1.recover(1, [1], cu, ids, None if draft_probs is None else draft_probs.contiguous(),
                              target_probs.contiguous(), e.contiguous())
        return int(got[0])
