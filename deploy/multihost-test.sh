#!/usr/bin/env bash
# zlane across four hosts: network namespaces for a broker host, two worker
# hosts and a producer host, each worker/producer host joined to the broker
# host by its own veth pair (10.203.N.0/24, private to these namespaces:
# nothing is routed out of them). The real programs run with CURVE on and
# heartbeat 200 ms x liveness 3 on the broker and the workers.
#
# While the jobs run, worker-1's link is cut for CUT_MS (3 s, far longer than
# the 600 ms liveness): the broker declares it dead and its jobs are
# redelivered to worker-2 (attempt >= 2). When the link returns, worker-1's
# late acks are refused by the lease fencing (err_stale_lease or
# err_unknown_job), it reconnects, and it takes jobs again. (The broker runs
# with --durability none: this is about the network, and fsync stalls on a
# busy CI disk would only blur the 600 ms liveness.)
#
#   deploy/multihost-test.sh [BIN_DIR]        (default: build/bin)
#
# Environment: JOBS (400), CUT_MS (3000), KEEP=1 keeps the work directory.
# Prints "lost = N, duplicates = M"; exits 1 if an accepted job was lost or a
# check failed. Needs root: it prints "SKIP: <why>" and exits 0 only where
# network namespaces cannot be created at all.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
bin=$(cd "${1:-$here/../build/bin}" 2>/dev/null && pwd) || {
  echo "multihost: no such bin directory: ${1:-$here/../build/bin}" >&2
  exit 2
}
jobs=${JOBS:-400}
cut_ms=${CUT_MS:-3000}
for b in zlane-broker zlane-worker zlane-submit zlane-ctl zlane-testhandler; do
  [ -x "$bin/$b" ] || { echo "multihost: $bin/$b is missing (build first)" >&2; exit 2; }
done
command -v ip >/dev/null || { echo "multihost: 'ip' not found (install iproute2)" >&2; exit 2; }

tag=zl$$                 # namespace prefix; veth names are "$tag<x>" (<= 15 chars)
ns_b=$tag-broker
ns_w1=$tag-w1
ns_w2=$tag-w2
ns_p=$tag-producer
namespaces=()
pids=()
work=$(mktemp -d "${TMPDIR:-/tmp}/zlane-multihost.XXXXXX")

