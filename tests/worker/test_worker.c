/*  test_worker: the worker library against a fake broker.
    The test plays the broker with its own ROUTER on tcp://127.0.0.1:* and
    the codec; the worker runs zl_worker_run in a thread of its own. Every
    wait is bounded and waits for an event: a message on the ROUTER
    (zmq_poll), a handler milestone (condvar with a deadline) or the worker
    thread's exit (an eventfd). */
#include "clock.h"
#include "codec.h"
#include "text.h"
#include "wire.h"
#include "zlane_worker.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <czmq.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define S_WAIT_MS 3000 // generous bound for anything that should happen "soon"

// ---------------------------------------------------------------- fake broker

typedef struct {
    zsock_t *router;
    char endpoint[128]; // the concrete tcp://127.0.0.1:PORT
    zl_codec_t *codec;
    zl_peer_t peer; // the worker connection that spoke last
    zl_msg_t msg;   // the last message received (borrowed from the codec)
    int heartbeats; // Heartbeats seen while waiting for something else
} s_broker_t;

static void
s_broker_bind (s_broker_t *b, const char *endpoint)
{
    b->router = zsock_new (ZMQ_ROUTER);
    assert_non_null (b->router);
    zsock_set_linger (b->router, 0);
    assert_true (zsock_bind (b->router, "%s", endpoint) >= 0);
    char *last = zsock_last_endpoint (b->router);
    snprintf (b->endpoint, sizeof b->endpoint, "%s", last);
    zstr_free (&last);
    if (!b->codec)
        b->codec = zl_codec_new ();
}

/*  Close the ROUTER and wait (bounded) until its listener is really gone,
    so the same port can be bound again at once. */
static void
s_broker_unbind (s_broker_t *b)
{
    char monitor_ep[64];
    snprintf (monitor_ep, sizeof monitor_ep, "inproc://test-monitor-%p", (void *)b);
    void *router = zsock_resolve (b->router);
    assert_int_equal (zmq_socket_monitor (router, monitor_ep, ZMQ_EVENT_CLOSED), 0);
    zsock_t *monitor = zsock_new_pair (monitor_ep); // connects (">" is the default)
    assert_non_null (monitor);
    assert_int_equal (zmq_unbind (router, b->endpoint), 0);
    zmq_pollitem_t it = {zsock_resolve (monitor), 0, ZMQ_POLLIN, 0};
    assert_int_equal (zmq_poll (&it, 1, S_WAIT_MS), 1); // ZMQ_EVENT_CLOSED
    zsock_destroy (&monitor);
    zmq_socket_monitor (router, NULL, 0);
    zsock_destroy (&b->router);
}

static void
s_broker_close (s_broker_t *b)
{
    zsock_destroy (&b->router);
    zl_codec_destroy (&b->codec);
}

/*  Wait up to `timeout_ms` for one message; returns its kind (in b->msg) or
    ZL_MSG_NONE on timeout. */
static zl_msg_kind_t
s_broker_recv (s_broker_t *b, int timeout_ms)
{
    void *sock = zsock_resolve (b->router);
    zmq_pollitem_t it = {sock, 0, ZMQ_POLLIN, 0};
    if (zmq_poll (&it, 1, timeout_ms < 0 ? 0 : timeout_ms) <= 0)
        return ZL_MSG_NONE;
    zmq_msg_t id, body;
    zmq_msg_init (&id);
    zmq_msg_init (&body);
    assert_true (zmq_msg_recv (&id, sock, 0) >= 0);
    assert_true (zmq_msg_more (&id));
    assert_true (zmq_msg_recv (&body, sock, 0) >= 0);
    assert_false (zmq_msg_more (&body)); // one Envelope per frame
    assert_true (zmq_msg_size (&id) <= ZL_PEER_ID_MAX);
    b->peer.len = (uint8_t)zmq_msg_size (&id);
    memcpy (b->peer.data, zmq_msg_data (&id), b->peer.len);
    zl_decode_rc_t rc =
        zl_codec_decode (b->codec, zmq_msg_data (&body), zmq_msg_size (&body), &b->msg);
    zmq_msg_close (&id);
    zmq_msg_close (&body);
    assert_int_equal (rc, ZL_DECODE_OK);
    return b->msg.kind;
}

/*  Wait up to `timeout_ms` for a message of `kind`, skipping others (and
    counting Heartbeats). Returns `kind`, or ZL_MSG_NONE on timeout. */
static zl_msg_kind_t
s_broker_expect (s_broker_t *b, zl_msg_kind_t kind, int timeout_ms)
{
    int64_t deadline = zl_clock_mono_ms () + timeout_ms;
    for (;;) {
        zl_msg_kind_t k = s_broker_recv (b, (int)(deadline - zl_clock_mono_ms ()));
        if (k == ZL_MSG_NONE || k == kind)
            return k;
        if (k == ZL_MSG_HEARTBEAT)
            b->heartbeats++;
    }
}

static void
s_broker_send (s_broker_t *b, const zl_msg_t *msg)
{
    assert_int_equal (zl_wire_send_to (zsock_resolve (b->router), &b->peer, b->codec, msg), 0);
}

static void
s_broker_settle (s_broker_t *b, uint64_t job_id, uint64_t lease)
{
    zl_lease_ref_t ref = {job_id, lease};
    zl_msg_t m = {.kind = ZL_MSG_SETTLED, .u.settled = {1, &ref}};
    s_broker_send (b, &m);
}

/*  Answer the Ack or Nack just received (b->msg) with one Settled naming
    every item, as the broker does: one message per batch, never one per
    item (a burst of those could overflow the ROUTER's high-water mark,
    which drops messages silently). */
static void
s_broker_settle_batch (s_broker_t *b)
{
    assert_true (b->msg.kind == ZL_MSG_ACK || b->msg.kind == ZL_MSG_NACK);
    bool ack = b->msg.kind == ZL_MSG_ACK;
    size_t n = ack ? b->msg.u.ack.n : b->msg.u.nack.n;
    zl_lease_ref_t *refs = calloc (n ? n : 1, sizeof *refs);
    for (size_t i = 0; i < n; i++)
        refs[i] =
            ack ? (zl_lease_ref_t){b->msg.u.ack.items[i].job_id, b->msg.u.ack.items[i].lease}
                : (zl_lease_ref_t){b->msg.u.nack.items[i].job_id, b->msg.u.nack.items[i].lease};
    zl_msg_t m = {.kind = ZL_MSG_SETTLED, .u.settled = {n, refs}};
    s_broker_send (b, &m);
    free (refs);
}

static void
s_broker_error (s_broker_t *b, zl_error_code_t code, uint64_t job_id, uint64_t lease)
{
    zl_msg_t m = {.kind = ZL_MSG_ERROR, .u.error = {code, "test", job_id, lease}};
    s_broker_send (b, &m);
}

/*  Send one Error listing `n` refused items, as the broker answers one
    Ack, Nack or Extend frame: code, job_id and lease repeat the first. */
static void
s_broker_error_items (s_broker_t *b, zl_item_error_t *items, size_t n)
{
    zl_msg_t m = {.kind = ZL_MSG_ERROR,
                  .u.error = {items[0].code, "test", items[0].job_id, items[0].lease, n, items}};
    s_broker_send (b, &m);
}

/*  A job with sensible defaults; the payload selects the test handler's
    behaviour. */
static zl_job_msg_t
s_job (uint64_t job_id, const char *payload)
{
    return (zl_job_msg_t){.job_id = job_id,
                          .lease = 0xABCD000000000000ULL | job_id,
                          .attempt = 1,
                          .tenant = "acme",
                          .lane = "emails",
                          .payload = {(const uint8_t *)payload, strlen (payload)},
                          .idempotency_key = "key",
                          .lease_ms = 30000,
                          .max_attempts = 5,
                          .enqueued_at_ms = 1000};
}

static void
s_broker_dispatch (s_broker_t *b, zl_job_msg_t *jobs, size_t n)
{
    zl_msg_t m = {.kind = ZL_MSG_DISPATCH, .u.dispatch = {n, jobs}};
    s_broker_send (b, &m);
}

// ---------------------------------------------------------------- test handler

/*  What the handler saw and does. The payload picks the behaviour:
    "ack", "transient", "permanent", "throttled", "wait-cancel" (block until
    cancelled or 2 s), "wait-go" (block until the test says go). */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    zl_worker_t *worker;
    int started, finished;
    bool go;
    // the last job seen
    zl_worker_job_t job;
    char tenant[64], lane[64], payload[64], idem[64], hkey[64], hval[64];
    // observations
    bool saw_cancel;
    zl_worker_cancel_t reason;
    uint64_t acked_at_start;
    uint64_t order[16];    // job ids in the order their handlers started (the first 16)
    pthread_t threads[16]; // the threads they ran on
} s_ctx_t;

static void
s_copy (char *dst, size_t size, const char *src)
{
    snprintf (dst, size, "%s", src ? src : "");
}

