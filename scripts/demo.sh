#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# scripts/demo.sh — what `make demo` runs once the build is done: replays the GPT-2 training trace
# (data/traces/gpt2-train.trace.gz, recorded from PyTorch on an H200) through the dmm pool, on the
# GPU when `dmm info` finds one with VMM, else on the host driver (real memfd memory, never touched),
# prints the report and writes a self-contained HTML page with the timeline under the build folder.
#
# Environment: BUILD (default: build) — the build folder that holds tools/dmm.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
DMM="$BUILD/tools/dmm"
TRACE=data/traces/gpt2-train.trace.gz
if [ ! -x "$DMM" ]; then
  echo "demo: $DMM is missing; run 'make demo' (it builds first)" >&2
  exit 1
fi
if [ ! -f "$TRACE" ]; then
  echo "demo: $TRACE is missing" >&2
  exit 1
fi

echo "== dmm info"
info=$("$DMM" info)
echo "$info"
driver=host
if grep -q '^cuda device 0:.*VMM yes' <<<"$info"; then
  driver=cuda
fi

extra=()
if [ "$driver" = host ]; then
  # the host driver holds one file descriptor per 2 MiB chunk: the trace's 7.6 GiB peak needs ~4,400
  hard=$(ulimit -Hn)
  if [ "$hard" != unlimited ] && [ "$hard" -lt 4500 ]; then
    echo "demo: the open-file limit ($hard) is too low for 2 MiB chunks on the host driver; using 8 MiB ones" >&2
    extra=(--granule 8M)
  fi
fi

report="$BUILD/demo-gpt2-train.html"
echo
echo "== dmm replay $TRACE --driver $driver ${extra[*]} --report $report"
"$DMM" replay "$TRACE" --driver "$driver" "${extra[@]}" --report "$report"
echo
echo "The HTML report (live, committed and physical bytes over time, PyTorch's peak as a line):"
echo "  file://$(cd "$(dirname "$report")" && pwd)/$(basename "$report")"
