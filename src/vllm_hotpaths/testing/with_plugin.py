"""`pytest -p vllm_hotpaths.testing.with_plugin`: run a test session (vLLM's own unit tests) with
the plugin installed as vLLM's plugin loader installs it: `VLLM_HOTPATHS`, the validated
records and the engine's device decide what goes in. The header says what did."""

from __future__ import annotations

_installed: dict[str, list[str]] = {}


def pytest_configure(config) -> None:
    from vllm_hotpaths import plugin, vllm_env

    vllm_env.import_vllm("vllm")  # the same environment with or without patches (on CPU: adjusted)
    _installed.update(plugin.register())


def pytest_report_header(config) -> str:
    patched = {name: what for name, what in _installed.items() if what}
    if not patched:
        return "vllm-hotpaths: nothing installed"
    return "vllm-hotpaths installed: " + "; ".join(f"{name} ({', '.join(what)})" for name, what in patched.items())
