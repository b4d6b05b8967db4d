#!/usr/bin/env bash
# The gate on a GPU runner with a normal vLLM install: what both pipelines in ci/pipelines run.
# Installs the target vLLM (with its CUDA torch) and this package into .venv-gpu, then runs every
# check with CUDA and vLLM required and any skipped row counted as a failure. Writes into
# $ARTIFACTS (default artifacts/): gate-report.json/.md, junit.xml (junit-interpreted.xml for the
# Triton hot paths' CPU cases) and regressions/ with the shrunk case of every failure. Then vLLM's
# own unit tests for the patched functions, without and with the plugin (ci/gpu/vllm-unit-tests.sh,
# into $ARTIFACTS/vllm-unit-tests/): a test that passes without the plugin must pass with it.
#   VLLM_VERSION  the vLLM to gate (required)
#   PROFILE       Hypothesis profile (default gate)
#   RECORD=1      also write the validated versions into src/vllm_hotpaths/validated.json
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${VLLM_VERSION:?set VLLM_VERSION to the vLLM version to gate}"
ARTIFACTS=${ARTIFACTS:-artifacts}
mkdir -p "$ARTIFACTS/regressions"
[ -x .venv-gpu/bin/python ] || python3 -m venv .venv-gpu
.venv-gpu/bin/python -m pip install -q "vllm==$VLLM_VERSION"
.venv-gpu/bin/python -m pip install -q -e ".[test,bench]"
.venv-gpu/bin/python -c "import torch, vllm; print('vLLM', vllm.__version__, 'torch', torch.__version__, torch.cuda.get_device_name())"
gate_rc=0
.venv-gpu/bin/vllm-hotpaths gate --profile "${PROFILE:-gate}" --require-cuda --require-vllm --fail-on-skip \
  -n auto --report-dir "$ARTIFACTS" --junit-xml "$ARTIFACTS/junit.xml" \
  --fixture-dir "$ARTIFACTS/regressions" ${RECORD:+--record} || gate_rc=$?
export PYTHON=.venv-gpu/bin/python
bash ci/gpu/vllm-unit-tests.sh fetch "$VLLM_VERSION"
tests_rc=0
OUT="$ARTIFACTS/vllm-unit-tests" bash ci/gpu/vllm-unit-tests.sh run "$VLLM_VERSION" || tests_rc=$?
echo "gate exit $gate_rc, vLLM's unit tests exit $tests_rc"
exit $(( gate_rc > tests_rc ? gate_rc : tests_rc ))
