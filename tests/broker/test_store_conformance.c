/*  test_store_conformance: the contracts of broker/store.h, checked through
    store.h alone, so that every store backend passes the same cases. Each
    case gets a fresh, empty store location from the backend under test and
    opens it with zl_store_open; nothing here knows how a backend keeps its
    records. The cases run once per backend in s_backends: LMDB in a fresh
    temp directory now; the PostgreSQL backend adds a row whose location
    maker gives each case a fresh database on the server the harness
    started (a maker that cannot fails the case, saying why: a backend that
    is there is never skipped silently).

    Covered: job and state records put, read (inside the batch and after),
    replaced and deleted; batches and nested batches committed and
    aborted, in_batch through all of them; what a batch did not commit is
    gone after close and open; idempotency keys hit and miss per tenant,
    their class kept, replaced by a later job, pruned by the window of
    their class in bounded steps and past max_keys; next_id and the jobs
    across close and open; recovery in id order with the records and
    states as put; a write or commit failing through the fault hook loses
    its batch and nothing else; has_room and stats basics. Then, once, the
    generic layer's choice of backend by location. LMDB's own matters
    (pages, room, files, upgrades) stay in test_store.c. */
#define _GNU_SOURCE // nftw, mkdtemp
#include "arena.h"
#include "job.h" // the job states a state record holds
#include "log.h"
#include "record.h"
#include "store.h"
#ifdef ZLT_PG_CONFORMANCE
#include "pg_harness.h"
#endif

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <inttypes.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAP_SIZE (64ull << 20)
#define WALL_BASE_MS 1700000000000LL

// ---------------------------------------------------------------- backends
/*  A backend under test: its name (zl_store_backend_name) and how a case
    gets a fresh, empty location and gives it back. make returns 0, or -1
    with why it could not (the case fails). */
typedef struct {
    const char *name;
    int (*make) (char *loc, size_t size, char *why, size_t whylen);
    void (*drop) (const char *loc);
    bool thread; // opened in fsync mode with its commit thread (zl_store_use_commit_thread)
} s_backend_t;

static int
s_rm_entry (const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove (path);
}

// LMDB: a directory inside a fresh temp directory (the store makes it).
static int
s_lmdb_make (char *loc, size_t size, char *why, size_t whylen)
{
    const char *tmp = getenv ("TMPDIR");
    char dir[900];
    snprintf (dir, sizeof dir, "%s/zlane-test-conformance-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp (dir)) {
        snprintf (why, whylen, "mkdtemp %s: %s", dir, strerror (errno));
        return -1;
    }
    snprintf (loc, size, "%s/store", dir);
    return 0;
}

