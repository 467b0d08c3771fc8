#!/usr/bin/env bash
# Run a command against a throwaway PostgreSQL server of its own:
#
#   bench/pg-run.sh CMD [ARGS...]
#
# initdb in a fresh temp dir, postgres on 127.0.0.1 and a free port (as the
# system user zlane-test when run as root: the server refuses root), fsync
# and synchronous_commit on, as in production; then CMD runs with
# ZLANE_BENCH_STORE (the store location for the benchmarks' brokers: see
# bench/benchbroker.h) and ZLANE_BENCH_PG (the same, for psql) set. The
# server is stopped by PID when CMD ends (or this script is interrupted)
# and the temp dir removed. $ZLANE_PG_BINDIR: where initdb and postgres are
# (the newest /usr/lib/postgresql/*/bin by default). $ZLANE_PG_SHARED_BUFFERS:
# shared_buffers (default 256MB).
set -euo pipefail

bindir=${ZLANE_PG_BINDIR:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}
[ -x "$bindir/initdb" ] || { echo "pg-run: no initdb (install postgresql-15)" >&2; exit 1; }
user=${ZLANE_PG_USER:-zlane-test}
dir=$(mktemp -d "${TMPDIR:-/tmp}/zlane-bench-pg-XXXXXX")
chmod 755 "$dir"
as_user=()
if [ "$(id -u)" -eq 0 ]; then
  id "$user" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$user"
  chown "$user" "$dir"
  as_user=(runuser -u "$user" --)
fi
pid=
cleanup() {
  # the postmaster's own pid (runuser's child), from its pid file
  local pm
  pm=$(head -1 "$dir/data/postmaster.pid" 2>/dev/null || true)
  if [ -n "$pm" ] && kill -0 "$pm" 2>/dev/null; then
    kill -INT "$pm" 2>/dev/null || true  # fast shutdown
    for _ in $(seq 1 100); do kill -0 "$pm" 2>/dev/null || break; sleep 0.1; done
  fi
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -INT "$pid" 2>/dev/null || true  # fast shutdown
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -rf "$dir"
}
trap cleanup EXIT INT TERM

port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"${as_user[@]}" "$bindir/initdb" -D "$dir/data" -U zlane --auth=trust -E UTF8 >/dev/null
cat >>"$dir/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
fsync = on
synchronous_commit = on
shared_buffers = ${ZLANE_PG_SHARED_BUFFERS:-256MB}
max_connections = 50
CONF
"${as_user[@]}" "$bindir/postgres" -D "$dir/data" >"$dir/postgres.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do
  "$bindir/pg_isready" -q -h 127.0.0.1 -p "$port" && break
  kill -0 "$pid" 2>/dev/null || { cat "$dir/postgres.log" >&2; exit 1; }
  sleep 0.1
done
"$bindir/psql" -q -h 127.0.0.1 -p "$port" -U zlane -d postgres -c "CREATE DATABASE zlane_bench"
export ZLANE_BENCH_PG="host=127.0.0.1 port=$port user=zlane dbname=zlane_bench"
export ZLANE_BENCH_STORE="$ZLANE_BENCH_PG"
export ZLANE_BENCH_PG_BINDIR="$bindir"
echo "pg-run: PostgreSQL $("$bindir/postgres" --version | awk '{print $3}') on 127.0.0.1:$port (fsync on, synchronous_commit on)"
"$@"
