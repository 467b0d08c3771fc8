/*  test_leader: brokers sharing one PostgreSQL database (a cluster of the
    test's own, tests/support/pg_harness), one leading, on real processes.

    (1) The standby answers NOT_LEADER naming the leader's endpoint for each
        socket, and Stats naming the leader; a client given "standby,leader"
        follows it.
    (2) The leader SIGKILLed 10 times under load (a zlane-submit and two
        zlane-workers given both brokers), the killed one restarted each time
        as the new standby: every job the producer was told Accepted runs,
        nothing nobody submitted runs; duplicates and every takeover time
        (kill -> first job the new leader accepts) printed.
    (3) A zombie leader: SIGSTOPped past its lease, the standby takes over;
        SIGCONT: the old leader commits nothing (the database's rows do not
        move while it wakes, the new leader held still) and sends nothing
        that promises a state change (its wire dump); lost = 0.
    (4) The database unreachable at start: the broker starts, refuses with
        UNAVAILABLE (Stats: unreachable), and serves once the database is up.
    (5) The database SIGKILLed mid-run and restarted: the broker refuses
        meanwhile and serves again; nothing accepted is lost.
    (6) The database's own failover: two PostgreSQL nodes under Patroni in
        synchronous mode with one etcd (tests/support/patroni_harness), the
        broker given both hosts (target_session_attrs=read-write); the
        primary's postmaster SIGKILLed under load: Patroni promotes the
        standby, the broker dials it and serves; lost = 0, the write outage
        (kill -> first job accepted again) printed.
    (7) A commit held up (a lock the test takes on the log): the broker's
        loop answers Stats meanwhile, the producer hears nothing until it is
        released, then Accepted; the job is in the database.
    (8) A foreign schema "zlane", or a zlane store of a newer version: the
        broker refuses to start (exit 1) saying why, touching nothing.
    Every wait is bounded and waits for an event (a file's inotify, a
    process's pidfd, a reply) or polls Stats every 20 ms. */
#define _GNU_SOURCE
#include "patroni_harness.h"
#include "pg_harness.h"
#include "zltest.h"

#include <errno.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#define KILLS 10          // leaders SIGKILLed in (2)
#define CHUNK 300         // jobs fed to the producer between two kills
#define TAKEOVER_MS 30000 // the most a takeover may take here (ASan, a loaded machine)
#define RUN_MS 400000     // a whole scenario's producer phase
#define DRAIN_MS 120000

// ---------------------------------------------------------------- brokers
// Start a broker on lane a, on the test database, with 200 ms heartbeats
// and `extra` flags (NULL-terminated, may be NULL).
static zlt_broker_t *
s_broker (zlh_pg_t *pg, const char *const *extra)
{
    const char *args[24] = {"--store", zlh_pg_conninfo (pg), "--lane", "a", "--heartbeat", "200ms"};
    size_t n = 6;
    for (size_t i = 0; extra && extra[i] && n < 23; i++)
        args[n++] = extra[i];
    args[n] = NULL;
    return zlt_broker_start (args);
}

// What the tests read from a broker's Stats (copied: the reply is borrowed).
typedef struct {
    char role[16];
    char leader[128];
    uint64_t epoch, takeovers, fenced, accepted, not_leader, unavailable, commits;
    bool reachable;
} info_t;

// The Stats of the broker whose admin socket is `admin`, into `out`.
// Returns 0, or -1 if it did not answer within `timeout_ms`.
static int
s_info (const char *admin, info_t *out, int timeout_ms)
{
    zlt_client_t *c = zlt_client_new (ZMQ_DEALER, admin);
    assert_non_null (c);
    zl_stats_t st;
    int rc = zlt_stats (c, &st, timeout_ms);
    if (rc == 0) {
        memset (out, 0, sizeof *out);
        snprintf (out->role, sizeof out->role, "%s", st.role);
        snprintf (out->leader, sizeof out->leader, "%s", st.leader);
        out->epoch = st.epoch;
        out->takeovers = st.takeovers;
        out->fenced = st.fenced;
        out->reachable = st.store_reachable;
        zlt_stats_counter (&st, "jobs_accepted", &out->accepted);
        zlt_stats_counter (&st, "err_not_leader", &out->not_leader);
        zlt_stats_counter (&st, "err_unavailable", &out->unavailable);
        zlt_stats_counter (&st, "store_commits", &out->commits);
    }
    zlt_client_destroy (&c);
    return rc;
}

// Wait until the broker at `admin` says it is `role` (asked every 20 ms).
// Returns the time it took, or fails the test after `timeout_ms`.
static int64_t
s_wait_role (const char *admin, const char *role, int timeout_ms)
{
    int64_t t0 = zlt_now_ms (), deadline = t0 + timeout_ms;
    info_t in = {.role = "(no answer)"};
    while (zlt_now_ms () < deadline) {
        if (s_info (admin, &in, 1000) == 0 && !strcmp (in.role, role))
            return zlt_now_ms () - t0;
        poll (NULL, 0, 20);
    }
    fail_msg ("the broker at %s is %s, not %s, after %d ms", admin, in.role, role, timeout_ms);
    return -1;
}

// Wait until the broker at `admin` accepted more than `than` jobs in all;
// returns the time it took, or -1 after `timeout_ms`.
static int64_t
s_wait_accepted (const char *admin, uint64_t than, int timeout_ms)
{
    int64_t t0 = zlt_now_ms (), deadline = t0 + timeout_ms;
    info_t in;
    while (zlt_now_ms () < deadline) {
        if (s_info (admin, &in, 1000) == 0 && in.accepted > than)
            return zlt_now_ms () - t0;
        poll (NULL, 0, 20);
    }
    return -1;
}

// Return "<first>,<second>" (caller frees).
static char *
s_list (const char *first, const char *second)
{
    char *list;
    assert_true (asprintf (&list, "%s,%s", first, second) > 0);
    return list;
}

// Block until process `pid` (the test's child) is stopped by a signal; the
// stop stays to be seen (WNOWAIT).
static void
s_wait_stopped (pid_t pid)
{
    siginfo_t si;
    int rc;
    do
        rc = waitid (P_PID, (id_t)pid, &si, WSTOPPED | WNOWAIT);
    while (rc != 0 && errno == EINTR);
    assert_int_equal (rc, 0);
    assert_int_equal (si.si_code, CLD_STOPPED);
}

