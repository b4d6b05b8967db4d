"""Bit-exact fast paths for vLLM's sampler hot paths, checked against frozen upstream semantics."""

__version__ = "0.1.0"
