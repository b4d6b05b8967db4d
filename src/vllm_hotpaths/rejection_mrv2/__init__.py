"""Model Runner V2's rejection sampling (`vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py`,
`rejection_sample`, vLLM 0.22.0 on): its default path (no synthetic acceptance rates, fp32
Gumbel noise, no block verification, watermark or adaptive window).

What every implementation here states, for one step of a batch of requests:

- the inputs are upstream's: `target_logits` [num_logits, V] (processed: temperature applied),
  `draft_logits` [max_num_reqs, num_speculative_steps, V] or None (one-hot drafts),
  `draft_sampled` [num_logits] (the token fed at each row: a request's row j > 0 holds its j-th
  draft, -1 a placeholder draft, 0.25 on), `cu_num_logits` [num_reqs + 1], `pos` [num_logits],
  `idx_mapping` [num_reqs] (each request's slot), `expanded_idx_mapping` and
  `expanded_local_pos` [num_logits] (each row's slot and place in its request), `temperature`
  and `seed` [max_num_reqs] (per slot; temperature 0: greedy), `num_speculative_steps`;
- a request accepts its drafts in order while the test passes (greedy: the draft is the target
  argmax; random: `log p(d) > log u + log q(d)`, strict, u uniform from the request's seed and
  the row's position; a -1 draft is rejected), then samples one token: a greedy request the target
  argmax of its first rejected row, else (or a greedy bonus row) the Gumbel-max of the residual
  of its first rejected row, or of its bonus row's target logits, with noise from (seed, position,
  token);
- it returns `(sampled, num_sampled)`: int64 [num_reqs, num_speculative_steps + 1] and int32
  [num_reqs], the accepted drafts then the sampled token, `num_sampled[r]` of them. Entries past
  `num_sampled[r]` are left uninitialised upstream; implementations here fill them with -1.

What changed by release (the references: `reference.py`): 0.24 the Gumbel noise
`-log(-log1p(-u))`; 0.25 a fp32 acceptance uniform, -1 drafts handed over and rejected, the
residual with draft logits by libdevice `log1p(-ratio)` (0.22: `log(1 - ratio)`); 0.28 a -1 draft
ends a random request's verification (its row resampled from the target), draft logits divided by
the temperature, NaN block maxima -inf; 0.31 murmur3 Gumbel noise (Philox before; the acceptance
test keeps Philox).
"""

from __future__ import annotations

from vllm_hotpaths import vllm_env

vllm_env.set_cpu_environment()


class InvalidRejectionInput(ValueError):
    """Shapes, dtypes, devices, ids or a batch layout that vLLM's model runner never hands over
    (upstream's kernels would read outside their tensors or mix requests up)."""


def _fail(message: str):
    raise InvalidRejectionInput(message)


