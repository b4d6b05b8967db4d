"""Command line: `vllm-hotpaths gate`, `matrix`, `changes`, `bench`, `e2e`, `throughput`, `contracts`, `results`."""

from __future__ import annotations

import argparse
import json
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from vllm_hotpaths import registry


def own_version() -> str:
    try:
        return version("vllm-hotpaths")
    except PackageNotFoundError:  # run from a source tree that pip has not installed
        return "(not installed: run from a source tree)"


def _gate(args) -> int:
    from vllm_hotpaths import plugin
    from vllm_hotpaths.testing import gate, suite

    try:
        root = suite.root(args.suite)
    except suite.SuiteNotFound as err:
        print(f"gate: {err}", file=sys.stderr)
        return 2
    options = gate.GateOptions(
        profile=args.profile, root=root, report_dir=Path(args.report_dir).resolve(),
        require_cuda=args.require_cuda, require_vllm=args.require_vllm, impls=args.impl,
        workers=args.workers, fixture_dir=Path(args.fixture_dir).resolve() if args.fixture_dir else None,
        hotpaths=args.hotpath or [], record=args.record,
        junit_xml=Path(args.junit_xml).resolve() if args.junit_xml else None, fail_on_skip=args.fail_on_skip,
        fail_on_removed=args.fail_on_removed, seed=args.seed, timeout=args.timeout, runner=args.runner,
        trace_dir=Path(args.trace_vllm).resolve() if args.trace_vllm else None, checks=args.check or [],
        generated_only=args.generated_only, rows=args.rows)
    if options.impls and options.fixture_dir is None:  # a candidate's failures stay out of the checkout
        options.fixture_dir = options.report_dir / "fixtures"
    problems = options.problems()
    if problems:
        for problem in problems:
            print(f"gate: {problem}", file=sys.stderr)
        return 2
    if args.vllm:
        return gate.in_environment(args.vllm, options)
    return gate.run(options, record_to=plugin.validated_file() if args.record else None)


def _bench(args, argv: list[str] | None = None) -> int:
    import torch

    devices = ["cpu", "cuda"] if args.device == "all" else [args.device]
    if "cuda" in devices and not torch.cuda.is_available():
        if args.device == "cuda":
            print("bench: no CUDA device is visible", file=sys.stderr)
            return 2
        devices.remove("cuda")
    names = args.hotpath or [n for n, hp in registry.HOTPATHS.items() if hp.bench]
    records = []
    for name in names:
        hotpath = registry.get(name)
        if not hotpath.bench:
            print(f"bench: hot path {name!r} has no benchmark", file=sys.stderr)
            return 2
        for device in devices:
            records += registry.resolve(hotpath.bench)(device=device, quick=args.quick)
    from vllm_hotpaths.testing.results import baseline_s

    gpu = torch.cuda.get_device_name() if "cuda" in devices else None
    print(f"{'hot path':10} {'device':6} {'size':28} {'baseline':>12} {'fast':>12} {'ratio':>9}  case")
    for r in records:
        size = " ".join(f"{k}={v}" for k, v in r["size"].items())
        print(f"{r['hotpath']:10} {r['device']:6} {size:28} {baseline_s(r) * 1e3:10.3f}ms "
              f"{r['fast_s'] * 1e3:10.3f}ms {r['ratio']:8.1f}x  {r['case']}")
    if gpu:
        print(f"cuda device: {gpu}")
    if args.json:
        command = "vllm-hotpaths " + " ".join(sys.argv[1:] if argv is None else argv)
        Path(args.json).write_text(json.dumps({"command": command, "cuda_device": gpu, "records": records},
                                              indent=1) + "\n")
    if args.plot:
        from vllm_hotpaths.testing.plot import plot_bench

        try:
            plot_bench(records, Path(args.plot))
            print(f"plot: {args.plot}")
        except ImportError:
            print("plot skipped: matplotlib is not installed (pip install vllm-hotpaths[bench])")
    return 0


