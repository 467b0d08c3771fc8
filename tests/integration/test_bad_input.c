/*  test_bad_input: a real zlane-broker against raw sockets, no other
    binaries. Every kind of bad input gets its reply (Error or Rejected, with
    a reason) and moves exactly its own counter by one; afterwards a normal
    job still flows, and a flood of garbage from one client does not cost
    another client a single job. */
#include "rng.h"
#include "zltest.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#define WAIT_MS 5000 // a reply that takes longer than this is a failure
#define MAX_PAYLOAD 1024

// the broker's error counters, checked together: one bad input moves one
static const char *s_err_names[] = {"err_bad_frame",   "err_bad_version",       "err_unknown_kind",
                                    "err_invalid",     "err_payload_too_large", "err_unknown_lane",
                                    "err_queue_full",  "err_no_credit",         "err_unknown_job",
                                    "err_stale_lease", "err_not_ready",         "err_max_run"};
#define N_ERRS (sizeof s_err_names / sizeof s_err_names[0])

typedef struct {
    uint64_t v[N_ERRS];
} errs_t;

typedef struct {
    zlt_broker_t *broker;
    zlt_client_t *admin;
    zlt_client_t *producer;
    zlt_client_t *worker;
} fx_t;

// ---------------------------------------------------------------- helpers
static void
s_start (fx_t *fx)
{
    static const char *const args[] = {"--lane", "a", "--lane", "b", "--max-payload", "1KiB",
                                       // a raw worker heartbeats only when the test does
                                       "--liveness", "60", NULL};
    memset (fx, 0, sizeof *fx);
    fx->broker = zlt_broker_start (args);
    assert_non_null (fx->broker);
    fx->admin = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (fx->broker, "admin"));
    fx->producer = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (fx->broker, "frontend"));
    fx->worker = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (fx->broker, "backend"));
    assert_non_null (fx->admin);
    assert_non_null (fx->producer);
    assert_non_null (fx->worker);
}

static errs_t
s_errs (zlt_client_t *admin)
{
    zl_stats_t st;
    errs_t e;
    assert_int_equal (zlt_stats (admin, &st, WAIT_MS), 0);
    for (size_t i = 0; i < N_ERRS; i++)
        if (zlt_stats_counter (&st, s_err_names[i], &e.v[i]) != 0)
            fail_msg ("the broker's stats have no counter %s", s_err_names[i]);
    return e;
}

// `name` moved by exactly one since `before`, every other error counter not at all
static void
s_assert_one_more (zlt_client_t *admin, const errs_t *before, const char *name)
{
    errs_t after = s_errs (admin);
    bool known = false;
    for (size_t i = 0; i < N_ERRS; i++) {
        uint64_t want = before->v[i] + (strcmp (s_err_names[i], name) == 0);
        known |= strcmp (s_err_names[i], name) == 0;
        if (after.v[i] != want)
            fail_msg ("%s is %" PRIu64 ", expected %" PRIu64 " (after a %s)", s_err_names[i],
                      after.v[i], want, name);
    }
    assert_true (known);
}

// Wait for an Error with `code`; returns its message (copied, caller frees).
static char *
s_expect_error (zlt_client_t *c, zl_error_code_t code, uint64_t job_id, uint64_t lease)
{
    zl_msg_t m;
    assert_int_equal (zlt_client_expect (c, ZL_MSG_ERROR, &m, WAIT_MS), 0);
    assert_int_equal (m.kind, ZL_MSG_ERROR);
    if (m.u.error.code != code)
        fail_msg ("expected Error %s, got %s: %s", zl_error_code_name (code),
                  zl_error_code_name (m.u.error.code), m.u.error.message);
    assert_true (m.u.error.message && m.u.error.message[0]);
    assert_true (m.u.error.job_id == job_id);
    assert_true (m.u.error.lease == lease);
    return strdup (m.u.error.message);
}

static void
s_hello (zlt_client_t *producer, uint64_t min_credit)
{
    zl_msg_t m = {.kind = ZL_MSG_HELLO};
    m.u.hello.client = "test-bad-input";
    assert_int_equal (zlt_client_send (producer, &m), 0);
    assert_int_equal (zlt_client_expect (producer, ZL_MSG_CREDIT, &m, WAIT_MS), 0);
    assert_int_equal (m.kind, ZL_MSG_CREDIT);
    assert_true (m.u.credit.limit >= min_credit);
}

