/*  test_store_pg: what only the PostgreSQL backend has, on a real server the
    harness starts (tests/support/pg_harness): leadership with fencing (a
    second store takes over when the first one's lease lapses; the deposed
    one's commit is refused FENCED and nothing of it lands), a schema that
    is not zlane's or is newer refused at open, a database lost and back
    (UNAVAILABLE, then leading again with every committed job), and the log's
    rotation: partitions compacted and dropped while the live jobs survive a
    reload, also with each batch written while the one before commits; and a
    commit under way (zl_store_commit_start) held up, then ended, and one
    that fails under way. store.h's common contracts are test_store_conformance's. */
#include "arena.h"
#include "clock.h"
#include "job.h"
#include "log.h"
#include "pg_harness.h"
#include "record.h"
#include "store.h"
#include "store_backend.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BUDGET (256ull << 20)

static zlh_pg_t *s_pg;
static int s_dbs;
static char s_loc[1024];

// A fresh database for the case; s_loc names it.
static int
s_setup (void **state)
{
    (void)state;
    zl_log_set_level (getenv ("ZLT_VERBOSE") ? ZL_LOG_DEBUG : ZL_LOG_ERROR);
    if (!s_pg && !(s_pg = zlh_pg_start ()))
        fail_msg ("the PostgreSQL harness could not start a cluster");
    PGconn *conn = zlh_pg_connect (s_pg);
    assert_non_null (conn);
    char sql[64];
    snprintf (sql, sizeof sql, "CREATE DATABASE store_pg_%d", ++s_dbs);
    PGresult *r = PQexec (conn, sql);
    assert_int_equal (PQresultStatus (r), PGRES_COMMAND_OK);
    PQclear (r);
    PQfinish (conn);
    snprintf (s_loc, sizeof s_loc, "%s dbname=store_pg_%d", zlh_pg_conninfo (s_pg), s_dbs);
    zl_store_pg_tune (0, 0, 0);
    return 0;
}

// Run `sql` on the case's database; returns the first cell ("" if none).
static const char *
s_sql (const char *sql)
{
    static char out[256];
    PGconn *conn = PQconnectdb (s_loc);
    assert_int_equal (PQstatus (conn), CONNECTION_OK);
    PGresult *r = PQexec (conn, sql);
    if (PQresultStatus (r) != PGRES_TUPLES_OK && PQresultStatus (r) != PGRES_COMMAND_OK)
        fail_msg ("%s: %s", sql, PQerrorMessage (conn));
    snprintf (out, sizeof out, "%s", PQntuples (r) > 0 ? PQgetvalue (r, 0, 0) : "");
    PQclear (r);
    PQfinish (conn);
    return out;
}

static zl_store_t *
s_open_as (const char *name, uint32_t lease_ms)
{
    char err[512] = "";
    zl_store_t *store = zl_store_open (s_loc, ZL_DURABILITY_FSYNC, BUDGET, err, sizeof err);
    if (!store)
        fail_msg ("open: %s", err);
    zl_store_candidate_t who = {.name = name,
                                .advertise = {"tcp://h-"
                                              "front:1",
                                              "tcp://h-back:2", "tcp://h-admin:3"},
                                .lease_ms = lease_ms};
    char front[64];
    snprintf (front, sizeof front, "tcp://%s:5570", name);
    who.advertise[ZL_ADVERTISE_FRONTEND] = front;
    zl_store_set_candidate (store, &who);
    return store;
}

static const uint8_t PAYLOAD[] = "a job's payload";

static void
s_put (zl_store_t *store, uint64_t id, bool with_state)
{
    zl_job_rec_t rec = {.tenant = "acme",
                        .lane = "email",
                        .payload = {PAYLOAD, sizeof PAYLOAD},
                        .idempotency_key = "",
                        .max_attempts = 3,
                        .lease_ms = 1000,
                        .enqueued_at_ms = 1700000000000LL};
    assert_int_equal (zl_store_put_job (store, id, &rec), ZL_STORE_OK);
    if (with_state) {
        zl_state_rec_t st = {.state = ZL_JOB_DELAYED, .attempt = 1, .due_at_ms = (int64_t)id};
        assert_int_equal (zl_store_put_state (store, id, &st), ZL_STORE_OK);
    }
}

