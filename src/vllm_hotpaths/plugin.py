"""The vLLM plugin (entry point `vllm_hotpaths` in the group `vllm.general_plugins`): installs
into the running vLLM the fast paths that the gate validated for its version.

`validated.json` (written by `vllm-hotpaths gate --record`) lists, per hot path, the vLLM
versions for which every check passed. A hot path is installed only for a listed version;
otherwise upstream is kept and a warning names the gate command that would validate it.
A hot path is installed on a CUDA engine only where its record has CUDA rows (the gate on a
GPU machine writes them). VLLM_HOTPATHS selects: unset or "all" (every hot path that has a
patch), "off" (none, logged once), or names separated by commas (unknown ones are logged and
left out). VLLM_HOTPATHS_VALIDATED names another validated file. Loading twice
installs nothing twice. A patch whose module says it is not needed on this vLLM (`not_needed`:
upstream already does the work) or holds it back (`held_back`: measured faster nowhere) is not
installed; one line says why.
Each patch falls back to upstream, at run time, for rows it cannot vouch
for (its module says which).

A patch replaces a function of one model runner (registry `runner`): installed, it is called
only by engines that run that runner. Once vLLM has decided an engine's runner, one line says
which runner it is and which installed patches it calls (`runners.watch`).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from vllm_hotpaths import registry, runners, vllm_env

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
    """The hot paths VLLM_HOTPATHS asks for (those with a patch); unknown names are left out
    with a warning, so that a typo never stops vLLM from starting."""
    value = os.environ.get("VLLM_HOTPATHS", "all").strip()
    patchable = [name for name, hp in registry.HOTPATHS.items() if hp.patch]
    if value.lower() in ("", "all"):
        return patchable
    if value.lower() in ("off", "none", "0"):
        return []
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in patchable]
    if unknown:
        logger.warning("vllm-hotpaths: VLLM_HOTPATHS names %s, which no patch has (hot paths with a patch: "
                       "%s; or all, off); installing the others", ", ".join(unknown), ", ".join(patchable))
    return [n for n in names if n in patchable]


def engine_device() -> str:
    """The device vLLM runs the model on here, as the gate names devices (asked without
    initializing CUDA: see `vllm_env.gpu_visible`)."""
    return "cuda" if vllm_env.gpu_visible() else "cpu"


def installed() -> dict[str, list[str]]:
    """Hot path -> what its patch replaced (empty: validated, but left to upstream)."""
    return dict(_installed)


def called_by(runner: str) -> list[str]:
    """The installed patches (those that replaced something) that an engine on `runner` calls."""
    return sorted(name for name, replaced in _installed.items() if replaced and runners.calls(runner, registry.get(name).runner))


def announce(runner: str) -> None:
    """One line per engine runner: which installed patches it calls, which it never reaches."""
    idle = sorted(name for name, replaced in _installed.items() if replaced and name not in called_by(runner))
    logger.info("vllm-hotpaths: this engine runs %s; installed patches it calls: %s%s", runners.TITLES[runner],
                ", ".join(called_by(runner)) or "none",
                f"; installed but not called by this runner: {', '.join(idle)}" if idle else "")


def register() -> dict[str, list[str]]:
    """Install every selected hot path validated for the running vLLM on this engine's device;
    returns what is installed."""
    version = vllm_env.installed_version()
    validated = load_validated()
    names = selected()
    if not names:
        logger.info("vllm-hotpaths: off (VLLM_HOTPATHS=%s), upstream kept everywhere",
                    os.environ.get("VLLM_HOTPATHS", ""))
    device = engine_device()
    for name in names:
        if name in _installed:
            continue
        held_back = registry.get(name).held_back()
        if held_back is not None:
            logger.info("vllm-hotpaths: %s held back on vLLM %s, upstream kept: %s", name, version, held_back)
            _installed[name] = []
            continue
        entry = validated.get(name, {}).get(version)
        devices = entry.get("devices", ()) if entry else ()
        if entry is None or not (device in devices or (registry.get(name).host_only and "cpu" in devices)):
            logger.warning(
                "vllm-hotpaths: %s is not validated for vLLM %s%s, upstream kept; validate it with "
                "`vllm-hotpaths gate --vllm %s --hotpath %s --record`%s", name, version,
                "" if entry is None else f" on {device} (validated on {', '.join(entry.get('devices', ())) or 'nothing'})",
                version, name, "" if device == "cpu" else f" on a {device} machine")
            continue
        reason = registry.get(name).patch_needed(version)
        if reason is not None:
            logger.info("vllm-hotpaths: %s left to upstream on vLLM %s: %s", name, version, reason)
            _installed[name] = []
            continue
        try:
            _installed[name] = registry.resolve(registry.get(name).patch)(version)
        except Exception as err:  # vLLM does not catch a plugin's error: say which patch, and the way out
            rest = ",".join(n for n in names if n != name) or "off"
            raise RuntimeError(
                f"vllm-hotpaths: the {name} patch could not be installed on vLLM {version} ({type(err).__name__}: "
                f"{err}); this vLLM's code differs from what the gate validated for {version}. Start without "
                f"it with VLLM_HOTPATHS={rest}, and gate this install: `vllm-hotpaths gate --hotpath {name}`") from err
        runner = registry.get(name).runner
        logger.info("vllm-hotpaths: %s installed for vLLM %s (%s), called by %s", name, version,
                    ", ".join(_installed[name]),
                    "every engine (its scheduler)" if runner == "any" else f"{runners.TITLES[runner]} engines only")
    if names and not runners.watch(announce):  # no automatic choice: the variable decides
        runners.announce_once(runners.runner_of(None), announce)
    return dict(_installed)
