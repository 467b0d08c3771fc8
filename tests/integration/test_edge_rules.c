/*  test_edge_rules: the rules at the broker's edge, tried as a third-party
    client would, with raw frames against a real zlane-broker:
      - credit holds on every path (a Submit before Hello takes nothing);
      - every string field is text: a NUL byte, invalid UTF-8 or a control
        character in a name is refused INVALID, naming the field, before
        anything is stored (no two tenants or keys merge at a NUL);
      - admin replies say what happened (unknown ids and undeclared lanes
        are refusals, a filter that matches nothing is a success with 0);
      - the errors the README promises (MAX_RUN, unknown Nack class, Extend
        with lease_ms 0);
      - a lease belongs to the worker connection (or worker instance) it was
        granted to;
      - one bad message earns at most one reply;
      - what an outside client makes the broker keep is bounded (tenants,
        auto lanes), and records stored before these checks still load.
    Each refusal is counted; the broker keeps serving. */
#include "job.h"
#include "store.h"
#include "zltest.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#define WAIT_MS 15000

typedef struct {
    zlt_broker_t *broker;
    zlt_client_t *admin;
    zlt_client_t *producer;
} fx_t;

static void
s_start (fx_t *fx, const char *const args[])
{
    static const char *const defaults[] = {"--lane", "a", "--lane", "b", "--liveness", "60", NULL};
    memset (fx, 0, sizeof *fx);
    fx->broker = zlt_broker_start (args ? args : defaults);
    assert_non_null (fx->broker);
    fx->admin = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (fx->broker, "admin"));
    fx->producer = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (fx->broker, "frontend"));
    assert_non_null (fx->admin);
    assert_non_null (fx->producer);
}

static zlt_client_t *
s_worker_client (fx_t *fx)
{
    zlt_client_t *w = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (fx->broker, "backend"));
    assert_non_null (w);
    return w;
}

// Send Ready and wait until the broker has registered it.
static void
s_ready (fx_t *fx, zlt_client_t *worker, const char *name, uint64_t instance, uint32_t capacity)
{
    uint64_t before = zlt_counter (fx->admin, "workers_ready");
    const char *lanes[] = {"a"};
    zl_msg_t m = {.kind = ZL_MSG_READY};
    m.u.ready = (zl_ready_t){name, 1, lanes, capacity, instance};
    assert_int_equal (zlt_client_send (worker, &m), 0);
    assert_int_equal (zlt_wait_counter (fx->admin, "workers_ready", before + 1, WAIT_MS), 0);
}

static zl_job_spec_t
s_spec (uint64_t seq, const char *tenant, const char *key)
{
    zl_job_spec_t spec = {.seq = seq, .tenant = tenant, .lane = "a", .idempotency_key = key};
    spec.payload = (zl_bytes_t){(const uint8_t *)"payload", 7};
    return spec;
}

static void
s_send_specs (zlt_client_t *c, zl_job_spec_t *specs, size_t n)
{
    zl_msg_t m = {.kind = ZL_MSG_SUBMIT};
    m.u.submit = (zl_submit_t){n, specs};
    assert_int_equal (zlt_client_send (c, &m), 0);
}

/*  Encode `msg`, replace each '\x01' byte of the frame that stands between
    two letters or digits (inside a string: never a tag, length or number)
    by `with` -- a NUL byte, say, which a C string cannot carry -- and send
    the frame as is. */
static void
s_send_patched (zlt_client_t *c, const zl_msg_t *msg, uint8_t with)
{
    size_t size;
    const uint8_t *enc = zl_codec_encode (zlt_client_codec (c), msg, &size);
    assert_non_null (enc);
    uint8_t *frame = malloc (size);
    memcpy (frame, enc, size);
    size_t patched = 0;
    for (size_t i = 1; i + 1 < size; i++)
        if (frame[i] == 0x01 && isalnum (frame[i - 1]) && isalnum (frame[i + 1])) {
            frame[i] = with;
            patched++;
        }
    assert_true (patched > 0);
    assert_int_equal (zlt_client_send_raw (c, frame, size, false), 0);
    free (frame);
}

static char *
s_expect_error (zlt_client_t *c, zl_error_code_t code)
{
    zl_msg_t m;
    assert_int_equal (zlt_client_expect (c, ZL_MSG_ERROR, &m, WAIT_MS), 0);
    if (m.u.error.code != code)
        fail_msg ("expected Error %s, got %s: %s", zl_error_code_name (code),
                  zl_error_code_name (m.u.error.code), m.u.error.message);
    assert_true (m.u.error.message && m.u.error.message[0]);
    return strdup (m.u.error.message);
}

// The rejection of `seq`: its reason (caller frees); fails on an Accepted.
static char *
s_expect_rejected (zlt_client_t *c, uint64_t seq, zl_reject_code_t code)
{
    zl_msg_t m;
    assert_int_equal (zlt_client_expect (c, ZL_MSG_REJECTED, &m, WAIT_MS), 0);
    if (m.kind == ZL_MSG_ERROR)
        fail_msg ("expected Rejected, got Error %s: %s", zl_error_code_name (m.u.error.code),
                  m.u.error.message);
    assert_int_equal (m.u.rejected.n, 1);
    assert_true (m.u.rejected.jobs[0].seq == seq);
    if (m.u.rejected.jobs[0].code != code)
        fail_msg ("seq %" PRIu64 ": expected %s, got %s: %s", seq, zl_reject_code_name (code),
                  zl_reject_code_name (m.u.rejected.jobs[0].code), m.u.rejected.jobs[0].reason);
    return strdup (m.u.rejected.jobs[0].reason);
}

