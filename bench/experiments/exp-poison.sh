#!/usr/bin/env bash
# Experiment 3, poison jobs: 4 poison jobs (always fail) queued first, then 40
# good ones, on 2 workers (zlane-worker, one slot each); every attempt works
# 1 simulated second. Retries wait a fixed 1 simulated second (backoff base =
# cap, no jitter). Modes:
#   forever  --max-attempts 65535 (the most a job can have): retry forever
#   dlq      --max-attempts 3: dead-letter after 3 attempts
# Prints good jobs done by the deadline, when the last good job was done,
# poison executions, and dead letters ("parked"). Time is scaled:
# 1 simulated second = SCALE_MS real ms.
#
# usage: exp-poison.sh [MODE...]   (default: forever dlq)
# env:   SCALE_MS (50) DEADLINE_S (100 simulated s) POISON (4) GOOD (40)
source "$(dirname "$0")/lib.sh"

SCALE=${SCALE_MS:-50}
DEADLINE_S=${DEADLINE_S:-100}
POISON=${POISON:-4}
GOOD=${GOOD:-40}
MODES=("$@")
[ ${#MODES[@]} -gt 0 ] || MODES=(forever dlq)

run_mode () {
    local mode=$1 d="$T/$1" attempts
    mkdir -p "$d"
    case $mode in
    forever) attempts=65535 ;;
    dlq) attempts=3 ;;
    *) die "unknown mode $mode" ;;
    esac
    broker_start "broker-$mode" --lane x --durability none --max-attempts "$attempts" \
        --backoff-base "${SCALE}ms" --backoff-cap "${SCALE}ms" --no-jitter
    ctl pause x >/dev/null || die "cannot pause lane x"
    { seq 1 "$POISON" | sed 's/^/poison-/'; seq 1 "$GOOD" | sed 's/^/good-/'; } |
        "$BIN/zlane-submit" --broker "$FRONTEND" --tenant t --lane x --lines -q \
        2>"$d/submit.err" || die "submit failed: $(cat "$d/submit.err")"
    local handler w
    handler="$(q "$BIN/zlane-exp-handler") --sleep $SCALE --poison poison- --log $(q "$d/log")"
    for w in 1 2; do
        spawn "$d/worker$w.log" "$BIN/zlane-worker" --broker "$BACKEND" --lanes x \
            --concurrency 1 --exec "$handler"
    done
    wait_counter workers_ready 2 20 || die "workers did not connect"
    local t0
    t0=$(now_ms)
    ctl resume x >/dev/null || die "cannot resume lane x"
    # run until the deadline, or until every job is settled (acked or parked)
    local deadline=$(( t0 + DEADLINE_S * SCALE )) a dd
    while [ "$(now_ms)" -lt "$deadline" ]; do
        a=$(counter jobs_acked)
        dd=$(counter jobs_dead_lettered)
        [ $(( ${a:-0} + ${dd:-0} )) -ge $(( POISON + GOOD )) ] && break
        broker_alive || break
        sleep 0.05
    done
    local parked
    parked=$(counter jobs_dead_lettered)
    broker_stop
    # good jobs done (end line, exit 0) by the deadline, and the last one's time
    awk -v t0="$t0" -v dl="$DEADLINE_S" -v s="$SCALE" -v mode="$mode" -v parked="$parked" \
        -v good="$GOOD" '
        $1 == "end" && $7 ~ /^good-/ && $8 == 0 {
            t = ($6 - t0) / s; if (t <= dl) { done++; if (t > last) last = t } }
        $1 == "end" && $7 ~ /^poison-/ && ($6 - t0) / s <= dl { pexec++ }
        END {
            printf "%-8s good_done=%d/%d deadline_s=%d all_good_done_at_s=%s parked=%d | poison_executions=%d\n",
                mode, done, good, dl, (done == good ? sprintf("%.1f", last) : "never"),
                parked, pexec }' "$d/log"
}

echo "# poison jobs: $POISON poison first, then $GOOD good, 2 workers x 1 slot, 1 s of work per attempt, fixed 1 s retry delay; deadline $DEADLINE_S s; time scaled 1 s -> ${SCALE} ms"
for m in "${MODES[@]}"; do run_mode "$m"; done
