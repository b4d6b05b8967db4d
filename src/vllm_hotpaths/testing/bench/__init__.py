"""Each hot path's benchmark: upstream's own code against the fast path, side by side."""