static void
s_expect_reason (char *why, const char *needle)
{
    if (!strstr (why, needle))
        fail_msg ("the reason '%s' does not say '%s'", why, needle);
    free (why);
}

// ---------------------------------------------------------------- credit
/*  A Submit before Hello is refused whole (NOT_READY); after Hello, credit
    bounds even the first batch. */
static void
test_credit_needs_hello (void **state)
{
    (void)state;
    static const char *const args[] = {"--lane", "a", "--producer-window", "50", NULL};
    fx_t fx;
    s_start (&fx, args);
    enum { N = 150 };
    zl_job_spec_t specs[N];
    for (size_t i = 0; i < N; i++)
        specs[i] = s_spec (i + 1, "t", "");
    s_send_specs (fx.producer, specs, N);
    s_expect_reason (s_expect_error (fx.producer, ZL_ERR_NOT_READY), "Hello");
    assert_int_equal (zlt_counter (fx.admin, "err_not_ready"), 1);
    assert_int_equal (zlt_counter (fx.admin, "jobs_accepted"), 0);

    assert_int_equal (zlt_client_hello (fx.producer, "t", WAIT_MS), 50);
    s_send_specs (fx.producer, specs, N);
    size_t accepted = 0, rejected = 0;
    while (accepted + rejected < N) {
        zl_msg_t m;
        assert_int_equal (zlt_client_recv (fx.producer, &m, WAIT_MS), 0);
        if (m.kind == ZL_MSG_ACCEPTED)
            accepted += m.u.accepted.n;
        else if (m.kind == ZL_MSG_REJECTED)
            for (size_t i = 0; i < m.u.rejected.n; i++) {
                assert_int_equal (m.u.rejected.jobs[i].code, ZL_REJECT_QUEUE_FULL);
                assert_non_null (strstr (m.u.rejected.jobs[i].reason, "without credit"));
                assert_true (m.u.rejected.jobs[i].retry_after_ms > 0);
                rejected++;
            }
        else
            assert_true (m.kind == ZL_MSG_CREDIT);
    }
    assert_int_equal (accepted, 50);
    assert_int_equal (rejected, 100);
    assert_int_equal (zlt_counter (fx.admin, "err_no_credit"), 100);
    assert_int_equal (zlt_counter (fx.admin, "jobs_accepted"), 50);
}