// ---------------------------------------------------------------- load
// One zlane-submit reading job lines from a FIFO the test feeds, and two
// zlane-workers recording each execution, all given the same broker lists.
typedef struct {
    const char *dir;
    char *in, *out, *err, *record;
    int feed, fed;
    zlt_proc_t *submit;
    zlt_proc_t *workers[2];
    char *worker_err[2];
} load_t;

static void
s_load_start (load_t *l, const char *dir, const char *frontends, const char *backends)
{
    memset (l, 0, sizeof *l);
    l->dir = dir;
    l->record = zlt_path (dir, "record");
    for (int w = 0; w < 2; w++) {
        char name[32];
        snprintf (name, sizeof name, "worker%d", w + 1);
        l->workers[w] = zlt_worker_spawn (dir, name, backends, l->record, &l->worker_err[w]);
    }
    l->in = zlt_path (dir, "submit.fifo");
    l->out = zlt_path (dir, "submit.out");
    l->err = zlt_path (dir, "submit.err");
    assert_int_equal (mkfifo (l->in, 0600), 0);
    l->feed = open (l->in, O_RDWR | O_CLOEXEC | O_NONBLOCK); // EOF once closed
    assert_true (l->feed >= 0);
    assert_true (fcntl (l->feed, F_SETPIPE_SZ, 4096) >= 4096);
    char *bin = zlt_bin ("zlane-submit");
    const char *argv[] = {bin,         "--broker", frontends, "--tenant", "t",
                          "--lane",    "a",        "--lines", "--file",   l->in,
                          "--timeout", "300s",     "--json",  "-v",       NULL};
    l->submit = zlt_spawn (argv, NULL, l->out, l->err);
    assert_non_null (l->submit);
    free (bin);
}

// Feed `n` jobs and wait until the producer was told `printed_more` more
// of them Accepted: a broker serves it.
static void
s_load_step (load_t *l, int n, size_t printed_more, int64_t deadline)
{
    size_t want = zlt_count_lines (l->out) + printed_more;
    zlt_fifo_feed (l->feed, &l->fed, n, deadline);
    zlt_wait_printed (l->out, want, l->submit, l->err, deadline);
}

// The producer's input ends; it must finish with every job accepted, and
// each printed id must run at least once (drained by `deadline`), nothing
// else. Prints what happened under `label`; fails on a lost or foreign job.
static void
s_load_finish (load_t *l, const char *label, int64_t deadline)
{
    close (l->feed);
    l->feed = -1;
    int64_t left = deadline - zlt_now_ms ();
    if (zlt_proc_wait (l->submit, left > 0 ? (int)left : 0) != 0 ||
        zlt_proc_exit_code (l->submit) != 0) {
        zlt_dump_file ("zlane-submit stderr", l->err, 4000);
        fail_msg ("%s: zlane-submit did not finish with every job accepted (exit %d)", label,
                  zlt_proc_exit_code (l->submit));
    }
    size_t cap = (size_t)l->fed + 1;
    uint64_t *ids = calloc (cap, sizeof *ids);
    unsigned *runs = calloc (cap, sizeof *runs);
    assert_non_null (ids);
    assert_non_null (runs);
    char *text = zlt_read_file (l->out, NULL);
    assert_non_null (text);
    size_t said_dup = 0;
    size_t n = zlt_ids_parse_json (text, ids, cap, l->out, &said_dup);
    free (text);
    assert_int_equal (n, (size_t)l->fed);
    zlt_ids_sort (ids, n);
    for (size_t i = 1; i < n; i++)
        if (ids[i] == ids[i - 1])
            fail_msg ("%s: job id %" PRIu64 " printed for two lines", label, ids[i]);
    zlt_tally_t t;
    int64_t drain = zlt_now_ms () + DRAIN_MS;
    while (zlt_tally (l->record, ids, n, runs, &t), t.lost && zlt_now_ms () < drain)
        poll (NULL, 0, 50);
    size_t moves = zlt_count_in_file (l->err, "leaving broker at ");
    fprintf (stderr,
             "%s: lost = %zu, duplicate executions = %zu, foreign = %zu; %zu jobs accepted, %zu "
             "executions; the producer left a broker %zu times\n",
             label, t.lost, t.duplicates, t.foreign, n, t.lines, moves);
    if (t.lost || t.foreign) {
        for (size_t i = 0; i < n; i++)
            if (!runs[i]) {
                fprintf (stderr, "%s: job %" PRIu64 " never ran\n", label, ids[i]);
                break;
            }
        for (int w = 0; w < 2; w++)
            zlt_dump_file ("zlane-worker stderr", l->worker_err[w], 2000);
        zlt_dump_file ("zlane-submit stderr", l->err, 2000);
    }
    assert_int_equal (t.lost, 0);
    assert_int_equal (t.foreign, 0);
    free (ids);
    free (runs);
}

static void
s_load_free (load_t *l)
{
    for (int w = 0; w < 2; w++) {
        zlt_proc_signal (l->workers[w], SIGTERM);
        assert_int_equal (zlt_proc_wait (l->workers[w], 15000), 0);
        zlt_proc_destroy (&l->workers[w]);
        zlt_assert_no_sanitizer_report ("zlane-worker stderr", l->worker_err[w]);
        free (l->worker_err[w]);
    }
    zlt_assert_no_sanitizer_report ("zlane-submit stderr", l->err);
    zlt_proc_destroy (&l->submit);
    if (l->feed >= 0)
        close (l->feed);
    free (l->in);
    free (l->out);
    free (l->err);
    free (l->record);
}

static void
s_assert_clean (zlt_broker_t *b, const char *name)
{
    char *err = zlt_path (zlt_broker_dir (b), "broker.err");
    zlt_assert_no_sanitizer_report (name, err);
    free (err);
}

