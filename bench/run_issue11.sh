#!/usr/bin/env bash
# Issue 11's identity figures: speculative output against plain decoding under --exact on the
# edit, code (first 40) and chat suites, greedy and seeded (temperature 0.7, top-p 0.9, seed 1),
# on llama.cpp and ONNX Runtime. Every prompt runs plain then auto; the JSON counts identical
# outputs per suite and marks each departure. Identity does not depend on timing, so this may
# run beside other work; its speeds count only on a quiet machine.
#
#   bench/run_issue11.sh                                  # everything (~2 h on 2 AVX2 cores)
#   BACKENDS=onnx MODES=seeded MAX_TOKENS=64 bench/run_issue11.sh
#
# Results: $OUT/i11-<backend>-<mode>-exact.json (tables on stdout).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-docs/results}
THREADS=${THREADS:-$(nproc)}
MAX_TOKENS=${MAX_TOKENS:-128}
BUNDLE=${BUNDLE:-${EDGESPEC_HOME:-$HOME/.cache/edgespec}/demo-onnx}  # the one `edgespec demo` makes
ES=".venv/bin/edgespec"
mkdir -p "$OUT"

targets() {  # $1: backend -> the bench's model arguments
  case $1 in
    llama) echo "--target $($ES models path demo-target) --draft $($ES models path demo-draft)" ;;
    onnx) echo "--target $BUNDLE" ;;
  esac
}

sampling() {  # $1: mode -> the bench's sampling arguments
  case $1 in
    greedy) echo "" ;;
    seeded) echo "--temperature 0.7 --top-p 0.9 --seed 1" ;;
  esac
}

for backend in ${BACKENDS:-llama onnx}; do
  for mode in ${MODES:-greedy seeded}; do
    echo "== $backend $mode ($(date -u +%H:%M), load $(cut -d' ' -f1 /proc/loadavg))"
    # shellcheck disable=SC2046  # targets and sampling are words by design
    $ES bench $(targets "$backend") $(sampling "$mode") --exact --methods plain,auto \
      --suite edit --suite code --suite chat --limit "${LIMIT:-40}" --max-tokens "$MAX_TOKENS" \
      --n-ctx 4096 --threads "$THREADS" --json "$OUT/i11-$backend-$mode-exact.json"
  done
done
