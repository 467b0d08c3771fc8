# shellcheck shell=bash
# bench/experiments/lib.sh: shared helpers of the failure-mode experiments.
# Sourced by each exp-*.sh. Every process started here is recorded by PID and
# stopped by PID at exit (SIGTERM, then SIGKILL); the temp dir is removed
# unless ZLANE_EXP_KEEP=1.
#
# Environment:
#   ZLANE_BIN       directory of the zlane binaries (default <repo>/build/bin)
#   ZLANE_EXP_KEEP  1: keep the temp dir (logs, effect sinks) and print it
#   ZLANE_BROKER_FLAGS  extra broker flags (e.g. -v), for debugging

set -u
source "$(dirname "${BASH_SOURCE[0]}")/machine.sh" # calc
EXP_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$EXP_DIR/../.." && pwd)
BIN=${ZLANE_BIN:-$REPO/build/bin}
BIN=$(cd "$BIN" 2>/dev/null && pwd) || { echo "no binaries in ${ZLANE_BIN:-$REPO/build/bin}: run 'make build' first" >&2; exit 2; }
for b in zlane-broker zlane-worker zlane-submit zlane-ctl zlane-exp-handler \
         zlane-exp-downstream zlane-exp-storm-worker; do
    [ -x "$BIN/$b" ] || { echo "missing $BIN/$b (build the tree: make build)" >&2; exit 2; }
done

T=$(mktemp -d "${TMPDIR:-/tmp}/zlane-exp.XXXXXX")
EXP_PIDS=()     # every process we started, by PID
EXP_SUPERVISORS=()

