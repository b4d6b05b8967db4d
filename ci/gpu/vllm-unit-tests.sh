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
#                  (JOBS of these processes at once, default the CPU count)
#                  MRV2_ONLY=1: Model Runner V2's sampler tests alone (a release's Python files
#                  over another's compiled ops, stage-vllm.sh overlay, run these but not the v1 files)
#                  ONLY="test_rejection_sampler ...": these files alone (names without .py)
#
# The files: tests/v1/sample/test_sampler.py, test_rejection_sampler.py,
# tests/v1/worker/test_gpu_input_batch.py, tests/v1/logits_processors/test_correctness.py, every
# test file of tests/v1/core/ but the end-to-end ones (*_e2e.py: a real model on a GPU; not fetched),
# the helpers they import, and where a release has them, Model Runner V2's sampler tests (MRV2_TESTS).
# vLLM's tests/conftest.py and tests/utils.py import packages a runner
# without vLLM's test extras lacks (transformers, openai, ...): an empty conftest and
# ci/gpu/vllm-tests-shim/utils.py (forks per test, as vLLM's helper does) stand in for them.
# The core tests' models come from a stand-in Hub cache (ci/gpu/vllm-tests-shim/hub_cache.py).
# Their multimodal models (llava, Qwen2.5-VL) import torchvision: where the interpreter lacks it,
# fetch and run install the registry's build for its torch (torchvision 0.N+15 for torch 2.N;
# TORCH=2.N PY=3.M fetch for another machine's) into carry/vllm-test-deps/, on PYTHONPATH for the
# runs only, or fail saying so. With a CPU torch that build's operators do not load:
# ci/gpu/vllm-tests-shim/torchvision-cpu defines the two operators torchvision needs to import.
# VLLM_USE_FLASHINFER_SAMPLER=0 as in vLLM's CI for these files. On a machine without CUDA the
# tests whose device list is empty are not collected: the counts say how many ran.
set -uo pipefail
cd "$(dirname "$0")/../.."
TESTS=(tests/v1/sample/test_sampler.py tests/v1/sample/test_rejection_sampler.py
       tests/v1/worker/test_gpu_input_batch.py tests/v1/logits_processors/test_correctness.py)
CORE=tests/v1/core  # every test_*.py a release has there (test_scheduler.py, ...), *_e2e.py left out
# Model Runner V2's sampler tests (the sampler_mrv2 patch's `Sampler.add_request` / `sample`), in
# the releases whose source has them: run where fetched.
MRV2_TESTS=(tests/v1/worker/test_gpu_sampler_flags.py tests/v1/worker/test_gpu_logits_processors.py
            tests/v1/worker/test_gpu_thinking_budget.py tests/v1/worker/test_gpu_gumbel_sample.py)
FILES=("${TESTS[@]}" tests/v1/sample/utils.py tests/v1/logits_processors/utils.py
       tests/v1/kv_connector/unit/utils.py)