static void
s_lmdb_drop (const char *loc)
{
    char dir[1024];
    snprintf (dir, sizeof dir, "%s", loc);
    char *slash = strrchr (dir, '/');
    if (slash)
        *slash = '\0';
    nftw (dir, s_rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

#ifdef ZLT_PG_CONFORMANCE
// PostgreSQL: a fresh database per case on one cluster the harness started
// for the run (stopped at exit by the harness).
static zlh_pg_t *s_pg;
static int s_pg_dbs;

static int
s_pg_make (char *loc, size_t size, char *why, size_t whylen)
{
    if (!s_pg && !(s_pg = zlh_pg_start ())) {
        snprintf (why, whylen, "the PostgreSQL harness could not start a cluster");
        return -1;
    }
    PGconn *conn = PQconnectdb (zlh_pg_conninfo (s_pg));
    char sql[64];
    snprintf (sql, sizeof sql, "CREATE DATABASE conformance_%d", ++s_pg_dbs);
    PGresult *r = PQexec (conn, sql);
    int rc = PQresultStatus (r) == PGRES_COMMAND_OK ? 0 : -1;
    if (rc != 0)
        snprintf (why, whylen, "%s: %s", sql, PQerrorMessage (conn));
    PQclear (r);
    PQfinish (conn);
    // a later keyword of a connection string wins
    snprintf (loc, size, "%s dbname=conformance_%d", zlh_pg_conninfo (s_pg), s_pg_dbs);
    return rc;
}

static void
s_pg_drop (const char *loc)
{
    (void)loc; // the cluster goes at exit, every database with it
}
#endif

static const s_backend_t s_backends[] = {
    {"lmdb", s_lmdb_make, s_lmdb_drop, false},
    {"lmdb", s_lmdb_make, s_lmdb_drop, true},
#ifdef ZLT_PG_CONFORMANCE
    {"postgresql", s_pg_make, s_pg_drop, false},
#endif
};

static const s_backend_t *s_be; // the backend of the run going on

// ---------------------------------------------------------------- fixture
typedef struct {
    char loc[1024];
    zl_arena_t *arena;
} fx_t;

static int
s_setup (void **state)
{
    zl_log_set_level (ZL_LOG_ERROR);
    fx_t *fx = calloc (1, sizeof *fx);
    char why[256] = "";
    if (s_be->make (fx->loc, sizeof fx->loc, why, sizeof why) != 0) {
        free (fx);
        fail_msg ("%s: no store location: %s", s_be->name, why);
    }
    fx->arena = zl_arena_new (64 * 1024);
    *state = fx;
    return 0;
}

static int
s_teardown (void **state)
{
    fx_t *fx = *state;
    zl_store_set_fault (NULL, NULL);
    s_be->drop (fx->loc);
    zl_arena_destroy (&fx->arena);
    free (fx);
    return 0;
}

static zl_store_t *
s_open_mode (fx_t *fx, zl_durability_t mode)
{
    char err[512] = "";
    zl_store_t *store = zl_store_open (fx->loc, s_be->thread ? ZL_DURABILITY_FSYNC : mode, MAP_SIZE,
                                       err, sizeof err);
    if (!store)
        fail_msg ("zl_store_open %s: %s", fx->loc, err);
    assert_string_equal (zl_store_backend_name (store), s_be->name);
    if (s_be->thread)
        assert_true (zl_store_use_commit_thread (store, 0));
    // a store that several brokers share is led by one: this test's
    zl_store_lead_t lead;
    assert_int_equal (zl_store_elect (store, 0, &lead), ZL_ROLE_LEADER);
    return store;
}

static zl_store_t *
s_open (fx_t *fx)
{
    return s_open_mode (fx, ZL_DURABILITY_NONE);
}

// ---------------------------------------------------------------- records
// The records and their assertions, as in test_store.c.
static const uint8_t PAYLOAD[] = {0x00, 0xff, 'z', 0x00, 0x80, 0x7f, '\n', 0x00};

static zl_job_rec_t
s_job_rec (const char *tenant, const char *lane, const char *key)
{
    static zl_header_t headers[3] = {{"trace", "abc"}, {"empty", ""}, {"utf8", "h\xc3\xa9llo"}};
    zl_job_rec_t rec = {.tenant = tenant,
                        .lane = lane,
                        .payload = {PAYLOAD, sizeof PAYLOAD},
                        .idempotency_key = key,
                        .n_headers = 3,
                        .headers = headers,
                        .max_attempts = 7,
                        .lease_ms = 30000,
                        .max_run_ms = 600000,
                        .enqueued_at_ms = WALL_BASE_MS + 17};
    return rec;
}

static void
s_assert_job_rec (const zl_job_rec_t *got, const zl_job_rec_t *want)
{
    assert_string_equal (got->tenant, want->tenant);
    assert_string_equal (got->lane, want->lane);
    assert_int_equal (got->payload.len, want->payload.len);
    if (want->payload.len)
        assert_memory_equal (got->payload.data, want->payload.data, want->payload.len);
    assert_string_equal (got->idempotency_key, want->idempotency_key);
    assert_int_equal (got->n_headers, want->n_headers);
    for (size_t i = 0; i < want->n_headers; i++) {
        assert_string_equal (got->headers[i].key, want->headers[i].key);
        assert_string_equal (got->headers[i].value, want->headers[i].value);
    }
    assert_int_equal (got->max_attempts, want->max_attempts);
    assert_int_equal (got->lease_ms, want->lease_ms);
    assert_int_equal (got->max_run_ms, want->max_run_ms);
    assert_int_equal (got->enqueued_at_ms, want->enqueued_at_ms);
}

static zl_state_rec_t
s_state_rec (void)
{
    static zl_attempt_t history[3] = {
        {1, "w1", WALL_BASE_MS + 10, WALL_BASE_MS + 20, ZL_OUTCOME_TRANSIENT, "timeout"},
        {2, "worker-two", WALL_BASE_MS + 30, WALL_BASE_MS + 1030, ZL_OUTCOME_LEASE_EXPIRED,
         "lease of 1000 ms lapsed"},
        {3, "", WALL_BASE_MS + 2000, WALL_BASE_MS + 2000, ZL_OUTCOME_BROKER_RESTART, ""}};
    zl_state_rec_t st = {.state = ZL_JOB_LEASED,
                         .attempt = 4,
                         .ready_seq = UINT64_MAX - 3,
                         .due_at_ms = WALL_BASE_MS + 99999,
                         .dead_at_ms = -5, // negative survives
                         .n_history = 3,
                         .history = history,
                         .leased_to = "w1",
                         .started_at_ms = WALL_BASE_MS + 3000};
    return st;
}

static void
s_assert_state_rec (const zl_state_rec_t *got, const zl_state_rec_t *want)
{
    assert_int_equal (got->state, want->state);
    assert_int_equal (got->attempt, want->attempt);
    assert_int_equal (got->ready_seq, want->ready_seq);
    assert_int_equal (got->due_at_ms, want->due_at_ms);
    assert_int_equal (got->dead_at_ms, want->dead_at_ms);
    assert_int_equal (got->n_history, want->n_history);
    for (size_t i = 0; i < want->n_history; i++) {
        assert_int_equal (got->history[i].attempt, want->history[i].attempt);
        assert_string_equal (got->history[i].worker, want->history[i].worker);
        assert_int_equal (got->history[i].started_at_ms, want->history[i].started_at_ms);
        assert_int_equal (got->history[i].ended_at_ms, want->history[i].ended_at_ms);
        assert_int_equal (got->history[i].outcome, want->history[i].outcome);
        assert_string_equal (got->history[i].error, want->history[i].error);
    }
    assert_string_equal (got->leased_to, want->leased_to);
    assert_int_equal (got->started_at_ms, want->started_at_ms);
}

// ---------------------------------------------------------------- recovery
#define MAX_RECOVERED 4096

typedef struct {
    uint64_t id[MAX_RECOVERED];
    bool has_state[MAX_RECOVERED];
    uint32_t state[MAX_RECOVERED];
    uint32_t attempt[MAX_RECOVERED];
    unsigned priority[MAX_RECOVERED];
    char tenant[MAX_RECOVERED][16];
    size_t n;
    uint64_t next_id;
    zl_job_rec_t want_job; // with check: each job must be this record
    zl_state_rec_t want_state;
    uint64_t full_state_id; // the job whose state must be want_state, 0 = none
    bool check;
} recovered_t;

static void
s_collect (void *ctx, uint64_t id, const zl_job_rec_t *job, const zl_state_rec_t *state)
{
    recovered_t *r = ctx;
    assert_non_null (job);
    assert_true (r->n < MAX_RECOVERED);
    if (r->check)
        s_assert_job_rec (job, &r->want_job);
    if (r->full_state_id == id) {
        assert_non_null (state);
        s_assert_state_rec (state, &r->want_state);
    }
    r->has_state[r->n] = state != NULL;
    r->state[r->n] = state ? state->state : 0;
    r->attempt[r->n] = state ? state->attempt : 0;
    r->priority[r->n] = zl_record_priority (job);
    snprintf (r->tenant[r->n], sizeof r->tenant[r->n], "%s", job->tenant);
    r->id[r->n++] = id;
}

// Every stored job in the order recovery gives them: ids strictly rising.
static recovered_t *
s_recover (zl_store_t *store, recovered_t *r)
{
    char err[512] = "";
    if (zl_store_recover (store, s_collect, r, &r->next_id, err, sizeof err) != 0)
        fail_msg ("zl_store_recover: %s", err);
    for (size_t i = 1; i < r->n; i++)
        assert_true (r->id[i] > r->id[i - 1]);
    return r;
}

// ---------------------------------------------------------------- records and batches
static void
test_records_round_trip (void **state)
{
    fx_t *fx = *state;
    zl_store_t *store = s_open (fx);
    zl_job_rec_t job = s_job_rec ("acme", "work", "order-9");
    zl_job_rec_t bare = {.tenant = "t", .lane = "l", .idempotency_key = ""};
    zl_state_rec_t st = s_state_rec ();
    zl_job_rec_t got;
    zl_state_rec_t sgot;
    assert_false (zl_store_in_batch (store));
    zl_store_sub_abort (store); // nothing open: nothing to undo, no crash
    assert_false (zl_store_in_batch (store));
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK); // nothing open: a no-op
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_true (zl_store_in_batch (store));
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK); // already open: the same batch
    assert_int_equal (zl_store_put_job (store, 42, &job), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 43, &bare), ZL_STORE_OK);
    assert_int_equal (zl_store_put_state (store, 42, &st), ZL_STORE_OK);
    // reads inside the batch see its writes
    assert_int_equal (zl_store_get_job (store, 42, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_OK);
    s_assert_job_rec (&got, &job);
    assert_int_equal (zl_store_get_state (store, 42, fx->arena, &sgot), ZL_STORE_OK);
    s_assert_state_rec (&sgot, &st);
    assert_int_equal (zl_store_get_state (store, 43, fx->arena, &sgot), ZL_STORE_NOT_FOUND);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    assert_false (zl_store_in_batch (store));

    // outside any batch; decoded data lives in the arena, past the read
    zl_arena_reset (fx->arena);
    assert_int_equal (zl_store_get_job (store, 42, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_OK);
    assert_int_equal (zl_store_get_state (store, 42, fx->arena, &sgot), ZL_STORE_OK);
    s_assert_job_rec (&got, &job);
    s_assert_state_rec (&sgot, &st);
    assert_int_equal (zl_store_get_job (store, 43, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_OK);
    s_assert_job_rec (&got, &bare);
    assert_int_equal (zl_store_get_state (store, 43, fx->arena, &sgot), ZL_STORE_NOT_FOUND);
    assert_int_equal (zl_store_get_job (store, 44, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_NOT_FOUND);
    assert_int_equal (zl_store_get_state (store, 44, fx->arena, &sgot), ZL_STORE_NOT_FOUND);

    // a state is replaced whole (an empty one too); delete takes the job and its state
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    zl_state_rec_t st2 = {.state = ZL_JOB_DEAD, .attempt = 4, .dead_at_ms = 77, .leased_to = ""};
    assert_int_equal (zl_store_put_state (store, 42, &st2), ZL_STORE_OK);
    assert_int_equal (zl_store_get_state (store, 42, fx->arena, &sgot), ZL_STORE_OK);
    s_assert_state_rec (&sgot, &st2);
    zl_state_rec_t empty = {.state = ZL_JOB_READY, .leased_to = ""};
    assert_int_equal (zl_store_put_state (store, 43, &empty), ZL_STORE_OK);
    assert_int_equal (zl_store_del_job (store, 42, ZL_PRIORITY_DEFAULT), ZL_STORE_OK);
    assert_int_equal (zl_store_del_job (store, 42, ZL_PRIORITY_DEFAULT),
                      ZL_STORE_OK); // gone already: fine
    assert_int_equal (zl_store_del_job (store, 4242, ZL_PRIORITY_DEFAULT),
                      ZL_STORE_OK); // never there: fine
    assert_int_equal (zl_store_get_job (store, 42, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_NOT_FOUND);
    assert_int_equal (zl_store_get_state (store, 42, fx->arena, &sgot), ZL_STORE_NOT_FOUND);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    assert_int_equal (zl_store_get_job (store, 42, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_NOT_FOUND);
    assert_int_equal (zl_store_get_state (store, 43, fx->arena, &sgot), ZL_STORE_OK);
    assert_int_equal (sgot.state, ZL_JOB_READY);
    assert_int_equal (sgot.n_history, 0);
    assert_string_equal (sgot.leased_to, "");
    zl_store_close (&store);
    assert_null (store);
    zl_store_close (&store); // NULL-safe

    // all of it after close and open, in the other durability mode too
    store = s_open_mode (fx, ZL_DURABILITY_FSYNC);
    assert_int_equal (zl_store_get_job (store, 42, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_NOT_FOUND);
    assert_int_equal (zl_store_get_job (store, 43, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_OK);
    s_assert_job_rec (&got, &bare);
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 44, &job), ZL_STORE_OK);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    zl_store_close (&store);
    store = s_open (fx);
    assert_int_equal (zl_store_get_job (store, 44, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_OK);
    s_assert_job_rec (&got, &job);
    zl_store_close (&store);
}

static void
test_nested_batches_commit_and_abort (void **state)
{
    fx_t *fx = *state;
    zl_store_t *store = s_open (fx);
    zl_job_rec_t job = s_job_rec ("acme", "work", "");
    zl_job_rec_t keyed = s_job_rec ("acme", "work", "dup-key");
    zl_state_rec_t st = {.state = ZL_JOB_DELAYED, .due_at_ms = 5, .leased_to = ""};
    zl_idem_rec_t idem = {2, 100};
    zl_job_rec_t got;
    zl_state_rec_t sgot;
    zl_idem_rec_t igot;
    // a nested batch opens the turn's batch if none is open
    assert_int_equal (zl_store_sub_begin (store), ZL_STORE_OK);
    assert_true (zl_store_in_batch (store));
    assert_int_equal (zl_store_put_job (store, 1, &job), ZL_STORE_OK);
    assert_int_equal (zl_store_sub_commit (store), ZL_STORE_OK);
    assert_true (zl_store_in_batch (store)); // the turn's batch stays open
    // a Submit's nested batch that is refused
    assert_int_equal (zl_store_sub_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 2, &keyed), ZL_STORE_OK);
    assert_int_equal (zl_store_put_state (store, 2, &st), ZL_STORE_OK);
    assert_int_equal (zl_store_put_idem (store, "acme", "dup-key", &idem), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 3, &job), ZL_STORE_OK);
    assert_int_equal (zl_store_set_next_id (store, 50), ZL_STORE_OK);
    // the nested batch sees its own writes and the turn's
    assert_int_equal (zl_store_get_job (store, 1, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_OK);
    assert_int_equal (zl_store_get_job (store, 2, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_OK);
    assert_int_equal (zl_store_get_state (store, 2, fx->arena, &sgot), ZL_STORE_OK);
    assert_int_equal (zl_store_get_idem (store, "acme", "dup-key", &igot), ZL_STORE_OK);
    zl_store_sub_abort (store);
    assert_true (zl_store_in_batch (store));
    // only the nested writes went
    assert_int_equal (zl_store_get_job (store, 1, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_OK);
    assert_int_equal (zl_store_get_job (store, 2, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_NOT_FOUND);
    assert_int_equal (zl_store_get_job (store, 3, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_NOT_FOUND);
    assert_int_equal (zl_store_get_state (store, 2, fx->arena, &sgot), ZL_STORE_NOT_FOUND);
    assert_int_equal (zl_store_get_idem (store, "acme", "dup-key", &igot), ZL_STORE_NOT_FOUND);
    // the next one is accepted: its writes join the turn
    assert_int_equal (zl_store_sub_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 4, &keyed), ZL_STORE_OK);
    idem.job_id = 4;
    assert_int_equal (zl_store_put_idem (store, "acme", "dup-key", &idem), ZL_STORE_OK);
    assert_int_equal (zl_store_sub_commit (store), ZL_STORE_OK);
    assert_int_equal (zl_store_get_job (store, 4, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_OK);
    // writes straight in the turn's batch, between nested ones
    assert_int_equal (zl_store_put_state (store, 1, &st), ZL_STORE_OK);
    // a nested batch left open at commit is dropped, the rest committed
    assert_int_equal (zl_store_sub_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 5, &job), ZL_STORE_OK);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    assert_false (zl_store_in_batch (store));
    // a turn that only aborted its nested batch commits nothing of it
    assert_int_equal (zl_store_sub_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 6, &job), ZL_STORE_OK);
    zl_store_sub_abort (store);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    zl_store_close (&store);

    store = s_open (fx);
    assert_int_equal (zl_store_get_job (store, 1, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_OK);
    assert_int_equal (zl_store_get_state (store, 1, fx->arena, &sgot), ZL_STORE_OK);
    assert_int_equal (sgot.state, ZL_JOB_DELAYED);
    assert_int_equal (zl_store_get_job (store, 2, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_NOT_FOUND);
    assert_int_equal (zl_store_get_job (store, 3, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_NOT_FOUND);
    assert_int_equal (zl_store_get_job (store, 4, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_OK);
    s_assert_job_rec (&got, &keyed);
    assert_int_equal (zl_store_get_job (store, 5, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_NOT_FOUND);
    assert_int_equal (zl_store_get_job (store, 6, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_NOT_FOUND);
    assert_int_equal (zl_store_get_idem (store, "acme", "dup-key", &igot), ZL_STORE_OK);
    assert_int_equal (igot.job_id, 4);
    recovered_t *r = calloc (1, sizeof *r);
    s_recover (store, r);
    assert_int_equal (r->n, 2);
    assert_int_equal (r->next_id, 5); // the aborted set_next_id (50) is not on record
    free (r);
    zl_store_close (&store);
}

static void
test_uncommitted_batch_is_gone_after_reopen (void **state)
{
    fx_t *fx = *state;
    zl_store_t *store = s_open (fx);
    zl_job_rec_t job = s_job_rec ("acme", "work", "k");
    zl_state_rec_t st = s_state_rec ();
    zl_idem_rec_t idem = {2, 1};
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 1, &job), ZL_STORE_OK);
    assert_int_equal (zl_store_set_next_id (store, 2), ZL_STORE_OK);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    // a turn that never commits: nothing of it was acknowledged
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 2, &job), ZL_STORE_OK);
    assert_int_equal (zl_store_put_state (store, 1, &st), ZL_STORE_OK);
    assert_int_equal (zl_store_put_idem (store, "acme", "k", &idem), ZL_STORE_OK);
    assert_int_equal (zl_store_del_job (store, 1, ZL_PRIORITY_DEFAULT), ZL_STORE_OK);
    assert_int_equal (zl_store_set_next_id (store, 100), ZL_STORE_OK);
    zl_store_close (&store); // aborts the open batch

    store = s_open (fx);
    assert_false (zl_store_in_batch (store));
    zl_job_rec_t got;
    zl_state_rec_t sgot;
    zl_idem_rec_t igot;
    assert_int_equal (zl_store_get_job (store, 1, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_OK);
    assert_int_equal (zl_store_get_state (store, 1, fx->arena, &sgot), ZL_STORE_NOT_FOUND);
    assert_int_equal (zl_store_get_job (store, 2, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_NOT_FOUND);
    assert_int_equal (zl_store_get_idem (store, "acme", "k", &igot), ZL_STORE_NOT_FOUND);
    recovered_t *r = calloc (1, sizeof *r);
    s_recover (store, r);
    assert_int_equal (r->n, 1);
    assert_int_equal (r->id[0], 1);
    assert_int_equal (r->next_id, 2); // the stored counter, not the uncommitted 100
    free (r);
    zl_store_close (&store);
}

// ---------------------------------------------------------------- ids and recovery
static void
test_next_id_persists_across_close_and_open (void **state)
{
    fx_t *fx = *state;
    zl_job_rec_t job = s_job_rec ("acme", "work", "");
    // an empty store starts at 1
    zl_store_t *store = s_open (fx);
    recovered_t *r = calloc (1, sizeof *r);
    s_recover (store, r);
    assert_int_equal (r->n, 0);
    assert_int_equal (r->next_id, 1);
    // the counter alone (every job acked and deleted) survives
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 1, &job), ZL_STORE_OK);
    assert_int_equal (zl_store_set_next_id (store, 1000), ZL_STORE_OK);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_del_job (store, 1, ZL_PRIORITY_DEFAULT), ZL_STORE_OK);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    zl_store_close (&store);
    store = s_open (fx);
    memset (r, 0, sizeof *r);
    s_recover (store, r);
    assert_int_equal (r->n, 0);
    assert_int_equal (r->next_id, 1000);
    // the last one set wins, in a batch and across batches
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_set_next_id (store, 1500), ZL_STORE_OK);
    assert_int_equal (zl_store_set_next_id (store, 2000), ZL_STORE_OK);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    zl_store_close (&store);
    store = s_open_mode (fx, ZL_DURABILITY_FSYNC);
    memset (r, 0, sizeof *r);
    s_recover (store, r);
    assert_int_equal (r->next_id, 2000);
    // a stored job past the counter raises it: ids stay unique
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 5000, &job), ZL_STORE_OK);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    zl_store_close (&store);
    store = s_open (fx);
    memset (r, 0, sizeof *r);
    s_recover (store, r);
    assert_int_equal (r->n, 1);
    assert_int_equal (r->next_id, 5001);
    free (r);
    zl_store_close (&store);
}

static void
test_recover_in_id_order_with_records_and_states (void **state)
{
    fx_t *fx = *state;
    zl_store_t *store = s_open (fx);
    zl_job_rec_t job = s_job_rec ("acme", "work", "key");
    zl_state_rec_t full = s_state_rec ();
    // ids put out of order, over several batches, some with states; big
    // ids keep numeric order (not byte order)
    static const uint64_t ids[] = {17,  3,   256,  1,     255,        4096, 65536,
                                   257, 100, 1000, 70000, 1ull << 40, 2,    (1ull << 40) + 1};
    enum { N = sizeof ids / sizeof ids[0] };
    for (size_t i = 0; i < N; i++) {
        if (i % 5 == 0)
            assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
        assert_int_equal (zl_store_put_job (store, ids[i], &job), ZL_STORE_OK);
        if (ids[i] % 2 == 1) {
            zl_state_rec_t st = {.state = ZL_JOB_DELAYED,
                                 .attempt = (uint32_t)(ids[i] % 7),
                                 .due_at_ms = (int64_t)ids[i],
                                 .leased_to = ""};
            assert_int_equal (zl_store_put_state (store, ids[i], &st), ZL_STORE_OK);
        }
        if (i % 5 == 4 || i == N - 1)
            assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    }
    // one full state, one job deleted, one state replaced
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_put_state (store, 256, &full), ZL_STORE_OK);
    assert_int_equal (zl_store_del_job (store, 255, ZL_PRIORITY_DEFAULT), ZL_STORE_OK);
    zl_state_rec_t dead = {.state = ZL_JOB_DEAD, .attempt = 9, .leased_to = ""};
    assert_int_equal (zl_store_put_state (store, 17, &dead), ZL_STORE_OK);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    zl_store_close (&store);

    store = s_open (fx);
    recovered_t *r = calloc (1, sizeof *r);
    r->check = true;
    r->want_job = job;
    r->want_state = full;
    r->full_state_id = 256;
    s_recover (store, r); // checks rising ids and every record
    assert_int_equal (r->n, N - 1);
    assert_int_equal (r->next_id, (1ull << 40) + 2);
    size_t k = 0;
    uint64_t sorted[N];
    memcpy (sorted, ids, sizeof sorted);
    for (size_t i = 0; i < N; i++) // insertion sort: the order recovery must give
        for (size_t j = i; j > 0 && sorted[j] < sorted[j - 1]; j--) {
            uint64_t t = sorted[j];
            sorted[j] = sorted[j - 1];
            sorted[j - 1] = t;
        }
    for (size_t i = 0; i < N; i++) {
        if (sorted[i] == 255)
            continue;
        uint64_t id = sorted[i];
        assert_int_equal (r->id[k], id);
        if (id == 256) {
            assert_true (r->has_state[k]);
            assert_int_equal (r->state[k], ZL_JOB_LEASED);
        } else if (id == 17) {
            assert_true (r->has_state[k]);
            assert_int_equal (r->state[k], ZL_JOB_DEAD);
            assert_int_equal (r->attempt[k], 9);
        } else if (id % 2 == 1) {
            assert_true (r->has_state[k]);
            assert_int_equal (r->state[k], ZL_JOB_DELAYED);
            assert_int_equal (r->attempt[k], id % 7);
        } else
            assert_false (r->has_state[k]); // never attempted: NULL
        k++;
    }
    free (r);
    zl_store_close (&store);
}

// Jobs of every priority (the LMDB store keeps a tree per priority): each
// is found under its own priority and under a wrong one, deleted under a
// wrong one, moved when put again with another; a nested batch dropped
// between appends; recovery merges them back in id order.
static void
test_priorities_found_and_recovered_in_id_order (void **state)
{
    fx_t *fx = *state;
    zl_store_t *store = s_open (fx);
    zl_job_rec_t job = s_job_rec ("acme", "work", "");
    enum { N = 40 };
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    for (uint64_t id = 1; id <= N; id++) {
        job.priority_plus1 = (uint32_t)(id * 7 % 10) + 1;
        assert_int_equal (zl_store_put_job (store, id, &job), ZL_STORE_OK);
        if (id % 4 == 0) {
            zl_state_rec_t st = {.state = ZL_JOB_DELAYED, .attempt = (uint32_t)id, .leased_to = ""};
            assert_int_equal (zl_store_put_state (store, id, &st), ZL_STORE_OK);
        }
    }
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    // a dropped nested batch of appends to a priority's tree, then more
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_sub_begin (store), ZL_STORE_OK);
    job.priority_plus1 = 10;
    assert_int_equal (zl_store_put_job (store, N + 1, &job), ZL_STORE_OK);
    zl_store_sub_abort (store);
    assert_int_equal (zl_store_put_job (store, N + 2, &job), ZL_STORE_OK);
    // 12 again with priority 0 (it was 4): one record, found as 0
    job.priority_plus1 = 1;
    assert_int_equal (zl_store_put_job (store, 12, &job), ZL_STORE_OK);
    // 7 (priority 9) deleted under a wrong priority, with its state
    assert_int_equal (zl_store_del_job (store, 7, 2), ZL_STORE_OK);
    assert_int_equal (zl_store_del_job (store, 8, 6), ZL_STORE_OK); // 8 had a state
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    zl_job_rec_t got;
    for (uint64_t id = 1; id <= N + 2; id++) {
        unsigned want = id == 12 ? 0 : (unsigned)(id * 7 % 10);
        bool gone = id == 7 || id == 8 || id == N + 1;
        for (unsigned hint = 0; hint <= ZL_PRIORITY_MAX; hint += 3) {
            zl_arena_reset (fx->arena);
            zl_store_rc_t rc = zl_store_get_job (store, id, hint, fx->arena, &got);
            assert_int_equal (rc, gone ? ZL_STORE_NOT_FOUND : ZL_STORE_OK);
            if (!gone)
                assert_int_equal (zl_record_priority (&got), id == N + 2 ? 9 : want);
        }
        zl_state_rec_t st;
        if (id == 8)
            assert_int_equal (zl_store_get_state (store, id, fx->arena, &st), ZL_STORE_NOT_FOUND);
    }
    zl_store_close (&store);

    store = s_open (fx);
    recovered_t *r = calloc (1, sizeof *r);
    s_recover (store, r); // ids strictly rising: 12 comes once
    assert_int_equal (r->n, N - 2 + 1);
    size_t k = 0;
    for (uint64_t id = 1; id <= N + 2; id++) {
        if (id == 7 || id == 8 || id == N + 1)
            continue;
        assert_int_equal (r->id[k], id);
        assert_int_equal (r->priority[k], id == 12 ? 0 : id == N + 2 ? 9 : id * 7 % 10);
        assert_int_equal (r->has_state[k], id % 4 == 0 && id <= N);
        k++;
    }
    assert_int_equal (r->next_id, N + 3);
    zl_store_stats_t ss;
    zl_store_stats (store, &ss);
    assert_int_equal (ss.jobs, N - 1);
    free (r);
    zl_store_close (&store);
}

// Many jobs and states over many batches: recovery walks them all, the
// merge of jobs and states keeps up.
static void
test_recover_many (void **state)
{
    fx_t *fx = *state;
    zl_store_t *store = s_open (fx);
    enum { N = 3000 };
    char tenant[16];
    for (uint64_t id = 1; id <= N; id++) {
        if (id % 500 == 1)
            assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
        snprintf (tenant, sizeof tenant, "t%llu", (unsigned long long)(id % 13));
        zl_job_rec_t job = {.tenant = tenant, .lane = "work", .idempotency_key = ""};
        assert_int_equal (zl_store_put_job (store, id, &job), ZL_STORE_OK);
        if (id % 3 == 0) {
            zl_state_rec_t st = {.state = ZL_JOB_READY, .attempt = 1, .leased_to = ""};
            assert_int_equal (zl_store_put_state (store, id, &st), ZL_STORE_OK);
        }
        if (id % 500 == 0)
            assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    }
    zl_store_close (&store);
    store = s_open (fx);
    recovered_t *r = calloc (1, sizeof *r);
    s_recover (store, r);
    assert_int_equal (r->n, N);
    for (size_t i = 0; i < N; i++) {
        uint64_t id = i + 1;
        assert_int_equal (r->id[i], id);
        assert_int_equal (r->has_state[i], id % 3 == 0);
        snprintf (tenant, sizeof tenant, "t%llu", (unsigned long long)(id % 13));
        assert_string_equal (r->tenant[i], tenant);
    }
    assert_int_equal (r->next_id, N + 1);
    zl_store_stats_t ss;
    zl_store_stats (store, &ss);
    assert_int_equal (ss.jobs, N);
    assert_int_equal (ss.states, N / 3);
    free (r);
    zl_store_close (&store);
}

// ---------------------------------------------------------------- idempotency keys
static void
s_put_key_of (zl_store_t *store, uint64_t id, const char *tenant, const char *key, int64_t seen,
              bool generated)
{
    zl_job_rec_t rec = {.tenant = tenant, .lane = "work", .idempotency_key = key};
    zl_idem_rec_t idem = {id, seen, generated};
    assert_int_equal (zl_store_put_job (store, id, &rec), ZL_STORE_OK);
    assert_int_equal (zl_store_put_idem (store, tenant, key, &idem), ZL_STORE_OK);
}

static bool
s_has_key (zl_store_t *store, const char *tenant, const char *key, uint64_t *job_id)
{
    zl_idem_rec_t rec;
    zl_store_rc_t rc = zl_store_get_idem (store, tenant, key, &rec);
    assert_true (rc == ZL_STORE_OK || rc == ZL_STORE_NOT_FOUND);
    if (rc == ZL_STORE_OK && job_id)
        *job_id = rec.job_id;
    return rc == ZL_STORE_OK;
}

static void
test_idempotency_hit_miss_and_replace (void **state)
{
    fx_t *fx = *state;
    zl_store_t *store = s_open (fx);
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    s_put_key_of (store, 1, "acme", "k1", 1000, false);
    s_put_key_of (store, 2, "acme", "k2", 2000, true);
    s_put_key_of (store, 3, "globex", "k1", 3000, false);
    // the longest tenant (128) and key (256) the broker accepts
    char long_tenant[129], long_key[257];
    memset (long_tenant, 't', sizeof long_tenant - 1);
    long_tenant[sizeof long_tenant - 1] = '\0';
    memset (long_key, 'q', sizeof long_key - 1);
    long_key[sizeof long_key - 1] = '\0';
    s_put_key_of (store, 5, long_tenant, long_key, 5000, false);
    // the tenant/key boundary is unambiguous
    s_put_key_of (store, 6,
                  "a\x1f"
                  "b",
                  "c", 6000, false);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);

    zl_idem_rec_t rec;
    assert_int_equal (zl_store_get_idem (store, "acme", "k1", &rec), ZL_STORE_OK);
    assert_int_equal (rec.job_id, 1);
    assert_int_equal (rec.seen_at_ms, 1000);
    assert_false (rec.generated);
    assert_int_equal (zl_store_get_idem (store, "acme", "k2", &rec), ZL_STORE_OK);
    assert_int_equal (rec.job_id, 2);
    assert_int_equal (rec.seen_at_ms, 2000);
    assert_true (rec.generated); // the class round trips
    uint64_t id = 0;
    assert_true (s_has_key (store, "globex", "k1", &id));
    assert_int_equal (id, 3);
    assert_true (s_has_key (store, long_tenant, long_key, &id));
    assert_int_equal (id, 5);
    assert_false (s_has_key (store, "acme", long_key, NULL));
    // misses: another tenant, another key, a prefix, a longer key
    assert_false (s_has_key (store, "globex", "k2", NULL));
    assert_false (s_has_key (store, "acme", "k3", NULL));
    assert_false (s_has_key (store, "acme", "k", NULL));
    assert_false (s_has_key (store, "acme", "k1x", NULL));
    assert_false (s_has_key (store, "acm", "ek1", NULL));
    assert_false (s_has_key (store, "a",
                             "b\x1f"
                             "c",
                             NULL));
    assert_true (s_has_key (store,
                            "a\x1f"
                            "b",
                            "c", &id));
    assert_int_equal (id, 6);

    // a key put again names the later job (and its class); the keys
    // outlive their jobs; an aborted nested put leaves the old record
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    s_put_key_of (store, 7, "acme", "k1", 7000, true);
    assert_int_equal (zl_store_del_job (store, 3, ZL_PRIORITY_DEFAULT), ZL_STORE_OK);
    assert_int_equal (zl_store_sub_begin (store), ZL_STORE_OK);
    s_put_key_of (store, 8, "acme", "k2", 8000, false);
    zl_store_sub_abort (store);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    zl_store_close (&store);
    store = s_open (fx);
    assert_int_equal (zl_store_get_idem (store, "acme", "k1", &rec), ZL_STORE_OK);
    assert_int_equal (rec.job_id, 7);
    assert_int_equal (rec.seen_at_ms, 7000);
    assert_true (rec.generated);
    assert_int_equal (zl_store_get_idem (store, "acme", "k2", &rec), ZL_STORE_OK);
    assert_int_equal (rec.job_id, 2);
    assert_true (s_has_key (store, "globex", "k1", &id)); // its job went, the key stays
    assert_int_equal (id, 3);
    zl_store_stats_t ss;
    zl_store_stats (store, &ss);
    assert_int_equal (ss.idem_keys, 5);
    zl_store_close (&store);
}

/*  A Submit's pattern: a key looked up (absent), then put. A key put twice
    after one lookup, a lookup then another key's put then the key's, a
    put in a nested batch dropped and the key looked up and put again, a
    lookup that finds the key then a put: each key names its last job and
    is one key in the index, in the batch, after its commit and reopened. */
static void
test_idempotency_lookup_then_put (void **state)
{
    fx_t *fx = *state;
    zl_store_t *store = s_open (fx);
    uint64_t id = 0;
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_false (s_has_key (store, "acme", "p-1", NULL));
    s_put_key_of (store, 1, "acme", "p-1", 1000, true);
    s_put_key_of (store, 2, "acme", "p-1", 1001, true); // no lookup between
    assert_false (s_has_key (store, "acme", "p-2", NULL));
    s_put_key_of (store, 3, "acme", "p-3", 1002, true); // another key first
    s_put_key_of (store, 4, "acme", "p-2", 1003, true);
    s_put_key_of (store, 5, "acme", "p-3", 1004, true);
    assert_false (s_has_key (store, "acme", "p-4", NULL));
    assert_int_equal (zl_store_sub_begin (store), ZL_STORE_OK);
    s_put_key_of (store, 6, "acme", "p-4", 1005, true);
    zl_store_sub_abort (store);
    assert_false (s_has_key (store, "acme", "p-4", NULL));
    s_put_key_of (store, 7, "acme", "p-4", 1006, true);
    assert_true (s_has_key (store, "acme", "p-1", &id)); // found: the put replaces
    assert_int_equal (id, 2);
    s_put_key_of (store, 8, "acme", "p-1", 1007, true);
    static const struct {
        const char *key;
        uint64_t id;
    } want[] = {{"p-1", 8}, {"p-2", 4}, {"p-3", 5}, {"p-4", 7}};
    for (int pass = 0; pass < 3; pass++) { // in the batch, committed, reopened
        if (pass == 1)
            assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
        if (pass == 2) {
            zl_store_close (&store);
            store = s_open (fx);
        }
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
            assert_true (s_has_key (store, "acme", want[i].key, &id));
            if (id != want[i].id)
                fail_msg ("pass %d: %s names job %" PRIu64 ", wanted %" PRIu64, pass, want[i].key,
                          id, want[i].id);
        }
        if (pass) {
            zl_store_stats_t ss;
            zl_store_stats (store, &ss);
            assert_int_equal (ss.idem_keys, 4);
        }
    }
    zl_store_close (&store);
}

static void
test_idempotency_windows_by_class_and_prune (void **state)
{
    fx_t *fx = *state;
    zl_store_t *store = s_open (fx);
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    s_put_key_of (store, 1, "acme", "user-1", 1000, false);
    for (uint64_t i = 2; i <= 11; i++) {
        char key[32];
        snprintf (key, sizeof key, "lib-%llu", (unsigned long long)i);
        s_put_key_of (store, i, "acme", key, 1000 + (int64_t)i, true);
    }
    s_put_key_of (store, 12, "acme", "user-12", 2000, false);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    zl_store_stats_t ss;
    zl_store_stats (store, &ss);
    assert_int_equal (ss.idem_keys, 12);
    assert_int_equal (ss.idem_resend_log, 10);
    assert_int_equal (ss.idem_user_log, 2);

    zl_idem_policy_t policy = {.resend_window_ms = 600, .user_window_ms = 86400000};
    // outside a batch, and inside a nested one, pruning does nothing
    assert_int_equal (zl_store_prune_idem (store, 1000 + 86400000, &policy, 100), 0);
    assert_int_equal (zl_store_sub_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_prune_idem (store, 1000 + 86400000, &policy, 100), 0);
    zl_store_sub_abort (store);
    // nothing due yet
    assert_int_equal (zl_store_prune_idem (store, 1500, &policy, 100), 0);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    assert_true (s_has_key (store, "acme", "lib-2", NULL));
    // at 1607 the library's keys seen up to 1007 are done: 2..7, in two
    // bounded steps (expired once now - seen >= window)
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_prune_idem (store, 1607, &policy, 4), 4);
    assert_false (s_has_key (store, "acme", "lib-5", NULL));
    assert_true (s_has_key (store, "acme", "lib-6", NULL));
    assert_int_equal (zl_store_prune_idem (store, 1607, &policy, 100), 2);
    assert_int_equal (zl_store_prune_idem (store, 1607, &policy, 100), 0);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    for (uint64_t i = 2; i <= 11; i++) {
        char key[32];
        snprintf (key, sizeof key, "lib-%llu", (unsigned long long)i);
        if (s_has_key (store, "acme", key, NULL) != (i > 7))
            fail_msg ("%s %s at 1607", key, i > 7 ? "gone" : "kept");
    }
    assert_true (s_has_key (store, "acme", "user-1", NULL)); // older, but a user's key
    // pruned keys stay gone after close and open; the jobs stay
    zl_store_close (&store);
    store = s_open (fx);
    assert_false (s_has_key (store, "acme", "lib-2", NULL));
    zl_job_rec_t rec;
    assert_int_equal (zl_store_get_job (store, 2, ZL_PRIORITY_DEFAULT, fx->arena, &rec),
                      ZL_STORE_OK);
    // a day later the users' keys go too
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_prune_idem (store, 1000 + 86400000, &policy, 100), 5);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    assert_false (s_has_key (store, "acme", "user-1", NULL));
    assert_true (s_has_key (store, "acme", "user-12", NULL));
    zl_store_stats (store, &ss);
    assert_int_equal (ss.idem_keys, 1);
    assert_int_equal (ss.dedup_evicted, 0);
    // a key used again in the other class: the new job's, in the new window
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    s_put_key_of (store, 13, "acme", "user-12", 3000, true);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    zl_store_prune_idem (store, 3599, &policy, 100);
    assert_true (s_has_key (store, "acme", "user-12", NULL));
    zl_store_prune_idem (store, 3600, &policy, 100);
    assert_false (s_has_key (store, "acme", "user-12", NULL));
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    zl_store_stats (store, &ss);
    assert_int_equal (ss.idem_keys, 0);
    assert_int_equal (ss.idem_resend_log + ss.idem_user_log, 0);
    zl_store_close (&store);
}

