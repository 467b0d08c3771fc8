/*  test_commit_thread: the broker's turns while the LMDB store's commit
    thread (fsync mode, the default) commits, on the in-process harness.

    The store's fault hook holds the thread's commit (ZL_STORE_FAULT_FLUSH,
    asked on that thread before LMDB's flushes) until the test lets it go,
    so each case knows which commit is under way. While one is held:
    - the next turns run, do not wait, and a plain job submitted in them
      starts (its Dispatch leaves); no Accepted leaves;
    - once the commit ends, its Accepted goes, then the next commit (the
      batch the turns wrote meanwhile) carries the later Submits' Accepted,
      in order;
    - a commit that fails on the thread stops the broker with none of the
      held replies sent, and a restart recovers only what was committed;
    - with a commit interval, a producer that waits for each Accepted
      before it sends the next job is answered at once every time, and a
      batch written while a commit ran (a stream) is committed no sooner
      than the interval after that commit began. */
#include "broker.h"
#include "broker_harness.h"
#include "harness_util.h"
#include "config.h"
#include "log.h"
#include "msg.h"
#include "store.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SEEN 256
#define HOLD_MAX_S 20 // a held commit lets go by itself after this (a test that failed)

typedef struct {
    zl_msg_kind_t kind;
    int sock, peer;
    uint64_t seq[8];
    size_t n;
} seen_t;

static struct {
    char *dir;
    zl_broker_config_t cfg;
    zl_broker_t *broker;
    zlh_t *h;
    seen_t seen[MAX_SEEN];
    size_t n_seen;
    uint64_t turns, turns_committed; // the last Stats reply's loop_turns, loop_turns_committed
    // the hold on the thread's commit
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool hold;            // hold the next commits
    int held;             // commits waiting at the hook now
    int flush_fail;       // what the next commit fails with (0: none)
    uint64_t interval_ms; // the broker's commit_interval (0: its default)
} T = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static int
s_fault (void *ctx, zl_store_fault_t where)
{
    (void)ctx;
    if (where != ZL_STORE_FAULT_FLUSH)
        return 0;
    pthread_mutex_lock (&T.mu);
    int fail = T.flush_fail;
    T.flush_fail = 0;
    struct timespec until;
    clock_gettime (CLOCK_REALTIME, &until);
    until.tv_sec += HOLD_MAX_S;
    T.held++;
    pthread_cond_broadcast (&T.cv);
    while (T.hold && pthread_cond_timedwait (&T.cv, &T.mu, &until) != ETIMEDOUT)
        ;
    T.held--;
    pthread_mutex_unlock (&T.mu);
    return fail;
}

static void
s_hold (bool on)
{
    pthread_mutex_lock (&T.mu);
    T.hold = on;
    pthread_cond_broadcast (&T.cv);
    pthread_mutex_unlock (&T.mu);
}

// Wait (bounded) until a commit waits at the hook.
static void
s_wait_held (void)
{
    struct timespec until;
    clock_gettime (CLOCK_REALTIME, &until);
    until.tv_sec += HOLD_MAX_S;
    pthread_mutex_lock (&T.mu);
    while (!T.held && pthread_cond_timedwait (&T.cv, &T.mu, &until) != ETIMEDOUT)
        ;
    int held = T.held;
    pthread_mutex_unlock (&T.mu);
    assert_int_equal (held, 1);
}

static void
s_record (void *ctx, zlh_sock_t sock, int peer, const char *topic, const zl_msg_t *msg)
{
    (void)ctx;
    (void)topic;
    if (T.n_seen == MAX_SEEN)
        return;
    seen_t *s = &T.seen[T.n_seen++];
    *s = (seen_t){.kind = msg->kind, .sock = sock, .peer = peer};
    if (msg->kind == ZL_MSG_ACCEPTED)
        for (size_t i = 0; i < msg->u.accepted.n && s->n < 8; i++)
            s->seq[s->n++] = msg->u.accepted.jobs[i].seq;
    if (msg->kind == ZL_MSG_DISPATCH)
        s->n = msg->u.dispatch.n;
    if (msg->kind == ZL_MSG_ADMIN_REPLY && msg->u.admin_reply.result == ZL_ADMIN_RESULT_STATS) {
        const zl_stats_t *st = &msg->u.admin_reply.stats;
        for (size_t i = 0; i < st->n_counters; i++) {
            if (!strcmp (st->counters[i].name, "loop_turns"))
                T.turns = st->counters[i].value;
            if (!strcmp (st->counters[i].name, "loop_turns_committed"))
                T.turns_committed = st->counters[i].value;
        }
    }
}

