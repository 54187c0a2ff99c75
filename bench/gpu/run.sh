#!/usr/bin/env bash
# The GPU kit, on the GPU machine: install what prepare.sh brought, build llama.cpp for this
# GPU, make shape-true models of the demo pair (and a 7B target), export them through
# `edgespec export`, and measure every back-end with bench/gpu/measure.py. Nothing is fetched.
#
#   bash bench/gpu/run.sh                 # everything; steps already done are skipped
#   bash bench/gpu/run.sh --background    # start the build and the models, return at once
#   bash bench/gpu/run.sh --smoke --out D # a CPU check with tiny models, in this environment
#   bash bench/gpu/run.sh --pairs 7b,demo --backends llama   # the 7B pair first, llama.cpp
#   options: --kit DIR (default .gpukit)  --out DIR (results)  --wait-min N
#            --pairs LIST: pairs measured, in this order (default demo,7b; --no-7b: demo);
#              q35 (llama.cpp only): a Qwen3.5-2B-like hybrid target whose MTP layer is
#              timed against its token (bench/head_cost.py), and its verify curve (tune)
#            --backends LIST: llama, onnx (default both); llama alone needs only upload 1,
#              and its GGUF models are written straight into quantized blocks (make_gguf.py)
#            --no-head: the GGUF pairs without their target's random EAGLE-3 head (by default
#              each has one, and measure.py times its drafted token against the target's)
#            --verify-ops (or VERIFY_OPS=1): after the measures, the INT4 target's passes by
#            operator and width (bench/gpu/verify_ops.py)
#            --diag-cap S: seconds each diagnostic may take after the measures (default 120)
#
# End-to-end measures first; diagnostics (tests marked gpu, operators by width) after them,
# each under the cap. Steps leave marks in $KIT/state, so a run after uploads or after
# --background picks up where the last one stopped. Logs: $KIT/logs. Results: $OUT/*.json
# (each as its measure ends) and $OUT/table.txt (rewritten after each).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
REPO=$PWD
KIT=.gpukit
OUT=
SMOKE=0
BACKGROUND=0
PAIRS=demo,7b
BACKENDS=llama,onnx
WAIT_MIN=25
DIAG_CAP=120
VERIFY_OPS=${VERIFY_OPS:-0}
HEADS=1
while [ $# -gt 0 ]; do
  case "$1" in
    --kit) KIT=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --smoke) SMOKE=1; shift ;;
    --background) BACKGROUND=1; shift ;;
    --no-7b) PAIRS=demo; shift ;;
    --pairs) PAIRS=$2; shift 2 ;;
    --backends) BACKENDS=$2; shift 2 ;;
    --diag-cap) DIAG_CAP=$2; shift 2 ;;
    --wait-min) WAIT_MIN=$2; shift 2 ;;
    --verify-ops) VERIFY_OPS=1; shift ;;
    --no-head) HEADS=0; shift ;;
    -h|--help) sed -n 2,23p "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
for x in ${PAIRS//,/ }; do
  case $x in demo|7b|q35) ;; *) echo "run.sh: --pairs $PAIRS: give demo, 7b and/or q35" >&2
    exit 2 ;; esac
done
for x in ${BACKENDS//,/ }; do
  case $x in llama|onnx) ;; *) echo "run.sh: --backends $BACKENDS: give llama and/or onnx" >&2
    exit 2 ;; esac
done
has() { [[ ",$1," == *",$2,"* ]]; }  # has LIST ITEM
WITH_7B=0
if has "$PAIRS" 7b; then WITH_7B=1; fi
KIT=$(mkdir -p "$KIT" && cd "$KIT" && pwd)
OUT=${OUT:-$KIT/results}
mkdir -p "$OUT" "$KIT/state" "$KIT/logs"
OUT=$(cd "$OUT" && pwd)
WORK=$KIT/work
SITE=$KIT/site
export PYTHONUNBUFFERED=1
say() { echo "[$(date +%H:%M:%S)] $*" >&2; }
done_mark() { touch "$KIT/state/$1"; }
is_done() { [ -e "$KIT/state/$1" ]; }

