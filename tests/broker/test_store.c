/*  test_store: the durable job store (broker/store.c, common/record.c) on a
    real LMDB environment in a fresh temp directory per test. Records round
    trip; nested batches undo only their own writes; what a batch did not
    commit is gone after a restart (also after a crash: a child process that
    exits without closing), what it committed survives in both durability
    modes; recovery through zl_jobs rebuilds the same ready queues, timers,
    dead-letter queue and id counter, and fails the attempts that were running;
    idempotency keys hit, miss and expire in time order; foreign or damaged
    directories are refused with a reason; a full map is reported, never a
    crash; job ids append and still accept a smaller id. */
#define _GNU_SOURCE // nftw, mkdtemp
#include "arena.h"
#include "config.h"
#include "clock.h"
#include "dlq.h"
#include "job.h"
#include "jobs.h"
#include "lane.h"
#include "log.h"
#include "record.h"
#include "rng.h"
#include "siphash.h"
#include "scheduler.h"
#include "store.h"
#include "timers.h"
#include "workers.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdbool.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAP_SIZE (64ull << 20)
#define MAX_JOBS 64

#define MONO_BASE_MS 5000000LL
#define MONO_BASE2_MS 9000000LL // the restarted broker's monotonic clock
#define WALL_BASE_MS 1700000000000LL

// ---------------------------------------------------------------- temp dirs
static int
s_rm_entry (const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove (path);
}

typedef struct {
    char dir[1024];
    zl_arena_t *arena;
    char mounted[1100]; // a tmpfs this test mounted ("" = none): unmounted at teardown
} fx_t;

static int
s_setup (void **state)
{
    zl_log_set_level (ZL_LOG_ERROR);
    fx_t *fx = calloc (1, sizeof *fx);
    const char *tmp = getenv ("TMPDIR");
    snprintf (fx->dir, sizeof fx->dir, "%s/zlane-test-store-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    assert_non_null (mkdtemp (fx->dir));
    fx->arena = zl_arena_new (64 * 1024);
    *state = fx;
    return 0;
}

static int
s_teardown (void **state)
{
    fx_t *fx = *state;
    if (fx->mounted[0] && umount2 (fx->mounted, 0) != 0)
        umount2 (fx->mounted, MNT_DETACH); // still busy (a failed test left the store open)
    nftw (fx->dir, s_rm_entry, 8, FTW_DEPTH | FTW_PHYS);
    zl_arena_destroy (&fx->arena);
    free (fx);
    return 0;
}

static zl_store_t *
s_open_mode (const char *dir, zl_durability_t mode, uint64_t map_size)
{
    char err[512] = "";
    zl_store_t *store = zl_store_open (dir, mode, map_size, err, sizeof err);
    if (!store)
        fail_msg ("zl_store_open %s: %s", dir, err);
    return store;
}

static zl_store_t *
s_open (const char *dir)
{
    return s_open_mode (dir, ZL_DURABILITY_NONE, MAP_SIZE);
}

static void
s_path (char *out, size_t size, const char *dir, const char *name)
{
    int n = snprintf (out, size, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= size)
        fail_msg ("path too long: %s/%s", dir, name);
}

static void
s_write_file (const char *path, const void *data, size_t len)
{
    int fd = open (path, O_WRONLY | O_CREAT | O_TRUNC, 0640);
    assert_true (fd >= 0);
    assert_int_equal (write (fd, data, len), (ssize_t)len);
    close (fd);
}

// ---------------------------------------------------------------- records
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

// The codec alone: prepare/write/decode, and bytes that are no record.
static void
test_record_codec (void **state)
{
    fx_t *fx = *state;
    zl_job_rec_t job = s_job_rec ("acme", "work", "key-1");
    void *h;
    size_t n = zl_record_job_prepare (fx->arena, &job, &h);
    assert_true (n > sizeof PAYLOAD);
    uint8_t *buf = malloc (n);
    assert_int_equal (zl_record_write (h, buf), n);
    zl_job_rec_t got;
    assert_int_equal (zl_record_job_decode (fx->arena, buf, n, &got), 0);
    s_assert_job_rec (&got, &job);
    free (buf);

    zl_state_rec_t st = s_state_rec ();
    n = zl_record_state_prepare (fx->arena, &st, &h);
    buf = malloc (n);
    assert_int_equal (zl_record_write (h, buf), n);
    zl_state_rec_t sgot;
    assert_int_equal (zl_record_state_decode (fx->arena, buf, n, &sgot), 0);
    s_assert_state_rec (&sgot, &st);
    free (buf);

    // an empty state (no history, no strings) round trips too
    zl_state_rec_t empty = {.state = ZL_JOB_READY};
    n = zl_record_state_prepare (fx->arena, &empty, &h);
    buf = malloc (n ? n : 1);
    assert_int_equal (zl_record_write (h, buf), n);
    assert_int_equal (zl_record_state_decode (fx->arena, buf, n, &sgot), 0);
    assert_int_equal (sgot.state, ZL_JOB_READY);
    assert_int_equal (sgot.n_history, 0);
    assert_string_equal (sgot.leased_to, "");
    free (buf);

    zl_idem_rec_t idem = {UINT64_MAX - 1, -123456789012345LL}, igot;
    uint8_t ib[32];
    size_t in = zl_record_idem_encode (&idem, ib);
    assert_true (in > 0 && in <= sizeof ib);
    assert_int_equal (zl_record_idem_decode (ib, in, &igot), 0);
    assert_int_equal (igot.job_id, idem.job_id);
    assert_int_equal (igot.seen_at_ms, idem.seen_at_ms);

    // not a record: a truncated length, a bad wire type
    static const uint8_t bad1[] = {0x0a, 0x7f, 'a'};        // string of 127 bytes, 1 given
    static const uint8_t bad2[] = {0x0f, 0xff, 0xff, 0xff}; // wire type 7
    assert_int_equal (zl_record_job_decode (fx->arena, bad1, sizeof bad1, &got), -1);
    assert_int_equal (zl_record_job_decode (fx->arena, bad2, sizeof bad2, &got), -1);
    assert_int_equal (zl_record_state_decode (fx->arena, bad2, sizeof bad2, &sgot), -1);
    assert_int_equal (zl_record_idem_decode (bad2, sizeof bad2, &igot), -1);
}

static void
test_store_round_trip (void **state)
{
    fx_t *fx = *state;
    zl_store_t *store = s_open (fx->dir);
    zl_job_rec_t job = s_job_rec ("acme", "work", "order-9");
    zl_job_rec_t bare = {.tenant = "t", .lane = "l", .idempotency_key = ""};
    zl_state_rec_t st = s_state_rec ();
    zl_idem_rec_t idem = {42, WALL_BASE_MS + 17};
    assert_false (zl_store_in_batch (store));
    zl_store_sub_abort (store); // nothing open: nothing to undo, no crash
    assert_false (zl_store_in_batch (store));
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_true (zl_store_in_batch (store));
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK); // already open: the same batch
    assert_int_equal (zl_store_put_job (store, 42, &job), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 43, &bare), ZL_STORE_OK);
    assert_int_equal (zl_store_put_state (store, 42, &st), ZL_STORE_OK);
    assert_int_equal (zl_store_put_idem (store, "acme", "order-9", &idem), ZL_STORE_OK);
    // reads inside the batch see its writes
    zl_job_rec_t got;
    zl_state_rec_t sgot;
    zl_idem_rec_t igot;
    assert_int_equal (zl_store_get_job (store, 42, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_OK);
    s_assert_job_rec (&got, &job);
    assert_int_equal (zl_store_get_state (store, 42, fx->arena, &sgot), ZL_STORE_OK);
    s_assert_state_rec (&sgot, &st);
    assert_int_equal (zl_store_get_idem (store, "acme", "order-9", &igot), ZL_STORE_OK);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    assert_false (zl_store_in_batch (store));
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK); // nothing open: no-op

    // outside any batch, after the commit; decoded data outlives the read
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
    assert_int_equal (zl_store_get_idem (store, "acme", "order-9", &igot), ZL_STORE_OK);
    assert_int_equal (igot.job_id, 42);
    assert_int_equal (igot.seen_at_ms, WALL_BASE_MS + 17);

    zl_store_stats_t ss;
    zl_store_stats (store, &ss);
    assert_int_equal (ss.jobs, 2);
    assert_int_equal (ss.states, 1);
    assert_int_equal (ss.idem_keys, 1);
    assert_int_equal (ss.commits, 1);
    assert_int_equal (ss.map_size, MAP_SIZE);
    assert_true (ss.used_bytes > 0 && ss.used_bytes < MAP_SIZE);
    assert_true (ss.file_bytes > 0);

    // a state record is replaced; delete takes the job and its state
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    zl_state_rec_t st2 = {.state = ZL_JOB_DEAD, .attempt = 4, .dead_at_ms = 77, .leased_to = ""};
    assert_int_equal (zl_store_put_state (store, 42, &st2), ZL_STORE_OK);
    assert_int_equal (zl_store_get_state (store, 42, fx->arena, &sgot), ZL_STORE_OK);
    s_assert_state_rec (&sgot, &st2);
    assert_int_equal (zl_store_del_job (store, 42, ZL_PRIORITY_DEFAULT), ZL_STORE_OK);
    assert_int_equal (zl_store_del_job (store, 42, ZL_PRIORITY_DEFAULT),
                      ZL_STORE_OK); // gone already: fine
    assert_int_equal (zl_store_get_job (store, 42, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_NOT_FOUND);
    assert_int_equal (zl_store_get_state (store, 42, fx->arena, &sgot), ZL_STORE_NOT_FOUND);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    // the idempotency key outlives the job (the dedup window is longer)
    assert_int_equal (zl_store_get_idem (store, "acme", "order-9", &igot), ZL_STORE_OK);
    zl_store_stats (store, &ss);
    assert_int_equal (ss.jobs, 1);
    assert_int_equal (ss.states, 0);
    assert_int_equal (ss.commits, 2);
    zl_store_close (&store);
    assert_null (store);
    zl_store_close (&store); // NULL-safe
}

// ---------------------------------------------------------------- recovery of ids
typedef struct {
    uint64_t id[4096];
    bool has_state[4096];
    uint32_t state[4096];
    size_t n;
    uint64_t next_id;
} ids_t;

static void
s_collect (void *ctx, uint64_t id, const zl_job_rec_t *job, const zl_state_rec_t *state)
{
    ids_t *ids = ctx;
    assert_non_null (job);
    assert_true (ids->n < 4096);
    ids->has_state[ids->n] = state != NULL;
    ids->state[ids->n] = state ? state->state : 0;
    ids->id[ids->n++] = id;
}

// Every stored job id in the order recovery gives them.
static ids_t
s_recover_ids (zl_store_t *store)
{
    static ids_t ids;
    memset (&ids, 0, sizeof ids);
    char err[512] = "";
    if (zl_store_recover (store, s_collect, &ids, &ids.next_id, err, sizeof err) != 0)
        fail_msg ("zl_store_recover: %s", err);
    for (size_t i = 1; i < ids.n; i++)
        assert_true (ids.id[i] > ids.id[i - 1]);
    return ids;
}

