/*  test_broker_edges: broker behaviours that no other process test pins
    down, against a real zlane-broker and raw sockets: the default lane, a
    draining worker (Ready with capacity 0) gets nothing new, a silent
    producer is forgotten, a paused lane dispatches nothing until resumed,
    refused admin requests are answered and counted, dead letters past
    --dlq-retention are purged, and
    the Prometheus page (--metrics) over plain HTTP, bad requests included. */
#include "zltest.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>
#include <zmq.h>

#define WAIT_MS 5000

// A producer client that said Hello and holds credit.
static zlt_client_t *
s_producer (zlt_broker_t *b)
{
    zlt_client_t *producer = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (b, "frontend"));
    assert_non_null (producer);
    assert_true (zlt_client_hello (producer, "edge-producer", WAIT_MS) > 0);
    return producer;
}

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

// One HTTP exchange with the metrics endpoint (tcp://127.0.0.1:PORT): send
// `request`, read until the broker closes. Returns the answer (caller frees).
static char *
s_http (const char *endpoint, const char *request)
{
    const char *colon = strrchr (endpoint, ':');
    assert_non_null (colon);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons ((uint16_t)atoi (colon + 1))};
    a.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    int fd = socket (AF_INET, SOCK_STREAM, 0);
    assert_true (fd >= 0);
    struct timeval tv = {WAIT_MS / 1000, 0}; // bounded: a silent broker fails the test
    setsockopt (fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    assert_int_equal (connect (fd, (struct sockaddr *)&a, sizeof a), 0);
    size_t len = strlen (request);
    assert_int_equal (write (fd, request, len), (ssize_t)len);
    char *got = calloc (1, 1);
    size_t n = 0;
    char buf[8192];
    ssize_t r;
    while ((r = read (fd, buf, sizeof buf)) > 0) {
        got = realloc (got, n + (size_t)r + 1);
        memcpy (got + n, buf, (size_t)r);
        n += (size_t)r;
        got[n] = '\0';
    }
    if (r < 0)
        fail_msg ("no answer (or no close) from the metrics page within %d ms; got: %s", WAIT_MS,
                  got);
    close (fd);
    return got;
}

// The metrics page shows the broker's counters and each lane x tenant; bad
// requests get their status and a count, and the broker goes on serving.
static void
test_metrics_page (void **state)
{
    (void)state;
    static const char *const args[] = {"--lane", "a", "--metrics", "tcp://127.0.0.1:*", NULL};
    zlt_broker_t *b = zlt_broker_start (args);
    assert_non_null (b);
    const char *metrics = zlt_broker_endpoint (b, "metrics");
    assert_non_null (metrics);
    zlt_client_t *admin = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (b, "admin"));
    zlt_client_t *producer = s_producer (b);
    zl_msg_t reply;
    s_submit (producer, "acme", "a", &reply);
    char *page = s_http (metrics, "GET /metrics HTTP/1.1\r\nHost: broker\r\n\r\n");
    const char *want[] = {"HTTP/1.0 200 OK\r\n",
                          "Content-Type: text/plain; version=0.0.4",
                          "\nzlane_jobs_accepted_total 1\n",
                          "\nzlane_ready{lane=\"a\",tenant=\"acme\"} 1\n",
                          "\nzlane_flow_submitted_total{lane=\"a\",tenant=\"acme\"} 1\n",
                          "\nzlane_lane_paused{lane=\"a\"} 0\n"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr (page, want[i]))
            fail_msg ("the metrics page lacks '%s':\n%s", want[i], page);
    free (page);
    static const struct {
        const char *request, *status;
    } bad[] = {{"GET /other HTTP/1.1\r\n\r\n", "HTTP/1.0 404 "},
               {"DELETE /metrics HTTP/1.1\r\n\r\n", "HTTP/1.0 405 "},
               {"\x16\x03\x01 hello\r\n\r\n", "HTTP/1.0 400 "}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        page = s_http (metrics, bad[i].request);
        if (strncmp (page, bad[i].status, strlen (bad[i].status)))
            fail_msg ("wanted %s, got '%s'", bad[i].status, page);
        free (page);
    }
    assert_int_equal (zlt_counter (admin, "err_metrics_refused"), 3);
    assert_int_equal (zlt_counter (admin, "metrics_requests"), 1);
    // still serving: the page and the queue
    s_submit (producer, "acme", "a", &reply);
    page = s_http (metrics, "GET /metrics HTTP/1.0\r\n\r\n");
    assert_non_null (strstr (page, "\nzlane_ready{lane=\"a\",tenant=\"acme\"} 2\n"));
    assert_non_null (strstr (page, "\nzlane_store_info{backend=\"lmdb\"} 1\n"));
    assert_non_null (strstr (page, "\nzlane_store_role{role=\"leader\"} 1\n"));
    assert_non_null (strstr (page, "\nzlane_store_role{role=\"standby\"} 0\n"));
    assert_non_null (strstr (page, "\nzlane_store_epoch 0\n"));
    assert_non_null (strstr (page, "\nzlane_store_reachable 1\n"));
    assert_non_null (strstr (page, "\nzlane_store_commits_total "));
    assert_non_null (strstr (page, "\nzlane_store_commit_max_us "));
    free (page);
    assert_int_equal (zlt_counter (admin, "metrics_requests"), 2);
    // per lane only, for many tenants
    page = s_http (metrics, "GET /metrics?tenants=0 HTTP/1.0\r\n\r\n");
    assert_non_null (strstr (page, "\nzlane_ready{lane=\"a\"} 2\n"));
    assert_null (strstr (page, "tenant=\"acme\""));
    free (page);
}

