"""The test machinery: gate, ledger, fixtures, oracles, live adapters, batch models, benchmarks,
e2e. Never imported by what vLLM loads (the plugin, the registry, the fast paths and patches)."""