static void
s_handler (const zl_worker_job_t *job, zl_worker_result_t *result, void *arg)
{
    s_ctx_t *ctx = arg;
    char payload[64];
    size_t n = job->len < sizeof payload - 1 ? job->len : sizeof payload - 1;
    memcpy (payload, job->payload, n);
    payload[n] = '\0';

    pthread_mutex_lock (&ctx->lock);
    ctx->job = *job;
    s_copy (ctx->tenant, sizeof ctx->tenant, job->tenant);
    s_copy (ctx->lane, sizeof ctx->lane, job->lane);
    s_copy (ctx->payload, sizeof ctx->payload, payload);
    s_copy (ctx->idem, sizeof ctx->idem, job->idempotency_key);
    if (job->n_headers) {
        s_copy (ctx->hkey, sizeof ctx->hkey, job->headers[0].key);
        s_copy (ctx->hval, sizeof ctx->hval, job->headers[0].value);
    }
    zl_worker_stats_t stats;
    zl_worker_stats (ctx->worker, &stats);
    ctx->acked_at_start = stats.acked;
    if (ctx->started < 16) {
        ctx->order[ctx->started] = job->job_id;
        ctx->threads[ctx->started] = pthread_self ();
    }
    ctx->started++;
    pthread_cond_broadcast (&ctx->cond);
    pthread_mutex_unlock (&ctx->lock);

    if (strcmp (payload, "transient") == 0)
        zl_worker_result_set (result, ZL_WORKER_TRANSIENT, 0, "t-error %d", 1);
    else if (strcmp (payload, "permanent") == 0)
        zl_worker_result_set (result, ZL_WORKER_PERMANENT, 0, "p-error");
    else if (strcmp (payload, "throttled") == 0)
        zl_worker_result_set (result, ZL_WORKER_THROTTLED, 2500, "slow down");
    else if (strcmp (payload, "bad-utf8") == 0) // stray byte, good 'é', a surrogate
        zl_worker_result_set (result, ZL_WORKER_TRANSIENT, 0,
                              "a\xff"
                              "b\xc3\xa9"
                              "c\xed\xa0\x80");
    else if (strcmp (payload, "long-bad") == 0) { // every byte invalid, the text full
        memset (result->error, 0xFF, ZL_WORKER_ERROR_MAX - 1);
        result->error[ZL_WORKER_ERROR_MAX - 1] = '\0';
        result->outcome = ZL_WORKER_TRANSIENT;
    } else if (strcmp (payload, "wait-cancel") == 0) {
        bool cancelled = zl_worker_job_wait_cancelled (job, 2000);
        pthread_mutex_lock (&ctx->lock);
        ctx->saw_cancel = cancelled;
        ctx->reason = zl_worker_job_cancel_reason (job);
        pthread_mutex_unlock (&ctx->lock);
        zl_worker_result_set (result, ZL_WORKER_TRANSIENT, 0, "gave up: %s",
                              zl_worker_cancel_text (zl_worker_job_cancel_reason (job)));
    } else if (strcmp (payload, "wait-go") == 0) {
        struct timespec deadline;
        clock_gettime (CLOCK_MONOTONIC, &deadline);
        deadline.tv_sec += 5;
        pthread_mutex_lock (&ctx->lock);
        while (!ctx->go && pthread_cond_timedwait (&ctx->cond, &ctx->lock, &deadline) == 0)
            ;
        pthread_mutex_unlock (&ctx->lock);
    }

    pthread_mutex_lock (&ctx->lock);
    ctx->finished++;
    pthread_cond_broadcast (&ctx->cond);
    pthread_mutex_unlock (&ctx->lock);
}

/*  Wait up to `timeout_ms` until *counter >= `value`. Returns true if so. */
static bool
s_ctx_wait (s_ctx_t *ctx, const int *counter, int value, int timeout_ms)
{
    struct timespec deadline;
    clock_gettime (CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += timeout_ms / 1000;
    deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock (&ctx->lock);
    while (*counter < value && pthread_cond_timedwait (&ctx->cond, &ctx->lock, &deadline) == 0)
        ;
    bool ok = *counter >= value;
    pthread_mutex_unlock (&ctx->lock);
    return ok;
}

static void
s_ctx_go (s_ctx_t *ctx)
{
    pthread_mutex_lock (&ctx->lock);
    ctx->go = true;
    pthread_cond_broadcast (&ctx->cond);
    pthread_mutex_unlock (&ctx->lock);
}

// ---------------------------------------------------------------- fixture

typedef struct {
    s_broker_t broker;
    s_ctx_t ctx;
    zl_worker_opts_t opts;
    const char *lanes[2];
    zl_worker_t *worker;
    pthread_t thread;
    bool running;
    int exit_fd; // written by the worker thread when zl_worker_run returns
    int run_rc;
} s_fixture_t;

static void *
s_worker_thread (void *arg)
{
    s_fixture_t *f = arg;
    f->run_rc = zl_worker_run (f->worker);
    uint64_t one = 1;
    ssize_t rc = write (f->exit_fd, &one, sizeof one);
    (void)rc;
    return NULL;
}

static int
s_setup (void **state)
{
    s_fixture_t *f = calloc (1, sizeof *f);
    pthread_mutex_init (&f->ctx.lock, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init (&attr);
    pthread_condattr_setclock (&attr, CLOCK_MONOTONIC);
    pthread_cond_init (&f->ctx.cond, &attr);
    pthread_condattr_destroy (&attr);
    f->exit_fd = eventfd (0, EFD_CLOEXEC);
    s_broker_bind (&f->broker, "tcp://127.0.0.1:*");
    // Defaults for the tests: slow heartbeats (no reconnect unless a test
    // asks for one), a short drain.
    zl_worker_opts_defaults (&f->opts);
    f->lanes[0] = "emails";
    f->opts.endpoint = f->broker.endpoint;
    f->opts.name = "test-worker";
    f->opts.lanes = f->lanes;
    f->opts.n_lanes = 1;
    f->opts.heartbeat_ms = 1000;
    f->opts.liveness = 5;
    f->opts.drain_ms = 2000;
    f->opts.handler = s_handler;
    f->opts.handler_arg = &f->ctx;
    *state = f;
    return 0;
}

static void
s_start (s_fixture_t *f)
{
    f->worker = zl_worker_new (&f->opts);
    assert_non_null (f->worker);
    f->ctx.worker = f->worker;
    assert_int_equal (pthread_create (&f->thread, NULL, s_worker_thread, f), 0);
    f->running = true;
}

/*  Wait (at most S_WAIT_MS) until every handler thread of the worker waits
    for a job: a job received now starts on the thread that holds the loop
    (the worker starts them, and wakes them, on its own time). */
static void
s_wait_idle (s_fixture_t *f)
{
    int64_t deadline = zl_clock_mono_ms () + S_WAIT_MS;
    zl_worker_stats_t st;
    zl_worker_stats (f->worker, &st);
    while (st.threads_idle < f->opts.concurrency && zl_clock_mono_ms () < deadline) {
        poll (NULL, 0, 1); // (no event says it: the count is polled)
        zl_worker_stats (f->worker, &st);
    }
    assert_int_equal (st.threads_idle, f->opts.concurrency);
}

/*  Stop the worker (twice if `hurry`: running jobs are cancelled at once),
    answer its last Acks/Nacks with Settled, and wait for zl_worker_run to
    return. Returns its return code. */
static int
s_finish (s_fixture_t *f, bool hurry)
{
    if (!f->running)
        return f->run_rc;
    zl_worker_stop (f->worker);
    if (hurry)
        zl_worker_stop (f->worker);
    s_ctx_go (&f->ctx);
    int64_t deadline = zl_clock_mono_ms () + 10000;
    bool exited = false;
    while (!exited && zl_clock_mono_ms () < deadline) {
        zmq_pollitem_t items[2] = {{zsock_resolve (f->broker.router), 0, ZMQ_POLLIN, 0},
                                   {NULL, f->exit_fd, ZMQ_POLLIN, 0}};
        int n = zmq_poll (items, f->broker.router ? 2 : 1, (long)(deadline - zl_clock_mono_ms ()));
        if (n > 0 && (items[1].revents & ZMQ_POLLIN))
            exited = true;
        else if (n > 0 && (items[0].revents & ZMQ_POLLIN)) {
            zl_msg_kind_t k = s_broker_recv (&f->broker, 0);
            if (k == ZL_MSG_ACK || k == ZL_MSG_NACK)
                s_broker_settle_batch (&f->broker);
        }
    }
    if (!exited) {
        // Bounded wait on the exit eventfd alone (the ROUTER may be gone).
        struct pollfd p = {f->exit_fd, POLLIN, 0};
        exited = poll (&p, 1, 0) == 1;
    }
    assert_true (exited);
    pthread_join (f->thread, NULL);
    f->running = false;
    return f->run_rc;
}

static int
s_teardown (void **state)
{
    s_fixture_t *f = *state;
    if (f->running)
        s_finish (f, true);
    zl_worker_destroy (&f->worker);
    s_broker_close (&f->broker);
    close (f->exit_fd);
    pthread_cond_destroy (&f->ctx.cond);
    pthread_mutex_destroy (&f->ctx.lock);
    free (f);
    return 0;
}

// ---------------------------------------------------------------- tests

/*  (a) Ready first, with the worker's name, lanes, capacity and instance. */
static void
test_ready (void **state)
{
    s_fixture_t *f = *state;
    f->lanes[1] = "reports";
    f->opts.n_lanes = 2;
    f->opts.concurrency = 2;
    f->opts.prefetch = 3;
    s_start (f);
    assert_int_equal (s_broker_recv (&f->broker, S_WAIT_MS), ZL_MSG_READY);
    const zl_ready_t *r = &f->broker.msg.u.ready;
    assert_string_equal (r->name, "test-worker");
    assert_int_equal (r->n_lanes, 2);
    assert_string_equal (r->lanes[0], "emails");
    assert_string_equal (r->lanes[1], "reports");
    assert_int_equal (r->capacity, 5);
    assert_true (r->instance != 0);
    assert_int_equal (s_finish (f, false), 0);
}

/*  (b) A dispatched job reaches the handler intact and is acked with the
    same lease token; Settled clears it. */
static void
test_dispatch_ack (void **state)
{
    s_fixture_t *f = *state;
    s_start (f);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_READY, S_WAIT_MS), ZL_MSG_READY);

    zl_header_t header = {"content-type", "text/plain"};
    zl_job_msg_t job = s_job (42, "ack");
    job.lease = 0x1122334455667788ULL;
    job.attempt = 2;
    job.idempotency_key = "order-17";
    job.n_headers = 1;
    job.headers = &header;
    job.max_run_ms = 60000;
    job.enqueued_at_ms = 1234567;
    s_broker_dispatch (&f->broker, &job, 1);

    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_ACK, S_WAIT_MS), ZL_MSG_ACK);
    const zl_ack_t *ack = &f->broker.msg.u.ack;
    assert_int_equal (ack->n, 1);
    assert_int_equal (ack->items[0].job_id, 42);
    assert_true (ack->items[0].lease == 0x1122334455667788ULL);
    // the handler's run time, at least 1 us: 0 on the wire means "not measured"
    assert_true (ack->items[0].run_us >= 1 && ack->items[0].run_us < 10 * 1000 * 1000);
    s_broker_settle (&f->broker, 42, 0x1122334455667788ULL);

    assert_true (s_ctx_wait (&f->ctx, &f->ctx.finished, 1, S_WAIT_MS));
    assert_int_equal (f->ctx.job.job_id, 42);
    assert_true (f->ctx.job.lease == 0x1122334455667788ULL);
    assert_int_equal (f->ctx.job.attempt, 2);
    assert_string_equal (f->ctx.tenant, "acme");
    assert_string_equal (f->ctx.lane, "emails");
    assert_string_equal (f->ctx.payload, "ack");
    assert_string_equal (f->ctx.idem, "order-17");
    assert_int_equal (f->ctx.job.n_headers, 1);
    assert_string_equal (f->ctx.hkey, "content-type");
    assert_string_equal (f->ctx.hval, "text/plain");
    assert_int_equal (f->ctx.job.lease_ms, 30000);
    assert_int_equal (f->ctx.job.max_run_ms, 60000);
    assert_int_equal (f->ctx.job.max_attempts, 5);
    assert_int_equal (f->ctx.job.enqueued_at_ms, 1234567);

    assert_int_equal (s_finish (f, false), 0);
    zl_worker_stats_t stats;
    zl_worker_stats (f->worker, &stats);
    assert_int_equal (stats.received, 1);
    assert_int_equal (stats.acked, 1);
    assert_int_equal (stats.nacked, 0);
    assert_int_equal (stats.settled, 1);
}

