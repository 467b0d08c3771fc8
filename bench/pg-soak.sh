#!/usr/bin/env bash
# The PostgreSQL store under a long steady load, while another session
# holds a REPEATABLE READ snapshot open the whole time (what makes queues
# built from UPDATE and DELETE bloat: vacuum cannot remove the dead rows any
# snapshot may still see).
#
#   bench/pg-soak.sh [--seconds S] [--rate R] [--interval S]   (default 1800, 5000, 60)
#
# Runs under bench/pg-run.sh (a throwaway server, fsync and synchronous_commit
# on): a session opens the snapshot (BEGIN ISOLATION LEVEL REPEATABLE READ and
# a read, so that its xmin holds the horizon back) and keeps it while
# zlane-bench-soak runs a broker on the database (1 producer thread, 2 worker
# processes, 100-byte jobs, at R jobs/s). Every interval it prints the zlane
# tables' total size, their live and dead tuples (pg_stat_user_tables, after
# a pg_stat_force_next_flush), the log's partitions, and the age of the
# snapshot's xmin (so you can see it held); zlane-bench-soak prints the rate,
# the queue and the broker's RSS. At the end a summary: size and dead tuples
# at each quarter. Every process it started is stopped by PID.
set -euo pipefail
seconds=1800 rate=5000 interval=60
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2;;
    --rate) rate=$2; shift 2;;
    --interval) interval=$2; shift 2;;
    *) echo "usage: $0 [--seconds S] [--rate R] [--interval S]" >&2; exit 2;;
  esac
done
here=$(cd "$(dirname "$0")" && pwd)
bin=${ZLANE_BIN:-$here/../build/bin}

if [ -z "${ZLANE_BENCH_PG:-}" ]; then
  exec "$here/pg-run.sh" "$0" --seconds "$seconds" --rate "$rate" --interval "$interval"
fi
psql=("$ZLANE_BENCH_PG_BINDIR/psql" -X -q -At "$ZLANE_BENCH_PG")

# the snapshot holder: its transaction stays open (pg_sleep) for the run
"${psql[@]}" -c "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM pg_class;
                 SELECT pg_sleep($seconds + 600); COMMIT" >/dev/null 2>&1 &
holder=$!
soak=
cleanup() {
  [ -n "$soak" ] && kill "$soak" 2>/dev/null || true
  kill "$holder" 2>/dev/null || true
  "${psql[@]}" -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                   WHERE query LIKE '%pg_sleep%' AND pid <> pg_backend_pid()" >/dev/null 2>&1 || true
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

sample() {
  "${psql[@]}" -F ' ' -c "SELECT pg_stat_force_next_flush()" >/dev/null 2>&1 || true
  "${psql[@]}" -F ' ' -c "
    SELECT coalesce(sum(pg_total_relation_size(relid)), 0),
           coalesce(sum(n_live_tup), 0), coalesce(sum(n_dead_tup), 0),
           (SELECT count(*) FROM pg_inherits WHERE inhparent = 'zlane.log'::regclass),
           (SELECT coalesce(max(age(backend_xmin)), 0) FROM pg_stat_activity
             WHERE query LIKE '%pg_sleep%' AND pid <> pg_backend_pid())
      FROM pg_stat_user_tables WHERE schemaname = 'zlane'"
}

# the holder's snapshot is open before the load starts
for _ in $(seq 1 50); do
  held=$("${psql[@]}" -c "SELECT count(*) FROM pg_stat_activity WHERE backend_xmin IS NOT NULL
                          AND query LIKE '%pg_sleep%' AND pid <> pg_backend_pid()")
  [ "$held" = 1 ] && break
  sleep 0.1
done
[ "$held" = 1 ] || { echo "pg-soak: the snapshot holder did not start" >&2; exit 1; }
echo "pg-soak: a REPEATABLE READ snapshot is held open; ${seconds} s at ${rate} jobs/s"

"$bin/zlane-bench-soak" --seconds "$seconds" --rate "$rate" --interval "$interval" &
soak=$!
start=$(date +%s)
declare -a sizes deads
printf '%8s %12s %10s %10s %6s %10s\n' t_s zlane_MiB live dead parts xmin_age
while kill -0 "$soak" 2>/dev/null; do
  sleep "$interval" & wait $! || true
  kill -0 "$soak" 2>/dev/null || break
  read -r size live dead parts xage < <(sample)
  t=$(( $(date +%s) - start ))
  sizes+=("$size"); deads+=("$dead")
  printf '%8d %12.1f %10d %10d %6d %10d\n' "$t" "$(awk -v b="$size" 'BEGIN{print b/1048576}')" "$live" "$dead" "$parts" "$xage"
done
wait "$soak"; soak=
n=${#sizes[@]}
if [ "$n" -ge 4 ]; then
  printf 'summary: zlane tables (MiB) at the quarters:'
  for q in 1 2 3 4; do i=$(( q * n / 4 - 1 )); printf ' %.1f' "$(awk -v b="${sizes[$i]}" 'BEGIN{print b/1048576}')"; done
  printf '; dead tuples at the quarters:'
  for q in 1 2 3 4; do i=$(( q * n / 4 - 1 )); printf ' %d' "${deads[$i]}"; done
  printf '\n'
fi
