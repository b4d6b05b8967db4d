"""Relauncher: only kernels that specialize on no argument value are relaunched, and its cache key
separates what Triton compiles separately (constexpr values, dtypes, integer widths)."""

import pytest
import torch
import triton.language as tl
from triton.runtime.jit import JITFunction  # the compiled kind, also where Triton interprets

from vllm_hotpaths.triton_launch import Relauncher, unspecialized


def _kernel(ptr, n, BLOCK: tl.constexpr):
    pass


def test_a_kernel_that_specializes_is_refused():
    with pytest.raises(ValueError, match=r"_kernel: parameters \['ptr', 'n'\] must be in do_not_specialize"):
        Relauncher(JITFunction(_kernel))
    with pytest.raises(ValueError, match=r"\['n'\]"):
        Relauncher(JITFunction(_kernel, do_not_specialize=["ptr"], do_not_specialize_on_alignment=["ptr", "n"]))


def test_key_separates_what_triton_compiles_separately(monkeypatch):
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    relaunch = Relauncher(JITFunction(_kernel, **unspecialized("ptr", "n")))
    x64, x32 = torch.zeros(2, dtype=torch.int64), torch.zeros(2, dtype=torch.int32)
    key = relaunch.key((x64, 7, 16))
    assert key == relaunch.key((x64.clone(), 1, 16))  # values are not specialized on
    assert key == relaunch.key((x64, 2**31 - 1, 16))
    assert relaunch.key((x64, 2**31, 16)) == relaunch.key((x64, -(2**31) - 1, 16))  # both i64
    different = [(x32, 7, 16), (x64, 7, 32), (x64, 2**31, 16), (x64, 2**63, 16)]
    assert len({key, *map(relaunch.key, different)}) == 1 + len(different)
    assert relaunch.key((x64, 7.0, 16)) is None  # an argument kind it does not know
