"""Installs `fused@X` as the AsyncScheduler's and the base Scheduler's
`_update_request_with_output` (the engine core's scheduler, whichever model runner the engine
uses); from 0.33.0, which has only the base method, that one. Calls outside the fast path's
domain go to upstream's method (fast.py says which)."""

from __future__ import annotations

from vllm_hotpaths import registry, vllm_env
from vllm_hotpaths.registry import version_key

HOMES = {"Scheduler": "vllm.v1.core.sched.scheduler", "AsyncScheduler": "vllm.v1.core.sched.async_scheduler"}
METHOD = "_update_request_with_output"
UPSTREAM: dict[str, object] = {}
ONE_METHOD = "0.33.0"  # the AsyncScheduler stops overriding the method


def replaced(version: str) -> list[str]:
    owners = ["Scheduler"] if version_key(version) >= version_key(ONE_METHOD) else ["Scheduler", "AsyncScheduler"]
    return [f"{owner}.{METHOD}" for owner in owners]


def install(version: str | None = None) -> list[str]:
    version = version or vllm_env.installed_version()
    names = replaced(version)
    if UPSTREAM:
        return names
    fast = registry.get("request_output").fast_for(version)()
    for name in names:
        owner = getattr(vllm_env.import_vllm(HOMES[name.split(".")[0]]), name.split(".")[0])
        upstream = owner.__dict__[METHOD]
        UPSTREAM[name] = upstream
        setattr(owner, METHOD, fast.method(upstream, asynchronous=owner.__name__ == "AsyncScheduler"))
    return names


def uninstall() -> None:
    for name in list(UPSTREAM):
        owner = name.split(".")[0]
        setattr(getattr(vllm_env.import_vllm(HOMES[owner]), owner), METHOD, UPSTREAM.pop(name))
