"""Imported by the fork server of tests/forked_pytest.py before it forks: vLLM's configuration
package (tests/vllm_configuration.py), about 3.5 s of every run on 2 cores."""

import gc

from tests.vllm_configuration import import_vllm_configuration

import_vllm_configuration()

# Everything imported so far lives as long as the runs: out of the collector's way (each full
# collection of a run would walk it again) and of copy-on-write (a collection writes to it).
gc.freeze()
