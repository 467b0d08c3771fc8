/*  test_producer: the producer library against a fake broker.
    The test plays the broker with its own ROUTER socket on 127.0.0.1 and an
    ephemeral port, speaking the real codec. Producer and fake broker share
    one thread and take turns (the producer is polled with short timeouts);
    one test runs the fake broker in a thread to exercise a blocking submit.
    Every wait is on a socket event with a bounded timeout; nothing sleeps. */
#include "zlane_producer.h"

#include "clock.h"
#include "codec.h"
#include "wire.h"
#include "zl_alloc.h"

#include <czmq.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#define WAIT_MS 10000 // upper bound for anything that should happen
#define SLICE_MS 5    // producer poll slice while the test waits on the broker
#define MAX_RESULTS 256

typedef struct {
    uint64_t seq;
    zl_producer_status_t status;
    uint64_t job_id;
    bool duplicate;
    zl_reject_code_t code;
    char reason[512];
    char key[128];
} result_t;

typedef struct {
    zsock_t *router; // the fake broker's frontend
    void *handle;
    char endpoint[256];
    zl_codec_t *codec;
    zl_peer_t peer; // the producer, as the router last saw it
    zl_producer_t *producer;
    result_t results[MAX_RESULTS];
    size_t n_results;
} fixture_t;

// ---------------------------------------------------------------- fake broker

static void
s_on_result (const zl_producer_result_t *r, void *arg)
{
    fixture_t *t = arg;
    assert_true (t->n_results < MAX_RESULTS);
    result_t *out = &t->results[t->n_results++];
    *out = (result_t){.seq = r->seq,
                      .status = r->status,
                      .job_id = r->job_id,
                      .duplicate = r->duplicate,
                      .code = r->code};
    snprintf (out->reason, sizeof out->reason, "%s", r->reason);
    snprintf (out->key, sizeof out->key, "%s", r->idempotency_key);
}

//  Bind a new ROUTER at `endpoint` ("tcp://127.0.0.1:*" for a fresh port).
static void
s_broker_bind (fixture_t *t, const char *endpoint)
{
    t->router = zsock_new (ZMQ_ROUTER);
    assert_non_null (t->router);
    t->handle = zsock_resolve (t->router);
    int linger = 0;
    zmq_setsockopt (t->handle, ZMQ_LINGER, &linger, sizeof linger);
    assert_int_equal (zmq_bind (t->handle, endpoint), 0);
    size_t size = sizeof t->endpoint;
    assert_int_equal (zmq_getsockopt (t->handle, ZMQ_LAST_ENDPOINT, t->endpoint, &size), 0);
}

//  Close the fake broker's socket and wait until its listener is closed, so
//  that the port can be bound again at once.
static void
s_broker_close (fixture_t *t)
{
    char monitor_ep[64];
    snprintf (monitor_ep, sizeof monitor_ep, "inproc://test-broker-monitor-%p", (void *)t);
    assert_int_equal (zmq_socket_monitor (t->handle, monitor_ep, ZMQ_EVENT_CLOSED), 0);
    zsock_t *monitor = zsock_new (ZMQ_PAIR);
    assert_int_equal (zmq_connect (zsock_resolve (monitor), monitor_ep), 0);
    assert_int_equal (zmq_unbind (t->handle, t->endpoint), 0);
    zmq_pollitem_t item = {zsock_resolve (monitor), 0, ZMQ_POLLIN, 0};
    assert_int_equal (zmq_poll (&item, 1, WAIT_MS), 1); // ZMQ_EVENT_CLOSED
    zmq_socket_monitor (t->handle, NULL, 0);
    zsock_destroy (&monitor);
    zsock_destroy (&t->router);
    t->handle = NULL;
}

//  Let the producer run until the fake broker has a message, then decode it
//  into `msg` (valid until the next receive). Returns false on timeout.
static bool
s_broker_recv (fixture_t *t, zl_msg_t *msg, int timeout_ms)
{
    int64_t end = zl_clock_mono_ms () + timeout_ms;
    while (true) {
        zmq_pollitem_t item = {t->handle, 0, ZMQ_POLLIN, 0};
        if (zmq_poll (&item, 1, 0) == 1)
            break;
        if (zl_clock_mono_ms () >= end)
            return false;
        if (t->producer)
            zl_producer_poll (t->producer, SLICE_MS);
        else
            zmq_poll (&item, 1, SLICE_MS);
    }
    int size = zmq_recv (t->handle, t->peer.data, sizeof t->peer.data, 0);
    assert_true (size > 0 && size <= (int)sizeof t->peer.data);
    t->peer.len = (uint8_t)size;
    zmq_msg_t frame;
    zmq_msg_init (&frame);
    assert_true (zmq_msg_recv (&frame, t->handle, 0) >= 0);
    assert_false (zmq_msg_more (&frame));
    assert_int_equal (zl_codec_decode (t->codec, zmq_msg_data (&frame), zmq_msg_size (&frame), msg),
                      ZL_DECODE_OK);
    zmq_msg_close (&frame);
    return true;
}

static void
s_broker_send (fixture_t *t, const zl_msg_t *msg)
{
    assert_int_equal (zl_wire_send_to (t->handle, &t->peer, t->codec, msg), 0);
}

static void
s_send_credit (fixture_t *t, uint64_t limit)
{
    zl_msg_t msg = {.kind = ZL_MSG_CREDIT, .u.credit.limit = limit};
    s_broker_send (t, &msg);
}

static void
s_accept (fixture_t *t, uint64_t seq, uint64_t job_id, bool duplicate)
{
    zl_acceptance_t a = {seq, job_id, duplicate};
    zl_msg_t msg = {.kind = ZL_MSG_ACCEPTED, .u.accepted = {1, &a}};
    s_broker_send (t, &msg);
}

