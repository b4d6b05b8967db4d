"""swap_states generators: program headers and add operations, which the state machine
(`vllm_hotpaths.testing.cases.swap_states.machine`) draws a `SwapProgram` from, one operation at a
time (the schema, its operations, the driver and the comparison: that module)."""

from __future__ import annotations

from hypothesis import strategies as st

from vllm_hotpaths.testing.cases import note
from vllm_hotpaths.testing.cases.swap_states import SAMPLINGS
from vllm_hotpaths.testing.kept_strategies import KEPT


# Real vocabulary sizes, in one program of eight with at most three rows: the allowed-id mask's
# rows then span more than 32,768 columns, and its ids and the token ids go past 16 bits.
REAL_VOCABS = (32768, 32769, 50257, 151936, 262144)
# Real context lengths, in one program of eight with two rows: token rows past 8,192 columns,
# and counts past 16 bits where a row is longer than 65,535 tokens.
REAL_LENGTHS = (32769, 131072)
# LoRA ids: none (0), 1 and 2, past 32 bits, and the maximum of the int64 mapping.
LORA_IDS = (0, 0, 1, 2, 3, 2**31, 2**63 - 1)


# -- strategies -------------------------------------------------------------------------------
@st.composite
def programs_header(draw, pooling=None) -> dict:
    max_model_len = draw(st.one_of(st.integers(9, 48), st.integers(9, 48), st.integers(1, 8)))
    vocab_size, max_num_reqs = draw(st.integers(2, 24)), draw(st.integers(1, 6))
    if draw(st.integers(0, 7)) == 7:  # the last value: shrinking leaves the small vocabularies
        vocab_size, max_num_reqs = draw(st.sampled_from(REAL_VOCABS)), min(max_num_reqs, 3)
        note("real vocabulary (>= 32,768)")
    elif draw(st.integers(0, 7)) == 3:  # an inner value (Hypothesis favours the ends); two rows
        max_model_len, max_num_reqs = draw(st.sampled_from(REAL_LENGTHS)), 2
        note("real max_model_len (>= 8,192)")
    return dict(
        max_num_reqs=max_num_reqs,
        max_model_len=max_model_len,
        vocab_size=vocab_size,
        block_sizes=tuple(draw(st.lists(st.sampled_from((1, 2, 4, 16)), min_size=1, max_size=2))),
        pooling=draw(st.sampled_from((False, False, False, True))) if pooling is None else pooling,
    )


def add_ops(header: dict) -> st.SearchStrategy:
    """An ("add", ...) op fitting the header: lengths up to max_model_len."""
    mml, v = header["max_model_len"], header["vocab_size"]

    @st.composite
    def draw_add(draw):
        # Mostly room left for drafts and tokens; now and then a row at max_model_len, its
        # outputs filling what the prompt leaves (none, when shrunk).
        at_limit = draw(KEPT.integers(0, 5)) == 0
        prompt_len = mml - draw(KEPT.integers(0, mml - 1)) if at_limit else draw(KEPT.integers(1, max(1, mml // 2)))
        output_len = mml - prompt_len if at_limit else draw(KEPT.integers(0, (mml - prompt_len) // 2))
        return ("add", draw(KEPT.integers(0, 2 * header["max_num_reqs"])), draw(KEPT.integers(0, 2**16)),
                prompt_len, output_len, draw(KEPT.integers(0, output_len)),
                draw(KEPT.sampled_from((0, 0, 1, 2))), draw(KEPT.one_of(KEPT.just(0), KEPT.integers(1, v))),
                draw(KEPT.booleans()), draw(KEPT.integers(0, 2)), draw(KEPT.sampled_from(LORA_IDS)),
                draw(KEPT.integers(0, len(SAMPLINGS) - 1)))

    return draw_add()