# --- the CPU smoke run: this environment as it is, tiny models, tiny settings ----------------
if [ "$SMOKE" = 1 ]; then
  PY=${PYTHON:-python3}
  [ -x .venv/bin/python ] && PY=${PYTHON:-.venv/bin/python}
  T=$(mktemp -d)
  trap 'rm -rf "$T"' EXIT
  if [ "$PAIRS" = q35 ]; then  # the MTP measure's path on the tiny hybrid shape
    "$PY" bench/hybrid_gguf.py --shape tiny --quant q8_0 --out "$T/target.gguf"
    "$PY" bench/head_cost.py "$T/target.gguf" --device cpu --reps 2 --json "$OUT/q35-mtp.json"
    exit 0
  fi
  if [ "$WITH_7B" = 1 ] && [ "$BACKENDS" = llama ]; then
    # the 7B mode's path: a tiny pair (and its EAGLE-3 head) written straight into GGUF
    # blocks, measured with the full grid as the 7B pair is
    "$PY" bench/gpu/make_gguf.py --pair tiny --head --out "$T/gguf"
    "$PY" bench/gpu/measure.py --smoke --device cpu --backend llama --grid full \
      --bundle "$T/gguf" --label tiny-direct --json "$OUT/tiny-direct-llama.json"
    "$PY" bench/gpu/measure.py --report "$OUT"/tiny-direct-*.json > "$OUT/table.txt"
    cat "$OUT/table.txt"
    exit 0
  fi
  "$PY" bench/gpu/make_models.py --shape tiny --out "$T/hf-target" --seed 1
  "$PY" bench/gpu/make_models.py --shape tiny-draft --out "$T/hf-draft" --seed 2
  "$PY" -m edgespec export --target "$T/hf-target" --draft "$T/hf-draft" --out "$T/gguf" \
    --target-quant q4_k_m --draft-quant q8_0
  "$PY" bench/gpu/make_gguf.py --shape tiny --head --out "$T/head.gguf"
  "$PY" -m edgespec export --format onnx --target "$T/hf-target" --draft "$T/hf-draft" \
    --head "$T/head.gguf" --out "$T/onnx" --target-quant int4 --draft-quant fp16
  "$PY" bench/gpu/measure.py --smoke --device cpu --backend llama --bundle "$T/gguf" \
    --label tiny --json "$OUT/tiny-llama.json"
  "$PY" bench/gpu/measure.py --smoke --device cpu --backend onnx --graphs off \
    --bundle "$T/onnx" --label tiny --json "$OUT/tiny-onnx.json"
  "$PY" bench/gpu/measure.py --report "$OUT"/tiny-*.json > "$OUT/table.txt"
  cat "$OUT/table.txt"
  exit 0
fi

# --- the GPU machine ---------------------------------------------------------------------------
PY=${PYTHON:-python3}
command -v nvcc > /dev/null || export PATH=/usr/local/cuda/bin:$PATH  # CUDA images often omit it
# Code runs from the install in $SITE: the checkout is not a package layout (pyproject maps
# runtimes/ to edgespec.runtimes), so a checkout's edgespec first on the path fails with "No
# module named 'edgespec.runtimes'" (seen on an H200). PYTHONSAFEPATH keeps the working folder
# off the path; the checkout comes after $SITE for the tests' own `tests` imports.
export PYTHONSAFEPATH=1
export PYTHONPATH=$SITE:$REPO${PYTHONPATH:+:$PYTHONPATH}

check_uploads() {  # $1 = all | up1 | llama: which uploads the next steps need (llama: upload 1
  # and the parts of a prebuilt llama-cpp-python, wherever they went)
  local manifest=$KIT/up1/MANIFEST.sha256
  [ -f "$manifest" ] || { say "upload 1 missing: send $KIT/up1 (made by prepare.sh)"; exit 3; }
  local missing=0
  while read -r sum path; do
    [ "$1" = up1 ] && [[ $path != up1/* ]] && continue
    [ "$1" = llama ] && [[ $path != up1/* ]] && [[ $path != */llama-cuda-sm* ]] && continue
    if [ ! -f "$KIT/$path" ]; then
      say "missing: $path — send $KIT/${path%%/*}"; missing=1
    elif ! is_done "ok-${path//\//_}"; then
      echo "$sum  $KIT/$path" | sha256sum -c --quiet - \
        || { say "damaged: $path — send $KIT/${path%%/*} again"; exit 3; }
      done_mark "ok-${path//\//_}"
    fi
  done < "$manifest"
  [ $missing = 0 ] || exit 3
}