// ---------------------------------------------------------------- 1. the standby
static void
test_standby_names_the_leader (void **state)
{
    (void)state;
    zlh_pg_t *pg = zlh_pg_start ();
    assert_non_null (pg);
    zlt_broker_t *a = s_broker (pg, NULL);
    assert_non_null (a);
    s_wait_role (zlt_broker_endpoint (a, "admin"), "leader", 10000);
    zlt_broker_t *b = s_broker (pg, NULL);
    assert_non_null (b);
    info_t ia, ib;
    assert_int_equal (s_info (zlt_broker_endpoint (a, "admin"), &ia, 5000), 0);
    s_wait_role (zlt_broker_endpoint (b, "admin"), "standby", 10000);
    assert_int_equal (s_info (zlt_broker_endpoint (b, "admin"), &ib, 5000), 0);
    assert_string_equal (ib.leader, ia.leader); // A's name, host:pid
    assert_int_equal (ib.epoch, ia.epoch);
    assert_true (ib.reachable);
    assert_int_equal (ia.takeovers, 1);

    // each socket of the standby names the leader's socket of the same kind
    static const struct {
        const char *sock;
        zl_msg_kind_t kind;
    } asks[] = {
        {"frontend", ZL_MSG_HELLO}, {"backend", ZL_MSG_READY}, {"admin", ZL_MSG_ADMIN_REQUEST}};
    for (size_t i = 0; i < sizeof asks / sizeof asks[0]; i++) {
        zlt_client_t *c = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (b, asks[i].sock));
        assert_non_null (c);
        zl_msg_t m = {.kind = asks[i].kind};
        static const char *lanes[] = {"a"};
        if (asks[i].kind == ZL_MSG_HELLO)
            m.u.hello.client = "test-leader";
        else if (asks[i].kind == ZL_MSG_READY)
            m.u.ready = (zl_ready_t){"w", 1, lanes, 1, 42};
        else {
            m.u.admin_request.op = ZL_ADMIN_DLQ_LIST;
            m.u.admin_request.filter = (zl_dlq_filter_t){.lane = "", .tenant = "", .all = true};
            m.u.admin_request.lane = "";
        }
        assert_int_equal (zlt_client_send (c, &m), 0);
        zl_msg_t reply;
        assert_int_equal (zlt_client_recv (c, &reply, 5000), 0);
        assert_int_equal (reply.kind, ZL_MSG_ERROR);
        assert_int_equal (reply.u.error.code, ZL_ERR_NOT_LEADER);
        assert_int_equal (reply.u.error.n_leader_endpoints, 1);
        assert_string_equal (reply.u.error.leader_endpoints[0],
                             zlt_broker_endpoint (a, asks[i].sock));
        zlt_client_destroy (&c);
    }
    assert_int_equal (s_info (zlt_broker_endpoint (b, "admin"), &ib, 5000), 0);
    assert_int_equal (ib.not_leader, 3);
    assert_int_equal (ib.commits, 0);

    // a producer given "standby,leader" follows the standby's answer
    char *frontends =
        s_list (zlt_broker_endpoint (b, "frontend"), zlt_broker_endpoint (a, "frontend"));
    char *out = zlt_path (zlt_broker_dir (b), "one.out"),
         *err = zlt_path (zlt_broker_dir (b), "one.err");
    char *bin = zlt_bin ("zlane-submit");
    const char *argv[] = {bin, "--broker",  frontends, "--tenant", "t",       "--lane",
                          "a", "--timeout", "30s",     "-v",       "one job", NULL};
    if (zlt_run (argv, NULL, out, err, 60000) != 0) {
        zlt_dump_file ("zlane-submit stderr", err, 3000);
        fail_msg ("zlane-submit over '%s' failed", frontends);
    }
    assert_true (zlt_count_in_file (err, "not the leader") >= 1);
    assert_int_equal (s_info (zlt_broker_endpoint (a, "admin"), &ia, 5000), 0);
    assert_int_equal (ia.accepted, 1);
    assert_int_equal (zlt_broker_stop (b, 10000), 0);
    assert_int_equal (zlt_broker_stop (a, 10000), 0);
    s_assert_clean (a, "zlane-broker A stderr");
    s_assert_clean (b, "zlane-broker B stderr");
    free (bin);
    free (out);
    free (err);
    free (frontends);
    zlh_pg_stop (&pg);
}

// ---------------------------------------------------------------- 2. kill the leader
static int
s_cmp_ms (const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return a < b ? -1 : a > b;
}

static void
test_kill_the_leader_ten_times (void **state)
{
    (void)state;
    int64_t t0 = zlt_now_ms (), deadline = t0 + RUN_MS;
    zlh_pg_t *pg = zlh_pg_start ();
    assert_non_null (pg);
    zlt_broker_t *b[2];
    b[0] = s_broker (pg, NULL); // the default lease
    assert_non_null (b[0]);
    s_wait_role (zlt_broker_endpoint (b[0], "admin"), "leader", 10000);
    b[1] = s_broker (pg, NULL);
    assert_non_null (b[1]);
    s_wait_role (zlt_broker_endpoint (b[1], "admin"), "standby", 10000);
    char *frontends =
        s_list (zlt_broker_endpoint (b[0], "frontend"), zlt_broker_endpoint (b[1], "frontend"));
    char *backends =
        s_list (zlt_broker_endpoint (b[0], "backend"), zlt_broker_endpoint (b[1], "backend"));
    load_t l;
    s_load_start (&l, zlt_broker_dir (b[0]), frontends, backends);

    int64_t takeover[KILLS];
    int leader = 0;
    for (int k = 0; k < KILLS; k++) {
        s_load_step (&l, CHUNK, CHUNK / 4, deadline); // the leader serves
        int standby = 1 - leader;
        const char *standby_admin = zlt_broker_endpoint (b[standby], "admin");
        info_t before;
        assert_int_equal (s_info (standby_admin, &before, 5000), 0);
        assert_string_equal (before.role, "standby");
        zlt_fifo_feed (l.feed, &l.fed, CHUNK, deadline); // on their way when it dies
        int64_t t_kill = zlt_now_ms ();
        assert_int_equal (zlt_broker_kill (b[leader]), 0);
        zlt_fifo_feed (l.feed, &l.fed, CHUNK / 10, deadline); // only the next leader can take
        s_wait_role (standby_admin, "leader", TAKEOVER_MS);
        int64_t leads = zlt_now_ms () - t_kill; // (to within the 20 ms of a Stats poll)
        takeover[k] = s_wait_accepted (standby_admin, before.accepted, TAKEOVER_MS);
        if (takeover[k] >= 0)
            takeover[k] = zlt_now_ms () - t_kill;
        if (takeover[k] < 0) {
            zlt_broker_dump (b[standby], 4000);
            zlt_dump_file ("zlane-submit stderr", l.err, 3000);
            fail_msg ("kill %d: the standby accepted nothing within %d ms", k + 1, TAKEOVER_MS);
        }
        info_t now;
        assert_int_equal (s_info (standby_admin, &now, 5000), 0);
        assert_string_equal (now.role, "leader");
        assert_true (now.epoch > before.epoch);
        fprintf (stderr,
                 "kill %d: takeover in %" PRId64
                 " ms (kill -> the first job the new leader accepted; it led within %" PRId64
                 " ms), epoch %" PRIu64 "\n",
                 k + 1, takeover[k], leads, now.epoch);
        // the killed one comes back on its ports, as the new standby
        assert_int_equal (zlt_broker_restart (b[leader], 20000), 0);
        s_wait_role (zlt_broker_endpoint (b[leader], "admin"), "standby", 10000);
        leader = standby;
    }
    s_load_step (&l, CHUNK, CHUNK / 4, deadline);
    s_load_finish (&l, "kill the leader", deadline);

    int64_t sorted[KILLS];
    memcpy (sorted, takeover, sizeof sorted);
    qsort (sorted, KILLS, sizeof sorted[0], s_cmp_ms);
    fprintf (stderr,
             "kill the leader: %d takeovers (default 2 s lease): min %" PRId64
             " ms, median %" PRId64 " ms, max %" PRId64 " ms; run in %" PRId64 " ms\n",
             KILLS, sorted[0], sorted[KILLS / 2], sorted[KILLS - 1], zlt_now_ms () - t0);
    s_load_free (&l);
    for (int i = 0; i < 2; i++) {
        assert_int_equal (zlt_broker_stop (b[i], 10000), 0);
        s_assert_clean (b[i], "zlane-broker stderr");
    }
    free (frontends);
    free (backends);
    zlh_pg_stop (&pg);
}