def _results(args) -> int:
    from vllm_hotpaths.testing import results

    for page in results.write([Path(p) for p in args.gate_report], [Path(p) for p in args.bench], Path(args.out)):
        print(f"results: {page}")
    return 0


CONTRACTS_MARK = "<!-- contracts: generated from the registry by `vllm-hotpaths contracts`"


def contracts_in(text: str) -> tuple[int, int]:
    """(start, end) of the fenced block after the contracts mark in a page."""
    mark = text.index(CONTRACTS_MARK)
    start = text.index("```\n", mark) + 4
    return start, text.index("```", start)


def _contracts(args) -> int:
    text = registry.contracts_text()
    if not args.write:
        print(text)
        return 0
    page = Path(args.write)
    old = page.read_text()
    try:
        start, end = contracts_in(old)
    except ValueError:
        print(f"contracts: {page} has no block after the line starting {CONTRACTS_MARK!r}", file=sys.stderr)
        return 2
    page.write_text(old[:start] + text + "\n" + old[end:])
    print(f"contracts: written into {page}")
    return 0


def main(argv: list[str] | None = None) -> int:
    from vllm_hotpaths.testing import e2e as e2e_module  # the test machinery, only for the command line

    from vllm_hotpaths.testing.gate import CHECKS, PROFILES, ROWS
    from vllm_hotpaths.testing.watchdog import DEFAULT_SECONDS

    parser = argparse.ArgumentParser(prog="vllm-hotpaths")
    parser.add_argument("--version", action="version", version=f"%(prog)s {own_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    defaults = argparse.ArgumentDefaultsHelpFormatter
    gate = sub.add_parser("gate", help="run every hot path's properties and conformance checks",
                          formatter_class=defaults)
    gate.add_argument("--profile", default="gate", choices=PROFILES,
                      help="Hypothesis profile: examples per property (smoke 10, dev 60, ci 150, gate 1500, soak 25000)")
    gate.add_argument("--seed", type=int, default=None,
                      help="Hypothesis' seed, to replay a run (its report names the seed); default: a fresh one")
    gate.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                      help="time limit per property; a property over it fails and the gate goes on; "
                           "default by profile (" + ", ".join(f"{p} {DEFAULT_SECONDS[p]:g} s" for p in PROFILES)
                           + "), 0: none")
    gate.add_argument("--require-cuda", action="store_true", help="a missing GPU is a failure")
    gate.add_argument("--require-vllm", action="store_true", help="a missing vLLM is a failure")
    gate.add_argument("--impl", action="append", default=[], metavar="HOTPATH=MODULE:ATTR",
                      help="check this candidate instead of the shipped fast path (repeatable; "
                           "`vllm-hotpaths contracts` prints what each hot path's candidate provides)")
    gate.add_argument("--hotpath", action="append", choices=sorted(registry.HOTPATHS),
                      help="only this hot path's properties (repeatable; default: all)")
    gate.add_argument("--runner", default="all", choices=("v1", "mrv2", "all"),
                      help="only the hot paths whose upstream this model runner calls (v1: Model Runner "
                           "v1, mrv2: Model Runner V2)")
    gate.add_argument("--check", action="append", choices=CHECKS,
                      help="only this kind of check (repeatable; default: all)")
    gate.add_argument("--rows", default="all", choices=ROWS,
                      help="own: only the properties that run no vLLM code (the same verdict on every "
                           "release); vllm: only the others (the release matrix runs own once, vllm per release)")
    gate.add_argument("-n", "--workers", default=None, help="pytest-xdist workers (e.g. auto)")
    gate.add_argument("--report-dir", default=".", help="where gate-report.json/.md are written")
    gate.add_argument("--fixture-dir", default=None,
                      help="where failures write fixtures (default: properties/regressions; with "
                           "--impl, REPORT_DIR/fixtures)")
    gate.add_argument("--vllm", metavar="X.Y.Z",
                      help="gate this vLLM release (0.16.0 or later) in its own environment .venvs/vllm-X.Y.Z, "
                           "made once from the release's own metadata; default: the installed vLLM")
    gate.add_argument("--trace-vllm", metavar="DIR",
                      help="note into DIR the vLLM functions each hot path's properties run (the matrix's "
                           "fingerprints)")
    gate.add_argument("--suite", metavar="DIR",
                      help="the checkout holding properties/ (default: the source tree vllm-hotpaths "
                           "was installed from)")
    gate.add_argument("--record", action="store_true",
                      help="write the hot paths whose checks all held to the plugin's validated file")
    gate.add_argument("--generated-only", action="store_true",
                      help="leave out the committed fixtures: what generated cases alone find")
    gate.add_argument("--junit-xml", metavar="PATH", help="also write pytest's JUnit XML report")
    gate.add_argument("--fail-on-skip", action="store_true",
                      help="a skipped row is a failure (CI on a GPU runner with vLLM installed)")
    gate.add_argument("--fail-on-removed", action="store_true",
                      help="a row whose upstream code the installed vLLM removed (status removed) is a "
                           "failure: for teams whose own patches need that code")
    gate.set_defaults(func=_gate)
    bench = sub.add_parser("bench", help="time the baseline (upstream's own code where it runs, else a "
                           "reference) vs fast, side by side", formatter_class=defaults)
    bench.add_argument("--hotpath", action="append", choices=sorted(registry.HOTPATHS))
    bench.add_argument("--device", default="all", choices=["cpu", "cuda", "all"])
    bench.add_argument("--quick", action="store_true", help="fewer sizes and steps")
    bench.add_argument("--json", help="write the records as JSON")
    bench.add_argument("--plot", help="write a PNG of cost against size")
    bench.set_defaults(func=_bench)
    e2e = sub.add_parser("e2e", help="the same batches through a real vLLM engine with and without the plugin (GPU)")
    e2e_module.add_arguments(e2e)  # the options live next to the code that reads them
    e2e.set_defaults(func=e2e_module.run)
    from vllm_hotpaths.testing import throughput as throughput_module

    throughput = sub.add_parser("throughput", help="output tokens per second of whole generate calls, upstream "
                                "and the plugin taking turns, vLLM's default engine settings (GPU)",
                                formatter_class=defaults)
    throughput_module.add_arguments(throughput)
    throughput.set_defaults(func=throughput_module.run, check_arguments=throughput_module.check_arguments)
    contracts = sub.add_parser("contracts", help="print each hot path's --impl contract (from the registry)")
    contracts.add_argument("--write", metavar="PAGE", help="replace the contracts block of this Markdown page")
    contracts.set_defaults(func=_contracts)
    from vllm_hotpaths.testing import matrix as matrix_module

    matrix = sub.add_parser("matrix", help="the gate over many vLLM releases, sharing the verdicts of releases "
                            "that run the same vLLM code; writes OUT/matrix.md", formatter_class=defaults)
    matrix_module.add_arguments(matrix)
    matrix.set_defaults(func=matrix_module.run)
    from vllm_hotpaths.testing import release_changes

    changes = sub.add_parser("changes", help="what changes for your sampled tokens from release X to Y, "
                             "composed from the consecutive releases' changes this suite knows")
    release_changes.add_arguments(changes)
    changes.set_defaults(func=release_changes.run)
    results = sub.add_parser("results", help="write Markdown pages of results from gate reports and bench JSON")
    results.add_argument("--gate-report", action="append", default=[], metavar="JSON", help="a gate-report.json")
    results.add_argument("--bench", action="append", default=[], metavar="JSON", help="a `bench --json` file")
    results.add_argument("--out", default="docs/results", help="the pages' folder (default: docs/results)")
    results.set_defaults(func=_results)
    args = parser.parse_args(argv)
    if getattr(args, "check_arguments", None):
        args.check_arguments(throughput, args)
    if args.func is _bench:
        return _bench(args, argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