static void
s_submit (zlt_client_t *producer, uint64_t seq, const char *tenant, const char *lane,
          const void *payload, size_t len)
{
    zl_job_spec_t spec = {.seq = seq, .tenant = tenant, .lane = lane, .idempotency_key = ""};
    spec.payload = (zl_bytes_t){payload, len};
    zl_msg_t m = {.kind = ZL_MSG_SUBMIT};
    m.u.submit = (zl_submit_t){1, &spec};
    assert_int_equal (zlt_client_send (producer, &m), 0);
}

// Wait for the Rejected of job `seq`; returns its reason (caller frees).
static char *
s_expect_rejected (zlt_client_t *producer, uint64_t seq, zl_reject_code_t code)
{
    zl_msg_t m;
    assert_int_equal (zlt_client_expect (producer, ZL_MSG_REJECTED, &m, WAIT_MS), 0);
    if (m.kind == ZL_MSG_ERROR)
        fail_msg ("expected Rejected, got Error %s: %s", zl_error_code_name (m.u.error.code),
                  m.u.error.message);
    assert_int_equal (m.u.rejected.n, 1);
    const zl_rejection_t *r = &m.u.rejected.jobs[0];
    assert_true (r->seq == seq);
    if (r->code != code)
        fail_msg ("job seq %" PRIu64 ": expected %s, got %s (%s)", seq, zl_reject_code_name (code),
                  zl_reject_code_name (r->code), r->reason);
    assert_true (r->reason && r->reason[0]);
    assert_int_equal (r->retry_after_ms, 0); // final codes: no retry
    return strdup (r->reason);
}

// Wait for the Accepted of job `seq`; returns the job id.
static uint64_t
s_expect_accepted (zlt_client_t *producer, uint64_t seq)
{
    zl_msg_t m;
    assert_int_equal (zlt_client_expect (producer, ZL_MSG_ACCEPTED, &m, WAIT_MS), 0);
    if (m.kind == ZL_MSG_ERROR)
        fail_msg ("expected Accepted, got Error %s: %s", zl_error_code_name (m.u.error.code),
                  m.u.error.message);
    assert_int_equal (m.u.accepted.n, 1);
    assert_true (m.u.accepted.jobs[0].seq == seq);
    assert_false (m.u.accepted.jobs[0].duplicate);
    assert_true (m.u.accepted.jobs[0].job_id != 0);
    return m.u.accepted.jobs[0].job_id;
}

static void
s_send_ack (zlt_client_t *worker, uint64_t job_id, uint64_t lease)
{
    zl_ack_item_t item = {job_id, lease, 1000};
    zl_msg_t m = {.kind = ZL_MSG_ACK};
    m.u.ack = (zl_ack_t){1, &item};
    assert_int_equal (zlt_client_send (worker, &m), 0);
}

// ---------------------------------------------------------------- scenarios
/*  Frontend frames that are not a valid Envelope for this socket: each gets
    its Error and its counter. */