// ---------------------------------------------------------------- 3. a zombie leader
// Rows in zlane's tables (every commit appends some), after any commit in
// flight has ended: the lease row is locked FOR SHARE by each commit, so a
// FOR UPDATE of it waits for the one in progress.
static long
s_rows (PGconn *db)
{
    PGresult *r = PQexec (db, "BEGIN; SELECT 1 FROM zlane.leader FOR UPDATE");
    assert_int_equal (PQresultStatus (r), PGRES_TUPLES_OK);
    PQclear (r);
    r = PQexec (db, "SELECT (SELECT count(*) FROM zlane.log) + (SELECT count(*) FROM "
                    "zlane.idem_resend) + (SELECT count(*) FROM zlane.idem_user)");
    assert_int_equal (PQresultStatus (r), PGRES_TUPLES_OK);
    long n = strtol (PQgetvalue (r, 0, 0), NULL, 10);
    PQclear (r);
    r = PQexec (db, "ROLLBACK");
    PQclear (r);
    return n;
}

// What a broker sent, read from its wire dump (4-byte little-endian length,
// then the Envelope) from byte `from` on: the frames, those that promise a
// state change (Accepted, Credit, Dispatch, Settled, DeadLetter, Rejected
// for another reason than UNAVAILABLE), and those of them sent after the
// first frame that shows it no longer leads (an Error NOT_LEADER or
// UNAVAILABLE, or Stats with another role).
typedef struct {
    size_t frames, promises, promises_after, errors;
    bool deposed; // a frame showed it
} sent_t;

static sent_t
s_sent (const char *path, size_t from)
{
    size_t len;
    char *data = zlt_read_file (path, &len);
    assert_non_null (data);
    zl_codec_t *codec = zl_codec_new ();
    sent_t out = {0};
    for (size_t at = from; at + 4 <= len;) {
        const uint8_t *p = (const uint8_t *)data + at;
        size_t size = (size_t)p[0] | (size_t)p[1] << 8 | (size_t)p[2] << 16 | (size_t)p[3] << 24;
        if (at + 4 + size > len)
            break; // a record being written
        zl_msg_t m;
        assert_int_equal (zl_codec_decode (codec, p + 4, size, &m), ZL_DECODE_OK);
        bool promise = m.kind == ZL_MSG_ACCEPTED || m.kind == ZL_MSG_CREDIT ||
                       m.kind == ZL_MSG_DISPATCH || m.kind == ZL_MSG_SETTLED ||
                       m.kind == ZL_MSG_DEAD_LETTER ||
                       (m.kind == ZL_MSG_REJECTED &&
                        (!m.u.rejected.n || m.u.rejected.jobs[0].code != ZL_REJECT_UNAVAILABLE));
        out.frames++;
        out.promises += promise;
        out.promises_after += promise && out.deposed;
        out.errors += m.kind == ZL_MSG_ERROR;
        if ((m.kind == ZL_MSG_ERROR &&
             (m.u.error.code == ZL_ERR_NOT_LEADER || m.u.error.code == ZL_ERR_UNAVAILABLE)) ||
            (m.kind == ZL_MSG_ADMIN_REPLY && m.u.admin_reply.result == ZL_ADMIN_RESULT_STATS &&
             strcmp (m.u.admin_reply.stats.role, "leader") != 0))
            out.deposed = true;
        at += 4 + size;
    }
    zl_codec_destroy (&codec);
    free (data);
    return out;
}

