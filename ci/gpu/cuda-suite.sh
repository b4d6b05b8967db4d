#!/usr/bin/env bash
# The CUDA half of the suite in one call, for a GPU machine with torch and the test tools but no
# vLLM install: the gate on cpu + cuda (--require-cuda; conformance needs vLLM and is skipped;
# Triton hot paths' CPU cases run in a second, interpreted process), then the benchmarks on
# cpu + cuda. Reports, benchmark JSON/PNG and any new fixture land in $OUT.
# With VLLM_HOTPATHS_VLLM_C naming vLLM's compiled _C.abi3.so (ci/gpu/stage-vllm.sh sets it), the
# reference's CUDA arithmetic is also checked against vLLM's own CUDA op.
#   PROFILE  Hypothesis profile for the gate (default gate)
#   WORKERS  pytest-xdist workers for the gate (default 4)
#   PARTS    what to run: "gate bench" (default), "gate", "bench" or "quality" (one GPU call each
#            fits the device's per-command limit when the gate profile takes long); "quality":
#            the planted bugs that show only on CUDA (approximate division, fused multiply-add),
#            each of which must fail its law and write a fixture
#            "mrv2": the gate's Model Runner V2 rows (conformance, runner change) on cuda for the
#            importable vLLM, CPU rows left to the CPU machine (VLLM_HOTPATHS_INTERPRETER=off: this
#            image's Triton interpreter cannot run vLLM's kernels, docs/ci-gpu.md); report in
#            $OUT/mrv2-<vLLM version>; then again for each tarball in OVERLAYS
#            (stage-vllm.sh overlay: e.g. carry/vllm-py-0.33.0/py.tar.xz); MRV2_STAGED=0 leaves
#            out the staged version's own run (one call per few releases under a time limit);
#            MRV2_JOBS=N: N of those runs at a time (each gate runs one or two rows at once, so a
#            machine of many cores runs a dozen releases in the time of a few)
#            ROWS=vllm: only the rows that run vLLM (conformance, drift, patch), as the matrix gates
#            "gate" honours OVERLAYS too (GATE_STAGED=0 leaves out the staged version's run): each
#            overlay's gate writes its report in $OUT/gate-<vLLM version>; so does "bench"
#            ($OUT/bench-<vLLM version>.json; BENCH_STAGED=0 likewise)
#            "sampler-e2e": ci/gpu/sampler-e2e.py (the sampler_mrv2 patch in a Model Runner V2
#            engine against upstream, alternating pairs, on upstream's dense penalty tables; then
#            an engine with the patch's compact tables, compared with the first; needs vLLM
#            0.22.x) with SAMPLER_E2E_ARGS, JSON in $OUT/sampler-e2e{,-compact}.json
#            "equivalence": the equivalence law's cuda rows alone (the fast paths against their
#            references, no vLLM needed), with the pair properties of logits_copy and sampler_mrv2,
#            PROFILE draws, WORKERS workers
#            "sweep": `python -m properties.quality.sweep` on the machine's CPU cores (SEEDS seeds,
#            default 10; WORKERS runs at once) for HOTPATHS, the hot paths whose laws need no vLLM
#            (default penalties swap_states think_budget recovered_tokens); $OUT/sweep.{txt,json}
#            "throughput": `vllm-hotpaths throughput` (whole generate calls, upstream and the plugin
#            taking turns, vLLM's default engine settings) with THROUGHPUT_ARGS, in $OUT/throughput;
#            with --profile among them, the decode profile's tables in $OUT/throughput/profile.md
#            (py-spy from the staged site, ci/gpu/stage-vllm.sh)
#            "warmup": where the fused sampling kernel compiles (vLLM 0.22.x): the patch's
#            compile test on CUDA, then ci/gpu/warmup-compile.py without and with the plugin's
#            compile_variants (WARMUP_ARGS), one JSON line each in $OUT/warmup-compile.jsonl
#            "interpreter": the tests of what this project changes in Triton's interpreter, run
#            under this image's Triton
#            "dispatch": recovered_tokens on the staged vLLM: the host time of each part of a call
#            (ci/gpu/recovered-host-cost.py, $OUT/recovered-host-cost.jsonl), then the dispatch grid
#            (`python -m vllm_hotpaths.testing.bench.recovered_dispatch` with DISPATCH_ARGS) as
#            $OUT/dispatch.json: the shipped recovered_tokens/dispatch.json with this GPU model's entry
#   HOTPATHS only these hot paths, space-separated, in the gate, the benchmarks and quality (default: all)
#   COMMIT   the suite's commit, for the reports, where the tree's git metadata is not its own
#   PACK     1: everything under $OUT packed into $OUT/out.tar.gz at the end (a run hands back a
#            limited number of files: 15 releases' mrv2 reports and logs are more)
#   RECORD   1: the gate runs record what held into $OUT/validated.json (the plugin's file format;
#            `python -m vllm_hotpaths.testing.cuda_rows REPORT` gives a report's cuda rows to the
#            plugin's CPU rows of every release, docs/ci-gpu.md)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-gpu-out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
export PYTHONPATH="$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [[ -n "${COMMIT:-}" ]]; then export VLLM_HOTPATHS_COMMIT="$COMMIT"; fi
export VLLM_HOTPATHS_SUITE="$PWD"  # the package is not installed here: the gate runs this checkout's suite
python - <<'PY'
import torch, triton, hypothesis, platform
print(f"python {platform.python_version()}  torch {torch.__version__}  triton {triton.__version__}  "
      f"hypothesis {hypothesis.__version__}")