static void
s_bad_frames (fx_t *fx)
{
    zl_codec_t *codec = zlt_client_codec (fx->producer);
    zl_msg_t scratch;

    // garbage: a tag of wire type 7 does not exist in protobuf
    static const uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 'n',
                                      'o',  't',  ' ',  'a',  'n',  ' ',  'e',  'n',  'v'};
    assert_int_equal (zl_codec_decode (codec, garbage, sizeof garbage, &scratch),
                      ZL_DECODE_BAD_FRAME);
    errs_t before = s_errs (fx->admin);
    assert_int_equal (zlt_client_send_raw (fx->producer, garbage, sizeof garbage, false), 0);
    free (s_expect_error (fx->producer, ZL_ERR_BAD_FRAME, 0, 0));
    s_assert_one_more (fx->admin, &before, "err_bad_frame");

    // a well-formed Hello that says it is protocol version 2
    zl_msg_t hello = {.kind = ZL_MSG_HELLO};
    hello.u.hello.client = "from-the-future";
    size_t size;
    const uint8_t *enc = zl_codec_encode (codec, &hello, &size);
    assert_non_null (enc);
    assert_true (size >= 2 && enc[0] == 0x08 && enc[1] == ZL_PROTOCOL_VERSION); // field 1
    uint8_t v2[256];
    assert_true (size <= sizeof v2);
    memcpy (v2, enc, size);
    v2[1] = 2;
    assert_int_equal (zl_codec_decode (codec, v2, size, &scratch), ZL_DECODE_BAD_VERSION);
    before = s_errs (fx->admin);
    assert_int_equal (zlt_client_send_raw (fx->producer, v2, size, false), 0);
    free (s_expect_error (fx->producer, ZL_ERR_BAD_VERSION, 0, 0));
    s_assert_one_more (fx->admin, &before, "err_bad_version");

    // a worker's Ready sent to the producers' socket
    const char *lanes[] = {"a"};
    zl_msg_t ready = {.kind = ZL_MSG_READY};
    ready.u.ready = (zl_ready_t){"lost-worker", 1, lanes, 1};
    before = s_errs (fx->admin);
    assert_int_equal (zlt_client_send (fx->producer, &ready), 0);
    char *why = s_expect_error (fx->producer, ZL_ERR_UNKNOWN_KIND, 0, 0);
    assert_non_null (strstr (why, "ready"));
    free (why);
    s_assert_one_more (fx->admin, &before, "err_unknown_kind");

    // two frames, each a valid Hello on its own: one message is one frame
    enc = zl_codec_encode (codec, &hello, &size);
    before = s_errs (fx->admin);
    assert_int_equal (zlt_client_send_raw (fx->producer, enc, size, true), 0);
    enc = zl_codec_encode (codec, &hello, &size);
    assert_int_equal (zlt_client_send_raw (fx->producer, enc, size, false), 0);
    free (s_expect_error (fx->producer, ZL_ERR_BAD_FRAME, 0, 0));
    s_assert_one_more (fx->admin, &before, "err_bad_frame");
}

/*  Job specs the broker must refuse, each with its final code and a reason;
    a payload of exactly max-payload is still fine. */
static void
s_bad_specs (fx_t *fx)
{
    s_hello (fx->producer, 10);
    uint8_t big[2 * MAX_PAYLOAD];
    memset (big, 'x', sizeof big);

    errs_t before = s_errs (fx->admin);
    s_submit (fx->producer, 1, "t1", "a", big, sizeof big);
    char *why = s_expect_rejected (fx->producer, 1, ZL_REJECT_PAYLOAD_TOO_LARGE);
    assert_non_null (strstr (why, "2048"));
    free (why);
    s_assert_one_more (fx->admin, &before, "err_payload_too_large");

    before = s_errs (fx->admin);
    s_submit (fx->producer, 2, "", "a", "p", 1);
    why = s_expect_rejected (fx->producer, 2, ZL_REJECT_INVALID);
    assert_non_null (strstr (why, "tenant"));
    free (why);
    s_assert_one_more (fx->admin, &before, "err_invalid");

    before = s_errs (fx->admin);
    s_submit (fx->producer, 3, "t1", "", "p", 1);
    why = s_expect_rejected (fx->producer, 3, ZL_REJECT_INVALID);
    assert_non_null (strstr (why, "lane"));
    free (why);
    s_assert_one_more (fx->admin, &before, "err_invalid");

    before = s_errs (fx->admin);
    s_submit (fx->producer, 4, "t1", "nosuchlane", "p", 1);
    why = s_expect_rejected (fx->producer, 4, ZL_REJECT_UNKNOWN_LANE);
    if (!strstr (why, "nosuchlane"))
        fail_msg ("the UNKNOWN_LANE reason does not name the lane: %s", why);
    free (why);
    s_assert_one_more (fx->admin, &before, "err_unknown_lane");

    // the boundary: exactly max-payload is accepted (into lane b: no worker serves it)
    before = s_errs (fx->admin);
    s_submit (fx->producer, 5, "t1", "b", big, MAX_PAYLOAD);
    s_expect_accepted (fx->producer, 5);
    errs_t after = s_errs (fx->admin);
    assert_memory_equal (&before, &after, sizeof before);
}

/*  A raw worker: settling before Ready, settling an unknown job, settling a
    real job with the wrong lease token; then the right token settles it. */
