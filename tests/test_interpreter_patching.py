"""Triton's interpreter patched once per launch (vllm_hotpaths.interpreter_patching): the same
bits as patching at every device-function call, with one patch per launch.

Run in a fresh process: Triton keeps the patches a device-function call makes, so only a process
in which no kernel ran yet has `triton.language.core` unpatched, the case where a device function
that sees only that module must still get it patched."""

import json
import os

import pytest

SCRIPT = r'''
import json

import torch
import triton
import triton.language as tl
from triton.runtime import interpreter

from vllm_hotpaths import vllm_env
from vllm_hotpaths.interpreter_patching import once_per_launch

vllm_env.set_cpu_environment()
installed = interpreter._patch_lang
assert installed.once_per_launch, "interpreter_patching is not installed"
full = []  # each patch made in full (Triton's own, with libdevice's)


def counting(patch_lang):
    def patch(fn):
        full.append(fn.__name__)
        return patch_lang(fn)
    return patch


@triton.jit
def _shifted(x, seed, offsets):
    return x + tl.rand(seed, offsets)  # Philox: device functions of triton.language.random (sees `core` only)


@triton.jit
def _kernel(out_ptr, seed, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.extra.cuda.libdevice.log1p(offsets.to(tl.float32))
    y = _shifted(x, seed, offsets)
    tl.store(out_ptr + offsets, y - tl.max(y, axis=0))


def run(patch_lang):
    interpreter._patch_lang = patch_lang
    full.clear()
    outs = [torch.empty(4 * 64) for _ in range(2)]
    for seed, out in enumerate(outs):  # two launches: the second finds the first's patch undone
        _kernel[(4,)](out, 1234 + seed, BLOCK=64)
        assert tl.core.is_builtin(tl.load), "triton.language stays patched after a launch"
    return [out.view(torch.int32).tolist() for out in outs], len(full)


once, once_patches = run(once_per_launch(counting(installed.__wrapped__)))
every, every_patches = run(counting(installed.__wrapped__))
print(json.dumps({"same": once == every, "once": once_patches, "every": every_patches}))
'''


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs Triton's interpreter")
def test_a_launch_patches_the_language_once_and_computes_the_same_bits(run_cli):
    result = run_cli("-c", SCRIPT, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    counts = json.loads(result.stdout.strip().splitlines()[-1])
    assert counts["same"], counts
    # each launch, and triton.language.core the first time a device function sees it
    assert counts["once"] <= 3, counts
    assert counts["every"] > 4 * counts["once"], counts  # Triton's own way: every call, every program
