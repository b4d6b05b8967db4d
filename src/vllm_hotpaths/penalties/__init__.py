"""The `penalties` hot path; implementations are reached through `vllm_hotpaths.registry`."""

from vllm_hotpaths.penalties.reference import InvalidTokenId

__all__ = ["InvalidTokenId"]