// ---------------------------------------------------------------- batches
static void
test_nested_batch_abort_and_commit (void **state)
{
    fx_t *fx = *state;
    zl_store_t *store = s_open (fx->dir);
    zl_job_rec_t job = s_job_rec ("acme", "work", "");
    zl_job_rec_t keyed = s_job_rec ("acme", "work", "dup-key");
    zl_state_rec_t st = {.state = ZL_JOB_DELAYED, .due_at_ms = 5, .leased_to = ""};
    zl_idem_rec_t idem = {2, 100};
    zl_job_rec_t got;
    zl_state_rec_t sgot;
    zl_idem_rec_t igot;
    // the turn's batch, then a Submit's nested batch that is refused
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 1, &job), ZL_STORE_OK);
    assert_int_equal (zl_store_sub_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 2, &keyed), ZL_STORE_OK);
    assert_int_equal (zl_store_put_state (store, 2, &st), ZL_STORE_OK);
    assert_int_equal (zl_store_put_idem (store, "acme", "dup-key", &idem), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 3, &job), ZL_STORE_OK);
    // the nested batch sees its own writes and the turn's
    assert_int_equal (zl_store_get_job (store, 1, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_OK);
    assert_int_equal (zl_store_get_job (store, 2, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_OK);
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
    // the next Submit's nested batch is accepted: its writes join the turn
    assert_int_equal (zl_store_sub_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 4, &keyed), ZL_STORE_OK);
    idem.job_id = 4;
    assert_int_equal (zl_store_put_idem (store, "acme", "dup-key", &idem), ZL_STORE_OK);
    assert_int_equal (zl_store_sub_commit (store), ZL_STORE_OK);
    assert_true (zl_store_in_batch (store));
    assert_int_equal (zl_store_get_job (store, 4, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_OK);
    // a nested batch left open at commit is dropped, the rest committed
    assert_int_equal (zl_store_sub_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 5, &job), ZL_STORE_OK);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    zl_store_close (&store);

    store = s_open (fx->dir);
    assert_int_equal (zl_store_get_job (store, 1, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_OK);
    assert_int_equal (zl_store_get_job (store, 2, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_NOT_FOUND);
    assert_int_equal (zl_store_get_job (store, 3, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_NOT_FOUND);
    assert_int_equal (zl_store_get_job (store, 4, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_OK);
    s_assert_job_rec (&got, &keyed);
    assert_int_equal (zl_store_get_job (store, 5, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_NOT_FOUND);
    assert_int_equal (zl_store_get_idem (store, "acme", "dup-key", &igot), ZL_STORE_OK);
    assert_int_equal (igot.job_id, 4);
    zl_store_close (&store);
}

static void
test_uncommitted_batch_is_gone_after_reopen (void **state)
{
    fx_t *fx = *state;
    zl_store_t *store = s_open (fx->dir);
    zl_job_rec_t job = s_job_rec ("acme", "work", "k");
    zl_idem_rec_t idem = {1, 1};
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 1, &job), ZL_STORE_OK);
    assert_int_equal (zl_store_set_next_id (store, 2), ZL_STORE_OK);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    // a turn that never commits: nothing of it was acknowledged
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 2, &job), ZL_STORE_OK);
    assert_int_equal (zl_store_put_idem (store, "acme", "k", &idem), ZL_STORE_OK);
    assert_int_equal (zl_store_del_job (store, 1, ZL_PRIORITY_DEFAULT), ZL_STORE_OK);
    assert_int_equal (zl_store_set_next_id (store, 100), ZL_STORE_OK);
    zl_store_close (&store); // aborts the open batch

    store = s_open (fx->dir);
    zl_job_rec_t got;
    zl_idem_rec_t igot;
    assert_int_equal (zl_store_get_job (store, 1, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_OK);
    assert_int_equal (zl_store_get_job (store, 2, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_NOT_FOUND);
    assert_int_equal (zl_store_get_idem (store, "acme", "k", &igot), ZL_STORE_NOT_FOUND);
    ids_t ids = s_recover_ids (store);
    assert_int_equal (ids.n, 1);
    assert_int_equal (ids.id[0], 1);
    assert_int_equal (ids.next_id, 2); // the stored counter, not the uncommitted 100
    zl_store_close (&store);
}

// ---------------------------------------------------------------- durability
// What a batch committed is there after a clean close and after a crash (a
// child process that commits, then dies inside the next batch without
// closing), in both durability modes; the dying batch leaves nothing.
static void
s_child_commit_then_die (const char *dir, zl_durability_t mode)
{
    char err[512] = "";
    zl_store_t *store = zl_store_open (dir, mode, MAP_SIZE, err, sizeof err);
    if (!store)
        _exit (10);
    zl_job_rec_t job = s_job_rec ("acme", "work", "crash-key");
    zl_idem_rec_t idem = {11, 5};
    if (zl_store_begin (store) || zl_store_put_job (store, 11, &job) ||
        zl_store_put_idem (store, "acme", "crash-key", &idem) || zl_store_set_next_id (store, 12) ||
        zl_store_commit (store))
        _exit (11);
    // acknowledged up to here; the next turn never commits
    if (zl_store_begin (store) || zl_store_put_job (store, 12, &job) ||
        zl_store_del_job (store, 11, ZL_PRIORITY_DEFAULT))
        _exit (12);
    _exit (0); // no close, no commit: a crash
}

static void
test_committed_data_survives_in_both_modes (void **state)
{
    fx_t *fx = *state;
    zl_durability_t modes[2] = {ZL_DURABILITY_FSYNC, ZL_DURABILITY_NONE};
    for (int m = 0; m < 2; m++) {
        char dir[1100];
        snprintf (dir, sizeof dir, "%s/mode-%d", fx->dir, m);
        // clean close
        zl_store_t *store = s_open_mode (dir, modes[m], MAP_SIZE);
        zl_job_rec_t job = s_job_rec ("acme", "work", "");
        zl_state_rec_t st = s_state_rec ();
        assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
        for (uint64_t id = 1; id <= 10; id++)
            assert_int_equal (zl_store_put_job (store, id, &job), ZL_STORE_OK);
        assert_int_equal (zl_store_put_state (store, 5, &st), ZL_STORE_OK);
        assert_int_equal (zl_store_set_next_id (store, 11), ZL_STORE_OK);
        assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
        zl_store_stats_t ss;
        zl_store_stats (store, &ss);
        assert_int_equal (ss.commits, 1);
        zl_store_close (&store);
        store = s_open_mode (dir, modes[m], MAP_SIZE);
        ids_t ids = s_recover_ids (store);
        assert_int_equal (ids.n, 10);
        assert_int_equal (ids.next_id, 11);
        assert_true (ids.has_state[4]);
        assert_int_equal (ids.state[4], ZL_JOB_LEASED);
        assert_false (ids.has_state[3]);
        zl_store_rc_t rc;
        zl_state_rec_t sgot;
        rc = zl_store_get_state (store, 5, fx->arena, &sgot);
        assert_int_equal (rc, ZL_STORE_OK);
        s_assert_state_rec (&sgot, &st);
        zl_store_close (&store);

        // crash
        char cdir[1100];
        snprintf (cdir, sizeof cdir, "%s/crash-%d", fx->dir, m);
        pid_t pid = fork ();
        assert_true (pid >= 0);
        if (pid == 0)
            s_child_commit_then_die (cdir, modes[m]);
        int status = 0;
        assert_int_equal (waitpid (pid, &status, 0), pid);
        assert_true (WIFEXITED (status));
        assert_int_equal (WEXITSTATUS (status), 0);
        store = s_open_mode (cdir, modes[m], MAP_SIZE);
        zl_job_rec_t got;
        zl_idem_rec_t igot;
        assert_int_equal (zl_store_get_job (store, 11, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                          ZL_STORE_OK);
        zl_job_rec_t want = s_job_rec ("acme", "work", "crash-key");
        s_assert_job_rec (&got, &want);
        assert_int_equal (zl_store_get_job (store, 12, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                          ZL_STORE_NOT_FOUND);
        assert_int_equal (zl_store_get_idem (store, "acme", "crash-key", &igot), ZL_STORE_OK);
        assert_int_equal (igot.job_id, 11);
        ids = s_recover_ids (store);
        assert_int_equal (ids.n, 1);
        assert_int_equal (ids.next_id, 12);
        zl_store_close (&store);
    }
}

// ---------------------------------------------------------------- recovery
// A broker's job side without sockets: lanes, scheduler (FIFO, so pop order
// is the stored ready order), timers, workers, jobs and the store.
typedef struct {
    zl_broker_config_t cfg;
    zl_lanes_t *lanes;
    zl_sched_t *sched;
    zl_timers_t *timers;
    zl_rng_t rng;
    zl_workers_t *workers;
    zl_store_t *store;
    zl_jobs_t *jobs;
    zl_lane_t *work, *mail, *bulk;
    zl_worker_conn_t *w1, *w2, *w3;
    zl_now_t now; // the clock this life of the broker reads
    size_t restored;
} world_t;

static zl_now_t
s_clock (int64_t mono_base, int64_t ms)
{
    zl_now_t now = {.mono_ms = mono_base + ms,
                    .mono_us = (mono_base + ms) * 1000,
                    .wall_ms = WALL_BASE_MS + ms};
    return now;
}

static zl_worker_conn_t *
s_add_worker (world_t *w, const char *name)
{
    zl_peer_t peer;
    memset (&peer, 0, sizeof peer);
    peer.len = (uint8_t)strlen (name);
    memcpy (peer.data, name, peer.len);
    zl_lane_t *lanes[3] = {w->work, w->mail, w->bulk};
    return zl_workers_add (w->workers, &peer, name, 0, NULL, lanes, 3, 100, w->now.mono_ms);
}

static world_t *
s_world_new (const char *dir, zl_now_t now)
{
    world_t *w = calloc (1, sizeof *w);
    w->now = now;
    zl_broker_config_defaults (&w->cfg);
    zl_lane_config_t *lc = zl_broker_config_lane (&w->cfg, "work");
    lc->lease_ms = 60000;
    lc->max_attempts = 3;
    lc->backoff_base_ms = 0; // a transient failure is ready again at once
    lc->jitter = false;
    lc = zl_broker_config_lane (&w->cfg, "mail");
    lc->lease_ms = 60000;
    lc->max_attempts = 2;
    lc->backoff_base_ms = 0;
    lc->jitter = false;
    lc = zl_broker_config_lane (&w->cfg, "bulk");
    lc->lease_ms = 60000;
    lc->max_attempts = 1;
    w->lanes = zl_lanes_new (&w->cfg);
    w->work = zl_lanes_lookup (w->lanes, "work");
    w->mail = zl_lanes_lookup (w->lanes, "mail");
    w->bulk = zl_lanes_lookup (w->lanes, "bulk");
    w->sched = zl_sched_new (ZL_SCHED_FIFO);
    w->timers = zl_timers_new ();
    zl_rng_seed (&w->rng, 3);
    w->workers = zl_workers_new ();
    w->store = s_open (dir);
    w->jobs = zl_jobs_new (w->sched, w->timers, &w->rng, w->store);
    w->w1 = s_add_worker (w, "w1");
    w->w2 = s_add_worker (w, "w2");
    w->w3 = s_add_worker (w, "w3");
    return w;
}

static void
s_world_destroy (world_t **w_p)
{
    world_t *w = *w_p;
    zl_jobs_destroy (&w->jobs);
    zl_workers_destroy (&w->workers);
    zl_timers_destroy (&w->timers);
    zl_sched_destroy (&w->sched);
    zl_lanes_destroy (&w->lanes);
    zl_broker_config_free (&w->cfg);
    zl_store_close (&w->store);
    free (w);
    *w_p = NULL;
}

// Commit the turn as the broker does (the id counter with it).
static void
s_world_commit (world_t *w)
{
    assert_int_equal (zl_jobs_store_error (w->jobs), ZL_STORE_OK);
    assert_int_equal (zl_store_begin (w->store), ZL_STORE_OK);
    assert_int_equal (zl_store_set_next_id (w->store, zl_jobs_next_id (w->jobs)), ZL_STORE_OK);
    assert_int_equal (zl_store_commit (w->store), ZL_STORE_OK);
    assert_int_equal (zl_store_begin (w->store), ZL_STORE_OK);
}

static zl_job_t *
s_w_accept (world_t *w, zl_lane_t *lane, const char *tenant, uint32_t delay_ms,
            uint32_t max_attempts, const char *key, int64_t t)
{
    w->now = s_clock (MONO_BASE_MS, t);
    zl_job_spec_t spec = {.tenant = tenant,
                          .lane = lane->name,
                          .payload = {(const uint8_t *)tenant, strlen (tenant)},
                          .idempotency_key = key,
                          .delay_ms = delay_ms,
                          .max_attempts = max_attempts};
    uint64_t id = zl_jobs_take_id (w->jobs);
    assert_int_equal (zl_store_sub_begin (w->store), ZL_STORE_OK);
    assert_int_equal (zl_jobs_stage (w->jobs, id, &spec, &lane->cfg, w->now), ZL_STORE_OK);
    assert_int_equal (zl_store_sub_commit (w->store), ZL_STORE_OK);
    zl_flow_t *flow = zl_sched_flow (w->sched, lane, zl_lanes_tenant (w->lanes, tenant));
    return zl_jobs_accept (w->jobs, id, &spec, flow, w->now);
}

static zl_job_t *
s_w_lease (world_t *w, zl_lane_t *lane, zl_job_t *expect, zl_worker_conn_t *worker, int64_t t)
{
    w->now = s_clock (MONO_BASE_MS, t);
    zl_job_t *job = zl_sched_pop (w->sched, lane, INT64_MAX / 4);
    assert_non_null (job);
    if (expect)
        assert_ptr_equal (job, expect);
    zl_jobs_lease (w->jobs, job, worker, w->now);
    return job;
}

static void
s_w_nack (world_t *w, zl_job_t *job, zl_fail_class_t cls, uint32_t retry_after_ms, int64_t t)
{
    w->now = s_clock (MONO_BASE_MS, t);
    zl_nack_item_t nack = {.job_id = job->id,
                           .lease = job->lease->token,
                           .cls = cls,
                           .error = "failed",
                           .retry_after_ms = retry_after_ms};
    assert_int_equal (zl_jobs_nack (w->jobs, job->lease->worker, &nack, w->now), ZL_SETTLE_OK);
}

static void
s_w_ack (world_t *w, zl_job_t *job, int64_t t)
{
    w->now = s_clock (MONO_BASE_MS, t);
    zl_ack_item_t ack = {.job_id = job->id, .lease = job->lease->token};
    assert_int_equal (zl_jobs_ack (w->jobs, job->lease->worker, &ack, w->now), ZL_SETTLE_OK);
}

static void
s_restore_one (void *ctx, uint64_t id, const zl_job_rec_t *rec, const zl_state_rec_t *state)
{
    world_t *w = ctx;
    zl_lane_t *lane = zl_lanes_lookup (w->lanes, rec->lane);
    assert_non_null (lane);
    zl_flow_t *flow = zl_sched_flow (w->sched, lane, zl_lanes_tenant (w->lanes, rec->tenant));
    static const zl_jobs_cut_t cut = {ZL_OUTCOME_BROKER_RESTART, "restarted"};
    zl_jobs_restore (w->jobs, id, flow, rec, state, &cut, w->now);
    w->restored++;
}

// Restart: a fresh job table rebuilt from the store at `now`.
static world_t *
s_world_recover (const char *dir, zl_now_t now)
{
    world_t *w = s_world_new (dir, now);
    uint64_t next_id = 0;
    char err[512] = "";
    assert_int_equal (zl_store_begin (w->store), ZL_STORE_OK);
    if (zl_store_recover (w->store, s_restore_one, w, &next_id, err, sizeof err) != 0)
        fail_msg ("recover: %s", err);
    zl_jobs_restore_done (w->jobs, next_id, now);
    s_world_commit (w);
    return w;
}

typedef struct {
    uint64_t ready[2][MAX_JOBS]; // per lane (work, mail), in pop order
    uint64_t seq[2][MAX_JOBS];
    size_t n_ready[2];
    uint64_t dead[MAX_JOBS]; // DLQ order
    size_t n_dead;
    uint64_t next_id;
} snap_t;

// What a restart must reproduce; pops every ready job (call it last).
static void
s_snapshot (world_t *w, snap_t *s)
{
    memset (s, 0, sizeof *s);
    zl_dlq_t *dlq = zl_jobs_dlq (w->jobs);
    for (zl_job_t *j = zl_dlq_first (dlq); j; j = zl_dlq_next (dlq, j))
        s->dead[s->n_dead++] = j->id;
    zl_lane_t *lanes[2] = {w->work, w->mail};
    for (int l = 0; l < 2; l++) {
        zl_job_t *j;
        while ((j = zl_sched_pop (w->sched, lanes[l], INT64_MAX / 4))) {
            assert_true (s->n_ready[l] < MAX_JOBS);
            s->seq[l][s->n_ready[l]] = j->seq;
            s->ready[l][s->n_ready[l]++] = j->id;
        }
    }
    s->next_id = zl_jobs_next_id (w->jobs);
}

static void
s_assert_same_ids (const char *what, const uint64_t *got, size_t n_got, const uint64_t *want,
                   size_t n_want)
{
    bool same = n_got == n_want;
    for (size_t i = 0; same && i < n_got; i++)
        same = got[i] == want[i];
    if (same)
        return;
    char gs[1024] = "", ws[1024] = "";
    for (size_t i = 0; i < n_got; i++)
        snprintf (gs + strlen (gs), sizeof gs - strlen (gs), " %llu", (unsigned long long)got[i]);
    for (size_t i = 0; i < n_want; i++)
        snprintf (ws + strlen (ws), sizeof ws - strlen (ws), " %llu", (unsigned long long)want[i]);
    fail_msg ("%s: got [%s ] want [%s ]", what, gs, ws);
}

// The stored state of `id` in world `w` (in the arena).
static zl_state_rec_t
s_w_state (world_t *w, uint64_t id, zl_arena_t *arena)
{
    zl_job_t *job = zl_jobs_find (w->jobs, id);
    assert_non_null (job);
    zl_state_rec_t st;
    assert_int_equal (zl_jobs_load (w->jobs, job, arena, NULL, &st), ZL_STORE_OK);
    return st;
}

static void
test_recovery_rebuilds_queues_timers_dlq_and_ids (void **state)
{
    fx_t *fx = *state;
    world_t *w = s_world_new (fx->dir, s_clock (MONO_BASE_MS, 0));
    assert_int_equal (zl_store_begin (w->store), ZL_STORE_OK);
    // ---- the first life of the broker
    zl_job_t *a1 = s_w_accept (w, w->work, "acme", 0, 0, "ka1", 0);
    zl_job_t *a2 = s_w_accept (w, w->work, "acme", 0, 0, "", 0);
    zl_job_t *a3 = s_w_accept (w, w->work, "acme", 0, 0, "", 0);
    zl_job_t *a4 = s_w_accept (w, w->work, "acme", 0, 0, "", 0);
    zl_job_t *b1 = s_w_accept (w, w->work, "globex", 0, 0, "", 0);
    zl_job_t *b2 = s_w_accept (w, w->work, "globex", 0, 0, "", 0);
    zl_job_t *m1 = s_w_accept (w, w->mail, "acme", 0, 0, "", 0);
    zl_job_t *m2 = s_w_accept (w, w->mail, "acme", 0, 0, "km2", 0);
    zl_job_t *m3 = s_w_accept (w, w->mail, "acme", 0, 1, "", 0); // one attempt only
    zl_job_t *d1 = s_w_accept (w, w->work, "acme", 20000, 0, "", 0);
    zl_job_t *d2 = s_w_accept (w, w->work, "globex", 5000, 0, "", 0);
    zl_job_t *d3 = s_w_accept (w, w->mail, "acme", 300, 0, "", 0);
    zl_job_t *e1 = s_w_accept (w, w->work, "globex", 0, 0, "", 0);
    zl_job_t *k1 = s_w_accept (w, w->mail, "globex", 0, 0, "", 0);
    uint64_t a2_id = a2->id, m3_id = m3->id, d1_id = d1->id, d2_id = d2->id, b2_id = b2->id;
    uint64_t e1_id = e1->id;
    s_world_commit (w);
    // a1 fails once: ready again, behind everything accepted so far
    s_w_lease (w, w->work, a1, w->w1, 10);
    s_w_nack (w, a1, ZL_FAIL_TRANSIENT, 0, 20);
    assert_int_equal (a1->state, ZL_JOB_READY);
    s_w_lease (w, w->work, a2, w->w1, 30); // still running at the crash
    s_w_lease (w, w->work, a3, w->w2, 31);
    s_w_nack (w, a3, ZL_FAIL_PERMANENT, 0, 40);
    s_w_lease (w, w->work, a4, w->w1, 41);
    s_w_ack (w, a4, 50);
    s_world_commit (w);
    s_w_lease (w, w->mail, m1, w->w1, 51);
    s_w_nack (w, m1, ZL_FAIL_PERMANENT, 0, 60); // DLQ 1st
    s_w_lease (w, w->mail, m2, w->w2, 61);
    s_w_nack (w, m2, ZL_FAIL_TRANSIENT, 0, 70);
    s_w_lease (w, w->mail, m3, w->w2, 71); // its only attempt, running at the crash
    s_w_lease (w, w->work, b1, w->w2, 72);
    s_w_nack (w, b1, ZL_FAIL_PERMANENT, 0, 80); // DLQ 2nd
    s_w_lease (w, w->work, b2, w->w1, 81);
    s_w_nack (w, b2, ZL_FAIL_THROTTLED, 100000, 85); // delayed past the restart
    s_w_lease (w, w->work, e1, w->w2, 86);
    s_w_nack (w, e1, ZL_FAIL_PERMANENT, 0, 100);
    zl_jobs_purge (w->jobs, e1);
    w->now = s_clock (MONO_BASE_MS, 110);
    zl_jobs_redrive (w->jobs, a3, w->now); // back at the end of its queue
    s_world_commit (w);
    assert_int_equal (zl_jobs_fire_timers (w->jobs, s_clock (MONO_BASE_MS, 300)), 1); // d3
    assert_int_equal (d3->state, ZL_JOB_READY);
    // two jobs die in the same millisecond, not in id order: the worker
    // releases its jobs last-leased first
    zl_job_t *f1 = s_w_accept (w, w->bulk, "acme", 0, 0, "", 400);
    zl_job_t *f2 = s_w_accept (w, w->bulk, "acme", 0, 0, "", 400);
    uint64_t f1_id = f1->id, f2_id = f2->id;
    s_w_lease (w, w->bulk, f1, w->w3, 401);
    s_w_lease (w, w->bulk, f2, w->w3, 401);
    w->now = s_clock (MONO_BASE_MS, 500);
    assert_int_equal (
        zl_jobs_release_worker (w->jobs, w->w3, ZL_OUTCOME_WORKER_DEAD, "gone", w->now), 2);
    // the job with the highest id is acked: only the stored counter knows it
    zl_job_t *x1 = s_w_accept (w, w->bulk, "globex", 0, 0, "", 600);
    uint64_t x1_id = x1->id;
    s_w_lease (w, w->bulk, x1, w->w1, 601);
    s_w_ack (w, x1, 602);
    s_world_commit (w);
    // a batch in flight at the crash is lost
    zl_job_t *lost = s_w_accept (w, w->work, "acme", 0, 0, "", 700);
    uint64_t lost_id = lost->id;
    zl_job_t *k1_leased = s_w_lease (w, w->mail, NULL, w->w1, 701);
    (void)k1_leased;

    // what the restart must reproduce (ready order, DLQ order, the counter)
    size_t live = zl_jobs_count (w->jobs) - 1; // `lost` never committed
    uint64_t a1_id = a1->id, a3_id = a3->id, m2_id = m2->id, d3_id = d3->id, k1_id = k1->id;
    snap_t before;
    s_snapshot (w, &before);
    assert_ptr_equal (k1_leased, k1);
    // retried, redriven and delayed-then-ready jobs queue behind the others
    s_assert_same_ids ("work lane before", before.ready[0], before.n_ready[0],
                       (uint64_t[]){a1_id, a3_id, lost_id}, 3);
    s_assert_same_ids ("mail lane before", before.ready[1], before.n_ready[1],
                       (uint64_t[]){m2_id, d3_id}, 2);
    s_assert_same_ids ("DLQ before", before.dead, before.n_dead,
                       (uint64_t[]){m1->id, b1->id, f2_id, f1_id}, 4);
    assert_int_equal (before.next_id, lost_id + 1);
    s_world_destroy (&w);

    // ---- restart 10 s of wall time later, on another monotonic clock
    zl_now_t now2 = s_clock (MONO_BASE2_MS, 10000);
    w = s_world_recover (fx->dir, now2);
    assert_int_equal (w->restored, live);
    assert_int_equal (zl_jobs_count (w->jobs), live);
    assert_null (zl_jobs_find (w->jobs, lost_id));
    assert_null (zl_jobs_find (w->jobs, e1_id));
    assert_null (zl_jobs_find (w->jobs, x1_id));
    // the id counter continues above every id and sequence used
    assert_int_equal (zl_jobs_next_id (w->jobs), lost_id); // the committed counter
    assert_true (zl_jobs_next_id (w->jobs) > x1_id);
    // the running attempt of a2 failed with the restart; it is ready, at its id
    zl_job_t *r = zl_jobs_find (w->jobs, a2_id);
    assert_int_equal (r->state, ZL_JOB_READY);
    assert_int_equal (r->attempt, 1);
    assert_int_equal (r->seq, a2_id);
    zl_state_rec_t st = s_w_state (w, a2_id, fx->arena);
    assert_int_equal (st.state, ZL_JOB_READY);
    assert_int_equal (st.n_history, 1);
    assert_int_equal (st.history[0].attempt, 1);
    assert_int_equal (st.history[0].outcome, ZL_OUTCOME_BROKER_RESTART);
    assert_string_equal (st.history[0].worker, "w1");
    assert_int_equal (st.history[0].started_at_ms, WALL_BASE_MS + 30);
    assert_int_equal (st.history[0].ended_at_ms, now2.wall_ms);
    // m3 had used its only attempt: dead-lettered, last in the DLQ
    r = zl_jobs_find (w->jobs, m3_id);
    assert_int_equal (r->state, ZL_JOB_DEAD);
    assert_int_equal (r->dead_at_ms, now2.wall_ms);
    st = s_w_state (w, m3_id, fx->arena);
    assert_int_equal (st.state, ZL_JOB_DEAD);
    assert_int_equal (st.n_history, 1);
    assert_int_equal (st.history[0].outcome, ZL_OUTCOME_BROKER_RESTART);
    zl_flow_t *mail_acme = zl_sched_flow (w->sched, w->mail, zl_lanes_tenant (w->lanes, "acme"));
    assert_int_equal (mail_acme->dlq, 2);
    assert_int_equal (mail_acme->dead_lettered, 1);
    // k1's lease was never committed: plain ready, no attempt
    r = zl_jobs_find (w->jobs, k1_id);
    assert_int_equal (r->state, ZL_JOB_READY);
    assert_int_equal (r->attempt, 0);
    // delayed jobs keep their wall-clock due times; one fell due while down
    zl_job_t *rd1 = zl_jobs_find (w->jobs, d1_id), *rd2 = zl_jobs_find (w->jobs, d2_id);
    zl_job_t *rb2 = zl_jobs_find (w->jobs, b2_id);
    assert_int_equal (rd1->state, ZL_JOB_DELAYED);
    assert_int_equal (rd1->due_ms, now2.mono_ms + (20000 - 10000));
    assert_int_equal (rd2->state, ZL_JOB_DELAYED);
    assert_int_equal (rd2->due_ms, now2.mono_ms);
    assert_int_equal (rb2->state, ZL_JOB_DELAYED);
    assert_int_equal (rb2->due_ms, now2.mono_ms + (85 + 100000 - 10000));
    assert_int_equal (rb2->attempt, 1);
    st = s_w_state (w, b2_id, fx->arena);
    assert_int_equal (st.n_history, 1);
    assert_int_equal (st.history[0].outcome, ZL_OUTCOME_THROTTLED);
    assert_int_equal (zl_timers_size (w->timers), 3);
    assert_int_equal (zl_jobs_next_timer (w->jobs), now2.mono_ms);
    // gauges: depth counts ready + delayed (nothing is leased after a restart)
    size_t nf;
    zl_flow_t **flows = zl_sched_flows (w->sched, &nf);
    uint64_t ready = 0, delayed = 0, dead = 0, in_flight = 0;
    for (size_t i = 0; i < nf; i++) {
        ready += flows[i]->ready;
        delayed += flows[i]->delayed;
        dead += flows[i]->dlq;
        in_flight += flows[i]->in_flight;
    }
    assert_int_equal (delayed, 3);
    assert_int_equal (dead, 5);
    assert_int_equal (in_flight, 0);
    assert_int_equal (ready + delayed + dead, live);
    assert_int_equal (w->work->depth + w->mail->depth, ready + delayed);
    assert_int_equal (w->w1->in_flight, 0);

    // the timers fire on the new clock: d2 is due at once, d1 in 10 s
    assert_int_equal (zl_jobs_fire_timers (w->jobs, now2), 1);
    assert_int_equal (rd2->state, ZL_JOB_READY);
    assert_int_equal (zl_jobs_fire_timers (w->jobs, s_clock (MONO_BASE2_MS, 19999)), 0);
    uint64_t d2_seq = rd2->seq;
    assert_true (d2_seq >= lost_id);
    s_world_commit (w);

    // the same queues in the same order: the ready jobs as they were, a2
    // back at its id (it was first in line when it was leased), k1 (its lease
    // never committed) at its id, d2 behind everything (ready last)
    snap_t after;
    s_snapshot (w, &after);
    s_assert_same_ids ("work lane after restart", after.ready[0], after.n_ready[0],
                       (uint64_t[]){a2_id, a1_id, a3_id, d2_id}, 4);
    s_assert_same_ids ("mail lane after restart", after.ready[1], after.n_ready[1],
                       (uint64_t[]){k1_id, m2_id, d3_id}, 3);
    s_assert_same_ids (
        "DLQ after restart", after.dead, after.n_dead,
        (uint64_t[]){before.dead[0], before.dead[1], before.dead[2], before.dead[3], m3_id}, 5);
    // a new job gets an id above everything
    uint64_t fresh = zl_jobs_take_id (w->jobs);
    assert_true (fresh > d2_seq);
    s_world_destroy (&w);

    // ---- a second restart changes nothing: no second BROKER_RESTART entry
    zl_now_t now3 = s_clock (MONO_BASE_MS, 11000);
    w = s_world_recover (fx->dir, now3);
    assert_int_equal (zl_jobs_count (w->jobs), live);
    st = s_w_state (w, a2_id, fx->arena);
    assert_int_equal (st.n_history, 1);
    assert_int_equal (zl_jobs_find (w->jobs, a2_id)->attempt, 1);
    assert_int_equal (zl_jobs_find (w->jobs, m3_id)->dead_at_ms, now2.wall_ms);
    assert_int_equal (zl_jobs_find (w->jobs, d1_id)->due_ms, now3.mono_ms + (20000 - 11000));
    snap_t again;
    s_snapshot (w, &again);
    s_assert_same_ids ("work lane, 2nd restart", again.ready[0], again.n_ready[0], after.ready[0],
                       after.n_ready[0]);
    s_assert_same_ids ("mail lane, 2nd restart", again.ready[1], again.n_ready[1], after.ready[1],
                       after.n_ready[1]);
    s_assert_same_ids ("DLQ, 2nd restart", again.dead, again.n_dead, after.dead, after.n_dead);
    assert_true (again.next_id >= after.next_id);
    s_world_destroy (&w);
}

// A first start: nothing to restore, the counter starts at 1.
static void
test_recovery_of_an_empty_store (void **state)
{
    fx_t *fx = *state;
    world_t *w = s_world_recover (fx->dir, s_clock (MONO_BASE_MS, 0));
    assert_int_equal (w->restored, 0);
    assert_int_equal (zl_jobs_count (w->jobs), 0);
    assert_int_equal (zl_jobs_next_id (w->jobs), 1);
    assert_int_equal (zl_dlq_depth (zl_jobs_dlq (w->jobs)), 0);
    assert_int_equal (zl_jobs_next_timer (w->jobs), -1);
    s_world_destroy (&w);
}

// ---------------------------------------------------------------- idempotency
// A job with a key, as zl_jobs_stage writes it: the record and the key (a
// user's key, or with `generated` one a client library made).
static void
s_put_key_of (zl_store_t *store, uint64_t id, const char *tenant, const char *key, int64_t seen,
              bool generated)
{
    zl_job_rec_t rec = {.tenant = tenant, .lane = "work", .idempotency_key = key};
    zl_idem_rec_t idem = {id, seen, generated};
    assert_int_equal (zl_store_put_job (store, id, &rec), ZL_STORE_OK);
    assert_int_equal (zl_store_put_idem (store, tenant, key, &idem), ZL_STORE_OK);
}

static void
s_put_keyed (zl_store_t *store, uint64_t id, const char *tenant, const char *key, int64_t seen)
{
    s_put_key_of (store, id, tenant, key, seen, false);
}

#define W_MS 1000 // the windows of s_prune

// Forget the keys seen before `before` (both windows W_MS), at most `max`
// more than twice the keys put since the last prune.
static size_t
s_prune (zl_store_t *store, int64_t before, size_t max)
{
    zl_idem_policy_t p = {W_MS, W_MS, 0};
    return zl_store_prune_idem (store, before - 1 + W_MS, &p, max);
}

// A prune that finds nothing due: after it the next prune's budget is its
// `max` alone.
static void
s_prune_nothing (zl_store_t *store)
{
    zl_idem_policy_t p = {W_MS, W_MS, 0};
    assert_int_equal (zl_store_prune_idem (store, 0, &p, 0), 0);
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
test_idempotency_hit_miss_and_expiry (void **state)
{
    fx_t *fx = *state;
    zl_store_t *store = s_open (fx->dir);
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    s_put_keyed (store, 1, "acme", "k1", 1000);
    s_put_keyed (store, 2, "acme", "k2", 2000);
    s_put_keyed (store, 3, "globex", "k1", 3000);
    s_put_keyed (store, 4, "acme", "k4", 4000);
    // the longest tenant (128) and key (256) the broker accepts
    char long_tenant[129], long_key[257];
    memset (long_tenant, 't', sizeof long_tenant - 1);
    long_tenant[sizeof long_tenant - 1] = '\0';
    memset (long_key, 'q', sizeof long_key - 1);
    long_key[sizeof long_key - 1] = '\0';
    s_put_keyed (store, 5, long_tenant, long_key, 5000);
    // the tenant/key boundary is unambiguous
    s_put_keyed (store, 6,
                 "a\x1f"
                 "b",
                 "c", 6000);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);

    uint64_t id = 0;
    assert_true (s_has_key (store, "acme", "k1", &id));
    assert_int_equal (id, 1);
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

    // outside a batch pruning does nothing
    assert_int_equal (s_prune (store, 2500, 100), 0);
    // expiry in time order: what was seen before the cut goes, the rest stays
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    s_prune_nothing (store);
    assert_int_equal (s_prune (store, 2500, 1), 1); // bounded work per call
    assert_false (s_has_key (store, "acme", "k1", NULL));
    assert_true (s_has_key (store, "acme", "k2", NULL));
    assert_int_equal (s_prune (store, 2500, 100), 1);
    assert_false (s_has_key (store, "acme", "k2", NULL));
    assert_int_equal (s_prune (store, 2500, 100), 0);
    assert_true (s_has_key (store, "globex", "k1", NULL));
    assert_true (s_has_key (store, "acme", "k4", NULL));
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    // the keys outlive their jobs; pruning does not touch the jobs
    zl_job_rec_t rec;
    assert_int_equal (zl_store_get_job (store, 1, ZL_PRIORITY_DEFAULT, fx->arena, &rec),
                      ZL_STORE_OK);
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_del_job (store, 3, ZL_PRIORITY_DEFAULT), ZL_STORE_OK);
    assert_int_equal (s_prune (store, 4500, 100), 2); // globex/k1, acme/k4
    assert_false (s_has_key (store, "globex", "k1", NULL));
    assert_false (s_has_key (store, "acme", "k4", NULL));
    assert_true (s_has_key (store, long_tenant, long_key, NULL));
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    zl_store_stats_t ss;
    zl_store_stats (store, &ss);
    assert_int_equal (ss.idem_keys, 2);
    zl_store_close (&store);
}

// A key used again after it expired points at the newer job; the older
// job's log entry must not stop the pruning of the keys behind it.
static void
test_idempotency_key_reused_after_expiry (void **state)
{
    fx_t *fx = *state;
    zl_store_t *store = s_open (fx->dir);
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    s_put_keyed (store, 10, "acme", "K", 1000);
    s_put_keyed (store, 11, "acme", "other", 1100);
    s_put_keyed (store, 20, "acme", "K", 5000); // the same key, a new job
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    uint64_t id = 0;
    assert_true (s_has_key (store, "acme", "K", &id));
    assert_int_equal (id, 20);
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    s_prune (store, 3000, 100);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    // "other" expired and went; K (seen again at 5000) stays, for job 20
    assert_false (s_has_key (store, "acme", "other", NULL));
    assert_true (s_has_key (store, "acme", "K", &id));
    assert_int_equal (id, 20);
    // and it expires in its turn
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    s_prune (store, 6000, 100);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    assert_false (s_has_key (store, "acme", "K", NULL));
    zl_store_stats_t ss;
    zl_store_stats (store, &ss);
    assert_int_equal (ss.idem_keys, 0);
    zl_store_close (&store);
}

// Thousands of keys over many pages: the pruning cursor walks them all.
static void
test_idempotency_prune_many (void **state)
{
    fx_t *fx = *state;
    zl_store_t *store = s_open (fx->dir);
    enum { N = 5000 };
    char key[32];
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    for (uint64_t i = 1; i <= N; i++) {
        snprintf (key, sizeof key, "key-%06llu", (unsigned long long)i);
        s_put_keyed (store, i, i % 2 ? "acme" : "globex", key, (int64_t)i * 10);
    }
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    // prune in several bounded calls, each in its own turn
    size_t pruned = 0, n, calls = 0;
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    s_prune_nothing (store);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    do {
        calls++;
        assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
        n = s_prune (store, (int64_t)(N / 2) * 10 + 5, 700);
        assert_true (n <= 700);
        pruned += n;
        assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    } while (n > 0);
    assert_int_equal (pruned, N / 2);
    assert_int_equal (calls, (N / 2 + 699) / 700 + 1); // the last one finds nothing
    for (uint64_t i = 1; i <= N; i++) {
        snprintf (key, sizeof key, "key-%06llu", (unsigned long long)i);
        bool has = s_has_key (store, i % 2 ? "acme" : "globex", key, NULL);
        if (has != (i > N / 2))
            fail_msg ("key %llu: %s after pruning", (unsigned long long)i, has ? "kept" : "pruned");
    }
    zl_store_stats_t ss;
    zl_store_stats (store, &ss);
    assert_int_equal (ss.idem_keys, N / 2);
    zl_store_close (&store);
}

// The index holds fixed-size digests, never the keys: 16 bytes per key
// whatever its length, none of it the key's text; another store (another
// secret) gives the same key another digest; the secret outlives a restart.
static void
s_raw_keys (const char *dir, uint8_t (*out)[16], size_t cap, size_t *n, bool *has_text)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_cursor *c;
    MDB_val k, v;
    assert_int_equal (mdb_env_create (&env), 0);
    assert_int_equal (mdb_env_set_maxdbs (env, 16), 0);
    assert_int_equal (mdb_env_open (env, dir, MDB_RDONLY, 0640), 0);
    assert_int_equal (mdb_txn_begin (env, NULL, MDB_RDONLY, &txn), 0);
    assert_int_equal (mdb_dbi_open (txn, "dedup", 0, &dbi), 0);
    assert_int_equal (mdb_cursor_open (txn, dbi, &c), 0);
    *n = 0;
    *has_text = false;
    for (int rc = mdb_cursor_get (c, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get (c, &k, &v, MDB_NEXT)) {
        assert_int_equal (k.mv_size, 16); // the digest of the key's prefix
        assert_int_equal (v.mv_size, 33); // an item: number, tenant's tag, job id, time, flags
        assert_true (*n < cap);
        memcpy (out[(*n)++], k.mv_data, 16);
        if (memmem (k.mv_data, k.mv_size, "order", 5) || memmem (v.mv_data, v.mv_size, "order", 5))
            *has_text = true;
    }
    mdb_cursor_close (c);
    mdb_txn_abort (txn);
    mdb_env_close (env);
}

static void
test_idempotency_index_is_keyed_digests (void **state)
{
    fx_t *fx = *state;
    char dirs[2][1100];
    uint8_t raw[2][8][16];
    size_t n[2];
    char long_key[257];
    memset (long_key, 'o', 256);
    memcpy (long_key, "order", 5);
    long_key[256] = '\0';
    for (int d = 0; d < 2; d++) {
        snprintf (dirs[d], sizeof dirs[d], "%s/s%d", fx->dir, d);
        zl_store_t *store = s_open (dirs[d]);
        assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
        s_put_keyed (store, 1, "acme", "order-1", 1000);
        s_put_keyed (store, 2, "acme", long_key, 1000);
        assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
        zl_store_close (&store);
        bool has_text;
        s_raw_keys (dirs[d], raw[d], 8, &n[d], &has_text);
        assert_int_equal (n[d], 2);
        assert_false (has_text);
    }
    // the same keys, other digests: each store has its own secret
    for (size_t i = 0; i < 2; i++)
        for (size_t j = 0; j < 2; j++)
            assert_memory_not_equal (raw[0][i], raw[1][j], 16);
    // after a restart the secret is the same: the keys still answer
    zl_store_t *store = s_open (dirs[0]);
    uint64_t id;
    assert_true (s_has_key (store, "acme", long_key, &id));
    assert_int_equal (id, 2);
    assert_true (s_has_key (store, "acme", "order-1", &id));
    assert_int_equal (id, 1);
    zl_store_close (&store);
}

// The keys one producer makes in sequence, for however many tenants, sit in
// one run of the index, in the order they were made; the same key of two
// tenants is two keys.
static void
test_idempotency_keys_of_a_producer_share_a_run (void **state)
{
    fx_t *fx = *state;
    zl_store_t *store = s_open (fx->dir);
    enum { N = 1000, TENANTS = 100 };
    char key[48], tenant[16];
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    for (uint64_t i = 1; i <= N; i++) {
        snprintf (key, sizeof key, "0123456789abcdef-%llu", (unsigned long long)i);
        snprintf (tenant, sizeof tenant, "t%llu", (unsigned long long)(i % TENANTS));
        s_put_key_of (store, i, tenant, key, 1000, true);
    }
    s_put_keyed (store, N + 1, "acme", "order-7", 1000);
    s_put_keyed (store, N + 2, "globex", "order-7", 1000);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    uint64_t id;
    assert_true (s_has_key (store, "acme", "order-7", &id));
    assert_int_equal (id, N + 1);
    assert_true (s_has_key (store, "globex", "order-7", &id));
    assert_int_equal (id, N + 2);
    assert_false (s_has_key (store, "initech", "order-7", NULL));
    assert_true (s_has_key (store, "t7", "0123456789abcdef-107", &id));
    assert_int_equal (id, 107);
    assert_false (s_has_key (store, "t8", "0123456789abcdef-107", NULL));
    zl_store_close (&store);
    // two runs: the producer's, and "order-"'s; the producer's in order
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_cursor *c;
    MDB_val k, v;
    assert_int_equal (mdb_env_create (&env), 0);
    assert_int_equal (mdb_env_set_maxdbs (env, 16), 0);
    assert_int_equal (mdb_env_open (env, fx->dir, MDB_RDONLY, 0640), 0);
    assert_int_equal (mdb_txn_begin (env, NULL, MDB_RDONLY, &txn), 0);
    assert_int_equal (mdb_dbi_open (txn, "dedup", 0, &dbi), 0);
    assert_int_equal (mdb_cursor_open (txn, dbi, &c), 0);
    size_t runs = 0, longest = 0;
    for (int rc = mdb_cursor_get (c, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get (c, &k, &v, MDB_NEXT_NODUP)) {
        size_t count;
        assert_int_equal (mdb_cursor_count (c, &count), 0);
        runs++;
        if (count > longest)
            longest = count;
        if (count < N)
            continue;
        uint64_t last = 0;
        for (int r = 0; r == 0; r = mdb_cursor_get (c, &k, &v, MDB_NEXT_DUP)) {
            uint64_t n = 0;
            for (int i = 0; i < 8; i++)
                n = n << 8 | ((const uint8_t *)v.mv_data)[i];
            assert_true (n == last + 1);
            last = n;
        }
        assert_int_equal (last, N);
    }
    assert_int_equal (runs, 2);
    assert_int_equal (longest, N);
    mdb_cursor_close (c);
    mdb_txn_abort (txn);
    mdb_env_close (env);
}

// A client library's own keys go after the resend window, users' keys after
// theirs; each class in its own log, so a long window does not hold back
// the short one.
static void
test_idempotency_windows_by_class (void **state)
{
    fx_t *fx = *state;
    zl_store_t *store = s_open (fx->dir);
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    s_put_key_of (store, 1, "acme", "user-1", 1000, false);
    for (uint64_t i = 2; i <= 11; i++) {
        char key[32];
        snprintf (key, sizeof key, "lib-%llu", (unsigned long long)i);
        s_put_key_of (store, i, "acme", key, 1000 + (int64_t)i, true);
    }
    s_put_key_of (store, 12, "acme", "user-12", 2000, false);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    zl_idem_rec_t rec;
    assert_int_equal (zl_store_get_idem (store, "acme", "lib-5", &rec), ZL_STORE_OK);
    assert_true (rec.generated);
    assert_int_equal (rec.job_id, 5);
    assert_int_equal (zl_store_get_idem (store, "acme", "user-1", &rec), ZL_STORE_OK);
    assert_false (rec.generated);
    zl_store_stats_t ss;
    zl_store_stats (store, &ss);
    assert_int_equal (ss.idem_resend_log, 10);
    assert_int_equal (ss.idem_user_log, 2);

    zl_idem_policy_t policy = {.resend_window_ms = 600, .user_window_ms = 86400000};
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    // at 1607 the library's keys seen up to 1007 are done: 2..7
    assert_int_equal (zl_store_prune_idem (store, 1607, &policy, 100), 6);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    for (uint64_t i = 2; i <= 11; i++) {
        char key[32];
        snprintf (key, sizeof key, "lib-%llu", (unsigned long long)i);
        if (s_has_key (store, "acme", key, NULL) != (i > 7))
            fail_msg ("%s %s at 1607", key, i > 7 ? "gone" : "kept");
    }
    assert_true (s_has_key (store, "acme", "user-1", NULL)); // older, but a user's key
    // a day later the users' keys go too
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_prune_idem (store, 1000 + 86400000, &policy, 100), 5);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    assert_false (s_has_key (store, "acme", "user-1", NULL));
    assert_true (s_has_key (store, "acme", "user-12", NULL));
    zl_store_stats (store, &ss);
    assert_int_equal (ss.idem_keys, 1);
    assert_int_equal (ss.dedup_expired, 11);
    assert_int_equal (ss.dedup_evicted, 0);
    // a key used again in the other class: the new job's, in the new log
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    s_put_key_of (store, 13, "acme", "user-12", 3000, true);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    assert_int_equal (zl_store_get_idem (store, "acme", "user-12", &rec), ZL_STORE_OK);
    assert_int_equal (rec.job_id, 13);
    assert_true (rec.generated);
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    // job 12's entry in the users' log is stale: it goes without the key
    assert_int_equal (zl_store_prune_idem (store, 3599, &policy, 100), 1);
    assert_true (s_has_key (store, "acme", "user-12", NULL));
    assert_int_equal (zl_store_prune_idem (store, 3600, &policy, 100), 1);
    assert_false (s_has_key (store, "acme", "user-12", NULL));
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    zl_store_stats (store, &ss);
    assert_int_equal (ss.idem_keys, 0);
    assert_int_equal (ss.idem_resend_log + ss.idem_user_log, 0);
    zl_store_close (&store);
}

// Past max_keys the keys whose window is most used up go first (each class
// keeps the same share of its window), counted in dedup_evicted; the work
// per call stays bounded; below the bound nothing goes early.
static void
test_idempotency_bound_evicts_most_used_up (void **state)
{
    fx_t *fx = *state;
    zl_store_t *store = s_open (fx->dir);
    // resend window 100 s, users' 10,000 s; at t = 10,000 s
    zl_idem_policy_t policy = {.resend_window_ms = 100000, .user_window_ms = 10000000};
    int64_t now = 10000000;
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    uint64_t id = 1;
    char key[32];
    // users' keys seen 9,000 s .. 500 s ago: 90% .. 5% of their window
    for (int64_t age = 9000; age >= 500; age -= 500, id++) {
        snprintf (key, sizeof key, "u-%lld", (long long)age);
        s_put_key_of (store, id, "acme", key, now - age * 1000, false);
    }
    // the library's keys seen 95 s .. 5 s ago: 95% .. 5% of theirs
    for (int64_t age = 95; age >= 5; age -= 5, id++) {
        snprintf (key, sizeof key, "g-%lld", (long long)age);
        s_put_key_of (store, id, "acme", key, now - age * 1000, true);
    }
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    zl_store_stats_t ss;
    zl_store_stats (store, &ss);
    uint64_t total = ss.idem_keys;
    assert_int_equal (total, 18 + 19);

    // no bound, or one above the count: nothing goes (nothing has expired)
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    s_prune_nothing (store);
    assert_int_equal (zl_store_prune_idem (store, now, &policy, 100), 0);
    policy.max_keys = total;
    assert_int_equal (zl_store_prune_idem (store, now, &policy, 100), 0);
    // a bound of 17: 20 go, at most 8 per call
    policy.max_keys = 17;
    size_t n, calls = 0, gone = 0;
    while ((n = zl_store_prune_idem (store, now, &policy, 8)) > 0) {
        assert_true (n <= 8);
        gone += n;
        calls++;
    }
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    assert_int_equal (gone, 20);
    assert_int_equal (calls, 3);
    zl_store_stats (store, &ss);
    assert_int_equal (ss.idem_keys, 17);
    assert_int_equal (ss.dedup_evicted, 20);
    assert_int_equal (ss.dedup_expired, 0);
    // what is left: the keys under some share of their window, from both
    // classes alike -- users' keys under 45% (4,500 s), the library's under
    // 50% (50 s) or so: never one class emptied for the other
    int users = 0, library = 0;
    double max_share = 0, min_gone = 1;
    for (int64_t age = 9000; age >= 500; age -= 500) {
        snprintf (key, sizeof key, "u-%lld", (long long)age);
        double share = (double)age / 10000;
        if (s_has_key (store, "acme", key, NULL)) {
            users++;
            max_share = share > max_share ? share : max_share;
        } else
            min_gone = share < min_gone ? share : min_gone;
    }
    for (int64_t age = 95; age >= 5; age -= 5) {
        snprintf (key, sizeof key, "g-%lld", (long long)age);
        double share = (double)age / 100;
        if (s_has_key (store, "acme", key, NULL)) {
            library++;
            max_share = share > max_share ? share : max_share;
        } else
            min_gone = share < min_gone ? share : min_gone;
    }
    print_message ("bound 17: %d users' and %d library keys kept, each under %.0f%% of its "
                   "window; the evicted had used %.0f%% or more\n",
                   users, library, 100 * max_share, 100 * min_gone);
    assert_int_equal (users + library, 17);
    assert_true (users >= 7 && library >= 8);
    assert_true (max_share <= min_gone); // no kept key older (by share) than an evicted one
    zl_store_close (&store);
}

// ---------------------------------------------------------------- room
// Walk LMDB's free list (what the store no longer does) and count its pages.
static uint64_t
s_free_list_pages (const char *dir, uint64_t *last_page)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_cursor *c;
    MDB_val k, v;
    assert_int_equal (mdb_env_create (&env), 0);
    assert_int_equal (mdb_env_set_maxdbs (env, 16), 0);
    assert_int_equal (mdb_env_open (env, dir, MDB_RDONLY, 0640), 0);
    MDB_envinfo info;
    mdb_env_info (env, &info);
    *last_page = info.me_last_pgno;
    assert_int_equal (mdb_txn_begin (env, NULL, MDB_RDONLY, &txn), 0);
    assert_int_equal (mdb_cursor_open (txn, 0, &c), 0);
    uint64_t n = 0;
    while (mdb_cursor_get (c, &k, &v, MDB_NEXT) == 0)
        n += *(const size_t *)v.mv_data;
    mdb_cursor_close (c);
    mdb_txn_abort (txn);
    mdb_env_close (env);
    return n;
}

// The store counts its free pages from the trees' page totals; after random
// puts and deletes of all sizes that count is the free list's, page for page.
static void
test_room_counts_the_free_list (void **state)
{
    fx_t *fx = *state;
    static uint8_t payload[70000];
    memset (payload, 'r', sizeof payload);
    zl_rng_t rng;
    zl_rng_seed (&rng, 7);
    for (int round = 0; round < 6; round++) {
        zl_store_t *store = s_open (fx->dir);
        for (int turn = 0; turn < 40; turn++) {
            assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
            for (int op = 0; op < 50; op++) {
                uint64_t id = zl_rng_range (&rng, 3000) + 1;
                if (zl_rng_range (&rng, 2) == 0) {
                    assert_int_equal (zl_store_del_job (store, id, ZL_PRIORITY_DEFAULT),
                                      ZL_STORE_OK);
                    continue;
                }
                size_t len = zl_rng_range (&rng, 9) == 0 ? zl_rng_range (&rng, sizeof payload)
                                                         : zl_rng_range (&rng, 300);
                char key[32];
                snprintf (key, sizeof key, "k-%llu", (unsigned long long)id);
                zl_job_rec_t rec = {.tenant = "acme",
                                    .lane = "work",
                                    .payload = {payload, len},
                                    .idempotency_key = key};
                zl_idem_rec_t idem = {id, 1000 * (int64_t)round, id % 2 == 0};
                assert_int_equal (zl_store_put_job (store, id, &rec), ZL_STORE_OK);
                assert_int_equal (zl_store_put_idem (store, "acme", key, &idem), ZL_STORE_OK);
            }
            zl_idem_policy_t p = {500, 1500, 0};
            zl_store_prune_idem (store, 1000 * (int64_t)round, &p, 20);
            assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
        }
        zl_store_stats_t ss;
        zl_store_stats (store, &ss);
        zl_store_close (&store);
        uint64_t last, free_pages = s_free_list_pages (fx->dir, &last);
        assert_int_equal (ss.used_bytes, (last + 1 - free_pages) * 4096);
        assert_true (ss.free_bytes >= free_pages * 4096);
        if (round == 5)
            print_message (
                "%llu pages, %llu of them on the free list; the store counts %llu used\n",
                (unsigned long long)last + 1, (unsigned long long)free_pages,
                (unsigned long long)ss.used_bytes / 4096);
    }
}

// Ask for room a turn at a time, as Submits that keep coming would, until
// there is (returns true) or `ms` have passed: the store measures the room
// at most once per commit, while short at most every 100 ms.
static bool
s_room_within (zl_store_t *store, size_t bytes, int ms, int64_t *took)
{
    int64_t t0 = zl_clock_mono_ms ();
    bool room = false;
    while (!room && zl_clock_mono_ms () - t0 <= ms) {
        assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
        room = zl_store_has_room (store, bytes);
        assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    }
    if (took)
        *took = zl_clock_mono_ms () - t0;
    return room;
}

// Put jobs from `id` on in one nested batch until the map is full; count
// them and undo the batch.
static uint64_t
s_fill_until_full (zl_store_t *store, const zl_job_rec_t *job, uint64_t id)
{
    assert_int_equal (zl_store_sub_begin (store), ZL_STORE_OK);
    uint64_t n = 0;
    zl_store_rc_t rc;
    while ((rc = zl_store_put_job (store, id + n, job)) == ZL_STORE_OK)
        n++;
    assert_int_equal (rc, ZL_STORE_FULL);
    zl_store_sub_abort (store);
    return n;
}

// An acme/work job whose payload is `len` bytes of `fill`, written into
// `buf` (the room tests' filler).
static zl_job_rec_t
s_filler (uint8_t *buf, size_t len, char fill)
{
    memset (buf, fill, len);
    return (zl_job_rec_t){
        .tenant = "acme", .lane = "work", .payload = {buf, len}, .idempotency_key = ""};
}

// LMDB reuses the pages a commit freed only once a later commit has written
// something. When the commit that drained the queue is the last to write
// (the broker idle, every Submit refused), its pages are not room yet -- a
// put there would find the map full -- and the store makes the next commit
// write, after which they are.
static void
test_room_freed_by_the_last_commit (void **state)
{
    fx_t *fx = *state;
    zl_store_t *store = s_open_mode (fx->dir, ZL_DURABILITY_NONE, 2u << 20);
    static uint8_t payload[60000];
    zl_job_rec_t job = s_filler (payload, sizeof payload, 'q');
    uint64_t id = 0;
    for (;;) { // fill, one job per turn, while there is room
        assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
        bool room = zl_store_has_room (store, sizeof payload + 256);
        if (room)
            assert_int_equal (zl_store_put_job (store, ++id, &job), ZL_STORE_OK);
        assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
        if (!room)
            break;
    }
    assert_true (id >= 10);
    // one commit deletes them all; then the broker idles: nothing writes
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    for (uint64_t i = 1; i <= id; i++)
        assert_int_equal (zl_store_del_job (store, i, ZL_PRIORITY_DEFAULT), ZL_STORE_OK);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    for (int i = 0; i < 3; i++) {
        assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
        assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    }
    // not room yet, truly: LMDB itself places only what the map's unused
    // rest holds, not half of what was deleted
    size_t half = (size_t)id / 2 * (sizeof payload + 256);
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_false (zl_store_has_room (store, half));
    uint64_t before = s_fill_until_full (store, &job, id + 1);
    assert_true (before < id / 2);
    // the refusal made this commit write: now it is room (seen at the next
    // measure)
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    assert_true (s_room_within (store, half, 1000, NULL));
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    uint64_t after = s_fill_until_full (store, &job, id + 1);
    print_message ("%llu jobs deleted in one commit: %llu fit before the next writing commit, "
                   "%llu after\n",
                   (unsigned long long)id, (unsigned long long)before, (unsigned long long)after);
    assert_true (after >= before + id / 2);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    zl_store_close (&store);
}

// While room is short the free list is not walked for every Submit, nor for
// every commit: at most every 100 ms, with nothing freed or with acks
// trickling; a drain is seen within that.
static void
test_room_walks_are_bounded (void **state)
{
    fx_t *fx = *state;
    zl_store_t *store = s_open_mode (fx->dir, ZL_DURABILITY_NONE, 2u << 20);
    static uint8_t payload[3000];
    zl_job_rec_t job = s_filler (payload, sizeof payload, 'w');
    uint64_t id = 0;
    int64_t refused_since = zl_clock_mono_ms ();
    while (zl_clock_mono_ms () - refused_since < 300) { // fill: refused for 300 ms
        assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
        if (zl_store_has_room (store, sizeof payload + 256)) {
            assert_int_equal (zl_store_put_job (store, ++id, &job), ZL_STORE_OK);
            refused_since = zl_clock_mono_ms ();
        }
        assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    }
    zl_store_stats_t ss;
    zl_store_stats (store, &ss);
    uint64_t w0 = ss.room_walks;
    // 1. short, nothing freed: Submits in a tight loop, a commit per turn
    uint64_t asks = 0, let_in = 0;
    int64_t t0 = zl_clock_mono_ms ();
    while (zl_clock_mono_ms () - t0 < 400) {
        assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
        for (int i = 0; i < 100; i++, asks++)
            let_in += zl_store_has_room (store, sizeof payload + 256);
        assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    }
    zl_store_stats (store, &ss);
    uint64_t w1 = ss.room_walks - 1; // the stats walk
    print_message ("short, nothing freed: %llu Submits in 400 ms, %llu let in, %llu walks\n",
                   (unsigned long long)asks, (unsigned long long)let_in,
                   (unsigned long long)(w1 - w0));
    assert_int_equal (let_in, 0);
    assert_true (w1 - w0 <= 400 / 100 + 1);
    // 2. short, each turn an ack frees a job and a job comes in (it stays
    // short), Submits asking for more keep coming
    uint64_t next = 1, turns = 0;
    t0 = zl_clock_mono_ms ();
    while (zl_clock_mono_ms () - t0 < 400) {
        assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
        for (int i = 0; i < 10; i++)
            (void)zl_store_has_room (store, 20 * (sizeof payload + 256));
        assert_int_equal (zl_store_del_job (store, next++, ZL_PRIORITY_DEFAULT), ZL_STORE_OK);
        assert_int_equal (zl_store_put_job (store, ++id, &job), ZL_STORE_OK);
        assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
        turns++;
    }
    int64_t took = zl_clock_mono_ms () - t0;
    zl_store_stats (store, &ss);
    uint64_t w2 = ss.room_walks - 1;
    print_message (
        "short, acks trickling: %llu turns in %lld ms, %llu walks, the longest %llu us\n",
        (unsigned long long)turns, (long long)took, (unsigned long long)(w2 - w1 - 1),
        (unsigned long long)ss.room_walk_max_us);
    assert_true (w2 - w1 - 1 <= (uint64_t)took / 100 + 2);
    // 3. a drain: Submits see the room within about 100 ms
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    for (uint64_t i = next; i <= id; i++)
        assert_int_equal (zl_store_del_job (store, i, ZL_PRIORITY_DEFAULT), ZL_STORE_OK);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    int64_t waited;
    assert_true (s_room_within (store, 50 * (sizeof payload + 256), 1000, &waited));
    print_message ("drained: room seen after %lld ms\n", (long long)waited);
    assert_true (waited <= 300);
    zl_store_close (&store);
}

// zl_store_measure_room after a commit measures the room, so that the next
// Submit's zl_store_has_room measures nothing (the broker calls it at the
// end of a turn, off the path of the next job); with room short, the
// measure ahead is left to the Submit, which measures for its own need.
// Each zl_store_stats reports the count and then measures once itself.
static void
test_room_measured_ahead (void **state)
{
    fx_t *fx = *state;
    zl_store_t *store = s_open_mode (fx->dir, ZL_DURABILITY_NONE, 2u << 20);
    static uint8_t payload[3000];
    zl_job_rec_t job = s_filler (payload, sizeof payload, 'm');
    size_t need = sizeof payload + 256;
    uint64_t id = 0;
    zl_store_stats_t ss;
    zl_store_stats (store, &ss);
    uint64_t m0 = ss.room_measures, s0 = ss.room_measures_on_submit;
    // room plenty: measured ahead, the Submit takes it as it is
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_true (zl_store_has_room (store, need)); // fresh: the stats measured
    assert_int_equal (zl_store_put_job (store, ++id, &job), ZL_STORE_OK);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    zl_store_measure_room (store);
    zl_store_measure_room (store); // nothing committed since: no second measure
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_true (zl_store_has_room (store, need));
    assert_int_equal (zl_store_put_job (store, ++id, &job), ZL_STORE_OK);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    zl_store_stats (store, &ss);
    assert_int_equal (ss.room_measures - m0, 1 + 1); // the first stats', the one ahead
    assert_int_equal (ss.room_measures_on_submit, s0);
    uint64_t m1 = ss.room_measures;
    // without it, the Submit after a commit measures
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, ++id, &job), ZL_STORE_OK);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_true (zl_store_has_room (store, need));
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    zl_store_stats (store, &ss);
    assert_int_equal (ss.room_measures - m1, 1 + 1); // the last stats', the Submit's
    assert_int_equal (ss.room_measures_on_submit, s0 + 1);
    // short: a Submit asks for more than the map holds; the measure ahead
    // for that need is made and left, and the next such Submit measures
    size_t big = 3u << 20;
    uint64_t m2 = ss.room_measures;
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_false (zl_store_has_room (store, big)); // fresh: the stats measured
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    zl_store_measure_room (store);
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_false (zl_store_has_room (store, big));
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    zl_store_stats (store, &ss);
    assert_int_equal (ss.room_measures - m2, 1 + 1 + 1); // stats', ahead, the Submit's
    assert_int_equal (ss.room_measures_on_submit, s0 + 2);
    zl_store_close (&store);
}

// The log says when new jobs start being refused and why, and when they
// are taken again (once room has held a second); a store at its margin,
// refusing and accepting turn by turn, does not flood it: one refusal and
// one return of room for a second of it.
static void
test_room_changes_are_logged_and_bounded (void **state)
{
    fx_t *fx = *state;
    char path[1200];
    s_path (path, sizeof path, fx->dir, "log");
    fflush (stderr);
    int saved = dup (2);
    int fd = open (path, O_WRONLY | O_CREAT | O_TRUNC, 0640);
    assert_true (saved >= 0 && fd >= 0);
    dup2 (fd, 2);
    close (fd);
    zl_log_set_level (ZL_LOG_INFO);
    char dir[1100];
    snprintf (dir, sizeof dir, "%s/s", fx->dir);
    zl_store_t *store = s_open_mode (dir, ZL_DURABILITY_NONE, 2u << 20);
    static uint8_t payload[3000];
    zl_job_rec_t job = s_filler (payload, sizeof payload, 'l');
    uint64_t id = 0, first = 1, refused = 0, let_in = 0;
    int64_t t0 = zl_clock_mono_ms ();
    while (zl_clock_mono_ms () - t0 < 1000) { // fill, then ack one a turn: at the margin
        assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
        if (zl_store_has_room (store, sizeof payload + 256)) {
            assert_int_equal (zl_store_put_job (store, ++id, &job), ZL_STORE_OK);
            let_in++;
        } else {
            refused++;
            if (first < id)
                assert_int_equal (zl_store_del_job (store, first++, ZL_PRIORITY_DEFAULT),
                                  ZL_STORE_OK);
        }
        assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    }
    // drained: room again
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    while (first <= id)
        assert_int_equal (zl_store_del_job (store, first++, ZL_PRIORITY_DEFAULT), ZL_STORE_OK);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    assert_true (s_room_within (store, 10 * (sizeof payload + 256), 1000, NULL));
    // room is back in the log once it has held a second
    t0 = zl_clock_mono_ms ();
    while (zl_clock_mono_ms () - t0 < 1100) {
        assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
        assert_true (zl_store_has_room (store, sizeof payload + 256));
        assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    }
    zl_store_close (&store);
    fflush (stderr);
    dup2 (saved, 2);
    close (saved);
    zl_log_set_level (ZL_LOG_ERROR);
    char *text = NULL;
    size_t n_refusing = 0, n_again = 0;
    FILE *f = fopen (path, "r");
    assert_non_null (f);
    char line[2048];
    while (fgets (line, sizeof line, f)) {
        if (strstr (line, "refusing new jobs (STORE_FULL)")) {
            n_refusing++;
            if (!text)
                text = strdup (line);
        }
        n_again += strstr (line, "accepting new jobs again") != NULL;
    }
    fclose (f);
    print_message ("%llu Submits let in, %llu refused; the log: %zu refusal line(s), %zu "
                   "'again': %s",
                   (unsigned long long)let_in, (unsigned long long)refused, n_refusing, n_again,
                   text ? text : "(none)\n");
    assert_true (refused > 10 && let_in > 10);
    assert_int_equal (n_refusing, 1);
    assert_int_equal (n_again, 1);
    assert_non_null (strstr (text, "the store is full: map_size (2.0 MiB) is reached"));
    assert_non_null (strstr (text, "kept for acks and deletes"));
    free (text);
}

// data.mdb is allocated ahead of its use (a full disk then stops a write,
// never a commit): at least 32 MiB of headroom, a quarter of the used size
// past 128 MiB, and never more than map_size.
static void
test_file_is_preallocated_ahead (void **state)
{
    fx_t *fx = *state;
    char dir[1100];
    snprintf (dir, sizeof dir, "%s/big", fx->dir);
    zl_store_t *store = s_open_mode (dir, ZL_DURABILITY_NONE, 4ull << 30);
    zl_store_stats_t ss;
    zl_store_stats (store, &ss);
    assert_true (ss.file_bytes >= (32u << 20));
    assert_true (ss.file_bytes <= (34u << 20));
    assert_true (ss.free_bytes >= (32u << 20) - (64u << 10));
    static uint8_t payload[60000];
    zl_job_rec_t job = s_filler (payload, sizeof payload, 'f');
    uint64_t id = 0;
    // ~100 MB in Submits of ~1 MB: never refused, the file always ahead
    for (int turn = 0; turn < 100; turn++) {
        assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
        assert_true (zl_store_has_room (store, 17 * sizeof payload));
        assert_int_equal (zl_store_sub_begin (store), ZL_STORE_OK);
        for (int j = 0; j < 17; j++)
            assert_int_equal (zl_store_put_job (store, ++id, &job), ZL_STORE_OK);
        assert_int_equal (zl_store_sub_commit (store), ZL_STORE_OK);
        assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
        zl_store_stats (store, &ss);
        assert_true (ss.file_bytes >= ss.used_bytes + (16u << 20));
    }
    assert_true (ss.used_bytes >= 100u * 17 * sizeof payload);
    assert_true (ss.file_bytes <= ss.used_bytes + (40u << 20));
    zl_store_close (&store);
    // a small map is allocated whole, no more
    snprintf (dir, sizeof dir, "%s/small", fx->dir);
    store = s_open_mode (dir, ZL_DURABILITY_NONE, 3u << 20);
    zl_store_stats (store, &ss);
    assert_int_equal (ss.file_bytes, 3u << 20);
    zl_store_close (&store);
}

// A Submit bigger than the preallocated headroom is refused once, and the
// commit after it grows the file so that the same Submit fits.
static void
test_big_submit_grows_the_file (void **state)
{
    fx_t *fx = *state;
    zl_store_t *store = s_open_mode (fx->dir, ZL_DURABILITY_NONE, 1ull << 30);
    size_t big = 80u << 20;
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_false (zl_store_has_room (store, big));
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_true (zl_store_has_room (store, big));
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    zl_store_stats_t ss;
    zl_store_stats (store, &ss);
    assert_true (ss.file_bytes >= big);
    zl_store_close (&store);
}

// ---------------------------------------------------------------- a full disk
// Mount a 16 MiB tmpfs at <dir>/mnt (root only: the test is skipped without
// the privilege); the teardown unmounts it.
static const char *
s_small_disk (fx_t *fx)
{
    snprintf (fx->mounted, sizeof fx->mounted, "%s/mnt", fx->dir);
    assert_int_equal (mkdir (fx->mounted, 0750), 0);
    if (mount ("tmpfs", fx->mounted, "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,mode=0750") != 0) {
        print_message ("cannot mount a tmpfs (%s): skipped\n", strerror (errno));
        fx->mounted[0] = '\0';
        return NULL;
    }
    return fx->mounted;
}

typedef struct {
    uint64_t next_id, first_live, accepted, refused, put_full;
} fill_t;

// Submits as the broker makes them (room asked, a nested batch each, one
// commit per turn) until they have been refused for 300 ms (the store
// measures its room at most every 100 ms while short). Every commit must
// work.
static void
s_fill (zl_store_t *store, fill_t *f, zl_rng_t *rng)
{
    static uint8_t payload[70000];
    memset (payload, 'd', sizeof payload);
    int refused_in_a_row = 0;
    int64_t refused_since = 0;
    while (refused_in_a_row < 50 || zl_clock_mono_ms () - refused_since < 300) {
        assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
        for (int s = 0; s < 8; s++) {
            if (refused_in_a_row == 0)
                refused_since = zl_clock_mono_ms ();
            size_t len = zl_rng_range (rng, 4) == 0 ? 65536 : 3000 + zl_rng_range (rng, 2000);
            int n = 1 + (int)zl_rng_range (rng, 4);
            if (!zl_store_has_room (store, (size_t)n * (len + 256))) {
                f->refused++;
                refused_in_a_row++;
                continue;
            }
            assert_int_equal (zl_store_sub_begin (store), ZL_STORE_OK);
            zl_store_rc_t rc = ZL_STORE_OK;
            uint64_t id0 = f->next_id;
            for (int j = 0; j < n && rc == ZL_STORE_OK; j++) {
                char key[32];
                snprintf (key, sizeof key, "lib-%llu", (unsigned long long)f->next_id);
                zl_job_rec_t job = {.tenant = "acme",
                                    .lane = "work",
                                    .payload = {payload, len},
                                    .idempotency_key = key};
                zl_idem_rec_t idem = {f->next_id, 1, true};
                rc = zl_store_put_job (store, f->next_id, &job);
                if (rc == ZL_STORE_OK)
                    rc = zl_store_put_idem (store, "acme", key, &idem);
                f->next_id++;
            }
            if (rc != ZL_STORE_OK) {
                assert_int_equal (rc, ZL_STORE_FULL);
                zl_store_sub_abort (store); // refused with nothing changed
                f->put_full++;
                refused_in_a_row++;
                continue;
            }
            assert_int_equal (zl_store_sub_commit (store), ZL_STORE_OK);
            f->accepted += f->next_id - id0;
            refused_in_a_row = 0;
        }
        zl_store_rc_t rc = zl_store_commit (store);
        if (rc != ZL_STORE_OK)
            fail_msg ("a commit failed (%d) with %llu jobs in: the margin did not hold", rc,
                      (unsigned long long)f->accepted);
    }
}

// Acks as the broker makes them: jobs deleted, their keys pruned, in turns.
static void
s_drain (zl_store_t *store, fill_t *f)
{
    zl_idem_policy_t p = {1, 1, 0};
    while (f->first_live < f->next_id) {
        assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
        for (int j = 0; j < 200 && f->first_live < f->next_id; j++)
            assert_int_equal (zl_store_del_job (store, f->first_live++, ZL_PRIORITY_DEFAULT),
                              ZL_STORE_OK);
        zl_store_prune_idem (store, 1000, &p, 1000);
        assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    }
}

// The data directory on a 16 MiB filesystem, the map 4 GiB: filled until
// new jobs are refused, no commit fails; drained, there is room again (the
// freed pages inside the file count although the disk stays full); after a
// clean restart too; and it fills and drains again.
static void
test_full_disk_refuses_then_room_comes_back (void **state)
{
    fx_t *fx = *state;
    const char *mnt = s_small_disk (fx);
    if (!mnt)
        skip ();
    char dir[1200];
    snprintf (dir, sizeof dir, "%s/data", mnt);
    zl_rng_t rng;
    zl_rng_seed (&rng, 3);
    fill_t f = {.next_id = 1, .first_live = 1};
    zl_store_t *store = s_open_mode (dir, ZL_DURABILITY_FSYNC, 4ull << 30);
    for (int round = 0; round < 3; round++) {
        uint64_t before = f.accepted;
        s_fill (store, &f, &rng);
        struct statvfs vfs;
        assert_int_equal (statvfs (mnt, &vfs), 0);
        zl_store_stats_t ss;
        zl_store_stats (store, &ss);
        print_message ("round %d: %llu jobs in (%.1f MiB used, file %.1f MiB, disk %.1f MiB "
                       "free), %llu Submits refused, %llu by a full write\n",
                       round, (unsigned long long)(f.accepted - before), ss.used_bytes / 1048576.0,
                       ss.file_bytes / 1048576.0, (double)vfs.f_bavail * vfs.f_frsize / 1048576.0,
                       (unsigned long long)f.refused, (unsigned long long)f.put_full);
        assert_true (f.accepted - before >= 400); // ~8 MiB of 4-64 KiB jobs
        assert_true (ss.file_bytes > (12u << 20));
        // full (the last pages of the disk may still join the file: not a page
        // more than the margin, so no Submit of 1 MiB), refused for 300 ms
        assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
        if (zl_store_has_room (store, 1u << 20))
            fail_msg ("1 MiB fits after 50 refusals: %.2f MiB free", ss.free_bytes / 1048576.0);
        assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
        s_drain (store, &f);
        // the disk is still full, the store has room
        assert_int_equal (statvfs (mnt, &vfs), 0);
        assert_true ((uint64_t)vfs.f_bavail * vfs.f_frsize < (4u << 20));
        assert_true (s_room_within (store, 65536 * 4, 1000, NULL));
        if (round == 1) { // a clean restart: still room
            zl_store_close (&store);
            store = s_open_mode (dir, ZL_DURABILITY_FSYNC, 4ull << 30);
            assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
            assert_true (zl_store_has_room (store, 65536 * 4));
            assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
        }
    }
    zl_store_close (&store);
    assert_int_equal (umount2 (fx->mounted, 0), 0);
    fx->mounted[0] = '\0';
}

// ---------------------------------------------------------------- foreign data
static void
s_assert_refused (const char *dir, const char *expect_in_err)
{
    char err[512] = "";
    zl_store_t *store = zl_store_open (dir, ZL_DURABILITY_NONE, MAP_SIZE, err, sizeof err);
    if (store) {
        zl_store_close (&store);
        fail_msg ("%s was opened as a store", dir);
    }
    assert_true (strlen (err) > 0);
    if (!strstr (err, expect_in_err))
        fail_msg ("the reason '%s' does not say '%s'", err, expect_in_err);
}

static void
test_foreign_and_damaged_directories (void **state)
{
    fx_t *fx = *state;
    char dir[1100], path[1100];
    // a directory holding something else
    snprintf (dir, sizeof dir, "%s/other", fx->dir);
    assert_int_equal (mkdir (dir, 0750), 0);
    s_path (path, sizeof path, dir, "notes.txt");
    s_write_file (path, "hello", 5);
    s_assert_refused (dir, "notes.txt");
    // the file is left alone
    struct stat sb;
    assert_int_equal (stat (path, &sb), 0);
    assert_int_equal (sb.st_size, 5);

    // a data.mdb full of garbage, large and small
    size_t sizes[3] = {64 * 1024, 100, 4096 * 3};
    for (int k = 0; k < 3; k++) {
        snprintf (dir, sizeof dir, "%s/garbage-%d", fx->dir, k);
        assert_int_equal (mkdir (dir, 0750), 0);
        uint8_t *junk = malloc (sizes[k]);
        zl_rng_t rng;
        zl_rng_seed (&rng, 99 + k);
        for (size_t i = 0; i < sizes[k]; i++)
            junk[i] = (uint8_t)(k == 2 ? 'x' : zl_rng_next (&rng));
        s_path (path, sizeof path, dir, "data.mdb");
        s_write_file (path, junk, sizes[k]);
        free (junk);
        s_assert_refused (dir, "data.mdb");
    }

    // an LMDB store that zlane did not make (no format key)
    snprintf (dir, sizeof dir, "%s/foreign-lmdb", fx->dir);
    assert_int_equal (mkdir (dir, 0750), 0);
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    assert_int_equal (mdb_env_create (&env), 0);
    assert_int_equal (mdb_env_open (env, dir, 0, 0640), 0);
    assert_int_equal (mdb_txn_begin (env, NULL, 0, &txn), 0);
    assert_int_equal (mdb_dbi_open (txn, NULL, 0, &dbi), 0);
    MDB_val k = {5, "hello"}, v = {5, "world"};
    assert_int_equal (mdb_put (txn, dbi, &k, &v, 0), 0);
    assert_int_equal (mdb_txn_commit (txn), 0);
    mdb_env_close (env);
    s_assert_refused (dir, "did not make");
    // untouched: the foreign key is still the only thing in it
    assert_int_equal (mdb_env_create (&env), 0);
    assert_int_equal (mdb_env_open (env, dir, MDB_RDONLY, 0640), 0);
    assert_int_equal (mdb_txn_begin (env, NULL, MDB_RDONLY, &txn), 0);
    assert_int_equal (mdb_dbi_open (txn, NULL, 0, &dbi), 0);
    MDB_stat st;
    assert_int_equal (mdb_stat (txn, dbi, &st), 0);
    assert_int_equal (st.ms_entries, 1);
    mdb_txn_abort (txn);
    mdb_env_close (env);

    // a zlane store of another format version
    snprintf (dir, sizeof dir, "%s/future", fx->dir);
    zl_store_t *store = s_open (dir);
    zl_store_close (&store);
    assert_int_equal (mdb_env_create (&env), 0);
    assert_int_equal (mdb_env_set_maxdbs (env, 8), 0);
    assert_int_equal (mdb_env_open (env, dir, 0, 0640), 0);
    assert_int_equal (mdb_txn_begin (env, NULL, 0, &txn), 0);
    assert_int_equal (mdb_dbi_open (txn, "meta", 0, &dbi), 0);
    MDB_val fk = {6, "format"}, fv = {13, "zlane-store-9"};
    assert_int_equal (mdb_put (txn, dbi, &fk, &fv, 0), 0);
    assert_int_equal (mdb_txn_commit (txn), 0);
    mdb_env_close (env);
    s_assert_refused (dir, "zlane-store-9");

    // an empty directory, and one that does not exist yet, are fine
    snprintf (dir, sizeof dir, "%s/fresh", fx->dir);
    store = s_open (dir);
    zl_store_close (&store);
    store = s_open (dir); // and it opens again
    zl_store_close (&store);
    // a path that cannot be a directory
    s_path (path, sizeof path, fx->dir, "other/notes.txt/sub");
    s_assert_refused (path, "notes.txt");
}

// A stored record that does not decode: recovery stops and says which.
static void
test_damaged_record_stops_recovery (void **state)
{
    fx_t *fx = *state;
    zl_store_t *store = s_open (fx->dir);
    zl_job_rec_t job = s_job_rec ("acme", "work", "");
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    for (uint64_t id = 1; id <= 3; id++)
        assert_int_equal (zl_store_put_job (store, id, &job), ZL_STORE_OK);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    zl_store_close (&store);
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    assert_int_equal (mdb_env_create (&env), 0);
    assert_int_equal (mdb_env_set_maxdbs (env, 8), 0);
    assert_int_equal (mdb_env_open (env, fx->dir, 0, 0640), 0);
    assert_int_equal (mdb_txn_begin (env, NULL, 0, &txn), 0);
    assert_int_equal (mdb_dbi_open (txn, "jobs", MDB_INTEGERKEY, &dbi), 0);
    uint64_t id = 2;
    uint8_t junk[] = {0x0f, 0xff, 0xff, 0xff, 0xff};
    MDB_val k = {sizeof id, &id}, v = {sizeof junk, junk};
    assert_int_equal (mdb_put (txn, dbi, &k, &v, 0), 0);
    assert_int_equal (mdb_txn_commit (txn), 0);
    mdb_env_close (env);

    store = s_open (fx->dir);
    zl_job_rec_t got;
    assert_int_equal (zl_store_get_job (store, 1, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_OK);
    assert_int_equal (zl_store_get_job (store, 2, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                      ZL_STORE_ERROR);
    ids_t *ids = calloc (1, sizeof *ids);
    char err[512] = "";
    uint64_t next_id = 0;
    assert_int_equal (zl_store_recover (store, s_collect, ids, &next_id, err, sizeof err), -1);
    assert_non_null (strstr (err, "job 2"));
    assert_non_null (strstr (err, "damaged"));
    assert_int_equal (ids->n, 1); // job 1 came before it
    free (ids);
    zl_store_close (&store);
}

// ---------------------------------------------------------------- a refusal's retry-after
/*  A refusal that the next commit cures (this turn's Submits took the room
    the last commit left) asks for a short retry; a full map for the long
    one. The broker puts it in the Rejected's retry_after_ms: a producer
    refused mid-turn came back a second later, a whole second of nothing
    at 200,000 jobs/s. */
static void
test_room_retry (void **state)
{
    fx_t *fx = *state;
    zl_store_t *store = s_open_mode (fx->dir, ZL_DURABILITY_NONE, 2u << 20);
    static uint8_t payload[20000];
    zl_job_rec_t job = s_filler (payload, sizeof payload, 'r');
    // one turn takes what the last commit left: refused, back at the next commit
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    int taken = 0;
    while (zl_store_has_room (store, sizeof payload + 256))
        taken++;
    assert_true (taken >= 10);
    assert_int_equal (zl_store_room_retry_ms (store), ZL_STORE_ROOM_SOON_MS);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_true (zl_store_has_room (store, sizeof payload + 256));
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    // the map filled for real, a job a turn: the long retry
    uint64_t id = 0;
    for (;;) {
        assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
        bool room = zl_store_has_room (store, sizeof payload + 256);
        if (room)
            assert_int_equal (zl_store_put_job (store, ++id, &job), ZL_STORE_OK);
        assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
        if (!room)
            break;
    }
    assert_true (id >= 10);
    assert_int_equal (zl_store_room_retry_ms (store), ZL_STORE_ROOM_RETRY_MS);
    zl_store_close (&store);
}

// ---------------------------------------------------------------- a full map
static void
test_map_full_is_reported_not_fatal (void **state)
{
    fx_t *fx = *state;
    uint64_t maps[2] = {1ull << 20, 2ull << 20};
    for (int m = 0; m < 2; m++) {
        char dir[1100];
        snprintf (dir, sizeof dir, "%s/map-%d", fx->dir, m);
        zl_store_t *store = s_open_mode (dir, ZL_DURABILITY_NONE, maps[m]);
        static uint8_t payload[6000];
        zl_job_rec_t job = s_filler (payload, sizeof payload, 'p');
        // Submits as the broker makes them: room checked, a nested batch per
        // Submit, a commit per turn; until a put fails
        uint64_t id = 0, stored_while_room = 0;
        bool room_went = false;
        zl_store_rc_t rc = ZL_STORE_OK;
        while (id < 100000) {
            assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
            bool room = zl_store_has_room (store, sizeof payload + 256);
            if (!room && !room_went) {
                room_went = true;
                // the broker refuses here; go on to see a put fail
            }
            assert_int_equal (zl_store_sub_begin (store), ZL_STORE_OK);
            rc = zl_store_put_job (store, ++id, &job);
            if (rc != ZL_STORE_OK) {
                zl_store_sub_abort (store);
                break;
            }
            assert_int_equal (zl_store_sub_commit (store), ZL_STORE_OK);
            if (!room_went)
                stored_while_room++;
            rc = zl_store_commit (store);
            if (rc != ZL_STORE_OK)
                break;
        }
        assert_int_equal (rc, ZL_STORE_FULL);
        if (!room_went)
            fail_msg ("map %llu: has_room never turned false before a put failed",
                      (unsigned long long)maps[m]);
        if (stored_while_room < 10)
            fail_msg ("map %llu KiB: only %llu jobs fit while has_room said yes",
                      (unsigned long long)(maps[m] >> 10), (unsigned long long)stored_while_room);
        print_message ("map %llu KiB: %llu jobs of %zu bytes while has_room, the put of job %llu "
                       "failed FULL\n",
                       (unsigned long long)(maps[m] >> 10), (unsigned long long)stored_while_room,
                       sizeof payload, (unsigned long long)id);
        assert_false (zl_store_has_room (store, sizeof payload));
        // the failed Submit's nested batch is gone; the turn still commits
        assert_true (zl_store_in_batch (store));
        assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
        zl_job_rec_t got;
        zl_arena_reset (fx->arena);
        assert_int_equal (zl_store_get_job (store, id, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                          ZL_STORE_NOT_FOUND);
        assert_int_equal (zl_store_get_job (store, id - 1, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                          ZL_STORE_OK);
        // a failed put straight in the turn's batch: the commit fails and
        // drops the batch; the next batch works (acks and deletes fit)
        assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
        zl_store_rc_t prc = ZL_STORE_OK;
        for (int i = 0; i < 1000 && prc == ZL_STORE_OK; i++)
            prc = zl_store_put_job (store, id + 1 + (uint64_t)i, &job);
        assert_int_equal (prc, ZL_STORE_FULL);
        assert_int_equal (zl_store_commit (store), ZL_STORE_FULL); // the reason, not "I/O"
        assert_false (zl_store_in_batch (store));
        assert_int_equal (zl_store_get_job (store, id + 1, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                          ZL_STORE_NOT_FOUND);
        for (uint64_t d = 1; d < id; d += 4) {
            assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
            for (uint64_t e = d; e < d + 4 && e < id; e++) {
                zl_store_rc_t drc = zl_store_del_job (store, e, ZL_PRIORITY_DEFAULT);
                if (drc != ZL_STORE_OK)
                    fail_msg ("map %llu KiB: deleting job %llu of %llu: %d",
                              (unsigned long long)(maps[m] >> 10), (unsigned long long)e,
                              (unsigned long long)id, drc);
            }
            assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
        }
        // room again: the freed pages count, also inside a batch (where the
        // broker asks, at every Submit)
        assert_true (s_room_within (store, sizeof payload, 1000, NULL));
        assert_true (zl_store_has_room (store, sizeof payload));
        assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
        assert_true (zl_store_has_room (store, sizeof payload));
        zl_store_stats_t ss;
        zl_store_stats (store, &ss);
        assert_true (ss.used_bytes < maps[m] / 2);
        assert_true (ss.file_bytes > maps[m] / 4 * 3); // the file grew to (nearly) the map
        assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
        assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
        assert_int_equal (zl_store_put_job (store, id + 5000, &job), ZL_STORE_OK);
        assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
        zl_store_close (&store);
        store = s_open_mode (dir, ZL_DURABILITY_NONE, maps[m]);
        ids_t ids = s_recover_ids (store);
        assert_int_equal (ids.n, 1);
        assert_int_equal (ids.id[0], id + 5000);
        zl_store_close (&store);
    }
}

// ---------------------------------------------------------------- ids
static void
test_ids_append_and_smaller_ids (void **state)
{
    fx_t *fx = *state;
    zl_store_t *store = s_open (fx->dir);
    zl_job_rec_t job = s_job_rec ("acme", "work", "");
    zl_state_rec_t st = {.state = ZL_JOB_READY, .ready_seq = 1, .leased_to = ""};
    // growing ids take the append path; big ids keep their order (native
    // integer keys, not bytes)
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    uint64_t grow[] = {1, 2, 3, 255, 256, 257, 65536, 1ull << 32, (1ull << 40) + 1};
    for (size_t i = 0; i < sizeof grow / sizeof grow[0]; i++)
        assert_int_equal (zl_store_put_job (store, grow[i], &job), ZL_STORE_OK);
    // a smaller id still goes in (and a state for one in the middle)
    assert_int_equal (zl_store_put_job (store, 100, &job), ZL_STORE_OK);
    assert_int_equal (zl_store_put_state (store, 256, &st), ZL_STORE_OK);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    // an aborted nested batch of larger ids, then smaller and larger ones
    assert_int_equal (zl_store_sub_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, (1ull << 41), &job), ZL_STORE_OK);
    zl_store_sub_abort (store);
    assert_int_equal (zl_store_put_job (store, 4, &job), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, (1ull << 40) + 2, &job), ZL_STORE_OK);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    zl_store_close (&store);

    // reopened without recovery: a smaller id and a larger id both go in
    store = s_open (fx->dir);
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 50, &job), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, (1ull << 40) + 3, &job), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 5, &job), ZL_STORE_OK);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    // a failed commit forgets the append position; puts still work after it
    ids_t ids = s_recover_ids (store);
    uint64_t want[] = {1,
                       2,
                       3,
                       4,
                       5,
                       50,
                       100,
                       255,
                       256,
                       257,
                       65536,
                       1ull << 32,
                       (1ull << 40) + 1,
                       (1ull << 40) + 2,
                       (1ull << 40) + 3};
    s_assert_same_ids ("recovered ids", ids.id, ids.n, want, sizeof want / sizeof want[0]);
    for (size_t i = 0; i < ids.n; i++)
        assert_int_equal (ids.has_state[i], ids.id[i] == 256);
    assert_int_equal (ids.next_id, (1ull << 40) + 4);
    // after recovery too
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 6, &job), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, (1ull << 40) + 10, &job), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 7, &job), ZL_STORE_OK);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    ids = s_recover_ids (store);
    assert_int_equal (ids.n, sizeof want / sizeof want[0] + 3);
    zl_store_close (&store);
}