// Past max_keys the keys whose window is most used up go first, counted in
// dedup_evicted; below the bound nothing goes early.
static void
test_idempotency_bound (void **state)
{
    fx_t *fx = *state;
    zl_store_t *store = s_open (fx);
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    // users' keys (window 10000) seen at 0..9, library keys (window 1000)
    // seen at 500..509: at 900 a library key has used 40 % of its window, a
    // user's key 9 %
    for (uint64_t i = 0; i < 10; i++) {
        char key[32];
        snprintf (key, sizeof key, "user-%llu", (unsigned long long)i);
        s_put_key_of (store, 1 + i, "acme", key, (int64_t)i, false);
        snprintf (key, sizeof key, "lib-%llu", (unsigned long long)i);
        s_put_key_of (store, 100 + i, "acme", key, 500 + (int64_t)i, true);
    }
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    zl_idem_policy_t policy = {.resend_window_ms = 1000, .user_window_ms = 10000, .max_keys = 20};
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_prune_idem (store, 900, &policy, 100), 0); // at the bound
    policy.max_keys = 15;
    assert_int_equal (zl_store_prune_idem (store, 900, &policy, 100), 5);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    zl_store_stats_t ss;
    zl_store_stats (store, &ss);
    assert_int_equal (ss.idem_keys, 15);
    assert_int_equal (ss.dedup_evicted, 5);
    assert_int_equal (ss.dedup_expired, 0);
    // the library's keys went, oldest first; every user's key stayed
    for (uint64_t i = 0; i < 10; i++) {
        char key[32];
        snprintf (key, sizeof key, "lib-%llu", (unsigned long long)i);
        if (s_has_key (store, "acme", key, NULL) != (i >= 5))
            fail_msg ("%s %s past the bound", key, i >= 5 ? "gone" : "kept");
        snprintf (key, sizeof key, "user-%llu", (unsigned long long)i);
        assert_true (s_has_key (store, "acme", key, NULL));
    }
    zl_store_close (&store);
}