/*  (c) Failures become Nacks with the handler's class, text and
    retry-after; the text is made valid UTF-8 (U+FFFD for what is not) and
    stays within ZL_WORKER_ERROR_MAX - 1 bytes. */
static void
test_nack_classes (void **state)
{
    s_fixture_t *f = *state;
    f->opts.concurrency = 4;
    s_start (f);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_READY, S_WAIT_MS), ZL_MSG_READY);
    zl_job_msg_t jobs[5] = {s_job (1, "transient"), s_job (2, "permanent"), s_job (3, "throttled"),
                            s_job (4, "bad-utf8"), s_job (5, "long-bad")};
    s_broker_dispatch (&f->broker, jobs, 5);

    bool seen[6] = {false};
    int n_seen = 0;
    int64_t deadline = zl_clock_mono_ms () + S_WAIT_MS;
    while (n_seen < 5) {
        zl_msg_kind_t k =
            s_broker_expect (&f->broker, ZL_MSG_NACK, (int)(deadline - zl_clock_mono_ms ()));
        assert_int_equal (k, ZL_MSG_NACK);
        const zl_nack_t *nack = &f->broker.msg.u.nack;
        for (size_t i = 0; i < nack->n; i++) {
            const zl_nack_item_t *it = &nack->items[i];
            assert_true (it->job_id >= 1 && it->job_id <= 5);
            assert_false (seen[it->job_id]);
            // Always valid text, never longer than a handler's.
            assert_true (zl_text_valid (it->error, strlen (it->error)));
            assert_true (strlen (it->error) <= ZL_WORKER_ERROR_MAX - 1);
            seen[it->job_id] = true;
            n_seen++;
            assert_true (it->lease == (0xABCD000000000000ULL | it->job_id));
            switch (it->job_id) {
            case 1:
                assert_int_equal (it->cls, ZL_FAIL_TRANSIENT);
                assert_string_equal (it->error, "t-error 1");
                assert_int_equal (it->retry_after_ms, 0);
                break;
            case 2:
                assert_int_equal (it->cls, ZL_FAIL_PERMANENT);
                assert_string_equal (it->error, "p-error");
                break;
            case 3:
                assert_int_equal (it->cls, ZL_FAIL_THROTTLED);
                assert_string_equal (it->error, "slow down");
                assert_int_equal (it->retry_after_ms, 2500);
                break;
            case 4: // each maximal bad subsequence is one U+FFFD
                assert_int_equal (it->cls, ZL_FAIL_TRANSIENT);
                assert_string_equal (
                    it->error, "a" ZL_TEXT_REPLACEMENT "b\xc3\xa9"
                               "c" ZL_TEXT_REPLACEMENT ZL_TEXT_REPLACEMENT ZL_TEXT_REPLACEMENT);
                break;
            case 5: // 1023 bad bytes: as many U+FFFD as fit in 1023 bytes
                assert_int_equal (strlen (it->error), (ZL_WORKER_ERROR_MAX - 1) / 3 * 3);
                assert_memory_equal (it->error, ZL_TEXT_REPLACEMENT ZL_TEXT_REPLACEMENT, 6);
                break;
            }
            s_broker_settle (&f->broker, it->job_id, it->lease);
        }
    }
    assert_int_equal (s_finish (f, false), 0);
    zl_worker_stats_t stats;
    zl_worker_stats (f->worker, &stats);
    assert_int_equal (stats.nacked, 5);
    assert_int_equal (stats.acked, 0);
}

/*  (d) A 400 ms lease is extended before it lapses; an Extend refused with
    STALE_LEASE cancels the job and the handler sees it. */
static void
test_extend_then_lease_lost (void **state)
{
    s_fixture_t *f = *state;
    s_start (f);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_READY, S_WAIT_MS), ZL_MSG_READY);
    zl_job_msg_t job = s_job (7, "wait-cancel");
    job.lease_ms = 400;
    int64_t sent = zl_clock_mono_ms ();
    s_broker_dispatch (&f->broker, &job, 1);

    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_EXTEND, S_WAIT_MS), ZL_MSG_EXTEND);
    int64_t elapsed = zl_clock_mono_ms () - sent;
    assert_true (elapsed < 400); // before the lease lapses
    const zl_extend_t *ext = &f->broker.msg.u.extend;
    assert_int_equal (ext->n, 1);
    assert_int_equal (ext->items[0].job_id, 7);
    assert_true (ext->items[0].lease == job.lease);
    assert_int_equal (ext->items[0].lease_ms, 400);

    s_broker_error (&f->broker, ZL_ERR_STALE_LEASE, 7, job.lease);
    assert_true (s_ctx_wait (&f->ctx, &f->ctx.finished, 1, 1500)); // well before its 2 s
    assert_true (f->ctx.saw_cancel);
    assert_int_equal (f->ctx.reason, ZL_WORKER_LEASE_LOST);

    // Its Nack still goes out; the broker fences it.
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_NACK, S_WAIT_MS), ZL_MSG_NACK);
    assert_int_equal (f->broker.msg.u.nack.items[0].job_id, 7);
    assert_string_equal (f->broker.msg.u.nack.items[0].error, "gave up: lease lost");
    s_broker_error (&f->broker, ZL_ERR_STALE_LEASE, 7, job.lease);
    assert_int_equal (s_finish (f, false), 0);
    zl_worker_stats_t stats;
    zl_worker_stats (f->worker, &stats);
    assert_true (stats.extends_sent >= 1);
    assert_int_equal (stats.lease_lost, 1);
    assert_int_equal (stats.refused, 1);
}

/*  (d'') A job received while a handler thread is idle starts on the thread
    that holds the loop (here the one that called zl_worker_run), and the
    loop goes on elsewhere while it runs: a second job starts and is acked
    on another thread, and the first job's short lease is extended, before
    the first job ends. */