// An older broker's store, built with LMDB directly: format 1 (idem keys
// tenant NUL key) or 2 (key NUL tenant), each key also in the idem log under
// its job id, with its job record.
typedef struct {
    uint64_t id;
    const char *tenant, *key;
    int64_t seen;
} old_key_t;

static void
s_make_old_store (const char *dir, int version, const old_key_t *keys, size_t n, uint64_t map_size)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi meta, jobs, idem, log, state;
    mkdir (dir, 0750);
    assert_int_equal (mdb_env_create (&env), 0);
    assert_int_equal (mdb_env_set_maxdbs (env, 8), 0);
    assert_int_equal (mdb_env_set_mapsize (env, map_size), 0);
    assert_int_equal (mdb_env_open (env, dir, MDB_NOSYNC, 0640), 0);
    assert_int_equal (mdb_txn_begin (env, NULL, 0, &txn), 0);
    assert_int_equal (mdb_dbi_open (txn, "meta", MDB_CREATE, &meta), 0);
    assert_int_equal (mdb_dbi_open (txn, "jobs", MDB_CREATE | MDB_INTEGERKEY, &jobs), 0);
    assert_int_equal (mdb_dbi_open (txn, "state", MDB_CREATE | MDB_INTEGERKEY, &state), 0);
    assert_int_equal (mdb_dbi_open (txn, "idem", MDB_CREATE, &idem), 0);
    assert_int_equal (mdb_dbi_open (txn, "idem_log", MDB_CREATE | MDB_INTEGERKEY, &log), 0);
    zl_arena_t *scratch = zl_arena_new (4096);
    uint64_t next = 1;
    for (size_t i = 0; i < n; i++) {
        const old_key_t *o = &keys[i];
        zl_job_rec_t rec = {.tenant = o->tenant, .lane = "work", .idempotency_key = o->key};
        void *h;
        size_t size = zl_record_job_prepare (scratch, &rec, &h);
        uint8_t buf[1024];
        assert_true (size <= sizeof buf);
        zl_record_write (h, buf);
        zl_arena_reset (scratch);
        uint64_t id = o->id;
        MDB_val jk = {sizeof id, &id}, jv = {size, buf};
        assert_int_equal (mdb_put (txn, jobs, &jk, &jv, 0), 0);
        char ik[600];
        size_t tl = strlen (o->tenant), kl = strlen (o->key);
        const char *a = version == 1 ? o->tenant : o->key, *b = version == 1 ? o->key : o->tenant;
        size_t al = version == 1 ? tl : kl, bl = version == 1 ? kl : tl;
        memcpy (ik, a, al);
        ik[al] = '\0';
        memcpy (ik + al + 1, b, bl);
        uint8_t iv[32];
        zl_idem_rec_t idem_rec = {id, o->seen, false};
        MDB_val k = {tl + kl + 1, ik}, v = {zl_record_idem_encode (&idem_rec, iv), iv};
        assert_int_equal (mdb_put (txn, idem, &k, &v, 0), 0);
        assert_int_equal (mdb_put (txn, log, &jk, &k, 0), 0);
        if (id >= next)
            next = id + 1;
    }
    zl_arena_destroy (&scratch);
    MDB_val nk = {7, "next_id"}, nv = {sizeof next, &next};
    assert_int_equal (mdb_put (txn, meta, &nk, &nv, 0), 0);
    MDB_val fk = {6, "format"}, fv = {13, version == 1 ? "zlane-store-1" : "zlane-store-2"};
    assert_int_equal (mdb_put (txn, meta, &fk, &fv, 0), 0);
    assert_int_equal (mdb_txn_commit (txn), 0);
    mdb_env_close (env);
}