// ---------------------------------------------------------------- faults
typedef struct {
    int commit_error; // what commits fail with, 0 = none
    int write_error;  // what the write_at-th write from now fails with
    int write_at;
    int writes, commits;
} faults_t;

static int
s_fault (void *ctx, zl_store_fault_t where)
{
    faults_t *f = ctx;
    if (where == ZL_STORE_FAULT_FLUSH) // the commit thread's: not a write
        return 0;
    if (where == ZL_STORE_FAULT_COMMIT) {
        f->commits++;
        return f->commit_error;
    }
    if (++f->writes == f->write_at) {
        f->write_at = 0;
        return f->write_error;
    }
    return 0;
}

static void
test_faults_lose_the_batch (void **state)
{
    fx_t *fx = *state;
    zl_store_t *store = s_open (fx);
    zl_job_rec_t job = s_job_rec ("acme", "work", "");
    zl_state_rec_t st = s_state_rec ();
    zl_idem_rec_t idem = {2, 1};
    zl_job_rec_t got;
    zl_idem_rec_t igot;
    faults_t f = {0};
    zl_store_set_fault (s_fault, &f);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK); // no batch: the hook is not asked
    assert_int_equal (f.commits, 0);
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 1, &job), ZL_STORE_OK);
    assert_int_equal (zl_store_set_next_id (store, 2), ZL_STORE_OK);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    assert_int_equal (f.commits, 1);
    assert_int_equal (f.writes, 2);

    // 1. the commit fails: the whole batch is lost, the batch is closed
    f.commit_error = EIO;
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 2, &job), ZL_STORE_OK);
    assert_int_equal (zl_store_put_state (store, 1, &st), ZL_STORE_OK);
    assert_int_equal (zl_store_put_idem (store, "acme", "k", &idem), ZL_STORE_OK);
    assert_int_equal (zl_store_del_job (store, 1, ZL_PRIORITY_DEFAULT), ZL_STORE_OK);
    assert_int_equal (zl_store_set_next_id (store, 3), ZL_STORE_OK);
    assert_int_equal (zl_store_commit (store), ZL_STORE_ERROR);
    assert_false (zl_store_in_batch (store));
    f.commit_error = 0;
    assert_int_equal (zl_store_get_job (store, 1, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_OK);
    assert_int_equal (zl_store_get_job (store, 2, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_NOT_FOUND);
    assert_int_equal (zl_store_get_idem (store, "acme", "k", &igot), ZL_STORE_NOT_FOUND);
    zl_state_rec_t sgot;
    assert_int_equal (zl_store_get_state (store, 1, fx->arena, &sgot), ZL_STORE_NOT_FOUND);

    // 2. the next batch works
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 3, &job), ZL_STORE_OK);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);

    // 3. a write fails: it says so, and the commit of its batch fails too
    // (the hook is not asked again for it), losing the writes before it
    f.write_error = EIO;
    f.write_at = 2;
    f.writes = f.commits = 0;
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 4, &job), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 5, &job), ZL_STORE_ERROR);
    assert_int_equal (zl_store_put_job (store, 6, &job), ZL_STORE_OK);
    assert_int_equal (zl_store_commit (store), ZL_STORE_ERROR);
    assert_int_equal (f.commits, 0);
    assert_false (zl_store_in_batch (store));
    for (uint64_t id = 4; id <= 6; id++)
        assert_int_equal (zl_store_get_job (store, id, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                          ZL_STORE_NOT_FOUND);

    // 4. a write of a nested batch fails: its sub_commit fails and drops
    // it; the turn's batch and its other writes commit
    f.write_at = 2;
    f.writes = 0;
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 7, &job), ZL_STORE_OK); // write 1
    assert_int_equal (zl_store_sub_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 8, &job), ZL_STORE_ERROR); // write 2
    assert_true (zl_store_sub_commit (store) != ZL_STORE_OK);
    assert_true (zl_store_in_batch (store));
    assert_int_equal (zl_store_sub_begin (store), ZL_STORE_OK); // the next Submit
    assert_int_equal (zl_store_put_job (store, 9, &job), ZL_STORE_OK);
    assert_int_equal (zl_store_sub_commit (store), ZL_STORE_OK);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    assert_int_equal (zl_store_get_job (store, 7, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_OK);
    assert_int_equal (zl_store_get_job (store, 8, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_NOT_FOUND);
    assert_int_equal (zl_store_get_job (store, 9, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_OK);

    // 5. a write that finds no room says FULL, and so does its commit
    f.write_error = ENOSPC;
    f.write_at = 1;
    f.writes = 0;
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_put_state (store, 7, &st), ZL_STORE_FULL);
    assert_int_equal (zl_store_commit (store), ZL_STORE_FULL);
    assert_int_equal (zl_store_get_state (store, 7, fx->arena, &sgot), ZL_STORE_NOT_FOUND);

    // 6. the hook removed: nothing of the lost batches came back
    zl_store_set_fault (NULL, NULL);
    zl_store_close (&store);
    store = s_open (fx);
    recovered_t *r = calloc (1, sizeof *r);
    s_recover (store, r);
    static const uint64_t kept[] = {1, 3, 7, 9};
    assert_int_equal (r->n, 4);
    for (size_t i = 0; i < 4; i++)
        assert_int_equal (r->id[i], kept[i]);
    assert_int_equal (r->next_id, 10);
    free (r);
    zl_store_close (&store);
}

// ---------------------------------------------------------------- room and stats
static void
test_room_and_stats (void **state)
{
    fx_t *fx = *state;
    zl_store_t *store = s_open (fx);
    zl_job_rec_t job = s_job_rec ("acme", "work", "");
    zl_state_rec_t st = {.state = ZL_JOB_READY, .leased_to = ""};
    zl_store_stats_t ss;
    zl_store_stats (store, &ss);
    assert_int_equal (ss.jobs, 0);
    assert_int_equal (ss.states, 0);
    assert_int_equal (ss.idem_keys, 0);
    assert_int_equal (ss.commits, 0);
    // an empty store has room for a job, outside a batch and inside one
    assert_true (zl_store_has_room (store, 1024));
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_true (zl_store_has_room (store, 1024));
    for (uint64_t id = 1; id <= 10; id++) {
        assert_int_equal (zl_store_put_job (store, id, &job), ZL_STORE_OK);
        if (id <= 4)
            assert_int_equal (zl_store_put_state (store, id, &st), ZL_STORE_OK);
    }
    zl_idem_rec_t idem = {1, 5, false};
    assert_int_equal (zl_store_put_idem (store, "acme", "k", &idem), ZL_STORE_OK);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    zl_store_stats (store, &ss);
    assert_int_equal (ss.jobs, 10);
    assert_int_equal (ss.states, 4);
    assert_int_equal (ss.idem_keys, 1);
    assert_int_equal (ss.idem_user_log, 1);
    assert_int_equal (ss.idem_resend_log, 0);
    assert_int_equal (ss.commits, 1);
    assert_true (ss.commit_max_us <= ss.commit_us);
    // an empty commit counts too; a commit with nothing open does not
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_del_job (store, 1, ZL_PRIORITY_DEFAULT), ZL_STORE_OK);
    assert_int_equal (zl_store_del_job (store, 10, ZL_PRIORITY_DEFAULT), ZL_STORE_OK);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    zl_store_stats (store, &ss);
    assert_int_equal (ss.jobs, 8);
    assert_int_equal (ss.states, 3);
    assert_int_equal (ss.commits, 2);
    // stats inside a batch count what is committed and what it wrote
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 11, &job), ZL_STORE_OK);
    zl_store_stats (store, &ss);
    assert_true (ss.jobs == 8 || ss.jobs == 9);
    assert_true (zl_store_in_batch (store)); // stats leave the batch open
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    assert_true (zl_store_has_room (store, 1024));
    zl_store_close (&store);
}

