#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What one run on the GPU machine does, from the repository root, after
#   source scripts/device/device-deps.sh      (cmocka and jansson from the carried .deps: fill it once
#                                             with `bash ../shared/device/fetch-deps.sh libjansson4 libjansson-dev`)
# 1. configure + build with -DDMM_WERROR=ON into build-gpu (all cores);
# 2. ctest -L gpu -LE torch (plus the cuda no-driver and deferred-queue unit tests), output on failure
#    (DMM_GPU_WITH_TORCH=1 adds the torch adapter's Python GPU tests, minutes each);
# 3. bench_growth, then build-gpu/tools/dmm info, then every other bench_* (each at most
#    DMM_GPU_BENCH_LIMIT seconds, default 120), so that a run cut short keeps what matters most.
# Logs go to $OUT (or ./gpu-out when $OUT is unset): build.log, ctest-gpu.log, ctest-cuda-verbose.log,
# bench.log, info.log, replay.log, nvidia-smi.log. Everything is also echoed. Exit status: the ctest status (benchmarks never fail
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

# The torch adapter's Python GPU tests (labels gpu;torch) take minutes each: only with DMM_GPU_WITH_TORCH=1.
exclude=(-LE torch)
[ "${DMM_GPU_WITH_TORCH:-0}" = 1 ] && exclude=()
section "ctest -L gpu ${exclude[*]}"
ctest --test-dir "$build" -L gpu "${exclude[@]}" --output-on-failure --timeout 300 2>&1 | tee "$out/ctest-gpu.log"
rc=${PIPESTATUS[0]}
section "ctest: cuda no-driver path and deferred queue (unit)"
ctest --test-dir "$build" -R 'unit/test_cuda_absent|unit/test_deferred' --output-on-failure 2>&1 |
    tee -a "$out/ctest-gpu.log"
rc2=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] && rc=$rc2
# The cuda tests once more, verbose, for what they print (sentences, poll counts): ctest-cuda-verbose.log
ctest --test-dir "$build" -R 'gpu/test_cuda_' -V >"$out/ctest-cuda-verbose.log" 2>&1
grep -E "^[0-9]+: (sentence|decommit requested|device 0|event right)" "$out/ctest-cuda-verbose.log" || true

# bench_growth and dmm info first: the other benchmarks come last, each under its own time limit.
run_bench() {
    section "$(basename "$1")" | tee -a "$out/bench.log"
    timeout "$2" "$1" 2>&1 | tee -a "$out/bench.log"
    echo "($(basename "$1") exit ${PIPESTATUS[0]})" | tee -a "$out/bench.log"
}
: >"$out/bench.log"
[ -x "$build/bench/bench_growth" ] && run_bench "$build/bench/bench_growth" 120

section "dmm info"
"$build/tools/dmm" info 2>&1 | tee "$out/info.log"

# The traces: data/traces/ plus any carried under .deps/traces/ (the large llama trace does not live in
# the repository; carry it there).
traces=(data/traces/*.trace.gz)
for t in .deps/traces/*.trace.gz; do [ -f "$t" ] && traces+=("$t"); done

section "dmm replay --driver cuda --json (every trace)"
for t in "${traces[@]}"; do
    "$build/tools/dmm" replay "$t" --driver cuda --json 2>&1 | tee -a "$out/replay.log"
done

section "other benchmarks"
for b in "$build"/bench/bench_*; do
    [ -x "$b" ] && [ -f "$b" ] || continue
    [ "$b" = "$build/bench/bench_growth" ] && continue
    if [ "$b" = "$build/bench/bench_replay" ]; then
        section "bench_replay" | tee -a "$out/bench.log"
        timeout "${DMM_GPU_BENCH_LIMIT:-120}" "$b" "${traces[@]}" 2>&1 | tee -a "$out/bench.log"
        continue
    fi
    run_bench "$b" "${DMM_GPU_BENCH_LIMIT:-120}"
done

section "summary"
echo "ctest status: $rc"
exit "$rc"
