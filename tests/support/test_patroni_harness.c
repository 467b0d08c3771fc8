/*  test_patroni_harness: the Patroni harness (patroni_harness.h) against a
    real cluster. A cluster starts and becomes a primary with a synchronous
    standby, its servers not run as root, with fsync and synchronous_commit
    on. A writer thread commits rows one at a time through the multi-host
    connection string, counting those whose commit returned success; the
    primary's postmaster is SIGKILLed mid-stream and the writer reconnects
    until its writes succeed on the new primary. Every row whose commit
    succeeded is on the new primary (none lost), the write outage and the
    failover time are printed, and the old primary rejoins as the
    synchronous standby. A stop leaves none of the cluster's processes, no
    zombie and no directory; and if the test process dies without stopping
    its cluster, the cluster dies with it. */
#define _GNU_SOURCE
#include "patroni_harness.h"

#include "harness_util.h"

#include <libpq-fe.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define READY_MS 60000    // a new cluster: initdb, the standby's clone
#define FAILOVER_MS 30000 // the kill to the standby's promotion
#define REJOIN_MS 60000   // the old primary back as the synchronous standby
#define ROWS_BEFORE 200   // committed before the kill
#define ROWS_AFTER 100    // committed on the new primary before the writer stops
#define ROWS_MS 30000     // for either
#define WRITE_MS 5000     // an INSERT unanswered this long has failed
#define RETRY_MS 10       // between two connection attempts that failed
#define WRITER_MS 100000  // the writer's bound, whatever happens
#define MAX_PIDS 512

