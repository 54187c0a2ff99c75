#!/usr/bin/env bash
# Build llama.cpp's llama-server from the llama.cpp source that llama-cpp-python vendors, so the
# peer runs the very commit edgespec's llama.cpp back-end runs; print the binary's path.
#
# The CPU flags are scripts/setup.sh's (GGML_NATIVE off, each vector extension this CPU has,
# AMX never: sandboxes without AMX tile state crash on its kernels). The binary is cached in
# ~/.cache/edgespec/llama-server/<version>-<flags hash>/ and reused; the compile takes
# 15-30 min on 2 cores. Usage: bench/peers/llama_server.sh   (NICE=19 to build politely)
set -euo pipefail
LLAMA_VERSION=${LLAMA_VERSION:-0.3.36}  # must equal scripts/setup.sh's
CACHE=${EDGESPEC_CACHE:-$HOME/.cache/edgespec}

source "$(dirname "$0")/../../scripts/llama_cpu_args.sh"
out=$CACHE/llama-server/$LLAMA_VERSION-$(echo "$cmake_args" | sha256sum | cut -c1-12)
if [ -x "$out/llama-server" ]; then
  echo "$out/llama-server"
  exit 0
fi

sdist_dir=$CACHE/sdist
src=$sdist_dir/llama_cpp_python-$LLAMA_VERSION/vendor/llama.cpp
if [ ! -f "$src/CMakeLists.txt" ]; then
  mkdir -p "$sdist_dir"
  python3 -m pip download -q --no-binary :all: --no-deps -d "$sdist_dir" \
    "llama-cpp-python==$LLAMA_VERSION" >&2
  tar -xzf "$sdist_dir/llama_cpp_python-$LLAMA_VERSION.tar.gz" -C "$sdist_dir"
fi
grep -q '"ngram-mod"' "$src/common/speculative.cpp" || {
  echo "llama_server.sh: this llama.cpp has no --spec-type ngram-mod" >&2
  exit 1
}

echo "building llama-server from $src ($cmake_args)" >&2
build=$(mktemp -d "${TMPDIR:-/tmp}/llama-server-build.XXXXXX")
trap 'rm -rf "$build"' EXIT
# shellcheck disable=SC2086  # cmake_args is a list of flags
nice -n "${NICE:-0}" cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  $cmake_args -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF >&2
nice -n "${NICE:-0}" cmake --build "$build" --target llama-server \
  -j "${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" >&2
mkdir -p "$out"
cp "$build/bin/llama-server" "$out/llama-server.tmp"
mv "$out/llama-server.tmp" "$out/llama-server"
echo "$cmake_args" > "$out/cmake_args"
echo "$out/llama-server"