static void
s_reject (fixture_t *t, uint64_t seq, zl_reject_code_t code, const char *reason, uint32_t retry)
{
    zl_rejection_t r = {seq, code, reason, retry};
    zl_msg_t msg = {.kind = ZL_MSG_REJECTED, .u.rejected = {1, &r}};
    s_broker_send (t, &msg);
}

static void
s_expect_hello (fixture_t *t)
{
    zl_msg_t msg;
    assert_true (s_broker_recv (t, &msg, WAIT_MS));
    assert_int_equal (msg.kind, ZL_MSG_HELLO);
    assert_string_equal (msg.u.hello.client, "test-producer");
}

//  Assert that the fake broker receives nothing for `ms` while the producer
//  runs. (A bounded wait for an event that must not happen.)
static void
s_expect_silence (fixture_t *t, int ms)
{
    zl_msg_t msg;
    bool got = s_broker_recv (t, &msg, ms);
    if (got)
        fail_msg ("unexpected %s from producer", zl_msg_kind_name (msg.kind));
}

//  Receive Submit frames until `want` specs have arrived, appending their
//  seqs and keys. Fails if a frame is larger than `max_batch`.
static void
s_expect_specs (fixture_t *t, size_t want, size_t max_batch, uint64_t *seqs, char (*keys)[128])
{
    size_t got = 0;
    while (got < want) {
        zl_msg_t msg;
        assert_true (s_broker_recv (t, &msg, WAIT_MS));
        assert_int_equal (msg.kind, ZL_MSG_SUBMIT);
        assert_true (msg.u.submit.n > 0 && msg.u.submit.n <= max_batch);
        assert_true (got + msg.u.submit.n <= want);
        for (size_t i = 0; i < msg.u.submit.n; i++, got++) {
            if (seqs)
                seqs[got] = msg.u.submit.jobs[i].seq;
            if (keys)
                snprintf (keys[got], 128, "%s", msg.u.submit.jobs[i].idempotency_key);
        }
    }
}

//  Poll the producer until `n` results have arrived.
static void
s_wait_results (fixture_t *t, size_t n)
{
    int64_t end = zl_clock_mono_ms () + WAIT_MS;
    while (t->n_results < n && zl_clock_mono_ms () < end)
        zl_producer_poll (t->producer, 50);
    assert_int_equal (t->n_results, n);
}

//  Poll the producer until it has `n` credit available.
static void
s_wait_credit (fixture_t *t, uint64_t n)
{
    int64_t end = zl_clock_mono_ms () + WAIT_MS;
    while (zl_producer_credit_available (t->producer) < n && zl_clock_mono_ms () < end)
        zl_producer_poll (t->producer, SLICE_MS);
    assert_int_equal (zl_producer_credit_available (t->producer), n);
}

static result_t *
s_result (fixture_t *t, uint64_t seq)
{
    for (size_t i = 0; i < t->n_results; i++)
        if (t->results[i].seq == seq)
            return &t->results[i];
    fail_msg ("no result for seq %llu", (unsigned long long)seq);
    return NULL;
}

static zl_producer_job_t
s_job (const char *payload)
{
    return (zl_producer_job_t){
        .tenant = "acme", .lane = "email", .payload = payload, .payload_len = strlen (payload)};
}

static fixture_t *
s_fixture_new (bool nonblock, uint32_t max_batch, uint32_t deadline_ms)
{
    fixture_t *t = ZL_NEW (fixture_t);
    t->codec = zl_codec_new ();
    s_broker_bind (t, "tcp://127.0.0.1:*");
    zl_producer_opts_t opts;
    zl_producer_opts_defaults (&opts);
    opts.endpoint = t->endpoint;
    opts.client = "test-producer";
    opts.nonblock = nonblock;
    if (max_batch)
        opts.max_batch = max_batch;
    if (deadline_ms)
        opts.deadline_ms = deadline_ms;
    opts.on_result = s_on_result;
    opts.on_result_arg = t;
    t->producer = zl_producer_new (&opts);
    assert_non_null (t->producer);
    return t;
}

static void
s_fixture_destroy (fixture_t **t_p)
{
    fixture_t *t = *t_p;
    zl_producer_destroy (&t->producer);
    zsock_destroy (&t->router);
    zl_codec_destroy (&t->codec);
    free (t);
    *t_p = NULL;
}

// ---------------------------------------------------------------- tests

//  (a) Hello first; nothing sent before Credit; never more specs than the
//  credit limit, in frames of at most max_batch.
static void
test_credit_limits_what_is_sent (void **state)
{
    fixture_t *t = s_fixture_new (true, 2, 0);
    s_expect_hello (t);
    assert_true (zl_producer_connected (t->producer));
    zl_producer_job_t job = s_job ("x");
    assert_int_equal (zl_producer_submit (t->producer, &job, NULL), -1);
    assert_int_equal (errno, EAGAIN);
    s_expect_silence (t, 100);

    s_send_credit (t, 5);
    s_wait_credit (t, 5);
    uint64_t seq = 0;
    for (int i = 0; i < 5; i++) {
        assert_int_equal (zl_producer_submit (t->producer, &job, &seq), 0);
        assert_int_equal (seq, (uint64_t)i + 1);
    }
    assert_int_equal (zl_producer_submit (t->producer, &job, NULL), -1);
    assert_int_equal (errno, EAGAIN);
    assert_true (zl_producer_waiting_for_credit (t->producer));
    zl_producer_flush (t->producer);
    s_expect_specs (t, 5, 2, NULL, NULL);
    s_expect_silence (t, 100);

    //  A lower limit changes nothing: the limit only grows.
    s_send_credit (t, 3);
    s_expect_silence (t, 50);
    assert_int_equal (zl_producer_credit_available (t->producer), 0);

    s_send_credit (t, 8);
    s_wait_credit (t, 3);
    zl_producer_job_t jobs[4] = {job, job, job, job};
    uint64_t seqs[4];
    assert_int_equal (zl_producer_submit_batch (t->producer, jobs, 4, seqs), 3);
    assert_int_equal (errno, EAGAIN);
    assert_int_equal (seqs[0], 6);
    assert_int_equal (seqs[2], 8);
    zl_producer_flush (t->producer);
    s_expect_specs (t, 3, 2, NULL, NULL);
    s_expect_silence (t, 100);

    zl_producer_stats_t stats;
    zl_producer_stats (t->producer, &stats);
    assert_int_equal (stats.specs_sent, 8);
    assert_int_equal (zl_producer_outstanding (t->producer), 8);
    s_fixture_destroy (&t);
}