static void
s_bad_worker_then_flow (fx_t *fx)
{
    errs_t before = s_errs (fx->admin);
    s_send_ack (fx->worker, 77, 1);
    free (s_expect_error (fx->worker, ZL_ERR_NOT_READY, 0, 0));
    s_assert_one_more (fx->admin, &before, "err_not_ready");

    uint64_t ready_before = zlt_counter (fx->admin, "workers_ready");
    const char *lanes[] = {"a"};
    zl_msg_t m = {.kind = ZL_MSG_READY};
    m.u.ready = (zl_ready_t){"raw-worker", 1, lanes, 1};
    assert_int_equal (zlt_client_send (fx->worker, &m), 0);
    assert_int_equal (zlt_wait_counter (fx->admin, "workers_ready", ready_before + 1, WAIT_MS), 0);

    before = s_errs (fx->admin);
    s_send_ack (fx->worker, 999999, 12345);
    char *why = s_expect_error (fx->worker, ZL_ERR_UNKNOWN_JOB, 999999, 12345);
    assert_non_null (strstr (why, "999999"));
    free (why);
    s_assert_one_more (fx->admin, &before, "err_unknown_job");

    // a normal job: Submit -> Accepted -> Dispatch
    s_hello (fx->producer, 1);
    s_submit (fx->producer, 100, "t1", "a", "hello", 5);
    uint64_t id = s_expect_accepted (fx->producer, 100);
    assert_int_equal (zlt_client_expect (fx->worker, ZL_MSG_DISPATCH, &m, WAIT_MS), 0);
    assert_int_equal (m.kind, ZL_MSG_DISPATCH);
    assert_int_equal (m.u.dispatch.n, 1);
    const zl_job_msg_t *job = &m.u.dispatch.jobs[0];
    assert_true (job->job_id == id);
    assert_int_equal (job->attempt, 1);
    assert_string_equal (job->tenant, "t1");
    assert_string_equal (job->lane, "a");
    assert_int_equal (job->payload.len, 5);
    assert_memory_equal (job->payload.data, "hello", 5);
    assert_true (job->idempotency_key && job->idempotency_key[0]);
    uint64_t lease = job->lease;

    before = s_errs (fx->admin);
    s_send_ack (fx->worker, id, lease ^ 0x5a5a);
    free (s_expect_error (fx->worker, ZL_ERR_STALE_LEASE, id, lease ^ 0x5a5a));
    s_assert_one_more (fx->admin, &before, "err_stale_lease");
    assert_int_equal (zlt_counter (fx->admin, "jobs_acked"), 0);

    before = s_errs (fx->admin);
    s_send_ack (fx->worker, id, lease);
    assert_int_equal (zlt_client_expect (fx->worker, ZL_MSG_SETTLED, &m, WAIT_MS), 0);
    if (m.kind == ZL_MSG_ERROR)
        fail_msg ("the right lease got Error %s: %s", zl_error_code_name (m.u.error.code),
                  m.u.error.message);
    assert_int_equal (m.u.settled.n, 1);
    assert_true (m.u.settled.items[0].job_id == id);
    assert_true (m.u.settled.items[0].lease == lease);
    assert_int_equal (zlt_counter (fx->admin, "jobs_acked"), 1);
    errs_t after = s_errs (fx->admin);
    assert_memory_equal (&before, &after, sizeof before);
}

/*  Limits and requests that no other scenario reaches: names and keys past
    their length limits, a Ready with no lanes or with an undeclared one, an
    admin request without an operation. Each gets its reason and one count. */