// The format on disk, read with LMDB directly.
static void
s_format_of (const char *dir, char *out, size_t size)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi meta;
    MDB_val k = {6, "format"}, v;
    assert_int_equal (mdb_env_create (&env), 0);
    assert_int_equal (mdb_env_set_maxdbs (env, 8), 0);
    assert_int_equal (mdb_env_open (env, dir, MDB_RDONLY, 0640), 0);
    assert_int_equal (mdb_txn_begin (env, NULL, MDB_RDONLY, &txn), 0);
    assert_int_equal (mdb_dbi_open (txn, "meta", 0, &meta), 0);
    assert_int_equal (mdb_get (txn, meta, &k, &v), 0);
    snprintf (out, size, "%.*s", (int)v.mv_size, (const char *)v.mv_data);
    mdb_txn_abort (txn);
    mdb_env_close (env);
}

// Whether the store in `dir` has a database named `name`.
static bool
s_has_db (const char *dir, const char *name)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    assert_int_equal (mdb_env_create (&env), 0);
    assert_int_equal (mdb_env_set_maxdbs (env, 16), 0);
    assert_int_equal (mdb_env_open (env, dir, MDB_RDONLY, 0640), 0);
    assert_int_equal (mdb_txn_begin (env, NULL, MDB_RDONLY, &txn), 0);
    bool has = mdb_dbi_open (txn, name, 0, &dbi) == 0;
    mdb_txn_abort (txn);
    mdb_env_close (env);
    return has;
}