static void
test_zombie_leader (void **state)
{
    (void)state;
    int64_t deadline = zlt_now_ms () + RUN_MS;
    zlh_pg_t *pg = zlh_pg_start ();
    assert_non_null (pg);
    PGconn *db = zlh_pg_connect (pg);
    assert_non_null (db);
    // A keeps its own wire dump (among the others when CTest collects them)
    const char *dumps = getenv ("ZLANE_WIRE_DUMP_DIR");
    char dump[4096], set[4200];
    snprintf (dump, sizeof dump, "%s/leader-zombie-%d.wire",
              dumps && *dumps ? dumps : zlt_tmpdir (), (int)getpid ());
    unlink (dump);
    snprintf (set, sizeof set, "wire_dump=%s", dump);
    const char *a_args[] = {"--set", set, NULL};
    zlt_broker_t *a = s_broker (pg, a_args);
    assert_non_null (a);
    const char *a_admin = zlt_broker_endpoint (a, "admin");
    s_wait_role (a_admin, "leader", 10000);
    // B's lease outlasts the moment the test holds it still
    const char *b_args[] = {"--leader-lease", "20s", NULL};
    zlt_broker_t *b = s_broker (pg, b_args);
    assert_non_null (b);
    const char *b_admin = zlt_broker_endpoint (b, "admin");
    s_wait_role (b_admin, "standby", 10000);
    char *frontends =
        s_list (zlt_broker_endpoint (a, "frontend"), zlt_broker_endpoint (b, "frontend"));
    char *backends =
        s_list (zlt_broker_endpoint (a, "backend"), zlt_broker_endpoint (b, "backend"));
    load_t l;
    s_load_start (&l, zlt_broker_dir (a), frontends, backends);
    s_load_step (&l, CHUNK, CHUNK / 2, deadline);
    zlt_fifo_feed (l.feed, &l.fed, CHUNK, deadline); // under load when it stops

    // A stops (a long GC pause, a frozen VM): its lease lapses, B takes over
    pid_t a_pid = zlt_proc_pid (zlt_broker_proc (a));
    assert_int_equal (zlt_proc_signal (zlt_broker_proc (a), SIGSTOP), 0);
    s_wait_stopped (a_pid);
    struct stat st;
    assert_int_equal (stat (dump, &st), 0);
    size_t dump_at_stop = (size_t)st.st_size;
    int64_t took = s_wait_role (b_admin, "leader", TAKEOVER_MS);
    info_t ib;
    assert_int_equal (s_info (b_admin, &ib, 5000), 0);

    // B held still too, so that only A could write: A wakes
    pid_t b_pid = zlt_proc_pid (zlt_broker_proc (b));
    assert_int_equal (zlt_proc_signal (zlt_broker_proc (b), SIGSTOP), 0);
    s_wait_stopped (b_pid);
    long rows_before = s_rows (db);
    assert_int_equal (zlt_proc_signal (zlt_broker_proc (a), SIGCONT), 0);
    int64_t woke_ms = s_wait_role (a_admin, "standby", TAKEOVER_MS);
    long rows_after = s_rows (db);
    info_t ia;
    assert_int_equal (s_info (a_admin, &ia, 5000), 0);
    assert_int_equal (zlt_proc_signal (zlt_broker_proc (b), SIGCONT), 0);

    // since its stop A may have finished the turn it was in: that commit
    // landed before B took over (a takeover waits for the commit in
    // flight) and its replies are true; from the moment it knows it was
    // deposed -- before anything else it does -- it promises nothing
    sent_t sent = s_sent (dump, dump_at_stop);
    fprintf (stderr,
             "zombie: A stopped; B took over %" PRId64 " ms later (epoch %" PRIu64
             "); A woke to standby in %" PRId64 " ms (epoch %" PRIu64 ", %" PRIu64
             " fenced); zlane's rows %ld -> %ld while it woke; A sent %zu frames since its stop: "
             "%zu promising a state change (the turn in flight at the stop), %zu after it knew, "
             "%zu errors\n",
             took, ib.epoch, woke_ms, ia.epoch, ia.fenced, rows_before, rows_after, sent.frames,
             sent.promises, sent.promises_after, sent.errors);
    assert_int_equal (rows_after, rows_before); // A committed nothing
    assert_true (sent.deposed);                 // it said so (to our Stats, at least)
    assert_int_equal (sent.promises_after, 0);  // and accepted, dispatched, settled nothing
    assert_string_equal (ia.role, "standby");
    // and at its next look at the lease it knows who leads
    int64_t until = zlt_now_ms () + TAKEOVER_MS;
    while (zlt_now_ms () < until &&
           (s_info (a_admin, &ia, 5000) != 0 || strcmp (ia.leader, ib.leader) != 0))
        poll (NULL, 0, 20);
    assert_string_equal (ia.leader, ib.leader);
    assert_int_equal (ia.epoch, ib.epoch);

    s_load_step (&l, CHUNK, CHUNK / 4, deadline); // B serves
    s_load_finish (&l, "zombie leader", deadline);
    s_load_free (&l);
    assert_int_equal (zlt_broker_stop (a, 10000), 0);
    assert_int_equal (zlt_broker_stop (b, 10000), 0);
    s_assert_clean (a, "zlane-broker A stderr");
    s_assert_clean (b, "zlane-broker B stderr");
    free (frontends);
    free (backends);
    PQfinish (db);
    zlh_pg_stop (&pg);
}