//  (b) Accepted replies reach the callback with the right seq -> job id, in
//  any order; the spec carries every field of the job.
static void
test_accepted_reach_callback (void **state)
{
    fixture_t *t = s_fixture_new (true, 0, 0);
    s_expect_hello (t);
    s_send_credit (t, 100);
    s_wait_credit (t, 100);

    zl_header_t headers[] = {{"trace", "abc"}, {"empty", ""}};
    zl_producer_job_t full = {.tenant = "acme",
                              .lane = "email",
                              .payload = "hello\0world",
                              .payload_len = 11,
                              .idempotency_key = "order-42",
                              .delay_ms = 5000,
                              .max_attempts = 7,
                              .lease_ms = 30000,
                              .max_run_ms = 60000,
                              .headers = headers,
                              .n_headers = 2};
    zl_producer_job_t plain = s_job ("p");
    zl_producer_job_t jobs[10];
    for (int i = 0; i < 10; i++)
        jobs[i] = i == 0 ? full : plain;
    assert_int_equal (zl_producer_submit_batch (t->producer, jobs, 10, NULL), 10);
    zl_producer_flush (t->producer);

    zl_msg_t msg;
    assert_true (s_broker_recv (t, &msg, WAIT_MS));
    assert_int_equal (msg.kind, ZL_MSG_SUBMIT);
    assert_int_equal (msg.u.submit.n, 10);
    const zl_job_spec_t *spec = &msg.u.submit.jobs[0];
    assert_int_equal (spec->seq, 1);
    assert_string_equal (spec->tenant, "acme");
    assert_string_equal (spec->lane, "email");
    assert_int_equal (spec->payload.len, 11);
    assert_memory_equal (spec->payload.data, "hello\0world", 11);
    assert_string_equal (spec->idempotency_key, "order-42");
    assert_int_equal (spec->delay_ms, 5000);
    assert_int_equal (spec->max_attempts, 7);
    assert_int_equal (spec->lease_ms, 30000);
    assert_int_equal (spec->max_run_ms, 60000);
    assert_int_equal (spec->n_headers, 2);
    assert_string_equal (spec->headers[0].key, "trace");
    assert_string_equal (spec->headers[0].value, "abc");
    assert_string_equal (spec->headers[1].value, "");
    //  Generated keys: "<16 hex of this instance>-<seq>".
    const char *key = msg.u.submit.jobs[3].idempotency_key;
    assert_int_equal (strlen (key), 18);
    assert_int_equal (strspn (key, "0123456789abcdef"), 16);
    assert_string_equal (key + 16, "-4");
    assert_memory_equal (msg.u.submit.jobs[4].idempotency_key, key, 17);
    //  ... and marked as made by the library (the broker keeps those for its
    //  resend window only); the caller's own key is not.
    assert_false (spec->generated_key);
    for (int i = 1; i < 10; i++)
        assert_true (msg.u.submit.jobs[i].generated_key);

    //  Answer in reverse order, in one frame; seq 1 (own key) and seq 2
    //  (generated key) are marked duplicates.
    zl_acceptance_t acc[10];
    for (int i = 0; i < 10; i++)
        acc[i] = (zl_acceptance_t){10 - i, 1000 + (10 - i), 10 - i <= 2};
    zl_msg_t reply = {.kind = ZL_MSG_ACCEPTED, .u.accepted = {10, acc}};
    s_broker_send (t, &reply);
    assert_int_equal (zl_producer_wait (t->producer, WAIT_MS), 0);
    assert_int_equal (t->n_results, 10);
    for (uint64_t seq = 1; seq <= 10; seq++) {
        result_t *r = s_result (t, seq);
        assert_int_equal (r->status, ZL_PRODUCER_ACCEPTED);
        assert_int_equal (r->job_id, 1000 + seq);
        assert_string_equal (r->reason, "");
    }
    assert_true (s_result (t, 1)->duplicate);  // the caller's key: a real duplicate
    assert_false (s_result (t, 2)->duplicate); // generated: only our own resend
    assert_string_equal (s_result (t, 1)->key, "order-42");
    assert_int_equal (zl_producer_outstanding (t->producer), 0);

    //  Replies for unknown or finished seqs are ignored.
    s_accept (t, 3, 9999, false);
    s_accept (t, 77, 9999, false);
    s_reject (t, 4, ZL_REJECT_INVALID, "late", 0);
    assert_int_equal (zl_producer_poll (t->producer, 100), 0);
    assert_int_equal (t->n_results, 10);
    s_fixture_destroy (&t);
}

