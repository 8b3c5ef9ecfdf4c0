#!/usr/bin/env bash
# What one run on the GPU machine does, from the repository root, after
#   source scripts/device/device-deps.sh      (cmocka and zlib from the carried .deps)
# 1. configure + build with -DDMM_WERROR=ON into build-gpu (all cores);
# 2. ctest -L gpu (plus the cuda no-driver and deferred-queue unit tests), with output on failure;
# 3. every benchmark: bench_growth first, then any other bench_* that exists;
# 4. build-gpu/tools/dmm info.
# Logs go to $OUT (or ./gpu-out when $OUT is unset): build.log, ctest-gpu.log, bench.log, info.log,
# nvidia-smi.log. Everything is also echoed. Exit status: the ctest status (benchmarks never fail
# the run; they print their verdicts).
set -uo pipefail
out="${OUT:-gpu-out}"
mkdir -p "$out"
jobs="$(nproc 2>/dev/null || echo 4)"
build="${DMM_GPU_BUILD:-build-gpu}" # another build directory only for trying the script elsewhere

section() { printf '\n==== %s ====\n' "$*"; }

section "machine"
{ nvidia-smi 2>&1 || echo "nvidia-smi: not available"; } | tee "$out/nvidia-smi.log" | head -20
echo "cmake: $(cmake --version | head -1); cc: $(cc --version | head -1); cores: $jobs"

section "configure + build (build-gpu, -DDMM_WERROR=ON)"
if ! { cmake -G Ninja -S . -B "$build" -DDMM_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
       cmake --build "$build" -j "$jobs"; } >"$out/build.log" 2>&1; then
    tail -60 "$out/build.log"
    echo "gpu-check: the build failed (full log: build.log)"
    exit 2
fi
grep -E "dmm: CUDA driver" "$out/build.log" || true
tail -3 "$out/build.log"

section "ctest -L gpu"
ctest --test-dir "$build" -L gpu --output-on-failure --timeout 300 2>&1 | tee "$out/ctest-gpu.log"
rc=${PIPESTATUS[0]}
section "ctest: cuda no-driver path and deferred queue (unit)"
ctest --test-dir "$build" -R 'unit/test_cuda_absent|unit/test_deferred' --output-on-failure 2>&1 |
    tee -a "$out/ctest-gpu.log"
rc2=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] && rc=$rc2

section "benchmarks"
: >"$out/bench.log"
benches=()
[ -x "$build/bench/bench_growth" ] && benches+=("$build/bench/bench_growth")
for b in "$build"/bench/bench_*; do
    [ -x "$b" ] && [ -f "$b" ] || continue
    [ "$b" = "$build/bench/bench_growth" ] && continue
    benches+=("$b")
done
for b in "${benches[@]}"; do
    section "$(basename "$b")" | tee -a "$out/bench.log"
    timeout 240 "$b" 2>&1 | tee -a "$out/bench.log"
    echo "($(basename "$b") exit ${PIPESTATUS[0]})" | tee -a "$out/bench.log"
done

section "dmm info"
"$build/tools/dmm" info 2>&1 | tee "$out/info.log"

section "summary"
echo "ctest status: $rc"
exit "$rc"
