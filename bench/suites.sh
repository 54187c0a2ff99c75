#!/usr/bin/env bash
# The suite benchmarks docs/benchmarks.md reports: interleaved runs with confidence intervals
# on edit, chat, open and code, for llama.cpp and ONNX Runtime against their own plain
# decoding, and the peers (llama-cpp-python's prompt lookup, onnxruntime-genai) each against
# its own plain decoding. Run it on a quiet machine (nothing
# else running, load average < 0.2).
#
#   STAGES="llama onnx peers" REPEAT=2 bench/suites.sh
#   SUITES="edit open-sample" STAGES="llama onnx" bench/suites.sh   # a shorter pass
#
# SUITES (default "edit chat open code") picks the suites; open-sample is bench/data's
# open-sample.jsonl: the first two prompts of each of open's eleven kinds (22).
# Minutes on a 2-core AVX2 CPU (plain ~8 tok/s on llama.cpp, ~10 on ONNX Runtime; prefill
# ~50 tok/s), REPEAT=1; REPEAT=2 doubles each stage:
#   llama  ~105 (edit 29, chat 14, open 40, code 22)   onnx   ~80 (+ ~10: the export, once)
#   peers  ~110 (edit 40, open 70; 4 runs a prompt)
#   genai  ~80 on the EPYC (plain ~24 tok/s on ONNX Runtime): edit 22, open 35, code 20
#          (not in the default STAGES: it needs edgespec[peers])
# Results: $OUT/i15-*.json (tables on stdout).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-docs/results}
REPEAT=${REPEAT:-1}
THREADS=${THREADS:-$(nproc)}
BUNDLE=${BUNDLE:-${EDGESPEC_HOME:-$HOME/.cache/edgespec}/demo-onnx}  # the one `edgespec demo` makes
ES=".venv/bin/edgespec"
TARGET=$($ES models path demo-target)
DRAFT=$($ES models path demo-draft)
mkdir -p "$OUT"
COMMON="--n-ctx 4096 --repeat $REPEAT --threads $THREADS --by-category"

SUITES=${SUITES:-edit chat open code}

suite_args() {  # the bench arguments of one suite: edit at 256 tokens, the others at 128
  case $1 in
    edit) echo "--suite edit --max-tokens 256" ;;
    code) echo "--suite code --limit 40 --max-tokens 128" ;;
    open-sample) echo "--suite bench/data/open-sample.jsonl --max-tokens 128" ;;
    *) echo "--suite $1 --max-tokens 128" ;;
  esac
}

suites() {  # $1: name, rest: --target ...
  local name=$1 suite
  shift
  for suite in $SUITES; do
    # shellcheck disable=SC2046  # suite_args is words by design
    $ES bench "$@" $COMMON $(suite_args "$suite") --json "$OUT/i15-$name-$suite.json"
  done
}

for stage in ${STAGES:-llama onnx peers}; do
  echo "== $stage ($(date -u +%H:%M), load $(cut -d' ' -f1 /proc/loadavg))"
  case $stage in
    llama)
      suites llama --target "$TARGET" --draft "$DRAFT" --methods plain,auto ;;
    onnx)
      if [ ! -f "$BUNDLE/bundle.json" ]; then
        $ES export --format onnx --target "$TARGET" --draft "$DRAFT" --out "$BUNDLE"
      fi
      suites onnx --target "$BUNDLE" --methods plain,auto ;;
    genai)  # onnxruntime-genai's draft-model and n-gram decoding on the bundle's own graphs
      suites genai --target "$BUNDLE" \
        --methods plain,auto,onnxruntime-genai-ngram,onnxruntime-genai-draft ;;
    peers)  # llama-cpp-python's prompt lookup (its README's num_pred_tokens 2 and 10)
      for suite in edit open; do
        $ES bench --target "$TARGET" --draft "$DRAFT" $COMMON $(suite_args $suite) \
          --methods plain,llama-cpp-python-pld --peer-k "${PEER_K:-2,10}" \
          --json "$OUT/i15-peer-lcp-$suite.json"
      done ;;
    *) echo "unknown stage $stage (llama onnx genai peers)" >&2; exit 2 ;;
  esac
done