// ---------------------------------------------------------------- text
/*  Names and keys are text, checked before anything is stored. */
static void
test_names_are_text (void **state)
{
    (void)state;
    fx_t fx;
    s_start (&fx, NULL);
    assert_true (zlt_client_hello (fx.producer, "text", WAIT_MS) > 0);

    // "acme\0evil" is not tenant "acme"
    zl_job_spec_t spec = s_spec (1,
                                 "acme\x01"
                                 "evil",
                                 "");
    s_send_patched (fx.producer, &(zl_msg_t){.kind = ZL_MSG_SUBMIT, .u.submit = {1, &spec}}, 0);
    s_expect_reason (s_expect_rejected (fx.producer, 1, ZL_REJECT_INVALID),
                     "field 'tenant' contains a NUL byte");
    zl_group_stats_t g;
    assert_int_equal (zlt_group (fx.admin, NULL, "acme", &g), -1);

    // "order\0001" and "order\0002" are neither the key "order" nor each other's duplicate
    zl_job_spec_t keyed[2] = {s_spec (2, "t",
                                      "order\x01"
                                      "001"),
                              s_spec (3, "t",
                                      "order\x01"
                                      "002")};
    s_send_patched (fx.producer, &(zl_msg_t){.kind = ZL_MSG_SUBMIT, .u.submit = {2, keyed}}, 0);
    zl_msg_t m;
    assert_int_equal (zlt_client_expect (fx.producer, ZL_MSG_REJECTED, &m, WAIT_MS), 0);
    assert_int_equal (m.kind, ZL_MSG_REJECTED);
    assert_int_equal (m.u.rejected.n, 2);
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal (m.u.rejected.jobs[i].code, ZL_REJECT_INVALID);
        assert_non_null (strstr (m.u.rejected.jobs[i].reason, "field 'idempotency_key'"));
    }
    assert_int_equal (zlt_counter (fx.admin, "jobs_duplicate"), 0);

    // one bad spec among good ones is refused alone, by its seq
    zl_job_spec_t mixed[3] = {s_spec (4, "t", ""), s_spec (5, "t\xff\xfe", ""),
                              s_spec (6, "t", "")};
    s_send_specs (fx.producer, mixed, 3);
    bool got_accepted = false, got_rejected = false;
    while (!got_accepted || !got_rejected) {
        assert_int_equal (zlt_client_recv (fx.producer, &m, WAIT_MS), 0);
        if (m.kind == ZL_MSG_ACCEPTED) {
            assert_int_equal (m.u.accepted.n, 2);
            assert_true (m.u.accepted.jobs[0].seq == 4 && m.u.accepted.jobs[1].seq == 6);
            got_accepted = true;
        } else if (m.kind == ZL_MSG_REJECTED) {
            assert_int_equal (m.u.rejected.n, 1);
            assert_true (m.u.rejected.jobs[0].seq == 5);
            assert_int_equal (m.u.rejected.jobs[0].code, ZL_REJECT_INVALID);
            assert_non_null (
                strstr (m.u.rejected.jobs[0].reason, "field 'tenant' is not valid UTF-8"));
            got_rejected = true;
        } else
            assert_true (m.kind == ZL_MSG_CREDIT);
    }

    // a control character in a name, an overlong form, headers
    spec = s_spec (7, "line\nbreak", "");
    s_send_specs (fx.producer, &spec, 1);
    s_expect_reason (s_expect_rejected (fx.producer, 7, ZL_REJECT_INVALID),
                     "field 'tenant' contains a control character");
    spec = s_spec (8, "t", "\xc0\xaf"); // an overlong '/'
    s_send_specs (fx.producer, &spec, 1);
    s_expect_reason (s_expect_rejected (fx.producer, 8, ZL_REJECT_INVALID),
                     "field 'idempotency_key' is not valid UTF-8");
    zl_header_t headers[2] = {{"trace", "ok"},
                              {"x", "v\x01"
                                    "alue"}};
    spec = s_spec (9, "t", "");
    spec.headers = headers;
    spec.n_headers = 2;
    s_send_patched (fx.producer, &(zl_msg_t){.kind = ZL_MSG_SUBMIT, .u.submit = {1, &spec}}, 0);
    s_expect_reason (s_expect_rejected (fx.producer, 9, ZL_REJECT_INVALID),
                     "field 'headers[1].value' contains a NUL byte");
    headers[1] = (zl_header_t){"bad\tkey", "v"};
    spec.seq = 10;
    s_send_specs (fx.producer, &spec, 1);
    s_expect_reason (s_expect_rejected (fx.producer, 10, ZL_REJECT_INVALID),
                     "field 'headers[1].key' contains a control character");
    assert_int_equal (zlt_counter (fx.admin, "err_invalid"), 8);
    assert_int_equal (zlt_counter (fx.admin, "jobs_accepted"), 2);

    // Hello, Ready, Nack error texts and admin filters: one Error each
    zl_msg_t hello = {.kind = ZL_MSG_HELLO,
                      .u.hello.client = "web\x01"
                                        "1"};
    s_send_patched (fx.producer, &hello, 0);
    s_expect_reason (s_expect_error (fx.producer, ZL_ERR_INVALID),
                     "field 'hello.client' contains a NUL byte");
    zlt_client_t *worker = s_worker_client (&fx);
    const char *lanes[] = {"a"};
    zl_msg_t ready = {.kind = ZL_MSG_READY, .u.ready = {"w\xe2\x82", 1, lanes, 1, 0}};
    assert_int_equal (zlt_client_send (worker, &ready), 0);
    s_expect_reason (s_expect_error (worker, ZL_ERR_INVALID),
                     "field 'ready.name' is not valid UTF-8");
    const char *nul_lane[] = {"a\x01"
                              "b"};
    ready.u.ready = (zl_ready_t){"w", 1, nul_lane, 1, 0};
    s_send_patched (worker, &ready, 0);
    s_expect_reason (s_expect_error (worker, ZL_ERR_INVALID),
                     "field 'ready.lanes[0]' contains a NUL byte");
    assert_int_equal (zlt_counter (fx.admin, "workers_ready"), 0);
    s_ready (&fx, worker, "w", 0, 1);
    assert_int_equal (zlt_client_expect (worker, ZL_MSG_DISPATCH, &m, WAIT_MS), 0);
    assert_int_equal (m.kind, ZL_MSG_DISPATCH);
    zl_nack_item_t nack = {m.u.dispatch.jobs[0].job_id,
                           m.u.dispatch.jobs[0].lease,
                           ZL_FAIL_TRANSIENT,
                           "stderr: \xff\xfe binary",
                           0,
                           1000};
    assert_int_equal (
        zlt_client_send (worker, &(zl_msg_t){.kind = ZL_MSG_NACK, .u.nack = {1, &nack}}), 0);
    s_expect_reason (s_expect_error (worker, ZL_ERR_INVALID),
                     "field 'nack.items[0].error' is not valid UTF-8");
    assert_int_equal (zlt_counter (fx.admin, "jobs_nacked"), 0);
    zl_msg_t list = {.kind = ZL_MSG_ADMIN_REQUEST};
    list.u.admin_request.op = ZL_ADMIN_DLQ_LIST;
    list.u.admin_request.filter = (zl_dlq_filter_t){"",
                                                    "acme\x01"
                                                    "evil",
                                                    0, NULL, false};
    list.u.admin_request.lane = "";
    s_send_patched (fx.admin, &list, 0);
    s_expect_reason (s_expect_error (fx.admin, ZL_ERR_INVALID),
                     "field 'admin_request.dlq_list.filter.tenant' contains a NUL byte");
    assert_int_equal (zlt_counter (fx.admin, "err_invalid"), 13);
}

// ---------------------------------------------------------------- admin
static zl_admin_reply_t
s_admin (fx_t *fx, zl_admin_op_t op, zl_dlq_filter_t filter, const char *lane)
{
    static uint64_t request_id;
    zl_msg_t m = {.kind = ZL_MSG_ADMIN_REQUEST};
    m.u.admin_request.request_id = ++request_id;
    m.u.admin_request.op = op;
    m.u.admin_request.filter = filter;
    m.u.admin_request.lane = lane ? lane : "";
    if (!filter.lane)
        m.u.admin_request.filter.lane = "";
    if (!filter.tenant)
        m.u.admin_request.filter.tenant = "";
    assert_int_equal (zlt_client_send (fx->admin, &m), 0);
    assert_int_equal (zlt_client_expect (fx->admin, ZL_MSG_ADMIN_REPLY, &m, WAIT_MS), 0);
    if (m.kind == ZL_MSG_ERROR)
        fail_msg ("admin request answered by Error %s: %s", zl_error_code_name (m.u.error.code),
                  m.u.error.message);
    assert_true (m.u.admin_reply.request_id == request_id);
    return m.u.admin_reply;
}

