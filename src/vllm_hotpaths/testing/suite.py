"""Where the property suite is: the folder holding `properties/` and `strategies/`.

The gate runs the suite of the source tree this package was installed from (pip records it in
the distribution's `direct_url.json`, PEP 610), or the folder given explicitly (`--suite`, or
VLLM_HOTPATHS_SUITE).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
from pathlib import Path
from urllib.parse import unquote, urlparse


class SuiteNotFound(LookupError):
    pass


def _installed_from() -> Path | None:
    # Several records may be found (a build's egg-info on the path has no direct_url.json).
    for dist in importlib.metadata.distributions(name="vllm-hotpaths"):
        text = dist.read_text("direct_url.json")
        url = urlparse(json.loads(text).get("url", "")) if text else None
        if url and url.scheme == "file":
            return Path(unquote(url.path))
    return None


def root(explicit: str | Path | None = None) -> Path:
    """The suite's folder: `explicit`, else VLLM_HOTPATHS_SUITE, else the source tree this
    package was installed from. Raises SuiteNotFound naming what was tried."""
    tried = []
    for origin, folder in (("--suite", explicit), ("VLLM_HOTPATHS_SUITE", os.environ.get("VLLM_HOTPATHS_SUITE")),
                           ("the source tree vllm-hotpaths was installed from", _installed_from())):
        if not folder:
            continue
        folder = Path(folder).resolve()
        if (folder / "properties").is_dir():
            return folder
        tried.append(f"{origin}: {folder} has no properties/ folder")
    raise SuiteNotFound("the property suite was not found (" + ("; ".join(tried) or "vllm-hotpaths was "
                        "not installed from a source tree") + "); give the checkout with --suite DIR")