// Set the store's format key to `format` (an older broker's store).
static void
s_set_format (const char *dir, const char *format)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi meta;
    MDB_val k = {6, "format"}, v = {strlen (format), (void *)format};
    assert_int_equal (mdb_env_create (&env), 0);
    assert_int_equal (mdb_env_set_maxdbs (env, 8), 0);
    assert_int_equal (mdb_env_open (env, dir, 0, 0640), 0);
    assert_int_equal (mdb_txn_begin (env, NULL, 0, &txn), 0);
    assert_int_equal (mdb_dbi_open (txn, "meta", 0, &meta), 0);
    assert_int_equal (mdb_put (txn, meta, &k, &v, 0), 0);
    assert_int_equal (mdb_txn_commit (txn), 0);
    mdb_env_close (env);
}

// Put every job record of the priorities' trees back in "jobs" and drop
// the trees: the layout of formats 3 and 4.
static void
s_unsplit (const char *dir)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi jobs, tree;
    MDB_cursor *c;
    MDB_val k, v;
    assert_int_equal (mdb_env_create (&env), 0);
    assert_int_equal (mdb_env_set_maxdbs (env, 32), 0);
    assert_int_equal (mdb_env_open (env, dir, 0, 0640), 0);
    assert_int_equal (mdb_txn_begin (env, NULL, 0, &txn), 0);
    assert_int_equal (mdb_dbi_open (txn, "jobs", MDB_INTEGERKEY, &jobs), 0);
    for (unsigned p = 0; p <= ZL_PRIORITY_MAX; p++) {
        char name[16];
        snprintf (name, sizeof name, "jobs.%u", p);
        if (p == ZL_PRIORITY_DEFAULT)
            continue;
        assert_int_equal (mdb_dbi_open (txn, name, MDB_INTEGERKEY, &tree), 0);
        assert_int_equal (mdb_cursor_open (txn, tree, &c), 0);
        for (int rc = mdb_cursor_get (c, &k, &v, MDB_FIRST); rc == 0;
             rc = mdb_cursor_get (c, &k, &v, MDB_NEXT))
            assert_int_equal (mdb_put (txn, jobs, &k, &v, 0), 0);
        mdb_cursor_close (c);
        assert_int_equal (mdb_drop (txn, tree, 1), 0);
    }
    assert_int_equal (mdb_txn_commit (txn), 0);
    mdb_env_close (env);
}

