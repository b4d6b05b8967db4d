"""Kernels compiled for a CUDA target on a machine without a GPU.

Triton's interpreter, which runs every CPU row, accepts kernels that the CUDA compiler refuses: a
branch that turns a bf16 value into fp32 is one. So the kernels that vLLM hands logits of the
model's dtype (the compact tables' penalties kernel, the fused sampling kernel the plugin
installs, the lazy pass's kernels) are compiled here, to PTX and a cubin for an H100/H200
(sm_90), by Triton's own compiler and bundled ptxas, in a process without the interpreter: no GPU
or driver is needed.
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

# What the sampling kernels' scripts share: each logits dtype with every option on and vLLM's row
# tensors as the patch hands them (int32 slots, local positions and ids, int64 positions), or
# every option off and the fast path's own int64 rows; the arguments both kernels read a row by.
SAMPLING = textwrap.dedent("""
    import itertools
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    ROWS = {"vllm": ("*i32", "*i64", "*i32", "*i32"), "own": ("*i64",) * 4}
    CASES = list(itertools.product(("fp32", "bf16", "fp16"), (("vllm", True), ("own", False))))


    def row_arguments(logits, kind):
        slot, pos, local_pos, input_ids = ROWS[kind]
        return {"logits_ptr": "*" + logits, "row_stride": "i32", "slot_ptr": slot, "pos_ptr": pos,
                "local_pos_ptr": local_pos, "input_ids_ptr": input_ids, "temp_ptr": "*fp32", "seed_ptr": "*i64",
                "rep_ptr": "*fp32", "freq_ptr": "*fp32", "pres_ptr": "*fp32", "pen_row_ptr": "*i32",
                "counts_ptr": "*i32", "prompt_bits_ptr": "*i32", "words": "i32", "vocab_size": "i32",
                "num_blocks": "i32"}


    def compile_sm90(kernel, signature, constexprs):
        signature = {**signature, **dict.fromkeys(constexprs, "constexpr")}
        compiled = triton.compile(ASTSource(kernel, signature, constexprs=constexprs),
                                  target=GPUTarget("cuda", 90, 32))
        assert compiled.asm["cubin"], (kernel, signature, constexprs)
""")

# The fused sampling kernel with each release's noise (Philox, Philox with log1p, murmur3).
COMPILE_FUSED = SAMPLING + textwrap.dedent("""
    from vllm_hotpaths.sampler_mrv2.fast import _fused_block_kernel

    for (logits, (kind, on)), noise in itertools.product(CASES, ((0, 0), (1, 0), (0, 1))):
        signature = {"block_ids_ptr": "*i64", "block_max_ptr": "*fp32", "processed_ptr": "*fp32",
                     **row_arguments(logits, kind)}
        compile_sm90(_fused_block_kernel, signature, {
            "BLOCK": 1024, "NOISE_LOG1P": noise[0], "NOISE_MURMUR3": noise[1], "CONTIG": 0 if on else 4,
            "PENALTIES": on, "MAX_DRAFTS": 4 if on else 0, "WRITE_PROCESSED": on})
        print("compiled", logits, noise, kind)
""")

# The lazy pass's two kernels with each bounded noise (Philox with log1p, murmur3); the tops
# kernel's threshold is a float atomic maximum.
COMPILE_LAZY = SAMPLING + textwrap.dedent("""
    from vllm_hotpaths.gumbel_noise import SMALLEST_UNIFORM
    from vllm_hotpaths.sampler_mrv2.fast import _rows_kernel
    from vllm_hotpaths.sampler_mrv2.lazy import DRAW_CHUNK, THRESHOLD_PER_BLOCK, TOPS_CHUNK, _draw_kernel, _tops_kernel

    for (logits, (kind, on)), noise in itertools.product(CASES, ((1, 0), (0, 1))):
        common = {"BLOCK": 1024, "NOISE_LOG1P": noise[0], "NOISE_MURMUR3": noise[1], "CONTIG": 0 if on else 4,
                  "PENALTIES": on, "MAX_DRAFTS": 4 if on else 0}
        rows = row_arguments(logits, kind)
        compile_sm90(_tops_kernel, {"top_ptr": "*fp32", "best_ptr": "*fp32", "processed_ptr": "*fp32", **rows},
                     {**common, "WRITE_PROCESSED": on, "CHUNK": TOPS_CHUNK, "PER_BLOCK": THRESHOLD_PER_BLOCK})
        print("compiled _tops_kernel", logits, noise, kind)
        compile_sm90(_draw_kernel, {"block_ids_ptr": "*i64", "block_max_ptr": "*fp32", "drawn_ptr": "*i32",
                                    "best_ptr": "*fp32", "top_ptr": "*fp32", **rows},
                     {**common, "FLOOR": SMALLEST_UNIFORM[(bool(noise[0]), bool(noise[1]))], "CHUNK": DRAW_CHUNK})
        print("compiled _draw_kernel", logits, noise, kind)

    for slot in ("*i32", "*i64"):  # the slot parameters gathered per row, ahead of both kernels
        parameters = {"temp": "*fp32", "seed": "*i64", "rep": "*fp32", "freq": "*fp32", "pres": "*fp32",
                      "pen_row": "*i32"}
        compile_sm90(_rows_kernel, {"slots_out": "*i32", **{name + "_out": kind for name, kind in parameters.items()},
                                    "slot_ptr": slot, **{name + "_ptr": kind for name, kind in parameters.items()},
                                    "n": "i32"}, {"ROWS": 1024})
        print("compiled _rows_kernel", slot)
""")

def compile_for_sm90(script: str) -> str:
    """What `script` printed, run in a process without Triton's interpreter."""
    env = dict(os.environ, TRITON_INTERPRET="0")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_compact_tables_penalties_kernel_compiles_for_cuda_with_each_logits_dtype():
    out = compile_for_sm90(COMPILE_PENALTIES)
    assert out.count("compiled") == 6, out


def test_fused_sampling_kernel_compiles_for_cuda_with_each_logits_dtype_and_noise():
    out = compile_for_sm90(COMPILE_FUSED)
    assert out.count("compiled") == 18, out


def test_lazy_sampling_kernels_compile_for_cuda_with_each_logits_dtype_and_bounded_noise():
    out = compile_for_sm90(COMPILE_LAZY)
    assert out.count("compiled") == 26, out
