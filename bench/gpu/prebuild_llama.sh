#!/usr/bin/env bash
# Build llama-cpp-python with CUDA here, on a machine with no GPU, for one GPU architecture,
# so the GPU machine installs it in seconds instead of building it there (about 4 minutes of
# a 15-minute device session on 16 cores). prepare.sh then carries the wheel in the uploads,
# and run.sh uses it where the GPU's compute capability matches, building from source
# otherwise or where it does not load.
#
#   bash bench/gpu/prebuild_llama.sh [--arch 90] [--out .gpukit]
#
# Needs nvcc of the GPU machine's CUDA major version (13: its driver is 580) and pip's reach
# to PyPI (cuBLAS's headers and libraries come from the nvidia-cublas wheel). The CPU code is
# built for AVX2, not for this machine (-march=native would leave the GPU host's CPU an
# instruction set it may lack). On 2 cores it takes most of an hour; the wheel lands in
# OUT/downloads/llama-cuda-smARCH/.
set -euo pipefail
cd "$(dirname "$0")/../.."
ARCH=90
OUT=.gpukit
CUDA_MAJOR=13
while [ $# -gt 0 ]; do
  case "$1" in
    --arch) ARCH=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "prebuild_llama.sh: unknown argument $1 (use --arch N, --out DIR)" >&2; exit 2 ;;
  esac
done
LLAMA_VERSION=$(sed -n 's/^LLAMA_VERSION=//p' bench/gpu/prepare.sh)
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
version=$("$NVCC" --version 2>/dev/null | sed -n 's/.*release \([0-9]*\)\.\([0-9]*\).*/\1.\2/p')
if [ "${version%%.*}" != "$CUDA_MAJOR" ]; then
  echo "prebuild_llama.sh: needs nvcc from CUDA $CUDA_MAJOR (the GPU machine's); found" \
    "${version:-none} at $NVCC (set NVCC=...)" >&2
  exit 3
fi
DL="$OUT/downloads"
DEST="$DL/llama-cuda-sm$ARCH"
mkdir -p "$DL"
if [ ! -f "$DL/llama_cpp_python-$LLAMA_VERSION.tar.gz" ]; then
  "$PY" -m pip download -q --no-deps --no-binary=:all: -d "$DL" "llama-cpp-python==$LLAMA_VERSION"
fi
# cuBLAS of the same CUDA minor as nvcc: only its headers and sonames matter here, the GPU
# machine's own libcublas.so.13 is what loads there
if ! compgen -G "$DL/nvidia_cublas-$version.*.whl" > /dev/null; then
  "$PY" -m pip download -q --no-deps --only-binary=:all: -d "$DL" "nvidia-cublas==$version.*"
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# a toolkit of our own: nvcc's, plus cuBLAS, plus a libcuda stub to link against (the
# driver's libcuda.so.1 is what loads on the GPU machine)
TOOLKIT=$WORK/cuda
cp -a "$(cd "$(dirname "$(readlink -f "$NVCC")")/.." && pwd)" "$TOOLKIT"
TARGET=$TOOLKIT/targets/x86_64-linux
"$PY" -c "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); \
[z.extract(n, sys.argv[2]) for n in z.namelist() if '/include/' in n or '/lib/' in n]" \
  "$(ls "$DL"/nvidia_cublas-"$version".*.whl | head -1)" "$WORK/cublas"
cp "$WORK"/cublas/nvidia/cu*/include/* "$TARGET/include/"
cp "$WORK"/cublas/nvidia/cu*/lib/libcublas*.so.* "$TARGET/lib/"
for lib in libcublas libcublasLt; do ln -sf "$lib.so.$CUDA_MAJOR" "$TARGET/lib/$lib.so"; done
mkdir -p "$TARGET/lib/stubs"
echo 'void edgespec_link_stub(void) {}' > "$WORK/stub.c"
gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$TARGET/lib/stubs/libcuda.so" "$WORK/stub.c"

tar -xzf "$DL/llama_cpp_python-$LLAMA_VERSION.tar.gz" -C "$WORK"
echo "building llama-cpp-python $LLAMA_VERSION for sm_$ARCH with CUDA $version" \
  "(log: $OUT/logs/prebuild-llama.log)" >&2
mkdir -p "$OUT/logs" "$WORK/wheel"
PATH=$TOOLKIT/bin:$PATH CUDACXX=$TOOLKIT/bin/nvcc CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=$ARCH -DLLAVA_BUILD=off \
-DCUDAToolkit_ROOT=$TOOLKIT -DCMAKE_CUDA_COMPILER=$TOOLKIT/bin/nvcc -DGGML_NATIVE=OFF \
-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON" \
  "$PY" -m pip wheel -v --no-deps -w "$WORK/wheel" "$WORK/llama_cpp_python-$LLAMA_VERSION" \
  > "$OUT/logs/prebuild-llama.log" 2>&1
rm -rf "$DEST"
mkdir -p "$DEST"
mv "$WORK"/wheel/llama_cpp_python-*.whl "$DEST/"
echo "$DEST/$(ls "$DEST")  $(du -h "$DEST"/*.whl | cut -f1)" >&2
