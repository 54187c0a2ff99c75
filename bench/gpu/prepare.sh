#!/usr/bin/env bash
# Gather what an offline CUDA machine lacks into one git-ignored folder, in uploads that each
# stay under a size limit (default: what a 64 MiB call carries beside the checkout,
# upload_mib.sh), and print the order in which to send them.
#
#   bash bench/gpu/prepare.sh [--out .gpukit] [--chunk-mib N]
#
# Runs where pip reaches PyPI. The GPU machine needs Python 3.12, CUDA 13, nvcc, cmake, ninja,
# scikit-build-core, numpy, onnx, tokenizers, safetensors, jinja2 and tqdm (docs/gpu.md); this
# brings the rest: llama-cpp-python's source (trimmed: no models, docs, examples, web UI or
# back-ends other than CPU and CUDA), the gguf and diskcache wheels, edgespec as a wheel,
# onnxruntime-gpu split into chunks, and the demo pair's real tokenizer (so prompts tokenize
# as Qwen2.5's do).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=.gpukit
CHUNK_MIB=
LLAMA_VERSION=0.3.36
ORT_VERSION=1.31.1
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT=$2; shift 2 ;;
    --chunk-mib) CHUNK_MIB=$2; shift 2 ;;
    *) echo "prepare.sh: unknown argument $1 (use --out DIR, --chunk-mib N)" >&2; exit 2 ;;
  esac
done
CHUNK_MIB=${CHUNK_MIB:-$(bash bench/gpu/upload_mib.sh)}  # what a call carries beside the checkout
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
DL="$OUT/downloads"  # stays here: not part of any upload
mkdir -p "$DL"
rm -rf "$OUT"/up*
mkdir -p "$OUT/up1"

fetch() {  # fetch FILE_GLOB PIP_ARGS...: download once, reuse after
  local glob=$1; shift
  if ! compgen -G "$DL/$glob" > /dev/null; then
    "$PY" -m pip download -q --no-deps -d "$DL" "$@"
  fi
}
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
           --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
fetch "onnxruntime_gpu-$ORT_VERSION-*.whl" --only-binary=:all: --python-version 3.12 \
  --implementation cp "${PLATFORMS[@]}" "onnxruntime-gpu==$ORT_VERSION"
fetch "llama_cpp_python-$LLAMA_VERSION.tar.gz" --no-binary=:all: "llama-cpp-python==$LLAMA_VERSION"
fetch "gguf-*.whl" --only-binary=:all: "gguf>=0.17"
# llama-cpp-python imports diskcache (its only dependency the CUDA image lacks)
fetch "diskcache-*.whl" --only-binary=:all: "diskcache>=5.6.1"

