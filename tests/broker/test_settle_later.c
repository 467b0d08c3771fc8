/*  test_settle_later: on a store the loop commits (LMDB in `none` mode, or
    --commit-on-loop), a turn that only settled jobs leaves its commit to a
    later turn, on the in-process harness with its clock (time moves only
    when the test moves it):
    - an Ack within --commit-interval of the last commit sends no Settled,
      and Stats says its turn is not committed; the next Submit's commit
      carries it: that turn sends the Accepted and the Settled together;
    - with nothing after it, the loop commits it once the interval since
      the last commit has passed, and the Settled goes then;
    - an Ack after a quiet interval is committed in its own turn;
    - a turn that queued anything but Settled commits at once: the Ack that
      lets an ordering key's next job go (its Dispatch waits for the
      commit), a Submit (its Accepted);
    - a broker destroyed with a batch left open commits it: after a restart
      the acked job is not given out again. */
#include "broker.h"
#include "broker_harness.h"
#include "config.h"
#include "log.h"
#include "msg.h"
#include "store.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SEEN 256
#define INTERVAL_MS 50

typedef struct {
    zl_msg_kind_t kind;
    uint64_t job_id, lease; // Dispatch: its first job; Settled: its first item
    uint64_t seq;           // Accepted: its first job's seq
} seen_t;

static struct {
    char *dir;
    zl_broker_config_t cfg;
    zl_broker_t *broker;
    zlh_t *h;
    seen_t seen[MAX_SEEN];
    size_t n_seen;
    uint64_t turns, turns_committed; // the last Stats reply's loop_turns, loop_turns_committed
} T;

