#!/usr/bin/env bash
# bench/run-bench.sh: zlane's throughput, latency and memory benchmarks in both
# durability modes, and the same workloads against beanstalkd and RabbitMQ,
# as one table with zlane's ratios to each. Called by `make bench`. Builds
# nothing (the binaries must be in $ZLANE_BIN, default build/bin) but
# zlane-rabbitmq-bench when this run had to install librabbitmq-dev (CMake
# leaves that target out without it). Installs beanstalkd, and rabbitmq-server
# with librabbitmq-dev, with apt-get when they are missing and we are root;
# otherwise their rows are skipped. Every server is the bench programs' own,
# on free loopback ports, stopped by PID.
#
# Writes the table to stdout and into bench/RESULTS.md (its "bench" section;
# the rest of the file is kept).
#
# env: ZLANE_BIN, JOBS (100000), MEM_JOBS (1000000), RMQ_MEM_JOBS (MEM_JOBS:
#      RabbitMQ takes about a minute for them), LAT_RATES ("1000 5000"),
#      LAT_SECONDS (5), BS_FSYNC_JOBS (2000), REPEAT (3: throughput runs, the
#      best is kept), RABBITMQ_BENCH (1; 0 skips RabbitMQ), RESULTS
#      (bench/RESULTS.md)
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
BIN=${ZLANE_BIN:-$REPO/build/bin}
BIN=$(cd "$BIN" 2>/dev/null && pwd) || { echo "no binaries in ${ZLANE_BIN:-build/bin}: run 'make build'" >&2; exit 2; }
RESULTS=${RESULTS:-$HERE/RESULTS.md}
JOBS=${JOBS:-100000}
MEM_JOBS=${MEM_JOBS:-1000000}
RMQ_MEM_JOBS=${RMQ_MEM_JOBS:-$MEM_JOBS}
LAT_RATES=${LAT_RATES:-1000 5000}
LAT_SECONDS=${LAT_SECONDS:-5}
BS_FSYNC_JOBS=${BS_FSYNC_JOBS:-2000}
REPEAT=${REPEAT:-3}
for b in zlane-bench zlane-bench-latency zlane-bench-sched zlane-beanstalk-bench zlane-broker; do
    [ -x "$BIN/$b" ] || { echo "missing $BIN/$b (make build)" >&2; exit 2; }
done
source "$HERE/experiments/machine.sh"

# apt_install PACKAGE...: quietly, with an apt-get update if the first try fails
apt_install () {
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null 2>&1 ||
        { apt-get update -qq >/dev/null 2>&1 &&
          DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null 2>&1; }
}