static void
s_refused (fx_t *fx, zl_admin_op_t op, zl_dlq_filter_t filter, const char *lane, const char *needle)
{
    uint64_t before = zlt_counter (fx->admin, "err_admin_refused");
    zl_admin_reply_t r = s_admin (fx, op, filter, lane);
    assert_false (r.ok);
    if (!strstr (r.error, needle))
        fail_msg ("refusal '%s' does not say '%s'", r.error, needle);
    assert_int_equal (zlt_counter (fx->admin, "err_admin_refused"), before + 1);
}

static void
test_admin_replies_say_what_happened (void **state)
{
    (void)state;
    fx_t fx;
    s_start (&fx, NULL);
    // one dead letter, by a PERMANENT nack
    assert_true (zlt_client_hello (fx.producer, "admin", WAIT_MS) > 0);
    zl_job_spec_t spec = s_spec (1, "acme", "");
    s_send_specs (fx.producer, &spec, 1);
    zl_msg_t m;
    assert_int_equal (zlt_client_expect (fx.producer, ZL_MSG_ACCEPTED, &m, WAIT_MS), 0);
    uint64_t dead = m.u.accepted.jobs[0].job_id;
    zlt_client_t *worker = s_worker_client (&fx);
    s_ready (&fx, worker, "w", 0, 1);
    assert_int_equal (zlt_client_expect (worker, ZL_MSG_DISPATCH, &m, WAIT_MS), 0);
    zl_nack_item_t nack = {dead, m.u.dispatch.jobs[0].lease, ZL_FAIL_PERMANENT, "bad input", 0, 10};
    assert_int_equal (
        zlt_client_send (worker, &(zl_msg_t){.kind = ZL_MSG_NACK, .u.nack = {1, &nack}}), 0);
    assert_int_equal (zlt_wait_counter (fx.admin, "jobs_dead_lettered", 1, WAIT_MS), 0);

    uint64_t unknown = 987654, both[2] = {dead, 987654};
    s_refused (&fx, ZL_ADMIN_DLQ_REDRIVE, (zl_dlq_filter_t){.n_ids = 1, .ids = &unknown}, NULL,
               "job 987654 is not in the dead-letter queue");
    s_refused (&fx, ZL_ADMIN_DLQ_PURGE, (zl_dlq_filter_t){.n_ids = 2, .ids = both}, NULL,
               "job 987654 is not in the dead-letter queue");
    s_refused (&fx, ZL_ADMIN_DLQ_PURGE, (zl_dlq_filter_t){.lane = "nolane"}, NULL,
               "lane 'nolane' is not declared");
    s_refused (&fx, ZL_ADMIN_DLQ_LIST, (zl_dlq_filter_t){.lane = "nolane"}, NULL,
               "lane 'nolane' is not declared");
    s_refused (&fx, ZL_ADMIN_DLQ_SHOW, (zl_dlq_filter_t){0}, NULL, "not in the dead-letter");
    s_refused (&fx, ZL_ADMIN_PAUSE, (zl_dlq_filter_t){0}, "nolane",
               "lane 'nolane' is not declared");
    s_refused (&fx, ZL_ADMIN_DLQ_REDRIVE, (zl_dlq_filter_t){0}, NULL, "say which");
    // a refused request changed nothing
    zl_group_stats_t g;
    assert_int_equal (zlt_group (fx.admin, "a", "acme", &g), 0);
    assert_int_equal (g.dlq, 1);
    // a list page whose cursor left the DLQ says so
    zl_msg_t req = {.kind = ZL_MSG_ADMIN_REQUEST};
    req.u.admin_request = (zl_admin_request_t){.request_id = 99,
                                               .op = ZL_ADMIN_DLQ_LIST,
                                               .filter = {"", "", 0, NULL, false},
                                               .after_id = unknown,
                                               .lane = ""};
    assert_int_equal (zlt_client_send (fx.admin, &req), 0);
    assert_int_equal (zlt_client_expect (fx.admin, ZL_MSG_ADMIN_REPLY, &m, WAIT_MS), 0);
    assert_false (m.u.admin_reply.ok);
    assert_non_null (strstr (m.u.admin_reply.error, "after_id"));

    // filters that match nothing succeed with 0
    uint64_t refused = zlt_counter (fx.admin, "err_admin_refused");
    zl_admin_reply_t r =
        s_admin (&fx, ZL_ADMIN_DLQ_PURGE, (zl_dlq_filter_t){.tenant = "nobody"}, NULL);
    assert_true (r.ok);
    assert_int_equal (r.count, 0);
    r = s_admin (&fx, ZL_ADMIN_DLQ_REDRIVE, (zl_dlq_filter_t){.lane = "b"}, NULL);
    assert_true (r.ok);
    assert_int_equal (r.count, 0);
    assert_int_equal (zlt_counter (fx.admin, "err_admin_refused"), refused);
    // and one that matches does its work
    r = s_admin (&fx, ZL_ADMIN_DLQ_PURGE, (zl_dlq_filter_t){.n_ids = 1, .ids = &dead}, NULL);
    assert_true (r.ok);
    assert_int_equal (r.count, 1);

    // zlane-ctl exits 1 for a refusal, 0 for a success with count 0
    char *ctl = zlt_bin ("zlane-ctl");
    const char *redrive[] = {
        ctl, "--admin", zlt_broker_endpoint (fx.broker, "admin"), "dlq", "redrive", "987654", NULL};
    assert_int_equal (zlt_run (redrive, NULL, NULL, NULL, WAIT_MS), 1);
    const char *purge[] = {ctl,      "--admin", zlt_broker_endpoint (fx.broker, "admin"),
                           "dlq",    "purge",   "--lane",
                           "nolane", NULL};
    assert_int_equal (zlt_run (purge, NULL, NULL, NULL, WAIT_MS), 1);
    const char *none[] = {ctl,      "--admin", zlt_broker_endpoint (fx.broker, "admin"),
                          "dlq",    "purge",   "--tenant",
                          "nobody", NULL};
    assert_int_equal (zlt_run (none, NULL, NULL, NULL, WAIT_MS), 0);
    free (ctl);
}