// ---------------------------------------------------------------- 4. no database at start
static void
test_database_unreachable_at_start (void **state)
{
    (void)state;
    zlh_pg_t *pg = zlh_pg_start ();
    assert_non_null (pg);
    assert_int_equal (zlh_pg_kill (pg), 0); // down before the broker starts
    zlt_broker_t *a = s_broker (pg, NULL);
    assert_non_null (a); // it starts all the same
    const char *admin = zlt_broker_endpoint (a, "admin");
    info_t in;
    assert_int_equal (s_info (admin, &in, 5000), 0);
    assert_string_equal (in.role, "unreachable");
    assert_false (in.reachable);

    // a producer's Hello and Submit are refused UNAVAILABLE: nothing taken
    zlt_client_t *p = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (a, "frontend"));
    assert_non_null (p);
    zl_msg_t hello = {.kind = ZL_MSG_HELLO, .u.hello.client = "test-leader"};
    assert_int_equal (zlt_client_send (p, &hello), 0);
    zl_msg_t reply;
    assert_int_equal (zlt_client_recv (p, &reply, 5000), 0);
    assert_int_equal (reply.kind, ZL_MSG_ERROR);
    assert_int_equal (reply.u.error.code, ZL_ERR_UNAVAILABLE);
    zl_job_spec_t spec = {.seq = 1, .tenant = "t", .lane = "a", .idempotency_key = ""};
    zl_msg_t sub = {.kind = ZL_MSG_SUBMIT, .u.submit = {1, &spec}};
    assert_int_equal (zlt_client_send (p, &sub), 0);
    assert_int_equal (zlt_client_recv (p, &reply, 5000), 0);
    assert_int_equal (reply.kind, ZL_MSG_REJECTED);
    assert_int_equal (reply.u.rejected.n, 1);
    assert_int_equal (reply.u.rejected.jobs[0].code, ZL_REJECT_UNAVAILABLE);
    assert_true (reply.u.rejected.jobs[0].retry_after_ms >= 100);
    zlt_client_destroy (&p);
    assert_int_equal (s_info (admin, &in, 5000), 0);
    assert_int_equal (in.unavailable, 2);
    assert_int_equal (in.accepted, 0);

    // clients that start now wait; the database comes up; they are served
    const char *dir = zlt_broker_dir (a);
    enum { JOBS = 200 };
    char *record = zlt_path (dir, "record"), *worker_err;
    zlt_proc_t *worker =
        zlt_worker_spawn (dir, "worker1", zlt_broker_endpoint (a, "backend"), record, &worker_err);
    char *in_path = zlt_path (dir, "submit.in"), *out = zlt_path (dir, "submit.out");
    char *err = zlt_path (dir, "submit.err");
    zlt_write_lines (in_path, "job", JOBS);
    char *bin = zlt_bin ("zlane-submit");
    const char *argv[] = {bin,        "--broker",  zlt_broker_endpoint (a, "frontend"),
                          "--tenant", "t",         "--lane",
                          "a",        "--lines",   "--file",
                          in_path,    "--timeout", "120s",
                          "-v",       NULL};
    zlt_proc_t *submit = zlt_spawn (argv, NULL, out, err);
    assert_non_null (submit);
    assert_true (zlt_wait_file_has (err, "database", 20000) == 0); // it was told so
    int64_t t_up = zlt_now_ms ();
    assert_int_equal (zlh_pg_restart (pg), 0);
    int64_t served = s_wait_role (admin, "leader", TAKEOVER_MS);
    assert_int_equal (zlt_proc_wait (submit, 120000), 0);
    if (zlt_proc_exit_code (submit) != 0) {
        zlt_dump_file ("zlane-submit stderr", err, 3000);
        zlt_broker_dump (a, 3000);
        fail_msg ("zlane-submit exited %d", zlt_proc_exit_code (submit));
    }
    int64_t accepted_ms = zlt_now_ms () - t_up;
    char *text = zlt_read_file (out, NULL);
    uint64_t ids[JOBS + 1];
    assert_int_equal (zlt_ids_parse (text, ids, JOBS + 1, "zlane-submit output"), JOBS);
    free (text);
    zlt_ids_sort (ids, JOBS);
    unsigned runs[JOBS];
    zlt_tally_t t;
    int64_t drain = zlt_now_ms () + DRAIN_MS;
    while (zlt_tally (record, ids, JOBS, runs, &t), t.lost && zlt_now_ms () < drain)
        poll (NULL, 0, 50);
    fprintf (stderr,
             "unreachable at start: the broker led %" PRId64 " ms after the database came up; "
             "%d jobs accepted %" PRId64 " ms after it; lost = %zu, duplicates = %zu\n",
             served, JOBS, accepted_ms, t.lost, t.duplicates);
    assert_int_equal (t.lost, 0);
    assert_int_equal (t.foreign, 0);
    zlt_proc_signal (worker, SIGTERM);
    assert_int_equal (zlt_proc_wait (worker, 15000), 0);
    zlt_proc_destroy (&worker);
    zlt_proc_destroy (&submit);
    assert_int_equal (zlt_broker_stop (a, 10000), 0);
    s_assert_clean (a, "zlane-broker stderr");
    zlt_assert_no_sanitizer_report ("zlane-worker stderr", worker_err);
    free (bin);
    free (in_path);
    free (out);
    free (err);
    free (record);
    free (worker_err);
    zlh_pg_stop (&pg);
}

// ---------------------------------------------------------------- 5. the database lost
static void
test_database_lost_mid_run (void **state)
{
    (void)state;
    int64_t deadline = zlt_now_ms () + RUN_MS;
    zlh_pg_t *pg = zlh_pg_start ();
    assert_non_null (pg);
    zlt_broker_t *a = s_broker (pg, NULL);
    assert_non_null (a);
    const char *admin = zlt_broker_endpoint (a, "admin");
    s_wait_role (admin, "leader", 10000);
    load_t l;
    s_load_start (&l, zlt_broker_dir (a), zlt_broker_endpoint (a, "frontend"),
                  zlt_broker_endpoint (a, "backend"));
    s_load_step (&l, CHUNK, CHUNK / 2, deadline);
    zlt_fifo_feed (l.feed, &l.fed, CHUNK, deadline); // under load when it dies

    int64_t t_kill = zlt_now_ms ();
    assert_int_equal (zlh_pg_kill (pg), 0); // kill -9 of the postmaster
    int64_t noticed = s_wait_role (admin, "unreachable", TAKEOVER_MS);
    size_t printed_down = zlt_count_lines (l.out);
    int64_t t_up = zlt_now_ms ();
    assert_int_equal (zlh_pg_restart (pg), 0); // crash recovery
    int64_t restarted = zlt_now_ms () - t_up;
    int64_t served = s_wait_role (admin, "leader", TAKEOVER_MS);
    info_t in;
    assert_int_equal (s_info (admin, &in, 5000), 0);
    // A job the broker accepts now: one of those it held when the database
    // went, or, when it had answered every one before it noticed (the killed
    // postmaster's backends can finish a commit or two), one fed now.
    zlt_fifo_feed (l.feed, &l.fed, CHUNK / 10, deadline);
    size_t want = printed_down + 1;
    zlt_wait_printed (l.out, want, l.submit, l.err, deadline);
    int64_t outage = zlt_now_ms () - t_kill;
    fprintf (stderr,
             "database lost: noticed in %" PRId64 " ms; PostgreSQL back %" PRId64
             " ms after its restart began; the broker led %" PRId64 " ms later (epoch %" PRIu64
             ", %" PRIu64 " refused UNAVAILABLE); first job accepted %" PRId64
             " ms after the kill\n",
             noticed, restarted, served, in.epoch, in.unavailable, outage);
    s_load_step (&l, CHUNK, CHUNK / 4, deadline);
    s_load_finish (&l, "database lost", deadline);
    s_load_free (&l);
    assert_int_equal (zlt_broker_stop (a, 10000), 0);
    s_assert_clean (a, "zlane-broker stderr");
    zlh_pg_stop (&pg);
}