//  (c) A final rejection is reported at once with its code; QUEUE_FULL and
//  STORE_FULL are resent after retry_after (at least 50 ms), same key.
static void
test_rejections (void **state)
{
    fixture_t *t = s_fixture_new (true, 0, 0);
    s_expect_hello (t);
    s_send_credit (t, 100);
    s_wait_credit (t, 100);
    zl_producer_job_t jobs[3] = {s_job ("a"), s_job ("b"), s_job ("c")};
    assert_int_equal (zl_producer_submit_batch (t->producer, jobs, 3, NULL), 3);
    zl_producer_flush (t->producer);
    uint64_t seqs[3];
    char keys[3][128];
    s_expect_specs (t, 3, 256, seqs, keys);

    s_reject (t, 1, ZL_REJECT_UNKNOWN_LANE, "no lane 'email'", 0);
    s_reject (t, 2, ZL_REJECT_QUEUE_FULL, "lane email is full", 200);
    s_reject (t, 3, ZL_REJECT_STORE_FULL, "disk full", 0);
    int64_t rejected_at = zl_clock_mono_ms ();
    s_wait_results (t, 1);
    assert_int_equal (t->results[0].seq, 1);
    assert_int_equal (t->results[0].status, ZL_PRODUCER_REJECTED);
    assert_int_equal (t->results[0].code, ZL_REJECT_UNKNOWN_LANE);
    assert_string_equal (t->results[0].reason, "no lane 'email'");

    //  STORE_FULL with no retry_after comes back after the 50 ms floor,
    //  QUEUE_FULL after its 200 ms.
    uint64_t seq;
    char key[128];
    s_expect_specs (t, 1, 256, &seq, &key);
    assert_int_equal (seq, 3);
    assert_string_equal (key, keys[2]);
    assert_true (zl_clock_mono_ms () - rejected_at >= 50);
    s_expect_specs (t, 1, 256, &seq, &key);
    assert_int_equal (seq, 2);
    assert_string_equal (key, keys[1]);
    assert_true (zl_clock_mono_ms () - rejected_at >= 200);

    s_accept (t, 2, 502, false);
    s_accept (t, 3, 503, false);
    assert_int_equal (zl_producer_wait (t->producer, WAIT_MS), 0);
    assert_int_equal (s_result (t, 2)->job_id, 502);
    assert_int_equal (s_result (t, 3)->status, ZL_PRODUCER_ACCEPTED);
    zl_producer_stats_t stats;
    zl_producer_stats (t->producer, &stats);
    assert_int_equal (stats.retried, 2);
    assert_int_equal (stats.rejected, 1);
    s_fixture_destroy (&t);
}

//  (d) The broker dies with jobs unanswered and comes back on the same port:
//  the producer says Hello again, waits for credit, and resends every job not
//  yet accepted under the same seq and idempotency key.
static void
test_restart_ride_through (void **state)
{
    fixture_t *t = s_fixture_new (true, 0, 0);
    s_expect_hello (t);
    s_send_credit (t, 100);
    s_wait_credit (t, 100);
    zl_producer_job_t jobs[10];
    for (int i = 0; i < 10; i++)
        jobs[i] = s_job ("r");
    jobs[5].idempotency_key = "mine-5";
    assert_int_equal (zl_producer_submit_batch (t->producer, jobs, 10, NULL), 10);
    zl_producer_flush (t->producer);
    uint64_t seqs[10];
    char keys[10][128];
    s_expect_specs (t, 10, 256, seqs, keys);
    for (int i = 0; i < 3; i++)
        s_accept (t, seqs[i], 100 + seqs[i], false);
    s_wait_results (t, 3);

    //  Restart: the first broker goes away without answering seqs 4..10.
    char endpoint[256];
    snprintf (endpoint, sizeof endpoint, "%s", t->endpoint);
    s_broker_close (t);
    s_broker_bind (t, endpoint);

    s_expect_hello (t);
    s_expect_silence (t, 150); // nothing before credit
    s_send_credit (t, 4);
    uint64_t again[7];
    char again_keys[7][128];
    s_expect_specs (t, 4, 256, again, again_keys);
    s_expect_silence (t, 100); // credit is 4
    s_send_credit (t, 100);
    s_expect_specs (t, 3, 256, again + 4, again_keys + 4);
    for (int i = 0; i < 7; i++) {
        assert_int_equal (again[i], seqs[3 + i]); // in order, accepted ones not resent
        assert_string_equal (again_keys[i], keys[3 + i]);
    }
    assert_string_equal (again_keys[2], "mine-5");

    //  The restarted broker stored some of them before it died.
    for (int i = 0; i < 7; i++)
        s_accept (t, again[i], 100 + again[i], i < 2);
    assert_int_equal (zl_producer_wait (t->producer, WAIT_MS), 0);
    assert_int_equal (t->n_results, 10);
    for (uint64_t seq = 1; seq <= 10; seq++) {
        assert_int_equal (s_result (t, seq)->status, ZL_PRODUCER_ACCEPTED);
        assert_int_equal (s_result (t, seq)->job_id, 100 + seq);
        assert_false (s_result (t, seq)->duplicate);
    }
    zl_producer_stats_t stats;
    zl_producer_stats (t->producer, &stats);
    assert_int_equal (stats.resent, 7);
    assert_int_equal (stats.connects, 2);
    assert_int_equal (stats.disconnects, 1);
    assert_int_equal (stats.specs_sent, 17);
    s_fixture_destroy (&t);
}