// ---------------------------------------------------------------- worker errors
// Submit one job to lane a and take its dispatch on `worker`.
static zl_job_msg_t
s_one_job (fx_t *fx, zlt_client_t *worker, uint32_t max_run_ms)
{
    static uint64_t seq;
    zl_job_spec_t spec = s_spec (++seq, "t", "");
    spec.max_run_ms = max_run_ms;
    s_send_specs (fx->producer, &spec, 1);
    zl_msg_t m;
    assert_int_equal (zlt_client_expect (fx->producer, ZL_MSG_ACCEPTED, &m, WAIT_MS), 0);
    assert_int_equal (m.kind, ZL_MSG_ACCEPTED);
    assert_int_equal (zlt_client_expect (worker, ZL_MSG_DISPATCH, &m, WAIT_MS), 0);
    assert_int_equal (m.kind, ZL_MSG_DISPATCH);
    assert_int_equal (m.u.dispatch.n, 1);
    return m.u.dispatch.jobs[0];
}

static void
s_ack (zlt_client_t *worker, uint64_t job_id, uint64_t lease)
{
    zl_ack_item_t it = {job_id, lease, 1000};
    assert_int_equal (zlt_client_send (worker, &(zl_msg_t){.kind = ZL_MSG_ACK, .u.ack = {1, &it}}),
                      0);
}

static void
s_expect_settled (zlt_client_t *worker, uint64_t job_id)
{
    zl_msg_t m;
    assert_int_equal (zlt_client_expect (worker, ZL_MSG_SETTLED, &m, WAIT_MS), 0);
    if (m.kind == ZL_MSG_ERROR)
        fail_msg ("expected Settled, got Error %s: %s", zl_error_code_name (m.u.error.code),
                  m.u.error.message);
    assert_int_equal (m.u.settled.n, 1);
    assert_true (m.u.settled.items[0].job_id == job_id);
}

static void
test_promised_errors (void **state)
{
    (void)state;
    fx_t fx;
    s_start (&fx, NULL);
    assert_true (zlt_client_hello (fx.producer, "errors", WAIT_MS) > 0);
    zlt_client_t *worker = s_worker_client (&fx);
    s_ready (&fx, worker, "w", 0, 1);

    // an extension past the max run time: extended only that far, and told
    zl_job_msg_t job = s_one_job (&fx, worker, 60000);
    zl_extend_item_t ext = {job.job_id, job.lease, 120000};
    zl_msg_t m = {.kind = ZL_MSG_EXTEND, .u.extend = {1, &ext}};
    assert_int_equal (zlt_client_send (worker, &m), 0);
    assert_int_equal (zlt_client_expect (worker, ZL_MSG_ERROR, &m, WAIT_MS), 0);
    assert_int_equal (m.u.error.code, ZL_ERR_MAX_RUN);
    assert_true (m.u.error.job_id == job.job_id && m.u.error.lease == job.lease);
    assert_int_equal (m.u.error.n_items, 1);
    assert_int_equal (m.u.error.items[0].code, ZL_ERR_MAX_RUN);
    assert_non_null (strstr (m.u.error.message, "max run"));
    assert_int_equal (zlt_counter (fx.admin, "err_max_run"), 1);
    assert_int_equal (zlt_counter (fx.admin, "leases_extended"), 1);

    // Extend with lease_ms 0, a Nack of an unknown class: refused, the lease unchanged
    ext.lease_ms = 0;
    assert_int_equal (
        zlt_client_send (worker, &(zl_msg_t){.kind = ZL_MSG_EXTEND, .u.extend = {1, &ext}}), 0);
    s_expect_reason (s_expect_error (worker, ZL_ERR_INVALID), "lease_ms");
    zl_nack_item_t nack = {job.job_id, job.lease, (zl_fail_class_t)7, "what", 0, 10};
    assert_int_equal (
        zlt_client_send (worker, &(zl_msg_t){.kind = ZL_MSG_NACK, .u.nack = {1, &nack}}), 0);
    s_expect_reason (s_expect_error (worker, ZL_ERR_INVALID), "unknown failure class 7");
    assert_int_equal (zlt_counter (fx.admin, "err_invalid"), 2);
    assert_int_equal (zlt_counter (fx.admin, "jobs_nacked"), 0);
    s_ack (worker, job.job_id, job.lease);
    s_expect_settled (worker, job.job_id);
}