PYTHON=${PYTHON:-python3}
# A path to an interpreter (a venv's python) must hold after the cd into the test tree; its
# folder is made absolute, not the link itself, which would leave the venv.
[[ $PYTHON == */* ]] && PYTHON="$(cd "$(dirname "$PYTHON")" && pwd)/$(basename "$PYTHON")"
installed() { "$PYTHON" -c "import vllm; print(vllm.__version__)" 2>/dev/null; }

# torchvision for the core tests' multimodal models. TV_DIR: the carried install for a torch
# major.minor and a Python (TORCH= and PY= name another machine's; else the interpreter's).
tv_dir() {
  local torch=${TORCH:-} py=${PY:-}
  [ -n "$torch" ] || torch=$("$PYTHON" -c 'import torch; print(".".join(torch.__version__.split(".")[:2]))' 2>/dev/null) || return 1
  [ -n "$py" ] || py=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])') || return 1
  TV_TORCH=$torch TV_PY=$py TV_DIR=carry/vllm-test-deps/torchvision-torch$torch-py$py
}
tv_install() {  # the registry's torchvision for TV_TORCH into TV_DIR (no-op when there), or exit 2
  [ -d "$TV_DIR/torchvision" ] && return 0
  local want cross=() log
  [[ $TV_TORCH =~ ^2\.([0-9]+)$ ]] && want="0.$(( BASH_REMATCH[1] + 15 )).*" || {
    echo "torchvision: no rule for torch $TV_TORCH (torchvision 0.N+15 pairs with torch 2.N)" >&2; exit 2; }
  [ -n "${TORCH:-}${PY:-}" ] && cross=(--only-binary=:all: --implementation cp --python-version "$TV_PY"
                                      --platform manylinux_2_28_x86_64)
  rm -rf "$TV_DIR" && mkdir -p "$TV_DIR"
  log=$("$PYTHON" -m pip install -q --no-deps "${cross[@]}" --target "$TV_DIR" "torchvision==$want" 2>&1) || {
    rm -rf "$TV_DIR"
    echo "torchvision: none of torchvision==$want (for torch $TV_TORCH, Python $TV_PY) could be fetched:" >&2
    echo "$log" | tail -3 >&2; exit 2; }
  echo "$TV_DIR: torchvision $(ls "$TV_DIR" | sed -n 's/^torchvision-\(.*\)\.dist-info$/\1/p')"
}

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
  local core=() f
  for f in "$src/$CORE"/*.py; do [[ $f == *_e2e.py ]] || core+=("$CORE/$(basename "$f")"); done
  for f in "${FILES[@]}" "${core[@]}" "${MRV2_TESTS[@]}"; do
    [ -f "$src/$f" ] && mkdir -p "carry/vllm-tests/$version/$(dirname "$f")" && cp "$src/$f" "carry/vllm-tests/$version/$f"
  done
  rm -rf "$work"
  echo "carry/vllm-tests/$version: $(find "carry/vllm-tests/$version" -name '*.py' | wc -l) files"
  if [ -z "${TORCH:-}${PY:-}" ] && "$PYTHON" -c "import torchvision" 2>/dev/null; then
    echo "torchvision: $PYTHON has it"
  elif tv_dir; then
    tv_install
  else
    echo "torchvision: $PYTHON has no torch: name the runner's (TORCH=2.N PY=3.M), or run installs it" >&2
  fi
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
  for f in "$tree/$CORE"/test_*.py; do [ -f "$f" ] && [[ $f != *_e2e.py ]] && tests+=("$CORE/$(basename "$f")"); done
  [ "${MRV2_ONLY:-0}" = 1 ] && tests=()  # only Model Runner V2's sampler tests (the sampler_mrv2 patch)
  for f in "${MRV2_TESTS[@]}"; do [ -f "$tree/$f" ] && tests+=("$f"); done
  if [ -n "${ONLY:-}" ]; then  # these files alone, by name without .py
    local kept=()
    for f in "${tests[@]}"; do [[ " $ONLY " == *" $(basename "$f" .py) "* ]] && kept+=("$f"); done
    tests=("${kept[@]}")
  fi
  [ ${#tests[@]} -gt 0 ] || { echo "run: vLLM $version's tests hold none of the files to run" >&2; exit 2; }
  # torchvision for the core files: the interpreter's, else the carried install (fetched here if
  # absent), with the operator stand-in where torch is a CPU build.
  if [[ " ${tests[*]} " == *" $CORE/"* ]] && ! "$PYTHON" -c "import torchvision" 2>/dev/null; then
    local shim=$PWD/ci/gpu/vllm-tests-shim/torchvision-cpu tv
    tv_dir || { echo "run: no torch in $PYTHON" >&2; exit 2; }
    tv_install
    tv=$PWD/$TV_DIR
    if ! PYTHONPATH="$tv:$PYTHONPATH" "$PYTHON" -c "import torchvision" 2>/dev/null; then
      "$PYTHON" -c "import sys, torch; sys.exit(torch.version.cuda is not None)" &&
        PYTHONPATH="$shim:$tv:$PYTHONPATH" "$PYTHON" -c "import torchvision" 2>/dev/null && tv=$shim:$tv || {
        echo "run: torchvision from $TV_DIR does not import with this torch:" >&2
        PYTHONPATH="$tv:$PYTHONPATH" "$PYTHON" -c "import torchvision" 2>&1 | tail -1 >&2; exit 2; }
    fi
    export PYTHONPATH="$PYTHONPATH:$tv"
    echo "torchvision: $("$PYTHON" -c "import torchvision; print(torchvision.__version__, 'from', torchvision.__file__)")"
  fi
  # "every patch": a validated file naming each hot path for this version on this device.
  "$PYTHON" - "$version" "$tree/every-patch.json" <<'PY'
import json, sys, torch
from vllm_hotpaths import registry
device = "cuda" if torch.cuda.is_available() else "cpu"
record = {"devices": [device], "profile": "none: forced by vllm-unit-tests.sh"}
json.dump({name: {sys.argv[1]: record} for name, hp in registry.HOTPATHS.items() if hp.patch},
          open(sys.argv[2], "w"))
PY
  # Every (run, file) pair in a process of its own, JOBS at once: one process per file because
  # fork-per-test files need CUDA unstarted; at once because the runs are independent (each
  # process holds about 0.6 GB).
  local run file jobs=${JOBS:-$(nproc)}
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
      while [ "$(jobs -pr | wc -l)" -ge "$jobs" ]; do wait -n; done
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