//  (d2) Given "dead,A,B", the producer skips the closed port, serves with A,
//  and when A goes away moves to B and resends there, under the same keys,
//  exactly the jobs A did not accept. (Fake brokers that serve; nothing here
//  plays a standby.)
static void
test_list_moves_on (void **state)
{
    fixture_t *t = ZL_NEW (fixture_t);
    t->codec = zl_codec_new ();
    //  Ports from the kernel (zmq_bind; czmq's zsock_bind would hand out the
    //  same first free port of its range twice): one closed, A and B bound.
    s_broker_bind (t, "tcp://127.0.0.1:*");
    char dead_ep[256];
    snprintf (dead_ep, sizeof dead_ep, "%s", t->endpoint);
    s_broker_close (t);
    s_broker_bind (t, "tcp://127.0.0.1:*"); // A
    zsock_t *b = zsock_new (ZMQ_ROUTER);
    assert_non_null (b);
    int linger = 0;
    zmq_setsockopt (zsock_resolve (b), ZMQ_LINGER, &linger, sizeof linger);
    assert_int_equal (zmq_bind (zsock_resolve (b), "tcp://127.0.0.1:*"), 0);
    char b_ep[256];
    size_t size = sizeof b_ep;
    assert_int_equal (zmq_getsockopt (zsock_resolve (b), ZMQ_LAST_ENDPOINT, b_ep, &size), 0);
    char list[800];
    snprintf (list, sizeof list, "%s, %s,%s", dead_ep, t->endpoint, b_ep);

    zl_producer_opts_t opts;
    zl_producer_opts_defaults (&opts);
    opts.endpoint = list;
    opts.client = "test-producer";
    opts.nonblock = true;
    opts.on_result = s_on_result;
    opts.on_result_arg = t;
    t->producer = zl_producer_new (&opts);
    assert_non_null (t->producer);
    assert_string_equal (zl_producer_endpoint (t->producer), dead_ep);

    s_expect_hello (t); // on A, after the closed port
    assert_string_equal (zl_producer_endpoint (t->producer), t->endpoint);
    s_send_credit (t, 100);
    s_wait_credit (t, 100);
    zl_producer_job_t jobs[10];
    for (int i = 0; i < 10; i++)
        jobs[i] = s_job ("m");
    jobs[4].idempotency_key = "mine-4";
    assert_int_equal (zl_producer_submit_batch (t->producer, jobs, 10, NULL), 10);
    zl_producer_flush (t->producer);
    uint64_t seqs[10];
    char keys[10][128];
    s_expect_specs (t, 10, 256, seqs, keys);
    for (int i = 0; i < 3; i++)
        s_accept (t, seqs[i], 100 + seqs[i], false);
    s_wait_results (t, 3);

    //  A goes away without answering seqs 4..10: B takes over.
    s_broker_close (t);
    t->router = b;
    t->handle = zsock_resolve (b);
    snprintf (t->endpoint, sizeof t->endpoint, "%s", b_ep);
    s_expect_hello (t);
    assert_string_equal (zl_producer_endpoint (t->producer), b_ep);
    s_send_credit (t, 100);
    uint64_t again[7];
    char again_keys[7][128];
    s_expect_specs (t, 7, 256, again, again_keys);
    for (int i = 0; i < 7; i++) {
        assert_int_equal (again[i], seqs[3 + i]); // in order, accepted ones not resent
        assert_string_equal (again_keys[i], keys[3 + i]);
    }
    assert_string_equal (again_keys[1], "mine-4");
    for (int i = 0; i < 7; i++)
        s_accept (t, again[i], 100 + again[i], false);
    assert_int_equal (zl_producer_wait (t->producer, WAIT_MS), 0);
    assert_int_equal (t->n_results, 10);
    for (uint64_t seq = 1; seq <= 10; seq++)
        assert_int_equal (s_result (t, seq)->status, ZL_PRODUCER_ACCEPTED);
    zl_producer_stats_t stats;
    zl_producer_stats (t->producer, &stats);
    assert_int_equal (stats.resent, 7);
    assert_int_equal (stats.connects, 2);
    assert_int_equal (stats.moves, 2); // dead -> A, A -> B
    assert_int_equal (stats.specs_sent, 17);
    s_fixture_destroy (&t);
}

//  (d2b) The leader dies; the standby, not leading yet, names it: the
//  producer asks the standby again (soon) instead of going back to the dead
//  one, and is served there once it leads. Seen deterministically: the dead
//  leader's port is bound again before the producer moves, and the next
//  Hello still comes to the standby.
static void
test_standby_naming_the_dead_leader (void **state)
{
    (void)state;
    fixture_t *t = ZL_NEW (fixture_t);
    t->codec = zl_codec_new ();
    s_broker_bind (t, "tcp://127.0.0.1:*"); // A, the leader
    char a_ep[256];
    snprintf (a_ep, sizeof a_ep, "%s", t->endpoint);
    zsock_t *b = zsock_new (ZMQ_ROUTER);
    assert_non_null (b);
    int linger = 0;
    zmq_setsockopt (zsock_resolve (b), ZMQ_LINGER, &linger, sizeof linger);
    assert_int_equal (zmq_bind (zsock_resolve (b), "tcp://127.0.0.1:*"), 0);
    char b_ep[256];
    size_t size = sizeof b_ep;
    assert_int_equal (zmq_getsockopt (zsock_resolve (b), ZMQ_LAST_ENDPOINT, b_ep, &size), 0);
    char list[600];
    snprintf (list, sizeof list, "%s,%s", a_ep, b_ep);
    zl_producer_opts_t opts;
    zl_producer_opts_defaults (&opts);
    opts.endpoint = list;
    opts.client = "test-producer";
    opts.nonblock = true;
    opts.on_result = s_on_result;
    opts.on_result_arg = t;
    t->producer = zl_producer_new (&opts);
    assert_non_null (t->producer);
    s_expect_hello (t); // A
    s_send_credit (t, 100);
    s_wait_credit (t, 100);
    zl_producer_job_t jobs[2] = {s_job ("x"), s_job ("y")};
    assert_int_equal (zl_producer_submit_batch (t->producer, jobs, 2, NULL), 2);
    zl_producer_flush (t->producer);
    s_expect_specs (t, 2, 256, NULL, NULL);

    //  A dies unanswered: the producer moves to B, which stands by, naming A
    s_broker_close (t);
    zsock_t *a = NULL;
    t->router = b;
    t->handle = zsock_resolve (b);
    snprintf (t->endpoint, sizeof t->endpoint, "%s", b_ep);
    for (int round = 0; round < 3; round++) {
        s_expect_hello (t);
        assert_string_equal (zl_producer_endpoint (t->producer), b_ep);
        if (round == 0) { // A's port answers again: a producer that followed would go there
            a = zsock_new (ZMQ_ROUTER);
            zmq_setsockopt (zsock_resolve (a), ZMQ_LINGER, &linger, sizeof linger);
            assert_int_equal (zmq_bind (zsock_resolve (a), a_ep), 0);
        }
        const char *leader[] = {a_ep};
        zl_msg_t err = {.kind = ZL_MSG_ERROR,
                        .u.error = {.code = ZL_ERR_NOT_LEADER,
                                    .message = "this broker is a standby",
                                    .n_leader_endpoints = 1,
                                    .leader_endpoints = leader}};
        s_broker_send (t, &err);
    }
    //  B leads now: the jobs go there, under their keys; A heard nothing
    s_expect_hello (t);
    s_send_credit (t, 100);
    uint64_t seqs[2];
    s_expect_specs (t, 2, 256, seqs, NULL);
    for (int i = 0; i < 2; i++)
        s_accept (t, seqs[i], 7 + seqs[i], false);
    assert_int_equal (zl_producer_wait (t->producer, WAIT_MS), 0);
    assert_int_equal (t->n_results, 2);
    zmq_pollitem_t item = {zsock_resolve (a), 0, ZMQ_POLLIN, 0};
    assert_int_equal (zmq_poll (&item, 1, 0), 0);
    zsock_destroy (&a);
    s_fixture_destroy (&t);
}

