#!/usr/bin/env bash
# vLLM's own unit tests for the functions the plugin patches, run on the installed vLLM without
# the plugin, with it (as vLLM loads it: VLLM_HOTPATHS and the validated records decide), and
# with every patch forced in. Every test that passes without the plugin must pass in both other
# runs; the comparison (vllm_hotpaths.testing.upstream_tests) prints counts, grouped skip
# reasons and each test lost, and sets the exit status.
#
#   with network:  bash ci/gpu/vllm-unit-tests.sh fetch [VERSION]   (default: the installed vLLM)
#                  -> carry/vllm-tests/<VERSION>: the test files from vLLM's source distribution
#                  (SOURCE=DIR: from that unpacked source tree instead); a release keeps those of
#                  the files it has (0.34 removed Model Runner v1 and its sampler's tests)
#   with vLLM:     bash ci/gpu/vllm-unit-tests.sh run [VERSION]
#                  -> $OUT (default vllm-unit-tests/): per run a log and a JUnit report per file
#                  MRV2_ONLY=1: Model Runner V2's sampler tests alone (a release's Python files
#                  over another's compiled ops, stage-vllm.sh overlay, run these but not the v1 files)
#                  ONLY="test_rejection_sampler ...": these files alone (names without .py)
#
# The files: tests/v1/sample/test_sampler.py, test_rejection_sampler.py,
# tests/v1/worker/test_gpu_input_batch.py, tests/v1/logits_processors/test_correctness.py,
# tests/v1/core/test_scheduler.py, test_async_scheduler.py and the helpers they import, and where a
# release has them, Model Runner V2's sampler tests (MRV2_TESTS). vLLM's tests/conftest.py and tests/utils.py import packages a runner
# without vLLM's test extras lacks (transformers, openai, ...): an empty conftest and
# ci/gpu/vllm-tests-shim/utils.py (forks per test, as vLLM's helper does) stand in for them.
# The scheduler tests' models come from a stand-in Hub cache (ci/gpu/vllm-tests-shim/hub_cache.py).
# VLLM_USE_FLASHINFER_SAMPLER=0 as in vLLM's CI for these files. On a machine without CUDA the
# tests whose device list is empty are not collected: the counts say how many ran.
set -uo pipefail
cd "$(dirname "$0")/../.."
TESTS=(tests/v1/sample/test_sampler.py tests/v1/sample/test_rejection_sampler.py
       tests/v1/worker/test_gpu_input_batch.py tests/v1/logits_processors/test_correctness.py
       tests/v1/core/test_scheduler.py tests/v1/core/test_async_scheduler.py)
# Model Runner V2's sampler tests (the sampler_mrv2 patch's `Sampler.add_request` / `sample`), in
# the releases whose source has them: run where fetched.
MRV2_TESTS=(tests/v1/worker/test_gpu_sampler_flags.py tests/v1/worker/test_gpu_logits_processors.py
            tests/v1/worker/test_gpu_thinking_budget.py tests/v1/worker/test_gpu_gumbel_sample.py)
FILES=("${TESTS[@]}" tests/v1/sample/utils.py tests/v1/logits_processors/utils.py tests/v1/core/utils.py
       tests/v1/kv_connector/unit/utils.py)
PYTHON=${PYTHON:-python3}
# A path to an interpreter (a venv's python) must hold after the cd into the test tree; its
# folder is made absolute, not the link itself, which would leave the venv.
[[ $PYTHON == */* ]] && PYTHON="$(cd "$(dirname "$PYTHON")" && pwd)/$(basename "$PYTHON")"
installed() { "$PYTHON" -c "import vllm; print(vllm.__version__)" 2>/dev/null; }

fetch() {
  local version=${1:-$(installed)} work src
  : "${version:?name the vLLM version (none is installed)}"
  work=$(mktemp -d)
  src=${SOURCE:-}
  if [ -z "$src" ]; then
    # vLLM's sdist cannot be built here; pip leaves it unpacked in its temporary folder.
    TMPDIR=$work "$PYTHON" -m pip download -q --no-deps --no-binary :all: --no-clean "vllm==$version" \
      -d "$work/dl" >/dev/null 2>&1
    src=$(ls -d "$work"/pip-*/vllm_*/ 2>/dev/null | head -1)
  fi
  [ -n "$src" ] && [ -d "$src/tests/v1" ] || {
    echo "fetch: vLLM $version's source distribution did not unpack under ${SOURCE:-$work}" >&2; exit 2; }
  rm -rf "carry/vllm-tests/$version" && mkdir -p "carry/vllm-tests/$version"
  for f in "${FILES[@]}" "${MRV2_TESTS[@]}"; do
    [ -f "$src/$f" ] && mkdir -p "carry/vllm-tests/$version/$(dirname "$f")" && cp "$src/$f" "carry/vllm-tests/$version/$f"
  done
  rm -rf "$work"
  echo "carry/vllm-tests/$version: $(find "carry/vllm-tests/$version" -name '*.py' | wc -l) files"
}