exp_cleanup () {
    touch "$T/stop" 2>/dev/null
    local p f
    for p in "${EXP_SUPERVISORS[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for f in "$T"/sup*.pid; do
        [ -e "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null
    done
    for p in "${EXP_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
    sleep 0.2
    for p in "${EXP_PIDS[@]}" "${EXP_SUPERVISORS[@]}"; do kill -KILL "$p" 2>/dev/null; done
    for p in "${EXP_PIDS[@]}" "${EXP_SUPERVISORS[@]}"; do wait "$p" 2>/dev/null; done
    if [ "${ZLANE_EXP_KEEP:-0}" = 1 ]; then
        echo "# kept $T" >&2
    else
        rm -rf "$T"
    fi
}
trap exp_cleanup EXIT
trap 'exit 130' INT TERM

now_ms () { date +%s%3N; }

die () { echo "$(basename "$0"): $*" >&2; exit 1; }

# broker_start NAME ARGS...: a broker on ephemeral loopback ports, data in
# $T/NAME; sets FRONTEND BACKEND ADMIN BROKER_PID.
broker_start () {
    local name=$1; shift
    local d="$T/$name"
    mkdir -p "$d"
    "$BIN/zlane-broker" --data "$d/data" --ports-file "$d/ports" \
        --frontend 'tcp://127.0.0.1:*' --backend 'tcp://127.0.0.1:*' \
        --events 'tcp://127.0.0.1:*' --admin 'tcp://127.0.0.1:*' "$@" ${ZLANE_BROKER_FLAGS:-} \
        >"$d/broker.out" 2>"$d/broker.err" &
    BROKER_PID=$!
    BROKER_PORTS="$d/ports"
    EXP_PIDS+=("$BROKER_PID")
    for _ in $(seq 1 500); do
        [ -s "$d/ports" ] && grep -q '^admin=' "$d/ports" && break
        kill -0 "$BROKER_PID" 2>/dev/null || { cat "$d/broker.err" >&2; die "broker did not start"; }
        sleep 0.02
    done
    FRONTEND=$(sed -n 's/^frontend=//p' "$d/ports")
    BACKEND=$(sed -n 's/^backend=//p' "$d/ports")
    ADMIN=$(sed -n 's/^admin=//p' "$d/ports")
    [ -n "$ADMIN" ] || die "broker wrote no ports"
}

# broker_stop: SIGTERM the broker and wait for it.
broker_stop () {
    kill -TERM "$BROKER_PID" 2>/dev/null
    wait "$BROKER_PID" 2>/dev/null
}

ctl () { "$BIN/zlane-ctl" --admin "$ADMIN" "$@"; }

counter () { ctl stats --counter "$1" 2>/dev/null || echo 0; }

# broker_alive: 0 if the broker runs; else prints its last error and 1.
broker_alive () {
    kill -0 "$BROKER_PID" 2>/dev/null && return 0
    echo "BROKER EXITED: $(grep -E 'ERROR|FATAL' "$(dirname "$BROKER_PORTS")/broker.err" | head -3 | tr '\n' ' ')" >&2
    return 1
}

# wait_counter NAME MIN TIMEOUT_S: poll until counter NAME >= MIN. 0 or 1.
wait_counter () {
    local name=$1 min=$2 deadline=$(( $(now_ms) + $3 * 1000 )) v
    while :; do
        v=$(counter "$name")
        [ "${v:-0}" -ge "$min" ] && return 0
        broker_alive || return 1
        [ "$(now_ms)" -gt "$deadline" ] && { echo "timed out: $name=$v < $min" >&2; return 1; }
        sleep 0.05
    done
}

# wait_settled N TIMEOUT_S: poll until acked + dead-lettered >= N.
wait_settled () {
    local n=$1 deadline=$(( $(now_ms) + $2 * 1000 )) a d
    while :; do
        a=$(counter jobs_acked)
        d=$(counter jobs_dead_lettered)
        [ $(( ${a:-0} + ${d:-0} )) -ge "$n" ] && return 0
        broker_alive || return 1
        [ "$(now_ms)" -gt "$deadline" ] && { echo "timed out: acked $a + dead $d < $n" >&2; return 1; }
        sleep 0.05
    done
}

# spawn LOG CMD...: run CMD in the background, stderr to LOG; sets LAST_PID.
spawn () {
    local log=$1; shift
    "$@" >>"$log" 2>&1 &
    LAST_PID=$!
    EXP_PIDS+=("$LAST_PID")
}

# supervise SLOT CMD...: a supervisor loop that restarts CMD whenever it dies
# (as a process manager would), until $T/stop exists. The running child's
# PID is in $T/supSLOT.pid; each restart adds a line to $T/restarts.
supervise () {
    local slot=$1; shift
    (
        trap 'kill -KILL "$child" 2>/dev/null; exit 0' TERM
        while [ ! -e "$T/stop" ]; do
            "$@" >>"$T/worker$slot.log" 2>&1 &
            child=$!
            echo "$child" >"$T/sup$slot.pid"
            wait "$child"
            [ -e "$T/stop" ] || echo "$slot" >>"$T/restarts"
        done
    ) 2>/dev/null &
    EXP_SUPERVISORS+=("$!")
}

# stop_supervised: stop every supervisor and its current child (SIGTERM
# lets a worker hand back what it holds).
stop_supervised () {
    touch "$T/stop"
    local f
    for f in "$T"/sup*.pid; do [ -e "$f" ] && kill -TERM "$(cat "$f")" 2>/dev/null; done
    local p
    for p in "${EXP_SUPERVISORS[@]}"; do wait "$p" 2>/dev/null; done
    EXP_SUPERVISORS=()
    rm -f "$T"/sup*.pid "$T/stop"
}

# percentile P FILE: the P-th percentile (nearest rank) of the numbers in FILE.
percentile () {
    sort -g "$2" | awk -v p="$1" '{ v[NR] = $1 } END {
        if (NR == 0) { print "nan"; exit }
        r = int((p / 100) * NR + 0.999999); if (r < 1) r = 1; if (r > NR) r = NR; print v[r] }'
}

# q STRING: shell-quote for --exec command lines.
q () { printf '%q' "$1"; }
