"""The `penalties` hot path; implementations are reached through `vllm_hotpaths.registry`."""

from vllm_hotpaths import vllm_env
from vllm_hotpaths.penalties.reference import InvalidTokenId

# The fused kernels are Triton: without a GPU they are defined for Triton's interpreter.
vllm_env.set_cpu_environment()

__all__ = ["InvalidTokenId"]
