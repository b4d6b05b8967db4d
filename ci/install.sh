#!/usr/bin/env bash
# Install everything into .venv: CPU torch, Triton, this package with its test and bench extras,
# vLLM without its dependencies, and the requirements vLLM's own metadata lists, less the GPU-only
# ones (src/vllm_hotpaths/testing/releases.py says which). Re-running is cheap: the install is
# skipped while pyproject.toml and the release's requirements are unchanged.
#   VLLM_VERSION  vLLM to install (default 0.22.0; any release from 0.16.0)
#   WITH_VLLM     1 (default); 0: the release's requirements without vLLM itself, the base
#                 `.venvs/base` that `gate --vllm X` layers each release's environment on
#   TORCH_SPEC    torch requirement (default torch==2.13.0, the CPU build)
#   TRITON_SPEC   Triton requirement (default triton==3.7.1: it interprets kernels on CPU tensors)
#   VENV          the environment's folder (default .venv)
set -euo pipefail
cd "$(dirname "$0")/.."
VLLM_VERSION=${VLLM_VERSION:-0.22.0}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
TRITON_SPEC=${TRITON_SPEC:-triton==3.7.1}
VENV=${VENV:-.venv}
WITH_VLLM=${WITH_VLLM:-1}
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
pip() { "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@"; }
requirements=$(mktemp)
held=$(mktemp)
trap 'rm -f "$requirements" "$held"' EXIT
"$VENV/bin/python" -c 'import packaging' 2>/dev/null || pip install packaging
PYTHONPATH=src "$VENV/bin/python" -m vllm_hotpaths.testing.releases requirements "$VLLM_VERSION" >"$requirements"
stamp_value=$(cat pyproject.toml "$requirements" <(echo "$TORCH_SPEC $TRITON_SPEC $VLLM_VERSION $WITH_VLLM") | sha256sum | cut -c1-16)
stamp=$VENV/.installed-$stamp_value
if [ -f "$stamp" ]; then
  echo "install: $VENV is up to date"
  exit 0
fi
start=$(date +%s)
pip install "$TORCH_SPEC" "$TRITON_SPEC"
pip install -e ".[test,bench]"
"$VENV/bin/python" -m vllm_hotpaths.testing.releases pins >"$held"
pip install -r "$requirements" -c "$held"
[ "$WITH_VLLM" = 0 ] || pip install --no-deps "vllm==${VLLM_VERSION}"
rm -f "$VENV"/.installed-*
touch "$stamp"
what="vLLM ${VLLM_VERSION}"
[ "$WITH_VLLM" = 0 ] && what="vLLM ${VLLM_VERSION}'s requirements, not vLLM"
echo "install: done in $(( $(date +%s) - start ))s (torch: $("$VENV/bin/python" -c 'import torch; print(torch.__version__)'), $what)"