install_python_parts() {
  mkdir -p "$SITE"
  if ! is_done wheels; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" \
      "$KIT"/up1/gguf-*.whl "$KIT"/up1/diskcache-*.whl
    done_mark wheels
  fi
  # edgespec from this checkout (it may be newer than the wheel prepare.sh made)
  "$PY" -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --upgrade \
    --target "$SITE" "$REPO" > "$KIT/logs/edgespec-install.log" 2>&1 && return
  say "edgespec from prepare.sh's wheel, which may be older than this checkout: the checkout's" \
    "own did not build (see $KIT/logs/edgespec-install.log)"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade \
    --target "$SITE" "$KIT"/up1/edgespec-*.whl
}

build_llama() {  # llama-cpp-python with CUDA for this GPU only, on every core
  is_done llama && return
  local src cmake_args cpu_flags pair
  src=$(ls "$KIT"/up1/llama_cpp_python-*-trimmed.tar.gz)
  # host code: this CPU's vector extensions without AMX (GGML_NATIVE off). The native build
  # (AMX kernels on the H100's and H200's Xeons) died in llama_model_load_from_file whenever
  # numpy was imported first (issue 45). --upgrade: pip --target keeps a llama_cpp already in
  # $SITE otherwise ("Target directory ... already exists"), leaving the new build unused.
  source scripts/llama_cpu_args.sh
  say "building llama-cpp-python with CUDA, $cmake_args (log: $KIT/logs/llama-build.log)"
  CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=native -DLLAVA_BUILD=off $cmake_args" \
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
    "$PY" -m pip install --no-index --no-deps --no-build-isolation --no-compile --upgrade \
      --target "$SITE" "$src" > "$KIT/logs/llama-build.log" 2>&1
  done_mark llama
  say "llama-cpp-python built"
}

make_model() {  # make_model SHAPE
  is_done "hf-$1" && return
  say "make $1"
  if "$PY" bench/gpu/make_models.py --shape "$1" --tokenizer "$KIT/up1/qwen2.5-tokenizer" \
    --out "$WORK/hf/$1" > "$KIT/logs/hf-$1.log" 2>&1; then
    done_mark "hf-$1"
  else
    say "make $1 failed: $(tail -2 "$KIT/logs/hf-$1.log")"
  fi
}

export_bundle() {  # export_bundle NAME FORMAT TARGET DRAFT TARGET_QUANT DRAFT_QUANT [HEAD.gguf]
  # with the head where one is given (its target then outputs the head's layers' inputs);
  # should that fail, the bundle is exported without it, so the head never costs a bundle
  local name=$1 head=${7:-}
  is_done "bundle-$name" && return
  say "export $name${head:+ with its EAGLE-3 head}"
  if { [ -n "$head" ] && [ -f "$head" ] && export_once "$@" --head "$head"; } \
    || { [ -n "$head" ] && say "export $name without its head" && export_once "${@:1:6}"; } \
    || { [ -z "$head" ] && export_once "$@"; }; then
    done_mark "bundle-$name"
    say "exported $name"
  else
    done_mark "failed-bundle-$name"
    say "export $name failed: $(tail -2 "$KIT/logs/export-$name.log")"
  fi
}

export_once() {  # export_once NAME FORMAT TARGET DRAFT TARGET_QUANT DRAFT_QUANT [HEAD FLAG...]
  local name=$1 format=$2
  rm -rf "${WORK:?}/bundles/$name"  # what a failed try left: export refuses a non-empty folder
  local extra=("${@:8}")
  [ "$format" = onnx ] && extra+=(--device cuda)
  "$PY" -m edgespec export --format "$format" --target "$WORK/hf/$3" --draft "$WORK/hf/$4" \
    --out "$WORK/bundles/$name" --target-quant "$5" --draft-quant "$6" --force "${extra[@]}" \
    >> "$KIT/logs/export-$name.log" 2>&1
}