// ---------------------------------------------------------------- leases
static void
test_leases_belong_to_their_holder (void **state)
{
    (void)state;
    fx_t fx;
    s_start (&fx, NULL);
    assert_true (zlt_client_hello (fx.producer, "holder", WAIT_MS) > 0);
    zlt_client_t *a = s_worker_client (&fx), *b = s_worker_client (&fx);
    s_ready (&fx, a, "worker-a", 0xA, 1);
    zl_job_msg_t job = s_one_job (&fx, a, 0);
    s_ready (&fx, b, "worker-b", 0xB, 1);

    // b quotes a's real token: refused, counted, a's lease stands
    s_ack (b, job.job_id, job.lease);
    zl_msg_t m;
    assert_int_equal (zlt_client_expect (b, ZL_MSG_ERROR, &m, WAIT_MS), 0);
    assert_int_equal (m.u.error.code, ZL_ERR_NOT_HOLDER);
    assert_int_equal (zlt_counter (fx.admin, "err_not_holder"), 1);
    assert_int_equal (zlt_counter (fx.admin, "jobs_acked"), 0);

    // a reconnects (a new connection, the same instance): the lease follows it
    zlt_client_t *a2 = s_worker_client (&fx);
    s_ready (&fx, a2, "worker-a", 0xA, 1);
    assert_int_equal (zlt_counter (fx.admin, "workers_reconnected"), 1);
    s_ack (a2, job.job_id, job.lease);
    s_expect_settled (a2, job.job_id);
    // the old connection is no longer a worker
    s_ack (a, job.job_id, job.lease);
    assert_int_equal (zlt_client_expect (a, ZL_MSG_ERROR, &m, WAIT_MS), 0);
    assert_int_equal (m.u.error.code, ZL_ERR_NOT_READY);

    // without an instance a lease stays with its connection (a2 and b
    // drain, Ready with capacity 0, so that c gets the next job)
    zlt_client_t *c = s_worker_client (&fx);
    s_ready (&fx, c, "worker-c", 0, 1);
    s_ready (&fx, a2, "worker-a", 0xA, 0);
    s_ready (&fx, b, "worker-b", 0xB, 0);
    job = s_one_job (&fx, c, 0);
    zlt_client_t *c2 = s_worker_client (&fx);
    s_ready (&fx, c2, "worker-c", 0, 1);
    s_ack (c2, job.job_id, job.lease);
    assert_int_equal (zlt_client_expect (c2, ZL_MSG_ERROR, &m, WAIT_MS), 0);
    assert_int_equal (m.u.error.code, ZL_ERR_NOT_HOLDER);
    s_ack (c, job.job_id, job.lease);
    s_expect_settled (c, job.job_id);
    assert_int_equal (zlt_counter (fx.admin, "err_not_holder"), 2);
}

// A worker reconnects and its Ready lists the leases it holds: the old
// connection's other leases (Dispatches lost with that connection) are
// ready again at once, with their attempt unspent, long before their 30 s
// leases lapse; the one it lists follows it to the new connection.
static void
test_reconnect_returns_what_never_arrived (void **state)
{
    (void)state;
    fx_t fx;
    s_start (&fx, NULL);
    assert_true (zlt_client_hello (fx.producer, "lost", WAIT_MS) > 0);
    zlt_client_t *a = s_worker_client (&fx);
    s_ready (&fx, a, "worker-a", 0xA, 3);
    zl_job_msg_t kept = s_one_job (&fx, a, 0), lost[2];
    for (int i = 0; i < 2; i++)
        lost[i] = s_one_job (&fx, a, 0);

    zlt_client_t *a2 = s_worker_client (&fx);
    const char *lanes[] = {"a"};
    zl_lease_ref_t held[] = {{kept.job_id, kept.lease}, {424242, 1}}; // (and one it made up)
    zl_msg_t m = {.kind = ZL_MSG_READY};
    m.u.ready = (zl_ready_t){"worker-a", 1, lanes, 3, 0xA, true, 2, held};
    assert_int_equal (zlt_client_send (a2, &m), 0);
    assert_int_equal (zlt_wait_counter (fx.admin, "workers_reconnected", 1, WAIT_MS), 0);
    assert_int_equal (zlt_counter (fx.admin, "leases_unreached"), 2);

    uint64_t again[2] = {0, 0}; // the new lease of each
    for (int got = 0; got < 2;) {
        assert_int_equal (zlt_client_expect (a2, ZL_MSG_DISPATCH, &m, WAIT_MS), 0);
        assert_int_equal (m.kind, ZL_MSG_DISPATCH);
        for (size_t k = 0; k < m.u.dispatch.n; k++, got++) {
            const zl_job_msg_t *j = &m.u.dispatch.jobs[k];
            int i = j->job_id == lost[0].job_id ? 0 : j->job_id == lost[1].job_id ? 1 : -1;
            assert_true (i >= 0 && !again[i]);
            assert_int_equal (j->attempt, 1); // the lost Dispatch spent no attempt
            assert_true (j->lease != lost[i].lease);
            again[i] = j->lease;
        }
    }
    // the lost Dispatch's token is fenced off
    s_ack (a2, lost[0].job_id, lost[0].lease);
    assert_int_equal (zlt_client_expect (a2, ZL_MSG_ERROR, &m, WAIT_MS), 0);
    assert_int_equal (m.u.error.code, ZL_ERR_STALE_LEASE);
    for (int i = 0; i < 2; i++) {
        s_ack (a2, lost[i].job_id, again[i]);
        s_expect_settled (a2, lost[i].job_id);
    }
    s_ack (a2, kept.job_id, kept.lease);
    s_expect_settled (a2, kept.job_id);
    assert_int_equal (zlt_counter (fx.admin, "jobs_acked"), 3);
}

// ---------------------------------------------------------------- amplification
// The next message on `c` after a request that earns exactly one known
// reply: an Ack for job 1 (unknown), answered UNKNOWN_JOB. (The broker's
// Heartbeats, sent every interval, answer nothing and are skipped.)
static void
s_no_more_replies (zlt_client_t *worker)
{
    s_ack (worker, 1, 1);
    zl_msg_t m;
    do
        assert_int_equal (zlt_client_recv (worker, &m, WAIT_MS), 0);
    while (m.kind == ZL_MSG_HEARTBEAT);
    assert_int_equal (m.kind, ZL_MSG_ERROR);
    if (m.u.error.code != ZL_ERR_UNKNOWN_JOB || m.u.error.job_id != 1)
        fail_msg ("a second reply to one message: Error %s: %s",
                  zl_error_code_name (m.u.error.code), m.u.error.message);
}