// The entries of database `name` of the store in `dir`.
static size_t
s_entries (const char *dir, const char *name)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_stat st;
    assert_int_equal (mdb_env_create (&env), 0);
    assert_int_equal (mdb_env_set_maxdbs (env, 32), 0);
    assert_int_equal (mdb_env_open (env, dir, MDB_RDONLY, 0640), 0);
    assert_int_equal (mdb_txn_begin (env, NULL, MDB_RDONLY, &txn), 0);
    assert_int_equal (mdb_dbi_open (txn, name, MDB_INTEGERKEY, &dbi), 0);
    assert_int_equal (mdb_stat (txn, dbi, &st), 0);
    mdb_txn_abort (txn);
    mdb_env_close (env);
    return st.ms_entries;
}

// A store of format 3 (before batches) or 4 kept every job record in one
// tree: when it opens, the records of the other priorities move to their
// trees, all found where the broker looks and recovered in id order, and it
// is marked 5 so that an older broker refuses it. Format 6 (newer) is
// refused.
static void
test_formats_3_and_4_split_by_priority (void **state)
{
    fx_t *fx = *state;
    for (int version = 3; version <= 4; version++) {
        char dir[1100], format[64], old[32];
        snprintf (dir, sizeof dir, "%s/v%d", fx->dir, version);
        snprintf (old, sizeof old, "zlane-store-%d", version);
        zl_store_t *store = s_open (dir);
        assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
        enum { N = 50 };
        size_t n_default = 0;
        for (uint64_t id = 1; id <= N; id++) {
            zl_job_rec_t rec = {.tenant = "t",
                                .lane = "a",
                                .payload = {(const uint8_t *)"p", 1},
                                .idempotency_key = "",
                                .priority_plus1 = id % 3 ? (uint32_t)(id % 10) + 1 : 0};
            n_default += zl_record_priority (&rec) == ZL_PRIORITY_DEFAULT;
            assert_int_equal (zl_store_put_job (store, id, &rec), ZL_STORE_OK);
        }
        assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
        zl_store_close (&store);
        s_unsplit (dir);
        s_set_format (dir, old);
        assert_int_equal (s_entries (dir, "jobs"), N);

        store = s_open (dir);
        s_format_of (dir, format, sizeof format);
        assert_string_equal (format, ZL_STORE_FORMAT);
        assert_int_equal (s_entries (dir, "jobs"), n_default); // the default's tree
        assert_int_equal (s_entries (dir, "jobs.9"), 3);       // 19, 29, 49 (9, 39: default)
        for (uint64_t id = 1; id <= N; id++) {
            zl_job_rec_t back;
            unsigned p = id % 3 ? (unsigned)(id % 10) : ZL_PRIORITY_DEFAULT;
            zl_arena_reset (fx->arena);
            assert_int_equal (zl_store_get_job (store, id, p, fx->arena, &back), ZL_STORE_OK);
            assert_int_equal (zl_record_priority (&back), p);
        }
        ids_t ids = s_recover_ids (store);
        assert_int_equal (ids.n, N);
        for (size_t i = 0; i < N; i++)
            assert_int_equal (ids.id[i], i + 1);
        zl_store_close (&store);
    }
    char dir[1100], err[512] = "";
    snprintf (dir, sizeof dir, "%s/v4", fx->dir);
    s_set_format (dir, "zlane-store-6");
    zl_store_t *store = zl_store_open (dir, ZL_DURABILITY_NONE, MAP_SIZE, err, sizeof err);
    assert_null (store);
    assert_non_null (strstr (err, "not supported"));
}

