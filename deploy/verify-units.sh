#!/usr/bin/env bash
# Checks the systemd units with `systemd-analyze verify`. The units name
# /usr/local/bin; here they are pointed at the freshly built binaries.
set -euo pipefail
BIN=$(cd "${1:-build/bin}" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
command -v systemd-analyze >/dev/null || { echo "SKIP: systemd-analyze is not installed"; exit 0; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
for unit in zlane-broker.service zlane-worker@.service zlane-web.service; do
  sed "s|/usr/local/bin|$BIN|g" "$HERE/$unit" > "$TMP/$unit"
done
cp "$TMP/zlane-worker@.service" "$TMP/zlane-worker@email.service"
cd "$TMP"
mkdir -p "$TMP/share"
sed -i "s|/usr/local/share/zlane/web|$HERE/../web|" "$TMP/zlane-web.service"
out=$(systemd-analyze verify ./zlane-broker.service ./zlane-worker@email.service ./zlane-web.service 2>&1) || {
  echo "$out"; echo "FAIL: systemd-analyze verify"; exit 1; }
if [ -n "$out" ]; then echo "$out"; echo "FAIL: systemd-analyze verify printed warnings"; exit 1; fi
echo "units verified: zlane-broker.service, zlane-worker@.service, zlane-web.service"
