#!/usr/bin/env bash
# Experiment 1, delivery under crashes: N jobs (2000), a seeded 5 % of worker
# attempts SIGKILL their own zlane-worker (the handler kills its parent), and
# a supervisor loop restarts the dead worker. Three modes:
#   ack-early  zlane-worker --ack-early; the crash comes before the effect
#   ack-after  ack after the work; the crash comes after the effect, before the ack
#   idempotent as ack-after, the effect is an O_EXCL entry named by the job's
#              idempotency key in a sink directory
# Prints one row per mode: lost jobs (accepted, never effected) and duplicate
# effects, counted from the effect (file or sink) and from the raw log of
# executions. Real time, no scaling: each job is a process run.
#
# usage: exp-delivery.sh [MODE...]   (default: ack-early ack-after idempotent)
# env:   JOBS (2000) RATE (0.05) SEED (7) WORKERS (4) HEARTBEAT_MS (100)
#        WORK_MS (5: each attempt works this long before its crash point)
source "$(dirname "$0")/lib.sh"

JOBS=${JOBS:-2000}
RATE=${RATE:-0.05}
SEED=${SEED:-7}
WORKERS=${WORKERS:-4}
HB=${HEARTBEAT_MS:-100}
WORK_MS=${WORK_MS:-5}
MODES=("$@")
[ ${#MODES[@]} -gt 0 ] || MODES=(ack-early ack-after idempotent)

run_mode () {
    local mode=$1 d="$T/$1"
    mkdir -p "$d/sink"
    : >"$d/raw" ; : >"$d/effects"; : >"$d/crashes"; : >"$T/restarts"
    local point=after early=() effect=(--effect "$d/effects")
    case $mode in
    ack-early) point=before; early=(--ack-early) ;;
    ack-after) ;;
    idempotent) effect=(--sink "$d/sink") ;;
    *) die "unknown mode $mode" ;;
    esac
    # worker death is noticed by heartbeats: liveness 3 x HB ms
    broker_start "broker-$mode" --lane x --durability none --heartbeat "${HB}ms" --liveness 3 \
        --max-attempts 50 --backoff-base 10ms --backoff-cap 10ms
    local handler
    handler="$(q "$BIN/zlane-exp-handler") --sleep $WORK_MS --crash-rate $RATE --crash-seed $SEED"
    handler+=" --crash-point $point --crash-log $(q "$d/crashes") --raw $(q "$d/raw")"
    handler+=" ${effect[0]} $(q "${effect[1]}")"
    local w
    for w in $(seq 1 "$WORKERS"); do
        supervise "$w" "$BIN/zlane-worker" --broker "$BACKEND" --lanes x --concurrency 1 \
            --heartbeat "${HB}ms" --liveness 3 --kill-grace 1s "${early[@]}" --exec "$handler"
    done
    local t0
    t0=$(now_ms)
    seq 1 "$JOBS" | "$BIN/zlane-submit" --broker "$FRONTEND" --tenant t --lane x --lines \
        --key-prefix job- >"$d/ids" 2>"$d/submit.err" || die "submit failed: $(cat "$d/submit.err")"
    local accepted
    accepted=$(grep -c . "$d/ids")
    local status=ok
    if ! wait_settled "$accepted" 300; then
        broker_alive 2>/dev/null && status=TIMEOUT || status=BROKER_EXITED
    fi
    # the last handlers of ack-early run after their ack: wait until the
    # executions stop changing
    local last=-1 now
    while :; do
        now=$(cat "$d/raw" "$d/crashes" | wc -l)
        [ "$now" = "$last" ] && break
        last=$now
        sleep 0.3
    done
    local secs=$(( ($(now_ms) - t0) ))
    local dead worker_dead stale
    dead=$(counter jobs_dead_lettered)
    worker_dead=$(counter workers_dead)
    stale=$(counter err_stale_lease)
    stop_supervised
    broker_stop

    # payloads 1..JOBS were accepted (line N of ids is payload N's job id)
    local crashes restarts execs distinct_exec effected effects lost dup_effect dup_raw
    crashes=$(grep -c . "$d/crashes")
    restarts=$(grep -c . "$T/restarts")
    execs=$(grep -c . "$d/raw")
    distinct_exec=$(awk '{print $1}' "$d/raw" | sort -u | wc -l)
    dup_raw=$(( execs - distinct_exec ))
    if [ "$mode" = idempotent ]; then
        effects=$(find "$d/sink" -type f | wc -l)
        effected=$(find "$d/sink" -type f -printf '%f\n' | sed 's/^job-//' | sort -u | wc -l)
        find "$d/sink" -type f -printf '%f\n' | sed 's/^job-//' | sort -u >"$d/effected"
    else
        effects=$(grep -c . "$d/effects")
        sort -u "$d/effects" >"$d/effected"
        effected=$(grep -c . "$d/effected")
    fi
    dup_effect=$(( effects - effected ))
    lost=$(seq 1 "$accepted" | sort | comm -23 - <(sort "$d/effected") | wc -l)
    [ "$status" = ok ] || printf 'INCOMPLETE(%s: %s) ' "$status" \
        "$(grep -E 'ERROR' "$T/broker-$mode/broker.err" | head -2 | cut -c26- | tr '\n' ';')"
    printf '%-11s accepted=%d lost=%d duplicate_effects=%d | executions=%d repeated_executions=%d crashes=%d worker_restarts=%d workers_declared_dead=%d stale_acks=%d dead_lettered=%d time_s=%.1f\n' \
        "$mode" "$accepted" "$lost" "$dup_effect" "$execs" "$dup_raw" "$crashes" "$restarts" \
        "$worker_dead" "$stale" "$dead" "$(calc "$secs / 1000")"
}

echo "# delivery under crashes: jobs=$JOBS crash_rate=$RATE seed=$SEED workers=$WORKERS (concurrency 1 each, supervised), work ${WORK_MS}ms per attempt, heartbeat ${HB}ms x liveness 3; real time, not scaled"
for m in "${MODES[@]}"; do run_mode "$m"; done
