"""Each hot path's adapter over the installed vLLM's own code, behind the hot path's contract."""
