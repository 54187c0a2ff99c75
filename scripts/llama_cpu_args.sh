# Sourced by scripts/setup.sh and bench/gpu/run.sh: sets
# cmake_args, llama.cpp's CPU features as this CPU has them (GGML_NATIVE off, so a cached build
# is keyed by them), AMX never: its kernels died with SIGILL (`tilezero` in a worker thread) in
# the sandboxes tried, and the GPU kit's native builds on the H100's and H200's AMX Xeons died
# with SIGSEGV in llama_model_load_from_file whenever numpy was imported first (issue 45;
# builds without AMX load in every order: runtimes/llama_load_probe.py, `edgespec doctor`).
cpu_flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
cmake_args="-DGGML_NATIVE=OFF"
for pair in avx:AVX avx2:AVX2 fma:FMA f16c:F16C bmi2:BMI2 avx512f:AVX512 \
            avx512vbmi:AVX512_VBMI avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16 \
            avx_vnni:AVX_VNNI; do
  [[ $cpu_flags == *" ${pair%%:*} "* ]] && cmake_args+=" -DGGML_${pair#*:}=ON"
done
[ -e /proc/cpuinfo ] || cmake_args="-DGGML_NATIVE=ON"  # not Linux: the compiler knows best