// One admin request; returns its reply (in `reply`).
static const zl_admin_reply_t *
s_admin (zlt_client_t *admin, zl_admin_op_t op, const char *lane, uint64_t job_id, zl_msg_t *reply)
{
    static uint64_t request_id = 1000;
    zl_msg_t req = {.kind = ZL_MSG_ADMIN_REQUEST};
    req.u.admin_request.request_id = ++request_id;
    req.u.admin_request.op = op;
    req.u.admin_request.lane = lane;
    req.u.admin_request.job_id = job_id;
    req.u.admin_request.filter.lane = req.u.admin_request.filter.tenant = "";
    assert_int_equal (zlt_client_send (admin, &req), 0);
    do
        assert_int_equal (zlt_client_expect (admin, ZL_MSG_ADMIN_REPLY, reply, WAIT_MS), 0);
    while (reply->u.admin_reply.request_id != request_id);
    return &reply->u.admin_reply;
}

// A paused lane dispatches nothing, even to a worker with room; resumed, it
// does. Admin requests that cannot be done get ok=false with the reason and
// count in err_admin_refused.
static void test_lane_pause_and_refused_admin (void **state);

// A heartbeat the broker cannot deliver (the worker's connection is gone
// but liveness has not declared it dead yet) is counted in
// err_peer_unreachable, like every other failed send.
static void
test_failed_heartbeats_counted (void **state)
{
    (void)state;
    const char *args[] = {"--lane", "a", "--heartbeat", "100ms", "--liveness", "5", NULL};
    zlt_broker_t *broker = zlt_broker_start (args);
    assert_non_null (broker);
    zlt_client_t *admin = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (broker, "admin"));
    zlt_client_t *worker = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (broker, "backend"));
    s_ready (worker, 1);
    assert_int_equal (zlt_wait_counter (admin, "workers_ready", 1, WAIT_MS), 0);
    uint64_t before = zlt_counter (admin, "err_peer_unreachable");
    zlt_client_destroy (&worker); // no job is sent to it: only heartbeats
    assert_int_equal (zlt_wait_counter (admin, "workers_dead", 1, WAIT_MS), 0);
    uint64_t after = zlt_counter (admin, "err_peer_unreachable");
    if (after <= before)
        fail_msg ("heartbeats to a gone worker: err_peer_unreachable %llu before, %llu after",
                  (unsigned long long)before, (unsigned long long)after);
    zlt_client_destroy (&admin);
}

