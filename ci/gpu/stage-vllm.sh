#!/usr/bin/env bash
# Staging for a GPU machine that has CUDA torch (2.11) and Python 3.12 but no vLLM and no package
# registry: vLLM's Python files, its two compiled libraries, the Python 3.12 wheels vLLM imports
# that such a machine lacks, and this package's own wheel (its `vllm.general_plugins` entry point)
# travel in carry/ and are unpacked there into one site folder. A user with a normal vLLM install
# on a GPU runner needs none of this: `vllm-hotpaths e2e` runs as it is.
#
#   here:              bash ci/gpu/stage-vllm.sh pack [VERSION]   (and pack-py VERSION for an overlay)
#                      -> carry/vllm-stage-1, carry/vllm-stage-2 (each under one transfer's limit)
#   there, each call:  bash ci/gpu/stage-vllm.sh keep      (carried parts are kept in /tmp/vllm-stage)
#   there, last call:  eval "$(bash ci/gpu/stage-vllm.sh install)"   (joins, checks, unpacks; sets
#                      PYTHONPATH and VLLM_HOTPATHS_VLLM_C, the compiled ops for the penalties
#                      CUDA conformance property)
#   then, optionally:  eval "$(bash ci/gpu/stage-vllm.sh overlay carry/vllm-py-0.33.0/py.tar.xz)"
#                      another version's Python files (a tar.xz of a wheel's .py files and its
#                      dist-info) first on PYTHONPATH, over the staged site's dependencies. Its
#                      compiled libraries are built for a newer torch and do not travel: the Model
#                      Runner V2 sampler kernels are Python and Triton, and the one compiled op
#                      they reach, `get_cuda_view_from_cpu_tensor` (the UVA view of pinned host
#                      buffers), comes from the staged version's `_C`, built for this torch, behind
#                      a stand-in `vllm._C_stable_libtorch`.
# Another release whose wheel is built for this torch (0.23 to 0.26 pin torch 2.11), with its own
# compiled libraries, for an engine end to end:
#   here:              bash ci/gpu/stage-vllm.sh pack-deps; bash ci/gpu/stage-vllm.sh pack-release 0.26.0
#                      -> carry/vllm-deps, carry/vllm-rel-0.26.0 (Python files), carry/vllm-rel-0.26.0-so
#   there, each call:  bash ci/gpu/stage-vllm.sh keep carry/vllm-deps ...   (the folders this call carries)
#   there, then:       eval "$(bash ci/gpu/stage-vllm.sh release 0.26.0)"
# The parts kept in /tmp must still be there for the next call: run the calls one after the other
# on the same machine.
#
# Two changes to vLLM's files, both for what is not carried: the flash-attention libraries (340 MB)
# stay behind, so `vllm/vllm_flash_attn/__init__.py` does not raise when they are missing (the
# engine runs with the Triton attention backend), and `third_party/deep_gemm` is left out.
set -euo pipefail
cd "$(dirname "$0")/../.."
keep=/tmp/vllm-stage
# vLLM 0.22.0's import-time needs that the GPU image lacks, for Python 3.12 (one version each), and
# py-spy (the decode profile samples both of vLLM's processes with it).
WHEELS=(pydantic==2.14.3 pydantic-core==2.50.4 annotated-types typing-inspection pyzmq gguf msgspec
        cbor2 cachetools openai==3.54.0 openai-harmony jiter distro pybase64 sniffio httpx2==2.16.2
        httpcore2==2.16.2 truststore idna llguidance==1.7.6 xgrammar==0.2.8 apache-tvm-ffi==0.1.15.post2
        fastapi==0.121.3 starlette==0.50.0 annotated-doc partial-json-parser setproctitle blake3
        python-multipart lark==1.2.2 diskcache==5.6.3 einops prometheus_client py-spy==0.4.3)
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_31_x86_64
           --platform manylinux_2_24_x86_64 --platform manylinux_2_34_x86_64 --platform manylinux_2_35_x86_64)

# What 0.24 and later need besides 0.22's wheels, first on PYTHONPATH in a release's site: jsonschema,
# which the GPU image lacks, and transformers with its hub at the versions 0.26's own environment
# resolves (the image's transformers 5.17 also meets 0.24's transformers>=5.5.3).
EXTRA_WHEELS=(transformers==5.25.0 huggingface_hub==2.4.0 tokenizers==0.23.3 safetensors==0.8.0 kernels==0.19.1
              regex==2026.11.19 click==8.5.1 jsonschema==4.26.0 jsonschema-specifications==2025.9.1
              referencing==0.37.0 rpds-py==2026.9.1 attrs==26.1.0)