run() {
  local version=${1:-$(installed)} out tree rc
  out=$(realpath -m "${OUT:-vllm-unit-tests}")
  : "${version:?vLLM is not installed}"
  [ "$(installed)" = "$version" ] || { echo "run: vLLM $version is not the installed vLLM ($(installed))" >&2; exit 2; }
  [ -d "carry/vllm-tests/$version" ] || { echo "run: no carry/vllm-tests/$version (fetch it first)" >&2; exit 2; }
  tree=$(mktemp -d) && mkdir -p "$out"
  cp -r "carry/vllm-tests/$version/tests" "$tree/"
  cp ci/gpu/vllm-tests-shim/utils.py "$tree/tests/utils.py"
  : > "$tree/tests/conftest.py"
  find "$tree/tests" -type d -exec touch {}/__init__.py \;
  export PYTHONPATH="$tree:$PWD/src${PYTHONPATH:+:$PYTHONPATH}" VLLM_USE_FLASHINFER_SAMPLER=0
  # The scheduler tests load two models' configs and tokenizers from the Hub: a cache stands in.
  "$PYTHON" ci/gpu/vllm-tests-shim/hub_cache.py "$tree/hub"
  export HF_HUB_OFFLINE=1 HF_HUB_CACHE="$tree/hub"
  local tests=() f
  for f in "${TESTS[@]}"; do [ -f "$tree/$f" ] && tests+=("$f"); done  # those the release has
  [ "${MRV2_ONLY:-0}" = 1 ] && tests=()  # only Model Runner V2's sampler tests (the sampler_mrv2 patch)
  for f in "${MRV2_TESTS[@]}"; do [ -f "$tree/$f" ] && tests+=("$f"); done
  if [ -n "${ONLY:-}" ]; then  # these files alone, by name without .py
    local kept=()
    for f in "${tests[@]}"; do [[ " $ONLY " == *" $(basename "$f" .py) "* ]] && kept+=("$f"); done
    tests=("${kept[@]}")
  fi
  [ ${#tests[@]} -gt 0 ] || { echo "run: vLLM $version's tests hold none of the files to run" >&2; exit 2; }
  # "every patch": a validated file naming each hot path for this version on this device.
  "$PYTHON" - "$version" "$tree/every-patch.json" <<'PY'
import json, sys, torch
from vllm_hotpaths import registry
device = "cuda" if torch.cuda.is_available() else "cpu"
record = {"devices": [device], "profile": "none: forced by vllm-unit-tests.sh"}
json.dump({name: {sys.argv[1]: record} for name, hp in registry.HOTPATHS.items() if hp.patch},
          open(sys.argv[2], "w"))
PY
  # Every (run, file) pair in a process of its own, all at once: one process per file because
  # fork-per-test files need CUDA unstarted; at once because the runs are independent.
  local run file
  for run in upstream plugin every-patch; do
    rm -rf "${out:?}/$run" "$out/$run.log" && mkdir -p "$out/$run"
    # Every run loads the plugin module, so vLLM gets the same environment (adjusted on a CPU-only
    # machine); the upstream run has VLLM_HOTPATHS=off.
    # With every patch, recovered_tokens takes its split kernel at every shape, not only where the
    # shipped dispatch measured it faster.
    local selected=${VLLM_HOTPATHS:-all} validated=${VLLM_HOTPATHS_VALIDATED:-} dispatch=${VLLM_HOTPATHS_RECOVERED_DISPATCH:-}
    [ "$run" = upstream ] && selected=off
    [ "$run" = every-patch ] && validated="$tree/every-patch.json" && dispatch=always
    for file in "${tests[@]}"; do
      (cd "$tree" && env VLLM_HOTPATHS="$selected" ${validated:+VLLM_HOTPATHS_VALIDATED="$validated"} \
        ${dispatch:+VLLM_HOTPATHS_RECOVERED_DISPATCH="$dispatch"} \
        "$PYTHON" -m pytest -p no:cacheprovider -rs -p vllm_hotpaths.testing.with_plugin \
        "$file" --junit-xml="$out/$run/$(basename "$file" .py).xml") > "$out/$run/$(basename "$file" .py).log" 2>&1 &
    done
  done
  wait
  for run in upstream plugin every-patch; do
    cat "$out/$run"/*.log > "$out/$run.log"
    echo "== $run: $(grep -m1 '^vllm-hotpaths' "$out/$run.log" || echo 'no plugin')"
  done
  "$PYTHON" -m vllm_hotpaths.testing.upstream_tests "$out/upstream" "$out/plugin" "$out/every-patch"
  rc=$?
  rm -rf "$tree"
  return $rc
}

case "${1:-}" in
  fetch) fetch "${2:-}" ;;
  run) run "${2:-}"; exit $? ;;
  *) echo "usage: $0 fetch [VERSION] | run [VERSION]" >&2; exit 2 ;;
esac