// How many messages of `kind` arrived (Accepted: the seqs, in order, to `seqs`).
static size_t
s_count (zl_msg_kind_t kind, uint64_t *seqs)
{
    size_t n = 0;
    for (size_t i = 0; i < T.n_seen; i++)
        if (T.seen[i].kind == kind) {
            if (seqs)
                for (size_t j = 0; j < T.seen[i].n; j++)
                    seqs[n + j] = T.seen[i].seq[j];
            n += kind == ZL_MSG_ACCEPTED || kind == ZL_MSG_DISPATCH ? T.seen[i].n : 1;
        }
    return n;
}

static void
s_start (void)
{
    zl_broker_config_defaults (&T.cfg); // fsync: the commit thread
    zlh_config_inproc (&T.cfg, T.dir);
    zl_broker_config_lane (&T.cfg, "a");
    if (T.interval_ms)
        T.cfg.commit_interval_ms = T.interval_ms;
    char err[512];
    T.broker = zl_broker_new (&T.cfg, err, sizeof err);
    if (!T.broker)
        fail_msg ("zl_broker_new: %s", err);
    T.h = zlh_new (T.broker);
    assert_non_null (T.h);
    T.n_seen = 0;
}

static void
s_stop (void)
{
    zlh_destroy (&T.h);
    zl_broker_destroy (&T.broker);
    zl_broker_config_free (&T.cfg);
}

static int
s_setup (void **state)
{
    (void)state;
    zl_log_set_level (ZL_LOG_ERROR);
    T.dir = zlh_tmpdir ("commit-thread");
    assert_non_null (T.dir);
    T.hold = false;
    T.flush_fail = 0;
    T.interval_ms = 0;
    zl_store_set_fault (s_fault, NULL);
    s_start ();
    return 0;
}

static int
s_teardown (void **state)
{
    (void)state;
    s_hold (false);
    s_stop ();
    zl_store_set_fault (NULL, NULL);
    zlh_rmdir (T.dir);
    free (T.dir);
    return 0;
}

static zl_msg_t
s_hello (void)
{
    zl_msg_t m = {.kind = ZL_MSG_HELLO};
    m.u.hello.client = "test-commit-thread";
    return m;
}

static zl_msg_t
s_ready (void)
{
    static const char *lanes[] = {"a"};
    zl_msg_t m = {.kind = ZL_MSG_READY};
    m.u.ready = (zl_ready_t){.name = "w0", .n_lanes = 1, .lanes = lanes, .capacity = 100};
    return m;
}

static zl_msg_t
s_submit (uint64_t seq)
{
    static zl_job_spec_t spec;
    spec = (zl_job_spec_t){
        .seq = seq, .tenant = "t", .lane = "a", .payload = {(const uint8_t *)"payload", 7}};
    zl_msg_t m = {.kind = ZL_MSG_SUBMIT};
    m.u.submit = (zl_submit_t){.n = 1, .jobs = &spec};
    return m;
}

// A worker and a producer, each answered (fed turns end with their commit).
static void
s_connect (void)
{
    zl_msg_t ready = s_ready (), hello = s_hello ();
    assert_int_equal (zlh_feed (T.h, ZLH_BACKEND, 0, &ready), ZL_TURN_OK);
    assert_int_equal (zlh_feed (T.h, ZLH_FRONTEND, 0, &hello), ZL_TURN_OK);
    zlh_drain (T.h, s_record, NULL);
    T.n_seen = 0;
}

// Run turns (at most `turns`) until `want` messages of `kind` have come.
static void
s_turn_until (zl_msg_kind_t kind, size_t want, int turns)
{
    for (int i = 0; i < turns && s_count (kind, NULL) < want; i++) {
        assert_int_equal (zl_broker_turn (T.broker, 10), ZL_TURN_OK);
        zlh_drain (T.h, s_record, NULL);
    }
}

