"""Runner-change checks: what Model Runner V2 changes for the same requests.

For a Model Runner V2 hot path (registry `v1_counterpart`), the reference of the v1 hot path it
replaces is given MRv2's request streams (the hot path's `Checks.v1_counterpart` adapts them)
and compared with the installed vLLM's MRv2 code. Every difference must be named by a ledger
entry of kind "runner-change" for that device; each entry met is saved as a fixture carrying its
link, and the row lists the entries met. A difference no entry names fails.
"""

from __future__ import annotations

from vllm_hotpaths import runners
from vllm_hotpaths.testing import drift, ledger
from vllm_hotpaths.testing.laws import Side, compare_plainly


def check_against_v1(hotpath, checks, vllm_version: str, device: str, log, request) -> None:
    v1 = checks.v1_counterpart(vllm_version)
    log.reference_version = f"{v1.version} ({hotpath.v1_counterpart}, v1)"
    live = Side(f"vLLM {vllm_version} ({runners.TITLES['mrv2']})", hotpath.live_factory(), vllm_version)
    shown = drift.show_named_differences(
        checks, v1, live, device, log, key=f"runner-change:{vllm_version}:{device}", plain_judge=compare_plainly,
        named=lambda case, failure: ledger.explain_runner_change(hotpath.name, vllm_version, device, case,
                                                                 str(failure)),
        unnamed=f"{v1.label} differs from vLLM {vllm_version}'s Model Runner V2 where no runner-change "
                f"entry names it", one_per_case=True)
    drift.save_shown(hotpath.name, shown, log, request)