// ---------------------------------------------------------------- 7. a commit held up
// The pid of the broker's backend waiting for a lock (its commit's INSERT) (polled
// every 10 ms for at most 10 s); 0 if none.
static int
s_insert_waiting (PGconn *db)
{
    int64_t deadline = zlt_now_ms () + 10000;
    while (zlt_now_ms () < deadline) {
        PGresult *r = PQexec (db, "SELECT coalesce(min(pid), 0) FROM pg_stat_activity"
                                  " WHERE wait_event_type = 'Lock'"
                                  " AND application_name = 'zlane-broker'");
        assert_int_equal (PQresultStatus (r), PGRES_TUPLES_OK);
        int pid = atoi (PQgetvalue (r, 0, 0));
        PQclear (r);
        if (pid)
            return pid;
        poll (NULL, 0, 10);
    }
    PGresult *r = PQexec (db, "SELECT pid, state, wait_event_type, wait_event, left(query, 60)"
                              " FROM pg_stat_activity WHERE backend_type = 'client backend'");
    for (int i = 0; PQresultStatus (r) == PGRES_TUPLES_OK && i < PQntuples (r); i++)
        fprintf (stderr, "  backend %s: %s, waiting %s/%s: %s\n", PQgetvalue (r, i, 0),
                 PQgetvalue (r, i, 1), PQgetvalue (r, i, 2), PQgetvalue (r, i, 3),
                 PQgetvalue (r, i, 4));
    PQclear (r);
    return 0;
}

static void
s_exec_ok (PGconn *db, const char *sql)
{
    PGresult *r = PQexec (db, sql);
    if (PQresultStatus (r) != PGRES_COMMAND_OK && PQresultStatus (r) != PGRES_TUPLES_OK)
        fail_msg ("%s: %s", sql, PQerrorMessage (db));
    PQclear (r);
}

/*  The broker's commit runs while its loop goes on (the store commits in
    the background): a Submit's commit held up by a lock the test takes on
    the log. While it is held the broker answers Stats (its loop runs) but
    the producer is told nothing; released, the Accepted comes, and the job
    is in the database. */
static void
test_commit_held_up (void **state)
{
    (void)state;
    zlh_pg_t *pg = zlh_pg_start ();
    assert_non_null (pg);
    // a long lease: no renewal (which waits for the commit) in the window
    const char *extra[] = {"--leader-lease", "30s", NULL};
    zlt_broker_t *a = s_broker (pg, extra);
    assert_non_null (a);
    const char *admin = zlt_broker_endpoint (a, "admin");
    s_wait_role (admin, "leader", 10000);
    zlt_client_t *p = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (a, "frontend"));
    assert_non_null (p);
    assert_true (zlt_client_hello (p, "held-up", 5000) > 0);

    PGconn *db = zlh_pg_connect (pg);
    assert_non_null (db);
    s_exec_ok (db, "BEGIN");
    s_exec_ok (db, "LOCK TABLE zlane.log IN SHARE MODE"); // the broker's INSERT waits
    info_t before;
    assert_int_equal (s_info (admin, &before, 5000), 0);
    zl_job_spec_t spec = {.seq = 1, .tenant = "t", .lane = "a", .idempotency_key = "held-1"};
    zl_msg_t sub = {.kind = ZL_MSG_SUBMIT, .u.submit = {1, &spec}};
    assert_int_equal (zlt_client_send (p, &sub), 0);
    assert_true (s_insert_waiting (db) != 0);
    // the loop answers while the commit waits; the producer hears nothing
    info_t during;
    assert_int_equal (s_info (admin, &during, 5000), 0);
    assert_int_equal (during.commits, before.commits);
    assert_int_equal (during.accepted, before.accepted + 1); // taken, not yet committed
    zl_msg_t reply;
    assert_int_equal (zlt_client_recv (p, &reply, 300), -1);
    s_exec_ok (db, "COMMIT"); // released
    assert_int_equal (zlt_client_expect (p, ZL_MSG_ACCEPTED, &reply, 10000), 0);
    assert_int_equal (reply.kind, ZL_MSG_ACCEPTED);
    assert_int_equal (reply.u.accepted.n, 1);
    assert_true (reply.u.accepted.jobs[0].job_id > 0);
    info_t after;
    assert_int_equal (s_info (admin, &after, 5000), 0);
    assert_true (after.commits > before.commits);
    // the job is in the database: the broker stopped (its lease given up)
    // and started again on it still has it
    assert_int_equal (zlt_broker_stop (a, 10000), 0);
    assert_int_equal (zlt_broker_restart (a, 30000), 0);
    s_wait_role (admin, "leader", TAKEOVER_MS);
    zlt_client_t *ad = zlt_client_new (ZMQ_DEALER, admin);
    zl_group_stats_t g;
    assert_int_equal (zlt_group (ad, "a", "t", &g), 0);
    assert_int_equal (g.ready, 1);
    zlt_client_destroy (&ad);
    PQfinish (db);
    zlt_client_destroy (&p);
    assert_int_equal (zlt_broker_stop (a, 10000), 0);
    s_assert_clean (a, "zlane-broker stderr");
    zlh_pg_stop (&pg);
}

// ---------------------------------------------------------------- 8. a foreign schema
/*  A database whose schema "zlane" is not a zlane store (another program's
    tables), or a zlane store of a newer version: zlane-broker refuses to
    start, exit 1, saying why, and touches nothing there. */
static void
test_foreign_schema_refused (void **state)
{
    (void)state;
    zlh_pg_t *pg = zlh_pg_start ();
    assert_non_null (pg);
    PGconn *db = zlh_pg_connect (pg);
    assert_non_null (db);
    s_exec_ok (db, "SET client_min_messages = warning");
    s_exec_ok (db, "CREATE SCHEMA zlane");
    s_exec_ok (db, "CREATE TABLE zlane.invoices (id int PRIMARY KEY, amount numeric)");
    s_exec_ok (db, "INSERT INTO zlane.invoices VALUES (1, 9.99)");
    char *dir = zlt_path (zlt_tmpdir (), "foreign");
    mkdir (dir, 0700);
    char *ports = zlt_path (dir, "ports"), *out = zlt_path (dir, "out"),
         *err = zlt_path (dir, "err"), *bin = zlt_bin ("zlane-broker");
    const char *argv[] = {bin,
                          "--store",
                          zlh_pg_conninfo (pg),
                          "--lane",
                          "a",
                          "--frontend",
                          "tcp://127.0.0.1:*",
                          "--backend",
                          "tcp://127.0.0.1:*",
                          "--events",
                          "tcp://127.0.0.1:*",
                          "--admin",
                          "tcp://127.0.0.1:*",
                          "--ports-file",
                          ports,
                          NULL};
    assert_int_equal (zlt_run (argv, NULL, out, err, 30000), 1);
    char *text = zlt_read_file (err, NULL);
    assert_non_null (text);
    assert_non_null (strstr (text, "is not a zlane store"));
    free (text);
    PGresult *r = PQexec (db, "SELECT count(*) FROM zlane.invoices");
    assert_int_equal (PQresultStatus (r), PGRES_TUPLES_OK);
    assert_string_equal (PQgetvalue (r, 0, 0), "1"); // untouched
    PQclear (r);
    r = PQexec (db, "SELECT count(*) FROM pg_tables WHERE schemaname = 'zlane'");
    assert_string_equal (PQgetvalue (r, 0, 0), "1"); // nothing of zlane's created
    PQclear (r);

    // a zlane store of a newer version than this broker knows
    s_exec_ok (db, "DROP SCHEMA zlane CASCADE");
    zlt_broker_t *a = s_broker (pg, NULL); // creates the store
    assert_non_null (a);
    assert_int_equal (zlt_broker_stop (a, 10000), 0);
    zlt_broker_destroy (&a);
    s_exec_ok (db, "UPDATE zlane.meta SET value = '99' WHERE key = 'schema_version'");
    assert_int_equal (zlt_run (argv, NULL, out, err, 30000), 1);
    text = zlt_read_file (err, NULL);
    assert_non_null (text);
    assert_non_null (strstr (text, "is version 99"));
    free (text);
    PQfinish (db);
    free (dir);
    free (ports);
    free (out);
    free (err);
    free (bin);
    zlh_pg_stop (&pg);
}

