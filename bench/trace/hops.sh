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
grep -c "^chain" "$out/trace" | sed 's/^/jobs followed: /'
grep "^@interrupted" "$out/trace" | sed 's/^@interrupted: /chains interrupted (dropped): /'
/usr/bin/python3 - "$out/trace" <<'PY'
import sys
names = ["a. submit -> broker loop", "b. the Submit handled", "c. its nested commit",
         "d. the rest of the turn and its commit", "   d: LMDB's writes", "   d: syncs",
         "e. the replies' flush", "f. flush -> worker I/O thread", "g. worker I/O -> handler",
         "total"]
rows = [list(map(int, l.split()[1:])) for l in open(sys.argv[1]) if l.startswith("chain ")]
if not rows:
    sys.exit("no job was followed through")
print("%-40s %8s %8s %8s %8s" % ("hop (us)", "mean", "p50", "p90", "p99"))
for i, name in enumerate(names):
    v = sorted(r[i] for r in rows)
    q = lambda f: v[min(len(v) - 1, int(f * len(v)))]
    print("%-40s %8.0f %8d %8d %8d" % (name, sum(v) / len(v), q(0.5), q(0.9), q(0.99)))
PY