// ---------------------------------------------------------------- locations
// The generic layer (store.c), once: which backend a location names, what
// a log may show of it, and the refusals.
static void
test_locations (void **state)
{
    (void)state;
    static const struct {
        const char *loc;
        zl_store_kind_t kind;
    } kinds[] = {
        {"/var/lib/zlane", ZL_STORE_KIND_LMDB},
        {"./zlane-data", ZL_STORE_KIND_LMDB},
        {"zlane-data", ZL_STORE_KIND_LMDB},
        {"dir with spaces/and=equals", ZL_STORE_KIND_LMDB},
        {"a=b", ZL_STORE_KIND_LMDB}, // not a libpq keyword: a directory
        {"./host=db1", ZL_STORE_KIND_LMDB},
        {"postgresql://zlane@db1/zlane", ZL_STORE_KIND_POSTGRESQL},
        {"postgres://db1:5433/zlane?sslmode=require", ZL_STORE_KIND_POSTGRESQL},
        {"postgresql:///zlane?host=/run/postgresql", ZL_STORE_KIND_POSTGRESQL},
        {"host=db1 dbname=zlane", ZL_STORE_KIND_POSTGRESQL},
        {"  dbname = zlane", ZL_STORE_KIND_POSTGRESQL},
        {"host=a,b target_session_attrs=read-write", ZL_STORE_KIND_POSTGRESQL},
        {"service=zlane", ZL_STORE_KIND_POSTGRESQL},
        {"mysql://db1/zlane", ZL_STORE_KIND_UNKNOWN},
        {"file:///var/lib/zlane", ZL_STORE_KIND_UNKNOWN},
    };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (zl_store_location_kind (kinds[i].loc) != kinds[i].kind)
            fail_msg ("'%s': kind %d, want %d", kinds[i].loc, zl_store_location_kind (kinds[i].loc),
                      kinds[i].kind);

    static const struct {
        const char *loc, *safe;
    } safe[] = {
        {"/var/lib/zlane", "/var/lib/zlane"},
        {"postgresql://zlane@db1/zlane", "postgresql://zlane@db1/zlane"},
        {"postgresql://zlane:s3cret@db1:5432/zlane", "postgresql://zlane:***@db1:5432/zlane"},
        {"postgres://u:p@ss@db1/zlane", "postgres://u:***@db1/zlane"},
        {"postgresql://db1/zlane?user=u&password=s3cret&sslmode=require",
         "postgresql://db1/zlane?user=u&password=***&sslmode=require"},
        {"host=db1 password=s3cret dbname=zlane", "host=db1 password=*** dbname=zlane"},
        {"host=db1 password = 's3 \\' cret' dbname=zlane", "host=db1 password = *** dbname=zlane"},
        {"password=s3cret", "password=***"},
        {"host=db1 passfile=/etc/pgpass", "host=db1 passfile=/etc/pgpass"},
    };
    char out[256];
    for (size_t i = 0; i < sizeof safe / sizeof safe[0]; i++) {
        zl_store_location_safe (safe[i].loc, out, sizeof out);
        assert_string_equal (out, safe[i].safe);
    }
    zl_store_location_safe ("postgresql://u:secret@host/db", out, 20); // truncated, no overflow
    assert_true (strlen (out) <= 19);
    assert_null (strstr (out, "secret"));

    // a PostgreSQL location: with the backend built in, a database that does
    // not answer yet opens unreachable (the broker retries and refuses
    // Submits meanwhile); without it, refused saying so. Either way the
    // password stays out of the message.
    char err[512] = "";
    zl_store_t *store = zl_store_open ("postgresql://zlane:s3cret@127.0.0.1:1/zlane",
                                       ZL_DURABILITY_FSYNC, MAP_SIZE, err, sizeof err);
#ifdef ZL_HAVE_PG
    assert_non_null (store);
    assert_string_equal (zl_store_backend_name (store), "postgresql");
    zl_store_lead_t lead;
    assert_int_equal (zl_store_elect (store, 0, &lead), ZL_ROLE_UNREACHABLE);
    assert_int_equal (zl_store_role (store), ZL_ROLE_UNREACHABLE);
    zl_store_close (&store);
#else
    assert_null (store);
    assert_non_null (strstr (err, "built without the PostgreSQL store"));
#endif
    assert_null (strstr (err, "s3cret"));
    err[0] = '\0';
    store = zl_store_open ("mysql://db1/zlane", ZL_DURABILITY_FSYNC, MAP_SIZE, err, sizeof err);
    assert_null (store);
    assert_non_null (strstr (err, "unknown kind of store"));
}

