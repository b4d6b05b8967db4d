"""recovered_tokens' launch plans: a plan relaunches the kernel Triton compiled for a kind of tensors
(dtype, 16-byte alignment) only for tensors of that kind, with every argument of this call
(fast.LaunchPlan). Triton's kernel is faked here: its compiled launches run only on a GPU, where
the equivalence properties run them (test_one_candidate_serves_each_launch_shape_in_turn)."""

import pytest
import torch
import triton

from vllm_hotpaths.recovered_tokens import fast

CONSTEXPRS = (512, 8, True, False, 0)


class Compiled:
    function, packed_metadata = "function", "packed"

    def __init__(self, calls):
        self.calls = calls

    def launch_metadata(self, grid, stream, *every):
        return ("metadata", grid, stream, every)

    def run(self, *launch):
        self.calls.append(("run", launch))


class Kernel:
    def __init__(self):
        self.calls = []

    def __getitem__(self, grid):
        def launch(*args, **options):
            self.calls.append(("triton", grid, args, options))
            return Compiled(self.calls)
        return launch


def plan(constexprs=CONSTEXPRS):
    scratch = torch.zeros(4)
    return fast.LaunchPlan(Kernel(), (2, 3, 4), 512, 4, scratch, scratch, scratch, {"BLOCK": 512, "num_warps": 4},
                           7, constexprs)


def arguments(ids_dtype=torch.int32, offset=0):
    tensors = [torch.zeros(64)[offset:offset + 8] if i == 7 else torch.zeros(8) for i in range(fast.TENSOR_ARGS)]
    tensors[5] = torch.zeros(8, dtype=ids_dtype)
    return (*tensors, 1000, 512, 4)


def test_a_plan_relaunches_only_for_tensors_of_a_kind_triton_compiled(monkeypatch):
    monkeypatch.setattr(fast, "RELAUNCH", True)
    p = plan()
    first, again, wider, shifted = arguments(), arguments(), arguments(torch.int64), arguments(offset=1)
    for args in (first, again, wider, shifted, wider):
        p.launch(*args)
    kinds = [call[0] for call in p.kernel.calls]
    assert kinds == ["triton", "run", "triton", "triton", "run"]
    assert p.kernel.calls[0] == ("triton", (2, 3, 4), first, {"BLOCK": 512, "num_warps": 4})
    every, hooks = (*again, *CONSTEXPRS), triton.knobs.runtime
    assert p.kernel.calls[1] == ("run", (2, 3, 4, 7, "function", "packed", ("metadata", (2, 3, 4), 7, every),
                                         hooks.launch_enter_hook, hooks.launch_exit_hook, *every))
    assert p.kernel.calls[4][1][-len(CONSTEXPRS) - 12:] == (*wider, *CONSTEXPRS)


@pytest.mark.parametrize("relaunch, constexprs", [(False, CONSTEXPRS), (True, ())],
                         ids=["another Triton", "interpreted"])
def test_without_a_checked_triton_or_a_compiled_kernel_every_launch_is_tritons(monkeypatch, relaunch, constexprs):
    monkeypatch.setattr(fast, "RELAUNCH", relaunch)
    p = plan(constexprs)
    for _ in range(3):
        p.launch(*arguments())
    assert [call[0] for call in p.kernel.calls] == ["triton"] * 3