// Call zl_store_elect until the role is `want` (at most `ms`); returns the
// last answer.
static zl_store_role_t
s_elect_until (zl_store_t *store, zl_store_role_t want, int ms, zl_store_lead_t *lead)
{
    int64_t end = zl_clock_mono_ms () + ms;
    zl_store_role_t role;
    while ((role = zl_store_elect (store, zl_clock_mono_ms (), lead)) != want &&
           zl_clock_mono_ms () < end) {
        struct timespec ts = {0, 20 * 1000 * 1000}; // a poll interval, not a synchronisation
        nanosleep (&ts, NULL);
    }
    return role;
}

static size_t
s_count_jobs (zl_store_t *store)
{
    zl_store_stats_t st;
    zl_store_stats (store, &st);
    return st.jobs;
}

// ---------------------------------------------------------------- leadership
static void
test_fencing_and_takeover (void **state)
{
    (void)state;
    zl_store_lead_t lead;
    zl_store_t *a = s_open_as ("a", 400);
    assert_int_equal (s_elect_until (a, ZL_ROLE_LEADER, 2000, &lead), ZL_ROLE_LEADER);
    assert_true (lead.took_over || lead.role == ZL_ROLE_LEADER);
    uint64_t epoch_a = lead.epoch;
    assert_true (epoch_a >= 1);
    assert_int_equal (zl_store_begin (a), ZL_STORE_OK);
    s_put (a, 1, true);
    assert_int_equal (zl_store_commit (a), ZL_STORE_OK);

    // b is a standby while a renews: it knows a's endpoints, may not write
    zl_store_t *b = s_open_as ("b", 400);
    assert_int_equal (zl_store_elect (b, zl_clock_mono_ms (), &lead), ZL_ROLE_STANDBY);
    assert_string_equal (lead.leader[ZL_ADVERTISE_FRONTEND], "tcp://a:5570");
    assert_string_equal (lead.leader[ZL_ADVERTISE_BACKEND], "tcp://h-back:2");
    assert_string_equal (lead.leader_name, "a");
    assert_int_not_equal (zl_store_begin (b), ZL_STORE_OK);
    assert_false (zl_store_has_room (b, 100));
    assert_int_equal (zl_store_elect (a, zl_clock_mono_ms (), &lead), ZL_ROLE_LEADER); // renews

    // a stops renewing (as if stopped); b takes over once the lease lapsed
    assert_int_equal (zl_store_begin (a), ZL_STORE_OK);
    s_put (a, 2, true); // a's turn, in flight past its lease
    assert_int_equal (s_elect_until (b, ZL_ROLE_LEADER, 5000, &lead), ZL_ROLE_LEADER);
    assert_true (lead.took_over);
    assert_int_equal (lead.epoch, epoch_a + 1);
    assert_int_equal (s_count_jobs (b), 1); // what a committed
    // a's commit is refused: it is a standby now, and nothing of it landed
    char log_rows[32];
    snprintf (log_rows, sizeof log_rows, "%s", s_sql ("SELECT count(*) FROM zlane.log"));
    assert_int_equal (zl_store_commit (a), ZL_STORE_FENCED);
    assert_int_equal (zl_store_role (a), ZL_ROLE_STANDBY);
    assert_int_equal (s_count_jobs (a), 0); // it forgot what it held
    zl_store_stats_t st;
    zl_store_stats (a, &st);
    assert_int_equal (st.fenced, 1);
    assert_int_equal (zl_store_elect (a, zl_clock_mono_ms (), &lead), ZL_ROLE_STANDBY);
    assert_string_equal (lead.leader[ZL_ADVERTISE_FRONTEND], "tcp://b:5570");
    assert_string_equal (s_sql ("SELECT count(*) FROM zlane.log"),
                         log_rows); // nothing of a's refused commit

    // b serves; a clean close gives the lease up: a takes over at once
    assert_int_equal (zl_store_begin (b), ZL_STORE_OK);
    s_put (b, 3, false);
    assert_int_equal (zl_store_commit (b), ZL_STORE_OK);
    zl_store_close (&b);
    int64_t t0 = zl_clock_mono_ms ();
    assert_int_equal (s_elect_until (a, ZL_ROLE_LEADER, 2000, &lead), ZL_ROLE_LEADER);
    assert_true (zl_clock_mono_ms () - t0 < 300); // not a lease's wait
    assert_int_equal (lead.epoch, epoch_a + 2);
    assert_int_equal (s_count_jobs (a), 2);
    zl_arena_t *arena = zl_arena_new (4096);
    zl_job_rec_t rec;
    assert_int_equal (zl_store_get_job (a, 3, ZL_PRIORITY_DEFAULT, arena, &rec), ZL_STORE_OK);
    assert_int_equal (zl_store_get_job (a, 2, ZL_PRIORITY_DEFAULT, arena, &rec),
                      ZL_STORE_NOT_FOUND);
    zl_arena_destroy (&arena);
    zl_store_close (&a);
}