print(f"cuda device: {torch.cuda.get_device_name() if torch.cuda.is_available() else 'none'}")
PY
PARTS=${PARTS:-gate bench}
gate_rc=0
bench_rc=0
quality_rc=0
only=()
for name in ${HOTPATHS:-}; do only+=(--hotpath "$name"); done
record=()
if [[ "${RECORD:-0}" == 1 ]]; then record=(--record); export VLLM_HOTPATHS_VALIDATED="$OUT/validated.json"; fi
overlay_gate() {
  local version
  version=$(python -c "from importlib.metadata import version; print(version('vllm'))")
  python -m vllm_hotpaths.cli gate --profile "${PROFILE:-gate}" --require-cuda --require-vllm "${record[@]}" \
    "${only[@]}" -n "${WORKERS:-4}" --report-dir "$OUT/gate-$version" --fixture-dir "$OUT/gate-$version/regressions"
}
if [[ " $PARTS " == *" gate "* ]]; then
  if [[ "${GATE_STAGED:-1}" == 1 ]]; then
    python -m vllm_hotpaths.cli gate --profile "${PROFILE:-gate}" --require-cuda "${record[@]}" "${only[@]}" \
      -n "${WORKERS:-4}" --report-dir "$OUT" --fixture-dir "$OUT/regressions"
    gate_rc=$?
  fi
  for tarball in ${OVERLAYS:-}; do
    ( eval "$(bash ci/gpu/stage-vllm.sh overlay "$tarball")" && overlay_gate ) || gate_rc=1
  done
fi
mrv2_gate() {
  local version
  version=$(python -c "from importlib.metadata import version; print(version('vllm'))")
  VLLM_HOTPATHS_INTERPRETER=off python -m vllm_hotpaths.cli gate --profile "${PROFILE:-gate}" --require-cuda \
    --require-vllm --runner mrv2 ${ROWS:+--rows "$ROWS"} "${only[@]}" -n "${WORKERS:-4}" --report-dir "$OUT/mrv2-$version" \
    --fixture-dir "$OUT/mrv2-$version/regressions"
}
mrv2_rc=0
if [[ " $PARTS " == *" mrv2 "* ]]; then
  if [[ "${MRV2_JOBS:-1}" == 1 ]]; then
    if [[ "${MRV2_STAGED:-1}" == 1 ]]; then mrv2_gate || mrv2_rc=1; fi
    for tarball in ${OVERLAYS:-}; do  # another version's Python files over the staged vLLM
      ( eval "$(bash ci/gpu/stage-vllm.sh overlay "$tarball")" && mrv2_gate ) || mrv2_rc=1
    done
  else  # MRV2_JOBS releases at a time, each gate's output in $OUT/mrv2-<release>.log
    for tarball in ${OVERLAYS:-}; do bash ci/gpu/stage-vllm.sh overlay "$tarball" > /dev/null; done  # unpack once
    pids=()
    run_one() {
      if [[ -n "$1" ]]; then eval "$(bash ci/gpu/stage-vllm.sh overlay "$1")"; fi
      local version
      version=$(python -c "from importlib.metadata import version; print(version('vllm'))")
      local rc=0
      mrv2_gate > "$OUT/mrv2-$version.log" 2>&1 || rc=$?
      echo "mrv2 $version: exit $rc: $(tail -1 "$OUT/mrv2-$version.log")"
      return $rc
    }
    staged=(); if [[ "${MRV2_STAGED:-1}" == 1 ]]; then staged=(""); fi
    for tarball in "${staged[@]}" ${OVERLAYS:-}; do
      while (( $(jobs -rp | wc -l) >= MRV2_JOBS )); do wait -n; done
      ( run_one "$tarball" ) & pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || mrv2_rc=1; done
  fi