// ---------------------------------------------------------------- helpers
static int64_t
s_now_ms (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

// A process is gone once kill says so (a zombie is not: someone must reap it).
static bool
s_gone (pid_t pid)
{
    assert_true (pid > 0); // kill (-1 or 0, ...) would mean others
    return kill (pid, 0) < 0 && errno == ESRCH;
}

static bool
s_dir_exists (const char *path)
{
    struct stat st;
    return stat (path, &st) == 0;
}

// Return how many zombies the test process has as children.
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

// Run as root, the process runs as another user.
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

static PGresult *
s_exec (PGconn *conn, const char *sql, ExecStatusType expect)
{
    PGresult *res = PQexec (conn, sql);
    if (PQresultStatus (res) != expect) {
        fprintf (stderr, "%s: %s", sql, PQerrorMessage (conn));
        PQclear (res);
        fail_msg ("%s failed", sql);
    }
    return res;
}

static void
s_assert_value (PGconn *conn, const char *sql, const char *expect)
{
    PGresult *res = s_exec (conn, sql, PGRES_TUPLES_OK);
    assert_int_equal (PQntuples (res), 1);
    if (strcmp (PQgetvalue (res, 0, 0), expect) != 0) {
        fprintf (stderr, "%s: got '%s', expected '%s'\n", sql, PQgetvalue (res, 0, 0), expect);
        PQclear (res);
        fail ();
    }
    PQclear (res);
}

static PGconn *
s_connect (const char *conninfo)
{
    PGconn *conn = PQconnectdb (conninfo);
    if (PQstatus (conn) != CONNECTION_OK) {
        fprintf (stderr, "connect: %s", PQerrorMessage (conn));
        PQfinish (conn);
        fail_msg ("cannot connect");
    }
    return conn;
}

// ---------------------------------------------------------------- the writer
// A thread that INSERTs rows with ids 1, 2, ... one transaction each
// (autocommit) until told to stop, reconnecting through the multi-host
// connection string after any failure. No cmocka in it: what it saw is
// checked once it has been joined.
typedef struct {
    char conninfo[1024];
    pthread_t thread;
    bool running;
    pthread_mutex_t mutex;
    pthread_cond_t cond; // signalled on every commit
    bool stop;
    int64_t *committed; // the ids whose commit returned success, in order
    int *port;          // the port of the server that committed each
    size_t n_committed;
    size_t cap;
    int64_t *failed; // the ids whose INSERT failed: in doubt, they may or may not be there
    size_t n_failed;
    int64_t last_ok_ms;
    int64_t max_gap_ms; // the longest time between two commits: the write outage
    int connect_failures;
    int unreplicated; // warnings that a commit was local only (never expected)
} s_writer_t;

static s_writer_t s_writer;
static zlh_patroni_t *s_cluster;    // for the logs on a failure
static char s_orphan_dir[PATH_MAX]; // the temp dir of a cluster no stop removes

static void
s_on_notice (void *arg, const PGresult *res)
{
    s_writer_t *w = arg;
    const char *text = PQresultErrorMessage (res);
    if (strstr (text, "might not have been replicated"))
        w->unreplicated++; // this thread alone writes it until the join
}

// INSERT row `id`, within WRITE_MS. Returns the port of the server that
// committed it, or -1 if the INSERT failed (the connection is then unusable).
static int
s_insert (PGconn *conn, int64_t id)
{
    char idbuf[24];
    snprintf (idbuf, sizeof idbuf, "%lld", (long long)id);
    const char *params[] = {idbuf};
    if (!PQsendQueryParams (conn,
                            "INSERT INTO jobs (id, payload) VALUES ($1::bigint, 'job ' || $1) "
                            "RETURNING inet_server_port()",
                            1, NULL, params, NULL, NULL, 0))
        return -1;
    int64_t deadline = s_now_ms () + WRITE_MS;
    int port = -1;
    bool failed = false;
    for (;;) {
        while (PQisBusy (conn)) {
            int64_t left = deadline - s_now_ms ();
            struct pollfd pfd = {PQsocket (conn), POLLIN, 0};
            if (left <= 0 || poll (&pfd, 1, (int)left) < 0 || !PQconsumeInput (conn))
                return -1;
        }
        PGresult *res = PQgetResult (conn);
        if (!res)
            break;
        if (PQresultStatus (res) == PGRES_TUPLES_OK && PQntuples (res) == 1)
            port = atoi (PQgetvalue (res, 0, 0));
        else
            failed = true;
        PQclear (res);
    }
    return failed ? -1 : port;
}

static void *
s_writer_run (void *arg)
{
    s_writer_t *w = arg;
    PGconn *conn = NULL;
    int64_t deadline = s_now_ms () + WRITER_MS;
    for (int64_t id = 1; s_now_ms () < deadline; id++) {
        pthread_mutex_lock (&w->mutex);
        bool stop = w->stop;
        pthread_mutex_unlock (&w->mutex);
        if (stop)
            break;
        while (!conn && s_now_ms () < deadline) {
            conn = PQconnectdb (w->conninfo);
            if (PQstatus (conn) == CONNECTION_OK) {
                PQsetNoticeReceiver (conn, s_on_notice, w);
                break;
            }
            PQfinish (conn);
            conn = NULL;
            w->connect_failures++;
            poll (NULL, 0, RETRY_MS); // retry pacing, not synchronisation
        }
        if (!conn)
            break;
        int port = s_insert (conn, id);
        int64_t now = s_now_ms ();
        pthread_mutex_lock (&w->mutex);
        if (port > 0) {
            if (w->n_committed == w->cap) {
                w->cap = w->cap ? 2 * w->cap : 1024;
                w->committed = realloc (w->committed, w->cap * sizeof w->committed[0]);
                w->port = realloc (w->port, w->cap * sizeof w->port[0]);
                if (!w->committed || !w->port)
                    abort ();
            }
            w->committed[w->n_committed] = id;
            w->port[w->n_committed++] = port;
            if (w->last_ok_ms && now - w->last_ok_ms > w->max_gap_ms)
                w->max_gap_ms = now - w->last_ok_ms;
            w->last_ok_ms = now;
            pthread_cond_broadcast (&w->cond);
        } else {
            w->failed = realloc (w->failed, (w->n_failed + 1) * sizeof w->failed[0]);
            if (!w->failed)
                abort ();
            w->failed[w->n_failed++] = id;
        }
        pthread_mutex_unlock (&w->mutex);
        if (port <= 0) {
            PQfinish (conn);
            conn = NULL;
        }
    }
    PQfinish (conn);
    return NULL;
}

static void
s_writer_start (const char *conninfo)
{
    s_writer_t *w = &s_writer;
    snprintf (w->conninfo, sizeof w->conninfo, "%s", conninfo);
    pthread_mutex_init (&w->mutex, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init (&attr);
    pthread_condattr_setclock (&attr, CLOCK_MONOTONIC);
    pthread_cond_init (&w->cond, &attr);
    pthread_condattr_destroy (&attr);
    assert_int_equal (pthread_create (&w->thread, NULL, s_writer_run, w), 0);
    w->running = true;
}

// Wait (at most `timeout_ms`) until `rows` rows were committed on the
// server at `port`. Returns true if they were.
static bool
s_writer_wait (int port, size_t rows, int timeout_ms)
{
    s_writer_t *w = &s_writer;
    struct timespec until;
    clock_gettime (CLOCK_MONOTONIC, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
    if (until.tv_nsec >= 1000000000) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock (&w->mutex);
    size_t seen = 0, on_port = 0;
    int rc = 0;
    while (rc == 0) {
        for (; seen < w->n_committed; seen++)
            on_port += w->port[seen] == port;
        if (on_port >= rows)
            break;
        rc = pthread_cond_timedwait (&w->cond, &w->mutex, &until);
    }
    pthread_mutex_unlock (&w->mutex);
    return on_port >= rows;
}

static void
s_writer_stop (void)
{
    s_writer_t *w = &s_writer;
    if (!w->running)
        return;
    pthread_mutex_lock (&w->mutex);
    w->stop = true;
    pthread_mutex_unlock (&w->mutex);
    pthread_join (w->thread, NULL);
    pthread_cond_destroy (&w->cond);
    pthread_mutex_destroy (&w->mutex);
    w->running = false;
}

static void
s_writer_free (void)
{
    s_writer_stop ();
    free (s_writer.committed);
    free (s_writer.port);
    free (s_writer.failed);
    memset (&s_writer, 0, sizeof s_writer);
}

// ---------------------------------------------------------------- tests
static int
s_cmp_id (const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

// Add the cluster's live processes to `pids` (no duplicates).
static void
s_collect (zlh_patroni_t *cluster, pid_t *pids, size_t *n)
{
    pid_t now[MAX_PIDS];
    size_t got = zlh_patroni_processes (cluster, now, MAX_PIDS);
    assert_true (got <= MAX_PIDS);
    for (size_t i = 0; i < got; i++) {
        bool dup = false;
        for (size_t j = 0; j < *n && !dup; j++)
            dup = pids[j] == now[i];
        if (!dup && *n < MAX_PIDS)
            pids[(*n)++] = now[i];
    }
}

// Fail the test with the cluster's logs.
static void
s_fail_with_logs (const char *what)
{
    zlh_patroni_dump_logs (s_cluster, 8192);
    fail_msg ("%s: %s", what, s_cluster ? zlh_patroni_error (s_cluster) : "");
}

static void
test_failover_loses_no_commit (void **state)
{
    (void)state;
    int64_t t0 = s_now_ms ();
    char err[1024];
    s_cluster = zlh_patroni_start (err, sizeof err);
    if (!s_cluster)
        fail_msg ("zlh_patroni_start: %s", err);
    int64_t started_ms = s_now_ms () - t0;
    int primary = zlh_patroni_wait_ready (s_cluster, READY_MS);
    if (primary < 0)
        s_fail_with_logs ("zlh_patroni_wait_ready");
    int standby = 1 - primary;
    fprintf (stderr,
             "test_patroni_harness: started in %lld ms; n%d primary, n%d its synchronous standby "
             "%lld ms after the start (%s)\n",
             (long long)started_ms, primary, standby, (long long)(s_now_ms () - t0),
             zlh_patroni_dir (s_cluster));
    assert_int_equal (zlh_patroni_primary (s_cluster), primary);
    pid_t pids[MAX_PIDS];
    size_t n_pids = 0;
    s_collect (s_cluster, pids, &n_pids);
    for (int i = 0; i < ZLH_PATRONI_NODES; i++) {
        assert_true (zlh_patroni_postmaster_pid (s_cluster, i) > 0);
        s_assert_not_root (zlh_patroni_postmaster_pid (s_cluster, i));
        s_assert_not_root (zlh_patroni_agent_pid (s_cluster, i));
    }
    s_assert_not_root (zlh_patroni_etcd_pid (s_cluster));

    // the multi-host connection string reaches the primary, durably set up
    PGconn *conn = s_connect (zlh_patroni_conninfo (s_cluster));
    char port[16], sync_names[16];
    snprintf (port, sizeof port, "%d", zlh_patroni_port (s_cluster, primary));
    snprintf (sync_names, sizeof sync_names, "n%d", standby);
    s_assert_value (conn, "SELECT inet_server_port()", port);
    s_assert_value (conn, "SELECT pg_is_in_recovery()", "f");
    s_assert_value (conn, "SHOW fsync", "on");
    s_assert_value (conn, "SHOW synchronous_commit", "on");
    s_assert_value (conn, "SHOW synchronous_standby_names", sync_names);
    s_assert_value (conn, "SELECT host(inet_server_addr())", "127.0.0.1");
    PQclear (s_exec (conn, "CREATE TABLE jobs (id bigint PRIMARY KEY, payload text NOT NULL)",
                     PGRES_COMMAND_OK));
    PQfinish (conn);

    // rows committed one by one, and the primary's postmaster killed mid-stream
    int old_port = zlh_patroni_port (s_cluster, primary);
    int new_port = zlh_patroni_port (s_cluster, standby);
    s_writer_start (zlh_patroni_conninfo (s_cluster));
    if (!s_writer_wait (old_port, ROWS_BEFORE, ROWS_MS))
        s_fail_with_logs ("rows before the kill");
    s_collect (s_cluster, pids, &n_pids);
    int64_t kill_at = s_now_ms ();
    assert_int_equal (zlh_patroni_kill_primary (s_cluster), primary);
    int64_t failover_ms = zlh_patroni_wait_failover (s_cluster, FAILOVER_MS);
    if (failover_ms < 0)
        s_fail_with_logs ("zlh_patroni_wait_failover");
    if (!s_writer_wait (new_port, ROWS_AFTER, ROWS_MS))
        s_fail_with_logs ("rows on the new primary");
    s_writer_stop ();
    assert_int_equal (zlh_patroni_primary (s_cluster), standby);
    s_writer_t *w = &s_writer;
    size_t before = 0;
    while (before < w->n_committed && w->port[before] == old_port)
        before++;
    for (size_t i = before; i < w->n_committed; i++)
        assert_int_equal (w->port[i], new_port); // once moved, every commit is on the new primary
    fprintf (stderr,
             "test_patroni_harness: failover %lld ms (kill to n%d writable), write outage %lld ms "
             "(the longest gap between two commits); %zu rows committed on n%d, %zu on n%d, %zu "
             "in doubt (their INSERT failed), %d failed connection attempts; %lld ms since the "
             "kill\n",
             (long long)failover_ms, standby, (long long)w->max_gap_ms, before, primary,
             w->n_committed - before, standby, w->n_failed, w->connect_failures,
             (long long)(s_now_ms () - kill_at));
    assert_true (before >= ROWS_BEFORE);
    assert_int_equal (w->unreplicated, 0);

    // every row whose commit returned success is on the new primary
    conn = s_connect (zlh_patroni_conninfo (s_cluster));
    snprintf (port, sizeof port, "%d", new_port);
    s_assert_value (conn, "SELECT inet_server_port()", port);
    PGresult *res = s_exec (conn, "SELECT id FROM jobs ORDER BY id", PGRES_TUPLES_OK);
    size_t n_rows = (size_t)PQntuples (res);
    int64_t *rows = calloc (n_rows + 1, sizeof rows[0]);
    assert_non_null (rows);
    for (size_t i = 0; i < n_rows; i++)
        rows[i] = atoll (PQgetvalue (res, (int)i, 0));
    PQclear (res);
    PQfinish (conn);
    size_t lost = 0, doubt_present = 0;
    for (size_t i = 0; i < w->n_committed; i++)
        if (!bsearch (&w->committed[i], rows, n_rows, sizeof rows[0], s_cmp_id)) {
            fprintf (stderr, "test_patroni_harness: committed row %lld is lost\n",
                     (long long)w->committed[i]);
            lost++;
        }
    for (size_t i = 0; i < w->n_failed; i++)
        doubt_present += bsearch (&w->failed[i], rows, n_rows, sizeof rows[0], s_cmp_id) != NULL;
    free (rows);
    fprintf (stderr,
             "test_patroni_harness: %zu rows on n%d: %zu committed, lost %zu; %zu of the %zu in "
             "doubt are there\n",
             n_rows, standby, w->n_committed, lost, doubt_present, w->n_failed);
    assert_int_equal (lost, 0);
    assert_int_equal (n_rows, w->n_committed + doubt_present); // and nothing else

    // the old primary rejoins as the synchronous standby: another failover could follow
    int64_t t1 = s_now_ms ();
    if (zlh_patroni_wait_ready (s_cluster, REJOIN_MS) != standby)
        s_fail_with_logs ("the old primary rejoining");
    fprintf (stderr, "test_patroni_harness: n%d rejoined as the synchronous standby in %lld ms\n",
             primary, (long long)(s_now_ms () - t1));
    s_collect (s_cluster, pids, &n_pids);

    // a stop leaves nothing behind
    char *dir = strdup (zlh_patroni_dir (s_cluster));
    int64_t t2 = s_now_ms ();
    assert_int_equal (zlh_patroni_stop (&s_cluster), 0); // nothing had to be killed
    assert_null (s_cluster);
    fprintf (stderr,
             "test_patroni_harness: stopped in %lld ms; %zu processes seen, none left; %lld ms in "
             "all\n",
             (long long)(s_now_ms () - t2), n_pids, (long long)(s_now_ms () - t0));
    for (size_t i = 0; i < n_pids; i++)
        if (!s_gone (pids[i]))
            fail_msg ("pid %d outlived the stop", (int)pids[i]);
    assert_int_equal (s_zombie_children (), 0);
    if (!getenv ("ZLT_KEEP"))
        assert_false (s_dir_exists (dir));
    free (dir);
    assert_int_equal (zlh_patroni_stop (&s_cluster), 0); // NULL-safe
    s_writer_free ();
}

// Return true if any process works in `dir` or below.
static bool
s_any_under (const char *dir)
{
    DIR *proc = opendir ("/proc");
    assert_non_null (proc);
    bool any = false;
    struct dirent *e;
    size_t len = strlen (dir);
    while (!any && (e = readdir (proc))) {
        char link[300], cwd[PATH_MAX];
        snprintf (link, sizeof link, "/proc/%s/cwd", e->d_name);
        ssize_t n = readlink (link, cwd, sizeof cwd - 1);
        if (n <= 0)
            continue;
        cwd[n] = '\0';
        any = strncmp (cwd, dir, len) == 0 && (cwd[len] == '\0' || cwd[len] == '/');
    }
    closedir (proc);
    return any;
}

// A test that fails in the middle of a failover stops its cluster all the
// same, within the harness's bounds: a stop (what zlh_patroni_cleanup, the
// teardown and the atexit hook run) right after the kill.
static void
test_stop_in_the_middle_of_a_failover (void **state)
{
    (void)state;
    char err[1024];
    s_cluster = zlh_patroni_start (err, sizeof err);
    if (!s_cluster)
        fail_msg ("zlh_patroni_start: %s", err);
    if (zlh_patroni_wait_ready (s_cluster, READY_MS) < 0)
        s_fail_with_logs ("zlh_patroni_wait_ready");
    pid_t pids[MAX_PIDS];
    size_t n_pids = 0;
    s_collect (s_cluster, pids, &n_pids);
    char *dir = strdup (zlh_patroni_dir (s_cluster));
    assert_true (zlh_patroni_kill_primary (s_cluster) >= 0);
    s_collect (s_cluster, pids, &n_pids);
    int64_t t0 = s_now_ms ();
    int rc = zlh_patroni_stop (&s_cluster); // what zlh_patroni_cleanup runs for each cluster
    fprintf (stderr, "test_patroni_harness: stopped in the middle of a failover in %lld ms (%s)\n",
             (long long)(s_now_ms () - t0),
             rc == 0 ? "every process exited by itself" : "some had to be SIGKILLed");
    for (size_t i = 0; i < n_pids; i++)
        if (!s_gone (pids[i]))
            fail_msg ("pid %d outlived the cleanup", (int)pids[i]);
    assert_false (s_any_under (dir));
    assert_int_equal (s_zombie_children (), 0);
    if (!getenv ("ZLT_KEEP"))
        assert_false (s_dir_exists (dir));
    free (dir);
}

// A test process that dies without stopping its cluster (SIGKILL: no
// atexit, no teardown), here in the middle of a failover, takes the
// cluster with it: the keeper sees its socket close and kills everything. Here a forked child plays
// the test process; made a child subreaper, this process inherits the orphaned keeper and can reap
// it.
static void
test_cluster_dies_with_the_test_process (void **state)
{
    (void)state;
    int fds[2];
    assert_int_equal (pipe (fds), 0);
    assert_int_equal (prctl (PR_SET_CHILD_SUBREAPER, 1), 0);
    pid_t child = fork ();
    assert_true (child >= 0);
    if (child == 0) {
        close (fds[0]);
        char err[1024], msg[PATH_MAX + 64] = "";
        zlh_patroni_t *cluster = zlh_patroni_start (err, sizeof err);
        if (cluster && zlh_patroni_wait_ready (cluster, READY_MS) >= 0) {
            pid_t procs[MAX_PIDS];
            zlh_patroni_processes (cluster, procs, MAX_PIDS); // the keeper first
            snprintf (msg, sizeof msg, "%d %d %d %d %d %d %s", (int)procs[0],
                      (int)zlh_patroni_etcd_pid (cluster), (int)zlh_patroni_agent_pid (cluster, 0),
                      (int)zlh_patroni_agent_pid (cluster, 1),
                      (int)zlh_patroni_postmaster_pid (cluster, 0),
                      (int)zlh_patroni_postmaster_pid (cluster, 1), zlh_patroni_dir (cluster));
            if (zlh_patroni_kill_primary (cluster) < 0)
                msg[0] = '\0';
        }
        if (write (fds[1], msg, strlen (msg)) < 0)
            _exit (1);
        raise (SIGKILL);
    }
    close (fds[1]);
    char msg[PATH_MAX + 64];
    ssize_t n = read (fds[0], msg, sizeof msg - 1);
    close (fds[0]);
    assert_true (n > 0);
    msg[n] = '\0';
    int keeper, etcd, agent[2], postmaster[2];
    char *dir = s_orphan_dir;
    assert_int_equal (sscanf (msg, "%d %d %d %d %d %d %4095s", &keeper, &etcd, &agent[0], &agent[1],
                              &postmaster[0], &postmaster[1], dir),
                      7);
    int status;
    assert_int_equal (waitpid (child, &status, 0), child);
    assert_true (WIFSIGNALED (status));

    // the keeper, now ours, kills the cluster and exits
    int64_t t0 = s_now_ms ();
    assert_int_equal (waitpid (keeper, &status, 0), keeper);
    assert_int_equal (prctl (PR_SET_CHILD_SUBREAPER, 0), 0);
    fprintf (stderr, "test_patroni_harness: an orphaned cluster was gone %lld ms later\n",
             (long long)(s_now_ms () - t0));
    assert_true (WIFEXITED (status));
    assert_true (s_gone (etcd));
    for (int i = 0; i < ZLH_PATRONI_NODES; i++) {
        assert_true (s_gone (agent[i]));
        assert_true (s_gone (postmaster[i]));
    }
    assert_false (s_any_under (dir));
    assert_int_equal (s_zombie_children (), 0);
}

static int
s_teardown (void **state)
{
    s_writer_free (); // before the cluster it writes to
    s_cluster = NULL;
    prctl (PR_SET_CHILD_SUBREAPER, 0);
    if (s_orphan_dir[0] && !getenv ("ZLT_KEEP"))
        zlh_remove_tree (s_orphan_dir);
    s_orphan_dir[0] = '\0';
    return zlh_patroni_teardown (state);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown (test_failover_loses_no_commit, s_teardown),
        cmocka_unit_test_teardown (test_stop_in_the_middle_of_a_failover, s_teardown),
        cmocka_unit_test_teardown (test_cluster_dies_with_the_test_process, s_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