static void
test_job_starts_on_the_loop_thread (void **state)
{
    s_fixture_t *f = *state;
    f->opts.concurrency = 2;
    s_start (f);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_READY, S_WAIT_MS), ZL_MSG_READY);
    s_wait_idle (f);
    zl_job_msg_t first = s_job (21, "wait-go");
    first.lease_ms = 400;
    s_broker_dispatch (&f->broker, &first, 1);
    assert_true (s_ctx_wait (&f->ctx, &f->ctx.started, 1, S_WAIT_MS));
    assert_true (pthread_equal (f->ctx.threads[0], f->thread));

    zl_job_msg_t second = s_job (22, "ack");
    s_broker_dispatch (&f->broker, &second, 1);
    assert_true (s_ctx_wait (&f->ctx, &f->ctx.finished, 1, S_WAIT_MS));
    assert_false (pthread_equal (f->ctx.threads[1], f->thread));
    bool acked = false, extended = false;
    int64_t deadline = zl_clock_mono_ms () + S_WAIT_MS;
    while (!(acked && extended) && zl_clock_mono_ms () < deadline) {
        zl_msg_kind_t k = s_broker_recv (&f->broker, (int)(deadline - zl_clock_mono_ms ()));
        if (k == ZL_MSG_ACK) {
            assert_int_equal (f->broker.msg.u.ack.items[0].job_id, 22);
            s_broker_settle_batch (&f->broker);
            acked = true;
        } else if (k == ZL_MSG_EXTEND) {
            assert_int_equal (f->broker.msg.u.extend.items[0].job_id, 21);
            extended = true;
        }
    }
    assert_true (acked && extended);
    pthread_mutex_lock (&f->ctx.lock);
    assert_int_equal (f->ctx.finished, 1); // the first still runs
    pthread_mutex_unlock (&f->ctx.lock);
    s_ctx_go (&f->ctx);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_ACK, S_WAIT_MS), ZL_MSG_ACK);
    assert_int_equal (f->broker.msg.u.ack.items[0].job_id, 21);
    s_broker_settle_batch (&f->broker);
    assert_int_equal (s_finish (f, false), 0);
}

/*  (d4) A result from a handler thread signals the loop (an eventfd) and
    the loop drains the signal as it takes the result, and reads it only
    then (a job its own thread ran and put back sent none: the read said
    EAGAIN after most jobs). A signal left undrained would keep the loop's
    poll returning at once: an idle worker that spins. */
static void
test_idle_after_a_handler_result (void **state)
{
    s_fixture_t *f = *state;
    f->opts.concurrency = 2;
    f->opts.heartbeat_ms = 10000;
    s_start (f);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_READY, S_WAIT_MS), ZL_MSG_READY);
    for (int round = 0; round < 3; round++) {
        s_wait_idle (f);
        pthread_mutex_lock (&f->ctx.lock);
        f->ctx.go = false;
        pthread_mutex_unlock (&f->ctx.lock);
        // the first holds the loop's thread, the second runs on a handler
        // thread and is signalled; the first ends after it
        zl_job_msg_t first = s_job (60 + 2 * (uint64_t)round, "wait-go");
        s_broker_dispatch (&f->broker, &first, 1);
        assert_true (s_ctx_wait (&f->ctx, &f->ctx.started, 1 + 2 * round, S_WAIT_MS));
        zl_job_msg_t second = s_job (61 + 2 * (uint64_t)round, "ack");
        s_broker_dispatch (&f->broker, &second, 1);
        assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_ACK, S_WAIT_MS), ZL_MSG_ACK);
        assert_int_equal (f->broker.msg.u.ack.items[0].job_id, second.job_id);
        s_broker_settle_batch (&f->broker);
        s_ctx_go (&f->ctx);
        assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_ACK, S_WAIT_MS), ZL_MSG_ACK);
        assert_int_equal (f->broker.msg.u.ack.items[0].job_id, first.job_id);
        s_broker_settle_batch (&f->broker);
    }
    s_wait_idle (f);
    // idle now: the process's CPU time over a quiet spell stays a small
    // part of it (a spinning loop takes all of it)
    struct timespec c0, c1;
    clock_gettime (CLOCK_PROCESS_CPUTIME_ID, &c0);
    int64_t t0 = zl_clock_mono_us ();
    assert_int_equal (s_broker_recv (&f->broker, 500), ZL_MSG_NONE); // nothing to say
    clock_gettime (CLOCK_PROCESS_CPUTIME_ID, &c1);
    int64_t wall_us = zl_clock_mono_us () - t0;
    int64_t cpu_us = (c1.tv_sec - c0.tv_sec) * 1000000 + (c1.tv_nsec - c0.tv_nsec) / 1000;
    assert_true (wall_us >= 400000);
    assert_true (cpu_us < wall_us / 4);
    assert_int_equal (s_finish (f, false), 0);
}

/*  (d3) A job on the loop's thread with nothing else coming: the loop's
    timer (set earlier than before for the job's short lease; it is left as
    it is only when set for no later) has an idle thread take the loop and
    extend the lease while the job runs, again after the first extension. */
static void
test_timer_while_the_loop_is_free (void **state)
{
    s_fixture_t *f = *state;
    f->opts.concurrency = 2;
    f->opts.heartbeat_ms = 10000; // no other timer is due for seconds
    s_start (f);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_READY, S_WAIT_MS), ZL_MSG_READY);
    // a short job first, on the loop's thread: the timer is set for the
    // next heartbeat, seconds away
    s_wait_idle (f);
    zl_job_msg_t quick = s_job (24, "ack");
    s_broker_dispatch (&f->broker, &quick, 1);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_ACK, S_WAIT_MS), ZL_MSG_ACK);
    s_broker_settle_batch (&f->broker);
    s_wait_idle (f);
    zl_job_msg_t job = s_job (25, "wait-go");
    job.lease_ms = 1000; // extended every 500 ms
    int64_t sent = zl_clock_mono_ms ();
    s_broker_dispatch (&f->broker, &job, 1);
    assert_true (s_ctx_wait (&f->ctx, &f->ctx.started, 2, S_WAIT_MS));
    assert_true (pthread_equal (f->ctx.threads[1], f->thread));
    for (int extends = 0; extends < 2;) {
        zl_msg_kind_t k = s_broker_recv (&f->broker, S_WAIT_MS);
        assert_int_not_equal (k, ZL_MSG_NONE); // something within S_WAIT_MS
        assert_int_not_equal (k, ZL_MSG_ACK);
        if (k == ZL_MSG_EXTEND) {
            assert_int_equal (f->broker.msg.u.extend.items[0].job_id, 25);
            extends++;
            // before the lease (as extended) ran out
            assert_true (zl_clock_mono_ms () - sent < (int64_t)job.lease_ms * extends);
        }
    }
    pthread_mutex_lock (&f->ctx.lock);
    assert_int_equal (f->ctx.finished, 1); // the second still runs
    pthread_mutex_unlock (&f->ctx.lock);
    s_ctx_go (&f->ctx);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_ACK, S_WAIT_MS), ZL_MSG_ACK);
    s_broker_settle_batch (&f->broker);
    assert_int_equal (s_finish (f, false), 0);
}

/*  (d) Short jobs one after another all run on the loop's thread: each
    time the loop is left free while the job runs, nothing needs it, and the
    thread takes it back (no other thread is woken for them). */
static void
test_short_jobs_stay_on_the_loop_thread (void **state)
{
    s_fixture_t *f = *state;
    f->opts.concurrency = 2;
    s_start (f);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_READY, S_WAIT_MS), ZL_MSG_READY);
    for (int i = 0; i < 5; i++) {
        s_wait_idle (f);
        zl_job_msg_t job = s_job (30 + (uint64_t)i, "ack");
        s_broker_dispatch (&f->broker, &job, 1);
        assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_ACK, S_WAIT_MS), ZL_MSG_ACK);
        assert_int_equal (f->broker.msg.u.ack.items[0].job_id, 30 + (uint64_t)i);
        s_broker_settle_batch (&f->broker);
    }
    assert_int_equal (f->ctx.started, 5);
    for (int i = 0; i < 5; i++)
        assert_true (pthread_equal (f->ctx.threads[i], f->thread));
    assert_int_equal (s_finish (f, false), 0);
}

/*  (d') With extend off, no Extend is sent while the lease runs out. */
static void
test_no_extend (void **state)
{
    s_fixture_t *f = *state;
    f->opts.extend = false;
    s_start (f);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_READY, S_WAIT_MS), ZL_MSG_READY);
    zl_job_msg_t job = s_job (8, "wait-cancel");
    job.lease_ms = 200;
    s_broker_dispatch (&f->broker, &job, 1);
    assert_true (s_ctx_wait (&f->ctx, &f->ctx.started, 1, S_WAIT_MS));
    // Three half-lives: with extension on, at least two Extends would come.
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_EXTEND, 600), ZL_MSG_NONE);
    assert_int_equal (s_finish (f, true), 0);
    zl_worker_stats_t stats;
    zl_worker_stats (f->worker, &stats);
    assert_int_equal (stats.extends_sent, 0);
}

/*  A job past its max_run_ms is cancelled locally. */
static void
test_max_run (void **state)
{
    s_fixture_t *f = *state;
    s_start (f);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_READY, S_WAIT_MS), ZL_MSG_READY);
    zl_job_msg_t job = s_job (9, "wait-cancel");
    job.max_run_ms = 200;
    s_broker_dispatch (&f->broker, &job, 1);
    assert_true (s_ctx_wait (&f->ctx, &f->ctx.finished, 1, 1500));
    assert_true (f->ctx.saw_cancel);
    assert_int_equal (f->ctx.reason, ZL_WORKER_MAX_RUN);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_NACK, S_WAIT_MS), ZL_MSG_NACK);
    assert_string_equal (f->broker.msg.u.nack.items[0].error, "gave up: max run time exceeded");
    s_broker_settle (&f->broker, 9, job.lease);
    assert_int_equal (s_finish (f, false), 0);
}

/*  (e) Heartbeats flow; when the broker goes silent (and comes back on the
    same port) the worker reconnects and sends Ready again, with the same
    instance. */
