#!/usr/bin/env bash
# bench/keycost.sh: what one idempotency key costs in the store.
#
#   bench/keycost.sh BIN_DIR N [BROKER FLAGS...]
#
# Runs BIN_DIR's zlane-broker (durability none, lane "bench", then BROKER
# FLAGS) with two zlane-bench workers draining, submits N jobs with
# zlane-submit --lines (each with the key the producer library makes; with
# PRODUCERS=P, P zlane-submit processes at once, N/P jobs each), waits
# until all are acked, stops the broker and prints where the store's pages
# went (zlane-store-pages, from $PAGES or build/bin): with the queue empty
# the dedup index is what is left, so its bytes per entry are a key's cost.
# Works with an older build too (BIN_DIR of another checkout). Every process
# it starts is killed at exit, by PID.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=$(cd "$1" && pwd); N=$2; shift 2
PAGES=${PAGES:-$HERE/../build/bin/zlane-store-pages}
D=$(mktemp -d "${TMPDIR:-/tmp}/zlane-keycost.XXXXXX")
PIDS=()
cleanup () { for p in "${PIDS[@]}"; do { kill -9 "$p" && wait "$p"; } 2>/dev/null || true; done; [ -n "${KEEP:-}" ] || rm -rf "$D"; }
trap cleanup EXIT
"$BIN/zlane-broker" --frontend 'tcp://127.0.0.1:*' --backend 'tcp://127.0.0.1:*' \
    --events 'tcp://127.0.0.1:*' --admin 'tcp://127.0.0.1:*' --ports-file "$D/ports" \
    --data "$D/data" --durability none --lane bench --max-depth 2000000 "$@" 2>"$D/broker.err" &
BROKER=$!; PIDS+=("$BROKER")
for _ in $(seq 100); do [ -s "$D/ports" ] && grep -q admin "$D/ports" && break; sleep 0.1; done
ep () { sed -n "s/^$1=//p" "$D/ports"; }
for w in 1 2; do
    "$BIN/zlane-bench" worker --broker "$(ep backend)" --prefetch 1024 2>"$D/worker$w.err" &
    PIDS+=("$!")
done
P=${PRODUCERS:-1}
seq 1 $((N / P)) >"$D/lines"
t0=$(date +%s.%N)
SUBS=()
for p in $(seq "$P"); do
    "$BIN/zlane-submit" --broker "$(ep frontend)" --tenant t --lane bench --lines --file "$D/lines" \
        --timeout 60s -q &
    SUBS+=("$!"); PIDS+=("$!")
done
for s in "${SUBS[@]}"; do
    wait "$s" || { echo "zlane-submit failed; the broker said:"; tail -5 "$D/broker.err"; exit 1; }
done
N=$((N / P * P))
acked () { "$BIN/zlane-ctl" --admin "$(ep admin)" stats --counter jobs_acked 2>/dev/null | tr -dc 0-9; }
for _ in $(seq 600); do [ "$(acked)" = "$N" ] && break; sleep 0.2; done
t1=$(date +%s.%N)
echo "$N jobs submitted and acked in $(echo "$t1 - $t0" | bc) s; broker: $BIN/zlane-broker $*"
kill -TERM "$BROKER"; wait "$BROKER" || true
"$PAGES" "$D/data"
