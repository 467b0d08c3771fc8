#!/usr/bin/env bash
# Install the Debian packages zlane needs to build and test, when missing.
# As root it installs them with apt-get; otherwise it names them and fails.
set -euo pipefail

packages=(gcc make cmake pkg-config
          libzmq3-dev libczmq-dev libprotobuf-c-dev protobuf-c-compiler
          libcmocka-dev liblmdb-dev iproute2 procps
          clang libclang-rt-dev  # libFuzzer: the fuzz targets of make test
          clang-format           # scripts/check-format.sh, the first step of make test
          protobuf-compiler python3-protobuf)  # proto3 decoding in Python: tests/wire
if [ "$#" -gt 0 ]; then packages+=("$@"); fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ "${#missing[@]}" -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "zlane needs these Debian packages: ${missing[*]}" >&2
  echo "install them with: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