# ---------------------------------------------------------------- cleanup
cleanup() {
  local rc=$?
  set +e
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  # anything still inside our namespaces (job handlers) was started by us
  for ns in "${namespaces[@]}"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
  done
  for ns in "${namespaces[@]}"; do ip netns del "$ns" 2>/dev/null; done
  if [ -n "${KEEP:-}" ]; then echo "multihost: kept $work"; else rm -rf "$work"; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

log() { echo "multihost: $*"; }
now_ms() { date +%s%3N; }
fail() {
  log "FAIL: $*"
  for f in broker w1.err w2.err producer.err; do
    [ -s "$work/$f" ] && { echo "---- last lines of $f"; tail -15 "$work/$f"; }
  done
  exit 1
}

# ---------------------------------------------------------------- hosts
# Namespaces left by an earlier run that was killed outright (SIGKILL, as on a
# CTest timeout, leaves no chance to clean up): ours by name, their pid gone.
for ns in $(ip netns list 2>/dev/null | awk '{ print $1 }'); do
  if [[ $ns =~ ^zl([0-9]+)-(broker|w1|w2|producer)$ ]] &&
     [[ ! $(ps -o stat= -p "${BASH_REMATCH[1]}" 2>/dev/null) =~ ^[^Z] ]]; then  # gone, or a zombie
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  fi
done
if ! err=$(ip netns add "$ns_b" 2>&1); then
  echo "SKIP: cannot create a network namespace ($err)"
  exit 0
fi
namespaces+=("$ns_b")
for ns in "$ns_w1" "$ns_w2" "$ns_p"; do
  ip netns add "$ns"
  namespaces+=("$ns")
done
for ns in "${namespaces[@]}"; do ip -n "$ns" link set lo up; done
# host N: veth "$tag"hN in the host, "$tag"bN in the broker host
n=0
for ns in "$ns_w1" "$ns_w2" "$ns_p"; do
  n=$((n + 1))
  ip link add "${tag}h$n" netns "$ns" type veth peer name "${tag}b$n" netns "$ns_b"
  ip -n "$ns_b" addr add "10.203.$n.1/24" dev "${tag}b$n"
  ip -n "$ns" addr add "10.203.$n.2/24" dev "${tag}h$n"
  ip -n "$ns_b" link set "${tag}b$n" up
  ip -n "$ns" link set "${tag}h$n" up
done
log "hosts: broker 10.203.{1,2,3}.1, worker-1 10.203.1.2, worker-2 10.203.2.2, producer 10.203.3.2"

# ---------------------------------------------------------------- keys
keys=$work/keys
mkdir -p "$work/clients"
ctl_keygen() { "$bin/zlane-ctl" keygen "$@" --dir "$keys" >/dev/null; }
ctl_keygen broker
ctl_keygen worker1 --role worker --lanes a
ctl_keygen worker2 --role worker --lanes a
ctl_keygen producer --role producer --tenants t1
ctl_keygen admin --role admin
for k in worker1 worker2 producer admin; do cp "$keys/$k" "$work/clients/"; done

# ---------------------------------------------------------------- programs
ip netns exec "$ns_b" "$bin/zlane-broker" --frontend 'tcp://*:5570' --backend 'tcp://*:5571' \
  --events 'tcp://*:5572' --admin 'tcp://*:5573' --ports-file "$work/ports" \
  --data "$work/data" --durability none --lane a --heartbeat 200ms --liveness 3 --lease 10s \
  --curve --cert "$keys/broker_secret" --clients "$work/clients" >"$work/broker" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/ports" ] && break; sleep 0.1; done
[ -s "$work/ports" ] || fail "the broker did not start"

ctl() {
  ip netns exec "$ns_b" "$bin/zlane-ctl" --admin tcp://127.0.0.1:5573 --timeout 3s \
    --curve-server "$keys/broker" --cert "$keys/admin_secret" "$@"
}
counter() { ctl stats --counter "$1" 2>/dev/null || echo -1; }
workers_now() { ctl --json stats 2>/dev/null | grep -o '"workers":[0-9]*' | cut -d: -f2 || true; }

start_worker() {  # N NAMESPACE
  local n=$1 ns=$2
  ip netns exec "$ns" "$bin/zlane-worker" --broker "tcp://10.203.$n.1:5571" \
    --curve-server "$keys/broker" --cert "$keys/worker${n}_secret" --lanes a \
    --concurrency 4 --heartbeat 200ms --liveness 3 --name "worker-$n" \
    --exec "$bin/zlane-testhandler --sleep 200 --log $work/w$n.log" \
    >"$work/w$n.out" 2>"$work/w$n.err" &
  pids+=($!)
}
start_worker 1 "$ns_w1"
start_worker 2 "$ns_w2"
: >"$work/w1.log"
: >"$work/w2.log"
for _ in $(seq 100); do [ "$(workers_now)" = 2 ] && break; sleep 0.1; done
[ "$(workers_now)" = 2 ] || fail "the workers did not join the broker over CURVE"

submitted=0
submit() {  # BATCH COUNT: jobs with keys BATCH-1..COUNT, ids appended to accepted
  seq 1 "$2" | ip netns exec "$ns_p" "$bin/zlane-submit" --broker tcp://10.203.3.1:5570 \
    --curve-server "$keys/broker" --cert "$keys/producer_secret" --tenant t1 --lane a \
    --lines --key-prefix "$1-" - >>"$work/accepted" 2>>"$work/producer.err" ||
    fail "the producer could not submit batch $1"
  submitted=$((submitted + $2))
}
progress() {  # prints: jobs ended on both workers, jobs running on worker-1
  awk 'FILENAME ~ /w1.log$/ && $1 == "start" { run++ }
       FILENAME ~ /w1.log$/ && $1 == "end" { run-- }
       $1 == "end" { ended++ }
       END { print ended + 0, run + 0 }' "$work/w1.log" "$work/w2.log"
}

# ---------------------------------------------------------------- run and cut
log "submitting $jobs jobs (CURVE on every link)"
submit first "$jobs"

# Cut worker-1's link near the end of the batch (40 jobs left), while it runs
# jobs: worker-2 alone then finishes the rest, the redelivered jobs (queued
# last) included, well within the cut (8 handlers x 200 ms: 40 jobs/s with
# both workers). On a machine too slow to catch that moment, another batch.
cut=0
for try in 1 2 3; do
  for _ in $(seq 3000); do
    read -r ended running < <(progress)
    if [ "$ended" -ge $((submitted - 40)) ] && [ "$running" -ge 1 ]; then cut=1; break; fi
    [ "$ended" -ge $((submitted - 8)) ] && break
    sleep 0.02
  done
  [ $cut = 1 ] && break
  [ "$try" = 3 ] && break
  log "worker-1 was idle near the end of the batch ($ended of $submitted done); one more batch"
  submit "again$try" 100
done
[ $cut = 1 ] || fail "could not catch worker-1 running jobs near the end of a batch"
ip -n "$ns_w1" link set "${tag}h1" down
t_cut=$(now_ms)
log "cut worker-1's link for $cut_ms ms (liveness is 600 ms)"
sleep "$(awk "BEGIN { print $cut_ms / 1000 }")"
ip -n "$ns_w1" link set "${tag}h1" up
t_back=$(now_ms)
dead=$(counter workers_dead)
log "link back after $((t_back - t_cut)) ms; broker counted $dead dead worker(s)"

# worker-1 reconnects by itself; then more work, which it must share
for _ in $(seq 300); do [ "$(workers_now)" = 2 ] && break; sleep 0.1; done
[ "$(workers_now)" = 2 ] || fail "worker-1 did not rejoin within 30 s of the link's return"
t_rejoin=$(now_ms)
log "worker-1 rejoined $((t_rejoin - t_back)) ms after the link returned"
submit second 100

# ---------------------------------------------------------------- wait for the end
n_accepted=$(grep -c '[0-9]' "$work/accepted" || true)
for _ in $(seq 600); do
  [ "$(counter jobs_acked)" -ge "$n_accepted" ] && break
  sleep 0.1
done
acked=$(counter jobs_acked)
stale=$(counter err_stale_lease)
unknown=$(counter err_unknown_job)
dead=$(counter workers_dead)
dlq=$(counter jobs_dead_lettered)

# ---------------------------------------------------------------- checks
# handler log lines: "start JOB ATTEMPT PID WALL_MS", "end JOB ATTEMPT PID WALL_MS EXIT"
awk '$1 == "end" && $6 == 0 { print $2 }' "$work/w1.log" "$work/w2.log" | sort -n >"$work/done"
sort -n -u "$work/done" >"$work/done.uniq"
grep '[0-9]' "$work/accepted" | sort -n -u >"$work/accepted.uniq"
lost=$(comm -23 "$work/accepted.uniq" "$work/done.uniq" | wc -l)
duplicates=$(($(wc -l <"$work/done") - $(wc -l <"$work/done.uniq")))
# jobs worker-1 was running when its link went down: their acks could not
# reach the broker, so each must run again on worker-2 with attempt >= 2
awk -v cut="$t_cut" '$1 == "start" && $5 < cut { s[$2] = 1 }
                     $1 == "end" && $5 < cut { delete s[$2] }
                     END { for (j in s) print j }' "$work/w1.log" | sort -n >"$work/cut_off"
awk '$1 == "start" && $3 >= 2 { print $2 }' "$work/w2.log" | sort -n -u >"$work/w2_retried"
awk '$1 == "start" && $3 >= 2 { print $2 }' "$work/w1.log" "$work/w2.log" | sort -n -u >"$work/retried"
n_cut_off=$(wc -l <"$work/cut_off")
not_redelivered=$(comm -23 "$work/cut_off" "$work/retried" | wc -l)
on_w2=$(comm -12 "$work/cut_off" "$work/w2_retried" | wc -l)
w1_after=$(awk -v t="$t_back" '$1 == "end" && $5 > t && $6 == 0' "$work/w1.log" | wc -l)
w2_total=$(grep -c '^end' "$work/w2.log" || true)
w1_total=$(grep -c '^end' "$work/w1.log" || true)

log "accepted $n_accepted, acked $acked, executions: worker-1 $w1_total, worker-2 $w2_total"
log "worker-1 was running $n_cut_off job(s) at the cut: $on_w2 re-ran on worker-2 with attempt >= 2, $((n_cut_off - not_redelivered - on_w2)) on worker-1 after it rejoined, $not_redelivered never"
log "broker: workers_dead $dead, err_stale_lease $stale, err_unknown_job $unknown, dead-lettered $dlq"
log "worker-1 finished $w1_after job(s) after the link returned"
echo "lost = $lost, duplicates = $duplicates"

status=0
check() {  # TEXT TEST-ARGS...
  if test "${@:2}"; then log "ok: $1"; else log "FAILED: $1"; status=1; fi
}
check "every job was accepted ($n_accepted)" "$n_accepted" -eq "$submitted"
check "no accepted job was lost" "$lost" -eq 0
check "the broker settled every job" "$acked" -ge "$n_accepted"
check "the broker declared worker-1 dead" "$dead" -ge 1
check "worker-1 was running jobs at the cut" "$n_cut_off" -ge 1
check "each of them ran again with attempt >= 2" "$not_redelivered" -eq 0
check "they were redelivered to worker-2" "$on_w2" -ge 1
check "worker-1's late acks were refused by fencing" $((stale + unknown)) -ge 1
check "worker-1 rejoined and ran jobs again" "$w1_after" -ge 1
check "nothing was dead-lettered" "$dlq" -eq 0
if [ $status -ne 0 ]; then
  comm -23 "$work/accepted.uniq" "$work/done.uniq" | head -5 | sed 's/^/  lost job: /'
  comm -23 "$work/cut_off" "$work/retried" | head -5 | sed 's/^/  not redelivered: /'
  fail "see above"
fi
log "passed"
