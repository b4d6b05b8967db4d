"""Penalties generators: programs of upstream batch transitions with sampler steps between them
(the schema and its operations: `vllm_hotpaths.testing.cases.penalties`), decode runs, poisoned
programs, invalid-id cases and placeholder-repair cases."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from vllm_hotpaths.penalties.fast import DEFAULT_COLS
from vllm_hotpaths.testing.cases import note
from vllm_hotpaths.testing.cases.penalties import InvalidIdCase, PenaltiesProgram, PoisonedProgram, RepairCase

SPECIAL_LOGITS = (0.0, -0.0, math.inf, -math.inf, math.nan, 1e-45, -1e-45, 1e-40, -1e-40,
                  3.4e38, -3.4e38, 1.0, -1.0)
REPETITION_EDGES = (1.0, 1.0000001, 0.99999994, 1e-30, 1e30, 2.0, 0.5)
PRESENCE_EDGES = (0.0, -0.0, 2.0, -2.0, 1.5, 1e-7)
# Around powers of two and tiny vocabularies; real sizes (one program in ten, short, with small
# batches: each step costs O(V)): ids past int16 and uint16, a pad V that no 15-bit field holds.
VOCAB_EDGES = (1, 2, 3, 7, 8, 9, 31, 32, 33, 64)
REAL_VOCABS = (32768, 32769, 50257, 151936, 262144)
WIDE_ID_EDGES = (2**15 - 1, 2**15, 2**16 - 1, 2**16, 2**17)
# Model lengths (the hint's column capacity): 1 and 2 grow at once, 128 and 256 hold outputs past
# a builder's 64-column default and past twice it. Batch capacities past 8 rows in one program in
# six, filled as requests arrive between steps: each row costs every step a little, so the rest
# stay at up to 6.
MODEL_LENS = (1, 2, 4, 16, 64, 128, 256)
BIG_BATCHES = (9, 16, 17)




# -- generation ---------------------------------------------------------------------------
def _f32(x: float) -> float:
    return float(np.float32(x))


def token_ids(vocab_size: int) -> st.SearchStrategy[int]:
    edges = st.sampled_from(sorted({0, vocab_size - 1, vocab_size} | {e for e in WIDE_ID_EDGES if e < vocab_size}))
    if vocab_size > 2**15:  # Hypothesis favours small integers: draw from the upper range too
        return st.one_of(st.integers(0, vocab_size - 1), st.integers(2**15, vocab_size - 1), edges)
    return st.one_of(st.integers(0, vocab_size - 1), edges)


def logit_values() -> st.SearchStrategy[float]:
    finite = st.floats(width=32, allow_nan=False, allow_infinity=False)
    return st.one_of(st.sampled_from(SPECIAL_LOGITS), finite)


def penalties_programs(max_ops: int = 14, max_vocab: int = 64) -> st.SearchStrategy[PenaltiesProgram]:
    """Any transitions in any order, or the same made into decode runs (see `decode_runs`). A
    program over a real vocabulary always takes decode runs: their steady steps are where ids past
    15 bits are written one per row, and a seed's runs draw few real vocabularies (one to 22 of
    150 in eight seeds)."""
    programs = transition_programs(max_ops, max_vocab)
    return st.one_of(programs.flatmap(_decode_runs_if_real), programs.flatmap(decode_runs))


def _decode_runs_if_real(program: PenaltiesProgram) -> st.SearchStrategy[PenaltiesProgram]:
    return decode_runs(program) if program.vocab_size > 2**15 else st.just(program)


@st.composite
def decode_runs(draw, program: PenaltiesProgram) -> PenaltiesProgram:
    """`program` as a serving engine mostly runs it: every row tracked, the sampler reading the
    live lists, and after each transition a few async decode rounds, each followed by a sampler
    step. Such steps are the fast path's steady step (every row one token longer, nothing
    changed in place); the transitions in between, and rounds that leave their placeholders for
    a later repair, are what must take it off that path."""
    ops = []
    for op in program.ops:
        if op[0] == "add":
            op = op[:3] + (True,) + op[4:]
        elif op[0] == "step":
            op = ("step", False) + op[2:]
        ops.append(op)
        for _ in range(draw(st.integers(0, 3))):
            tokens = tuple(draw(st.lists(token_ids(program.vocab_size), min_size=1, max_size=4)))
            # now and then a round whose placeholders stay: the next repair rewrites them in place
            round_ = draw(st.sampled_from((("decode", tokens),) * 3 + (("async", (tokens,)),)))
            ops += [round_, ("step", False, 0, True, ())]
    return PenaltiesProgram(program.vocab_size, program.max_num_reqs, max(program.max_model_len, 64), tuple(ops),
                            program.hint)


def id_runs(tok, length: int) -> st.SearchStrategy[tuple[int, ...]]:
    """`length` ids: a drawn run of up to four repeated (a long output costs no more to draw)."""
    if length == 0:
        return st.just(())
    return st.lists(tok, min_size=1, max_size=4).map(lambda ids: tuple(ids[i % len(ids)] for i in range(length)))


@st.composite
def request_fields(draw, tok, model_len: int, penalties) -> tuple:
    """An "add" (or an update's request): prompt and output each drawn id by id (up to 6 and 5,
    fitting or not), or at a boundary: 0, 1, 2 ids or all the room max_model_len leaves (the
    prompt first, the output in what remains)."""
    def sized(small: int, room: int):
        edges = st.sampled_from(sorted({0, 1, 2, max(room, 0)})).flatmap(lambda n: id_runs(tok, n))
        return st.one_of(st.lists(tok, max_size=small).map(tuple), edges)

    prompt = draw(sized(6, model_len))
    output = draw(sized(5, model_len - len(prompt)))
    return (prompt, output, draw(st.booleans()), *draw(penalties))


@st.composite
def _capacity_jump(draw, request, tok, step) -> list:
    """Two requests, then a step, in a program without a batch hint: one request whose
    output needs more than twice a builder's default columns at once (fitting the longest model
    length), and one drawn as any, whose columns past its own length the grown tensor must pad."""
    other, long = draw(request), draw(request)
    prompt = draw(st.lists(tok, max_size=6).map(tuple))
    output = draw(st.integers(2 * DEFAULT_COLS + 1, 3 * DEFAULT_COLS).flatmap(lambda n: id_runs(tok, n)))
    note("an output jumping past twice the default columns (built)")
    return [("add", *other), ("add", prompt, output, *long[2:]), draw(step)]


@st.composite
def transition_programs(draw, max_ops: int = 14, max_vocab: int = 64) -> PenaltiesProgram:
    real = draw(st.integers(0, 9)) == 9  # the last value: shrinking leaves the small vocabularies
    if real:
        vocab = draw(st.sampled_from(REAL_VOCABS))
        note("real vocabulary (>= 32,768)")
    else:
        vocab = draw(st.one_of(st.sampled_from([v for v in VOCAB_EDGES if v <= max_vocab]),
                               st.integers(1, max_vocab)))
    big = not real and draw(st.integers(0, 5)) == 5
    max_num_reqs = draw(st.sampled_from(BIG_BATCHES) if big else st.integers(1, 2 if real else 6))
    max_model_len = draw(st.sampled_from(MODEL_LENS))
    # vLLM's plugin builds without a batch hint, so a builder's default capacity is what a batch
    # outgrows: never hinted where the batch may grow past 8 rows (a hint would cover it), else in
    # three programs of four (builders that read the batch need it)
    hint = not big and draw(st.integers(0, 3)) != 3
    # One other program in six (of two rows or more) starts with a capacity jump
    # (`_capacity_jump`), over the longest model length, without a hint.
    jump = not big and max_num_reqs >= 2 and draw(st.integers(0, 5)) == 5
    if jump:
        max_model_len, hint = MODEL_LENS[-1], False
    tok = token_ids(vocab)
    short = lambda elems, n=4, least=0: st.lists(elems, min_size=least, max_size=n).map(tuple)  # noqa: E731
    rows = st.integers(0, 7)
    sampled = st.lists(tok, min_size=1, max_size=4).flatmap(
        lambda ids: st.integers(0, len(ids) - 1).map(
            lambda k: tuple(ids[:k + 1]) + (-1,) * (len(ids) - k - 1)))
    penalties = st.tuples(
        st.one_of(st.sampled_from(PRESENCE_EDGES), st.floats(-2, 2, width=32)).map(_f32),
        st.one_of(st.sampled_from(PRESENCE_EDGES), st.floats(-2, 2, width=32)).map(_f32),
        st.one_of(st.sampled_from(REPETITION_EDGES), st.floats(0.0009765625, 10, width=32)).map(_f32),
    )
    request = request_fields(tok, max_model_len, penalties)
    add = request.map(lambda fields: ("add", *fields))
    # One step's batch update: removals, requests into the freed rows, condense, reorder swaps.
    update = st.tuples(st.just("update"), short(rows, 3, 1), short(request, 3, 1),
                       short(st.tuples(rows, rows), 3))
    special = st.tuples(rows, st.integers(0, max(vocab - 1, 0)), logit_values().map(
        lambda x: math.nan if math.isnan(x) else x))
    step = st.tuples(st.just("step"), st.booleans(), st.integers(0, 2**16), st.booleans(),
                     short(special, 6))
    moves = st.one_of(st.tuples(st.just("remove"), rows), st.tuples(st.just("swap"), rows, rows))
    op = st.one_of(
        add,
        moves,
        moves,
        st.tuples(st.just("sample"), short(tok, 6, 1)),
        st.tuples(st.just("async"), short(sampled, 3, 1)),
        st.tuples(st.just("decode"), short(tok, 6, 1)),
        st.tuples(st.just("repair"), short(rows, 2)),
        st.tuples(st.just("spec"), short(short(tok, 3), 3, 1)),
        st.tuples(st.just("extend"), short(st.integers(0, 3), 3, 1)),
        st.tuples(st.just("trim"), rows, st.integers(0, 8)),
        st.tuples(st.just("spec_round"), short(st.integers(0, 3), 3, 1),
                  short(tok, 4, 1)),
        st.tuples(st.just("stale"), rows, sampled, tok),
        update,
        update,
    )
    # The batch filled to its capacity (max_num_reqs requests, arriving between steps) in every
    # big program and one small one in four; else one to four requests.
    if jump:
        prelude = draw(_capacity_jump(request, tok, step))
    elif big or draw(st.integers(0, 3)) == 3:
        prelude = []
        for request, then_step in draw(st.lists(st.tuples(add, st.one_of(st.none(), step)),
                                                min_size=max_num_reqs, max_size=max_num_reqs)):
            prelude += [request] if then_step is None else [request, then_step]
    else:
        prelude = draw(st.lists(add, min_size=1, max_size=4))
    # Each operation is followed by a sampler step or not: steps land between all transitions.
    ops = []
    for transition, then_step in draw(st.lists(st.tuples(op, st.one_of(st.none(), step)),
                                               min_size=1, max_size=4 if real else max_ops)):
        ops += [transition] if then_step is None else [transition, then_step]
    final = draw(step)
    return PenaltiesProgram(vocab, max_num_reqs, max_model_len, tuple(prelude + ops + [final]), hint)




def poisoned_programs() -> st.SearchStrategy[PoisonedProgram]:
    return st.builds(PoisonedProgram.of, penalties_programs(), st.integers(0, 7), st.integers(0, 40),
                     st.sampled_from(["below", "above", "float"]), st.booleans())




@st.composite
def invalid_id_cases(draw) -> InvalidIdCase:
    vocab = draw(st.integers(1, 16))
    rows = draw(st.lists(st.lists(st.integers(-1, vocab), max_size=5).map(tuple), min_size=1,
                         max_size=4).map(tuple))
    bad = draw(st.one_of(st.integers(-(2**40), -2), st.integers(vocab + 1, 2**40),
                         st.sampled_from([-2, vocab + 1])))
    return InvalidIdCase(vocab, rows, draw(st.integers(0, 3)), draw(st.integers(0, 5)), bad)




@st.composite
def repair_cases(draw) -> RepairCase:
    """Half the cases are a steady decode step (one placeholder per list, one valid id sampled per
    request, every request in the previous step), or one with a single request off it (its
    sample discarded, two placeholders, nothing but a placeholder, new to the batch); the rest
    mix runs of placeholders, interior -1, wider sampled rows, new requests and bad indices.
    Half are in vLLM's order (tracked lists whose watchers synced before the placeholder came)."""
    n = draw(st.integers(1, 5))
    ids = st.integers(0, 9)
    steady = draw(st.booleans())
    if steady:
        rows = [draw(st.lists(ids, min_size=1, max_size=5)) + [-1] for _ in range(n)]
        previous = list(draw(st.permutations(range(n + draw(st.integers(0, 2)))))[:n])
        sampled = [[draw(ids)] for _ in range(max(previous) + 1)]
        # One request off the usual step, or none: each must take the step off the bulk path.
        odd = draw(st.none() | st.sampled_from(["discarded", "longer run", "only a placeholder", "new"]))
        r = 0
        if odd is not None:
            r = draw(st.integers(0, n - 1))
            note(f"steady but one request: {odd}")
        if odd == "discarded":
            sampled[previous[r]] = [-1]
        elif odd == "longer run":
            rows[r].append(-1)
        elif odd == "only a placeholder":
            rows[r] = [-1]
        elif odd == "new":
            previous[r] = None
    else:
        rows = [draw(st.lists(st.one_of(ids, st.just(-1)), max_size=5)) + [-1] * draw(st.integers(0, 3))
                for _ in range(n)]
        width = draw(st.integers(1, 3))
        count = n + draw(st.integers(0, 2))
        previous = [draw(st.one_of(st.none(), st.integers(0, count - 1), st.integers(-count - 1, count)))
                    for _ in range(n)]
        sampled = [draw(st.lists(ids, min_size=0, max_size=width)) for _ in range(count)]
        sampled = [row + [-1] * (width - len(row)) for row in sampled]
    note("steady repair step" if steady else "mixed repair step")
    marks = [draw(st.one_of(st.none(), st.integers(0, 8))) for _ in range(n)]
    if draw(st.booleans()):  # vLLM's order: every list tracked, its watchers synced before its last -1
        tracked = [True] * n
        synced = [max(len(row) - 1, 0) for row in rows]
        note("tracked lists, watchers synced before the placeholder")
    else:
        tracked = [draw(st.booleans()) for _ in range(n)]
        synced = [draw(st.one_of(st.none(), st.integers(0, len(row)))) for row in rows]
    if steady and odd is None and all(tracked) and all(
            s is not None and s < len(row) for s, row in zip(synced, rows)):
        note("steady, every list tracked, no placeholder synced")
    return RepairCase(tuple(map(tuple, rows)), tuple(tracked), tuple(marks), tuple(previous),
                      tuple(map(tuple, sampled)), tuple(synced))



