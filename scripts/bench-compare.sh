#!/usr/bin/env bash
# scripts/bench-compare.sh — a developer tool (minutes; not part of `make test`): builds two git
# revisions into temporary worktrees, runs the benchmarks of both interleaved (A, B, A, B, ... so both
# share the machine's noise), and compares them with `dmm compare` (docs/benchmarks.md).
#
#   scripts/bench-compare.sh [REV_A] [REV_B]       defaults: REV_A = HEAD~1, REV_B = HEAD
#
# Per bench it prints: with ROUNDS >= 2, A's first run against A's second (the same build against
# itself: whatever is not "same" there is this machine's noise at these thresholds; raise
# --threshold-floor or --k through COMPARE_ARGS until it is all "same"), then A against B for each
# round. A metric WORSE in every round is a confirmed regression: exit 1. Exit 0: none; 2: a bench
# or a comparison could not run.
#
# Environment:
#   BENCHES            benches to run (default: bench_pool bench_replay bench_growth; bench_growth
#                      skips without a GPU and then compares nothing)
#   ROUNDS             runs of each build (default 2)
#   COMPARE_ARGS       passed to dmm compare, e.g. "--threshold-floor 5 --k 3"
#   BENCH_POOL_ARGS    default "--samples 101"
#   BENCH_REPLAY_ARGS  default "--runs 5" and the traces of this checkout's data/traces (the same
#                      inputs for both builds)
#   BENCH_GROWTH_ARGS  default ""
#   JOBS               build parallelism (default: nproc)
#   KEEP=1             keep the temporary directory (worktrees, builds, JSON and text outputs)
# Both revisions must have benches with --json (the comparator's first commit or later).
set -euo pipefail

die() { echo "bench-compare: $*" >&2; exit 2; }

root=$(git rev-parse --show-toplevel) || die "not inside a git checkout"
cd "$root"
rev_a=${1:-HEAD~1}
rev_b=${2:-HEAD}
sha_a=$(git rev-parse --verify --quiet "${rev_a}^{commit}") || die "'$rev_a' is not a commit"
sha_b=$(git rev-parse --verify --quiet "${rev_b}^{commit}") || die "'$rev_b' is not a commit"
BENCHES=${BENCHES:-bench_pool bench_replay bench_growth}
ROUNDS=${ROUNDS:-2}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
COMPARE_ARGS=${COMPARE_ARGS:-}
BENCH_POOL_ARGS=${BENCH_POOL_ARGS:---samples 101}
BENCH_GROWTH_ARGS=${BENCH_GROWTH_ARGS:-}
if [[ -z ${BENCH_REPLAY_ARGS+x} ]]; then
    BENCH_REPLAY_ARGS="--runs 5"
    for t in "$root"/data/traces/*.trace.gz; do [[ -e $t ]] && BENCH_REPLAY_ARGS+=" $t"; done
fi
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a whole number >= 1 (got '$ROUNDS')"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dmm-bench-compare.XXXXXX")
worktrees=()
# shellcheck disable=SC2317  # invoked by the trap
cleanup() {
    local wt
    for wt in "${worktrees[@]}"; do git -C "$root" worktree remove --force "$wt" >/dev/null 2>&1 || true; done
    git -C "$root" worktree prune >/dev/null 2>&1 || true
    if [[ ${KEEP:-0} == 1 ]]; then echo "bench-compare: kept $tmp" >&2; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)

build() { # build NAME SHA
    local wt="$tmp/$1"
    git worktree add --detach --quiet "$wt" "$2"
    worktrees+=("$wt")
    echo "bench-compare: building $1 = $(git log -1 --format='%h %s' "$2" | cut -c1-80)"
    cmake "${generator[@]}" -S "$wt" -B "$wt/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDMM_BUILD_TESTS=OFF \
        -DDMM_BUILD_EXAMPLES=OFF -DDMM_BUILD_BENCH=ON -DDMM_BUILD_TOOLS=ON >"$tmp/$1.configure.log" 2>&1 ||
        die "configuring $1 ($2) failed; see $tmp/$1.configure.log (KEEP=1 keeps it)"
    cmake --build "$wt/build" -j "$JOBS" >"$tmp/$1.build.log" 2>&1 ||
        die "building $1 ($2) failed; see $tmp/$1.build.log (KEEP=1 keeps it)"
    local b
    for b in $BENCHES; do
        [[ -x $wt/build/bench/$b ]] || die "$1 ($2) has no bench/$b"
        local usage
        usage=$("$wt/build/bench/$b" --no-such-option 2>&1 || true)
        [[ $usage == *--json* ]] ||
            die "$1 ($2): $b has no --json option (it predates the comparator); pick a later revision"
    done
}
build A "$sha_a"
build B "$sha_b"

dmm="$tmp/B/build/tools/dmm"
"$dmm" compare --help >/dev/null 2>&1 || dmm="$tmp/A/build/tools/dmm"
"$dmm" compare --help >/dev/null 2>&1 || die "neither build's dmm has the compare command"

args_of() {
    case $1 in
        bench_pool) echo "$BENCH_POOL_ARGS" ;;
        bench_replay) echo "$BENCH_REPLAY_ARGS" ;;
        bench_growth) echo "$BENCH_GROWTH_ARGS" ;;
        *) echo "" ;;
    esac
}

mkdir -p "$tmp/out"
for ((r = 1; r <= ROUNDS; r++)); do
    for b in $BENCHES; do
        for side in A B; do
            out="$tmp/out/$b.$side.$r"
            echo "bench-compare: round $r/$ROUNDS: $side $b"
            rc=0
            # word splitting of the arguments is intended
            # shellcheck disable=SC2046
            (cd "$tmp/$side" && "$tmp/$side/build/bench/$b" $(args_of "$b") --json "$out.json") >"$out.txt" 2>&1 ||
                rc=$?
            [[ $rc == 0 || $rc == 77 ]] || die "$side $b exited $rc; see $out.txt (KEEP=1 keeps it)"
        done
    done
done

status=0
# shellcheck disable=SC2086
for b in $BENCHES; do
    echo
    echo "================ $b ================"
    if ((ROUNDS >= 2)); then
        echo "---- noise: A's run 1 against A's run 2 (the same build; anything not 'same' is this machine's noise) ----"
        rc=0
        "$dmm" compare "$tmp/out/$b.A.1.json" "$tmp/out/$b.A.2.json" $COMPARE_ARGS || rc=$?
        ((rc <= 1)) || status=2
    fi
    : >"$tmp/out/$b.worse"
    for ((r = 1; r <= ROUNDS; r++)); do
        echo "---- round $r: A ($rev_a) against B ($rev_b) ----"
        rc=0
        "$dmm" compare "$tmp/out/$b.A.$r.json" "$tmp/out/$b.B.$r.json" $COMPARE_ARGS | tee "$tmp/out/$b.cmp.$r" ||
            rc=${PIPESTATUS[0]}
        ((rc <= 1)) || status=2
        awk 'NF >= 4 && ($NF == "WORSE" || $(NF - 3) == "WORSE") { print $1 }' "$tmp/out/$b.cmp.$r" >>"$tmp/out/$b.worse"
    done
    confirmed=$(sort "$tmp/out/$b.worse" | uniq -c | awk -v n="$ROUNDS" '$1 == n { print $2 }')
    if [[ -n $confirmed ]]; then
        echo "$b: WORSE in every round (a regression): ${confirmed//$'\n'/ }"
        ((status == 2)) || status=1
    else
        echo "$b: no metric WORSE in every round"
    fi
done
exit $status