static void
test_lane_pause_and_refused_admin (void **state)
{
    (void)state;
    static const char *const args[] = {"--lane", "a", NULL};
    zlt_broker_t *b = zlt_broker_start (args);
    assert_non_null (b);
    zlt_client_t *admin = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (b, "admin"));
    zlt_client_t *producer = s_producer (b);
    zl_msg_t reply, m;
    assert_true (s_admin (admin, ZL_ADMIN_PAUSE, "a", 0, &reply)->ok);
    s_submit (producer, "t", "a", &m);
    zlt_client_t *worker = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (b, "backend"));
    s_ready (worker, 1);
    // the turn that took the Ready also tried to dispatch
    assert_int_equal (zlt_wait_counter (admin, "workers_ready", 1, WAIT_MS), 0);
    assert_int_equal (zlt_counter (admin, "jobs_dispatched"), 0);
    zl_group_stats_t g;
    assert_int_equal (zlt_group (admin, "a", "t", &g), 0);
    assert_int_equal (g.ready, 1);
    assert_true (g.paused);
    assert_true (s_admin (admin, ZL_ADMIN_RESUME, "a", 0, &reply)->ok);
    assert_int_equal (zlt_client_expect (worker, ZL_MSG_DISPATCH, &m, WAIT_MS), 0);
    assert_int_equal (m.u.dispatch.n, 1);

    // refused: each answered with a reason and counted
    assert_int_equal (zlt_counter (admin, "err_admin_refused"), 0);
    const zl_admin_reply_t *r = s_admin (admin, ZL_ADMIN_PAUSE, "nope", 0, &reply);
    assert_false (r->ok);
    assert_non_null (strstr (r->error, "lane 'nope' is not declared"));
    r = s_admin (admin, ZL_ADMIN_DLQ_SHOW, "", 999, &reply);
    assert_false (r->ok);
    assert_non_null (strstr (r->error, "job 999 is not in the dead-letter queue"));
    r = s_admin (admin, ZL_ADMIN_DLQ_PURGE, "", 0, &reply);
    assert_false (r->ok);
    assert_non_null (strstr (r->error, "say which dead letters"));
    assert_int_equal (zlt_counter (admin, "err_admin_refused"), 3);
}

// A dead letter older than --dlq-retention is purged (and counted); one
// younger stays.
static void
test_dlq_retention (void **state)
{
    (void)state;
    static const char *const args[] = {"--lane", "a", "--dlq-retention", "1500ms", NULL};
    zlt_broker_t *b = zlt_broker_start (args);
    assert_non_null (b);
    zlt_client_t *admin = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (b, "admin"));
    zlt_client_t *producer = s_producer (b);
    zlt_client_t *worker = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (b, "backend"));
    s_ready (worker, 1);
    zl_msg_t reply, m;
    int64_t died[2], nacked[2]; // seen dead (later than it died), and the Nack sent (before)
    for (int k = 0; k < 2; k++) {
        s_submit (producer, "t", "a", &reply);
        assert_int_equal (zlt_client_expect (worker, ZL_MSG_DISPATCH, &m, WAIT_MS), 0);
        assert_int_equal (m.u.dispatch.n, 1);
        zl_nack_item_t item = {.job_id = m.u.dispatch.jobs[0].job_id,
                               .lease = m.u.dispatch.jobs[0].lease,
                               .cls = ZL_FAIL_PERMANENT,
                               .error = "bad input",
                               .run_us = 10};
        zl_msg_t nack = {.kind = ZL_MSG_NACK};
        nack.u.nack = (zl_nack_t){1, &item};
        nacked[k] = zlt_now_ms ();
        assert_int_equal (zlt_client_send (worker, &nack), 0);
        assert_int_equal (zlt_wait_counter (admin, "jobs_dead_lettered", (uint64_t)k + 1, WAIT_MS),
                          0);
        died[k] = zlt_now_ms ();
        if (k == 0) // the second one dies 800 ms after the first
            while (zlt_now_ms () - died[0] < 800)
                zlt_client_expect (worker, ZL_MSG_SETTLED, &m, 50); // keep the worker's queue short
    }
    // the first expires about 1.5 s after it died, the second not before 2.3 s
    assert_int_equal (zlt_wait_counter (admin, "dlq_expired", 1, 5000), 0);
    int64_t at = zlt_now_ms ();
    assert_true (at - died[0] >= 1500 - 200); // not before its time (less the stats lag)
    zl_group_stats_t g;
    assert_int_equal (zlt_group (admin, "a", "t", &g), 0);
    if (zlt_now_ms () - nacked[1] < 1500)
        assert_int_equal (g.dlq, 1); // the younger one is still there
    assert_int_equal (zlt_wait_counter (admin, "dlq_expired", 2, 5000), 0);
    assert_int_equal (zlt_group (admin, "a", "t", &g), 0);
    assert_int_equal (g.dlq, 0);
    assert_int_equal (zlt_counter (admin, "jobs_purged"), 0); // not an operator's purge
}