//  (d3) A broker whose database does not answer. Its Error{UNAVAILABLE} to
//  our Hello gave no credit: the producer leaves and dials it again (the only
//  broker it has) with a new Hello. Its Rejected{UNAVAILABLE} keeps the jobs:
//  they are resent after retry_after on the same connection, same keys, as
//  after QUEUE_FULL.
static void
test_unavailable_one_broker (void **state)
{
    fixture_t *t = s_fixture_new (true, 0, 0);
    s_expect_hello (t);
    zl_peer_t first = t->peer;
    zl_msg_t err = {.kind = ZL_MSG_ERROR,
                    .u.error = {.code = ZL_ERR_UNAVAILABLE, .message = "no database"}};
    s_broker_send (t, &err);
    s_expect_hello (t); // a new connection: the same broker, again
    assert_false (t->peer.len == first.len && !memcmp (t->peer.data, first.data, first.len));
    s_send_credit (t, 100);
    s_wait_credit (t, 100);
    zl_producer_job_t jobs[2] = {s_job ("a"), s_job ("b")};
    jobs[1].idempotency_key = "mine-b";
    assert_int_equal (zl_producer_submit_batch (t->producer, jobs, 2, NULL), 2);
    zl_producer_flush (t->producer);
    uint64_t seqs[2];
    char keys[2][128];
    s_expect_specs (t, 2, 256, seqs, keys);
    zl_rejection_t r[2] = {{seqs[0], ZL_REJECT_UNAVAILABLE, "no database", 150},
                           {seqs[1], ZL_REJECT_UNAVAILABLE, "no database", 150}};
    zl_msg_t rej = {.kind = ZL_MSG_REJECTED, .u.rejected = {2, r}};
    s_broker_send (t, &rej);
    int64_t rejected_at = zl_clock_mono_ms ();
    uint64_t again[2];
    char again_keys[2][128];
    s_expect_specs (t, 2, 256, again, again_keys); // no Hello first: the same session
    assert_true (zl_clock_mono_ms () - rejected_at >= 150);
    for (int i = 0; i < 2; i++) { // each under its key (retries come in no set order)
        int k = again[i] == seqs[0] ? 0 : 1;
        assert_int_equal (again[i], seqs[k]);
        assert_string_equal (again_keys[i], keys[k]);
    }
    assert_true (again[0] != again[1]);
    assert_int_equal (t->n_results, 0); // nothing was given up
    s_accept (t, seqs[0], 700, false);
    s_accept (t, seqs[1], 701, false);
    assert_int_equal (zl_producer_wait (t->producer, WAIT_MS), 0);
    assert_int_equal (s_result (t, seqs[1])->status, ZL_PRODUCER_ACCEPTED);
    assert_int_equal (s_result (t, seqs[1])->job_id, 701);
    zl_producer_stats_t stats;
    zl_producer_stats (t->producer, &stats);
    assert_int_equal (stats.retried, 2);
    assert_int_equal (stats.connects, 2);
    s_fixture_destroy (&t);
}

//  (d4) Given "A,B", a Rejected{UNAVAILABLE} from A moves the producer to B
//  (which may reach the database, or lead), where the jobs are resent after
//  their retry_after under the same keys.
static void
test_unavailable_list_moves_on (void **state)
{
    fixture_t *t = ZL_NEW (fixture_t);
    t->codec = zl_codec_new ();
    s_broker_bind (t, "tcp://127.0.0.1:*"); // A
    zsock_t *b = zsock_new (ZMQ_ROUTER);
    assert_non_null (b);
    int linger = 0;
    zmq_setsockopt (zsock_resolve (b), ZMQ_LINGER, &linger, sizeof linger);
    assert_int_equal (zmq_bind (zsock_resolve (b), "tcp://127.0.0.1:*"), 0);
    char b_ep[256];
    size_t size = sizeof b_ep;
    assert_int_equal (zmq_getsockopt (zsock_resolve (b), ZMQ_LAST_ENDPOINT, b_ep, &size), 0);
    char list[600];
    snprintf (list, sizeof list, "%s,%s", t->endpoint, b_ep);
    zl_producer_opts_t opts;
    zl_producer_opts_defaults (&opts);
    opts.endpoint = list;
    opts.client = "test-producer";
    opts.nonblock = true;
    opts.on_result = s_on_result;
    opts.on_result_arg = t;
    t->producer = zl_producer_new (&opts);
    assert_non_null (t->producer);

    s_expect_hello (t); // A
    s_send_credit (t, 100);
    s_wait_credit (t, 100);
    zl_producer_job_t jobs[3] = {s_job ("x"), s_job ("y"), s_job ("z")};
    assert_int_equal (zl_producer_submit_batch (t->producer, jobs, 3, NULL), 3);
    zl_producer_flush (t->producer);
    uint64_t seqs[3];
    char keys[3][128];
    s_expect_specs (t, 3, 256, seqs, keys);
    zl_rejection_t r[3];
    for (int i = 0; i < 3; i++)
        r[i] = (zl_rejection_t){seqs[i], ZL_REJECT_UNAVAILABLE, "no database", 100};
    zl_msg_t rej = {.kind = ZL_MSG_REJECTED, .u.rejected = {3, r}};
    s_broker_send (t, &rej);

    zsock_t *a = t->router; // B from now on
    t->router = b;
    t->handle = zsock_resolve (b);
    s_expect_hello (t);
    assert_string_equal (zl_producer_endpoint (t->producer), b_ep);
    s_send_credit (t, 100);
    uint64_t again[3];
    char again_keys[3][128];
    s_expect_specs (t, 3, 256, again, again_keys);
    for (int i = 0; i < 3; i++) { // each under its key (retries come in no set order)
        int k = 0;
        while (k < 3 && seqs[k] != again[i])
            k++;
        assert_true (k < 3);
        assert_string_equal (again_keys[i], keys[k]);
        s_accept (t, again[i], 900 + again[i], false);
    }
    assert_int_equal (zl_producer_wait (t->producer, WAIT_MS), 0);
    assert_int_equal (t->n_results, 3);
    zl_producer_stats_t stats;
    zl_producer_stats (t->producer, &stats);
    assert_int_equal (stats.moves, 1);
    zsock_destroy (&a);
    s_fixture_destroy (&t);
}

