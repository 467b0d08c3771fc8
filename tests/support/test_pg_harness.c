/*  test_pg_harness: the PostgreSQL test harness (pg_harness.h) against a
    real server. A cluster starts, takes a transaction, runs with fsync and
    synchronous_commit on and listens on 127.0.0.1 only (not as root);
    after a SIGKILL of its postmaster new connections fail, and after a
    restart (crash recovery) the committed rows are there and the
    uncommitted one is not; a stop leaves no process, no zombie and no
    directory, and so does the cleanup the atexit hook runs, backends
    orphaned by a kill included. */
#define _GNU_SOURCE
#include "pg_harness.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define ROWS 100

static zlh_pg_t *s_pg; // the cluster under test, for the log on a failure

static int64_t
s_now_ms (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

// A process is gone once kill says so or it is a zombie (an orphaned
// backend whose new parent has not reaped it yet).
static bool
s_gone (pid_t pid)
{
    if (kill (pid, 0) < 0 && errno == ESRCH)
        return true;
    char path[64], st = 0;
    snprintf (path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen (path, "r");
    if (!f)
        return true;
    if (fscanf (f, "%*d %*s %c", &st) != 1)
        st = 0;
    fclose (f);
    return st == 'Z' || st == 'X';
}

// Return how many zombies the test process has as children (the harness
// reaps what it adopts).
static int
s_zombie_children (void)
{
    DIR *proc = opendir ("/proc");
    assert_non_null (proc);
    int n = 0;
    struct dirent *e;
    while ((e = readdir (proc))) {
        char path[300], buf[512];
        snprintf (path, sizeof path, "/proc/%s/stat", e->d_name);
        FILE *f = fopen (path, "r");
        if (!f)
            continue;
        size_t len = fread (buf, 1, sizeof buf - 1, f);
        fclose (f);
        buf[len] = '\0';
        const char *p = strrchr (buf, ')');
        char st;
        int ppid;
        if (p && sscanf (p + 1, " %c %d", &st, &ppid) == 2 && ppid == (int)getpid () && st == 'Z')
            n++;
    }
    closedir (proc);
    return n;
}

// Return true if the file at `path` holds `needle` (in its first 1 MiB).
static bool
s_file_has (const char *path, const char *needle)
{
    FILE *f = fopen (path, "r");
    if (!f)
        return false;
    size_t cap = 1 << 20;
    char *buf = malloc (cap + 1);
    assert_non_null (buf);
    size_t n = fread (buf, 1, cap, f);
    fclose (f);
    buf[n] = '\0';
    bool hit = strstr (buf, needle) != NULL;
    free (buf);
    return hit;
}

static bool
s_dir_exists (const char *path)
{
    struct stat st;
    return stat (path, &st) == 0;
}

// Run `sql`; fail the test (with the server's log) unless it returns
// `expect`. Returns the result (caller owns: PQclear).
static PGresult *
s_exec (PGconn *conn, const char *sql, ExecStatusType expect)
{
    PGresult *res = PQexec (conn, sql);
    if (PQresultStatus (res) != expect) {
        fprintf (stderr, "%s: %s", sql, PQerrorMessage (conn));
        zlh_pg_dump_log (s_pg, 4096);
        PQclear (res);
        fail_msg ("%s failed", sql);
    }
    return res;
}

static void
s_exec_ok (PGconn *conn, const char *sql)
{
    PQclear (s_exec (conn, sql, PGRES_COMMAND_OK));
}

// Return the one value `sql` selects, as a string (caller owns).
static char *
s_value (PGconn *conn, const char *sql)
{
    PGresult *res = s_exec (conn, sql, PGRES_TUPLES_OK);
    assert_int_equal (PQntuples (res), 1);
    assert_int_equal (PQnfields (res), 1);
    char *v = strdup (PQgetvalue (res, 0, 0));
    PQclear (res);
    return v;
}

static void
s_assert_value (PGconn *conn, const char *sql, const char *expect)
{
    char *v = s_value (conn, sql);
    if (strcmp (v, expect) != 0) {
        fprintf (stderr, "%s: got '%s', expected '%s'\n", sql, v, expect);
        free (v);
        fail ();
    }
    free (v);
}

// Every TCP socket listening on `port` is bound to 127.0.0.1 (and there is
// at least one): none on 0.0.0.0, none on IPv6.
static void
s_assert_listens_on_loopback_only (int port)
{
    int on_loopback = 0, elsewhere = 0;
    const char *files[] = {"/proc/net/tcp", "/proc/net/tcp6"};
    for (size_t f = 0; f < 2; f++) {
        FILE *in = fopen (files[f], "r");
        if (!in) {
            assert_int_equal (f, 1); // a kernel without IPv6 has no tcp6
            continue;
        }
        char line[512], addr[64];
        unsigned lport, state;
        while (fgets (line, sizeof line, in))
            if (sscanf (line, " %*d: %63[0-9A-Fa-f]:%x %*s %x", addr, &lport, &state) == 3 &&
                lport == (unsigned)port && state == 0x0A) { // TCP_LISTEN
                if (f == 0 && strcmp (addr, "0100007F") == 0)
                    on_loopback++;
                else {
                    fprintf (stderr, "%s: port %d also listens on %s\n", files[f], port, addr);
                    elsewhere++;
                }
            }
        fclose (in);
    }
    assert_int_equal (on_loopback, 1);
    assert_int_equal (elsewhere, 0);
}

// Run as root, the server runs as another user.
static void
s_assert_not_root (pid_t pid)
{
    if (geteuid () != 0)
        return;
    char path[64], line[256];
    snprintf (path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen (path, "r");
    assert_non_null (f);
    unsigned ruid = 0, euid = 0;
    bool seen = false;
    while (fgets (line, sizeof line, f))
        if (sscanf (line, "Uid: %u %u", &ruid, &euid) == 2) {
            seen = true;
            break;
        }
    fclose (f);
    assert_true (seen);
    assert_int_not_equal (ruid, 0);
    assert_int_not_equal (euid, 0);
}

// ---------------------------------------------------------------- tests
static void
test_start_kill_restart_stop (void **state)
{
    int64_t t0 = s_now_ms ();
    s_pg = zlh_pg_start ();
    assert_non_null (s_pg);
    fprintf (stderr, "test_pg_harness: cluster up on %s in %lld ms\n", zlh_pg_uri (s_pg),
             (long long)(s_now_ms () - t0));
    pid_t pid = zlh_pg_pid (s_pg);
    assert_true (pid > 0);
    assert_true (zlh_pg_port (s_pg) > 0);
    assert_true (s_dir_exists (zlh_pg_data_dir (s_pg)));
    assert_true (s_dir_exists (zlh_pg_log_path (s_pg)));
    s_assert_not_root (pid);

    PGconn *conn = zlh_pg_connect (s_pg);
    assert_non_null (conn);
    s_assert_value (conn, "SELECT current_database()", "zlane_test");
    s_assert_value (conn, "SHOW fsync", "on");
    s_assert_value (conn, "SHOW synchronous_commit", "on");
    s_assert_value (conn, "SHOW listen_addresses", "127.0.0.1");
    s_assert_value (conn, "SELECT host(inet_server_addr())", "127.0.0.1");
    s_assert_listens_on_loopback_only (zlh_pg_port (s_pg));

    // rows written and read back in one transaction
    s_exec_ok (conn, "CREATE TABLE jobs (id bigint PRIMARY KEY, payload text NOT NULL)");
    s_exec_ok (conn, "BEGIN");
    for (int i = 1; i <= ROWS; i++) {
        char id[16], payload[32];
        snprintf (id, sizeof id, "%d", i);
        snprintf (payload, sizeof payload, "job %d", i);
        const char *params[] = {id, payload};
        PGresult *res = PQexecParams (conn, "INSERT INTO jobs (id, payload) VALUES ($1, $2)", 2,
                                      NULL, params, NULL, NULL, 0);
        assert_int_equal (PQresultStatus (res), PGRES_COMMAND_OK);
        PQclear (res);
    }
    s_assert_value (conn, "SELECT count(*) FROM jobs", "100");
    s_assert_value (conn, "SELECT payload FROM jobs WHERE id = 42", "job 42");
    s_exec_ok (conn, "COMMIT");

    // a transaction still open when the server dies
    PGconn *open_tx = zlh_pg_connect (s_pg);
    assert_non_null (open_tx);
    s_exec_ok (open_tx, "BEGIN");
    s_exec_ok (open_tx, "INSERT INTO jobs (id, payload) VALUES (1000, 'uncommitted')");

    assert_int_equal (zlh_pg_kill (s_pg), 0);
    assert_int_equal (zlh_pg_pid (s_pg), -1);
    assert_true (s_gone (pid));
    assert_int_equal (zlh_pg_kill (s_pg), -1); // not running
    PGconn *refused = PQconnectdb (zlh_pg_conninfo (s_pg));
    assert_int_equal (PQstatus (refused), CONNECTION_BAD);
    PQfinish (refused);
    assert_int_equal (PQping (zlh_pg_conninfo (s_pg)), PQPING_NO_RESPONSE);
    PQfinish (open_tx);
    PQfinish (conn);

    t0 = s_now_ms ();
    assert_int_equal (zlh_pg_restart (s_pg), 0);
    fprintf (stderr, "test_pg_harness: restarted (crash recovery) in %lld ms\n",
             (long long)(s_now_ms () - t0));
    pid_t pid2 = zlh_pg_pid (s_pg);
    assert_true (pid2 > 0);
    assert_int_not_equal (pid2, pid);
    conn = zlh_pg_connect (s_pg);
    assert_non_null (conn);
    s_assert_value (conn, "SELECT count(*) FROM jobs", "100");
    s_assert_value (conn, "SELECT sum(id) FROM jobs", "5050");
    s_assert_value (conn, "SELECT count(*) FROM jobs WHERE id = 1000", "0");
    s_assert_value (conn, "SHOW synchronous_commit", "on");
    PQfinish (conn);
    // it was a crash to recover from, and the URI names the same database
    assert_true (s_file_has (zlh_pg_log_path (s_pg), "automatic recovery in progress"));
    conn = PQconnectdb (zlh_pg_uri (s_pg));
    assert_int_equal (PQstatus (conn), CONNECTION_OK);
    s_assert_value (conn, "SELECT count(*) FROM jobs", "100");
    PQfinish (conn);

    char *dir = strdup (zlh_pg_dir (s_pg));
    assert_int_equal (zlh_pg_stop (&s_pg), 0); // a clean fast shutdown
    assert_null (s_pg);
    assert_true (s_gone (pid2));
    if (!getenv ("ZLT_KEEP"))
        assert_false (s_dir_exists (dir));
    free (dir);
    assert_int_equal (s_zombie_children (), 0);
    assert_int_equal (zlh_pg_stop (&s_pg), 1); // NULL-safe
}

// What the atexit hook runs stops every cluster, and the backends a
// SIGKILLed postmaster left behind are gone before its directory is.
static void
test_cleanup_stops_everything (void **state)
{
    zlh_pg_t *a = zlh_pg_start ();
    assert_non_null (a);
    s_pg = a;
    PGconn *conn = zlh_pg_connect (a);
    assert_non_null (conn);
    char *v = s_value (conn, "SELECT pg_backend_pid()");
    pid_t backend = (pid_t)atoi (v);
    free (v);
    assert_true (backend > 0);
    pid_t postmaster = zlh_pg_pid (a);
    char *dir = strdup (zlh_pg_dir (a));

    assert_int_equal (zlh_pg_kill (a), 0); // the backend is orphaned
    zlh_pg_cleanup ();
    s_pg = NULL;
    assert_true (s_gone (postmaster));
    // the orphaned backend was adopted and reaped, not left a zombie
    assert_int_equal (kill (backend, 0), -1);
    assert_int_equal (errno, ESRCH);
    assert_int_equal (s_zombie_children (), 0);
    if (!getenv ("ZLT_KEEP"))
        assert_false (s_dir_exists (dir));
    free (dir);
    PQfinish (conn);
}

static int
s_teardown (void **state)
{
    s_pg = NULL;
    return zlh_pg_teardown (state);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown (test_start_kill_restart_stop, s_teardown),
        cmocka_unit_test_teardown (test_cleanup_stops_everything, s_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