static void
s_more_bad_input (fx_t *fx)
{
    s_hello (fx->producer, 10);
    char name[130];
    memset (name, 'n', 129);
    name[129] = '\0';
    errs_t before = s_errs (fx->admin);
    s_submit (fx->producer, 1, name, "a", "p", 1);
    char *why = s_expect_rejected (fx->producer, 1, ZL_REJECT_INVALID);
    assert_non_null (strstr (why, "longer than 128 bytes"));
    free (why);
    s_assert_one_more (fx->admin, &before, "err_invalid");

    char key[258];
    memset (key, 'k', 257);
    key[257] = '\0';
    zl_job_spec_t spec = {.seq = 2, .tenant = "t1", .lane = "a", .idempotency_key = key};
    spec.payload = (zl_bytes_t){(const uint8_t *)"p", 1};
    zl_msg_t m = {.kind = ZL_MSG_SUBMIT};
    m.u.submit = (zl_submit_t){1, &spec};
    before = s_errs (fx->admin);
    assert_int_equal (zlt_client_send (fx->producer, &m), 0);
    why = s_expect_rejected (fx->producer, 2, ZL_REJECT_INVALID);
    assert_non_null (strstr (why, "field 'idempotency_key' is longer than 256 bytes"));
    free (why);
    s_assert_one_more (fx->admin, &before, "err_invalid");

    zl_msg_t ready = {.kind = ZL_MSG_READY};
    ready.u.ready = (zl_ready_t){"no-lanes", 0, NULL, 1};
    before = s_errs (fx->admin);
    assert_int_equal (zlt_client_send (fx->worker, &ready), 0);
    why = s_expect_error (fx->worker, ZL_ERR_INVALID, 0, 0);
    assert_non_null (strstr (why, "at least one lane"));
    free (why);
    s_assert_one_more (fx->admin, &before, "err_invalid");

    const char *lanes[] = {"nosuchlane"};
    ready.u.ready = (zl_ready_t){"wrong-lane", 1, lanes, 1};
    before = s_errs (fx->admin);
    assert_int_equal (zlt_client_send (fx->worker, &ready), 0);
    why = s_expect_error (fx->worker, ZL_ERR_UNKNOWN_LANE, 0, 0);
    assert_non_null (strstr (why, "nosuchlane"));
    free (why);
    s_assert_one_more (fx->admin, &before, "err_unknown_lane");

    zl_msg_t req = {.kind = ZL_MSG_ADMIN_REQUEST};
    req.u.admin_request.filter.lane = req.u.admin_request.filter.tenant = "";
    req.u.admin_request.lane = "";
    before = s_errs (fx->admin);
    assert_int_equal (zlt_client_send (fx->admin, &req), 0);
    why = s_expect_error (fx->admin, ZL_ERR_INVALID, 0, 0);
    assert_non_null (strstr (why, "without an operation"));
    free (why);
    s_assert_one_more (fx->admin, &before, "err_invalid");
}

// ---------------------------------------------------------------- tests
static void
test_frontend_bad_frames (void **state)
{
    fx_t fx;
    s_start (&fx);
    s_bad_frames (&fx);
}

static void
test_submit_rejections (void **state)
{
    fx_t fx;
    s_start (&fx);
    s_bad_specs (&fx);
}

static void
test_backend_errors (void **state)
{
    fx_t fx;
    s_start (&fx);
    s_bad_worker_then_flow (&fx);
}

/*  All of it against one broker: the error counters add up exactly and the
    one good job is the one ack. */
static void
test_job_flows_after_bad_input (void **state)
{
    fx_t fx;
    s_start (&fx);
    s_bad_frames (&fx);
    s_bad_specs (&fx);
    s_bad_worker_then_flow (&fx);
    errs_t e = s_errs (fx.admin);
    static const struct {
        const char *name;
        uint64_t count;
    } want[] = {{"err_bad_frame", 2},   {"err_bad_version", 1},       {"err_unknown_kind", 1},
                {"err_invalid", 2},     {"err_payload_too_large", 1}, {"err_unknown_lane", 1},
                {"err_unknown_job", 1}, {"err_stale_lease", 1},       {"err_not_ready", 1}};
    uint64_t total = 0, want_total = 0;
    for (size_t i = 0; i < N_ERRS; i++)
        total += e.v[i];
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        assert_int_equal (zlt_counter (fx.admin, want[i].name), want[i].count);
        want_total += want[i].count;
    }
    assert_int_equal (total, want_total);
    assert_int_equal (zlt_counter (fx.admin, "jobs_acked"), 1);
    assert_int_equal (zlt_counter (fx.admin, "jobs_accepted"), 2); // + the boundary job
    zl_group_stats_t g;
    assert_int_equal (zlt_group (fx.admin, "a", "t1", &g), 0);
    assert_int_equal (g.acked, 1);
    assert_int_equal (g.in_flight, 0);
    assert_int_equal (zlt_group (fx.admin, "b", NULL, &g), 0);
    assert_int_equal (g.ready, 1);
}

/*  1,000 random non-Envelope frames from one client, interleaved with 100
    valid jobs from another: every job is accepted, every frame is counted. */