//  A list with an empty entry or an endpoint ZeroMQ refuses makes no producer.
static void
test_bad_lists (void **state)
{
    const char *bad[] = {"", "tcp://127.0.0.1:1,", "tcp://127.0.0.1:1,,tcp://127.0.0.1:2",
                         "tcp://127.0.0.1:1,nonsense", NULL};
    for (int i = 0; bad[i]; i++) {
        zl_producer_opts_t opts;
        zl_producer_opts_defaults (&opts);
        opts.endpoint = bad[i];
        errno = 0;
        zl_producer_t *p = zl_producer_new (&opts);
        if (p)
            fail_msg ("a producer for '%s'", bad[i]);
        assert_true (errno != 0);
    }
}

//  (e) In nonblock mode a submit without credit returns EAGAIN and takes
//  nothing, whether the broker is silent or not there at all.
static void
test_nonblock_eagain (void **state)
{
    fixture_t *t = s_fixture_new (true, 0, 0);
    s_expect_hello (t);
    zl_producer_job_t job = s_job ("x");
    uint64_t seq = 42;
    assert_int_equal (zl_producer_submit (t->producer, &job, &seq), -1);
    assert_int_equal (errno, EAGAIN);
    assert_int_equal (seq, 42);
    assert_int_equal (zl_producer_outstanding (t->producer), 0);
    assert_int_equal (zl_producer_credit_available (t->producer), 0);
    assert_true (zl_producer_waiting_for_credit (t->producer));
    assert_non_null (strstr (zl_producer_last_error (t->producer), "no credit"));

    //  Invalid jobs are refused with EINVAL.
    zl_producer_job_t bad = s_job ("x");
    bad.lane = "";
    assert_int_equal (zl_producer_submit (t->producer, &bad, NULL), -1);
    assert_int_equal (errno, EINVAL);

    s_broker_close (t);
    int64_t end = zl_clock_mono_ms () + WAIT_MS;
    while (zl_producer_connected (t->producer) && zl_clock_mono_ms () < end)
        zl_producer_poll (t->producer, 50);
    assert_false (zl_producer_connected (t->producer));
    assert_int_equal (zl_producer_submit (t->producer, &job, NULL), -1);
    assert_int_equal (errno, EAGAIN);
    assert_non_null (strstr (zl_producer_last_error (t->producer), "broker unreachable at tcp://"));
    s_fixture_destroy (&t);
}

//  (f) Deadlines: a blocking submit with nobody listening fails with
//  ETIMEDOUT; a job the broker never answers, or that was sent to a broker
//  that then vanished, ends as TIMEOUT with a reason that says which.
static void
test_deadlines (void **state)
{
    //  A port nobody listens on: bind one, then close it.
    fixture_t *t = s_fixture_new (false, 0, 300);
    zl_producer_destroy (&t->producer);
    char endpoint[256];
    snprintf (endpoint, sizeof endpoint, "%s", t->endpoint);
    s_broker_close (t);

    zl_producer_opts_t opts;
    zl_producer_opts_defaults (&opts);
    opts.endpoint = endpoint;
    opts.deadline_ms = 300;
    zl_producer_t *lonely = zl_producer_new (&opts);
    assert_non_null (lonely);
    zl_producer_job_t job = s_job ("x");
    int64_t start = zl_clock_mono_ms ();
    assert_int_equal (zl_producer_submit (lonely, &job, NULL), -1);
    assert_int_equal (errno, ETIMEDOUT);
    int64_t took = zl_clock_mono_ms () - start;
    assert_true (took >= 300 && took < 5000);
    char expected[300];
    snprintf (expected, sizeof expected, "broker unreachable at %s for", endpoint);
    assert_non_null (strstr (zl_producer_last_error (lonely), expected));
    assert_int_equal (zl_producer_outstanding (lonely), 0);
    zl_producer_destroy (&lonely);
    s_fixture_destroy (&t);

    //  Sent, never answered.
    t = s_fixture_new (false, 0, 300);
    s_expect_hello (t);
    s_send_credit (t, 10);
    s_wait_credit (t, 10);
    assert_int_equal (zl_producer_submit (t->producer, &job, NULL), 0);
    zl_producer_flush (t->producer);
    s_expect_specs (t, 1, 256, NULL, NULL);
    assert_int_equal (zl_producer_wait (t->producer, WAIT_MS), 0);
    assert_int_equal (t->results[0].status, ZL_PRODUCER_TIMEOUT);
    assert_non_null (strstr (t->results[0].reason, "no reply from broker at tcp://127.0.0.1:"));

    //  Sent, then the broker vanished for good.
    assert_int_equal (zl_producer_submit (t->producer, &job, NULL), 0);
    zl_producer_flush (t->producer);
    s_expect_specs (t, 1, 256, NULL, NULL);
    s_broker_close (t);
    assert_int_equal (zl_producer_wait (t->producer, WAIT_MS), 0);
    assert_int_equal (t->n_results, 2);
    assert_int_equal (t->results[1].status, ZL_PRODUCER_TIMEOUT);
    assert_non_null (strstr (t->results[1].reason, "broker unreachable at tcp://127.0.0.1:"));
    s_fixture_destroy (&t);
}

