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

vLLM calls every general plugin without catching what it raises, so `register` never raises: a
patch that cannot be installed, a release whose code this package does not know, any error at
all keeps upstream's code and logs one line. A hot path whose upstream code the running release
removed (registry `removed`) is named with what runs in its place.

A patch replaces a function of one model runner (registry `runner`): installed, it is called
only by engines that run that runner. Once vLLM has decided an engine's runner, one line says
which runner it is and which installed patches it calls (`runners.watch`).
"""

from __future__ import annotations

import importlib
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
    returns what is installed. Never raises (module docstring)."""
    try:
        _register()
    except Exception as err:  # anything at all: vLLM must start, with upstream's code
        logger.error("vllm-hotpaths: the plugin stopped (%s: %s); every hot path not installed before "
                     "this keeps upstream's code", type(err).__name__, err)
    return dict(_installed)


def _install(name: str, version: str, names: list[str]) -> None:
    """One hot path's patch; on failure upstream's code is put back and one line says so."""
    try:
        _installed[name] = registry.resolve(registry.get(name).patch)(version)
    except Exception as err:
        _installed[name] = []
        undo = getattr(importlib.import_module(registry.get(name).patch.partition(":")[0]), "uninstall", None)
        try:
            if undo is not None:
                undo()
        except Exception:  # nothing more to put back
            pass
        rest = ",".join(n for n in names if n != name) or "off"
        logger.error("vllm-hotpaths: the %s patch could not be installed on vLLM %s (%s: %s), upstream kept; "
                     "this vLLM's code differs from what the gate validated for %s. Gate this install: "
                     "`vllm-hotpaths gate --hotpath %s` (VLLM_HOTPATHS=%s starts without trying it)",
                     name, version, type(err).__name__, err, version, name, rest)
        return
    runner = registry.get(name).runner
    logger.info("vllm-hotpaths: %s installed for vLLM %s (%s), called by %s", name, version,
                ", ".join(_installed[name]),
                "every engine (its scheduler)" if runner == "any" else f"{runners.TITLES[runner]} engines only")


def _register() -> None:
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
        try:
            _consider(name, version, validated.get(name, {}).get(version), device, names)
        except Exception as err:  # this hot path only: the others are still considered
            _installed[name] = []
            logger.error("vllm-hotpaths: %s not installed on vLLM %s (%s: %s), upstream kept", name, version,
                         type(err).__name__, err)
    if names and not runners.watch(announce):  # no automatic choice: the variable decides
        runners.announce_once(runners.runner_of(None), announce)


def _consider(name: str, version: str, entry: dict | None, device: str, names: list[str]) -> None:
    """Install hot path `name` where its record allows, or log why upstream is kept."""
    hotpath = registry.get(name)
    removed = hotpath.removed_in(version)
    if removed is not None:
        logger.info("vllm-hotpaths: %s", removed)
        _installed[name] = []
        return
    held_back = hotpath.held_back()
    if held_back is not None:
        logger.info("vllm-hotpaths: %s held back on vLLM %s, upstream kept: %s", name, version, held_back)
        _installed[name] = []
        return
    reason = hotpath.patch_needed(version)  # before the record: nothing to validate where nothing installs
    if reason is not None:
        logger.info("vllm-hotpaths: %s left to upstream on vLLM %s: %s", name, version, reason)
        _installed[name] = []
        return
    devices = entry.get("devices", ()) if entry else ()
    if entry is None or not (device in devices or (hotpath.host_only and "cpu" in devices)):
        logger.warning(
            "vllm-hotpaths: %s is not validated for vLLM %s%s, upstream kept; validate it with "
            "`vllm-hotpaths gate --vllm %s --hotpath %s --record`%s", name, version,
            "" if entry is None else f" on {device} (validated on {', '.join(entry.get('devices', ())) or 'nothing'})",
            version, name, "" if device == "cpu" else f" on a {device} machine")
        return
    _install(name, version, names)