fi
if [[ " $PARTS " == *" equivalence "* ]]; then
  keyword="cuda"
  if [[ -n "${HOTPATHS:-}" ]]; then keyword="($(echo ${HOTPATHS} | sed 's/ / or /g')) and cuda"; fi
  python -m pytest properties/test_equivalence.py properties/test_logits_copy.py properties/test_sampler_mrv2.py \
    -q -p no:cacheprovider -k "$keyword" --require-cuda \
    --hypothesis-profile "${PROFILE:-gate}" -n "${WORKERS:-4}" --fixture-dir "$OUT/equivalence/regressions" \
    || gate_rc=1
fi
if [[ " $PARTS " == *" bench "* ]]; then
  if [[ "${BENCH_STAGED:-1}" == 1 ]]; then
    python -m vllm_hotpaths.cli bench --device all "${only[@]}" --json "$OUT/bench.json" --plot "$OUT/bench.png"
    bench_rc=$?
  fi
  for tarball in ${OVERLAYS:-}; do
    ( eval "$(bash ci/gpu/stage-vllm.sh overlay "$tarball")" &&
      version=$(python -c "from importlib.metadata import version; print(version('vllm'))") &&
      python -m vllm_hotpaths.cli bench --device cuda "${only[@]}" --json "$OUT/bench-$version.json" ) || bench_rc=1
  done
fi
if [[ " $PARTS " == *" quality "* ]]; then
  # name|pytest options: each run must fail (exit 1) and write its fixture under $OUT/quality/name.
  # The planted bugs properties/quality/*.py mark "cuda" alone, no others (tests/test_quality.py).
  planted=(
    "recovered_tokens-IEEEDivision|properties/test_equivalence.py -k recovered_tokens\ and\ cuda --impl recovered_tokens@0.16.0=properties.quality.recovered_tokens:IEEEDivision"
    "recovered_tokens-ApproximateReciprocal|properties/test_equivalence.py -k recovered_tokens\ and\ cuda --impl recovered_tokens@0.17.0=properties.quality.recovered_tokens:ApproximateReciprocal"
    "recovered_tokens-RelaunchKeyedByAlignment|properties/test_recovered_tokens.py -k test_one_candidate_serves_each_launch_shape_in_turn\ and\ cuda --impl recovered_tokens@0.17.0=properties.quality.recovered_tokens:RelaunchKeyedByAlignment"
    "penalties_mrv2-ExactDivision|properties/test_conformance.py -k penalties_mrv2\ and\ cuda --reference penalties_mrv2@0.16.0=properties.quality.penalties_mrv2:ExactDivision"
    "penalties_mrv2-UnfusedFrequency|properties/test_conformance.py -k penalties_mrv2\ and\ cuda --reference penalties_mrv2@0.16.0=properties.quality.penalties_mrv2:UnfusedFrequency"
    "sampler_mrv2-FusedIEEEDivision|properties/test_equivalence.py -k sampler_mrv2\ and\ cuda --impl sampler_mrv2@0.22.0=properties.quality.sampler_mrv2:FusedIEEEDivision"
  )
  for entry in "${planted[@]}"; do
    name=${entry%%|*}
    if [[ -n "${HOTPATHS:-}" && " $HOTPATHS " != *" ${name%%-*} "* ]]; then continue; fi
    eval "args=(${entry#*|})"
    VLLM_HOTPATHS_NO_REPLAY=1 python -m pytest "${args[@]}" -q -x -p no:cacheprovider --hypothesis-profile ci \
      --require-cuda --fixture-dir "$OUT/quality/$name" > "$OUT/quality-$name.log" 2>&1
    rc=$?
    written=$(find "$OUT/quality/$name" -name '*.json' 2>/dev/null | wc -l)
    if [[ $rc -eq 1 && $written -ge 1 ]]; then
      echo "quality: $name caught (fixture: $(find "$OUT/quality/$name" -name '*.json' | head -1))"
    else
      echo "quality: $name NOT caught (pytest exit $rc, $written fixture(s)); log: $OUT/quality-$name.log"
      quality_rc=1
    fi
  done