static void
test_more_bad_input (void **state)
{
    fx_t fx;
    s_start (&fx);
    s_more_bad_input (&fx);
}

static void
test_garbage_flood (void **state)
{
    enum { GARBAGE = 1000, JOBS = 100 };
    fx_t fx;
    s_start (&fx);
    zlt_client_t *vandal = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (fx.broker, "frontend"));
    assert_non_null (vandal);
    int hwm = 0; // keep every Error the broker sends back
    zmq_setsockopt (zlt_client_sock (vandal), ZMQ_RCVHWM, &hwm, sizeof hwm);
    s_hello (fx.producer, JOBS);

    zl_rng_t rng;
    zl_rng_seed (&rng, 20261130);
    zl_msg_t scratch;
    uint64_t next_seq = 1;
    for (int i = 0; i < GARBAGE; i++) {
        uint8_t frame[200];
        size_t len = 1 + (size_t)zl_rng_range (&rng, sizeof frame - 1);
        for (size_t k = 0; k < len; k++)
            frame[k] = (uint8_t)zl_rng_next (&rng);
        frame[0] = (uint8_t)((frame[0] & 0x78) | 0x07); // a tag of wire type 7: never valid
        assert_int_equal (zl_codec_decode (zlt_client_codec (vandal), frame, len, &scratch),
                          ZL_DECODE_BAD_FRAME);
        assert_int_equal (zlt_client_send_raw (vandal, frame, len, false), 0);
        if (i % (GARBAGE / JOBS) == 0) {
            char payload[32];
            int n = snprintf (payload, sizeof payload, "job-%" PRIu64, next_seq);
            s_submit (fx.producer, next_seq, next_seq % 2 ? "t1" : "t2", "a", payload, (size_t)n);
            next_seq++;
        }
    }
    assert_int_equal (next_seq - 1, JOBS);

    bool accepted[JOBS + 1] = {false};
    int n_accepted = 0;
    int64_t deadline = zlt_now_ms () + 20000;
    while (n_accepted < JOBS) {
        int64_t left = deadline - zlt_now_ms ();
        zl_msg_t m;
        if (left <= 0 || zlt_client_expect (fx.producer, ZL_MSG_ACCEPTED, &m, (int)left) != 0)
            fail_msg ("only %d of %d jobs accepted", n_accepted, JOBS);
        if (m.kind == ZL_MSG_ERROR)
            fail_msg ("the producer got Error %s: %s", zl_error_code_name (m.u.error.code),
                      m.u.error.message);
        for (size_t i = 0; i < m.u.accepted.n; i++) {
            uint64_t seq = m.u.accepted.jobs[i].seq;
            assert_true (seq >= 1 && seq <= JOBS);
            assert_false (accepted[seq]);
            accepted[seq] = true;
            n_accepted++;
        }
    }
    int errors = 0;
    while (errors < GARBAGE) {
        zl_msg_t m;
        int rc = zlt_client_recv (vandal, &m, WAIT_MS);
        if (rc == -1)
            fail_msg ("the vandal got %d of %d Errors", errors, GARBAGE);
        assert_int_equal (rc, 0);
        if (m.kind == ZL_MSG_HEARTBEAT || m.kind == ZL_MSG_CREDIT)
            continue;
        assert_int_equal (m.kind, ZL_MSG_ERROR);
        assert_int_equal (m.u.error.code, ZL_ERR_BAD_FRAME);
        errors++;
    }
    assert_int_equal (zlt_counter (fx.admin, "err_bad_frame"), GARBAGE);
    assert_int_equal (zlt_counter (fx.admin, "jobs_accepted"), JOBS);
    assert_int_equal (zlt_counter (fx.admin, "jobs_submitted"), JOBS);
    zl_group_stats_t g;
    assert_int_equal (zlt_group (fx.admin, "a", NULL, &g), 0);
    assert_int_equal (g.ready, JOBS);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown (test_frontend_bad_frames, zlt_teardown),
        cmocka_unit_test_teardown (test_submit_rejections, zlt_teardown),
        cmocka_unit_test_teardown (test_backend_errors, zlt_teardown),
        cmocka_unit_test_teardown (test_job_flows_after_bad_input, zlt_teardown),
        cmocka_unit_test_teardown (test_garbage_flood, zlt_teardown),
        cmocka_unit_test_teardown (test_more_bad_input, zlt_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