static void
test_one_reply_per_message (void **state)
{
    (void)state;
    fx_t fx;
    s_start (&fx, NULL);
    enum { N = 10000 };
    zlt_client_t *worker = s_worker_client (&fx);
    // one Ready naming 10,000 lanes that do not exist, and "a"
    const char **lanes = calloc (N + 1, sizeof *lanes);
    char (*names)[16] = calloc (N, sizeof *names);
    for (size_t i = 0; i < N; i++) {
        snprintf (names[i], sizeof names[i], "nolane%zu", i);
        lanes[i] = names[i];
    }
    lanes[N] = "a";
    zl_msg_t m = {.kind = ZL_MSG_READY, .u.ready = {"amp", N + 1, lanes, 1, 0}};
    assert_int_equal (zlt_client_send (worker, &m), 0);
    s_expect_reason (s_expect_error (worker, ZL_ERR_UNKNOWN_LANE), "10000 of 10001");
    // the Ready served is answered with the broker's pace (its --heartbeat, 1 s)
    assert_int_equal (zlt_client_expect (worker, ZL_MSG_HEARTBEAT, &m, WAIT_MS), 0);
    assert_int_equal (m.kind, ZL_MSG_HEARTBEAT);
    assert_int_equal (m.u.heartbeat.interval_ms, 1000);
    assert_int_equal (zlt_counter (fx.admin, "err_unknown_lane"), N);
    assert_int_equal (zlt_counter (fx.admin, "workers_ready"), 1);
    s_no_more_replies (worker);
    uint64_t unknown = zlt_counter (fx.admin, "err_unknown_job");

    // one Ack of 10,000 unknown jobs: one Error that lists them all
    zl_ack_item_t *items = calloc (N, sizeof *items);
    for (size_t i = 0; i < N; i++)
        items[i] = (zl_ack_item_t){1000000 + i, 7, 1};
    assert_int_equal (
        zlt_client_send (worker, &(zl_msg_t){.kind = ZL_MSG_ACK, .u.ack = {N, items}}), 0);
    assert_int_equal (zlt_client_expect (worker, ZL_MSG_ERROR, &m, WAIT_MS), 0);
    assert_int_equal (m.u.error.code, ZL_ERR_UNKNOWN_JOB);
    assert_int_equal (m.u.error.n_items, N);
    for (size_t i = 0; i < N; i++) {
        assert_true (m.u.error.items[i].job_id == 1000000 + i);
        assert_int_equal (m.u.error.items[i].code, ZL_ERR_UNKNOWN_JOB);
    }
    assert_true (m.u.error.job_id == 1000000);
    assert_non_null (strstr (m.u.error.message, "10000 of 10000 ack items refused"));
    assert_int_equal (zlt_counter (fx.admin, "err_unknown_job"), unknown + N);
    s_no_more_replies (worker);

    // a good item and a stale one: Settled for the one, one Error for the other
    assert_true (zlt_client_hello (fx.producer, "amp", WAIT_MS) > 0);
    zl_job_msg_t job = s_one_job (&fx, worker, 0);
    zl_ack_item_t two[2] = {{job.job_id, job.lease ^ 1, 5}, {job.job_id, job.lease, 5}};
    assert_int_equal (zlt_client_send (worker, &(zl_msg_t){.kind = ZL_MSG_ACK, .u.ack = {2, two}}),
                      0);
    assert_int_equal (zlt_client_expect (worker, ZL_MSG_ERROR, &m, WAIT_MS), 0);
    assert_int_equal (m.u.error.code, ZL_ERR_STALE_LEASE);
    assert_int_equal (m.u.error.n_items, 1);
    s_expect_settled (worker, job.job_id);
    s_no_more_replies (worker);
    free (items);
    free (names);
    free (lanes);
}

// ---------------------------------------------------------------- bounds
/*  What an outside client can make the broker keep is bounded: distinct
    tenants (max_tenants), auto-created lanes (max_lanes), and the declared
    lanes are listed once per Submit, not in every rejection. */
static void
test_names_are_bounded (void **state)
{
    (void)state;
    static const char *const args[] = {"--lane",        "a",     "--auto-lanes", "--set",
                                       "max_tenants=3", "--set", "max_lanes=2",  NULL};
    fx_t fx;
    s_start (&fx, args);
    assert_true (zlt_client_hello (fx.producer, "bounds", WAIT_MS) > 0);
    zl_job_spec_t specs[5] = {s_spec (1, "t1", ""), s_spec (2, "t2", ""), s_spec (3, "t3", ""),
                              s_spec (4, "t4", ""), s_spec (5, "t1", "")};
    s_send_specs (fx.producer, specs, 5);
    size_t accepted = 0;
    bool refused = false;
    while (accepted < 4 || !refused) {
        zl_msg_t m;
        assert_int_equal (zlt_client_recv (fx.producer, &m, WAIT_MS), 0);
        if (m.kind == ZL_MSG_ACCEPTED)
            accepted += m.u.accepted.n;
        else if (m.kind == ZL_MSG_REJECTED) {
            assert_int_equal (m.u.rejected.n, 1);
            assert_true (m.u.rejected.jobs[0].seq == 4);
            assert_int_equal (m.u.rejected.jobs[0].code, ZL_REJECT_QUEUE_FULL);
            assert_non_null (strstr (m.u.rejected.jobs[0].reason, "max_tenants (3)"));
            refused = true;
        }
    }
    assert_int_equal (accepted, 4);
    // one auto lane more than the declared one, then no more
    zl_job_spec_t lanes[3] = {s_spec (6, "t1", ""), s_spec (7, "t1", ""), s_spec (8, "t1", "")};
    lanes[0].lane = "auto1";
    lanes[1].lane = "auto2";
    lanes[2].lane = "auto3";
    s_send_specs (fx.producer, lanes, 3);
    size_t listed = 0, rejected = 0;
    accepted = 0;
    while (accepted + rejected < 3) {
        zl_msg_t m;
        assert_int_equal (zlt_client_recv (fx.producer, &m, WAIT_MS), 0);
        if (m.kind == ZL_MSG_ACCEPTED)
            accepted += m.u.accepted.n;
        else if (m.kind == ZL_MSG_REJECTED)
            for (size_t i = 0; i < m.u.rejected.n; i++) {
                assert_int_equal (m.u.rejected.jobs[i].code, ZL_REJECT_UNKNOWN_LANE);
                listed += strstr (m.u.rejected.jobs[i].reason, "declared:") != NULL;
                rejected++;
            }
    }
    assert_int_equal (accepted, 1);
    assert_int_equal (rejected, 2);
    assert_int_equal (listed, 1); // the declared lanes, once per Submit
}

