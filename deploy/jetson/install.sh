#!/usr/bin/env bash
# Install edgespec on a flashed Jetson (JetPack 6 / Orin, JetPack 7 / Thor), from the
# repository root:  sudo bash deploy/jetson/install.sh [--no-doctor]
#
# - a venv in $PREFIX (default /opt/edgespec) that sees the system's site-packages, so the
#   TensorRT Python bindings JetPack installs with apt (python3-libnvinfer) import in it;
# - llama-cpp-python compiled for this GPU (GGML_CUDA, CMAKE_CUDA_ARCHITECTURES: 87 on Orin,
#   110 on Thor; read from nvidia-smi where it answers, else CUDA_ARCH=...);
# - edgespec with its ONNX extra (the standard-operator ONNX runs on ONNX Runtime's CPU
#   provider where no engine is built yet) and cuda-python matching the CUDA major version
#   (the TensorRT runtime's device memory, streams and CUDA graphs).
# NOT YET RUN on a Jetson (deploy/jetson/README.md says which steps ran where).
set -euo pipefail
PREFIX=${PREFIX:-/opt/edgespec}
DOCTOR=1
[ "${1:-}" = "--no-doctor" ] && DOCTOR=0
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export PATH=$CUDA_HOME/bin:$PATH
if [ -z "${CUDA_ARCH:-}" ]; then
  CUDA_ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 \
    | tr -d . || true)
fi
if [ -z "${CUDA_ARCH:-}" ]; then
  echo "install.sh: cannot read the GPU's compute capability; set CUDA_ARCH=87 (Orin) or" \
       "CUDA_ARCH=110 (Thor)" >&2
  exit 2
fi
CUDA_MAJOR=$(nvcc --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
[ -n "$CUDA_MAJOR" ] || { echo "install.sh: nvcc not found under $CUDA_HOME/bin" >&2; exit 2; }
python3 -c "import tensorrt" 2>/dev/null \
  || echo "install.sh: the tensorrt module does not import: sudo apt install nvidia-tensorrt" \
          "(part of nvidia-jetpack); TensorRT bundles run on ONNX Runtime until it does" >&2
python3 -m venv --system-site-packages "$PREFIX"
"$PREFIX/bin/pip" install -q --upgrade pip
CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCH" \
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
  "$PREFIX/bin/pip" install --no-binary llama-cpp-python ".[llama,onnx]" \
  "cuda-python>=$CUDA_MAJOR,<$((CUDA_MAJOR + 1))"
[ "$DOCTOR" = 1 ] && "$PREFIX/bin/edgespec" doctor
echo "installed in $PREFIX (CUDA $CUDA_MAJOR, sm_$CUDA_ARCH)"