// ---------------------------------------------------------------- 6. Patroni
static void
test_database_failover_under_patroni (void **state)
{
    (void)state;
    int64_t deadline = zlt_now_ms () + RUN_MS;
    char err[512] = "";
    zlh_patroni_t *cluster = zlh_patroni_start (err, sizeof err);
    if (!cluster)
        fail_msg ("patroni harness: %s", err);
    int primary = zlh_patroni_wait_ready (cluster, 90000);
    if (primary < 0) {
        zlh_patroni_dump_logs (cluster, 4000);
        fail_msg ("the Patroni cluster was not ready: %s", zlh_patroni_error (cluster));
    }
    const char *args[] = {
        "--store", zlh_patroni_conninfo (cluster), "--lane", "a", "--heartbeat", "200ms", NULL};
    zlt_broker_t *a = zlt_broker_start (args);
    assert_non_null (a);
    const char *admin = zlt_broker_endpoint (a, "admin");
    s_wait_role (admin, "leader", 20000);
    load_t l;
    s_load_start (&l, zlt_broker_dir (a), zlt_broker_endpoint (a, "frontend"),
                  zlt_broker_endpoint (a, "backend"));
    s_load_step (&l, CHUNK, CHUNK / 2, deadline);
    zlt_fifo_feed (l.feed, &l.fed, CHUNK, deadline); // under load when it dies

    info_t before;
    assert_int_equal (s_info (admin, &before, 5000), 0);
    int64_t t_kill = zlt_now_ms ();
    int killed = zlh_patroni_kill_primary (cluster);
    assert_int_equal (killed, primary);
    int64_t failover = zlh_patroni_wait_failover (cluster, 60000);
    if (failover < 0) {
        zlh_patroni_dump_logs (cluster, 4000);
        fail_msg ("no new primary: %s", zlh_patroni_error (cluster));
    }
    // the write outage: until the broker leads again (a new epoch: it lost
    // the old primary and dialled the new one) and accepts a job there.
    // Jobs are fed during the outage and again once the test sees it lead:
    // the broker may have accepted every earlier one before it asked.
    zlt_fifo_feed (l.feed, &l.fed, CHUNK / 10, deadline);
    info_t in = before;
    bool led = false;
    uint64_t accepted_at_lead = 0;
    int64_t first = -1;
    while (zlt_now_ms () < t_kill + TAKEOVER_MS * 2) {
        if (s_info (admin, &in, 1000) == 0 && !strcmp (in.role, "leader") &&
            in.epoch > before.epoch) {
            if (!led) {
                led = true;
                accepted_at_lead = in.accepted;
                zlt_fifo_feed (l.feed, &l.fed, CHUNK / 10, deadline);
            } else if (in.accepted > accepted_at_lead) {
                first = zlt_now_ms () - t_kill;
                break;
            }
        }
        poll (NULL, 0, 20);
    }
    if (first < 0) {
        zlt_dump_file ("zlane-submit stderr", l.err, 4000);
        zlt_broker_dump (a, 4000);
        fail_msg ("the broker did not accept again after the failover (role %s, epoch %" PRIu64
                  ", %" PRIu64 " accepted in all, %" PRIu64 " when the test saw it lead, %" PRIu64
                  " refused UNAVAILABLE; %d fed, %zu printed)",
                  in.role, in.epoch, in.accepted, accepted_at_lead, in.unavailable, l.fed,
                  zlt_count_lines (l.out));
    }
    fprintf (stderr,
             "database failover under Patroni: node %d killed, the new primary writable after "
             "%" PRId64 " ms; the broker accepted again %" PRId64
             " ms after the kill (the write outage; epoch %" PRIu64 ", %" PRIu64
             " refused UNAVAILABLE)\n",
             killed, failover, first, in.epoch, in.unavailable);
    s_load_step (&l, CHUNK, CHUNK / 4, deadline);
    s_load_finish (&l, "database failover", deadline);
    s_load_free (&l);
    assert_int_equal (zlt_broker_stop (a, 10000), 0);
    s_assert_clean (a, "zlane-broker stderr");
    zlh_patroni_stop (&cluster);
}

static int
s_teardown (void **state)
{
    zlt_teardown (state);
    zlh_patroni_cleanup ();
    return zlh_pg_teardown (state);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown (test_standby_names_the_leader, s_teardown),
        cmocka_unit_test_teardown (test_kill_the_leader_ten_times, s_teardown),
        cmocka_unit_test_teardown (test_zombie_leader, s_teardown),
        cmocka_unit_test_teardown (test_database_unreachable_at_start, s_teardown),
        cmocka_unit_test_teardown (test_database_lost_mid_run, s_teardown),
        cmocka_unit_test_teardown (test_database_failover_under_patroni, s_teardown),
        cmocka_unit_test_teardown (test_commit_held_up, s_teardown),
        cmocka_unit_test_teardown (test_foreign_schema_refused, s_teardown),
    };
    if (getenv ("ZLT_FILTER")) // run one: ZLT_FILTER='test_zombie*'
        cmocka_set_test_filter (getenv ("ZLT_FILTER"));
    return cmocka_run_group_tests (tests, NULL, NULL);
}
