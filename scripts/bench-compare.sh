#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# scripts/bench-compare.sh — a developer tool (minutes; not part of `make test`): builds two git
# revisions into temporary worktrees, runs the benchmarks of both interleaved (A, B, then B, A in the
# next round, and so on: both share the machine's noise, and a machine that slows down or speeds up
# during the run favours neither side), and compares them with `dmm compare` (docs/benchmarks.md).
#
#   scripts/bench-compare.sh [REV_A] [REV_B]       defaults: REV_A = HEAD~1, REV_B = HEAD
#
# Either side may also be a directory holding a source tree (e.g. an unpacked `git archive` of an old
# revision, on a machine without the repository's history): it is built as it is, out of tree.
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

rev_a=${1:-HEAD~1}
rev_b=${2:-HEAD}
side_source() { # a directory stays a directory (made absolute); anything else must name a commit
    if [[ -d $1 ]]; then (cd "$1" && pwd); return; fi
    git -C "$root" rev-parse --verify --quiet "${1}^{commit}" || die "'$1' is neither a directory nor a commit"
}
if root=$(git rev-parse --show-toplevel 2>/dev/null); then :; else root=$(pwd); fi
cd "$root"
sha_a=$(side_source "$rev_a") || exit 2
sha_b=$(side_source "$rev_b") || exit 2
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

declare -A src_of bld_of
build() { # build NAME SHA-or-DIRECTORY
    local wt="$tmp/$1" label
    if [[ -d $2 ]]; then
        src_of[$1]=$2
        bld_of[$1]="$tmp/$1-build"
        label="directory $2"
    else
        git worktree add --detach --quiet "$wt" "$2"
        worktrees+=("$wt")
        src_of[$1]=$wt
        bld_of[$1]="$wt/build"
        label=$(git log -1 --format='%h %s' "$2" | cut -c1-80)
    fi
    echo "bench-compare: building $1 = $label"
    cmake "${generator[@]}" -S "${src_of[$1]}" -B "${bld_of[$1]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDMM_BUILD_TESTS=OFF \
        -DDMM_BUILD_EXAMPLES=OFF -DDMM_BUILD_BENCH=ON -DDMM_BUILD_TOOLS=ON >"$tmp/$1.configure.log" 2>&1 ||
        die "configuring $1 ($2) failed; see $tmp/$1.configure.log (KEEP=1 keeps it)"
    cmake --build "${bld_of[$1]}" -j "$JOBS" >"$tmp/$1.build.log" 2>&1 ||
        die "building $1 ($2) failed; see $tmp/$1.build.log (KEEP=1 keeps it)"
    local b
    for b in $BENCHES; do
        [[ -x ${bld_of[$1]}/bench/$b ]] || die "$1 ($2) has no bench/$b"
        local usage
        usage=$("${bld_of[$1]}/bench/$b" --no-such-option 2>&1 || true)
        [[ $usage == *--json* ]] ||
            die "$1 ($2): $b has no --json option (it predates the comparator); pick a later revision"
    done
}
build A "$sha_a"
build B "$sha_b"

dmm="${bld_of[B]}/tools/dmm"
"$dmm" compare --help >/dev/null 2>&1 || dmm="${bld_of[A]}/tools/dmm"
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
        order="A B"
        ((r % 2 == 0)) && order="B A" # ABBA: a machine that drifts during the run favours neither side
        for side in $order; do
            out="$tmp/out/$b.$side.$r"
            echo "bench-compare: round $r/$ROUNDS: $side $b"
            rc=0
            # word splitting of the arguments is intended
            # shellcheck disable=SC2046
            (cd "${src_of[$side]}" && "${bld_of[$side]}/bench/$b" $(args_of "$b") --json "$out.json") >"$out.txt" 2>&1 ||
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
