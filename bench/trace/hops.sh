#!/usr/bin/env bash
# bench/trace/hops.sh: run zlane-bench-latency with bench/trace/hops.bt
# attached and print the hop-by-hop breakdown of a lone job's
# submit-to-start time (issue 18, item 1). Needs root and bpftrace (Debian's
# package; installed when missing and root).
#
#   bench/trace/hops.sh [--rate 200] [--seconds 5] [--durability none|fsync]
#
# env: ZLANE_BIN (build/bin). bpftrace is stopped by PID at the end.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=$(cd "${ZLANE_BIN:-$HERE/../../build/bin}" && pwd) || exit 2
if ! command -v bpftrace >/dev/null && [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bpftrace >/dev/null 2>&1
fi
command -v bpftrace >/dev/null || { echo "bpftrace is missing" >&2; exit 2; }
rate=200 seconds=5 durability=none
while [ $# -gt 0 ]; do
    case $1 in
        --rate) rate=$2; shift 2 ;;
        --seconds) seconds=$2; shift 2 ;;
        --durability) durability=$2; shift 2 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
out=$(mktemp -d "${TMPDIR:-/tmp}/zlane-hops.XXXXXX")
trap 'kill "$bt" 2>/dev/null; rm -rf "$out"' EXIT
sed "s|\$BIN|$BIN|g" "$HERE/hops.bt" > "$out/hops.bt"
ulimit -l unlimited 2>/dev/null
bpftrace "$out/hops.bt" > "$out/trace" 2>"$out/err" &
bt=$!
for _ in $(seq 1 300); do   # attached within 30 s, or give up
    grep -q "Attaching" "$out/trace" "$out/err" 2>/dev/null && break
    kill -0 "$bt" 2>/dev/null || { cat "$out/err" >&2; exit 1; }
    sleep 0.1
done
sleep 1   # bpftrace prints "Attaching" before its probes are all live
timeout $((seconds + 60)) "$BIN/zlane-bench-latency" --rate "$rate" --seconds "$seconds" \
    --workers 2 --payload 100 --durability "$durability"
kill -INT "$bt"
wait "$bt"
grep -v "^Attaching\|^$" "$out/trace" | grep -v "^@t[0-9]\|^@phase\|^@prod\|^@io_t\|^@sync_ns\|^@write_ns\|^@n_"
