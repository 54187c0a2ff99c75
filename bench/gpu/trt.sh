#!/usr/bin/env bash
# TensorRT for RTX in the GPU kit: the TensorRT runtime's first run on real hardware.
#
#   bash bench/gpu/trt.sh --prepare [--kit .gpukit] [--chunk-mib N]   # where pip reaches PyPI
#   bash bench/gpu/trt.sh [--kit .gpukit]                               # on the GPU machine
#
# --prepare downloads, for Python 3.12 on x86_64: tensorrt-rtx-cu13 1.7.1 (libs wheel 95 MB,
# cut into chunks; bindings 1.2 MB), cuda-bindings and cuda-pathfinder (cuda-python's parts),
# into $KIT/trt-up*, with checksums. Nothing is committed: .gpukit/ is git-ignored.
# On the GPU machine it installs them into $KIT/site-trt, then records, each in its own log
# under $KIT/results/trt/: `edgespec doctor`; the tests marked gpu in tests/test_tensorrt.py
# (engine build on a tiny model, logits against ONNX Runtime, CUDA-graph replays, greedy
# speculative = plain); and, when run.sh made the shape-true demo pair, a tensorrt export of
# it and measure.py --backend tensorrt on it. Whether TensorRT for RTX runs on a data-centre
# GPU (an H100 is not an RTX card) is unknown until this has run: the logs answer it.
set -euo pipefail
cd "$(dirname "$0")/../.."
KIT=.gpukit
CHUNK_MIB=
PREPARE=0
RTX_VERSION=1.7.1.116
while [ $# -gt 0 ]; do
  case "$1" in
    --kit) KIT=$2; shift 2 ;;
    --chunk-mib) CHUNK_MIB=$2; shift 2 ;;
    --prepare) PREPARE=1; shift ;;
    -h|--help) sed -n 2,16p "$0"; exit 0 ;;
    *) echo "trt.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$KIT"
KIT=$(cd "$KIT" && pwd)
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && [ "$PREPARE" = 1 ] && PY=${PYTHON:-.venv/bin/python}

if [ "$PREPARE" = 1 ]; then
  CHUNK_MIB=${CHUNK_MIB:-$(bash bench/gpu/upload_mib.sh)}  # what a call carries beside the checkout
  DL=$KIT/downloads-trt
  mkdir -p "$DL"
  rm -rf "$KIT"/trt-up*
  get=(--only-binary=:all: --python-version 3.12 --implementation cp
       --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --no-deps -d "$DL")
  "$PY" -m pip download -q "${get[@]}" "tensorrt-rtx-cu13-libs==$RTX_VERSION" \
    "tensorrt-rtx-cu13-bindings==$RTX_VERSION" "cuda-bindings>=13,<14" "cuda-pathfinder"
  n=1
  mkdir -p "$KIT/trt-up1"
  for whl in "$DL"/*.whl; do
    if [ "$(stat -c %s "$whl")" -gt $((CHUNK_MIB * 1024 * 1024)) ]; then
      split -b "${CHUNK_MIB}M" -d -a 2 "$whl" "$DL/$(basename "$whl").part"
      for part in "$DL/$(basename "$whl")".part*; do
        n=$((n + 1)); mkdir -p "$KIT/trt-up$n"; mv "$part" "$KIT/trt-up$n/"
      done
      (cd "$DL" && sha256sum "$(basename "$whl")") > "$KIT/trt-up1/$(basename "$whl").sha256"
    else
      cp "$whl" "$KIT/trt-up1/"
    fi
  done
  echo "Send these into $KIT/ on the GPU machine, then run there: bash bench/gpu/trt.sh"
  du -sh "$KIT"/trt-up* | sed 's/^/  /'
  exit 0
fi

# --- on the GPU machine ------------------------------------------------------------------------
say() { echo "[$(date +%H:%M:%S)] $*" >&2; }
RES=$KIT/results/trt
SITE=$KIT/site-trt
mkdir -p "$RES" "$SITE"
[ -d "$KIT/trt-up1" ] || { say "send $KIT/trt-up1 (made by trt.sh --prepare)"; exit 3; }
WHEELS=$(mktemp -d)
trap 'rm -rf "$WHEELS"' EXIT
cp "$KIT"/trt-up1/*.whl "$WHEELS/"
for sums in "$KIT"/trt-up1/*.sha256; do  # reassemble the chunked wheels, checked
  [ -e "$sums" ] || continue
  whl=$(awk '{print $2}' "$sums")
  cat "$KIT"/trt-up*/"$whl".part* > "$WHEELS/$whl"
  (cd "$WHEELS" && sha256sum -c --quiet "$sums") || { say "damaged or missing: $whl parts"; exit 3; }
done
"$PY" -m pip install -q --no-deps --no-index --target "$SITE" "$WHEELS"/*.whl
export PYTHONPATH=$SITE:$KIT/site${PYTHONPATH:+:$PYTHONPATH}
"$PY" -m edgespec doctor 2>&1 | tee "$RES/doctor.log"
say "tests marked gpu (tests/test_tensorrt.py): log in $RES/tests.log"
"$PY" -m pytest -v -m gpu tests/test_tensorrt.py 2>&1 | tee "$RES/tests.log" || true
HF=$KIT/work/hf  # run.sh's shape-true checkpoints (make_models.py)
if [ -d "$HF/qwen2.5-1.5b" ] && [ -d "$HF/qwen2.5-0.5b" ]; then
  B=$KIT/work/bundles/demo-tensorrt
  [ -e "$B/bundle.json" ] || "$PY" -m edgespec export --format tensorrt \
    --target "$HF/qwen2.5-1.5b" --draft "$HF/qwen2.5-0.5b" --out "$B" 2>&1 | tee "$RES/export.log"
  "$PY" bench/gpu/measure.py --backend tensorrt --device cuda --bundle "$B" --label demo \
    --json "$RES/demo-tensorrt.json" 2>&1 | tee "$RES/measure.log" || true
else
  say "no shape-true demo pair in $KIT/work (bash bench/gpu/run.sh makes it): tests only"
fi
say "done: send back $RES"