// ---------------------------------------------------------------- schemas
static void
test_foreign_and_newer_schemas_refused (void **state)
{
    (void)state;
    char err[512] = "";
    s_sql ("CREATE SCHEMA zlane; CREATE TABLE zlane.jobs (id int)");
    zl_store_t *store = zl_store_open (s_loc, ZL_DURABILITY_FSYNC, BUDGET, err, sizeof err);
    assert_null (store);
    assert_non_null (strstr (err, "is not a zlane store"));
    // the location is shown without its password
    const char *pw = strstr (zlh_pg_conninfo (s_pg), "password=") + strlen ("password=");
    char secret[128];
    snprintf (secret, sizeof secret, "%.*s", (int)strcspn (pw, " "), pw);
    assert_true (strlen (secret) >= 8);
    assert_null (strstr (err, secret));
    assert_string_equal (s_sql ("SELECT count(*) FROM zlane.jobs"), "0"); // untouched

    s_sql ("DROP SCHEMA zlane CASCADE");
    store = s_open_as ("a", 1000);
    zl_store_close (&store);
    // version 1 (before batches) is read as it is and marked 2
    assert_string_equal (s_sql ("SELECT value FROM zlane.meta WHERE key = 'schema_version'"), "2");
    s_sql ("UPDATE zlane.meta SET value = '1' WHERE key = 'schema_version'");
    store = s_open_as ("a", 1000);
    zl_store_close (&store);
    assert_string_equal (s_sql ("SELECT value FROM zlane.meta WHERE key = 'schema_version'"), "2");
    s_sql ("UPDATE zlane.meta SET value = '99' WHERE key = 'schema_version'");
    err[0] = '\0';
    store = zl_store_open (s_loc, ZL_DURABILITY_FSYNC, BUDGET, err, sizeof err);
    assert_null (store);
    assert_non_null (strstr (err, "version 99"));
    assert_non_null (strstr (err, "upgrade the broker"));
}

// ---------------------------------------------------------------- the database lost
static void
test_database_lost_and_back (void **state)
{
    (void)state;
    zl_store_lead_t lead;
    zl_store_t *store = s_open_as ("a", 1000);
    assert_int_equal (s_elect_until (store, ZL_ROLE_LEADER, 2000, &lead), ZL_ROLE_LEADER);
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    for (uint64_t id = 1; id <= 50; id++)
        s_put (store, id, id % 2);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);

    assert_int_equal (zlh_pg_kill (s_pg), 0);
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    s_put (store, 51, false);
    assert_int_equal (zl_store_commit (store), ZL_STORE_UNAVAILABLE);
    assert_int_equal (zl_store_role (store), ZL_ROLE_UNREACHABLE);
    assert_int_equal (zl_store_begin (store), ZL_STORE_UNAVAILABLE);
    assert_false (zl_store_has_room (store, 10));
    assert_int_equal (zl_store_elect (store, zl_clock_mono_ms (), &lead), ZL_ROLE_UNREACHABLE);
    zl_store_stats_t st;
    zl_store_stats (store, &st);
    assert_int_equal (st.reachable, 0);
    assert_true (st.unreachable >= 1);

    // back: this broker's own lease is taken again at once, the jobs reloaded
    assert_int_equal (zlh_pg_restart (s_pg), 0);
    assert_int_equal (s_elect_until (store, ZL_ROLE_LEADER, 10000, &lead), ZL_ROLE_LEADER);
    assert_int_equal (s_count_jobs (store), 50);
    zl_store_stats (store, &st);
    assert_int_equal (st.reachable, 1);
    assert_int_equal (st.states, 25);
    zl_store_close (&store);
}