# beanstalkd: the Debian package
BEANSTALKD=$(command -v beanstalkd || true)
if [ -z "$BEANSTALKD" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing beanstalkd (apt-get)..." >&2
    apt_install beanstalkd
    # the package's service is not needed: we start our own on a free port
    systemctl disable --now beanstalkd >/dev/null 2>&1 || true
    BEANSTALKD=$(command -v beanstalkd || true)
fi
[ -n "$BEANSTALKD" ] || echo "beanstalkd not found (not root, or apt-get failed): its rows are skipped" >&2

# RabbitMQ: Debian's rabbitmq-server, and librabbitmq-dev for zlane-rabbitmq-bench
RABBITMQ_SERVER=/usr/sbin/rabbitmq-server
RMQ=$BIN/zlane-rabbitmq-bench
if [ "${RABBITMQ_BENCH:-1}" != 0 ] && { [ ! -x "$RABBITMQ_SERVER" ] || ! pkg-config --exists librabbitmq; } &&
   [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    # an epmd (Erlang's port mapper) running now, or an Erlang installed before, is someone else's
    epmd_before=$(pidof epmd || true)
    erlang_before=$(dpkg-query -W -f='${Status}' erlang-base 2>/dev/null | grep -c "install ok installed")
    echo "installing rabbitmq-server and librabbitmq-dev (apt-get)..." >&2
    apt_install rabbitmq-server librabbitmq-dev
    # the package's node is not needed: the bench starts its own (and its own epmd) on free ports
    systemctl disable --now rabbitmq-server >/dev/null 2>&1 || true
    if [ -z "$epmd_before" ] && [ "$erlang_before" = 0 ]; then
        systemctl disable --now epmd.socket epmd.service >/dev/null 2>&1 || true
        for pid in $(pidof epmd); do kill "$pid"; done
    fi
    # installed after `make build`: build the one target that needs it
    if [ ! -x "$RMQ" ] && [ -f "$BIN/../CMakeCache.txt" ] && pkg-config --exists librabbitmq; then
        echo "building zlane-rabbitmq-bench..." >&2
        { cmake "$BIN/.." && cmake --build "$BIN/.." --target zlane-rabbitmq-bench; } >/dev/null 2>&1 ||
            echo "building zlane-rabbitmq-bench failed" >&2
    fi
fi
if [ "${RABBITMQ_BENCH:-1}" = 0 ]; then
    RMQ=
elif [ ! -x "$RABBITMQ_SERVER" ] || [ ! -x "$RMQ" ]; then
    echo "RabbitMQ or $RMQ missing (not root, apt-get failed, or built without librabbitmq-dev): its rows are skipped" >&2
    RMQ=
fi

OUT=$(mktemp -d "${TMPDIR:-/tmp}/zlane-benchrun.XXXXXX")
trap 'rm -rf "$OUT"' EXIT
CMDS=()    # "name|command" for the table
T_START=$(date +%s)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)

# run NAME CMD...: run it, keep its output in $OUT/NAME, remember the command
run () {
    local name=$1; shift
    echo "+ $*" >&2
    "$@" >"$OUT/$name" 2>"$OUT/$name.err" || { echo "  failed: $(tail -3 "$OUT/$name.err")" >&2; }
    grep -v '^E: .*dangling' "$OUT/$name.err" | tail -2 >&2
    cat "$OUT/$name" >&2
    case $name in *.[0-9]) ;; *) CMDS+=("$name|$(printf '%q ' "$@" | sed "s|$BIN/||g; s/ $//")|") ;; esac
}
# best NAME N CMD...: run CMD N times and keep the run with the most jobs/s
# (throughput on a shared machine: the best run is the least disturbed one)
best () {
    local name=$1 n=$2 i; shift 2
    for i in $(seq 1 "$n"); do
        run "$name.$i" "$@"
    done
    keep_best "$name" "$n" "(best of $n)" "$@"
}
# keep_best NAME N WHAT CMD...: of the runs NAME.1 .. NAME.N made, keep the
# one with the most jobs/s as NAME
keep_best () {
    local name=$1 n=$2 what=$3 i b=-1 j; shift 3
    for i in $(seq 1 "$n"); do
        j=$(jobs_s "$name.$i"); j=${j:-0}
        if [ "$j" -gt "$b" ]; then b=$j; cp "$OUT/$name.$i" "$OUT/$name"; fi
    done
    CMDS+=("$name|$(printf '%q ' "$@" | sed "s|$BIN/||g; s/ $//")|$what")
}
jobs_s () { sed -n 's/.* \([0-9][0-9]*\) jobs\/s.*/\1/p' "$OUT/$1" 2>/dev/null | head -1; }
bytes_job () { sed -n 's/.*= \([0-9][0-9]*\) bytes\/job.*/\1/p' "$OUT/$1" 2>/dev/null | head -1; }
lat () { sed -n "s/.* $2 \([0-9.]*\) ms.*/\1/p" "$OUT/$1" 2>/dev/null | head -1; }
# lat_floor NAME P: the floor's two-hop figure (its first line is one hop)
lat_floor () { grep two-hops "$OUT/$1" 2>/dev/null | sed -n "s/.* $2 \([0-9.]*\) ms.*/\1/p" | head -1; }
# above A B: A - B in µs (both in ms), or n/a
above () { [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.0f", (a - b) * 1000 }' || printf 'n/a'; }
ratio () { [ -n "$1" ] && [ -n "$2" ] && [ "$2" != 0 ] && awk -v r="$(calc "$1 / $2")" 'BEGIN { if (r < 0.005) printf "<0.01"; else printf "%.2f", r }' || printf 'n/a'; }

# The throughput rows the ratios are made of, in rounds: a round runs zlane
# (none, fsync) and its peers (beanstalkd in memory, RabbitMQ transient and
# durable) once each, back to back, and each keeps its best round. This
# machine's speed drifts over minutes; runs of one system made minutes before
# its peer's would make the ratio measure the drift.
ZT=("$BIN/zlane-bench" throughput --jobs "$JOBS" --producers 1 --workers 2 --payload 100)
BT=(--jobs "$JOBS" --consumers 2 --payload 100)
for i in $(seq 1 "$REPEAT"); do
    for d in none fsync; do
        run "thr-$d-1.$i" "${ZT[@]}" --durability "$d"
    done
    if [ -n "$BEANSTALKD" ]; then
        run "bs-memory.$i" "$BIN/zlane-beanstalk-bench" throughput "${BT[@]}" --durability memory \
            --beanstalkd "$BEANSTALKD"
    fi
    if [ -n "$RMQ" ]; then
        for d in transient durable; do
            run "rmq-thr-$d.$i" "$RMQ" throughput "${BT[@]}" --durability "$d" \
                --rabbitmq-server "$RABBITMQ_SERVER"
        done
    fi
done
ROUNDS="(best of $REPEAT rounds with the peers)"
for d in none fsync; do
    keep_best "thr-$d-1" "$REPEAT" "$ROUNDS" "${ZT[@]}" --durability "$d"
done
if [ -n "$BEANSTALKD" ]; then
    keep_best bs-memory "$REPEAT" "$ROUNDS" "$BIN/zlane-beanstalk-bench" throughput "${BT[@]}" \
        --durability memory --beanstalkd "$BEANSTALKD"
fi
if [ -n "$RMQ" ]; then
    for d in transient durable; do
        keep_best "rmq-thr-$d" "$REPEAT" "$ROUNDS" "$RMQ" throughput "${BT[@]}" --durability "$d" \
            --rabbitmq-server "$RABBITMQ_SERVER"
    done
fi

for d in none fsync; do
    best "thr-$d-2" "$REPEAT" "$BIN/zlane-bench" throughput --jobs "$JOBS" --producers 2 --workers 2 \
        --payload 100 --durability "$d"
    # the job model's scheduling rules against the plain run (issue 16: within 20 %)
    best "thr-$d-prio" "$REPEAT" "$BIN/zlane-bench" throughput --jobs "$JOBS" --workers 2 \
        --payload 100 --durability "$d" --priorities 1
    best "thr-$d-keys" "$REPEAT" "$BIN/zlane-bench" throughput --jobs "$JOBS" --workers 2 \
        --payload 100 --durability "$d" --ordering-keys 10000
    for r in $LAT_RATES; do
        # a window of 200 jobs per worker (4 running + 196 prefetched), as
        # RabbitMQ's consumers get with basic.qos 200
        run "lat-$d-$r" "$BIN/zlane-bench-latency" --rate "$r" --seconds "$LAT_SECONDS" \
            --workers 2 --payload 100 --durability "$d" --prefetch 196
        # the floor under these figures, in the same minutes: a relay that
        # does nothing between two loopback hops (bench/floor.c)
        [ "$d" = none ] && [ -x "$BIN/zlane-bench-floor" ] &&
            run "floor-$r" "$BIN/zlane-bench-floor" --rate "$r" --seconds "$LAT_SECONDS" \
                --consumers 2 --payload 100
    done
    run "mem-$d" "$BIN/zlane-bench" memory --jobs "$MEM_JOBS" --payload 100 --durability "$d"
done
if [ -n "$BEANSTALKD" ]; then
    BS=("$BIN/zlane-beanstalk-bench")
    best bs-nosync "$REPEAT" "${BS[@]}" throughput --jobs "$JOBS" --consumers 2 --payload 100 \
        --durability nosync --beanstalkd "$BEANSTALKD"
    best bs-binlog "$REPEAT" "${BS[@]}" throughput --jobs "$JOBS" --consumers 2 --payload 100 \
        --durability binlog --beanstalkd "$BEANSTALKD"
    run bs-fsync "${BS[@]}" throughput --jobs "$BS_FSYNC_JOBS" --consumers 2 --payload 100 \
        --durability fsync --beanstalkd "$BEANSTALKD"
    run bs-mem "${BS[@]}" memory --jobs "$MEM_JOBS" --payload 100 --beanstalkd "$BEANSTALKD"
    for d in memory fsync; do
        for r in $LAT_RATES; do
            run "bs-lat-$d-$r" "${BS[@]}" latency --rate "$r" --seconds "$LAT_SECONDS" --consumers 2 \
                --payload 100 --durability "$d" --beanstalkd "$BEANSTALKD"
        done
    done
fi
if [ -n "$RMQ" ]; then
    for d in transient durable; do
        for r in $LAT_RATES; do
            run "rmq-lat-$d-$r" "$RMQ" latency --rate "$r" --seconds "$LAT_SECONDS" --consumers 2 \
                --payload 100 --durability "$d" --rabbitmq-server "$RABBITMQ_SERVER"
        done
    done
    run rmq-mem "$RMQ" memory --jobs "$RMQ_MEM_JOBS" --payload 100 --rabbitmq-server "$RABBITMQ_SERVER"
fi
# fairness at scale: the broker's dispatch rate with 10,000 tenants backlogged vs
# one (best of 3 inside), and the scheduler's own cost per dispatch
run sched-full "$BIN/zlane-bench-sched" --full --tenants 10000 --rounds 3
run sched-inproc "$BIN/zlane-bench-sched" --tenants 10000 --seconds 0.3 --rounds 2
T_END=$(date +%s)

# row LABEL ZLANE_NONE ZLANE_FSYNC BS_MEMORY BS_FSYNC RMQ_TRANSIENT RMQ_DURABLE:
# the values and zlane's ratios (none to the peers that keep nothing on disk,
# fsync to the ones that sync before they answer)
row () {
    echo "| $1 | ${2:-n/a} | ${3:-n/a} | ${4:-n/a} | ${5:-n/a} | ${6:-n/a} | ${7:-n/a} |" \
         "$(ratio "$2" "$4") | $(ratio "$3" "$5") | $(ratio "$2" "$6") | $(ratio "$3" "$7") |"
}

table () {
    echo "| measure (100-byte jobs, loopback) | zlane none | zlane fsync | beanstalkd in-memory | beanstalkd fsync (-b -f0) | RabbitMQ transient | RabbitMQ durable + confirms | none / beanstalkd in-memory | fsync / beanstalkd fsync | none / RabbitMQ transient | fsync / RabbitMQ durable |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    local r p queued
    row "throughput, 1 producer x 2 workers (jobs/s, submit to ack, best of $REPEAT rounds with the peers)" \
        "$(jobs_s thr-none-1)" "$(jobs_s thr-fsync-1)" "$(jobs_s bs-memory)" "$(jobs_s bs-fsync)" \
        "$(jobs_s rmq-thr-transient)" "$(jobs_s rmq-thr-durable)"
    echo "| throughput, 2 producers x 2 workers (jobs/s) | $(jobs_s thr-none-2) | $(jobs_s thr-fsync-2) | | | | | | | | |"
    for r in $LAT_RATES; do
        for p in p50 p99 p99.9; do
            row "latency $p at $r jobs/s offered (ms, open loop)" \
                "$(lat "lat-none-$r" $p)" "$(lat "lat-fsync-$r" $p)" "$(lat "bs-lat-memory-$r" $p)" \
                "$(lat "bs-lat-fsync-$r" $p)" "$(lat "rmq-lat-transient-$r" $p)" "$(lat "rmq-lat-durable-$r" $p)"
        done
    done
    queued="$MEM_JOBS queued"
    [ "$RMQ_MEM_JOBS" = "$MEM_JOBS" ] || queued="$queued, RabbitMQ $RMQ_MEM_JOBS"
    row "memory: RSS per queued job (bytes; $queued)" \
        "$(bytes_job mem-none)" "$(bytes_job mem-fsync)" "$(bytes_job bs-mem)" "" "" "$(bytes_job rmq-mem)"
    echo
    echo "Ratios are zlane / the peer: for throughput above 1 means zlane is faster; for latency and"
    echo "memory below 1 means zlane is faster or smaller. beanstalkd's other binlog modes, throughput:"
    echo "-b -F $(jobs_s bs-nosync) jobs/s (none / it $(ratio "$(jobs_s thr-none-1)" "$(jobs_s bs-nosync)")), -b (-f50)" \
         "$(jobs_s bs-binlog) jobs/s (fsync / it $(ratio "$(jobs_s thr-fsync-1)" "$(jobs_s bs-binlog)"))."
}

# floor_table: each system's latency beside the floor measured in the same
# run, and what each added to it (µs)
floor_table () {
    echo "| latency, $LAT_SECONDS s open loop, 100 bytes (ms) | floor: two loopback hops, nothing between | zlane none | added (µs) | beanstalkd in-memory | added (µs) | RabbitMQ transient | added (µs) |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|"
    local r p f z b q
    for r in $LAT_RATES; do
        for p in p50 p99; do
            f=$(lat_floor "floor-$r" $p); z=$(lat "lat-none-$r" $p)
            b=$(lat "bs-lat-memory-$r" $p); q=$(lat "rmq-lat-transient-$r" $p)
            echo "| $p at $r jobs/s | ${f:-n/a} | ${z:-n/a} | $(above "$z" "$f") | ${b:-n/a} | $(above "$b" "$f") | ${q:-n/a} | $(above "$q" "$f") |"
        done
    done
}

# sched_row LABEL: "1 tenant/s | many/s | ratio" from the --full output
sched_row () {
    awk -v l="$1" 'index($0, l) == 1 { n = split(substr($0, length(l) + 1), f, " "); for (i = 1; i <= n; i++) if (f[i] ~ /^[0-9.]+$/) v[++k] = f[i]; print v[1] " | " v[2] " | " v[3]; exit }' "$OUT/sched-full"
}
sched_table () {
    echo "| broker dispatch rate, 400,000 jobs backlogged, 2 workers (jobs/s, best of 3) | 1 tenant | 10,000 tenants | ratio (target >= 0.80) |"
    echo "|---|---:|---:|---:|"
    local l
    for l in "wfq (quantum 1000 us)" "wfq (quantum 0, exact)" "fifo"; do
        echo "| $l | $(sched_row "$l") |"
    done
}

model_table () {
    echo "| throughput, 1 producer x 2 workers (jobs/s, best of $REPEAT) | plain | priorities 0-9 in turn | ratio | 10,000 ordering keys in turn | ratio (target >= 0.80) |"
    echo "|---|---:|---:|---:|---:|---:|"
    local d p q k
    for d in none fsync; do
        p=$(jobs_s "thr-$d-1"); q=$(jobs_s "thr-$d-prio"); k=$(jobs_s "thr-$d-keys")
        echo "| $d | $p | $q | $(ratio "$q" "$p") | $k | $(ratio "$k" "$p") |"
    done
}

section () {
    echo "<!-- bench:begin -->"
    echo "## Benchmarks (\`make bench\`)"
    echo
    echo "Measured $(date -u '+%Y-%m-%d %H:%M UTC') in $(( T_END - T_START )) s on: $(machine_line)."
    echo "Load average at the start: $LOAD_START (other work was running on the machine: numbers are a floor, not a ceiling)."
    echo
    table
    echo
    echo "The floor under the latency rows, measured in the same run (\`zlane-bench-floor\`,"
    echo "bench/floor.c): the same pacing and messages through a relay that does nothing but pass each"
    echo "one on (an epoll loop between the producer and 2 consumers that wait in a blocking read, each"
    echo "message answered to the producer and acknowledged by its consumer with one byte), so the two"
    echo "loopback hops and the three wake-ups any broker in its own process needs, and nothing else."
    echo "Each figure is one $LAT_SECONDS s run (the floor's beside zlane's, the peers' minutes later), so the"
    echo "tails move with the minute: a negative p99 figure is a noisier minute for the floor, not a"
    echo "broker below it. The medians are what each system adds to the trip by its own work."
    echo
    floor_table
    echo
    sched_table
    echo
    model_table
    echo
    echo "The dispatch rate is timed from the workers' start to the last job run, with every job"
    echo "accepted before (durability none, no-op handler). The in-process rows in the raw output are"
    echo "the scheduler alone (pop + charge + requeue): its cost per dispatch, in ns, with 1 and 10,000"
    echo "tenants."
    echo
    echo "zlane \`none\` writes every change to LMDB without fsync (the page cache holds it); \`fsync\`"
    echo "commits each loop turn with fdatasync before any reply (group commit: one fsync covers every"
    echo "job of the turn). beanstalkd in-memory keeps nothing on disk; \`-b DIR -F\` writes its binlog"
    echo "but never fsyncs (like zlane \`none\`); \`-b DIR\` (its default, -f50) fsyncs at most every"
    echo "50 ms, so an acknowledged put can still be lost; \`-b DIR -f0\` fsyncs on every write, before"
    echo "the reply (like zlane \`fsync\`, which amortises one fsync over a whole loop turn)."
    echo "The beanstalkd client (bench/beanstalk_bench.c) pipelines puts (1024 unanswered) and keeps 64"
    echo "non-blocking reserves outstanding per consumer, so both systems batch on the wire."
    echo "beanstalkd -f0 runs $BS_FSYNC_JOBS jobs, not $JOBS: at one fsync per put and per delete it would"
    echo "take minutes; offered more jobs/s than that row, its latency is the backlog's, growing for the"
    echo "whole run. The first throughput row is made in $REPEAT rounds: each runs zlane \`none\` and"
    echo "\`fsync\`, beanstalkd in memory, RabbitMQ transient and durable once, back to back, and each"
    echo "keeps its best round, so that a ratio compares runs of the same minutes (this shared machine's"
    echo "speed drifts over minutes; the other throughput rows are best of $REPEAT runs in a row)."
    echo "RabbitMQ (bench/rabbitmq_bench.c, librabbitmq) runs a node of its own (and its own"
    echo "epmd) per command on free loopback ports: one classic queue; transient = non-durable queue and"
    echo "transient messages, no confirms; durable = durable queue, persistent messages and publisher"
    echo "confirms (1000 unconfirmed at most). Its 2 consumers take basic.qos 200 and ack each message"
    echo "after receiving it (acks of messages already buffered go as one multiple ack). Its memory row"
    echo "is beam.smp's RSS growth with $RMQ_MEM_JOBS persistent messages queued (the lowest reading"
    echo "of the 3 s after); RabbitMQ moves the messages of a long queue out of memory, so the figure"
    echo "falls as the queue grows. Latency is measured from each job's scheduled submit time (open"
    echo "loop), so a producer that falls behind is charged for it: zlane to the handler's start,"
    echo "beanstalkd to the reserve, RabbitMQ to the consumer's receipt. zlane-bench-latency's 2 workers"
    echo "run 4 jobs at a time each with 196 prefetched, a window of 200 like RabbitMQ's consumers"
    echo "(without prefetch, each of the 8 slots must turn over, its ack committed, within 1.6 ms at"
    echo "5000 jobs/s: with fsync that is at the edge of a 2-core VM, see issue 18, item 4)."
    echo
    echo "Commands (binaries in \`${ZLANE_BIN:-build/bin}\`, run from the repository root):"
    echo
    local c
    local rest
    for c in "${CMDS[@]}"; do
        rest=${c#*|}
        echo "- \`${rest%|*}\` ${rest##*|}"
    done
    echo
    echo "Raw output:"
    echo
    echo '```'
    local f
    for f in thr-none-1 thr-none-2 thr-fsync-1 thr-fsync-2 thr-none-prio thr-none-keys \
             thr-fsync-prio thr-fsync-keys $(for r in $LAT_RATES; do echo "lat-none-$r lat-fsync-$r floor-$r"; done) \
             mem-none mem-fsync bs-memory bs-nosync bs-binlog bs-fsync bs-mem \
             $(for r in $LAT_RATES; do echo "bs-lat-memory-$r bs-lat-fsync-$r"; done) \
             rmq-thr-transient rmq-thr-durable \
             $(for r in $LAT_RATES; do echo "rmq-lat-transient-$r rmq-lat-durable-$r"; done) \
             rmq-mem sched-full sched-inproc; do
        [ -s "$OUT/$f" ] && grep -v '^E: .*dangling' "$OUT/$f"
    done
    echo '```'
    echo "<!-- bench:end -->"
}

section >"$OUT/section.md"
echo
table
echo
floor_table
echo
sched_table
echo
model_table
echo
echo "make bench took $(( T_END - T_START )) s; section written to $RESULTS"
replace_section bench "$OUT/section.md" "$RESULTS"

# Optional: the Node.js client beside BullMQ on Redis (bench/node/bench.js,
# its own processes, bounded; results are hand-recorded in RESULTS.md's
# "The Node.js client (issue 14)"). Only when node and the client's npm
# dependencies are there; bullmq (npm ci in bench/node) and redis-server
# (apt-get, as root) are installed when missing. NODE_BENCH=0 skips it.
if [ "${NODE_BENCH:-1}" != 0 ] && command -v node >/dev/null && [ -d "$REPO/clients/node/node_modules" ]; then
    if [ ! -d "$HERE/node/node_modules/bullmq" ] && command -v npm >/dev/null; then
        (cd "$HERE/node" && npm ci --no-audit --no-fund >/dev/null 2>&1) || echo "npm ci in bench/node failed: BullMQ is skipped" >&2
    fi
    if ! command -v redis-server >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "installing redis-server (apt-get)..." >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null 2>&1 ||
            { apt-get update -qq >/dev/null 2>&1 &&
              DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null 2>&1; }
        systemctl disable --now redis-server >/dev/null 2>&1 || true   # the bench starts its own
    fi
    echo
    echo "The Node.js client beside BullMQ on Redis (bench/node/bench.js):"
    ZLANE_BIN="$BIN" node "$HERE/node/bench.js" --runs "$REPEAT" || echo "bench/node/bench.js failed" >&2
fi

# Optional: the dashboard at 10,000 tenants and 100,000 dead letters
# (bench/web_bench.js; results hand-recorded in RESULTS.md's "The web
# dashboard (issue 17)"). Only when node, chromium and web/node_modules
# (puppeteer-core; make test's set-up installs them) are there. WEB_BENCH=0
# skips it.
if [ "${WEB_BENCH:-1}" != 0 ] && command -v node >/dev/null && command -v chromium >/dev/null &&
   [ -d "$REPO/web/node_modules/puppeteer-core" ] && [ -d "$REPO/clients/node/node_modules" ]; then
    echo
    echo "The web dashboard at 10,000 tenants and 100,000 dead letters (bench/web_bench.js):"
    ZLANE_BIN_DIR="$BIN" timeout 900 node "$HERE/web_bench.js" --runs "$REPEAT" || echo "bench/web_bench.js failed" >&2
fi