// A store an older broker left (format 1: idem keys tenant first; format 2:
// key first) is upgraded in place when it opens, in one transaction: its
// idempotency keys still answer, for the right tenant, and still expire (as
// users' keys); a log entry whose key a later job took is dropped; the old
// databases are gone; the jobs are untouched.
static void
test_upgrade_from_formats_1_and_2 (void **state)
{
    fx_t *fx = *state;
    old_key_t keys[] = {{1, "acme", "k1", 1000},    {2, "acme", "k2", 2000},
                        {3, "globex", "k1", 3000},  {4, "a", "b", 4000},
                        {5, "acme", "again", 4100}, {6, "acme", "again", 4200}};
    for (int version = 1; version <= 2; version++) {
        char dir[1100], format[64];
        snprintf (dir, sizeof dir, "%s/v%d", fx->dir, version);
        s_make_old_store (dir, version, keys, sizeof keys / sizeof keys[0], MAP_SIZE);
        s_format_of (dir, format, sizeof format);
        assert_string_equal (format, version == 1 ? "zlane-store-1" : "zlane-store-2");

        zl_store_t *store = s_open (dir);
        zl_store_close (&store);
        s_format_of (dir, format, sizeof format);
        assert_string_equal (format, ZL_STORE_FORMAT);
        assert_false (s_has_db (dir, "idem"));
        assert_false (s_has_db (dir, "idem_log"));
        store = s_open (dir);
        uint64_t id = 0;
        assert_true (s_has_key (store, "acme", "k1", &id));
        assert_int_equal (id, 1);
        assert_true (s_has_key (store, "globex", "k1", &id));
        assert_int_equal (id, 3);
        assert_true (s_has_key (store, "a", "b", &id));
        assert_int_equal (id, 4);
        assert_true (s_has_key (store, "acme", "again", &id));
        assert_int_equal (id, 6);
        assert_false (s_has_key (store, "b", "a", NULL));
        assert_false (s_has_key (store, "globex", "k2", NULL));
        zl_idem_rec_t rec;
        assert_int_equal (zl_store_get_idem (store, "acme", "k2", &rec), ZL_STORE_OK);
        assert_int_equal (rec.seen_at_ms, 2000);
        assert_false (rec.generated); // an old key keeps the users' (longer) window
        zl_store_stats_t ss;
        zl_store_stats (store, &ss);
        assert_int_equal (ss.idem_keys, 5);
        assert_int_equal (ss.idem_user_log, 5); // job 5's entry was stale: dropped
        assert_int_equal (ss.idem_resend_log, 0);
        // the log was upgraded too: pruning finds and removes the keys
        assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
        s_prune_nothing (store);
        assert_int_equal (s_prune (store, 3500, 100), 3);
        assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
        assert_false (s_has_key (store, "acme", "k1", NULL));
        assert_false (s_has_key (store, "acme", "k2", NULL));
        assert_false (s_has_key (store, "globex", "k1", NULL));
        assert_true (s_has_key (store, "a", "b", &id));
        // and the jobs themselves are untouched
        zl_job_rec_t got;
        assert_int_equal (zl_store_get_job (store, 3, ZL_PRIORITY_DEFAULT, fx->arena, &got),
                          ZL_STORE_OK);
        assert_string_equal (got.tenant, "globex");
        assert_string_equal (got.idempotency_key, "k1");
        ids_t ids = s_recover_ids (store);
        assert_int_equal (ids.n, 6);
        zl_store_close (&store);
    }
}