# Compiled libraries an engine with the Triton attention backend on a dense model does not load.
LEFT_OUT=('vllm/third_party/deep_gemm/*' 'vllm/vllm_flash_attn/*.so' 'vllm/_moe_C*.so' 'vllm/_flashmla_C.abi3.so'
          'vllm/vllm-rs' '*/RECORD')

wheel_of() {  # the cached wheel of vLLM VERSION (downloaded once)
  local version=$1 cache=${STAGE_CACHE:-/tmp/vllm-stage-cache}
  mkdir -p "$cache"
  ls "$cache"/vllm-"$version"-*.whl >/dev/null 2>&1 || python3 -m pip download -q --no-deps "vllm==$version" -d "$cache"
  ls "$cache"/vllm-"$version"-*.whl | head -1
}

py312_wheels() {  # py312_wheels DIR SPEC...: Python 3.12 wheels for the GPU machine, into DIR
  local dir=$1 && shift
  mkdir -p "$dir"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${PLATFORMS[@]}" -d "$dir" "$@"
}

pack_site() {  # pack_site VERSION WORK: WORK/py.tar.xz (all but .so), WORK/so.tar.xz and its sha256
  local work=$2
  unzip -q "$(wheel_of "$1")" -d "$work/site" -x "${LEFT_OUT[@]}"
  sed -i 's/^    raise ImportError($/    _missing = (/' "$work/site/vllm/vllm_flash_attn/__init__.py"
  (cd "$work/site" && tar -cJf ../py.tar.xz --exclude='*.so' .)
  (cd "$work/site" && find . -name '*.so' | tar -cf - -T - | xz -9 -T0 > ../so.tar.xz)
  (cd "$work" && sha256sum so.tar.xz | cut -d' ' -f1 > so.tar.xz.sha256)
}