//  A fake broker thread that grants credit one spec at a time and accepts
//  each spec; it counts specs sent beyond the credit it granted.
typedef struct {
    zsock_t *router;
    size_t expect; // specs to serve before returning
    size_t over_credit;
    size_t served;
} thread_broker_t;

static void *
s_thread_broker (void *arg)
{
    thread_broker_t *b = arg;
    void *handle = zsock_resolve (b->router);
    zl_codec_t *codec = zl_codec_new ();
    uint64_t limit = 0, received = 0;
    int64_t end = zl_clock_mono_ms () + WAIT_MS;
    while (b->served < b->expect && zl_clock_mono_ms () < end) {
        zmq_pollitem_t item = {handle, 0, ZMQ_POLLIN, 0};
        if (zmq_poll (&item, 1, 100) != 1)
            continue;
        zl_peer_t peer;
        int size = zmq_recv (handle, peer.data, sizeof peer.data, 0);
        if (size <= 0)
            break;
        peer.len = (uint8_t)size;
        zmq_msg_t frame;
        zmq_msg_init (&frame);
        zmq_msg_recv (&frame, handle, 0);
        zl_msg_t msg;
        zl_decode_rc_t rc =
            zl_codec_decode (codec, zmq_msg_data (&frame), zmq_msg_size (&frame), &msg);
        zmq_msg_close (&frame);
        if (rc != ZL_DECODE_OK)
            continue;
        zl_acceptance_t acc[256];
        size_t n = 0;
        if (msg.kind == ZL_MSG_HELLO) {
            limit = 1;
            received = 0;
        } else if (msg.kind == ZL_MSG_SUBMIT) {
            received += msg.u.submit.n;
            if (received > limit)
                b->over_credit++;
            for (size_t i = 0; i < msg.u.submit.n && n < 256; i++, n++)
                acc[n] = (zl_acceptance_t){msg.u.submit.jobs[i].seq,
                                           7000 + msg.u.submit.jobs[i].seq, false};
            zl_msg_t reply = {.kind = ZL_MSG_ACCEPTED, .u.accepted = {n, acc}};
            zl_wire_send_to (handle, &peer, codec, &reply);
            b->served += n;
            limit += n;
        } else
            continue;
        zl_msg_t credit = {.kind = ZL_MSG_CREDIT, .u.credit.limit = limit};
        zl_wire_send_to (handle, &peer, codec, &credit);
    }
    zl_codec_destroy (&codec);
    return NULL;
}

//  A blocking submit waits, pumping the socket, until credit arrives.
static void
test_blocking_submit_waits_for_credit (void **state)
{
    thread_broker_t b = {.expect = 20};
    b.router = zsock_new (ZMQ_ROUTER);
    assert_int_equal (zmq_bind (zsock_resolve (b.router), "tcp://127.0.0.1:*"), 0);
    char endpoint[256];
    size_t size = sizeof endpoint;
    zmq_getsockopt (zsock_resolve (b.router), ZMQ_LAST_ENDPOINT, endpoint, &size);
    pthread_t thread;
    assert_int_equal (pthread_create (&thread, NULL, s_thread_broker, &b), 0);

    fixture_t results = {0};
    zl_producer_opts_t opts;
    zl_producer_opts_defaults (&opts);
    opts.endpoint = endpoint;
    opts.on_result = s_on_result;
    opts.on_result_arg = &results;
    zl_producer_t *p = zl_producer_new (&opts);
    zl_producer_job_t job = s_job ("blocking");
    for (uint64_t i = 1; i <= 20; i++) {
        uint64_t seq;
        assert_int_equal (zl_producer_submit (p, &job, &seq), 0);
        assert_int_equal (seq, i);
    }
    assert_int_equal (zl_producer_wait (p, WAIT_MS), 0);
    pthread_join (thread, NULL);
    assert_int_equal (b.served, 20);
    assert_int_equal (b.over_credit, 0);
    assert_int_equal (results.n_results, 20);
    for (size_t i = 0; i < 20; i++) {
        assert_int_equal (results.results[i].status, ZL_PRODUCER_ACCEPTED);
        assert_int_equal (results.results[i].job_id, 7000 + results.results[i].seq);
    }
    zl_producer_destroy (&p);
    zsock_destroy (&b.router);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test (test_credit_limits_what_is_sent),
        cmocka_unit_test (test_accepted_reach_callback),
        cmocka_unit_test (test_rejections),
        cmocka_unit_test (test_restart_ride_through),
        cmocka_unit_test (test_list_moves_on),
        cmocka_unit_test (test_standby_naming_the_dead_leader),
        cmocka_unit_test (test_unavailable_one_broker),
        cmocka_unit_test (test_unavailable_list_moves_on),
        cmocka_unit_test (test_bad_lists),
        cmocka_unit_test (test_nonblock_eagain),
        cmocka_unit_test (test_deadlines),
        cmocka_unit_test (test_blocking_submit_waits_for_credit),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