make_head() {  # make_head SHAPE: its random EAGLE-3 head beside its HF folder (unless --no-head)
  [ "$HEADS" = 1 ] || return 0
  is_done "head-$1" && return
  if "$PY" bench/gpu/make_gguf.py --shape "$1" --head --tokenizer "$KIT/up1/qwen2.5-tokenizer" \
    --out "$WORK/hf/$1.head.gguf" > "$KIT/logs/head-$1.log" 2>&1; then
    done_mark "head-$1"
  else
    say "make $1's head failed: $(tail -2 "$KIT/logs/head-$1.log")"
  fi
}

gguf_pair() {  # gguf_pair PAIR: the pair's GGUF bundle written straight into quantized
  # blocks (make_gguf.py: seconds, where an HF checkpoint, its f16 GGUF and llama.cpp's
  # quantizer take minutes), with its target's f16 EAGLE-3 head unless --no-head; after
  # llama.cpp is in (it reads the files' vocabularies back)
  local name=$1-gguf head=()
  is_done "bundle-$name" && return
  [ "$1" = q35 ] && { hybrid_target; return; }
  [ "$HEADS" = 1 ] && head=(--head)
  say "make $name (random Q4_K_M target, Q8_0 draft${head:+, f16 EAGLE-3 head})"
  rm -rf "${WORK:?}/bundles/$name"
  if "$PY" bench/gpu/make_gguf.py --pair "$1" "${head[@]}" \
    --tokenizer "$KIT/up1/qwen2.5-tokenizer" --out "$WORK/bundles/$name" \
    > "$KIT/logs/make-$name.log" 2>&1; then
    done_mark "bundle-$name"
    say "made $name"
  else
    done_mark "failed-bundle-$name"
    say "make $name failed: $(tail -2 "$KIT/logs/make-$name.log")"
  fi
}

hybrid_target() {  # the q35 "pair": a Qwen3.5-2B-like hybrid target with one MTP layer, no
  # draft (bench/hybrid_gguf.py: f16, then llama.cpp's quantizer)
  say "make q35-gguf (random Q4_K_M Qwen3.5-2B-like target, one MTP layer)"
  rm -rf "${WORK:?}/bundles/q35-gguf" && mkdir -p "$WORK/bundles/q35-gguf"
  if "$PY" bench/hybrid_gguf.py --shape qwen3.5-2b --quant q4_k_m \
    --out "$WORK/bundles/q35-gguf/target.gguf" > "$KIT/logs/make-q35-gguf.log" 2>&1; then
    done_mark bundle-q35-gguf
    say "made q35-gguf"
  else
    done_mark failed-bundle-q35-gguf
    say "make q35-gguf failed: $(tail -2 "$KIT/logs/make-q35-gguf.log")"
  fi
}