fi
if [[ " $PARTS " == *" interpreter "* ]]; then
  TRITON_INTERPRET=1 python -m pytest -q -p no:cacheprovider tests/test_interpreter_shortcuts.py \
    tests/test_interpreter_random.py tests/test_interpreter_patching.py tests/test_libdevice_cpu.py \
    tests/test_sampler_mrv2_reference.py || quality_rc=1
fi
if [[ " $PARTS " == *" sweep "* ]]; then
  swept=()
  for name in ${HOTPATHS:-penalties swap_states think_budget recovered_tokens}; do swept+=(--hotpath "$name"); done
  python -m properties.quality.sweep --seeds "${SEEDS:-10}" -n "${WORKERS:-4}" "${swept[@]}" --json "$OUT/sweep.json" \
    | tee "$OUT/sweep.txt" || quality_rc=1
fi
e2e_rc=0
if [[ " $PARTS " == *" sampler-e2e "* ]]; then
  python ci/gpu/sampler-e2e.py ${SAMPLER_E2E_ARGS:-} --json "$OUT/sampler-e2e.json" || e2e_rc=1
  python ci/gpu/sampler-e2e.py ${SAMPLER_E2E_ARGS:-} --tables compact --compare "$OUT/sampler-e2e.json" \
    --json "$OUT/sampler-e2e-compact.json" || e2e_rc=1
fi
if [[ " $PARTS " == *" warmup "* ]]; then
  # where the fused sampling kernel compiles: the patch's own test on CUDA, then an engine without
  # and with compile_variants
  python -m pytest -q -p no:cacheprovider tests/test_sampler_mrv2_patch.py -k compile --require-cuda \
    > "$OUT/warmup-test.log" 2>&1 || e2e_rc=1
  tail -3 "$OUT/warmup-test.log"
  for mode in --before ""; do
    python ci/gpu/warmup-compile.py $mode ${WARMUP_ARGS:-} | tee -a "$OUT/warmup-compile.jsonl" || e2e_rc=1
  done
fi
if [[ " $PARTS " == *" throughput "* ]]; then
  site=$(python -c "import vllm, pathlib; print(pathlib.Path(vllm.__file__).parents[1])")
  PATH="$site/bin:$PATH" python -m vllm_hotpaths.cli throughput --attention TRITON_ATTN ${THROUGHPUT_ARGS:-} \
    --out "$OUT/throughput" || e2e_rc=1
  if [[ -d "$OUT/throughput/profile" ]]; then
    python -m vllm_hotpaths.testing.decode_profile "$OUT/throughput" --json "$OUT/throughput/profile.json" \
      > "$OUT/throughput/profile.md" || e2e_rc=1
    # the raw samples and traces as one file (a run hands back few files)
    tar -C "$OUT/throughput" -czf "$OUT/throughput/profile-raw.tar.gz" profile torch && rm -rf "$OUT/throughput/profile" \
      "$OUT/throughput/torch"
  fi
  rm -f "$OUT"/throughput/*/stop "$OUT"/throughput/*/spec.json
fi
if [[ " $PARTS " == *" dispatch "* ]]; then
  python3 ci/gpu/recovered-host-cost.py --repeats 100 | tee "$OUT/recovered-host-cost.jsonl" || bench_rc=1
  python -m vllm_hotpaths.testing.bench.recovered_dispatch --out "$OUT/dispatch.json" \
    --merge src/vllm_hotpaths/recovered_tokens/dispatch.json ${DISPATCH_ARGS:-} || bench_rc=1
fi
echo "gate exit $gate_rc, mrv2 exit $mrv2_rc, bench exit $bench_rc, quality exit $quality_rc, sampler-e2e and throughput exit $e2e_rc"
if [[ "${PACK:-0}" == 1 ]]; then
  packed=$(mktemp --suffix .tar.gz)
  tar -C "$OUT" -czf "$packed" . && find "$OUT" -mindepth 1 -delete && mv "$packed" "$OUT/out.tar.gz"
  echo "packed: $OUT/out.tar.gz"
fi
bench_rc=$(( bench_rc > e2e_rc ? bench_rc : e2e_rc ))
worst=$(( gate_rc > bench_rc ? gate_rc : bench_rc ))
worst=$(( worst > mrv2_rc ? worst : mrv2_rc ))
exit $(( worst > quality_rc ? worst : quality_rc ))