// ---------------------------------------------------------------- old records
/*  Records stored before the broker checked its input may hold invalid
    UTF-8: they still load, and what the broker sends of them is text. */
static void
test_old_records_still_load (void **state)
{
    (void)state;
    fx_t fx;
    s_start (&fx, NULL);
    assert_int_equal (zlt_broker_stop (fx.broker, WAIT_MS), 0);
    char *data = zlt_path (zlt_broker_dir (fx.broker), "data");
    char err[512];
    zl_store_t *store = zl_store_open (data, ZL_DURABILITY_FSYNC, 64 << 20, err, sizeof err);
    if (!store)
        fail_msg ("zl_store_open %s: %s", data, err);
    zl_header_t h[1] = {{"h\xff", "v\xfe"}};
    zl_job_rec_t ready = {.tenant = "old\xff",
                          .lane = "a",
                          .payload = {(const uint8_t *)"p", 1},
                          .idempotency_key = "k\xc0\xaf",
                          .n_headers = 1,
                          .headers = h,
                          .max_attempts = 3,
                          .lease_ms = 30000,
                          .enqueued_at_ms = zlt_wall_ms ()};
    zl_job_rec_t dead = ready;
    dead.lane = "b";
    zl_attempt_t history[1] = {{1, "worker\xe2\x82", 1, 2, ZL_OUTCOME_PERMANENT, "error \xff"}};
    zl_state_rec_t dead_state = {.state = ZL_JOB_DEAD,
                                 .attempt = 1,
                                 .ready_seq = 1001,
                                 .dead_at_ms = zlt_wall_ms (),
                                 .n_history = 1,
                                 .history = history,
                                 .leased_to = ""};
    assert_int_equal (zl_store_begin (store), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 1000, &ready), ZL_STORE_OK);
    assert_int_equal (zl_store_put_job (store, 1001, &dead), ZL_STORE_OK);
    assert_int_equal (zl_store_put_state (store, 1001, &dead_state), ZL_STORE_OK);
    assert_int_equal (zl_store_set_next_id (store, 1002), ZL_STORE_OK);
    assert_int_equal (zl_store_commit (store), ZL_STORE_OK);
    zl_store_close (&store);
    free (data);
    assert_int_equal (zlt_broker_restart (fx.broker, WAIT_MS), 0);

    zlt_client_destroy (&fx.admin);
    fx.admin = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (fx.broker, "admin"));
    zlt_client_t *worker = s_worker_client (&fx);
    s_ready (&fx, worker, "w", 0, 1);
    zl_msg_t m;
    assert_int_equal (zlt_client_expect (worker, ZL_MSG_DISPATCH, &m, WAIT_MS), 0);
    assert_int_equal (m.kind, ZL_MSG_DISPATCH);
    const zl_job_msg_t *j = &m.u.dispatch.jobs[0];
    assert_true (j->job_id == 1000);
    assert_string_equal (j->tenant, "old\xef\xbf\xbd");
    assert_string_equal (j->idempotency_key, "k\xef\xbf\xbd\xef\xbf\xbd");
    assert_string_equal (j->headers[0].key, "h\xef\xbf\xbd");
    assert_string_equal (j->headers[0].value, "v\xef\xbf\xbd");
    zl_msg_t show = {.kind = ZL_MSG_ADMIN_REQUEST};
    show.u.admin_request = (zl_admin_request_t){
        .request_id = 7, .op = ZL_ADMIN_DLQ_SHOW, .job_id = 1001, .filter = {"", ""}, .lane = ""};
    assert_int_equal (zlt_client_send (fx.admin, &show), 0);
    assert_int_equal (zlt_client_expect (fx.admin, ZL_MSG_ADMIN_REPLY, &m, WAIT_MS), 0);
    assert_true (m.u.admin_reply.ok);
    const zl_dead_letter_t *d = &m.u.admin_reply.dead_letter;
    assert_string_equal (d->tenant, "old\xef\xbf\xbd");
    assert_int_equal (d->n_attempts, 1);
    assert_string_equal (d->attempts[0].worker, "worker\xef\xbf\xbd"); // one for the cut sequence
    assert_string_equal (d->attempts[0].error, "error \xef\xbf\xbd");
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown (test_credit_needs_hello, zlt_teardown),
        cmocka_unit_test_teardown (test_names_are_text, zlt_teardown),
        cmocka_unit_test_teardown (test_admin_replies_say_what_happened, zlt_teardown),
        cmocka_unit_test_teardown (test_promised_errors, zlt_teardown),
        cmocka_unit_test_teardown (test_leases_belong_to_their_holder, zlt_teardown),
        cmocka_unit_test_teardown (test_reconnect_returns_what_never_arrived, zlt_teardown),
        cmocka_unit_test_teardown (test_one_reply_per_message, zlt_teardown),
        cmocka_unit_test_teardown (test_names_are_bounded, zlt_teardown),
        cmocka_unit_test_teardown (test_old_records_still_load, zlt_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
