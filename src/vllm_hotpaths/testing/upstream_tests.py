"""vLLM's own unit tests with and without the plugin, compared from their JUnit reports.

    python -m vllm_hotpaths.testing.upstream_tests UPSTREAM PLUGIN [MORE ...]

Each run is a JUnit report or a folder of them (one per test file: vLLM's fork-per-test files
need a process that has not started CUDA yet). Prints each run's counts (skip reasons grouped) and every test that passes in the first run
(no plugin) but not in a later one. Exit status 1 when there is one, or when nothing passed
without the plugin (then nothing was compared); 2 for a report that cannot be read.
`ci/gpu/vllm-unit-tests.sh` makes the reports.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path


def outcomes(path: str | Path) -> dict[str, tuple[str, str]]:
    """Test id -> (passed | failed | skipped, message) from a JUnit XML report, or from every
    report in a folder."""
    path = Path(path)
    reports = sorted(path.glob("*.xml")) if path.is_dir() else [path]
    if not reports:
        raise OSError(f"no JUnit report in {path}")
    found: dict[str, tuple[str, str]] = {}
    for case in (case for report in reports for case in ET.parse(report).getroot().iter("testcase")):
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome, message = "failed", child.get("message", "")
            elif child.tag == "skipped" and outcome == "passed":
                outcome, message = "skipped", child.get("message", "")
        found[f"{case.get('classname')}::{case.get('name')}"] = (outcome, message)
    return found


def lost(base: dict, other: dict) -> list[str]:
    """Tests that pass in `base` but not in `other` (missing from it included)."""
    return sorted(t for t, (outcome, _) in base.items()
                  if outcome == "passed" and other.get(t, ("missing", ""))[0] != "passed")


def summary(name: str, results: dict) -> list[str]:
    counts = Counter(outcome for outcome, _ in results.values())
    lines = [f"{name}: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped "
             f"of {len(results)}"]
    reasons = Counter(message for outcome, message in results.values() if outcome == "skipped")
    lines += [f"  skipped ({n}): {reason}" for reason, n in reasons.most_common()]
    return lines


def main(argv: list[str] | None = None) -> int:
    paths = sys.argv[1:] if argv is None else argv
    if len(paths) < 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    try:
        runs = [(Path(p).stem, outcomes(p)) for p in paths]
    except (OSError, ET.ParseError) as err:
        print(f"upstream tests: cannot read a JUnit report: {err}", file=sys.stderr)
        return 2
    for name, results in runs:
        print("\n".join(summary(name, results)))
    (base_name, base), failures = runs[0], 0
    if not any(outcome == "passed" for outcome, _ in base.values()):
        print(f"FAIL: no test passed in {base_name}: nothing to compare")
        return 1
    for name, results in runs[1:]:
        for test in lost(base, results):
            outcome, message = results.get(test, ("missing", ""))
            print(f"REGRESSION {name}: {test} passed in {base_name}, {outcome} here: "
                  f"{message.splitlines()[0] if message else ''}")
            failures += 1
    passed = sum(outcome == "passed" for outcome, _ in base.values())
    print(f"{'FAIL' if failures else 'PASS'}: {failures} of the {passed} tests that pass in {base_name} "
          f"fail in {', '.join(name for name, _ in runs[1:])}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
