#!/usr/bin/env bash
# Experiment 4, noisy neighbour: tenant A queues 500 jobs of 1 simulated
# second each, tenant B queues 10 such jobs 1 simulated second later, one
# lane, 5 worker slots (one zlane-worker, --concurrency 5). Modes:
#   fifo  --scheduler fifo: one queue in arrival order
#   wfq   --scheduler wfq (the default): weighted fair queuing across tenants
# Prints B's and A's p95 latency (enqueue -> end of the job, from the
# broker's ZLANE_ENQUEUED_AT_MS and the handler's end time) and when A was
# done. Time is scaled: 1 simulated second = SCALE_MS real ms.
#
# usage: exp-noisy.sh [MODE...]   (default: fifo wfq)
# env:   SCALE_MS (50) A_JOBS (500) B_JOBS (10) SLOTS (5)
source "$(dirname "$0")/lib.sh"

SCALE=${SCALE_MS:-50}
A_JOBS=${A_JOBS:-500}
B_JOBS=${B_JOBS:-10}
SLOTS=${SLOTS:-5}
MODES=("$@")
[ ${#MODES[@]} -gt 0 ] || MODES=(fifo wfq)

run_mode () {
    local mode=$1 d="$T/$1"
    mkdir -p "$d"
    broker_start "broker-$mode" --lane x --durability none --scheduler "$mode"
    local handler
    handler="$(q "$BIN/zlane-exp-handler") --sleep $SCALE --log $(q "$d/log")"
    spawn "$d/worker.log" "$BIN/zlane-worker" --broker "$BACKEND" --lanes x \
        --concurrency "$SLOTS" --exec "$handler"
    wait_counter workers_ready 1 20 || die "worker did not connect"
    local t0
    t0=$(now_ms)
    seq 1 "$A_JOBS" | sed 's/^/a-/' | "$BIN/zlane-submit" --broker "$FRONTEND" --tenant A \
        --lane x --lines -q 2>"$d/submit-a.err" || die "submit A failed: $(cat "$d/submit-a.err")"
    # B arrives 1 simulated second after A started to submit
    local wait_ms=$(( t0 + SCALE - $(now_ms) ))
    [ "$wait_ms" -gt 0 ] && sleep "$(calc "$wait_ms / 1000")"
    seq 1 "$B_JOBS" | sed 's/^/b-/' | "$BIN/zlane-submit" --broker "$FRONTEND" --tenant B \
        --lane x --lines -q 2>"$d/submit-b.err" || die "submit B failed: $(cat "$d/submit-b.err")"
    local status=ok
    wait_settled $(( A_JOBS + B_JOBS )) 600 || status=INCOMPLETE
    broker_stop
    # latency of each job in simulated seconds: end - enqueued_at
    awk -v s="$SCALE" '$1 == "end" && $4 == "A" { print ($6 - $5) / s }' "$d/log" >"$d/lat-a"
    awk -v s="$SCALE" '$1 == "end" && $4 == "B" { print ($6 - $5) / s }' "$d/log" >"$d/lat-b"
    # what one job really occupied a slot for: span x slots / jobs
    local cost
    cost=$(awk -v s="$SCALE" -v slots="$SLOTS" '
        $1 == "start" && (min == "" || $6 < min) { min = $6 }
        $1 == "end" { n++; if ($6 > max) max = $6 }
        END { if (n) printf "%.2f", (max - min) * slots / n / s; else print "nan" }' "$d/log")
    local b95 a95 amax bmax
    b95=$(percentile 95 "$d/lat-b")
    bmax=$(percentile 100 "$d/lat-b")
    a95=$(percentile 95 "$d/lat-a")
    amax=$(percentile 100 "$d/lat-a")
    [ "$status" = ok ] || printf 'INCOMPLETE '
    printf '%-5s B_p95=%.1f s A_p95=%.1f s | B_max=%.1f s A_done=%.1f s slot_s_per_job=%s (B n=%d, A n=%d)\n' \
        "$mode" "$b95" "$a95" "$bmax" "$amax" "$cost" "$(grep -c . "$d/lat-b")" "$(grep -c . "$d/lat-a")"
}

echo "# noisy neighbour: tenant A $A_JOBS x 1 s jobs, tenant B $B_JOBS x 1 s jobs 1 s later, $SLOTS slots; latency = enqueue -> job end; time scaled 1 s -> ${SCALE} ms"
for m in "${MODES[@]}"; do run_mode "$m"; done