// Ask for Stats and run turns until the reply came: T.turns and
// T.turns_committed are its loop_turns and loop_turns_committed.
static void
s_stats (void)
{
    zl_msg_t m = {.kind = ZL_MSG_ADMIN_REQUEST};
    m.u.admin_request = (zl_admin_request_t){.request_id = 1, .op = ZL_ADMIN_STATS, .lane = ""};
    m.u.admin_request.filter.lane = m.u.admin_request.filter.tenant = "";
    size_t before = s_count (ZL_MSG_ADMIN_REPLY, NULL);
    T.turns = T.turns_committed = 0;
    assert_int_equal (zlh_send (T.h, ZLH_ADMIN, 0, &m), 0);
    s_turn_until (ZL_MSG_ADMIN_REPLY, before + 1, 200);
    assert_int_equal (s_count (ZL_MSG_ADMIN_REPLY, NULL), before + 1);
    assert_true (T.turns > 0);
}

// Send `msg` from the producer and run turns until the broker has read it
// (its Dispatch or Accepted came, or `n` turns).
static void
s_send_and_turn (const zl_msg_t *msg, zl_msg_kind_t until, size_t want)
{
    assert_int_equal (zlh_send (T.h, ZLH_FRONTEND, 0, msg), 0);
    s_turn_until (until, want, 200);
    assert_int_equal (s_count (until, NULL), want);
}

static void
test_turns_go_on_while_a_commit_is_held (void **state)
{
    (void)state;
    s_connect ();
    s_hold (true);
    zl_msg_t m = s_submit (1);
    s_send_and_turn (&m, ZL_MSG_DISPATCH, 1); // job 1 starts before its commit
    s_wait_held ();                           // whose flush is held
    assert_int_equal (s_count (ZL_MSG_ACCEPTED, NULL), 0);
    // the next turns do not wait for it: job 2 starts too
    m = s_submit (2);
    s_send_and_turn (&m, ZL_MSG_DISPATCH, 2);
    m = s_submit (3);
    s_send_and_turn (&m, ZL_MSG_DISPATCH, 3);
    assert_int_equal (s_count (ZL_MSG_ACCEPTED, NULL), 0);
    assert_int_equal (s_count (ZL_MSG_CREDIT, NULL), 0);
    // Stats answer meanwhile, and say the turns that wrote jobs 1..3 are not
    // committed (what a tool that must know waits on)
    s_stats ();
    uint64_t turn_seen = T.turns, committed_held = T.turns_committed;
    assert_true (committed_held < turn_seen - 1);
    // let the commits go: job 1's Accepted, then (the next commit) 2's and 3's
    s_hold (false);
    s_turn_until (ZL_MSG_ACCEPTED, 3, 500);
    uint64_t seqs[8];
    assert_int_equal (s_count (ZL_MSG_ACCEPTED, seqs), 3);
    assert_int_equal (seqs[0], 1);
    assert_int_equal (seqs[1], 2);
    assert_int_equal (seqs[2], 3);
    // now every turn up to the Stats one is committed
    s_stats ();
    printf ("  turns committed while held: up to %" PRIu64 " of %" PRIu64 "; after: %" PRIu64
            " of %" PRIu64 "\n",
            committed_held, turn_seen, T.turns_committed, T.turns);
    assert_true (T.turns_committed >= turn_seen);
    // all three are in the store: a restart finds them (leased: given back)
    s_stop ();
    s_start ();
    zl_msg_t ready = s_ready ();
    assert_int_equal (zlh_feed (T.h, ZLH_BACKEND, 0, &ready), ZL_TURN_OK);
    zlh_drain (T.h, s_record, NULL);
    s_turn_until (ZL_MSG_DISPATCH, 3, 200);
    assert_int_equal (s_count (ZL_MSG_DISPATCH, NULL), 3);
}

