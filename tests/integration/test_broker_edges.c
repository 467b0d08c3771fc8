/*  test_broker_edges: broker behaviours that no other process test pins
    down, against a real zlane-broker and raw sockets: the default lane, a
    draining worker (Ready with capacity 0) gets nothing new, and a silent
    producer is forgotten. */
#include "zltest.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>
#include <zmq.h>

#define WAIT_MS 5000

static void
s_submit (zlt_client_t *producer, const char *tenant, const char *lane, zl_msg_t *reply)
{
    zl_job_spec_t spec = {.seq = 1,
                          .tenant = tenant,
                          .lane = lane,
                          .payload = {(const uint8_t *)"x", 1},
                          .idempotency_key = ""};
    zl_msg_t m = {.kind = ZL_MSG_SUBMIT};
    m.u.submit = (zl_submit_t){1, &spec};
    assert_int_equal (zlt_client_send (producer, &m), 0);
    assert_int_equal (zlt_client_expect (producer, ZL_MSG_ACCEPTED, reply, WAIT_MS), 0);
}

static void
s_ready (zlt_client_t *worker, uint32_t capacity)
{
    const char *lanes[] = {"a"};
    zl_msg_t m = {.kind = ZL_MSG_READY};
    m.u.ready = (zl_ready_t){"edge-worker", 1, lanes, capacity};
    assert_int_equal (zlt_client_send (worker, &m), 0);
}

static void
test_default_lane (void **state)
{
    (void)state;
    static const char *const args[] = {"--lane", "a", "--default-lane", "a", NULL};
    zlt_broker_t *b = zlt_broker_start (args);
    assert_non_null (b);
    zlt_client_t *admin = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (b, "admin"));
    zlt_client_t *producer = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (b, "frontend"));
    zl_msg_t reply;
    s_submit (producer, "t", "nowhere", &reply);
    assert_int_equal (reply.kind, ZL_MSG_ACCEPTED); // not Rejected UNKNOWN_LANE
    assert_int_equal (zlt_counter (admin, "jobs_to_default_lane"), 1);
    assert_int_equal (zlt_counter (admin, "err_unknown_lane"), 0);
    zl_group_stats_t g;
    assert_int_equal (zlt_group (admin, "a", "t", &g), 0);
    assert_int_equal (g.ready, 1); // it waits in the default lane
}

static void
test_draining_worker_gets_nothing_new (void **state)
{
    (void)state;
    static const char *const args[] = {"--lane", "a", "--liveness", "60", NULL};
    zlt_broker_t *b = zlt_broker_start (args);
    assert_non_null (b);
    const char *backend = zlt_broker_endpoint (b, "backend");
    zlt_client_t *admin = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (b, "admin"));
    zlt_client_t *producer = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (b, "frontend"));
    zlt_client_t *draining = zlt_client_new (ZMQ_DEALER, backend);
    s_ready (draining, 5);
    assert_int_equal (zlt_wait_counter (admin, "workers_ready", 1, WAIT_MS), 0);
    s_ready (draining, 0); // stopping: keep what you hold, send nothing new
    assert_int_equal (zlt_wait_counter (admin, "workers_ready", 2, WAIT_MS), 0);
    zl_msg_t reply;
    s_submit (producer, "t", "a", &reply);
    assert_int_equal (reply.kind, ZL_MSG_ACCEPTED);
    // a worker with room takes the job; the draining one was passed over in
    // the same turns, so by now nothing can be on its way to it
    zlt_client_t *fresh = zlt_client_new (ZMQ_DEALER, backend);
    s_ready (fresh, 1);
    zl_msg_t m;
    assert_int_equal (zlt_client_expect (fresh, ZL_MSG_DISPATCH, &m, WAIT_MS), 0);
    assert_int_equal (m.kind, ZL_MSG_DISPATCH);
    assert_int_equal (m.u.dispatch.n, 1);
    assert_int_equal (zlt_counter (admin, "jobs_dispatched"), 1);
    int rc = zlt_client_expect (draining, ZL_MSG_DISPATCH, &m, 200);
    assert_true (rc != 0 || m.kind != ZL_MSG_DISPATCH);
}

static void
test_silent_producer_is_forgotten (void **state)
{
    (void)state;
    static const char *const args[] = {"--lane", "a", "--set", "producer_idle=300ms", NULL};
    zlt_broker_t *b = zlt_broker_start (args);
    assert_non_null (b);
    zlt_client_t *admin = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (b, "admin"));
    zlt_client_t *producer = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (b, "frontend"));
    zl_msg_t m = {.kind = ZL_MSG_HELLO};
    m.u.hello.client = "edge-producer";
    assert_int_equal (zlt_client_send (producer, &m), 0);
    assert_int_equal (zlt_client_expect (producer, ZL_MSG_CREDIT, &m, WAIT_MS), 0);
    zl_stats_t st;
    assert_int_equal (zlt_stats (admin, &st, WAIT_MS), 0);
    assert_int_equal (st.producers, 1);
    // silent for longer than producer_idle: the broker forgets it (bounded wait)
    int64_t deadline = zlt_now_ms () + WAIT_MS;
    do
        assert_int_equal (zlt_stats (admin, &st, WAIT_MS), 0);
    while (st.producers != 0 && zlt_now_ms () < deadline);
    assert_int_equal (st.producers, 0);
    // and it may come back: its next Submit is an implicit Hello
    zl_msg_t reply;
    s_submit (producer, "t", "a", &reply);
    assert_int_equal (reply.kind, ZL_MSG_ACCEPTED);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown (test_default_lane, zlt_teardown),
        cmocka_unit_test_teardown (test_draining_worker_gets_nothing_new, zlt_teardown),
        cmocka_unit_test_teardown (test_silent_producer_is_forgotten, zlt_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