// A database that is not there yet at open: the store opens unreachable
// and leads once it answers.
static void
test_unreachable_at_open (void **state)
{
    (void)state;
    char err[512] = "", loc[1100];
    snprintf (loc, sizeof loc, "%s port=1", s_loc); // nothing listens on port 1
    zl_store_t *store = zl_store_open (loc, ZL_DURABILITY_FSYNC, BUDGET, err, sizeof err);
    assert_non_null (store);
    zl_store_lead_t lead;
    assert_int_equal (zl_store_elect (store, 0, &lead), ZL_ROLE_UNREACHABLE);
    assert_int_equal (zl_store_begin (store), ZL_STORE_UNAVAILABLE);
    assert_true (zl_store_elect_due (store) > 0);
    zl_store_close (&store);
}

// ---------------------------------------------------------------- rotation
static void
s_rotation (bool overlapped)
{
    zl_store_pg_tune (40, 0, 3); // a segment per 40 rows, 3 kept
    zl_store_lead_t lead;
    zl_store_t *store = s_open_as ("a", 1000);
    assert_int_equal (s_elect_until (store, ZL_ROLE_LEADER, 2000, &lead), ZL_ROLE_LEADER);
    // 200 turns: each puts 5 jobs and deletes 4 of them again; every 10th
    // job stays, with a state
    uint64_t id = 0;
    size_t max_parts = 0;
    for (int turn = 0; turn < 200; turn++) {
        assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
        for (int k = 0; k < 5; k++) {
            id++;
            s_put (store, id, id % 10 == 0);
            if (id % 10 != 0 && id % 10 != 5)
                assert_int_equal (zl_store_del_job (store, id, ZL_PRIORITY_DEFAULT), ZL_STORE_OK);
        }
        if (!overlapped) {
            assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
        } else { // the next batch is written while this one commits
            assert_int_equal (zl_store_commit_start (store), ZL_STORE_PENDING);
            if (turn % 5 != 4)
                continue;
            assert_int_equal (zl_store_commit_finish (store, true), ZL_STORE_OK);
        }
        assert_int_equal (zl_store_elect (store, zl_clock_mono_ms (), &lead), ZL_ROLE_LEADER);
        size_t parts = (size_t)atoi (
            s_sql ("SELECT count(*) FROM pg_inherits WHERE inhparent = 'zlane.log'::regclass"));
        if (parts > max_parts)
            max_parts = parts;
    }
    // jobs 5, 10, 15, ...: 200 live; the log stayed within its segments
    assert_int_equal (s_count_jobs (store), 200);
    zl_store_stats_t st;
    zl_store_stats (store, &st);
    assert_true (st.log_rotations >= 10);
    assert_true (max_parts <= 3 + 2); // kept, plus the one made ahead, plus one being compacted
    // a row per commit, the compaction's included, in the segments kept
    size_t rows = (size_t)atoi (s_sql ("SELECT count(*) FROM zlane.log"));
    assert_true (rows <= 5 * 12);
    zl_store_close (&store);

    // everything live comes back, with its state; the deleted do not
    store = s_open_as ("a", 1000);
    assert_int_equal (s_elect_until (store, ZL_ROLE_LEADER, 2000, &lead), ZL_ROLE_LEADER);
    assert_int_equal (s_count_jobs (store), 200);
    zl_arena_t *arena = zl_arena_new (4096);
    for (uint64_t j = 1; j <= id; j++) {
        zl_job_rec_t rec;
        zl_state_rec_t stt;
        bool live = j % 5 == 0;
        assert_int_equal (zl_store_get_job (store, j, ZL_PRIORITY_DEFAULT, arena, &rec),
                          live ? ZL_STORE_OK : ZL_STORE_NOT_FOUND);
        if (live)
            assert_int_equal (zl_store_get_state (store, j, arena, &stt),
                              j % 10 == 0 ? ZL_STORE_OK : ZL_STORE_NOT_FOUND);
        if (j % 10 == 0)
            assert_int_equal (stt.due_at_ms, (int64_t)j);
    }
    zl_arena_destroy (&arena);
    zl_store_close (&store);
}