def check_inputs(target_logits, draft_logits, draft_sampled, cu_num_logits, pos, idx_mapping,
                 expanded_idx_mapping, expanded_local_pos, temperature, seed, num_speculative_steps,
                 placeholders: bool) -> None:
    """Raise InvalidRejectionInput naming the first input that does not describe one step of a
    batch. `placeholders`: whether -1 drafts are allowed (0.25 on; 0.22 to 0.24 read at the id)."""
    import torch

    tensors = dict(target_logits=target_logits, draft_sampled=draft_sampled, cu_num_logits=cu_num_logits,
                   pos=pos, idx_mapping=idx_mapping, expanded_idx_mapping=expanded_idx_mapping,
                   expanded_local_pos=expanded_local_pos, temperature=temperature, seed=seed)
    if draft_logits is not None:
        tensors["draft_logits"] = draft_logits
    for name, value in tensors.items():
        if not isinstance(value, torch.Tensor):
            _fail(f"{name} must be a tensor, got {type(value).__name__}")
    device = target_logits.device
    for name, value in tensors.items():
        if value.device != device:
            _fail(f"{name} is on {value.device}, target_logits on {device}")
    if not isinstance(num_speculative_steps, int) or num_speculative_steps < 0:
        _fail(f"num_speculative_steps must be an int >= 0, got {num_speculative_steps!r}")
    if target_logits.dtype != torch.float32 or target_logits.dim() != 2 or not target_logits.is_contiguous() \
            or target_logits.shape[1] < 1:
        _fail(f"target_logits must be contiguous float32 [num_logits, V >= 1], got {target_logits.dtype} "
              f"{list(target_logits.shape)}")
    num_logits, vocab = target_logits.shape
    int32 = {"cu_num_logits": cu_num_logits, "idx_mapping": idx_mapping,
             "expanded_idx_mapping": expanded_idx_mapping, "expanded_local_pos": expanded_local_pos}
    for name, value in int32.items():
        if value.dtype != torch.int32 or value.dim() != 1:
            _fail(f"{name} must be int32 [n], got {value.dtype} {list(value.shape)}")
    if draft_sampled.dtype not in (torch.int32, torch.int64) or draft_sampled.dim() != 1:
        _fail(f"draft_sampled must be int32 or int64 [num_logits], got {draft_sampled.dtype} {list(draft_sampled.shape)}")
    if pos.dtype != torch.int64 or pos.dim() != 1:
        _fail(f"pos must be int64 [num_logits], got {pos.dtype} {list(pos.shape)}")
    if temperature.dtype != torch.float32 or temperature.dim() != 1:
        _fail(f"temperature must be float32 [max_num_reqs], got {temperature.dtype} {list(temperature.shape)}")
    if seed.dtype != torch.int64 or seed.shape != temperature.shape:
        _fail(f"seed must be int64 {list(temperature.shape)} like temperature, got {seed.dtype} {list(seed.shape)}")
    for name in ("draft_sampled", "pos", "expanded_idx_mapping", "expanded_local_pos"):
        if tensors[name].shape[0] != num_logits:
            _fail(f"{name} has {tensors[name].shape[0]} entries for {num_logits} logits rows")
    num_reqs = cu_num_logits.shape[0] - 1
    if num_reqs < 1 or idx_mapping.shape[0] != num_reqs:
        _fail(f"cu_num_logits ({cu_num_logits.shape[0]} entries) and idx_mapping ({idx_mapping.shape[0]}) "
              "must describe the same >= 1 requests")
    max_num_reqs = temperature.shape[0]
    cu, slots = cu_num_logits.tolist(), idx_mapping.tolist()
    counts = [b - a for a, b in zip(cu, cu[1:])]
    if cu[0] != 0 or cu[-1] != num_logits or not all(1 <= c <= num_speculative_steps + 1 for c in counts):
        _fail(f"cu_num_logits {cu} must run from 0 to {num_logits} in steps of 1..{num_speculative_steps + 1}")
    if len(set(slots)) != len(slots) or not all(0 <= s < max_num_reqs for s in slots):
        _fail(f"idx_mapping {slots} must hold distinct slots in [0, {max_num_reqs})")
    expected_slots = [s for s, c in zip(slots, counts) for _ in range(c)]
    expected_places = [j for c in counts for j in range(c)]
    if expanded_idx_mapping.tolist() != expected_slots or expanded_local_pos.tolist() != expected_places:
        _fail("expanded_idx_mapping and expanded_local_pos must repeat each request's slot and count 0, 1, .. "
              f"over its rows (cu_num_logits {cu}, idx_mapping {slots})")
    lowest = -1 if placeholders else 0
    ids = draft_sampled.tolist()
    bad = [t for t in ids if not lowest <= t < vocab]
    if bad:
        _fail(f"draft id {bad[0]} is outside [{lowest}, {vocab}): upstream would read outside the logits")
    if (pos < 0).any():
        _fail("positions must be >= 0")
    if not bool(torch.isfinite(temperature).all()) or bool((temperature < 0).any()):
        _fail("temperatures must be finite and >= 0")
    if draft_logits is not None:
        if draft_logits.dtype != torch.float32 or not draft_logits.is_contiguous() \
                or tuple(draft_logits.shape) != (max_num_reqs, num_speculative_steps, vocab):
            _fail(f"draft_logits must be contiguous float32 [{max_num_reqs}, {num_speculative_steps}, {vocab}], "
                  f"got {draft_logits.dtype} {list(draft_logits.shape)}")


def fill_tail(sampled, num_sampled):
    """-1 past each request's `num_sampled` entries (upstream leaves them uninitialised)."""
    import torch

    width = sampled.shape[1]
    past = torch.arange(width, device=sampled.device)[None, :] >= num_sampled.to(torch.int64)[:, None]
    return sampled.masked_fill_(past, -1)
