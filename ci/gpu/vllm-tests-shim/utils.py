"""Stands in for vLLM's `tests/utils.py`, whose imports (openai, anthropic, huggingface_hub, ...)
a GPU runner without vLLM's test extras lacks. Only what the selected test files use: each test
decorated with `create_new_process_for_each_test` runs in a forked child, as vLLM's does, and
fails when the child fails."""

import functools
import os
import traceback

import pytest


def requires_spawn_multiprocessing() -> bool:
    return False  # CUDA and CPU runners fork, as vLLM's helper decides outside ROCm and XPU


def create_new_process_for_each_test(method=None):
    def decorate(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(read)
                status = 0
                try:
                    func(*args, **kwargs)
                except pytest.skip.Exception as skipped:
                    os.write(write, f"skipped: {skipped}".encode())
                except BaseException:
                    os.write(write, traceback.format_exc().encode()[-8000:])
                    status = 1
                os._exit(status)
            os.close(write)
            with os.fdopen(read, "rb") as pipe:
                message = pipe.read().decode(errors="replace")
            _, status = os.waitpid(pid, 0)
            if os.waitstatus_to_exitcode(status) != 0:
                pytest.fail(f"forked test failed:\n{message}", pytrace=False)
            if message.startswith("skipped: "):
                pytest.skip(message[len("skipped: "):])
        return wrapper
    return decorate