echo "trimming llama-cpp-python $LLAMA_VERSION" >&2
TRIM=$(mktemp -d)
trap 'rm -rf "$TRIM"' EXIT
tar -xzf "$DL/llama_cpp_python-$LLAMA_VERSION.tar.gz" -C "$TRIM"
SRC="$TRIM/llama_cpp_python-$LLAMA_VERSION"
V="$SRC/vendor/llama.cpp"
# llama.cpp built as a subproject builds no tools, tests or examples (LLAMA_STANDALONE is off);
# run.sh turns the multimodal library (tools/mtmd) off too
# the sdist carries llama.cpp's git history (a 38 MB pack) and notebooks the build never reads
rm -rf "$SRC/.git" "$SRC/examples" "$SRC/docs" "$V/.git"
rm -rf "$V"/{models,docs,media,examples,pocs,benches,tests,gguf-py,scripts,conversion}
rm -f "$V"/tools/mtmd/*.mp4
find "$V/tools" -mindepth 1 -maxdepth 1 ! -name mtmd ! -name CMakeLists.txt -exec rm -rf {} +
for backend in vulkan sycl opencl hexagon metal cann openvino webgpu virtgpu et zdnn kompute; do
  rm -rf "$V/ggml/src/ggml-$backend"
done
tar -czf "$OUT/up1/llama_cpp_python-$LLAMA_VERSION-trimmed.tar.gz" -C "$TRIM" \
  "llama_cpp_python-$LLAMA_VERSION"
cp "$DL"/gguf-*.whl "$DL"/diskcache-*.whl "$OUT/up1/"
rm -f "$DL"/edgespec-*.whl
"$PY" -m pip wheel -q --no-deps -w "$DL" . > /dev/null
cp "$DL"/edgespec-*.whl "$OUT/up1/"
"$PY" bench/gpu/make_models.py --save-tokenizer "$OUT/up1/qwen2.5-tokenizer"

ORT=$(ls "$DL"/onnxruntime_gpu-$ORT_VERSION-*.whl)
split -b "${CHUNK_MIB}M" -d -a 2 "$ORT" "$TRIM/$(basename "$ORT").part"
# llama-cpp-python built for a GPU architecture by prebuild_llama.sh, where one was: run.sh
# unpacks it on a GPU of that architecture instead of building (its parts say which)
# the project's prebuilt (../shared/gpu-kit: prebuild_llama.sh's package, SHA256SUMS beside it)
# goes into the downloads once, checked
SHARED=${GPU_KIT_SHARED:-../shared/gpu-kit}
if [ -f "$SHARED/SHA256SUMS" ]; then
  (cd "$SHARED" && sha256sum -c --quiet SHA256SUMS) >&2 \
    || { echo "prepare.sh: $SHARED does not match its SHA256SUMS" >&2; exit 3; }
  while read -r _ path; do
    [ -f "$DL/$path" ] && continue
    mkdir -p "$DL/$(dirname "$path")"
    cp "$SHARED/$path" "$DL/$path"
    echo "prebuilt llama-cpp-python from $SHARED/$path" >&2
  done < "$SHARED/SHA256SUMS"
fi
: > "$OUT/LLAMA.sha256"
for package in "$DL"/llama-cuda-sm*/llama_cpp_python-"$LLAMA_VERSION"-cuda.tar.xz; do
  [ -f "$package" ] || continue
  arch=$(basename "$(dirname "$package")")
  joined=$arch--$(basename "$package")  # the parts' name: run.sh joins them under it
  split -b "${CHUNK_MIB}M" -d -a 2 "$package" "$TRIM/$joined.part"
  echo "$(sha256sum < "$package" | cut -d' ' -f1)  $joined" >> "$OUT/LLAMA.sha256"
  echo "carrying $arch's prebuilt llama-cpp-python ($(du -h "$package" | cut -f1))" >&2
done
[ -s "$OUT/LLAMA.sha256" ] || echo "no prebuilt llama-cpp-python: the GPU machine builds it" \
  "(about 4 minutes there; bash bench/gpu/prebuild_llama.sh makes one where nvcc is)" >&2
# first fit: each part goes into the first upload with room for it (the last, small part
# usually rides with upload 1)
limit=$((CHUNK_MIB * 1024 * 1024))
for part in "$TRIM"/*.part*; do
  size=$(stat -c %s "$part")
  n=1
  while [ -d "$OUT/up$n" ] && [ $(($(du -sb "$OUT/up$n" | cut -f1) + size)) -gt $limit ]; do
    n=$((n + 1))
  done
  mkdir -p "$OUT/up$n"
  mv "$part" "$OUT/up$n/"
done
# one checksum list over every upload: run.sh names what is missing or damaged
(cd "$OUT" && find up* -type f | sort | xargs sha256sum > MANIFEST.sha256 \
  && sha256sum "downloads/$(basename "$ORT")" | sed "s# downloads/# #" > ORT.sha256)
cp "$OUT/MANIFEST.sha256" "$OUT/ORT.sha256" "$OUT/LLAMA.sha256" "$OUT/up1/"

echo
echo "Send these to the GPU machine, one upload each, into $OUT/ beside the checkout:"
for dir in "$OUT"/up*; do
  printf '  %s  %s\n' "$(du -sh "$dir" | cut -f1)" "$dir"
done
echo "then run there: bash bench/gpu/run.sh   (bash bench/gpu/run.sh --help for the steps)"
