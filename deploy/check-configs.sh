#!/usr/bin/env bash
# Loads deploy/broker.cfg and deploy/worker.cfg with the real programs, so a
# key that the programs do not know, or a bad value, fails here.
set -euo pipefail
BIN=$(cd "${1:-build/bin}" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# the broker: every key parses; the deploy config turns CURVE on, so point
# its certificate and clients at fresh ones and bind loopback ephemeral ports
"$BIN/zlane-ctl" keygen broker --dir "$TMP" >/dev/null
mkdir "$TMP/clients"
out=$("$BIN/zlane-broker" --config "$HERE/broker.cfg" --data "$TMP/data" \
      --cert "$TMP/broker_secret" --clients "$TMP/clients" \
      --frontend 'tcp://127.0.0.1:*' --backend 'tcp://127.0.0.1:*' \
      --events 'tcp://127.0.0.1:*' --admin 'tcp://127.0.0.1:*' \
      --ports-file "$TMP/ports" 2>&1 & pid=$!
      for _ in $(seq 100); do [ -f "$TMP/ports" ] && break; kill -0 $pid 2>/dev/null || break; sleep 0.05; done
      kill -TERM $pid 2>/dev/null; wait $pid; echo "exit=$?") || true
echo "$out" | tail -3
[ -f "$TMP/ports" ] || { echo "FAIL: zlane-broker did not start with deploy/broker.cfg"; exit 1; }
# the worker: every key maps to a flag it knows (a wrong one exits 2 at once)
rc=0
timeout 3 "$BIN/zlane-worker" --config "$HERE/worker.cfg" --broker tcp://127.0.0.1:1 \
  --exec true >/dev/null 2>"$TMP/worker.err" || rc=$?
if [ "$rc" -eq 2 ]; then cat "$TMP/worker.err"; echo "FAIL: deploy/worker.cfg"; exit 1; fi
# the dashboard: every key is one it knows (a wrong one exits 2 at once);
# its files and brokers pointed at this machine's
if command -v node >/dev/null && [ -d "$HERE/../clients/node/node_modules" ]; then
  echo pw > "$TMP/pw"
  rc=0
  timeout 5 node "$HERE/../web/bin/zlane-web.js" --config "$HERE/web.cfg" --listen 127.0.0.1:0 \
    --admin tcp://127.0.0.1:1 --events none --password-file "$TMP/pw" --curve-server "$TMP/broker" \
    --cert "$TMP/broker_secret" --url-file "$TMP/url" >/dev/null 2>"$TMP/web.err" &
  wpid=$!
  for _ in $(seq 100); do [ -s "$TMP/url" ] && break; kill -0 $wpid 2>/dev/null || break; sleep 0.05; done
  kill -TERM $wpid 2>/dev/null || true
  wait $wpid || rc=$?
  [ -s "$TMP/url" ] || { cat "$TMP/web.err"; echo "FAIL: deploy/web.cfg"; exit 1; }
  echo "deploy configs load: broker.cfg, worker.cfg, web.cfg"
else
  echo "deploy configs load: broker.cfg, worker.cfg (web.cfg: no node or clients/node/node_modules)"
fi
