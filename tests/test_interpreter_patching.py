"""Triton's interpreter patched once per process (vllm_hotpaths.interpreter_patching), its
builtins called directly and shapes kept (vllm_hotpaths.interpreter_shortcuts): the same bits as
patching at every launch and device-function call with Triton's own wrappers and shapes.

Run in a fresh process: Triton keeps the patches a device-function call makes, so only a process
in which no kernel ran yet has `triton.language.core` unpatched, the case where a device function
that sees only that module must still get it patched."""

import json
import os

import pytest

SCRIPT = r'''
import json
import sys

import torch
import triton
import triton.language as tl
from triton.runtime import interpreter

from vllm_hotpaths import interpreter_shortcuts, vllm_env
from vllm_hotpaths.interpreter_patching import once_per_process

vllm_env.set_cpu_environment()
installed = interpreter._patch_lang
assert installed.once_per_process, "interpreter_patching is not installed"
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
def _kernel(out_ptr, seed, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.extra.cuda.libdevice.log1p(tl.load(out_ptr + offsets, mask=offsets < n, other=1e4))  # the last program: a masked lane wins
    y = _shifted(x, seed, offsets)
    top, lane = tl.max(y, axis=0, return_indices=True)
    tl.store(out_ptr + offsets, (y - top) * (lane + 1).to(tl.float32), mask=offsets < n)


def run(patch_lang):
    interpreter._patch_lang = patch_lang
    outs = [torch.arange(4 * 64, dtype=torch.float32) / 7 for _ in range(2)]
    for seed, out in enumerate(outs):  # two launches, each of four programs
        _kernel[(4,)](out, 1234 + seed, 4 * 64 - 5, BLOCK=64)
    return [out.view(torch.int32).tolist() for out in outs]


once = sys.argv[1] == "once"
if not once:  # Triton's interpreter as it ships, but for libdevice and Philox on the CPU
    interpreter._patch_attr = interpreter._patch_attr.__wrapped__
    interpreter_shortcuts.shipped_shapes()
bits = run(once_per_process(counting(installed.__wrapped__)) if once else counting(installed.__wrapped__))
print(json.dumps({"bits": bits, "patches": len(full), "patched_after": not tl.core.is_builtin(tl.load)}))
'''


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs Triton's interpreter")
def test_the_language_is_patched_once_and_kernels_compute_the_same_bits(run_cli):
    runs = {}
    for way in ("once", "every"):  # each in a fresh process, where nothing is patched yet
        result = run_cli("-c", SCRIPT, way, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        runs[way] = json.loads(result.stdout.strip().splitlines()[-1])
    assert runs["once"]["bits"] == runs["every"]["bits"]
    # the first launch, and triton.language.core the first time a device function sees it
    assert runs["once"]["patches"] <= 2 and runs["once"]["patched_after"], runs["once"]
    # Triton's own way: every launch and device-function call, in every program, undone at a launch's end
    assert runs["every"]["patches"] > 8 and not runs["every"]["patched_after"], runs["every"]