static void
test_a_commit_failed_on_the_thread_sends_nothing (void **state)
{
    (void)state;
    s_connect ();
    zl_msg_t m = s_submit (1);
    s_send_and_turn (&m, ZL_MSG_ACCEPTED, 1); // committed
    T.n_seen = 0;
    s_hold (true);
    pthread_mutex_lock (&T.mu);
    T.flush_fail = EIO;
    pthread_mutex_unlock (&T.mu);
    m = s_submit (2);
    s_send_and_turn (&m, ZL_MSG_DISPATCH, 1);
    s_wait_held ();
    m = s_submit (3);
    s_send_and_turn (&m, ZL_MSG_DISPATCH, 2);
    s_hold (false);
    int rc = ZL_TURN_OK;
    for (int i = 0; i < 500 && rc == ZL_TURN_OK; i++)
        rc = zl_broker_turn (T.broker, 10);
    assert_int_equal (rc, ZL_TURN_STORE_FAILED);
    zlh_drain (T.h, s_record, NULL);
    assert_int_equal (s_count (ZL_MSG_ACCEPTED, NULL), 0);
    assert_int_equal (zl_broker_turn (T.broker, 0), ZL_TURN_STORE_FAILED); // it stays stopped
    // a restart has job 1 only (2 and 3 were never accepted: their producer resends)
    s_stop ();
    s_start ();
    zl_msg_t ready = s_ready ();
    assert_int_equal (zlh_feed (T.h, ZLH_BACKEND, 0, &ready), ZL_TURN_OK);
    zlh_drain (T.h, s_record, NULL);
    for (int i = 0; i < 50; i++) {
        assert_int_equal (zl_broker_turn (T.broker, 5), ZL_TURN_OK);
        zlh_drain (T.h, s_record, NULL);
    }
    assert_int_equal (s_count (ZL_MSG_DISPATCH, NULL), 1);
}

static void
test_the_interval_spaces_a_stream_not_a_lone_job (void **state)
{
    (void)state;
    enum { INTERVAL_MS = 2000 };
    s_stop ();
    T.interval_ms = INTERVAL_MS;
    s_start ();
    s_connect ();
    // one job at a time, each sent once the last is accepted: no waits
    int64_t t0 = zlh_now_ms ();
    for (uint64_t seq = 1; seq <= 3; seq++) {
        zl_msg_t m = s_submit (seq);
        s_send_and_turn (&m, ZL_MSG_ACCEPTED, seq);
    }
    int64_t lone_ms = zlh_now_ms () - t0;
    printf ("  3 jobs one after another, each waiting for its Accepted: %lld ms "
            "(interval %d ms)\n",
            (long long)lone_ms, INTERVAL_MS);
    assert_true (lone_ms < INTERVAL_MS / 2);
    // a stream: job 5 comes while job 4's commit runs (held at its flush)
    s_hold (true);
    int64_t t4 = zlh_now_ms (); // job 4's commit begins after this
    zl_msg_t m = s_submit (4);
    s_send_and_turn (&m, ZL_MSG_DISPATCH, 4);
    s_wait_held ();
    m = s_submit (5);
    s_send_and_turn (&m, ZL_MSG_DISPATCH, 5); // it starts at once all the same
    s_hold (false);
    s_turn_until (ZL_MSG_ACCEPTED, 4, 1000);
    assert_int_equal (s_count (ZL_MSG_ACCEPTED, NULL), 4); // job 4's
    int64_t t_held_done = zlh_now_ms ();
    s_turn_until (ZL_MSG_ACCEPTED, 5, 1000);
    uint64_t seqs[8];
    assert_int_equal (s_count (ZL_MSG_ACCEPTED, seqs), 5);
    assert_int_equal (seqs[4], 5);
    int64_t stream_ms = zlh_now_ms () - t4;
    printf ("  job 5, written while job 4's commit ran: accepted %lld ms after job 4 was "
            "sent, %lld ms after job 4's Accepted\n",
            (long long)stream_ms, (long long)(zlh_now_ms () - t_held_done));
    assert_true (stream_ms >= INTERVAL_MS);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown (test_turns_go_on_while_a_commit_is_held, s_setup,
                                         s_teardown),
        cmocka_unit_test_setup_teardown (test_a_commit_failed_on_the_thread_sends_nothing, s_setup,
                                         s_teardown),
        cmocka_unit_test_setup_teardown (test_the_interval_spaces_a_stream_not_a_lone_job, s_setup,
                                         s_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