static void
test_heartbeat_reconnect (void **state)
{
    s_fixture_t *f = *state;
    f->opts.heartbeat_ms = 100;
    f->opts.liveness = 3;
    s_start (f);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_READY, S_WAIT_MS), ZL_MSG_READY);
    uint64_t instance = f->broker.msg.u.ready.instance;
    assert_true (instance != 0);
    // A live broker: answer each Heartbeat. No reconnect may happen.
    for (int i = 0; i < 4; i++) {
        assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_HEARTBEAT, S_WAIT_MS),
                          ZL_MSG_HEARTBEAT);
        zl_msg_t hb = {.kind = ZL_MSG_HEARTBEAT};
        s_broker_send (&f->broker, &hb);
    }
    zl_worker_stats_t stats;
    zl_worker_stats (f->worker, &stats);
    assert_int_equal (stats.reconnects, 0);

    // The broker "restarts": gone, then back on the same port, silent.
    char endpoint[128];
    snprintf (endpoint, sizeof endpoint, "%s", f->broker.endpoint);
    s_broker_unbind (&f->broker);
    s_broker_bind (&f->broker, endpoint);
    assert_string_equal (f->broker.endpoint, endpoint);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_READY, S_WAIT_MS), ZL_MSG_READY);
    assert_string_equal (f->broker.msg.u.ready.name, "test-worker");
    assert_true (f->broker.msg.u.ready.instance == instance); // the same worker, reconnected
    zl_worker_stats (f->worker, &stats);
    assert_true (stats.reconnects >= 1);
    assert_int_equal (s_finish (f, false), 0);
}

/*  (f) An Ack that was never Settled is resent after a reconnect, with the
    same lease token; a refusal of it is counted. The Ready after the
    reconnect lists every lease the worker knows of: the job still running
    and the unsettled Ack (the broker makes its other leases ready again). */
static void
test_resend_after_reconnect (void **state)
{
    s_fixture_t *f = *state;
    f->opts.heartbeat_ms = 100;
    f->opts.liveness = 3;
    f->opts.concurrency = 2;
    s_start (f);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_READY, S_WAIT_MS), ZL_MSG_READY);
    assert_true (f->broker.msg.u.ready.held_listed);
    assert_int_equal (f->broker.msg.u.ready.n_held, 0);
    zl_job_msg_t job = s_job (11, "ack"), running = s_job (12, "wait-go");
    s_broker_dispatch (&f->broker, &running, 1);
    assert_true (s_ctx_wait (&f->ctx, &f->ctx.started, 1, S_WAIT_MS));
    s_broker_dispatch (&f->broker, &job, 1);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_ACK, S_WAIT_MS), ZL_MSG_ACK);
    assert_int_equal (f->broker.msg.u.ack.items[0].job_id, 11);
    // No Settled: the broker goes away and comes back.
    char endpoint[128];
    snprintf (endpoint, sizeof endpoint, "%s", f->broker.endpoint);
    s_broker_unbind (&f->broker);
    s_broker_bind (&f->broker, endpoint);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_READY, S_WAIT_MS), ZL_MSG_READY);
    const zl_ready_t *ready = &f->broker.msg.u.ready;
    assert_true (ready->held_listed);
    assert_int_equal (ready->n_held, 2);
    bool listed[2] = {false, false};
    for (size_t i = 0; i < ready->n_held; i++) {
        const zl_job_msg_t *j = ready->held[i].job_id == 11 ? &job : &running;
        assert_true (ready->held[i].lease == j->lease);
        listed[j == &running] = true;
    }
    assert_true (listed[0] && listed[1]);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_ACK, S_WAIT_MS), ZL_MSG_ACK);
    const zl_ack_t *ack = &f->broker.msg.u.ack;
    assert_int_equal (ack->n, 1);
    assert_int_equal (ack->items[0].job_id, 11);
    assert_true (ack->items[0].lease == job.lease);
    // The restarted broker no longer knows that lease.
    s_broker_error (&f->broker, ZL_ERR_STALE_LEASE, 11, job.lease);
    // the running job ends and settles on the new connection
    s_ctx_go (&f->ctx);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_ACK, S_WAIT_MS), ZL_MSG_ACK);
    assert_int_equal (f->broker.msg.u.ack.items[0].job_id, 12);
    s_broker_settle (&f->broker, 12, running.lease);
    assert_int_equal (s_finish (f, false), 0);
    zl_worker_stats_t stats;
    zl_worker_stats (f->worker, &stats);
    assert_int_equal (stats.acked, 2); // counted once, however often sent
    assert_int_equal (stats.refused, 1);
    assert_int_equal (stats.settled, 1);
    assert_true (stats.reconnects >= 1);
}

/*  (g) ack_early: the Ack leaves before the handler runs, and the
    handler's outcome is not reported. */
static void
test_ack_early (void **state)
{
    s_fixture_t *f = *state;
    f->opts.ack_early = true;
    s_start (f);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_READY, S_WAIT_MS), ZL_MSG_READY);
    zl_job_msg_t job = s_job (21, "wait-go");
    s_broker_dispatch (&f->broker, &job, 1);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_ACK, S_WAIT_MS), ZL_MSG_ACK);
    assert_int_equal (f->broker.msg.u.ack.items[0].job_id, 21);
    assert_true (s_ctx_wait (&f->ctx, &f->ctx.started, 1, S_WAIT_MS));
    assert_int_equal (f->ctx.acked_at_start, 1); // acked before the handler started
    assert_int_equal (f->ctx.finished, 0);       // and it is still running
    s_broker_settle (&f->broker, 21, job.lease);
    s_ctx_go (&f->ctx);
    assert_true (s_ctx_wait (&f->ctx, &f->ctx.finished, 1, S_WAIT_MS));
    assert_int_equal (s_finish (f, false), 0);
    zl_worker_stats_t stats;
    zl_worker_stats (f->worker, &stats);
    assert_int_equal (stats.acked, 1);
    assert_int_equal (stats.nacked, 0);
    assert_int_equal (stats.extends_sent, 0);
}

/*  Error NOT_READY makes the worker send Ready again. */
static void
test_not_ready (void **state)
{
    s_fixture_t *f = *state;
    s_start (f);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_READY, S_WAIT_MS), ZL_MSG_READY);
    s_broker_error (&f->broker, ZL_ERR_NOT_READY, 0, 0);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_READY, S_WAIT_MS), ZL_MSG_READY);
    assert_int_equal (f->broker.msg.u.ready.capacity, 1);
    assert_int_equal (s_finish (f, false), 0);
}

/*  Error UNAVAILABLE (the broker cannot reach its database; it did nothing):
    the worker leaves and comes back (the only broker it has) on a new
    connection, says Ready again with the same instance, and resends the Ack
    that was never Settled, with its lease token. */
static void
test_unavailable_resends (void **state)
{
    s_fixture_t *f = *state;
    s_start (f);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_READY, S_WAIT_MS), ZL_MSG_READY);
    uint64_t instance = f->broker.msg.u.ready.instance;
    zl_peer_t first = f->broker.peer;
    zl_job_msg_t job = s_job (31, "ack");
    s_broker_dispatch (&f->broker, &job, 1);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_ACK, S_WAIT_MS), ZL_MSG_ACK);
    s_broker_error (&f->broker, ZL_ERR_UNAVAILABLE, 0, 0);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_READY, S_WAIT_MS), ZL_MSG_READY);
    assert_true (f->broker.msg.u.ready.instance == instance);
    assert_false (f->broker.peer.len == first.len &&
                  !memcmp (f->broker.peer.data, first.data, first.len)); // a new connection
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_ACK, S_WAIT_MS), ZL_MSG_ACK);
    assert_int_equal (f->broker.msg.u.ack.n, 1);
    assert_int_equal (f->broker.msg.u.ack.items[0].job_id, 31);
    assert_true (f->broker.msg.u.ack.items[0].lease == job.lease);
    s_broker_settle (&f->broker, 31, job.lease);
    assert_int_equal (s_finish (f, false), 0);
    zl_worker_stats_t stats;
    zl_worker_stats (f->worker, &stats);
    assert_int_equal (stats.acked, 1);
    assert_int_equal (stats.settled, 1);
    assert_int_equal (stats.reconnects, 1);
}

/*  A stop hands back the unstarted backlog, lets the running job finish,
    waits for its Settled and returns 0. */
static void
test_stop_drains (void **state)
{
    s_fixture_t *f = *state;
    f->opts.prefetch = 1;
    s_start (f);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_READY, S_WAIT_MS), ZL_MSG_READY);
    zl_job_msg_t jobs[2] = {s_job (31, "wait-go"), s_job (32, "ack")};
    s_broker_dispatch (&f->broker, jobs, 2);
    assert_true (s_ctx_wait (&f->ctx, &f->ctx.started, 1, S_WAIT_MS));
    zl_worker_stop (f->worker);

    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_NACK, S_WAIT_MS), ZL_MSG_NACK);
    const zl_nack_item_t *it = &f->broker.msg.u.nack.items[0];
    assert_int_equal (it->job_id, 32);
    assert_int_equal (it->cls, ZL_FAIL_THROTTLED);
    assert_string_equal (it->error, "worker shutting down");
    s_broker_settle (&f->broker, 32, jobs[1].lease);

    s_ctx_go (&f->ctx);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_ACK, S_WAIT_MS), ZL_MSG_ACK);
    assert_int_equal (f->broker.msg.u.ack.items[0].job_id, 31);
    s_broker_settle (&f->broker, 31, jobs[0].lease);
    struct pollfd p = {f->exit_fd, POLLIN, 0};
    assert_int_equal (poll (&p, 1, S_WAIT_MS), 1); // zl_worker_run returned
    assert_int_equal (s_finish (f, false), 0);
    assert_int_equal (f->ctx.started, 1); // job 32 never ran
    zl_worker_stats_t stats;
    zl_worker_stats (f->worker, &stats);
    assert_int_equal (stats.settled, 2);
}

