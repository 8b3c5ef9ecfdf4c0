#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What `make test` and `make fuzz` run (README, docs/fuzzing.md): suites, each one build folder
# configured with -Werror, built, and tested by CTest, then ONE summary line over every suite:
#   summary: P passed, F failed, S skipped (plain p/f/s, asan p/f/s, tsan …, clang …, fuzz …; pass/fail/skip) in T s
#
#   plain  build/        the default compiler, every test
#   asan   build-asan/   ASan+UBSan, every test
#   tsan   build-tsan/   TSan, the stress tests (label stress)
#   clang  build-clang/  clang, every test (its warnings are errors too)
#   fuzz   build-fuzz/   clang + libFuzzer + ASan+UBSan: every harness over its seed corpus, then
#                        FUZZ_SECONDS seconds of fresh fuzzing each (label fuzz; tests/fuzz)
#
# Usage: scripts/test.sh [suite...]   (none: all five, in that order). A suite whose tests fail does
# not stop the others; one that does not build stops everything. Exit 0 only when nothing failed.
# Environment: JOBS (parallel builds and tests; default nproc), CMAKE_FLAGS (added to every
# configure), FUZZ_SECONDS (default 10). GPU tests report skipped where there is no GPU and count
# as skipped.
set -uo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
FUZZ_SECONDS=${FUZZ_SECONDS:-10}
read -r -a extra <<<"${CMAKE_FLAGS:-}"
suites=("$@")
[ ${#suites[@]} -eq 0 ] && suites=(plain asan tsan clang fuzz)

t0=$SECONDS
total_pass=0 total_fail=0 total_skip=0 detail=""

# run_suite NAME DIR "CTEST ARGS" [ENV=VALUE...] -- CONFIGURE ARGS...
run_suite() {
  local name=$1 dir=$2 ctest_args=$3
  shift 3
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  echo "== [$((++k))/${#suites[@]}] $name ($dir), $((SECONDS - t0)) s in =="
  mkdir -p "$dir"
  cmake -G Ninja -DDMM_WERROR=ON "${extra[@]}" "$@" -S . -B "$dir" >"$dir/configure.log" 2>&1 ||
    { cat "$dir/configure.log"; echo "scripts/test.sh: the $name build does not configure (above)"; exit 1; }
  cmake --build "$dir" -j "$JOBS" || { echo "scripts/test.sh: the $name build failed (above)"; exit 1; }
  rm -f "$dir/ctest-junit.xml"
  # shellcheck disable=SC2086 # ctest_args is a list of words
  env "${envs[@]}" ctest --test-dir "$dir" --output-on-failure -j "$JOBS" $ctest_args --output-junit ctest-junit.xml
  local xml="$dir/ctest-junit.xml" tests=1 failures=1 skipped=0 disabled=0 # no report: one failure
  if [ -f "$xml" ]; then
    read -r tests failures skipped disabled < <(sed -n '1,12p' "$xml" | tr -d '\n' |
      sed -E 's/.*tests="([0-9]+)".*failures="([0-9]+)".*disabled="([0-9]+)".*skipped="([0-9]+)".*/\1 \2 \4 \3/')
  fi
  local pass=$((tests - failures - skipped - disabled))
  total_pass=$((total_pass + pass)) total_fail=$((total_fail + failures)) total_skip=$((total_skip + skipped + disabled))
  detail+="${detail:+, }$name $pass/$failures/$((skipped + disabled))"
}

k=0
for s in "${suites[@]}"; do
  case $s in
  plain) run_suite plain build "" -- ;;
  asan)
    run_suite asan build-asan "" ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 -- \
      -DDMM_SANITIZE=address -DDMM_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=Debug ;;
  tsan)
    run_suite tsan build-tsan "-L stress" TSAN_OPTIONS=halt_on_error=1 -- \
      -DDMM_SANITIZE=thread -DDMM_BUILD_BENCH=OFF -DDMM_BUILD_TOOLS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo ;;
  clang)
    run_suite clang build-clang "" -- -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ ;;
  fuzz)
    run_suite fuzz build-fuzz "-L fuzz" -- -DCMAKE_C_COMPILER=clang -DDMM_BUILD_FUZZ=ON -DDMM_BUILD_TESTS=OFF \
      -DDMM_BUILD_BENCH=OFF -DDMM_BUILD_TOOLS=OFF -DDMM_BUILD_EXAMPLES=OFF -DDMM_WITH_CUDA=OFF \
      -DDMM_FUZZ_SECONDS="$FUZZ_SECONDS" ;;
  *) echo "scripts/test.sh: no suite '$s' (plain, asan, tsan, clang, fuzz)" >&2; exit 2 ;;
  esac
done
echo "summary: $total_pass passed, $total_fail failed, $total_skip skipped ($detail; pass/fail/skip) in $((SECONDS - t0)) s"
[ "$total_fail" -eq 0 ]