pack() {
  local version=${1:-0.22.0} cache=${STAGE_CACHE:-/tmp/vllm-stage-cache} work
  work=$(mktemp -d)
  py312_wheels "$cache/wheels" "${WHEELS[@]}"
  python3 -m pip wheel -q --no-deps . -w "$work/wheels"
  cp "$cache"/wheels/*.whl "$work/wheels/"
  (cd "$work" && tar -cf wheels.tar wheels)
  pack_site "$version" "$work"
  rm -rf carry/vllm-stage-*
  mkdir -p carry/vllm-stage-1 carry/vllm-stage-2
  mv "$work/wheels.tar" "$work/py.tar.xz" "$work/so.tar.xz.sha256" carry/vllm-stage-1/
  split -b 30m -d "$work/so.tar.xz" "$work/so.tar.xz.part-"
  mv "$work/so.tar.xz.part-00" carry/vllm-stage-1/
  mv "$work"/so.tar.xz.part-* carry/vllm-stage-2/
  rm -rf "$work"
  du -sh carry/vllm-stage-*
}

case "${1:-}" in
  pack) pack "${2:-}" ;;
  pack-deps)  # here: carry/vllm-deps, the wheels a release's site needs besides its own files
    work=$(mktemp -d) cache=${STAGE_CACHE:-/tmp/vllm-stage-cache}
    py312_wheels "$cache/wheels" "${WHEELS[@]}"
    py312_wheels "$cache/extra" "${EXTRA_WHEELS[@]}"
    python3 -m pip wheel -q --no-deps . -w "$work/wheels"
    mkdir -p "$work/extra" && cp "$cache"/wheels/*.whl "$work/wheels/" && cp "$cache"/extra/*.whl "$work/extra/"
    rm -rf carry/vllm-deps && mkdir -p carry/vllm-deps
    (cd "$work" && tar -cf "$OLDPWD/carry/vllm-deps/wheels.tar" wheels extra)
    rm -rf "$work"
    du -sh carry/vllm-deps
    ;;
  pack-release)  # here: carry/vllm-rel-VERSION (Python files) and carry/vllm-rel-VERSION-so (compiled)
    version=$2 work=$(mktemp -d)
    pack_site "$version" "$work"
    rm -rf "carry/vllm-rel-$version" "carry/vllm-rel-$version-so"
    mkdir -p "carry/vllm-rel-$version" "carry/vllm-rel-$version-so"
    mv "$work/py.tar.xz" "$work/so.tar.xz.sha256" "carry/vllm-rel-$version/"
    split -b 55m -d "$work/so.tar.xz" "carry/vllm-rel-$version-so/so.tar.xz.part-"
    rm -rf "$work"
    du -sh "carry/vllm-rel-$version"*
    ;;
  keep)
    mkdir -p "$keep"
    if [[ $# -gt 1 ]]; then  # these carried folders, each kept under its own name
      for dir in "${@:2}"; do mkdir -p "$keep/$(basename "$dir")" && cp "$dir"/* "$keep/$(basename "$dir")/"; done
    else
      cp carry/vllm-stage-*/* "$keep"/
    fi
    ls -laR "$keep" | grep -v '^d' | grep -v overlay >&2 || true
    ;;
  release)  # there: a release's site from kept folders (pack-deps, pack-release), first on PYTHONPATH
    version=$2
    cd "$keep"
    if [[ ! -f deps/.installed ]]; then
      mkdir -p deps/base deps/extra && tar -xf vllm-deps/wheels.tar -C deps
      python3 -m pip install -q --no-index --no-deps --no-compile --target deps/base deps/wheels/*.whl >&2
      python3 -m pip install -q --no-index --no-deps --no-compile --target deps/extra deps/extra/*.whl >&2
      touch deps/.installed
    fi
    site=$PWD/rel-$version
    if [[ ! -f $site/.installed ]]; then
      cat "vllm-rel-$version-so"/so.tar.xz.part-* > "rel-$version.so.tar.xz"
      echo "$(cat "vllm-rel-$version/so.tar.xz.sha256")  rel-$version.so.tar.xz" | sha256sum -c --quiet >&2
      mkdir -p "$site" && tar -xJf "vllm-rel-$version/py.tar.xz" -C "$site" && xz -dc "rel-$version.so.tar.xz" | tar -xf - -C "$site"
      rm "rel-$version.so.tar.xz" && touch "$site/.installed"
    fi
    echo "export PYTHONPATH=$site:$PWD/deps/extra:$PWD/deps/base\${PYTHONPATH:+:\$PYTHONPATH} PATH=$PWD/deps/base/bin:\$PATH"
    ;;
  install)
    cd "$keep"
    if [ ! -f site/.installed ]; then  # once per machine
      cat so.tar.xz.part-* > so.tar.xz
      echo "$(cat so.tar.xz.sha256)  so.tar.xz" | sha256sum -c --quiet >&2
      mkdir -p site && tar -xJf py.tar.xz -C site && xz -dc so.tar.xz | tar -xf - -C site
      tar -xf wheels.tar
      python3 -m pip install -q --no-index --no-deps --no-compile --target site wheels/*.whl >&2
      touch site/.installed
    fi
    echo "export PYTHONPATH=$PWD/site\${PYTHONPATH:+:\$PYTHONPATH} VLLM_HOTPATHS_VLLM_C=$PWD/site/vllm/_C.abi3.so"
    ;;
  pack-py)  # here: carry/vllm-py-VERSION/py.tar.xz, the Python files and dist-info of a vLLM wheel
    version=$2 work=$(mktemp -d)
    unzip -q "$(wheel_of "$version")" '*.py' "vllm-$version.dist-info/*" -d "$work" -x '*/RECORD'
    mkdir -p "carry/vllm-py-$version"
    (cd "$work" && tar -cJf - .) > "carry/vllm-py-$version/py.tar.xz"
    rm -rf "$work"
    du -sh "carry/vllm-py-$version"
    ;;
  overlay)
    tarball=$(realpath "$2")
    cd "$keep"
    dir=$PWD/overlay-$(basename "$(dirname "$tarball")")
    if [ ! -d "$dir" ]; then
      mkdir -p "$dir" && tar -xJf "$tarball" -C "$dir"
      cp site/vllm/_C.abi3.so "$dir/vllm/"
      printf '%s\n' "# Stand-in for the compiled library built for a newer torch: the UVA op comes from vllm._C." \
        "import vllm._C  # noqa: F401" > "$dir/vllm/_C_stable_libtorch.py"
    fi
    echo "export PYTHONPATH=$dir\${PYTHONPATH:+:\$PYTHONPATH}"
    ;;
  *)
    echo "usage: $0 pack [VERSION] | pack-deps | pack-release VERSION | pack-py VERSION | keep [DIR...] | install | release VERSION | overlay TARBALL" >&2
    exit 2
    ;;
esac
