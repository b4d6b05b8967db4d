"""Imported by the fork server of tests/forked_pytest.py before it forks: vLLM's configuration
package, imported as the suite imports it (vllm_hotpaths.vllm_env), about 3.5 s of every run on
2 cores. Its Triton kernels are not imported here: their modules are small, and a kernel reads
TRITON_INTERPRET when it is defined. Nothing here may stop the server: a vLLM that fails to import
fails in the run instead, where its error is reported."""

import gc

try:
    from vllm_hotpaths import vllm_env

    if vllm_env.installed_version() is not None:
        vllm_env.import_vllm("vllm.config")
except Exception:  # noqa: BLE001 - the run imports it again and reports what failed
    pass

# Everything imported so far lives as long as the runs: out of the collector's way (each full
# collection of a run would walk it again) and of copy-on-write (a collection writes to it).
gc.freeze()