static zl_worker_t *s_signalled; // the worker s_on_usr1 stops

static void
s_on_usr1 (int sig)
{
    (void)sig;
    zl_worker_stop (s_signalled);
}

/*  A signal that comes while the loop is free (its thread runs a job, with
    signals blocked) is taken by an idle thread, which takes the loop over
    and stops the worker at once: the Ready with capacity 0 comes while the
    job still runs, long before the next heartbeat (10 s), when the signal
    would have waited for a thread to unblock it. This thread blocks it, so
    only the worker's threads can take it. */
static void
test_signal_while_the_loop_is_free (void **state)
{
    s_fixture_t *f = *state;
    f->opts.concurrency = 2;
    f->opts.heartbeat_ms = 10000;
    struct sigaction sa = {.sa_handler = s_on_usr1}, old;
    sigemptyset (&sa.sa_mask);
    assert_int_equal (sigaction (SIGUSR1, &sa, &old), 0);
    sigset_t usr1, mask;
    sigemptyset (&usr1);
    sigaddset (&usr1, SIGUSR1);
    pthread_sigmask (SIG_UNBLOCK, &usr1, &mask); // the worker's thread inherits it
    s_start (f);
    s_signalled = f->worker;
    pthread_sigmask (SIG_BLOCK, &usr1, NULL);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_READY, S_WAIT_MS), ZL_MSG_READY);
    s_wait_idle (f);
    zl_job_msg_t job = s_job (41, "wait-go");
    s_broker_dispatch (&f->broker, &job, 1);
    assert_true (s_ctx_wait (&f->ctx, &f->ctx.started, 1, S_WAIT_MS));
    assert_true (pthread_equal (f->ctx.threads[0], f->thread)); // the loop is free
    assert_int_equal (kill (getpid (), SIGUSR1), 0);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_READY, 2000), ZL_MSG_READY);
    assert_int_equal (f->broker.msg.u.ready.capacity, 0);
    pthread_mutex_lock (&f->ctx.lock);
    assert_int_equal (f->ctx.finished, 0); // before the job ended
    pthread_mutex_unlock (&f->ctx.lock);
    s_ctx_go (&f->ctx);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_ACK, S_WAIT_MS), ZL_MSG_ACK);
    s_broker_settle (&f->broker, 41, job.lease);
    assert_int_equal (s_finish (f, false), 0);
    pthread_sigmask (SIG_SETMASK, &mask, NULL);
    sigaction (SIGUSR1, &old, NULL);
}

/*  Wait up to `timeout_ms` for the next message that is not a Heartbeat
    (those are counted); returns its kind or ZL_MSG_NONE on timeout. */
static zl_msg_kind_t
s_broker_next (s_broker_t *b, int timeout_ms)
{
    int64_t deadline = zl_clock_mono_ms () + timeout_ms;
    for (;;) {
        zl_msg_kind_t k = s_broker_recv (b, (int)(deadline - zl_clock_mono_ms ()));
        if (k != ZL_MSG_HEARTBEAT)
            return k;
        b->heartbeats++;
    }
}

/*  A stop first tells the broker to send nothing new: Ready with capacity 0
    comes before the backlog's hand-back Nacks, a job dispatched after it is
    handed back unstarted, and a Ready the broker asks for again while
    draining still says 0. */
static void
test_stop_sends_ready_zero (void **state)
{
    s_fixture_t *f = *state;
    f->opts.prefetch = 1;
    s_start (f);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_READY, S_WAIT_MS), ZL_MSG_READY);
    assert_int_equal (f->broker.msg.u.ready.capacity, 2);
    zl_job_msg_t jobs[3] = {s_job (51, "wait-go"), s_job (52, "ack"), s_job (53, "ack")};
    s_broker_dispatch (&f->broker, jobs, 2);
    assert_true (s_ctx_wait (&f->ctx, &f->ctx.started, 1, S_WAIT_MS));
    zl_worker_stop (f->worker);

    // Ready{capacity 0} is the first thing after the stop.
    assert_int_equal (s_broker_next (&f->broker, S_WAIT_MS), ZL_MSG_READY);
    const zl_ready_t *r = &f->broker.msg.u.ready;
    assert_int_equal (r->capacity, 0);
    assert_string_equal (r->name, "test-worker");
    assert_int_equal (r->n_lanes, 1);
    assert_string_equal (r->lanes[0], "emails");
    assert_int_equal (s_broker_next (&f->broker, S_WAIT_MS), ZL_MSG_NACK);
    assert_int_equal (f->broker.msg.u.nack.n, 1);
    assert_int_equal (f->broker.msg.u.nack.items[0].job_id, 52);
    assert_int_equal (f->broker.msg.u.nack.items[0].cls, ZL_FAIL_THROTTLED);
    s_broker_settle (&f->broker, 52, jobs[1].lease);

    // A Dispatch that crossed the Ready on the wire is handed back too.
    s_broker_dispatch (&f->broker, &jobs[2], 1);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_NACK, S_WAIT_MS), ZL_MSG_NACK);
    assert_int_equal (f->broker.msg.u.nack.items[0].job_id, 53);
    assert_string_equal (f->broker.msg.u.nack.items[0].error, "worker shutting down");
    s_broker_settle (&f->broker, 53, jobs[2].lease);

    // The broker forgot us (it restarted): the new Ready still drains.
    s_broker_error (&f->broker, ZL_ERR_NOT_READY, 0, 0);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_READY, S_WAIT_MS), ZL_MSG_READY);
    assert_int_equal (f->broker.msg.u.ready.capacity, 0);

    s_ctx_go (&f->ctx);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_ACK, S_WAIT_MS), ZL_MSG_ACK);
    assert_int_equal (f->broker.msg.u.ack.items[0].job_id, 51);
    s_broker_settle (&f->broker, 51, jobs[0].lease);
    struct pollfd p = {f->exit_fd, POLLIN, 0};
    assert_int_equal (poll (&p, 1, S_WAIT_MS), 1); // zl_worker_run returned
    assert_int_equal (s_finish (f, false), 0);
    assert_int_equal (f->ctx.started, 1); // 52 and 53 never ran
    zl_worker_stats_t stats;
    zl_worker_stats (f->worker, &stats);
    assert_int_equal (stats.settled, 3);
}

/*  Jobs waiting for a handler thread: their leases are extended while they
    wait, one whose lease is lost never runs and is handed back (TRANSIENT,
    "lease lost"), and the others start in receipt order. */
static void
test_queued_jobs (void **state)
{
    s_fixture_t *f = *state;
    f->opts.prefetch = 3; // concurrency 1: one runs, three wait
    s_start (f);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_READY, S_WAIT_MS), ZL_MSG_READY);
    zl_job_msg_t jobs[4] = {s_job (71, "wait-go"), s_job (72, "ack"), s_job (73, "ack"),
                            s_job (74, "ack")};
    jobs[1].lease_ms = 200;
    s_broker_dispatch (&f->broker, jobs, 4);
    assert_true (s_ctx_wait (&f->ctx, &f->ctx.started, 1, S_WAIT_MS));

    // 72 waits behind 71 and its lease is extended all the same.
    bool extended = false;
    int64_t deadline = zl_clock_mono_ms () + S_WAIT_MS;
    while (!extended) {
        assert_int_equal (
            s_broker_expect (&f->broker, ZL_MSG_EXTEND, (int)(deadline - zl_clock_mono_ms ())),
            ZL_MSG_EXTEND);
        const zl_extend_t *ext = &f->broker.msg.u.extend;
        for (size_t i = 0; i < ext->n; i++)
            extended |= ext->items[i].job_id == 72 && ext->items[i].lease == jobs[1].lease;
    }

    // 73 loses its lease while it waits. The Ready that NOT_READY asks for
    // shows the worker has read the Error before it (one connection keeps
    // the order), so 73 is cancelled before any handler can take it.
    s_broker_error (&f->broker, ZL_ERR_STALE_LEASE, 73, jobs[2].lease);
    s_broker_error (&f->broker, ZL_ERR_NOT_READY, 0, 0);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_READY, S_WAIT_MS), ZL_MSG_READY);
    assert_int_equal (f->ctx.started, 1);
    s_ctx_go (&f->ctx);

    int acks = 0, nacks = 0;
    deadline = zl_clock_mono_ms () + S_WAIT_MS;
    while (acks < 3 || nacks < 1) {
        zl_msg_kind_t k = s_broker_next (&f->broker, (int)(deadline - zl_clock_mono_ms ()));
        if (k == ZL_MSG_ACK) {
            for (size_t i = 0; i < f->broker.msg.u.ack.n; i++)
                assert_int_not_equal (f->broker.msg.u.ack.items[i].job_id, 73);
            acks += (int)f->broker.msg.u.ack.n;
            s_broker_settle_batch (&f->broker);
        } else if (k == ZL_MSG_NACK) {
            const zl_nack_t *nack = &f->broker.msg.u.nack;
            assert_int_equal (nack->n, 1);
            assert_int_equal (nack->items[0].job_id, 73);
            assert_true (nack->items[0].lease == jobs[2].lease);
            assert_int_equal (nack->items[0].cls, ZL_FAIL_TRANSIENT);
            assert_string_equal (nack->items[0].error, "lease lost");
            assert_int_equal (nack->items[0].run_us, 0);
            nacks++;
            s_broker_settle_batch (&f->broker);
        } else
            assert_true (k == ZL_MSG_EXTEND); // nothing else may come
    }
    assert_int_equal (acks, 3);
    assert_int_equal (s_finish (f, false), 0);
    assert_int_equal (f->ctx.started, 3); // 73 never ran
    assert_int_equal (f->ctx.order[0], 71);
    assert_int_equal (f->ctx.order[1], 72);
    assert_int_equal (f->ctx.order[2], 74);
    zl_worker_stats_t stats;
    zl_worker_stats (f->worker, &stats);
    assert_int_equal (stats.lease_lost, 1);
    assert_int_equal (stats.acked, 3);
    assert_int_equal (stats.nacked, 1);
    assert_int_equal (stats.settled, 4);
}

