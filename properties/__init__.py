"""The property suite. `REGRESSIONS` holds the committed fixtures, replayed by every run
(VLLM_HOTPATHS_REGRESSIONS names another folder of them)."""

import os
from pathlib import Path

REGRESSIONS = Path(os.environ.get("VLLM_HOTPATHS_REGRESSIONS") or Path(__file__).with_name("regressions"))
SUITE_ROOT = Path(__file__).parent.parent  # where reports print fixture paths from


def committed_examples(hotpath: str, case_type: type, argname: str, convert=None):
    """`fixtures.replayed` over the committed fixtures."""
    from vllm_hotpaths.testing import fixtures

    return fixtures.replayed(hotpath, case_type, argname, REGRESSIONS, convert=convert)
