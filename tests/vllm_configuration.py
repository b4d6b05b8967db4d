"""vLLM's configuration package, imported as the suite imports it (vllm_hotpaths.vllm_env): by the
fork server of tests/forked_pytest.py before it forks (tests/vllm_preload.py), and by the process
that starts the server, whose environment each run's is compared with. Importing it sets a few
variables in the environment (TORCHINDUCTOR_COMPILE_THREADS, TRITON_CACHE_AUTOTUNING, ...). Its
Triton kernels are not imported here: their modules are small, and a kernel reads TRITON_INTERPRET
when it is defined."""


def import_vllm_configuration() -> None:
    """Nothing here may fail: a vLLM that fails to import fails in the run instead, where its
    error is reported."""
    try:
        from vllm_hotpaths import vllm_env

        if vllm_env.installed_version() is not None:
            vllm_env.import_vllm("vllm.config")
    except Exception:  # noqa: BLE001 - the run imports it again and reports what failed
        pass
