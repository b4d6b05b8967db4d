"""Kernels compiled for a CUDA target on a machine without a GPU.

Triton's interpreter, which runs every CPU row, accepts kernels that the CUDA compiler refuses: a
branch that turns a bf16 value into fp32 is one. So the kernels that vLLM hands logits of the
model's dtype are compiled here, to PTX and a cubin for an H100/H200 (sm_90), by Triton's own
compiler and bundled ptxas, in a process without the interpreter: no GPU or driver is needed.
"""

import os
import subprocess
import sys
import textwrap

# vLLM 0.26 penalizes the model's logits in place (bf16 or fp16), the other releases fp32 copies:
# the compact tables' penalties kernel meets all three (sampler_mrv2/fast.py).
COMPILE_PENALTIES = textwrap.dedent("""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from vllm_hotpaths.sampler_mrv2.fast import _penalties_kernel

    other = {"row_stride": "i32", "slot_ptr": "*i32", "local_pos_ptr": "*i32", "input_ids_ptr": "*i32",
             "rep_ptr": "*fp32", "freq_ptr": "*fp32", "pres_ptr": "*fp32", "pen_row_ptr": "*i32",
             "counts_ptr": "*i32", "prompt_bits_ptr": "*i32", "words": "i32", "vocab_size": "i32",
             "BLOCK": "constexpr", "MAX_DRAFTS": "constexpr"}
    for logits in ("fp32", "bf16", "fp16"):
        for drafts in (0, 4):
            source = ASTSource(_penalties_kernel, {"logits_ptr": "*" + logits, **other},
                               constexprs={"BLOCK": 1024, "MAX_DRAFTS": drafts})
            compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32))
            assert compiled.asm["cubin"], (logits, drafts)
            print("compiled", logits, drafts)
""")


def test_compact_tables_penalties_kernel_compiles_for_cuda_with_each_logits_dtype():
    env = dict(os.environ, TRITON_INTERPRET="0")
    done = subprocess.run([sys.executable, "-c", COMPILE_PENALTIES], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("compiled") == 6, done.stdout