static void
s_record (void *ctx, zlh_sock_t sock, int peer, const char *topic, const zl_msg_t *msg)
{
    (void)ctx;
    (void)sock;
    (void)peer;
    (void)topic;
    if (T.n_seen == MAX_SEEN)
        return;
    seen_t *s = &T.seen[T.n_seen++];
    *s = (seen_t){.kind = msg->kind};
    if (msg->kind == ZL_MSG_DISPATCH && msg->u.dispatch.n) {
        s->job_id = msg->u.dispatch.jobs[0].job_id;
        s->lease = msg->u.dispatch.jobs[0].lease;
    }
    if (msg->kind == ZL_MSG_SETTLED && msg->u.settled.n)
        s->job_id = msg->u.settled.items[0].job_id;
    if (msg->kind == ZL_MSG_ACCEPTED && msg->u.accepted.n)
        s->seq = msg->u.accepted.jobs[0].seq;
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

// How many messages of `kind` arrived.
static size_t
s_count (zl_msg_kind_t kind)
{
    size_t n = 0;
    for (size_t i = 0; i < T.n_seen; i++)
        n += T.seen[i].kind == kind;
    return n;
}

// The last message of `kind` (NULL if none).
static const seen_t *
s_last (zl_msg_kind_t kind)
{
    for (size_t i = T.n_seen; i-- > 0;)
        if (T.seen[i].kind == kind)
            return &T.seen[i];
    return NULL;
}

static void
s_start (void)
{
    zl_broker_config_defaults (&T.cfg);
    zlh_config_inproc (&T.cfg, T.dir);
    zl_broker_config_lane (&T.cfg, "a");
    T.cfg.durability = ZL_DURABILITY_NONE; // the loop commits
    T.cfg.commit_interval_ms = INTERVAL_MS;
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
    T.dir = zlh_tmpdir ("settle-later");
    assert_non_null (T.dir);
    s_start ();
    return 0;
}

static int
s_teardown (void **state)
{
    (void)state;
    s_stop ();
    zlh_rmdir (T.dir);
    free (T.dir);
    return 0;
}

// Run turns (at most `turns`) until `want` messages of `kind` have come.
static void
s_turn_until (zl_msg_kind_t kind, size_t want, int turns)
{
    for (int i = 0; i < turns && s_count (kind) < want; i++) {
        assert_int_equal (zl_broker_turn (T.broker, 10), ZL_TURN_OK);
        zlh_drain (T.h, s_record, NULL);
    }
}

// A worker (capacity 100) and a producer, each answered.
static void
s_connect (void)
{
    static const char *lanes[] = {"a"};
    zl_msg_t ready = {.kind = ZL_MSG_READY};
    ready.u.ready = (zl_ready_t){.name = "w0", .n_lanes = 1, .lanes = lanes, .capacity = 100};
    zl_msg_t hello = {.kind = ZL_MSG_HELLO};
    hello.u.hello.client = "test-settle-later";
    assert_int_equal (zlh_feed (T.h, ZLH_BACKEND, 0, &ready), ZL_TURN_OK);
    assert_int_equal (zlh_feed (T.h, ZLH_FRONTEND, 0, &hello), ZL_TURN_OK);
    zlh_drain (T.h, s_record, NULL);
    T.n_seen = 0;
}

// Submit job `seq` (with `key` as its ordering key, "" none) through the
// producer's socket; run turns until its Accepted came.
static void
s_submit (uint64_t seq, const char *key)
{
    zl_job_spec_t spec = {.seq = seq,
                          .tenant = "t",
                          .lane = "a",
                          .payload = {(const uint8_t *)"payload", 7},
                          .ordering_key = key};
    zl_msg_t m = {.kind = ZL_MSG_SUBMIT};
    m.u.submit = (zl_submit_t){.n = 1, .jobs = &spec};
    size_t before = s_count (ZL_MSG_ACCEPTED);
    assert_int_equal (zlh_send (T.h, ZLH_FRONTEND, 0, &m), 0);
    s_turn_until (ZL_MSG_ACCEPTED, before + 1, 200);
    assert_int_equal (s_count (ZL_MSG_ACCEPTED), before + 1);
}

// Ack the job of Dispatch `d` through the worker's socket, and run turns
// until the broker has read it (`turns` turns: a Settled may not come).
static void
s_ack (const seen_t *d, int turns)
{
    zl_ack_item_t item = {.job_id = d->job_id, .lease = d->lease, .run_us = 1000};
    zl_msg_t m = {.kind = ZL_MSG_ACK};
    m.u.ack = (zl_ack_t){1, &item};
    assert_int_equal (zlh_send (T.h, ZLH_BACKEND, 0, &m), 0);
    for (int i = 0; i < turns; i++) {
        assert_int_equal (zl_broker_turn (T.broker, 10), ZL_TURN_OK);
        zlh_drain (T.h, s_record, NULL);
    }
}

// Ask for Stats and run turns until the reply came.
static void
s_stats (void)
{
    zl_msg_t m = {.kind = ZL_MSG_ADMIN_REQUEST};
    m.u.admin_request = (zl_admin_request_t){.request_id = 1, .op = ZL_ADMIN_STATS, .lane = ""};
    m.u.admin_request.filter.lane = m.u.admin_request.filter.tenant = "";
    size_t before = s_count (ZL_MSG_ADMIN_REPLY);
    T.turns = T.turns_committed = 0;
    assert_int_equal (zlh_send (T.h, ZLH_ADMIN, 0, &m), 0);
    s_turn_until (ZL_MSG_ADMIN_REPLY, before + 1, 200);
    assert_int_equal (s_count (ZL_MSG_ADMIN_REPLY), before + 1);
    assert_true (T.turns > 0);
}

static void
test_an_ack_rides_on_the_next_submit (void **state)
{
    (void)state;
    s_connect ();
    s_submit (1, ""); // committed at once: its Accepted came
    s_turn_until (ZL_MSG_DISPATCH, 1, 200);
    seen_t d1 = *s_last (ZL_MSG_DISPATCH);
    s_ack (&d1, 20);
    assert_int_equal (s_count (ZL_MSG_SETTLED), 0);
    s_stats (); // the Ack's turn is not committed
    uint64_t turns = T.turns, committed = T.turns_committed;
    assert_true (committed < turns);
    // the next Submit's commit carries the Ack: its turn sends both
    size_t n_seen = T.n_seen;
    s_submit (2, "");
    assert_int_equal (s_count (ZL_MSG_SETTLED), 1);
    assert_int_equal (s_last (ZL_MSG_SETTLED)->job_id, d1.job_id);
    bool settled_with_accepted = false;
    for (size_t i = n_seen; i < T.n_seen; i++)
        settled_with_accepted |= T.seen[i].kind == ZL_MSG_SETTLED;
    assert_true (settled_with_accepted);
    s_stats ();
    printf ("  an Ack's turn left open: committed turns %" PRIu64 " of %" PRIu64
            "; after the next Submit: %" PRIu64 " of %" PRIu64 "\n",
            committed, turns, T.turns_committed, T.turns);
    assert_true (T.turns_committed >= turns);
}

static void
test_a_lone_ack_is_committed_after_the_interval (void **state)
{
    (void)state;
    s_connect ();
    s_submit (1, "");
    s_turn_until (ZL_MSG_DISPATCH, 1, 200);
    seen_t d1 = *s_last (ZL_MSG_DISPATCH);
    s_ack (&d1, 20);
    assert_int_equal (s_count (ZL_MSG_SETTLED), 0);
    zlh_clock_advance_us ((INTERVAL_MS - 1) * 1000);
    for (int i = 0; i < 10; i++) {
        assert_int_equal (zl_broker_turn (T.broker, 1), ZL_TURN_OK);
        zlh_drain (T.h, s_record, NULL);
    }
    assert_int_equal (s_count (ZL_MSG_SETTLED), 0); // 1 ms early
    zlh_clock_advance_us (1000);
    s_turn_until (ZL_MSG_SETTLED, 1, 50);
    assert_int_equal (s_count (ZL_MSG_SETTLED), 1);
    assert_int_equal (s_last (ZL_MSG_SETTLED)->job_id, d1.job_id);
    // an Ack a quiet interval after the last commit is committed in its turn
    s_submit (2, "");
    s_turn_until (ZL_MSG_DISPATCH, 2, 200);
    seen_t d2 = *s_last (ZL_MSG_DISPATCH);
    zlh_clock_advance_us (INTERVAL_MS * 1000);
    s_ack (&d2, 0);
    s_turn_until (ZL_MSG_SETTLED, 2, 50);
    assert_int_equal (s_count (ZL_MSG_SETTLED), 2);
    assert_int_equal (s_last (ZL_MSG_SETTLED)->job_id, d2.job_id);
}

static void
test_an_ack_that_lets_a_job_go_commits_at_once (void **state)
{
    (void)state;
    s_connect ();
    s_submit (1, "k");
    s_submit (2, "k"); // waits for job 1 (the same ordering key)
    s_turn_until (ZL_MSG_DISPATCH, 1, 200);
    assert_int_equal (s_count (ZL_MSG_DISPATCH), 1);
    seen_t d1 = *s_last (ZL_MSG_DISPATCH);
    // job 2's Dispatch waits for the commit of job 1's Ack: no waiting for
    // the interval (the clock does not move here)
    s_ack (&d1, 0);
    s_turn_until (ZL_MSG_DISPATCH, 2, 200);
    assert_int_equal (s_count (ZL_MSG_DISPATCH), 2);
    assert_int_equal (s_count (ZL_MSG_SETTLED), 1);
    assert_int_equal (s_last (ZL_MSG_SETTLED)->job_id, d1.job_id);
}

static void
test_a_batch_left_open_is_committed_at_destroy (void **state)
{
    (void)state;
    s_connect ();
    s_submit (1, "");
    s_submit (2, "");
    s_turn_until (ZL_MSG_DISPATCH, 2, 200);
    seen_t d[2];
    size_t k = 0;
    for (size_t i = 0; i < T.n_seen && k < 2; i++)
        if (T.seen[i].kind == ZL_MSG_DISPATCH)
            d[k++] = T.seen[i];
    assert_int_equal (k, 2);
    s_ack (&d[0], 20); // job 1's Ack: left open
    assert_int_equal (s_count (ZL_MSG_SETTLED), 0);
    s_stop (); // a clean stop commits it
    s_start ();
    static const char *lanes[] = {"a"};
    zl_msg_t ready = {.kind = ZL_MSG_READY};
    ready.u.ready = (zl_ready_t){.name = "w0", .n_lanes = 1, .lanes = lanes, .capacity = 100};
    assert_int_equal (zlh_feed (T.h, ZLH_BACKEND, 0, &ready), ZL_TURN_OK);
    zlh_drain (T.h, s_record, NULL);
    s_turn_until (ZL_MSG_DISPATCH, 2, 50);
    assert_int_equal (s_count (ZL_MSG_DISPATCH), 1); // job 2 only: job 1 was acked
    assert_int_equal (s_last (ZL_MSG_DISPATCH)->job_id, d[1].job_id);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown (test_an_ack_rides_on_the_next_submit, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_a_lone_ack_is_committed_after_the_interval, s_setup,
                                         s_teardown),
        cmocka_unit_test_setup_teardown (test_an_ack_that_lets_a_job_go_commits_at_once, s_setup,
                                         s_teardown),
        cmocka_unit_test_setup_teardown (test_a_batch_left_open_is_committed_at_destroy, s_setup,
                                         s_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
