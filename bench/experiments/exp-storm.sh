#!/usr/bin/env bash
# Experiment 2, retry storm: N jobs (1000) all call a downstream
# (zlane-exp-downstream, UDP on 127.0.0.1) that admits 50 requests per
# second (never more than 50 in any 1 s: a sliding window; LIMITER_BUCKET=1
# makes it a token bucket of 50) and rejects the rest; a rejected attempt fails
# TRANSIENT and the broker schedules the retry with its backoff,
# min(cap, base * 2^attempt) with base 1 s and cap 60 s. Modes:
#   no-jitter   --no-jitter: retry exactly at the bound
#   jitter      full jitter: random(0, bound)
#   rate-limit  full jitter + the lane's rate limit, 50 dispatches/s
# All jobs are queued while the lane is paused, then released at once (the
# outage ends). Time is scaled: 1 simulated second = SCALE_MS real ms, for
# the backoff, the downstream's rate and the rate limit alike; results are
# printed in simulated seconds.
#
# usage: exp-storm.sh [MODE...]   (default: no-jitter jitter rate-limit)
# env:   JOBS (1000) SCALE_MS (50) RATE (50 per simulated s) BASE_S (1) CAP_S (60)
source "$(dirname "$0")/lib.sh"

JOBS=${JOBS:-1000}
SCALE=${SCALE_MS:-50}
RATE=${RATE:-50}
BASE_S=${BASE_S:-1}
CAP_S=${CAP_S:-60}
CONC=${CONCURRENCY:-128}
MODES=("$@")
[ ${#MODES[@]} -gt 0 ] || MODES=(no-jitter jitter rate-limit)

run_mode () {
    local mode=$1 d="$T/$1"
    mkdir -p "$d"
    local real_rate base_ms cap_ms
    real_rate=$(calc "$RATE * 1000 / $SCALE")
    base_ms=$(( BASE_S * SCALE ))
    cap_ms=$(( CAP_S * SCALE ))
    spawn "$d/downstream.err" "$BIN/zlane-exp-downstream" --port-file "$d/port" \
        --limit "$RATE" --window-ms "$SCALE" ${LIMITER_BUCKET:+--bucket} --out "$d/summary" \
        --series "$d/series.csv"
    local ds_pid=$LAST_PID
    for _ in $(seq 1 200); do [ -s "$d/port" ] && break; sleep 0.02; done
    [ -s "$d/port" ] || die "downstream did not start"
    local extra=()
    case $mode in
    no-jitter) extra=(--no-jitter) ;;
    jitter) ;;
    rate-limit) extra=(--set "lanes/x/rate=$real_rate" --set "lanes/x/burst=$(( RATE / 10 > 1 ? RATE / 10 : 1 ))") ;;
    *) die "unknown mode $mode" ;;
    esac
    broker_start "broker-$mode" --lane x --durability none --max-attempts 1000 \
        --backoff-base "${base_ms}ms" --backoff-cap "${cap_ms}ms" "${extra[@]}"
    ctl pause x >/dev/null || die "cannot pause lane x"
    seq 1 "$JOBS" | "$BIN/zlane-submit" --broker "$FRONTEND" --tenant t --lane x --lines -q \
        2>"$d/submit.err" || die "submit failed: $(cat "$d/submit.err")"
    local w
    for w in 1 2; do
        spawn "$d/worker$w.err" "$BIN/zlane-exp-storm-worker" --broker "$BACKEND" --lanes x \
            --downstream-port "$(cat "$d/port")" --concurrency "$CONC" --prefetch 0
    done
    wait_counter workers_ready 2 20 || die "workers did not connect"
    local t0 status=ok
    t0=$(now_ms)
    ctl resume x >/dev/null || die "cannot resume lane x"
    wait_counter jobs_acked "$JOBS" 600 || status=INCOMPLETE
    local wall=$(( $(now_ms) - t0 ))
    local nacked
    nacked=$(counter jobs_nacked)
    kill -TERM "$ds_pid"
    wait "$ds_pid" 2>/dev/null
    broker_stop
    local requests admitted rejected peak peak_retry last_ms
    requests=$(sed -n 's/^requests=//p' "$d/summary")
    admitted=$(sed -n 's/^admitted=//p' "$d/summary")
    rejected=$(sed -n 's/^rejected=//p' "$d/summary")
    peak=$(sed -n 's/^peak=//p' "$d/summary")
    peak_retry=$(sed -n 's/^peak_retry=//p' "$d/summary")
    last_ms=$(sed -n 's/^last_admit_ms=//p' "$d/summary")
    [ "$status" = ok ] || printf 'INCOMPLETE '
    printf '%-10s peak=%d/s rejected=%d clear_s=%.1f | retry_peak=%d/s requests=%d admitted=%d broker_nacks=%s real_s=%.2f\n' \
        "$mode" "$peak" "$rejected" "$(calc "$last_ms / $SCALE")" "$peak_retry" \
        "$requests" "$admitted" "$nacked" "$(calc "$wall / 1000")"
}

echo "# retry storm: jobs=$JOBS downstream admits $RATE in any 1 s (sliding window), backoff min(${CAP_S}s, ${BASE_S}s*2^attempt); time scaled 1 s -> ${SCALE} ms; peak = requests in one simulated second; clear = first request to last admitted, simulated s"
for m in "${MODES[@]}"; do run_mode "$m"; done
