"""The vLLM plugin (entry point `vllm_hotpaths` in the group `vllm.general_plugins`): installs
into the running vLLM the fast paths that the gate validated for its version.

`validated.json` (written by `vllm-hotpaths gate --record`) lists, per hot path, the vLLM
versions for which every check passed. A hot path is installed only for a listed version;
otherwise upstream is kept and a warning names the gate command that would validate it.
VLLM_HOTPATHS selects: unset or "all" (every hot path that has a patch), "off" (none), or
names separated by commas. VLLM_HOTPATHS_VALIDATED names another validated file. Loading twice
installs nothing twice. Each patch falls back to upstream, at run time, for rows it cannot vouch
for (its module says which).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from vllm_hotpaths import registry, vllm_env

VALIDATED = Path(__file__).with_name("validated.json")
logger = logging.getLogger("vllm.vllm_hotpaths")  # shown by vLLM's own log handler
_installed: dict[str, list[str]] = {}  # hot path -> what its patch replaced


def validated_file() -> Path:
    return Path(os.environ.get("VLLM_HOTPATHS_VALIDATED", VALIDATED))


def load_validated(path: Path | None = None) -> dict[str, dict[str, dict]]:
    """hot path -> {vLLM version -> what the gate recorded}."""
    path = path or validated_file()
    return json.loads(path.read_text()) if path.exists() else {}


def selected() -> list[str]:
    """The hot paths VLLM_HOTPATHS asks for (those with a patch), or a ValueError naming the
    unknown ones."""
    value = os.environ.get("VLLM_HOTPATHS", "all").strip()
    patchable = [name for name, hp in registry.HOTPATHS.items() if hp.patch]
    if value.lower() in ("", "all"):
        return patchable
    if value.lower() in ("off", "none", "0"):
        return []
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in patchable]
    if unknown:
        raise ValueError(f"VLLM_HOTPATHS names {', '.join(unknown)}; hot paths with a patch: "
                         f"{', '.join(patchable)} (or all, off)")
    return names


def installed() -> dict[str, list[str]]:
    """Hot path -> what its patch replaced (empty: validated, but left to upstream)."""
    return dict(_installed)


def register() -> dict[str, list[str]]:
    """Install every selected hot path validated for the running vLLM; returns what is installed."""
    version = vllm_env.installed_version()
    validated = load_validated()
    for name in selected():
        if name in _installed:
            continue
        if version not in validated.get(name, {}):
            logger.warning(
                "vllm-hotpaths: %s is not validated for vLLM %s, upstream kept; validate it with "
                "`vllm-hotpaths gate --vllm %s --hotpath %s --record`", name, version, version, name)
            continue
        reason = registry.get(name).patch_needed(version)
        if reason is not None:
            logger.info("vllm-hotpaths: %s left to upstream on vLLM %s: %s", name, version, reason)
            _installed[name] = []
            continue
        _installed[name] = registry.resolve(registry.get(name).patch)(version)
        logger.info("vllm-hotpaths: %s installed for vLLM %s (%s)", name, version, ", ".join(_installed[name]))
    return dict(_installed)
