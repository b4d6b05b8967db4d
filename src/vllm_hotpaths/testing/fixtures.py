"""Regression fixtures: shrunk counterexamples kept as readable JSON and replayed forever.

A fixture file holds one case (the plain-data input a property draws) under
`properties/regressions/<hotpath>/`, named by its case type and a hash of its content, plus where
it came from (a failing property, or an upstream bug's link). Every property of the hot path that
takes that case type replays every fixture as an explicit Hypothesis example, on every device.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable, TypeVar

T = TypeVar("T")


class FixtureError(ValueError):
    """A fixture file that cannot be read as a case: the message names the file and the problem."""


# A case field's metadata key: the field is left out of the JSON while it holds its default, so a
# field added to a case type leaves the committed fixtures (and their names) as they were.
OMITTED_AT_DEFAULT = "omitted at default"


def to_jsonable(case: Any) -> dict:
    data = json.loads(json.dumps(dataclasses.asdict(case)))  # tuples become lists
    for f in dataclasses.fields(case):
        if f.metadata.get(OMITTED_AT_DEFAULT) and getattr(case, f.name) == f.default:
            del data[f.name]
    return data


def _tuples(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    return value


def from_jsonable(case_type: Callable[..., T], data: dict) -> T:
    return case_type(**{key: _tuples(value) for key, value in data.items()})


def encode_lines(record: dict, indent: str = "") -> str:
    """JSON with one line per field and per list item; inner values stay on their line."""
    inner = indent + " "
    if isinstance(record, dict) and any(isinstance(v, (dict, list)) for v in record.values()):
        fields = [f"{inner}{json.dumps(k)}: {encode_lines(v, inner)}" for k, v in record.items()]
        return "{\n" + ",\n".join(fields) + "\n" + indent + "}"
    if isinstance(record, list) and record and all(isinstance(v, list) for v in record):
        items = [inner + json.dumps(v) for v in record]
        return "[\n" + ",\n".join(items) + "\n" + indent + "]"
    return json.dumps(record)


def path_for(directory: Path, hotpath: str, case: Any) -> Path:
    """Where `case`'s fixture lives under `directory`: named by its type and a hash of its content."""
    payload = {"case_type": type(case).__name__, "case": to_jsonable(case)}
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]
    return Path(directory) / hotpath / f"{type(case).__name__}-{digest}.json"


def save(directory: Path, hotpath: str, case: Any, source: str, link: str | None = None) -> Path:
    """Write `case` as a fixture (idempotent: same content, same file); returns its path."""
    payload = {"case_type": type(case).__name__, "case": to_jsonable(case)}
    path = path_for(directory, hotpath, case)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {"hotpath": hotpath, "source": source, "link": link, **payload}
        path.write_text(encode_lines(record) + "\n")
    return path


def shown(path: Path, root: Path) -> str:
    """A fixture's path as reports print it: relative to the suite's root when inside it."""
    path, root = Path(path).resolve(), Path(root).resolve()
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def load(directory: Path, hotpath: str, case_type: type[T]) -> list[tuple[Path, T]]:
    """Every fixture of `hotpath` holding a `case_type`, sorted by file name (stable for xdist);
    FixtureError for a file that is not one."""
    return [(path, read(path, case_type))
            for path in sorted((Path(directory) / hotpath).glob(f"{case_type.__name__}-*.json"))]


def read(path: Path, case_type: type[T]) -> T:
    """The case in the fixture file `path`; FixtureError naming the file and the problem."""
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise FixtureError(f"fixture {path}: not readable JSON ({err})") from None
    if not isinstance(record, dict) or not isinstance(record.get("case"), dict):
        raise FixtureError(f"fixture {path}: no \"case\" object (a fixture holds "
                           f"{{\"case_type\": ..., \"case\": {{...}}}})")
    if record.get("case_type", case_type.__name__) != case_type.__name__:
        raise FixtureError(f"fixture {path}: its case_type is {record['case_type']!r}, its name says "
                           f"{case_type.__name__}")
    fields = {f.name for f in dataclasses.fields(case_type)}
    unknown, missing = set(record["case"]) - fields, {
        f.name for f in dataclasses.fields(case_type)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING} - set(record["case"])
    if unknown or missing:
        raise FixtureError(f"fixture {path}: does not match {case_type.__name__}"
                           + (f"; unknown fields {sorted(unknown)}" if unknown else "")
                           + (f"; missing fields {sorted(missing)}" if missing else ""))
    try:
        return from_jsonable(case_type, record["case"])
    except (TypeError, ValueError) as err:
        raise FixtureError(f"fixture {path}: not a valid {case_type.__name__} ({err})") from None


def committed_path(directory: Path, hotpath: str, case: Any) -> Path | None:
    """The fixture file under `directory` that holds `case`, if there is one."""
    try:
        path = path_for(directory, hotpath, case)
    except TypeError:  # not a dataclass: never a fixture
        return None
    return path if path.exists() else None


def unwritable(folder: Path) -> str | None:
    """Why files cannot be written under `folder` (made if missing), or None."""
    existing = Path(folder)
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable"
    return None


def link_of(path: Path) -> str | None:
    """The upstream issue or PR a fixture was committed for (None for a found failure)."""
    return json.loads(Path(path).read_text()).get("link")


def replayed(hotpath: str, case_type: type, argname: str, directory: Path, convert: Callable | None = None):
    """Decorator: add every committed `case_type` fixture of this hot path as an explicit example
    (`convert` adapts it to the property's own case type). VLLM_HOTPATHS_NO_REPLAY=1 turns replay
    off, to show that generation alone finds a bug."""
    from hypothesis import example

    def decorate(test):
        if os.environ.get("VLLM_HOTPATHS_NO_REPLAY") == "1":
            return test
        try:
            cases = load(directory, hotpath, case_type)
        except FixtureError as err:  # the test fails with this line (conftest); collection goes on
            import pytest

            return pytest.mark.broken_fixture(str(err))(test)
        for _, case in reversed(cases):
            test = example(**{argname: convert(case) if convert else case})(test)
        return test

    return decorate