// With the commit thread the keys are pruned by the commit, in its
// transaction: zl_store_prune_idem asks for it (and says 0); the commit
// forgets the keys whose window ended and, past max_keys, the most used
// up; reads in the batch meanwhile still find them (the broker compares
// a key's time with its window).
static void
test_idempotency_pruned_at_the_commit (void **state)
{
    fx_t *fx = *state;
    zl_store_t *store = s_open (fx);
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    s_put_key_of (store, 1, "acme", "user-1", 1000, false);
    for (uint64_t i = 2; i <= 11; i++) {
        char key[32];
        snprintf (key, sizeof key, "lib-%llu", (unsigned long long)i);
        s_put_key_of (store, i, "acme", key, 1000 + (int64_t)i, true);
    }
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    zl_idem_policy_t policy = {.resend_window_ms = 600, .user_window_ms = 3600000};
    // lib-2..lib-7 ended their 600 ms by 1607 (a batch that writes: one that
    // only asks for the pruning commits at most once a second)
    zl_job_rec_t rec = s_job_rec ("acme", "work", NULL);
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 20, &rec), ZL_STORE_OK);
    assert_int_equal (zl_store_prune_idem (store, 1607, &policy, 100), 0);
    assert_true (s_has_key (store, "acme", "lib-2", NULL)); // until the commit
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    assert_false (s_has_key (store, "acme", "lib-2", NULL));
    assert_false (s_has_key (store, "acme", "lib-7", NULL));
    assert_true (s_has_key (store, "acme", "lib-8", NULL));
    assert_true (s_has_key (store, "acme", "user-1", NULL));
    zl_store_stats_t ss;
    zl_store_stats (store, &ss);
    assert_int_equal (ss.dedup_expired, 6);
    assert_int_equal (ss.idem_keys, 5);
    // past the bound: the library keys have used more of their window
    policy.resend_window_ms = 100000;
    policy.max_keys = 3;
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 21, &rec), ZL_STORE_OK);
    zl_store_prune_idem (store, 1700, &policy, 100);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    zl_store_stats (store, &ss);
    assert_int_equal (ss.idem_keys, 3);
    assert_int_equal (ss.dedup_evicted, 2);
    assert_true (s_has_key (store, "acme", "user-1", NULL));
    assert_false (s_has_key (store, "acme", "lib-9", NULL));
    assert_true (s_has_key (store, "acme", "lib-10", NULL));
    assert_true (s_has_key (store, "acme", "lib-11", NULL));
    zl_store_close (&store);
}

