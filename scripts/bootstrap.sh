#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian packages dmm needs to build and test, if any is missing.
#   scripts/bootstrap.sh           what the build, the tests and the demo need (gcc, CMake, cmocka, jansson, zlib,
#                                  and python3 with pip for the Python tests and the offline pip install
#                                  of python/ that tests/install runs)
#   scripts/bootstrap.sh --clang   also clang, its sanitizer and libFuzzer runtimes (libclang-rt-<N>-dev,
#                                  N = clang's major version) and llvm-symbolizer: `make test`'s clang
#                                  build and its fuzz harnesses (tests/fuzz)
# As root it runs apt-get; as a normal user it prints the exact command and stops.
set -euo pipefail
clang=0
[ "${1:-}" = "--clang" ] && clang=1
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
missing() {
  need=()
  for p in "$@"; do have_pkg "$p" || need+=("$p"); done
}
install() {
  [ ${#need[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "dmm needs these Debian packages: ${need[*]}" >&2
    echo "run:  sudo apt-get update && sudo apt-get install -y --no-install-recommends ${need[*]}" >&2
    exit 1
  fi
  echo "bootstrap: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  [ -n "${updated:-}" ] || { apt-get update -qq; updated=1; }
  apt-get install -y -qq --no-install-recommends "${need[@]}"
}
base=(cmake ninja-build pkg-config libcmocka-dev libjansson-dev zlib1g-dev gcc make python3 python3-pip)
[ $clang -eq 1 ] && base+=(clang llvm)
missing "${base[@]}"
install
if [ $clang -eq 1 ]; then
  # libFuzzer and the sanitizer runtimes of this clang (not a dependency of the clang package)
  major=$(clang -dumpversion | cut -d. -f1)
  missing "libclang-rt-${major}-dev"
  install
fi
# ONNX Runtime for the ORT tests (scripts/ort.sh: npm pack of onnxruntime-node, only the library kept
# under .ort/). Not fatal: without it the ORT tests report skipped, never passed.
bash "$(dirname "$0")/ort.sh" || echo "bootstrap: no ONNX Runtime (above): the ORT tests will report skipped" >&2