static void
test_default_lane (void **state)
{
    (void)state;
    static const char *const args[] = {"--lane", "a", "--default-lane", "a", NULL};
    zlt_broker_t *b = zlt_broker_start (args);
    assert_non_null (b);
    zlt_client_t *admin = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (b, "admin"));
    zlt_client_t *producer = s_producer (b);
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
    zlt_client_t *producer = s_producer (b);
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
    zlt_client_t *producer = s_producer (b);
    zl_stats_t st;
    assert_int_equal (zlt_stats (admin, &st, WAIT_MS), 0);
    assert_int_equal (st.producers, 1);
    // silent for longer than producer_idle: the broker forgets it and says
    // so, so that a producer waiting for credit knows to say Hello again
    zl_msg_t m;
    assert_int_equal (zlt_client_expect (producer, ZL_MSG_ERROR, &m, WAIT_MS), 0);
    assert_int_equal (m.kind, ZL_MSG_ERROR);
    assert_int_equal (m.u.error.code, ZL_ERR_NOT_READY);
    assert_non_null (strstr (m.u.error.message, "Hello"));
    assert_int_equal (zlt_stats (admin, &st, WAIT_MS), 0);
    assert_int_equal (st.producers, 0);
    // a Submit without a new Hello takes nothing
    uint64_t not_ready = zlt_counter (admin, "err_not_ready");
    zl_job_spec_t spec = {.seq = 7, .tenant = "t", .lane = "a", .idempotency_key = ""};
    spec.payload = (zl_bytes_t){(const uint8_t *)"x", 1};
    m = (zl_msg_t){.kind = ZL_MSG_SUBMIT};
    m.u.submit = (zl_submit_t){1, &spec};
    assert_int_equal (zlt_client_send (producer, &m), 0);
    assert_int_equal (zlt_client_expect (producer, ZL_MSG_ACCEPTED, &m, WAIT_MS), 0);
    assert_int_equal (m.kind, ZL_MSG_ERROR);
    assert_int_equal (m.u.error.code, ZL_ERR_NOT_READY);
    assert_int_equal (zlt_counter (admin, "err_not_ready"), not_ready + 1);
    assert_int_equal (zlt_counter (admin, "jobs_accepted"), 0);
    // and after Hello it is served again
    assert_true (zlt_client_hello (producer, "edge-producer", WAIT_MS) > 0);
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
        cmocka_unit_test_teardown (test_metrics_page, zlt_teardown),
        cmocka_unit_test_teardown (test_dlq_retention, zlt_teardown),
        cmocka_unit_test_teardown (test_lane_pause_and_refused_admin, zlt_teardown),
        cmocka_unit_test_teardown (test_failed_heartbeats_counted, zlt_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