static void
test_rotation_compacts_and_drops (void **state)
{
    (void)state;
    s_rotation (false);
}

// The same with each batch written while the one before commits
// (zl_store_commit_start): the compaction's moves land all the same.
static void
test_rotation_with_commits_under_way (void **state)
{
    (void)state;
    s_rotation (true);
}

// ---------------------------------------------------------------- commits under way
// A connection of the test's own, for a lock the store's commit must wait for.
static PGconn *
s_locker (void)
{
    PGconn *conn = PQconnectdb (s_loc);
    assert_int_equal (PQstatus (conn), CONNECTION_OK);
    return conn;
}

static void
s_run (PGconn *conn, const char *sql)
{
    PGresult *r = PQexec (conn, sql);
    if (PQresultStatus (r) != PGRES_TUPLES_OK && PQresultStatus (r) != PGRES_COMMAND_OK)
        fail_msg ("%s: %s", sql, PQerrorMessage (conn));
    PQclear (r);
}

// The pid of the backend whose query waits for a lock (the store's commit,
// blocked by the test's), polled for at most 10 s; 0 if none.
static int
s_lock_waiter (void)
{
    int64_t end = zl_clock_mono_ms () + 10000;
    while (zl_clock_mono_ms () < end) {
        int pid =
            atoi (s_sql ("SELECT coalesce(min(pid), 0) FROM pg_stat_activity"
                         " WHERE wait_event_type = 'Lock' AND application_name = 'zlane-broker'"));
        if (pid)
            return pid;
        struct timespec ts = {0, 10 * 1000 * 1000}; // a poll interval, not a synchronisation
        nanosleep (&ts, NULL);
    }
    return 0;
}