// An upgrade that cannot finish (no room in the map for the new index)
// leaves the old store as it was, and says what to do; with more room it
// goes through. Many keys: one transaction still holds them all.
static void
test_upgrade_is_all_or_nothing (void **state)
{
    fx_t *fx = *state;
    enum { N = 60000 };
    old_key_t *keys = calloc (N, sizeof *keys);
    char (*names)[24] = calloc (N, sizeof *names);
    for (size_t i = 0; i < N; i++) {
        snprintf (names[i], sizeof names[i], "key-%zu", i);
        keys[i] = (old_key_t){i + 1, "acme", names[i], (int64_t)i};
    }
    char dir[1100], format[64];
    snprintf (dir, sizeof dir, "%s/big", fx->dir);
    s_make_old_store (dir, 2, keys, N, 64ull << 20);
    struct stat sb;
    char path[1200];
    s_path (path, sizeof path, dir, "data.mdb");
    assert_int_equal (stat (path, &sb), 0);
    // a map the old store fills all but a little: the new index cannot fit
    char err[512] = "";
    uint64_t tight = ((uint64_t)sb.st_size + (256u << 10)) / 4096 * 4096;
    zl_store_t *store = zl_store_open (dir, ZL_DURABILITY_NONE, tight, err, sizeof err);
    if (store)
        fail_msg ("an upgrade of %d keys fitted in %llu bytes", N, (unsigned long long)tight);
    assert_non_null (strstr (err, "cannot upgrade"));
    assert_non_null (strstr (err, "--map-size"));
    s_format_of (dir, format, sizeof format);
    assert_string_equal (format, "zlane-store-2");
    assert_true (s_has_db (dir, "idem"));
    assert_false (s_has_db (dir, "dedup"));
    // with room it goes through, in one go
    store = s_open_mode (dir, ZL_DURABILITY_NONE, 256ull << 20);
    zl_store_stats_t ss;
    zl_store_stats (store, &ss);
    assert_int_equal (ss.idem_keys, N);
    uint64_t id;
    assert_true (s_has_key (store, "acme", "key-12345", &id));
    assert_int_equal (id, 12346);
    zl_store_close (&store);
    s_format_of (dir, format, sizeof format);
    assert_string_equal (format, ZL_STORE_FORMAT);
    free (keys);
    free (names);
}

#define T(fn) cmocka_unit_test_setup_teardown (fn, s_setup, s_teardown)

int
main (void)
{
    const struct CMUnitTest tests[] = {
        T (test_record_codec),
        T (test_store_round_trip),
        T (test_nested_batch_abort_and_commit),
        T (test_uncommitted_batch_is_gone_after_reopen),
        T (test_committed_data_survives_in_both_modes),
        T (test_recovery_of_an_empty_store),
        T (test_recovery_rebuilds_queues_timers_dlq_and_ids),
        T (test_idempotency_hit_miss_and_expiry),
        T (test_idempotency_key_reused_after_expiry),
        T (test_idempotency_prune_many),
        T (test_idempotency_index_is_keyed_digests),
        T (test_idempotency_keys_of_a_producer_share_a_run),
        T (test_idempotency_windows_by_class),
        T (test_idempotency_bound_evicts_most_used_up),
        T (test_room_counts_the_free_list),
        T (test_room_freed_by_the_last_commit),
        T (test_room_walks_are_bounded),
        T (test_room_measured_ahead),
        T (test_room_changes_are_logged_and_bounded),
        T (test_file_is_preallocated_ahead),
        T (test_big_submit_grows_the_file),
        T (test_full_disk_refuses_then_room_comes_back),
        T (test_foreign_and_damaged_directories),
        T (test_upgrade_from_formats_1_and_2),
        T (test_formats_3_and_4_split_by_priority),
        T (test_upgrade_is_all_or_nothing),
        T (test_damaged_record_stops_recovery),
        T (test_room_retry),
        T (test_map_full_is_reported_not_fatal),
        T (test_ids_append_and_smaller_ids),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