/*  Two attempts of one job held at once (the earlier one cancelled and
    still finishing): every answer from the broker reaches the attempt whose
    lease it names, and nothing is left pending. A job dispatched twice
    with the same lease runs once. */
static void
test_same_job_two_leases (void **state)
{
    s_fixture_t *f = *state;
    f->opts.concurrency = 2;
    s_start (f);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_READY, S_WAIT_MS), ZL_MSG_READY);
    zl_job_msg_t jobs[3] = {s_job (60, "wait-cancel"), s_job (60, "wait-go"),
                            s_job (60, "wait-go")};
    jobs[1].lease = jobs[0].lease + 1;
    jobs[1].attempt = 2;
    jobs[2] = jobs[1]; // the same lease again: ignored
    s_broker_dispatch (&f->broker, jobs, 3);
    assert_true (s_ctx_wait (&f->ctx, &f->ctx.started, 2, S_WAIT_MS));

    // The first lease is lost: only its attempt is cancelled, and its Nack
    // is refused.
    s_broker_error (&f->broker, ZL_ERR_STALE_LEASE, 60, jobs[0].lease);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_NACK, S_WAIT_MS), ZL_MSG_NACK);
    assert_int_equal (f->broker.msg.u.nack.n, 1);
    assert_true (f->broker.msg.u.nack.items[0].lease == jobs[0].lease);
    assert_string_equal (f->broker.msg.u.nack.items[0].error, "gave up: lease lost");
    assert_int_equal (f->ctx.finished, 1);
    s_ctx_go (&f->ctx);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_ACK, S_WAIT_MS), ZL_MSG_ACK);
    assert_int_equal (f->broker.msg.u.ack.n, 1);
    assert_true (f->broker.msg.u.ack.items[0].lease == jobs[1].lease);
    // Settle the second attempt first, then refuse the first one's Nack.
    s_broker_settle (&f->broker, 60, jobs[1].lease);
    s_broker_settle (&f->broker, 60, jobs[1].lease); // a duplicate: nothing left to clear
    s_broker_error (&f->broker, ZL_ERR_STALE_LEASE, 60, jobs[0].lease);

    // Nothing is pending, so a stop returns at once (no linger for Settled).
    zl_worker_stop (f->worker);
    struct pollfd p = {f->exit_fd, POLLIN, 0};
    assert_int_equal (poll (&p, 1, S_WAIT_MS), 1);
    assert_int_equal (s_finish (f, false), 0);
    assert_int_equal (f->ctx.started, 2);
    zl_worker_stats_t stats;
    zl_worker_stats (f->worker, &stats);
    assert_int_equal (stats.received, 3);
    assert_int_equal (stats.acked, 1);
    assert_int_equal (stats.nacked, 1);
    assert_int_equal (stats.settled, 1);
    assert_int_equal (stats.refused, 1);
    assert_int_equal (stats.lease_lost, 1);
}

/*  Several leases extended at their own pace from one timer heap; a job
    whose lease is lost, or that has no lease to extend, is never in an
    Extend. */
static void
test_extend_many (void **state)
{
    s_fixture_t *f = *state;
    f->opts.concurrency = 3;
    s_start (f);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_READY, S_WAIT_MS), ZL_MSG_READY);
    zl_job_msg_t jobs[3] = {s_job (81, "wait-cancel"), s_job (82, "wait-cancel"),
                            s_job (83, "wait-cancel")};
    jobs[0].lease_ms = 200;
    jobs[1].lease_ms = 300;
    jobs[2].lease_ms = 1; // too short to extend
    s_broker_dispatch (&f->broker, jobs, 3);

    int seen[3] = {0};
    int64_t deadline = zl_clock_mono_ms () + S_WAIT_MS;
    while (seen[0] < 2 || seen[1] < 2) {
        assert_int_equal (
            s_broker_expect (&f->broker, ZL_MSG_EXTEND, (int)(deadline - zl_clock_mono_ms ())),
            ZL_MSG_EXTEND);
        const zl_extend_t *ext = &f->broker.msg.u.extend;
        for (size_t i = 0; i < ext->n; i++) {
            assert_true (ext->items[i].job_id == 81 || ext->items[i].job_id == 82);
            int k = (int)(ext->items[i].job_id - 81);
            assert_true (ext->items[i].lease == jobs[k].lease);
            assert_int_equal (ext->items[i].lease_ms, jobs[k].lease_ms);
            seen[k]++;
        }
    }

    // 81's lease is lost: once its Nack is out, no Extend names it again.
    s_broker_error (&f->broker, ZL_ERR_STALE_LEASE, 81, jobs[0].lease);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_NACK, S_WAIT_MS), ZL_MSG_NACK);
    assert_int_equal (f->broker.msg.u.nack.items[0].job_id, 81);
    s_broker_settle (&f->broker, 81, jobs[0].lease);
    int more = 0;
    while (more < 2) {
        assert_int_equal (
            s_broker_expect (&f->broker, ZL_MSG_EXTEND, (int)(deadline - zl_clock_mono_ms ())),
            ZL_MSG_EXTEND);
        const zl_extend_t *ext = &f->broker.msg.u.extend;
        for (size_t i = 0; i < ext->n; i++)
            assert_int_equal (ext->items[i].job_id, 82);
        more++;
    }
    assert_int_equal (s_finish (f, true), 0);
    zl_worker_stats_t stats;
    zl_worker_stats (f->worker, &stats);
    assert_int_equal (stats.lease_lost, 1);
}

/*  A large prefetch: every job runs once and is acked once, in order per
    handler, and Settled clears them all. */
static void
test_many_jobs (void **state)
{
    s_fixture_t *f = *state;
    enum { N = 2000 };
    f->opts.concurrency = 3;
    f->opts.prefetch = N;
    s_start (f);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_READY, S_WAIT_MS), ZL_MSG_READY);
    static zl_job_msg_t jobs[N];
    for (size_t i = 0; i < N; i++) {
        jobs[i] = s_job (1000 + i, "ack");
        jobs[i].max_run_ms = 60000; // every job carries a timer
    }
    for (size_t i = 0; i < N; i += 250)
        s_broker_dispatch (&f->broker, jobs + i, 250);

    static bool acked[N];
    size_t n_acked = 0;
    int64_t deadline = zl_clock_mono_ms () + 10000;
    while (n_acked < N) {
        assert_int_equal (
            s_broker_expect (&f->broker, ZL_MSG_ACK, (int)(deadline - zl_clock_mono_ms ())),
            ZL_MSG_ACK);
        const zl_ack_t *ack = &f->broker.msg.u.ack;
        for (size_t i = 0; i < ack->n; i++) {
            uint64_t k = ack->items[i].job_id - 1000;
            assert_true (k < N);
            assert_false (acked[k]);
            assert_true (ack->items[i].lease == jobs[k].lease);
            acked[k] = true;
            n_acked++;
        }
        s_broker_settle_batch (&f->broker);
    }
    zl_worker_stop (f->worker);
    struct pollfd p = {f->exit_fd, POLLIN, 0};
    assert_int_equal (poll (&p, 1, S_WAIT_MS), 1); // nothing left pending
    assert_int_equal (s_finish (f, false), 0);
    assert_int_equal (f->ctx.started, N);
    zl_worker_stats_t stats;
    zl_worker_stats (f->worker, &stats);
    assert_int_equal (stats.received, N);
    assert_int_equal (stats.acked, N);
    assert_int_equal (stats.settled, N);
}

/*  Each worker has its own instance: a second worker on the same broker
    announces a different one. */
static void
test_instance_per_worker (void **state)
{
    s_fixture_t *f = *state;
    s_start (f);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_READY, S_WAIT_MS), ZL_MSG_READY);
    uint64_t first = f->broker.msg.u.ready.instance;
    zl_worker_opts_t o = f->opts;
    o.name = "other-worker";
    zl_worker_t *other = zl_worker_new (&o);
    assert_non_null (other);
    s_fixture_t g = *f; // the same broker, another worker thread
    g.worker = other;
    g.exit_fd = eventfd (0, EFD_CLOEXEC);
    assert_int_equal (pthread_create (&g.thread, NULL, s_worker_thread, &g), 0);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_READY, S_WAIT_MS), ZL_MSG_READY);
    assert_string_equal (f->broker.msg.u.ready.name, "other-worker");
    uint64_t second = f->broker.msg.u.ready.instance;
    assert_true (second != 0 && second != first);
    zl_worker_stop (other);
    struct pollfd p = {g.exit_fd, POLLIN, 0};
    assert_int_equal (poll (&p, 1, S_WAIT_MS), 1);
    pthread_join (g.thread, NULL);
    close (g.exit_fd);
    zl_worker_destroy (&other);
    assert_int_equal (s_finish (f, false), 0);
}

