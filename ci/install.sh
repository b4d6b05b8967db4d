#!/usr/bin/env bash
# Install everything into .venv: CPU torch, vLLM's import-time dependencies, this package with
# its test and bench extras, and vLLM itself without its dependencies. Re-running is cheap: the
# install is skipped while pyproject.toml and the recipe are unchanged.
#   VLLM_VERSION  vLLM to install (default 0.22.0; needs ci/vllm-$VLLM_VERSION-cpu.txt)
#   TORCH_SPEC    torch requirement (default torch==2.13.0, the CPU build)
#   VENV          the environment's folder (default .venv; `gate --vllm X` uses .venvs/vllm-X)
set -euo pipefail
cd "$(dirname "$0")/.."
VLLM_VERSION=${VLLM_VERSION:-0.22.0}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
recipe="ci/vllm-${VLLM_VERSION}-cpu.txt"
[ -f "$recipe" ] || { echo "install: no recipe $recipe for vLLM $VLLM_VERSION" >&2; exit 2; }

stamp_value=$(cat pyproject.toml "$recipe" <(echo "$TORCH_SPEC $VLLM_VERSION") | sha256sum | cut -c1-16)
VENV=${VENV:-.venv}
stamp=$VENV/.installed-$stamp_value
if [ -f "$stamp" ]; then
  echo "install: $VENV is up to date"
  exit 0
fi
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
pip() { "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@"; }
start=$(date +%s)
pip install "$TORCH_SPEC"
pip install -r "$recipe"
pip install -e ".[test,bench]"
pip install --no-deps "vllm==${VLLM_VERSION}"
rm -f "$VENV"/.installed-*
touch "$stamp"
echo "install: done in $(( $(date +%s) - start ))s (torch: $("$VENV/bin/python" -c 'import torch; print(torch.__version__)'), vLLM ${VLLM_VERSION})"
