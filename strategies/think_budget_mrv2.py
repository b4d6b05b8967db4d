"""Model Runner V2 thinking-budget generators: slot programs (the schema and its operations:
`vllm_hotpaths.testing.cases.think_budget_mrv2`).

Marker triples (start, forced end, natural end) over ids 0..9: single-token (Qwen3's shape),
multi-token starts, a forced string that ends with the natural marker (a custom
`reasoning_end_str` such as "\\n</think>"), one that differs from it entirely, self-overlapping
and start-inside-end shapes. Prompts and resumed outputs come from the v1 generators
(strategies/think_budget.py: markers spliced in whole or in part, prompts ending inside a think
block or with part of a marker, so a start marker can be split across the prompt/output
boundary); budgets 0, 1, small, int32's maximum and past it, or none beside budgeted ones.
Each step schedules every live request in some order, some with drafts (-1 placeholders among
them); scripted commits are an accepted draft prefix plus one token, with marker ids often, so
second start markers, ends before starts and partial forced strings occur; forced rows are
obeyed (the case module).
"""

from __future__ import annotations

from hypothesis import strategies as st

from strategies.penalties_mrv2 import commits
from strategies.think_budget import long_outputs, prompts, token_runs
from vllm_hotpaths.testing.cases import note
from vllm_hotpaths.testing.cases.think_budget_mrv2 import ThinkSlotProgram

MARKER_TRIPLES = (
    ((7,), (8,), (8,)),  # Qwen3: <think>, </think>
    ((7,), (5, 8), (8,)),  # a custom forced string ending with the natural end
    ((7, 6), (8, 9), (8, 9)),  # multi-token markers
    ((6, 7), (5, 8), (8,)),
    ((7,), (8, 9), (9,)),
    ((7,), (8, 9, 8), (8, 9, 8)),  # self-overlapping end
    ((7,), (5, 8), (9,)),  # the forced string does not contain the natural end
    ((5,), (5, 6), (6,)),  # the start id opens the forced string
    ((7, 6, 5), (8,), (8,)),
)
BUDGETS = (0, 1, 2, 3, 5, 2**31 - 1, 2**31, 10**18)
VOCABS = (10, 12, 16)
REAL_VOCABS = (32768, 151936)


def marker_triples() -> st.SearchStrategy[tuple]:
    ids = st.lists(st.integers(0, 9), min_size=1, max_size=3).map(tuple)
    known = st.one_of(st.sampled_from(MARKER_TRIPLES), st.sampled_from(MARKER_TRIPLES), st.tuples(ids, ids, ids))
    # Upstream enforces budgets only when all three lists are known: one triple in four has a
    # list left out, most often the natural end (a reasoning parser that gives none).
    missing = st.tuples(known, st.sampled_from((2, 2, 0, 1))).map(
        lambda t: tuple(() if i == t[1] else m for i, m in enumerate(t[0])))
    return st.one_of(known, known, known, missing)


def budgets() -> st.SearchStrategy[int | None]:
    small = st.integers(0, 4)
    return st.one_of(st.none(), st.sampled_from(BUDGETS), small, small, small)


@st.composite
def think_slot_programs(draw, max_ops: int = 12) -> ThinkSlotProgram:
    start, end, natural = draw(marker_triples())
    real = draw(st.integers(0, 29)) == 29  # the last value: shrinking leaves the small vocabularies
    vocab = draw(st.sampled_from(REAL_VOCABS)) if real else draw(st.sampled_from(VOCABS))
    if real:  # markers among the vocabulary's last ids, where tokenizers add them
        start, end, natural = (tuple(vocab - 10 + t for t in m) for m in (start, end, natural))
        note("real vocabulary, markers at its end")
    markers = sorted(set(start) | set(end) | set(natural))
    plain = st.integers(0, min(vocab, 12) - 1) if not real else st.integers(vocab - 12, vocab - 1)
    ids = st.one_of(st.sampled_from(start or markers), st.sampled_from(markers), plain, plain)
    config = dict(start_ids=start, end_ids=end, vocab_size=vocab)
    natural_config = dict(start_ids=start, end_ids=natural, vocab_size=vocab)
    slots = draw(st.integers(1, 2 if real else 4))
    note(f"markers |start|={len(start)} |forced|={len(end)} |natural|={len(natural)}"
         + (", forced != natural" if end != natural else ""))
    if not (start and end and natural):
        note("a marker list missing (budget not enforced)")
    # Without a natural end, small budgets: thinking then reaches a budget that must stay unenforced.
    budget = st.integers(0, 3) if start and end and not natural else budgets()
    lengths: dict[int, int] = {}
    longest = 1
    ops = []
    spec = draw(st.booleans())
    for _ in range(draw(st.integers(1, 4 if real else max_ops))):
        free = sorted(set(range(slots)) - set(lengths))
        kinds = (["add"] if free else []) + (["step"] * 5 + ["remove"] if lengths else [])
        kind = draw(st.sampled_from(kinds))
        if kind == "add":
            slot = draw(st.sampled_from(free))
            prompt = draw(prompts(draw(st.sampled_from((config, natural_config))), ids)) or []
            if not prompt:
                prompt = [draw(ids)]
            resumed = draw(st.one_of(st.just([]), st.just([]), token_runs(config, 6, ids), token_runs(natural_config, 6, ids),
                                     st.integers(0, 15).flatmap(
                                         lambda n: long_outputs(config, ids) if n == 15 else st.just([]))))
            ops.append(("add", slot, tuple(prompt), tuple(resumed), draw(budget)))
            lengths[slot] = len(prompt) + len(resumed)
        elif kind == "remove":
            slot = draw(st.sampled_from(sorted(lengths)))
            ops.append(("remove", slot))
            del lengths[slot]
        else:
            batch, sampled = [], []
            for slot in draw(st.permutations(sorted(lengths))):
                drafts = tuple(draw(st.lists(st.one_of(ids, ids, st.just(-1)), max_size=3))) if spec and not real else ()
                batch.append((slot, drafts))
                sampled.append(draw(commits(drafts, ids)))
                lengths[slot] += len(sampled[-1])
            ops.append(("step", tuple(batch), draw(st.integers(0, 2**32 - 1)), tuple(sampled)))
        longest = max([longest, *lengths.values()])
    if lengths and not any(op[0] == "step" for op in ops):
        ops.append(("step", tuple((slot, ()) for slot in sorted(lengths)), 0, tuple((0,) for _ in lengths)))
        longest = max(longest, max(lengths.values()) + 1)
    return ThinkSlotProgram(start, end, natural, vocab, slots, longest + draw(st.sampled_from((0, 1, 64))),
                            tuple(ops))