/*  One Error refusing several items, each with its own code: pending
    settlements named STALE_LEASE or NOT_HOLDER are dropped as refused,
    running jobs named UNKNOWN_JOB or NOT_HOLDER are cancelled (lease lost),
    and an item for a lease the worker does not hold changes nothing. An
    Error with no items still names its one item: NOT_HOLDER cancels like
    STALE_LEASE. */
static void
test_error_items (void **state)
{
    s_fixture_t *f = *state;
    f->opts.concurrency = 5;
    s_start (f);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_READY, S_WAIT_MS), ZL_MSG_READY);
    zl_job_msg_t jobs[5] = {s_job (101, "ack"), s_job (102, "ack"), s_job (103, "wait-cancel"),
                            s_job (104, "wait-cancel"), s_job (105, "wait-cancel")};
    s_broker_dispatch (&f->broker, jobs, 5);
    int acks = 0;
    int64_t deadline = zl_clock_mono_ms () + S_WAIT_MS;
    while (acks < 2) {
        assert_int_equal (
            s_broker_expect (&f->broker, ZL_MSG_ACK, (int)(deadline - zl_clock_mono_ms ())),
            ZL_MSG_ACK);
        acks += (int)f->broker.msg.u.ack.n; // 101 and 102, not settled
    }
    assert_true (s_ctx_wait (&f->ctx, &f->ctx.started, 5, S_WAIT_MS));

    zl_item_error_t items[5] = {{101, jobs[0].lease, ZL_ERR_STALE_LEASE},
                                {102, jobs[1].lease, ZL_ERR_NOT_HOLDER},
                                {103, jobs[2].lease, ZL_ERR_UNKNOWN_JOB},
                                {104, jobs[3].lease, ZL_ERR_NOT_HOLDER},
                                {105, jobs[4].lease + 1, ZL_ERR_STALE_LEASE}}; // not ours
    s_broker_error_items (&f->broker, items, 5);
    int nacks = 0;
    bool nacked[6] = {false};
    deadline = zl_clock_mono_ms () + S_WAIT_MS;
    while (nacks < 2) {
        assert_int_equal (
            s_broker_expect (&f->broker, ZL_MSG_NACK, (int)(deadline - zl_clock_mono_ms ())),
            ZL_MSG_NACK);
        for (size_t i = 0; i < f->broker.msg.u.nack.n; i++) {
            const zl_nack_item_t *it = &f->broker.msg.u.nack.items[i];
            assert_true (it->job_id == 103 || it->job_id == 104);
            assert_string_equal (it->error, "gave up: lease lost");
            nacked[it->job_id - 100] = true;
            nacks++;
        }
        s_broker_settle_batch (&f->broker);
    }
    assert_true (nacked[3] && nacked[4]);
    assert_int_equal (f->ctx.finished, 4); // 105 still runs

    // No items: the Error's own job and lease; NOT_HOLDER fences it.
    s_broker_error (&f->broker, ZL_ERR_NOT_HOLDER, 105, jobs[4].lease);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_NACK, S_WAIT_MS), ZL_MSG_NACK);
    assert_int_equal (f->broker.msg.u.nack.items[0].job_id, 105);
    assert_string_equal (f->broker.msg.u.nack.items[0].error, "gave up: lease lost");
    s_broker_settle_batch (&f->broker);

    // Nothing is left pending (101 and 102 were dropped): a stop returns at
    // once, without lingering for their Settled.
    zl_worker_stop (f->worker);
    struct pollfd p = {f->exit_fd, POLLIN, 0};
    assert_int_equal (poll (&p, 1, S_WAIT_MS), 1);
    assert_int_equal (s_finish (f, false), 0);
    zl_worker_stats_t stats;
    zl_worker_stats (f->worker, &stats);
    assert_int_equal (stats.refused, 2);
    assert_int_equal (stats.lease_lost, 3);
    assert_int_equal (stats.settled, 3);
}

/*  An Extend answered MAX_RUN (the lease now ends at the job's max run
    deadline, and goes no further) stops that job's extensions but does not
    cancel it: it runs until its own max run time, then it is cancelled
    (max run). The same whether the Error names the job itself (91) or
    lists it among its items (92). A job that came without a max run time
    (93) is cancelled one lease after the answer, when the lease extended
    last runs out. */
static void
test_max_run_stops_extending (void **state)
{
    s_fixture_t *f = *state;
    f->opts.concurrency = 3;
    s_start (f);
    assert_int_equal (s_broker_expect (&f->broker, ZL_MSG_READY, S_WAIT_MS), ZL_MSG_READY);
    enum { LEASE_MS = 600, MAX_RUN_MS = 1500 };
    zl_job_msg_t jobs[3] = {s_job (91, "wait-cancel"), s_job (92, "wait-cancel"),
                            s_job (93, "wait-cancel")};
    for (int i = 0; i < 3; i++) {
        jobs[i].lease_ms = LEASE_MS;
        jobs[i].max_run_ms = i < 2 ? MAX_RUN_MS : 0;
    }
    int64_t sent = zl_clock_mono_ms ();
    s_broker_dispatch (&f->broker, jobs, 3);

    // The first Extend of each is answered MAX_RUN.
    int64_t told[3] = {0, 0, 0};
    int64_t deadline = sent + S_WAIT_MS;
    while (!told[0] || !told[1] || !told[2]) {
        assert_int_equal (
            s_broker_expect (&f->broker, ZL_MSG_EXTEND, (int)(deadline - zl_clock_mono_ms ())),
            ZL_MSG_EXTEND);
        const zl_extend_t *ext = &f->broker.msg.u.extend;
        zl_extend_item_t got[4];
        size_t n = ext->n < 4 ? ext->n : 4;
        memcpy (got, ext->items, n * sizeof *got);
        for (size_t i = 0; i < n; i++) {
            int k = (int)(got[i].job_id - 91);
            assert_true (k >= 0 && k <= 2);
            assert_false (told[k]); // no Extend after MAX_RUN
            told[k] = zl_clock_mono_ms ();
            if (k == 1) {
                zl_item_error_t item = {92, jobs[1].lease, ZL_ERR_MAX_RUN};
                s_broker_error_items (&f->broker, &item, 1);
            } else
                s_broker_error (&f->broker, ZL_ERR_MAX_RUN, got[i].job_id, jobs[k].lease);
        }
    }

    // None is cancelled now: the Nacks come at the max run times, with no
    // Extend in between.
    int nacks = 0;
    deadline = sent + MAX_RUN_MS + S_WAIT_MS;
    while (nacks < 3) {
        zl_msg_kind_t k = s_broker_next (&f->broker, (int)(deadline - zl_clock_mono_ms ()));
        if (k == ZL_MSG_EXTEND)
            fail_msg ("job %" PRIu64 " extended after MAX_RUN",
                      f->broker.msg.u.extend.items[0].job_id);
        assert_int_equal (k, ZL_MSG_NACK);
        int64_t now = zl_clock_mono_ms ();
        for (size_t i = 0; i < f->broker.msg.u.nack.n; i++) {
            const zl_nack_item_t *it = &f->broker.msg.u.nack.items[i];
            assert_true (it->job_id >= 91 && it->job_id <= 93);
            int64_t early = it->job_id == 93 ? told[2] + LEASE_MS : sent + MAX_RUN_MS;
            if (now < early)
                fail_msg ("job %" PRIu64 " cancelled %" PRId64 " ms too early", it->job_id,
                          early - now);
            assert_string_equal (it->error, "gave up: max run time exceeded");
        }
        nacks += (int)f->broker.msg.u.nack.n;
        s_broker_settle_batch (&f->broker);
    }
    assert_int_equal (s_finish (f, false), 0);
    zl_worker_stats_t stats;
    zl_worker_stats (f->worker, &stats);
    assert_int_equal (stats.lease_lost, 0);
    assert_int_equal (stats.extends_sent, 3);
}

/*  Invalid options are refused. */
static void
test_bad_opts (void **state)
{
    s_fixture_t *f = *state;
    zl_worker_opts_t o = f->opts;
    o.handler = NULL;
    assert_null (zl_worker_new (&o));
    o = f->opts;
    o.n_lanes = 0;
    assert_null (zl_worker_new (&o));
    o = f->opts;
    o.concurrency = 0;
    assert_null (zl_worker_new (&o));
}

int
main (void)
{
    zsys_init ();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown (test_ready, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_unavailable_resends, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_dispatch_ack, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_nack_classes, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_extend_then_lease_lost, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_no_extend, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_job_starts_on_the_loop_thread, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_timer_while_the_loop_is_free, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_idle_after_a_handler_result, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_short_jobs_stay_on_the_loop_thread, s_setup,
                                         s_teardown),
        cmocka_unit_test_setup_teardown (test_signal_while_the_loop_is_free, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_max_run, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_heartbeat_reconnect, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_resend_after_reconnect, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_ack_early, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_not_ready, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_stop_drains, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_stop_sends_ready_zero, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_queued_jobs, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_same_job_two_leases, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_extend_many, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_many_jobs, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_instance_per_worker, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_error_items, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_max_run_stops_extending, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_bad_opts, s_setup, s_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
