#!/usr/bin/env bash
# The lazy sampling pass on a GPU machine, one call: the CUDA equivalence rows of sampler_mrv2's
# fast paths, fused and lazy, against their references (with the rows at the noise's bound), then
# the shape sweep (`vllm_hotpaths.testing.bench.lazy_gumbel`) for each release named in RELEASES (default
# "0.28.0 0.33.0"): against vLLM's own `Sampler.sample` of that release where vLLM is staged
# (ci/gpu/stage-vllm.sh; each release's Python files from carry/vllm-py-X/py.tar.xz, made by
# `stage-vllm.sh pack-py X`), else against the fused pass only. JSON in $OUT/lazy-X.json. BATCHES
# (default 1024) and GAPS (default: the bench's) pick the points; SRC another tree's src/ (a
# commit's patch against this one's, side by side on one machine), whose JSON is lazy-X-NAME.json
# with NAME its parent folder; TESTS=0 skips the equivalence rows.
#   call 1 (carry vllm-stage-1):                          bash ci/gpu/stage-vllm.sh keep
#   call 2 (carry vllm-stage-2 and the vllm-py-X folders): STAGED=1 bash ci/gpu/lazy-gumbel.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
if [[ "${STAGED:-0}" == 1 ]]; then
  bash ci/gpu/stage-vllm.sh keep
  eval "$(bash ci/gpu/stage-vllm.sh install)"
fi
SRC=$(realpath "${SRC:-src}")
suffix=$([[ "$SRC" == "$(realpath src)" ]] || echo "-$(basename "$(dirname "$SRC")")")
export PYTHONPATH="$SRC:$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name --format=csv,noheader
[[ "${TESTS:-1}" == 0 ]] || python -m pytest properties/test_equivalence.py properties/test_sampler_mrv2.py \
  -k "sampler_mrv2 and cuda" --require-cuda --hypothesis-profile "${PROFILE:-ci}" \
  -q -p no:cacheprovider -n "${WORKERS:-8}" 2>&1 | tail -5
for release in ${RELEASES:-0.28.0 0.33.0}; do
  (
    if [[ "${STAGED:-0}" == 1 && -f "carry/vllm-py-$release/py.tar.xz" ]]; then
      eval "$(bash ci/gpu/stage-vllm.sh overlay "carry/vllm-py-$release/py.tar.xz")"
    fi
    # shellcheck disable=SC2086
    python -m vllm_hotpaths.testing.bench.lazy_gumbel --release "$release" --batch ${BATCHES:-1024} \
      ${GAPS:+--gaps $GAPS} --json "$OUT/lazy-$release$suffix.json"
  ) 2>&1 | grep -v Warning
done
