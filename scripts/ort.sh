#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fetches the ONNX Runtime the ORT tests run against: libonnxruntime.so.1 (CPU, x86-64) from the
# onnxruntime-node package of the npm registry, version pinned below, into .ort/ (git-ignored).
#   scripts/ort.sh          fetch if missing, then check that it loads (dlopen, OrtGetApiBase,
#                           GetVersionString = the pinned version); nothing is fetched when it is there
#   scripts/ort.sh --check  only the check (exit 1 when absent or broken)
# Only the library is kept: `npm pack` downloads the package tarball into a temporary folder, one file
# is extracted from it, and the folder is removed. No npm install, no node_modules, no scripts run.
# Without npm, or when the registry cannot be reached, it says so and exits 1; the ORT tests then
# report skipped (never passed). DMM_ORT_LIB=/path/libonnxruntime.so.1 makes the tests use another copy.
set -euo pipefail
cd "$(dirname "$0")/.."
ORT_VERSION=1.30.0
PKG=onnxruntime-node@$ORT_VERSION
MEMBER=package/bin/napi-v6/linux/x64/libonnxruntime.so.1
DEST=.ort
LIB=$DEST/libonnxruntime.so.1

check() {
  # A tiny C program: dlopen, OrtGetApiBase, GetVersionString (the first two members of OrtApiBase
  # are GetApi and GetVersionString; the adapter's own loader declares the same, adapters/ort/ort_abi.h).
  local cc=${CC:-cc} tmp
  command -v "$cc" >/dev/null || { echo "scripts/ort.sh: no C compiler ($cc) to check $LIB" >&2; return 1; }
  tmp=$(mktemp -d)
  cat >"$tmp/check.c" <<'C'
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
typedef struct { const void *(*get_api)(unsigned); const char *(*version)(void); } base_t;
int main(int argc, char **argv) {
    if (argc != 3) return 2;
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 1; }
    const base_t *(*get_base)(void) = (const base_t *(*)(void))dlsym(h, "OrtGetApiBase");
    if (!get_base) { fprintf(stderr, "no OrtGetApiBase in %s\n", argv[1]); return 1; }
    const base_t *b = get_base();
    const char *v = b && b->version ? b->version() : NULL;
    if (!v || strcmp(v, argv[2]) != 0) { fprintf(stderr, "version '%s', expected '%s'\n", v ? v : "(none)", argv[2]); return 1; }
    printf("%s\n", v);
    return 0;
}
C
  if ! "$cc" -o "$tmp/check" "$tmp/check.c" -ldl 2>"$tmp/cc.log"; then
    cat "$tmp/cc.log" >&2; rm -rf "$tmp"; return 1
  fi
  local v rc=0
  v=$("$tmp/check" "$PWD/$LIB" "$ORT_VERSION") || rc=$?
  rm -rf "$tmp"
  [ $rc -eq 0 ] && echo "ort: $LIB loads, ONNX Runtime $v"
  return $rc
}

if [ "${1:-}" = "--check" ]; then
  [ -f "$LIB" ] || { echo "scripts/ort.sh: $LIB is absent (run scripts/ort.sh)" >&2; exit 1; }
  check; exit
fi

if [ -f "$LIB" ] && check >/dev/null 2>&1; then
  exit 0 # already there and good: nothing to do
fi

if ! command -v npm >/dev/null; then
  echo "scripts/ort.sh: npm is missing, so ONNX Runtime ($PKG) cannot be fetched; the ORT tests will" \
       "report skipped. Install npm (Debian: apt-get install npm) and run scripts/ort.sh, or set" \
       "DMM_ORT_LIB to a libonnxruntime.so.1 of version $ORT_VERSION" >&2
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "ort: fetching $PKG from the npm registry (npm pack, ~110 MB; only the library is kept)"
if ! (cd "$tmp" && npm pack --silent "$PKG" >pack.log 2>&1); then
  echo "scripts/ort.sh: 'npm pack $PKG' failed, so the ORT tests will report skipped; npm said:" >&2
  tail -5 "$tmp/pack.log" >&2
  exit 1
fi
tgz=$(ls "$tmp"/onnxruntime-node-*.tgz 2>/dev/null | head -1)
[ -n "$tgz" ] || { echo "scripts/ort.sh: npm pack left no tarball" >&2; exit 1; }
if ! tar -xzf "$tgz" -C "$tmp" "$MEMBER"; then
  echo "scripts/ort.sh: $PKG has no $MEMBER (the package layout changed?)" >&2
  exit 1
fi
mkdir -p "$DEST"
mv -f "$tmp/$MEMBER" "$LIB.part" 2>/dev/null || cp "$tmp/$MEMBER" "$LIB.part"
chmod 0644 "$LIB.part"
mv -f "$LIB.part" "$LIB"
check || { echo "scripts/ort.sh: the fetched $LIB does not load (above)" >&2; rm -f "$LIB"; exit 1; }
