/*  pg_harness: a throwaway PostgreSQL cluster for tests, one per zlh_pg_t.

    zlh_pg_start runs initdb in a fresh temp dir, starts `postgres` on a
    free 127.0.0.1 port (listen_addresses = '127.0.0.1', the unix socket in
    the temp dir), waits for it to accept connections (PQping, bounded) and
    creates the database the connection string names. fsync and
    synchronous_commit are on; shared_buffers is small, max_connections 20;
    the server logs to <dir>/postgres.log. A random password (SCRAM) guards
    the superuser `zlane`, so other users of the machine cannot connect.

    Run as root, initdb and the server run as the system user `zlane-test`
    (created with useradd if missing; $ZLANE_PG_USER names another, e.g.
    nobody), because PostgreSQL refuses to run as root. The server binaries
    are those found at configure time; $ZLANE_PG_BINDIR overrides.

    Every server process is stopped by PID: by zlh_pg_stop, by zlh_pg_cleanup
    (a cmocka teardown), and at exit (atexit, not in a forked child) for any
    cluster still running; if the test process dies, the postmaster gets
    SIGQUIT (PR_SET_PDEATHSIG), so call zlh_pg_start from the main thread.
    The backends a zlh_pg_kill leaves running become the test process's
    children (it is a child subreaper for the moment of the kill) and are
    reaped here. Every wait is bounded and, but for PQping while the server
    starts, waits on pidfds (Linux >= 5.3). No cmocka here: failures are
    return values, their reasons printed to stderr. Not thread-safe.
    $ZLT_KEEP keeps the temp dirs. */
#ifndef ZL_PG_HARNESS_H
#define ZL_PG_HARNESS_H

#include <libpq-fe.h>

#include <stddef.h>
#include <sys/types.h>

typedef struct _zlh_pg_t zlh_pg_t;

/*  Create and start a cluster as described above (about 1.5 s). Returns it
    (registered for the atexit hook; caller owns, zlh_pg_stop frees), or NULL
    if any step failed (the reason and the logs' tails printed; nothing
    left running, the temp dir removed). */
zlh_pg_t *zlh_pg_start (void);

/*  Return the libpq connection string of the test database:
    "host=127.0.0.1 port=N dbname=zlane_test user=zlane password=… connect_timeout=5".
    The same across restarts. Borrowed. */
const char *zlh_pg_conninfo (zlh_pg_t *self);
/*  Return the same as a URI, "postgresql://zlane:…@127.0.0.1:N/zlane_test". Borrowed. */
const char *zlh_pg_uri (zlh_pg_t *self);
/*  Return the temp dir (holding data/, postgres.log, initdb.log and the
    unix socket). Borrowed. */
const char *zlh_pg_dir (zlh_pg_t *self);
/*  Return the data directory (<dir>/data). Borrowed. */
const char *zlh_pg_data_dir (zlh_pg_t *self);
/*  Return the server's log file (<dir>/postgres.log). Borrowed. */
const char *zlh_pg_log_path (zlh_pg_t *self);
/*  Return the TCP port on 127.0.0.1. */
int zlh_pg_port (zlh_pg_t *self);
/*  Return the postmaster's PID, or -1 while it is not running. */
pid_t zlh_pg_pid (zlh_pg_t *self);

/*  Connect to the test database. Returns the connection (caller owns:
    PQfinish), or NULL if it failed (libpq's message printed). */
PGconn *zlh_pg_connect (zlh_pg_t *self);

/*  SIGKILL the postmaster, as a crash would, and reap it. Its children (the
    backends) are left to notice and exit on their own, as they would after a
    real crash; zlh_pg_restart and zlh_pg_stop wait for them. Returns 0, or
    -1 if the server was not running. */
int zlh_pg_kill (zlh_pg_t *self);
/*  Start the server again on the same data dir and port: stop it first if
    it runs (fast shutdown), wait (at most 10 s, then SIGKILL) for every
    process still working in the data dir, start, and wait for connections
    (crash recovery included, at most 60 s). Returns 0, or -1 (the log's
    tail printed; zlh_pg_pid is then -1). */
int zlh_pg_restart (zlh_pg_t *self);

/*  Print the last `max_bytes` of the server's log to stderr, for a failing
    test. NULL-safe. */
void zlh_pg_dump_log (zlh_pg_t *self, size_t max_bytes);

/*  Stop the server by PID (SIGINT: fast shutdown; after 10 s SIGKILL), then
    any process left in its data dir, remove the temp dir, unregister and
    free; nulls the caller's pointer. Returns 0 if the server was running and
    shut down cleanly, 1 if it was not running, -1 if it had to be killed.
    NULL-safe (returns 1). */
int zlh_pg_stop (zlh_pg_t **self_p);

/*  Stop and free every cluster still registered, as zlh_pg_stop does (the
    caller's pointers to them dangle afterwards); what the atexit hook runs.
    Safe to call more than once. */
void zlh_pg_cleanup (void);
/*  A cmocka setup/teardown that calls zlh_pg_cleanup; returns 0. */
int zlh_pg_teardown (void **state);

#endif