// A commit under way (zl_store_commit_start) while the database makes it
// wait (a lock of the test's): it stays pending, a batch with nothing in
// it closes without waiting, the next batch is opened and written and its
// writes read back; released, the commit ends OK and both batches are
// durable. Then one that fails under way (its connection killed): the
// batch written meanwhile goes with it, the store stops leading, and
// leading again it holds exactly what was committed.
static void
test_commit_under_way (void **state)
{
    (void)state;
    zl_store_lead_t lead;
    zl_store_t *store = s_open_as ("a", 1000);
    assert_int_equal (s_elect_until (store, ZL_ROLE_LEADER, 2000, &lead), ZL_ROLE_LEADER);
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    for (uint64_t id = 1; id <= 10; id++)
        s_put (store, id, false);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    assert_false (zl_store_commit_pending (store));
    assert_int_equal (zl_store_commit_fd (store), -1);

    PGconn *locker = s_locker ();
    s_run (locker, "BEGIN");
    s_run (locker, "LOCK TABLE zlane.log IN SHARE MODE"); // INSERTs wait for it
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    for (uint64_t id = 11; id <= 20; id++)
        s_put (store, id, true);
    assert_int_equal (zl_store_commit_start (store), ZL_STORE_PENDING);
    assert_true (zl_store_commit_pending (store));
    assert_true (zl_store_commit_fd (store) >= 0);
    assert_true (s_lock_waiter () != 0); // the INSERT waits for the lock
    assert_int_equal (zl_store_commit_finish (store, false), ZL_STORE_PENDING);
    // no election while it is under way: the role stays as it was
    assert_int_equal (zl_store_elect (store, zl_clock_mono_ms (), &lead), ZL_ROLE_LEADER);
    // a batch that writes nothing closes at once
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_false (zl_store_batch_dirty (store));
    assert_int_equal (zl_store_commit_start (store), ZL_STORE_PENDING);
    // the next batch, written meanwhile; its writes and the pending ones read back
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    for (uint64_t id = 21; id <= 30; id++)
        s_put (store, id, false);
    assert_true (zl_store_batch_dirty (store));
    zl_arena_t *arena = zl_arena_new (4096);
    zl_job_rec_t rec;
    zl_state_rec_t st;
    assert_int_equal (zl_store_get_job (store, 25, ZL_PRIORITY_DEFAULT, arena, &rec), ZL_STORE_OK);
    assert_int_equal (zl_store_get_state (store, 15, arena, &st), ZL_STORE_OK);
    assert_int_equal (st.due_at_ms, 15);
    assert_int_equal (zl_store_commit_finish (store, false), ZL_STORE_PENDING);
    s_run (locker, "COMMIT"); // released: the commit goes through
    assert_int_equal (zl_store_commit_finish (store, true), ZL_STORE_OK);
    assert_false (zl_store_commit_pending (store));
    assert_true (zl_store_in_batch (store)); // the next batch is still open
    assert_int_equal (zl_store_commit_start (store), ZL_STORE_PENDING);
    assert_int_equal (zl_store_commit_finish (store, true), ZL_STORE_OK);
    zl_store_stats_t ss;
    zl_store_stats (store, &ss);
    assert_int_equal (ss.jobs, 30);
    assert_int_equal (ss.states, 10);

    // one that fails under way: its connection is killed while it waits
    s_run (locker, "BEGIN");
    s_run (locker, "LOCK TABLE zlane.log IN SHARE MODE");
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    s_put (store, 31, true);
    assert_int_equal (zl_store_commit_start (store), ZL_STORE_PENDING);
    int pid = s_lock_waiter ();
    assert_true (pid != 0);
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    s_put (store, 32, false);
    assert_int_equal (zl_store_del_job (store, 3, ZL_PRIORITY_DEFAULT), ZL_STORE_OK);
    char sql[64];
    snprintf (sql, sizeof sql, "SELECT pg_terminate_backend(%d)", pid);
    s_run (locker, sql);
    assert_int_equal (zl_store_commit_finish (store, true), ZL_STORE_UNAVAILABLE);
    assert_false (zl_store_commit_pending (store));
    assert_false (zl_store_in_batch (store)); // dropped with it
    assert_int_equal (zl_store_role (store), ZL_ROLE_UNREACHABLE);
    s_run (locker, "COMMIT");
    PQfinish (locker);
    // leading again (its own lease), it holds what was committed: 1-30
    assert_int_equal (s_elect_until (store, ZL_ROLE_LEADER, 10000, &lead), ZL_ROLE_LEADER);
    zl_store_stats (store, &ss);
    assert_int_equal (ss.jobs, 30);
    assert_int_equal (ss.states, 10);
    assert_int_equal (zl_store_get_job (store, 31, ZL_PRIORITY_DEFAULT, arena, &rec),
                      ZL_STORE_NOT_FOUND);
    assert_int_equal (zl_store_get_job (store, 32, ZL_PRIORITY_DEFAULT, arena, &rec),
                      ZL_STORE_NOT_FOUND);
    assert_int_equal (zl_store_get_job (store, 3, ZL_PRIORITY_DEFAULT, arena, &rec), ZL_STORE_OK);
    zl_arena_destroy (&arena);
    zl_store_close (&store);
}

int
main (void)
{
    const struct CMUnitTest cases[] = {
        cmocka_unit_test_setup (test_fencing_and_takeover, s_setup),
        cmocka_unit_test_setup (test_foreign_and_newer_schemas_refused, s_setup),
        cmocka_unit_test_setup (test_database_lost_and_back, s_setup),
        cmocka_unit_test_setup (test_unreachable_at_open, s_setup),
        cmocka_unit_test_setup (test_rotation_compacts_and_drops, s_setup),
        cmocka_unit_test_setup (test_rotation_with_commits_under_way, s_setup),
        cmocka_unit_test_setup (test_commit_under_way, s_setup),
    };
    int failed = cmocka_run_group_tests_name ("store_pg", cases, NULL, NULL);
    zlh_pg_stop (&s_pg);
    return failed;
}
