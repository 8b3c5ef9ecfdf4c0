#!/usr/bin/env bash
# Installs the Debian packages dmm needs to build and test, if any is missing.
# As root it runs apt-get; as a normal user it prints the exact command and stops.
set -euo pipefail
need=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for p in cmake ninja-build pkg-config libcmocka-dev zlib1g-dev gcc make; do
  have_pkg "$p" || need+=("$p")
done
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "dmm needs these Debian packages: ${need[*]}" >&2
  echo "run:  sudo apt-get update && sudo apt-get install -y ${need[*]}" >&2
  exit 1
fi
echo "bootstrap: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}"