models_and_exports() {  # ONNX exports need no llama.cpp: they run while it builds
  local pids=() pair
  if has "$BACKENDS" onnx; then
    make_model qwen2.5-0.5b
    make_model qwen2.5-1.5b
    export_bundle demo-onnx onnx qwen2.5-1.5b qwen2.5-0.5b int4 fp16 &
    pids+=($!)
    # on an H200 the INT4 target's 2-token pass cost 5.2 of its 1-token pass (MatMulNBits);
    # an fp16 target has no MatMulNBits
    make_head qwen2.5-1.5b  # the fp16 bundle carries it: the kit measures its cost there
    export_bundle demo-onnx-fp16 onnx qwen2.5-1.5b qwen2.5-0.5b fp16 fp16 \
      "$WORK/hf/qwen2.5-1.5b.head.gguf" &
    pids+=($!)
    if [ $WITH_7B = 1 ]; then
      make_model qwen2.5-7b
      export_bundle 7b-onnx onnx qwen2.5-7b qwen2.5-0.5b int4 fp16 &
      pids+=($!)
    fi
  fi
  if has "$BACKENDS" llama; then
    if wait_for llama; then
      for pair in ${PAIRS//,/ }; do gguf_pair "$pair"; done  # in measuring order
    else
      for pair in ${PAIRS//,/ }; do done_mark "failed-bundle-$pair-gguf"; done
    fi
  fi
  for pid in "${pids[@]}"; do wait "$pid"; done
}

wait_for() {  # wait_for MARK: 0 once a step has left it; 1 if it failed or WAIT_MIN passed
  local deadline=$((SECONDS + 60 * WAIT_MIN))
  until is_done "$1"; do
    if [ -e "$KIT/state/failed-$1" ]; then say "$1 failed (see $KIT/logs)"; return 1; fi
    [ $SECONDS -lt $deadline ] || { say "gave up waiting for $1 after $WAIT_MIN min"; return 1; }
    sleep 5
  done
}

background_steps() {
  rm -f "$KIT"/state/failed-*
  if prebuilt_llama_listed; then
    llama_from_uploads  # now where upload 1 carries it whole, else in the main run
  else
    build_llama || done_mark failed-llama &
  fi
  models_and_exports
  wait  # a build still running
  done_mark background
}

joined_upload() {  # joined_upload PARTS_GLOB SUMS: a file prepare.sh split across uploads,
  # joined and checked in $WORK; its name is the parts' without ".partNN" and any "...--" prefix
  local parts joined file
  parts=$(find "$KIT"/up* -name "$1" -printf '%f %p\n' | sort | cut -d' ' -f2-)
  [ -n "$parts" ] || { say "no upload holds $1"; return 1; }
  joined=$(basename "$(echo "$parts" | head -1)" | sed 's/\.part[0-9]*$//')
  mkdir -p "$WORK/joined"
  # shellcheck disable=SC2086  # one path per word, in part order
  cat $parts > "$WORK/$joined"
  (cd "$WORK" && awk -v name="$joined" '$2 == name' "$KIT/up1/$2" | sha256sum -c --quiet -) >&2 \
    || { rm -f "$WORK/$joined"; return 1; }
  file=$WORK/joined/${joined#*--}
  mv "$WORK/$joined" "$file"
  echo "$file"
}

install_onnxruntime_gpu() {
  is_done ort && return
  local wheel
  wheel=$(joined_upload 'onnxruntime_gpu-*.whl.part*' ORT.sha256)
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$wheel"
  rm -f "$wheel"
  done_mark ort
}

gpu_arch() {  # this GPU's compute capability as CUDA names architectures (9.0 -> 90)
  { nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null || true; } \
    | head -1 | tr -d '. '
}

prebuilt_parts() {  # the uploads' paths of llama-cpp-python's parts built for this GPU, if any
  local arch
  arch=$(gpu_arch)
  [ -z "$arch" ] || awk -v arch="$arch" 'index($2, "/llama-cuda-sm" arch "--") { print $2 }' \
    "$KIT/up1/MANIFEST.sha256"
}

prebuilt_llama_listed() {  # the uploads carry llama-cpp-python built for this GPU (prebuild_llama.sh)
  [ -n "$(prebuilt_parts)" ]
}

llama_from_uploads() {  # once a prebuilt for this GPU is here whole: install it, or where it
  # does not load, build from source in the background (once: the first caller does it)
  is_done llama && return 0
  local parts path
  parts=$(prebuilt_parts)
  for path in $parts; do [ -f "$KIT/$path" ] || return 0; done
  [ -n "$parts" ] || return 0
  is_done llama-prebuilt-tried && return 0
  done_mark llama-prebuilt-tried
  install_prebuilt_llama && return 0
  { build_llama || done_mark failed-llama; } &
}

install_prebuilt_llama() {  # 0 once the prebuilt loads with its GPU back-end; else 1, removed
  local package log=$KIT/logs/llama-prebuilt.log
  package=$(joined_upload "llama-cuda-sm$(gpu_arch)--*.tar.xz.part*" LLAMA.sha256) || return 1
  mkdir -p "$SITE"
  if tar -xJf "$package" -C "$SITE" > "$log" 2>&1 \
     && "$PY" -c "import sys, llama_cpp; sys.exit(0 if llama_cpp.llama_supports_gpu_offload() \
else 4)" >> "$log" 2>&1; then
    rm -f "$package"
    done_mark llama
    say "llama-cpp-python: the prebuilt one for sm_$(gpu_arch) (no build here)"
    return 0
  fi
  rm -rf "$package" "$SITE/llama_cpp" "$SITE"/llama_cpp_python-*.dist-info
  say "the prebuilt llama-cpp-python does not load here ($(tail -1 "$log")): building it"
  return 1
}

measure_all() {  # the pairs in --pairs order, graphs on; llama.cpp with graphs off last
  local pair format formats=()
  has "$BACKENDS" llama && formats+=(gguf)
  has "$BACKENDS" onnx && formats+=(onnx-fp16 onnx)
  # timings taken beside a build or an export on every core would be the CPU's, not the GPU's
  wait_for background || say "measuring beside background steps still running: timings suspect"
  for pair in ${PAIRS//,/ }; do
    # newest questions first (2026-11-26 measured the INT4 ONNX pair with graphs on and off)
    if [ "$pair" = q35 ]; then
      has "$BACKENDS" llama && wait_for bundle-q35-gguf && mtp_measure "$WORK/bundles/q35-gguf"
      continue
    fi
    for format in "${formats[@]}"; do
      [ "$pair-$format" = 7b-onnx-fp16 ] && continue  # not exported: the demo pair tells
      wait_for "bundle-$pair-$format" || continue
      local bundle=$WORK/bundles/$pair-$format backend=onnx label=$pair
      [ $format = gguf ] && backend=llama && check_llama_load "$bundle"
      [ $format = onnx-fp16 ] && label=$pair-fp16
      local grid=full
      # the demo pair's oracle grid was measured on 2026-11-26 (H200): 40 s of device time
      [ $format = onnx ] && [ "$pair" = demo ] && grid=quick
      run_measure "$label" $backend on $grid "$bundle"
    done
  done
  # llama.cpp without graphs (quick): the demo pair's, after every graphs-on measure
  if has "$BACKENDS" llama && has "$PAIRS" demo && is_done bundle-demo-gguf; then
    run_measure demo llama off quick "$WORK/bundles/demo-gguf"
  fi
  cat "$OUT/table.txt" 2> /dev/null || say "no measure finished"
}

mtp_measure() {  # mtp_measure BUNDLE: the q35 target's MTP token against its own (head_cost.py)
  # and its verify curve (edgespec tune), into $OUT/q35-mtp-cuda.json and q35-tune-cuda.txt
  [ -s "$OUT/q35-mtp-cuda.json" ] && return
  say "measure q35: its MTP layer and verify curve (log: $KIT/logs/measure-q35.log)"
  "$PY" "${LLAMA_FIRST[@]}" bench/head_cost.py "$1/target.gguf" --device cuda --reps 20 \
    --json "$OUT/q35-mtp-cuda.json" > "$KIT/logs/measure-q35.log" 2>&1 \
    || say "measure q35 failed: $(tail -3 "$KIT/logs/measure-q35.log")"
  "$PY" -m edgespec tune --target "$1/target.gguf" --device cuda --n-max 17 --n-ctx 1024 \
    > "$OUT/q35-tune-cuda.txt" 2>> "$KIT/logs/measure-q35.log" \
    || say "tune q35 failed: $(tail -3 "$KIT/logs/measure-q35.log")"
}

write_table() {  # the table over every measure so far: a call cut short keeps what it has
  local reports=("$OUT"/*-graphs-*.json)
  [ -e "${reports[0]}" ] || return 0
  "$PY" bench/gpu/measure.py --report "${reports[@]}" > "$OUT/table.txt" \
    || say "the table failed (the JSONs are whole)"
}

operator_times() {  # --verify-ops: the INT4 target's passes by operator and width, each
  # kernel waited for; its table goes after the measures'; at most DIAG_CAP seconds
  [ -s "$OUT/verify-ops-cuda.json" ] && return
  wait_for bundle-demo-onnx || return 0
  say "the INT4 target's operators by width, at most ${DIAG_CAP} s (log: $KIT/logs/verify-ops-cuda.log)"
  if CUDA_LAUNCH_BLOCKING=1 timeout "$DIAG_CAP" "$PY" bench/gpu/verify_ops.py "$WORK/bundles/demo-onnx/target.int4" \
    --device cuda --widths 1,2,5,9 --rounds 5 --json "$OUT/verify-ops-cuda.json" \
    > "$OUT/verify-ops-cuda.txt" 2> "$KIT/logs/verify-ops-cuda.log"; then
    tee -a "$OUT/table.txt" < "$OUT/verify-ops-cuda.txt"
  else
    say "operator times failed: $(tail -3 "$KIT/logs/verify-ops-cuda.log")"
  fi
}

# how measure.py starts for llama.cpp: check_llama_load prefixes an early `import llama_cpp`
# where this build loads models only that way (bench/gpu/llama_load_check.py)
LLAMA_FIRST=()
LLAMA_CHECKED=0

check_llama_load() {  # check_llama_load BUNDLE: which import orders load its draft model
  [ $LLAMA_CHECKED = 1 ] && return
  LLAMA_CHECKED=1
  say "llama.cpp load check (log: $KIT/logs/llama-load-check.log)"
  local rc=0
  "$PY" bench/gpu/llama_load_check.py "$1"/draft.*.gguf --json "$OUT/llama-load-check.json" \
    > "$KIT/logs/llama-load-check.log" 2>&1 || rc=$?
  cat "$KIT/logs/llama-load-check.log" >&2
  if [ $rc = 3 ]; then
    say "edgespec's own import order crashes this llama.cpp build: measuring with llama_cpp first"
    LLAMA_FIRST=(-c "import llama_cpp, runpy, sys; sys.argv = sys.argv[1:]; \
runpy.run_path(sys.argv[0], run_name='__main__')")
  fi
}

run_measure() {  # run_measure PAIR BACKEND GRAPHS GRID BUNDLE [FLAG...]: a process each
  local name=$1-$2-graphs-$3  # (clean CUDA state)
  [ -s "$OUT/$name.json" ] && return  # measured in an earlier call: a run resumes
  say "measure $name"
  local launch=()
  [ "$2" = llama ] && launch=("${LLAMA_FIRST[@]}")
  "$PY" "${launch[@]}" bench/gpu/measure.py --device cuda --backend "$2" --graphs "$3" --grid "$4" \
    --bundle "$5" "${@:6}" --label "$1" --json "$OUT/$name.json" \
    > "$KIT/logs/measure-$name.log" 2>&1 \
    || say "measure $name failed: $(tail -3 "$KIT/logs/measure-$name.log")"
  write_table
}

gpu_tests() {  # every test marked gpu (TensorRT's skip here; trt.sh runs them with TensorRT),
  # a diagnostic: after the measures, at most DIAG_CAP seconds
  is_done gpu-tests && return
  say "tests marked gpu, at most ${DIAG_CAP} s"
  local files
  mapfile -t files < <(grep -l "pytest.mark.gpu" tests/test_*.py)
  timeout "$DIAG_CAP" "$PY" -m pytest -v -p no:cacheprovider -m gpu "${files[@]}" 2>&1 \
    | tee "$OUT/gpu-tests.txt" | tail -15 || true
  done_mark gpu-tests
}

# sourced (tests/test_gpu_kit.py drives the steps with a stand-in Python): functions only
if [ "${BASH_SOURCE[0]}" != "$0" ]; then return 0; fi
check_uploads up1
install_python_parts
if [ "$BACKGROUND" = 1 ]; then
  setsid nohup bash -c "set -eEuo pipefail; $(declare -f); \
    $(declare -p KIT WORK SITE PY REPO WITH_7B PAIRS BACKENDS WAIT_MIN OUT HEADS); \
    export PYTHONPATH=$PYTHONPATH PYTHONSAFEPATH=1 PYTHONUNBUFFERED=1; background_steps" \
    > "$KIT/logs/background.log" 2>&1 < /dev/null &
  say "build, models and exports started in the background (log: $KIT/logs/background.log)"
  exit 0
fi
if has "$BACKENDS" onnx; then
  check_uploads all
  install_onnxruntime_gpu
else
  check_uploads llama  # onnxruntime-gpu's uploads are not needed
fi
llama_from_uploads
if ! is_done background && ! pgrep -f background_steps > /dev/null; then
  background_steps &
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
measure_all
gpu_tests  # diagnostics after the measures, each under DIAG_CAP
if [ "$VERIFY_OPS" = 1 ]; then operator_times; fi
