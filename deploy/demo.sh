#!/usr/bin/env bash
# make demo: a broker, two zlane-worker processes and one producer on
# loopback; 10,000 jobs across two tenants and two lanes; a summary.
# Every process it starts is stopped on exit, by PID.
set -euo pipefail

BIN=${1:-build/bin}
JOBS=${DEMO_JOBS:-10000}
BIN=$(cd "$BIN" && pwd)
WORK=$(mktemp -d /tmp/zlane-demo.XXXXXX)
PIDS=()

cleanup() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

ctl() { "$BIN/zlane-ctl" --admin "$ADMIN" "$@"; }

echo "== zlane demo: $JOBS jobs, 2 tenants x 2 lanes, 2 workers (work dir $WORK)"
"$BIN/zlane-broker" --lane chat:4 --lane research:1 --durability none --data "$WORK/data" \
  --frontend 'tcp://127.0.0.1:*' --backend 'tcp://127.0.0.1:*' \
  --events 'tcp://127.0.0.1:*' --admin 'tcp://127.0.0.1:*' \
  --ports-file "$WORK/ports" 2>"$WORK/broker.log" &
PIDS+=($!)
for _ in $(seq 100); do [ -f "$WORK/ports" ] && break; sleep 0.05; done
[ -f "$WORK/ports" ] || { echo "broker did not start:"; cat "$WORK/broker.log"; exit 1; }
FRONTEND=$(sed -n 's/^frontend=//p' "$WORK/ports")
BACKEND=$(sed -n 's/^backend=//p' "$WORK/ports")
ADMIN=$(sed -n 's/^admin=//p' "$WORK/ports")
echo "broker   pid ${PIDS[0]}: producers $FRONTEND, workers $BACKEND, admin $ADMIN"

# The handler reads the job's payload and does a little work per job.
for w in 1 2; do
  "$BIN/zlane-worker" --broker "$BACKEND" --lanes chat,research --concurrency 8 \
    --name "demo-worker-$w" --exec 'cat >/dev/null' 2>"$WORK/worker$w.log" &
  PIDS+=($!)
  echo "worker $w pid $!: lanes chat,research, concurrency 8"
done

# One producer: each input line is TENANT<TAB>LANE<TAB>PAYLOAD.
awk -v n="$JOBS" 'BEGIN { for (i = 0; i < n; i++) {
    t = (i % 2) ? "acme" : "globex"; l = (i % 4 < 2) ? "chat" : "research";
    printf "%s\t%s\t{\"n\":%d,\"task\":\"demo\"}\n", t, l, i } }' > "$WORK/jobs.tsv"
start=$(date +%s.%N)
"$BIN/zlane-submit" --broker "$FRONTEND" --tsv --file "$WORK/jobs.tsv" \
  > "$WORK/ids" 2>"$WORK/submit.log" &
SUBMIT=$!
PIDS+=($SUBMIT)
echo "producer pid $SUBMIT: submitting $JOBS jobs"

deadline=$(( $(date +%s) + 120 ))
acked=0
while :; do
  acked=$(ctl stats --counter jobs_acked 2>/dev/null || echo "$acked")
  printf "\r  processed %6d / %d" "$acked" "$JOBS"
  [ "$acked" -ge "$JOBS" ] && break
  if [ "$(date +%s)" -ge "$deadline" ]; then echo; echo "demo: timed out"; break; fi
  sleep 0.5
done
end=$(date +%s.%N)
echo
submit_rc=0
wait "$SUBMIT" || submit_rc=$?

submitted=$(grep -c . "$WORK/ids" || true)
nacked=$(ctl stats --counter jobs_nacked)
dead=$(ctl stats --counter jobs_dead_lettered)
read -r n p50 p90 p99 max < <(ctl stats --latency submit_to_ack)
echo
ctl stats | sed -n '/^LANE/,/^$/p'
awk -v s="$submitted" -v a="$acked" -v f="$nacked" -v d="$dead" -v t0="$start" -v t1="$end" \
    -v p50="$p50" -v p99="$p99" 'BEGIN {
  el = t1 - t0;
  printf "== summary\n";
  printf "  submitted   %d\n  acked       %d\n  failed      %d nacked attempts, %d dead-lettered\n", s, a, f, d;
  printf "  elapsed     %.2f s\n  throughput  %.0f jobs/s (submit to ack, fork+exec per job)\n", el, a / el;
  printf "  latency     submit->ack p50 %.1f ms, p99 %.1f ms\n", p50 / 1000, p99 / 1000 }'
[ "$submit_rc" -eq 0 ] || { echo "demo: zlane-submit exited $submit_rc"; cat "$WORK/submit.log"; exit 1; }
[ "$acked" -ge "$JOBS" ] || exit 1
echo "demo: all $JOBS jobs acked"