// With the commit thread: the next batch is written and read while one
// commits. Reads see the batch being committed and the open one (the
// latest write of a record wins, a delete hides it), a nested batch
// aborted in the open one takes back only its own writes, and a failed
// commit drops the batch written after it too.
static void
test_commit_thread_overlaps_the_next_batch (void **state)
{
    fx_t *fx = *state;
    zl_store_t *store = s_open (fx);
    zl_job_rec_t a = s_job_rec ("t1", "a", NULL), b = s_job_rec ("t2", "b", NULL), got;
    zl_state_rec_t st = s_state_rec ();
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 1, &a), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 2, &a), ZL_STORE_OK);
    assert_int_equal (zl_store_put_state (store, 2, &st), ZL_STORE_OK);
    assert_int_equal (zl_store_commit_start (store), ZL_STORE_PENDING);
    assert_true (zl_store_commit_pending (store));
    assert_true (zl_store_commit_fd (store) >= 0);
    // the next batch, while that one commits
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 1, &b), ZL_STORE_OK); // replaced
    assert_int_equal (zl_store_del_job (store, 2, ZL_PRIORITY_DEFAULT), ZL_STORE_OK);
    assert_int_equal (zl_store_sub_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 3, &a), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 1, &a), ZL_STORE_OK);
    zl_store_sub_abort (store); // 3 never was, 1 is b's again
    assert_int_equal (zl_store_get_job (store, 1, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_OK);
    assert_string_equal (got.tenant, "t2");
    assert_int_equal (zl_store_get_job (store, 2, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_NOT_FOUND);
    zl_state_rec_t st_got;
    assert_int_equal (zl_store_get_state (store, 2, fx->arena, &st_got), ZL_STORE_NOT_FOUND);
    assert_int_equal (zl_store_get_job (store, 3, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_NOT_FOUND);
    // the first commit ends; the open batch is still read over it
    assert_int_equal (zl_store_commit_finish (store, true), ZL_STORE_OK);
    assert_false (zl_store_commit_pending (store));
    assert_int_equal (zl_store_get_job (store, 1, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_OK);
    assert_string_equal (got.tenant, "t2");
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    // all of it after close and open
    zl_store_close (&store);
    store = s_open (fx);
    assert_int_equal (zl_store_get_job (store, 1, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_OK);
    assert_string_equal (got.tenant, "t2");
    assert_int_equal (zl_store_get_job (store, 2, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_NOT_FOUND);
    assert_int_equal (zl_store_get_state (store, 2, fx->arena, &st_got), ZL_STORE_NOT_FOUND);
    // a commit that fails in the thread (a record larger than the map) while
    // the next batch is written: both batches go, and the store goes on
    size_t big = (size_t)MAP_SIZE + (1u << 20);
    uint8_t *payload = calloc (1, big);
    zl_job_rec_t huge = s_job_rec ("t1", "a", NULL);
    huge.payload = (zl_bytes_t){payload, big};
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 4, &a), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 5, &huge), ZL_STORE_OK);
    assert_int_equal (zl_store_commit_start (store), ZL_STORE_PENDING);
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 6, &a), ZL_STORE_OK);
    assert_int_equal (zl_store_commit_finish (store, true), ZL_STORE_FULL);
    free (payload);
    assert_false (zl_store_in_batch (store));
    for (uint64_t id = 4; id <= 6; id++)
        assert_int_equal (zl_store_get_job (store, id, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                          ZL_STORE_NOT_FOUND);
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 7, &a), ZL_STORE_OK);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    zl_store_close (&store);
    store = s_open (fx);
    assert_int_equal (zl_store_get_job (store, 7, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_OK);
    assert_int_equal (zl_store_get_job (store, 4, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_NOT_FOUND);
    zl_store_close (&store);
}

// ---------------------------------------------------------------- main
#define T(fn) cmocka_unit_test_setup_teardown (fn, s_setup, s_teardown)

int
main (void)
{
    const struct CMUnitTest cases[] = {
        T (test_records_round_trip),
        T (test_nested_batches_commit_and_abort),
        T (test_uncommitted_batch_is_gone_after_reopen),
        T (test_next_id_persists_across_close_and_open),
        T (test_recover_in_id_order_with_records_and_states),
        T (test_recover_many),
        T (test_priorities_found_and_recovered_in_id_order),
        T (test_idempotency_hit_miss_and_replace),
        T (test_idempotency_lookup_then_put),
        T (test_idempotency_windows_by_class_and_prune),
        T (test_idempotency_bound),
        T (test_faults_lose_the_batch),
        T (test_room_and_stats),
    };
    const struct CMUnitTest generic[] = {
        cmocka_unit_test (test_locations),
    };
    // with the commit thread, pruning is the commit's (one case of its own)
    // and the overlap of two batches has a case
    const struct CMUnitTest threaded[] = {
        T (test_records_round_trip),
        T (test_nested_batches_commit_and_abort),
        T (test_uncommitted_batch_is_gone_after_reopen),
        T (test_next_id_persists_across_close_and_open),
        T (test_recover_in_id_order_with_records_and_states),
        T (test_recover_many),
        T (test_priorities_found_and_recovered_in_id_order),
        T (test_idempotency_hit_miss_and_replace),
        T (test_idempotency_pruned_at_the_commit),
        T (test_faults_lose_the_batch),
        T (test_room_and_stats),
        T (test_commit_thread_overlaps_the_next_batch),
    };
    int failed = 0;
    for (size_t b = 0; b < sizeof s_backends / sizeof s_backends[0]; b++) {
        s_be = &s_backends[b];
        char name[64];
        snprintf (name, sizeof name, "store conformance: %s%s", s_be->name,
                  s_be->thread ? ", commit thread" : "");
        if (s_be->thread)
            failed += _cmocka_run_group_tests (name, threaded, sizeof threaded / sizeof threaded[0],
                                               NULL, NULL);
        else
            failed +=
                _cmocka_run_group_tests (name, cases, sizeof cases / sizeof cases[0], NULL, NULL);
    }
    failed += cmocka_run_group_tests_name ("store locations", generic, NULL, NULL);
    return failed;
}
