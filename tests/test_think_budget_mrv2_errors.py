"""Bad input to the Model Runner V2 thinking budget: the reference and vLLM's own state behind the
live adapter both refuse it with `InvalidThinkingInput`, before any kernel runs."""

import pytest
import torch

from vllm_hotpaths import registry, vllm_env
from vllm_hotpaths.think_budget_mrv2 import InvalidThinkingInput, ThinkSlotsConfig
from vllm_hotpaths.think_budget_mrv2.reference import SlotThinkBudget

GOOD = ThinkSlotsConfig((7,), (5, 8), (8,), 16, 2, 12)


def factories():
    found = [pytest.param(SlotThinkBudget, id="reference")]
    version = vllm_env.installed_version()
    if version is not None and registry.get("think_budget_mrv2").exists_in(version):
        found.append(pytest.param(registry.get("think_budget_mrv2").live_factory(), id=f"vllm-{version}"))
    return found


@pytest.mark.parametrize("config", [
    ThinkSlotsConfig((16,), (5, 8), (8,), 16, 2, 12),  # start id past the vocabulary
    ThinkSlotsConfig((7,), (5, -1), (8,), 16, 2, 12),  # negative forced end id
    ThinkSlotsConfig((7,), (5, 8), (2**31,), 16, 2, 12),
    ThinkSlotsConfig((7,), (5, 8), (8,), 16, 0, 12),  # no slots
])
@pytest.mark.parametrize("factory", factories())
def test_bad_config_is_refused(factory, config):
    with pytest.raises(InvalidThinkingInput):
        factory(config, "cpu")


@pytest.mark.parametrize("call", [
    lambda s: s.add_request(0, [1], [], -1),  # a negative budget
    lambda s: s.add_request(0, [1], [], 2.0),
    lambda s: s.add_request(2, [1], [], 3),  # a slot outside the table
    lambda s: s.add_request(1, [1], [], 3),  # a slot in use
    lambda s: s.add_request(0, [], [], 3),  # no prompt
    lambda s: s.add_request(0, [16], [], 3),  # an id past the vocabulary
    lambda s: s.add_request(0, [1] * 13, [], 3),  # past max_model_len
    lambda s: s.remove_request(0),  # an empty slot
    lambda s: s.commit([0], [[1]]),
    lambda s: s.commit([1], [[-1]]),
    lambda s: s.commit([1], [[1] * 12]),
    lambda s: s.apply(torch.zeros(1, 16), [0], [0], [1]),  # an empty slot's row
    lambda s: s.apply(torch.zeros(2, 16), [1, 1], [0, 2], [1, 1]),  # local_pos skips one
    lambda s: s.apply(torch.zeros(2, 16), [1, 1], [0, 1], [1, -2]),  # an id below -1
    lambda s: s.apply(torch.zeros(1, 15), [1], [0], [1]),  # the wrong vocabulary
    lambda s: s.apply(torch.zeros(1, 16, dtype=torch.float16), [1], [0], [1]),
])
@pytest.mark.parametrize("factory", factories())
def test_bad_call_is_refused(factory, call):
    state = factory(GOOD, "cpu")
    state.add_request(1, [7, 1], [], 0)
    with pytest.raises(InvalidThinkingInput):
        call(state)
    logits = torch.zeros(1, 16)  # the state still works: slot 1 is over its budget of 0
    state.apply(logits, [1], [0], [1])
    assert logits[0, 5] == 1e9 and int((logits != 0).sum()) == 1
