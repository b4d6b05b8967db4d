#!/usr/bin/env bash
# Bring vLLM's compiled ops (`_C.abi3.so`) to a GPU machine that has a matching torch but no
# vLLM, so the CUDA conformance property can load them (VLLM_HOTPATHS_VLLM_C). The library is
# larger than one transfer, so it travels xz-compressed in parts, over two calls, in carry/.
#   here:          bash ci/gpu/stage-vllm-ops.sh split [VERSION]  -> carry/vllm-VERSION-_C.abi3.so.xz.part-NN
#   there, call 1: bash ci/gpu/stage-vllm-ops.sh keep             -> parts carried now are kept in /tmp/vllm-ops
#   there, call 2: bash ci/gpu/stage-vllm-ops.sh join             -> prints the path of the joined library
# A user with a normal vLLM install on a GPU runner needs none of this.
set -euo pipefail
cd "$(dirname "$0")/../.."
keep=/tmp/vllm-ops
case "${1:-}" in
  split)
    version=${2:-0.22.0}
    work=$(mktemp -d)
    python3 -m pip download -q --no-deps "vllm==$version" -d "$work"
    unzip -q -o "$work"/vllm-"$version"-*.whl vllm/_C.abi3.so -d "$work"
    mkdir -p carry
    rm -f carry/vllm-*-_C.abi3.so.xz.part-*
    xz -9 -T0 -c "$work/vllm/_C.abi3.so" > "$work/_C.abi3.so.xz"
    (cd "$work" && sha256sum _C.abi3.so.xz) | cut -d' ' -f1 > "carry/vllm-$version-_C.abi3.so.xz.sha256"
    split -b 34m -d "$work/_C.abi3.so.xz" "carry/vllm-$version-_C.abi3.so.xz.part-"
    rm -rf "$work"
    ls -la carry/vllm-"$version"-_C.abi3.so.xz.*
    ;;
  keep)
    mkdir -p "$keep"
    cp carry/vllm-*-_C.abi3.so.xz.* "$keep"/
    ls -la "$keep" >&2
    ;;
  join)
    cp carry/vllm-*-_C.abi3.so.xz.* "$keep"/ 2>/dev/null || true
    sum=$(cat "$keep"/vllm-*-_C.abi3.so.xz.sha256)
    cat "$keep"/vllm-*-_C.abi3.so.xz.part-* > "$keep/_C.abi3.so.xz"
    echo "$sum  $keep/_C.abi3.so.xz" | sha256sum -c --quiet >&2
    xz -d -f "$keep/_C.abi3.so.xz"
    echo "$keep/_C.abi3.so"
    ;;
  *)
    echo "usage: $0 split [VERSION] | keep | join" >&2
    exit 2
    ;;
esac
