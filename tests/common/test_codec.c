/*  test_codec: every message kind survives encode -> decode unchanged, and
    no input (garbage, truncation, bit flips, wrong version, no body) can make
    the decoder crash or read outside the frame. Frames are decoded from
    exact-size heap copies so that AddressSanitizer sees any over-read. */
#include "arena.h"
#include "codec.h"
#include "rng.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
    zl_codec_t *codec;
    zl_arena_t *arena; // memory for the messages a test builds
    zl_rng_t rng;
} fixture_t;

static int
s_setup (void **state)
{
    fixture_t *f = calloc (1, sizeof *f);
    f->codec = zl_codec_new ();
    f->arena = zl_arena_new (64 * 1024);
    zl_rng_seed (&f->rng, 0x5eed);
    *state = f;
    return 0;
}

static int
s_teardown (void **state)
{
    fixture_t *f = *state;
    zl_codec_destroy (&f->codec);
    assert_null (f->codec);
    zl_arena_destroy (&f->arena);
    assert_null (f->arena);
    free (f);
    return 0;
}

// ---------------------------------------------------------------- builders
static const char *
s_str (fixture_t *f, const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start (ap, fmt);
    int n = vsnprintf (buf, sizeof buf, fmt, ap);
    va_end (ap);
    return zl_arena_strndup (f->arena, buf, (size_t)n);
}

//  Binary payload of `len` bytes; every third byte is NUL.
static zl_bytes_t
s_payload (fixture_t *f, size_t len)
{
    uint8_t *p = zl_arena_alloc (f->arena, len);
    for (size_t k = 0; k < len; k++)
        p[k] = k % 3 == 0 ? 0 : (uint8_t)zl_rng_next (&f->rng);
    return (zl_bytes_t){len ? p : NULL, len};
}

static zl_header_t *
s_headers (fixture_t *f, size_t n, size_t seed)
{
    zl_header_t *h = zl_arena_calloc (f->arena, n ? n : 1, sizeof *h);
    for (size_t k = 0; k < n; k++) {
        h[k].key = s_str (f, "x-header-%zu", k);
        h[k].value = k == 1 ? "" : s_str (f, "value %zu/%zu \xc3\xa9t\xc3\xa9", seed, k);
    }
    return h;
}

static zl_job_spec_t
s_spec (fixture_t *f, size_t i)
{
    zl_job_spec_t s = {.seq = i,
                       .tenant = s_str (f, "tenant-%zu", i % 7),
                       .lane = s_str (f, "lane-%zu", i % 3),
                       .payload = s_payload (f, (i * 37) % 301),
                       .idempotency_key = i % 2 ? s_str (f, "idem-%zu", i) : "",
                       .delay_ms = (uint32_t)(i * 10),
                       .max_attempts = (uint32_t)(i % 5),
                       .lease_ms = (uint32_t)(1000 + i),
                       .max_run_ms = (uint32_t)(i % 4 ? 0 : 60000),
                       .n_headers = i % 4};
    s.headers = s_headers (f, s.n_headers, i);
    if (i == 0) { // the largest values each field can carry
        s.seq = UINT64_MAX;
        s.delay_ms = s.max_attempts = s.lease_ms = s.max_run_ms = UINT32_MAX;
    }
    return s;
}

static zl_job_msg_t
s_job (fixture_t *f, size_t i)
{
    zl_job_msg_t j = {.job_id = UINT64_MAX - i,
                      .lease = ((uint64_t)i << 32) | (i % 9 + 1),
                      .attempt = (uint32_t)(i % 9 + 1),
                      .tenant = s_str (f, "t%zu", i % 11),
                      .lane = i % 5 ? s_str (f, "lane-%zu", i % 5) : "",
                      .payload = s_payload (f, (i * 53) % 401),
                      .n_headers = i % 3,
                      .idempotency_key = s_str (f, "job-%zu", i),
                      .lease_ms = (uint32_t)(30000 + i),
                      .max_run_ms = i % 2 ? UINT32_MAX : 0,
                      .max_attempts = (uint32_t)(i % 9 + 1),
                      .enqueued_at_ms = 1700000000000ULL + i};
    j.headers = s_headers (f, j.n_headers, i);
    return j;
}

static zl_dead_letter_t
s_dead_letter (fixture_t *f, size_t i, size_t n_attempts, size_t payload_len)
{
    zl_dead_letter_t d = {.job_id = i ? 1000 + i : UINT64_MAX,
                          .tenant = s_str (f, "tenant-%zu", i),
                          .lane = s_str (f, "lane-%zu", i),
                          .payload = s_payload (f, payload_len),
                          .idempotency_key = i % 2 ? s_str (f, "key-%zu", i) : "",
                          .enqueued_at_ms = 1700000000000ULL + i,
                          .dead_at_ms = i ? 1700000099000ULL + i : UINT64_MAX,
                          .error = s_str (f, "exit status 1: boom %zu", i),
                          .n_attempts = n_attempts,
                          .n_headers = 2};
    d.attempts = zl_arena_calloc (f->arena, n_attempts ? n_attempts : 1, sizeof *d.attempts);
    for (size_t k = 0; k < n_attempts; k++)
        d.attempts[k] = (zl_attempt_t){.attempt = (uint32_t)k + 1,
                                       .worker = s_str (f, "worker-%zu", k),
                                       .started_at_ms = 1700000000000ULL + k * 1000,
                                       .ended_at_ms = 1700000000500ULL + k * 1000,
                                       .outcome = (zl_outcome_t)(k % ZL_OUTCOME_COUNT),
                                       .error = k % 2 ? "" : s_str (f, "error %zu", k)};
    d.headers = s_headers (f, d.n_headers, i);
    return d;
}

static zl_group_stats_t
s_group (size_t i, const char *lane, const char *tenant)
{
    uint64_t b = 100 * (uint64_t)i;
    return (zl_group_stats_t){.lane = lane,
                              .tenant = tenant,
                              .ready = b + 1,
                              .delayed = b + 2,
                              .in_flight = b + 3,
                              .dlq = b + 4,
                              .oldest_ready_age_ms = b + 5,
                              .oldest_dlq_age_ms = b + 6,
                              .submitted = i == 0 ? UINT64_MAX : b + 7,
                              .acked = b + 8,
                              .nacked_transient = b + 9,
                              .nacked_throttled = b + 10,
                              .nacked_permanent = b + 11,
                              .lease_expired = b + 12,
                              .dead_lettered = b + 13,
                              .run_us = b + 14,
                              .throttled = b + 15,
                              .capped = b + 16,
                              .paused = i % 2 == 1};
}

// ---------------------------------------------------------------- checkers
static void
s_check_str (const char *want, const char *got)
{
    assert_non_null (got);
    assert_string_equal (want ? want : "", got);
}

static void
s_check_bytes (zl_bytes_t want, zl_bytes_t got)
{
    assert_int_equal (want.len, got.len);
    if (want.len) {
        assert_non_null (got.data);
        assert_memory_equal (want.data, got.data, want.len);
    }
}

static void
s_check_headers (size_t n_want, const zl_header_t *want, size_t n_got, const zl_header_t *got)
{
    assert_int_equal (n_want, n_got);
    for (size_t k = 0; k < n_want; k++) {
        s_check_str (want[k].key, got[k].key);
        s_check_str (want[k].value, got[k].value);
    }
}

static void
s_check_spec (const zl_job_spec_t *w, const zl_job_spec_t *g)
{
    assert_int_equal (w->seq, g->seq);
    s_check_str (w->tenant, g->tenant);
    s_check_str (w->lane, g->lane);
    s_check_bytes (w->payload, g->payload);
    s_check_str (w->idempotency_key, g->idempotency_key);
    assert_int_equal (w->delay_ms, g->delay_ms);
    assert_int_equal (w->max_attempts, g->max_attempts);
    assert_int_equal (w->lease_ms, g->lease_ms);
    assert_int_equal (w->max_run_ms, g->max_run_ms);
    s_check_headers (w->n_headers, w->headers, g->n_headers, g->headers);
}

static void
s_check_job (const zl_job_msg_t *w, const zl_job_msg_t *g)
{
    assert_int_equal (w->job_id, g->job_id);
    assert_int_equal (w->lease, g->lease);
    assert_int_equal (w->attempt, g->attempt);
    s_check_str (w->tenant, g->tenant);
    s_check_str (w->lane, g->lane);
    s_check_bytes (w->payload, g->payload);
    s_check_headers (w->n_headers, w->headers, g->n_headers, g->headers);
    s_check_str (w->idempotency_key, g->idempotency_key);
    assert_int_equal (w->lease_ms, g->lease_ms);
    assert_int_equal (w->max_run_ms, g->max_run_ms);
    assert_int_equal (w->max_attempts, g->max_attempts);
    assert_int_equal (w->enqueued_at_ms, g->enqueued_at_ms);
}

static void
s_check_dead_letter (const zl_dead_letter_t *w, const zl_dead_letter_t *g)
{
    assert_int_equal (w->job_id, g->job_id);
    s_check_str (w->tenant, g->tenant);
    s_check_str (w->lane, g->lane);
    s_check_bytes (w->payload, g->payload);
    s_check_str (w->idempotency_key, g->idempotency_key);
    assert_int_equal (w->enqueued_at_ms, g->enqueued_at_ms);
    assert_int_equal (w->dead_at_ms, g->dead_at_ms);
    s_check_str (w->error, g->error);
    assert_int_equal (w->n_attempts, g->n_attempts);
    for (size_t k = 0; k < w->n_attempts; k++) {
        const zl_attempt_t *a = &w->attempts[k], *b = &g->attempts[k];
        assert_int_equal (a->attempt, b->attempt);
        s_check_str (a->worker, b->worker);
        assert_int_equal (a->started_at_ms, b->started_at_ms);
        assert_int_equal (a->ended_at_ms, b->ended_at_ms);
        assert_int_equal (a->outcome, b->outcome);
        s_check_str (a->error, b->error);
    }
    s_check_headers (w->n_headers, w->headers, g->n_headers, g->headers);
}

static void
s_check_group (const zl_group_stats_t *w, const zl_group_stats_t *g)
{
    s_check_str (w->lane, g->lane);
    s_check_str (w->tenant, g->tenant);
    assert_int_equal (w->ready, g->ready);
    assert_int_equal (w->delayed, g->delayed);
    assert_int_equal (w->in_flight, g->in_flight);
    assert_int_equal (w->dlq, g->dlq);
    assert_int_equal (w->oldest_ready_age_ms, g->oldest_ready_age_ms);
    assert_int_equal (w->oldest_dlq_age_ms, g->oldest_dlq_age_ms);
    assert_int_equal (w->submitted, g->submitted);
    assert_int_equal (w->acked, g->acked);
    assert_int_equal (w->nacked_transient, g->nacked_transient);
    assert_int_equal (w->nacked_throttled, g->nacked_throttled);
    assert_int_equal (w->nacked_permanent, g->nacked_permanent);
    assert_int_equal (w->lease_expired, g->lease_expired);
    assert_int_equal (w->dead_lettered, g->dead_lettered);
    assert_int_equal (w->run_us, g->run_us);
    assert_int_equal (w->throttled, g->throttled);
    assert_int_equal (w->capped, g->capped);
    assert_int_equal (w->paused, g->paused);
}

static void
s_check_groups (size_t n_want, const zl_group_stats_t *w, size_t n_got, const zl_group_stats_t *g)
{
    assert_int_equal (n_want, n_got);
    for (size_t i = 0; i < n_want; i++)
        s_check_group (&w[i], &g[i]);
}

static void
s_check_stats (const zl_stats_t *w, const zl_stats_t *g)
{
    assert_int_equal (w->uptime_ms, g->uptime_ms);
    assert_int_equal (w->n_counters, g->n_counters);
    for (size_t i = 0; i < w->n_counters; i++) {
        s_check_str (w->counters[i].name, g->counters[i].name);
        assert_int_equal (w->counters[i].value, g->counters[i].value);
    }
    s_check_groups (w->n_lanes, w->lanes, g->n_lanes, g->lanes);
    s_check_groups (w->n_tenants, w->tenants, g->n_tenants, g->tenants);
    s_check_groups (w->n_groups, w->groups, g->n_groups, g->groups);
    assert_int_equal (w->n_latencies, g->n_latencies);
    for (size_t i = 0; i < w->n_latencies; i++) {
        const zl_latency_t *a = &w->latencies[i], *b = &g->latencies[i];
        s_check_str (a->name, b->name);
        assert_int_equal (a->count, b->count);
        assert_int_equal (a->p50_us, b->p50_us);
        assert_int_equal (a->p90_us, b->p90_us);
        assert_int_equal (a->p99_us, b->p99_us);
        assert_int_equal (a->max_us, b->max_us);
    }
    assert_int_equal (w->workers, g->workers);
    assert_int_equal (w->producers, g->producers);
    s_check_str (w->store_backend, g->store_backend);
    s_check_str (w->role, g->role);
    assert_int_equal (w->epoch, g->epoch);
    assert_int_equal (w->store_reachable, g->store_reachable);
    assert_int_equal (w->takeovers, g->takeovers);
    assert_int_equal (w->fenced, g->fenced);
    s_check_str (w->leader, g->leader);
}

static void
s_check_filter (const zl_dlq_filter_t *w, const zl_dlq_filter_t *g)
{
    s_check_str (w->lane, g->lane);
    s_check_str (w->tenant, g->tenant);
    assert_int_equal (w->n_ids, g->n_ids);
    for (size_t k = 0; k < w->n_ids; k++)
        assert_int_equal (w->ids[k], g->ids[k]);
    assert_int_equal (w->all, g->all);
}

//  Decode `frame` from an exact-size heap copy that is scribbled over and
//  freed before returning, so the decoded message must not alias the frame.
static zl_decode_rc_t
s_decode_copy (zl_codec_t *codec, const void *frame, size_t size, zl_msg_t *out)
{
    uint8_t *copy = malloc (size ? size : 1);
    if (size)
        memcpy (copy, frame, size);
    zl_decode_rc_t rc = zl_codec_decode (codec, size ? copy : NULL, size, out);
    memset (copy, 0xa5, size);
    free (copy);
    return rc;
}

//  Encode `in`, decode it into `out`; asserts both steps succeed and the
//  kind survives. Returns the frame size.
static size_t
s_roundtrip (fixture_t *f, const zl_msg_t *in, zl_msg_t *out)
{
    size_t size = 0;
    const void *frame = zl_codec_encode (f->codec, in, &size);
    assert_non_null (frame);
    assert_true (size > 0);
    assert_int_equal (s_decode_copy (f->codec, frame, size, out), ZL_DECODE_OK);
    assert_int_equal (out->kind, in->kind);
    return size;
}

// ---------------------------------------------------------------- batches
/*  Every batch field survives the wire: a Submit that opens, joins and
    closes; the Accepted that names the batch and answers the close; a
    callback's Job with the summary; batch show and its reply; the event. */
static void
test_batch_fields (void **state)
{
    fixture_t *f = *state;
    zl_job_spec_t specs[3] = {
        {.seq = 1,
         .tenant = "t",
         .lane = "cb",
         .open_batch = true,
         .open_batch_id = "nightly",
         .batch_close = true},
        {.seq = 2,
         .tenant = "t",
         .lane = "a",
         .batch = "nightly",
         .has_priority = true,
         .deadline_ms = UINT64_MAX - 1,
         .max_age_ms = 60000,
         .priority = 0},
        {.seq = 3, .tenant = "t", .lane = "a", .open_batch = true, .batch_no_callback = true}};
    const char *closes[] = {"nightly", "other"};
    zl_msg_t in = {.kind = ZL_MSG_SUBMIT}, out;
    in.u.submit = (zl_submit_t){3, specs, 2, closes};
    s_roundtrip (f, &in, &out);
    assert_int_equal (out.u.submit.n, 3);
    assert_true (out.u.submit.jobs[0].open_batch);
    assert_string_equal (out.u.submit.jobs[0].open_batch_id, "nightly");
    assert_true (out.u.submit.jobs[0].batch_close);
    assert_false (out.u.submit.jobs[0].batch_no_callback);
    assert_false (out.u.submit.jobs[1].open_batch);
    assert_string_equal (out.u.submit.jobs[1].batch, "nightly");
    // a priority given, 0 included, is told apart from none
    assert_true (out.u.submit.jobs[1].has_priority);
    assert_int_equal (out.u.submit.jobs[1].priority, 0);
    assert_false (out.u.submit.jobs[0].has_priority);
    assert_int_equal (out.u.submit.jobs[1].deadline_ms, UINT64_MAX - 1);
    assert_int_equal (out.u.submit.jobs[1].max_age_ms, 60000);
    assert_true (out.u.submit.jobs[2].open_batch);
    assert_string_equal (out.u.submit.jobs[2].open_batch_id, "");
    assert_true (out.u.submit.jobs[2].batch_no_callback);
    assert_int_equal (out.u.submit.n_close, 2);
    assert_string_equal (out.u.submit.close_batches[1], "other");

    zl_acceptance_t acc[] = {{1, 10, false, "nightly"}, {2, 11, false, ""}};
    zl_batch_closed_t closed[] = {{"nightly", true, ""}, {"other", false, "no such batch here"}};
    in = (zl_msg_t){.kind = ZL_MSG_ACCEPTED};
    in.u.accepted = (zl_accepted_t){2, acc, 2, closed};
    s_roundtrip (f, &in, &out);
    assert_string_equal (out.u.accepted.jobs[0].batch_id, "nightly");
    assert_string_equal (out.u.accepted.jobs[1].batch_id, "");
    assert_int_equal (out.u.accepted.n_closed, 2);
    assert_true (out.u.accepted.closed[0].ok);
    assert_false (out.u.accepted.closed[1].ok);
    assert_string_equal (out.u.accepted.closed[1].error, "no such batch here");

    // an Accepted with only closes (a Submit with no jobs)
    in.u.accepted = (zl_accepted_t){0, NULL, 1, closed};
    s_roundtrip (f, &in, &out);
    assert_int_equal (out.u.accepted.n, 0);
    assert_int_equal (out.u.accepted.n_closed, 1);

    static const uint64_t failed[] = {5, 6};
    zl_batch_info_t info = {.batch_id = "nightly",
                            .found = true,
                            .tenant = "t",
                            .lane = "cb",
                            .job_id = 10,
                            .callback = true,
                            .closed = true,
                            .settled = true,
                            .jobs = 4,
                            .acked = 2,
                            .dead = 1,
                            .cancelled_jobs = 1,
                            .n_failed = 2,
                            .failed = failed,
                            .failed_more = 7,
                            .opened_at_ms = 1,
                            .closed_at_ms = 2,
                            .settled_at_ms = 3};
    zl_job_msg_t job = {
        .job_id = 10, .lease = 1, .attempt = 1, .tenant = "t", .lane = "cb", .batch = &info};
    in = (zl_msg_t){.kind = ZL_MSG_DISPATCH};
    in.u.dispatch = (zl_dispatch_t){1, &job};
    s_roundtrip (f, &in, &out);
    const zl_batch_info_t *b = out.u.dispatch.jobs[0].batch;
    assert_non_null (b);
    assert_string_equal (b->batch_id, "nightly");
    assert_int_equal (b->jobs, 4);
    assert_int_equal (b->acked, 2);
    assert_int_equal (b->dead, 1);
    assert_int_equal (b->cancelled_jobs, 1);
    assert_int_equal (b->n_failed, 2);
    assert_int_equal (b->failed[1], 6);
    assert_int_equal (b->failed_more, 7);
    assert_int_equal (b->settled_at_ms, 3);
    job.batch = NULL; // a job of no batch has none
    s_roundtrip (f, &in, &out);
    assert_null (out.u.dispatch.jobs[0].batch);

    in = (zl_msg_t){.kind = ZL_MSG_ADMIN_REQUEST};
    in.u.admin_request =
        (zl_admin_request_t){.request_id = 4, .op = ZL_ADMIN_BATCH_SHOW, .batch_id = "nightly"};
    s_roundtrip (f, &in, &out);
    assert_int_equal (out.u.admin_request.op, ZL_ADMIN_BATCH_SHOW);
    assert_string_equal (out.u.admin_request.batch_id, "nightly");

    in = (zl_msg_t){.kind = ZL_MSG_ADMIN_REPLY};
    in.u.admin_reply = (zl_admin_reply_t){
        .request_id = 4, .ok = true, .error = "", .result = ZL_ADMIN_RESULT_BATCH, .batch = info};
    s_roundtrip (f, &in, &out);
    assert_int_equal (out.u.admin_reply.result, ZL_ADMIN_RESULT_BATCH);
    assert_true (out.u.admin_reply.batch.settled);
    assert_int_equal (out.u.admin_reply.batch.job_id, 10);

    in = (zl_msg_t){.kind = ZL_MSG_BATCH_DONE, .u.batch_done = info};
    s_roundtrip (f, &in, &out);
    assert_string_equal (out.u.batch_done.lane, "cb");
    assert_int_equal (out.u.batch_done.failed[0], 5);

    in = (zl_msg_t){.kind = ZL_MSG_BREAKER};
    in.u.breaker = (zl_breaker_info_t){"mail", 2, 4, 123456, 1, 3};
    s_roundtrip (f, &in, &out);
    assert_string_equal (out.u.breaker.lane, "mail");
    assert_int_equal (out.u.breaker.state, 2);
    assert_int_equal (out.u.breaker.failures, 4);
    assert_int_equal (out.u.breaker.until_ms, 123456);
    assert_int_equal (out.u.breaker.probes_out, 1);
    assert_int_equal (out.u.breaker.opened, 3);
}

// ---------------------------------------------------------------- producer
static void
test_hello (void **state)
{
    fixture_t *f = *state;
    zl_msg_t in = {.kind = ZL_MSG_HELLO, .u.hello.client = "producer-1 (pid 4242)"};
    zl_msg_t out;
    s_roundtrip (f, &in, &out);
    s_check_str (in.u.hello.client, out.u.hello.client);

    in.u.hello.client = "";
    s_roundtrip (f, &in, &out);
    s_check_str ("", out.u.hello.client);

    in.u.hello.client = NULL; // NULL strings travel as ""
    s_roundtrip (f, &in, &out);
    s_check_str ("", out.u.hello.client);
}

static void
test_submit_many (void **state)
{
    fixture_t *f = *state;
    enum { N = 500 };
    zl_submit_t s = {.n = N, .jobs = zl_arena_calloc (f->arena, N, sizeof (zl_job_spec_t))};
    for (size_t i = 0; i < N; i++)
        s.jobs[i] = s_spec (f, i);
    zl_msg_t in = {.kind = ZL_MSG_SUBMIT, .u.submit = s};
    zl_msg_t out;
    size_t size = s_roundtrip (f, &in, &out);
    assert_true (size > 64 * 1024); // spills past the arenas' first chunk
    assert_int_equal (out.u.submit.n, N);
    for (size_t i = 0; i < N; i++)
        s_check_spec (&s.jobs[i], &out.u.submit.jobs[i]);
}

static void
test_submit_empty (void **state)
{
    fixture_t *f = *state;
    zl_msg_t in = {.kind = ZL_MSG_SUBMIT, .u.submit = {0, NULL}};
    zl_msg_t out;
    s_roundtrip (f, &in, &out);
    assert_int_equal (out.u.submit.n, 0);

    //  one spec with every field at its zero value
    zl_job_spec_t spec = {.tenant = "", .lane = "", .idempotency_key = ""};
    in.u.submit = (zl_submit_t){1, &spec};
    s_roundtrip (f, &in, &out);
    assert_int_equal (out.u.submit.n, 1);
    s_check_spec (&spec, &out.u.submit.jobs[0]);
}

static void
test_submit_large_payload (void **state)
{
    fixture_t *f = *state;
    zl_job_spec_t spec = s_spec (f, 3);
    spec.payload = s_payload (f, 4 * 1024 * 1024 + 7);
    zl_msg_t in = {.kind = ZL_MSG_SUBMIT, .u.submit = {1, &spec}};
    zl_msg_t out;
    size_t size = s_roundtrip (f, &in, &out);
    assert_true (size > spec.payload.len);
    s_check_spec (&spec, &out.u.submit.jobs[0]);
}

static void
test_accepted (void **state)
{
    fixture_t *f = *state;
    enum { N = 1000 };
    zl_acceptance_t *jobs = zl_arena_calloc (f->arena, N, sizeof *jobs);
    for (size_t i = 0; i < N; i++)
        jobs[i] = (zl_acceptance_t){.seq = i == 0 ? UINT64_MAX : i,
                                    .job_id = i == 1 ? UINT64_MAX : 1u << 20 | i,
                                    .duplicate = i % 3 == 0};
    zl_msg_t in = {.kind = ZL_MSG_ACCEPTED, .u.accepted = {N, jobs}};
    zl_msg_t out;
    s_roundtrip (f, &in, &out);
    assert_int_equal (out.u.accepted.n, N);
    for (size_t i = 0; i < N; i++) {
        assert_int_equal (out.u.accepted.jobs[i].seq, jobs[i].seq);
        assert_int_equal (out.u.accepted.jobs[i].job_id, jobs[i].job_id);
        assert_int_equal (out.u.accepted.jobs[i].duplicate, jobs[i].duplicate);
    }

    in.u.accepted = (zl_accepted_t){0, NULL};
    s_roundtrip (f, &in, &out);
    assert_int_equal (out.u.accepted.n, 0);
}

static void
test_rejected (void **state)
{
    fixture_t *f = *state;
    zl_rejection_t jobs[ZL_REJECT_CODE_COUNT + 1];
    for (int c = 0; c < ZL_REJECT_CODE_COUNT; c++)
        jobs[c] = (zl_rejection_t){.seq = (uint64_t)c * 7,
                                   .code = (zl_reject_code_t)c,
                                   .reason = s_str (f, "reason: %s", zl_reject_code_name (c)),
                                   .retry_after_ms = c == ZL_REJECT_QUEUE_FULL ? 250 : 0};
    jobs[ZL_REJECT_CODE_COUNT] = (zl_rejection_t){UINT64_MAX, ZL_REJECT_STORE_FULL, "", UINT32_MAX};
    size_t n = ZL_REJECT_CODE_COUNT + 1;
    zl_msg_t in = {.kind = ZL_MSG_REJECTED, .u.rejected = {n, jobs}};
    zl_msg_t out;
    s_roundtrip (f, &in, &out);
    assert_int_equal (out.u.rejected.n, n);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal (out.u.rejected.jobs[i].seq, jobs[i].seq);
        assert_int_equal (out.u.rejected.jobs[i].code, jobs[i].code);
        s_check_str (jobs[i].reason, out.u.rejected.jobs[i].reason);
        assert_int_equal (out.u.rejected.jobs[i].retry_after_ms, jobs[i].retry_after_ms);
    }
}

static void
test_credit (void **state)
{
    fixture_t *f = *state;
    const uint64_t limits[] = {0, 1, 1000, (uint64_t)1 << 40, UINT64_MAX};
    for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
        zl_msg_t in = {.kind = ZL_MSG_CREDIT, .u.credit.limit = limits[i]};
        zl_msg_t out;
        s_roundtrip (f, &in, &out);
        assert_int_equal (out.u.credit.limit, limits[i]);
    }
}

// ---------------------------------------------------------------- worker
static void
test_ready (void **state)
{
    fixture_t *f = *state;
    enum { N = 64 };
    const char **lanes = zl_arena_calloc (f->arena, N, sizeof *lanes);
    for (size_t i = 0; i < N; i++)
        lanes[i] = i == 5 ? "" : s_str (f, "lane-%zu", i);
    zl_msg_t in = {
        .kind = ZL_MSG_READY,
        .u.ready = {
            .name = "worker@host:1234", .n_lanes = N, .lanes = lanes, .capacity = UINT32_MAX}};
    zl_msg_t out;
    s_roundtrip (f, &in, &out);
    s_check_str (in.u.ready.name, out.u.ready.name);
    assert_int_equal (out.u.ready.capacity, UINT32_MAX);
    assert_int_equal (out.u.ready.n_lanes, N);
    for (size_t i = 0; i < N; i++)
        s_check_str (lanes[i], out.u.ready.lanes[i]);
    assert_false (out.u.ready.held_listed);
    assert_int_equal (out.u.ready.n_held, 0);
    assert_int_equal (out.u.ready.heartbeat_ms, 0); // unstated

    // the leases a reconnecting worker holds
    zl_lease_ref_t held[] = {{1, UINT64_MAX}, {UINT64_MAX, 7}, {42, 0}};
    in.u.ready = (zl_ready_t){.name = "w",
                              .n_lanes = 1,
                              .lanes = lanes,
                              .capacity = 3,
                              .instance = 0xfeed,
                              .held_listed = true,
                              .n_held = 3,
                              .held = held,
                              .heartbeat_ms = UINT32_MAX};
    s_roundtrip (f, &in, &out);
    assert_true (out.u.ready.held_listed);
    assert_int_equal (out.u.ready.heartbeat_ms, UINT32_MAX);
    assert_int_equal (out.u.ready.instance, 0xfeed);
    assert_int_equal (out.u.ready.n_held, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal (out.u.ready.held[i].job_id, held[i].job_id);
        assert_int_equal (out.u.ready.held[i].lease, held[i].lease);
    }

    in.u.ready =
        (zl_ready_t){.name = "", .n_lanes = 0, .lanes = NULL, .capacity = 0, .held_listed = true};
    s_roundtrip (f, &in, &out);
    s_check_str ("", out.u.ready.name);
    assert_int_equal (out.u.ready.n_lanes, 0);
    assert_int_equal (out.u.ready.capacity, 0);
    assert_true (out.u.ready.held_listed); // holding nothing: said, not left out
    assert_int_equal (out.u.ready.n_held, 0);
}

static void
test_heartbeat (void **state)
{
    fixture_t *f = *state;
    zl_msg_t in = {.kind = ZL_MSG_HEARTBEAT};
    zl_msg_t out;
    s_roundtrip (f, &in, &out);
    assert_int_equal (out.u.heartbeat.interval_ms, 0); // unstated
    in.u.heartbeat.interval_ms = 1500;
    s_roundtrip (f, &in, &out);
    assert_int_equal (out.u.heartbeat.interval_ms, 1500);
    in.u.heartbeat.interval_ms = UINT32_MAX;
    s_roundtrip (f, &in, &out);
    assert_int_equal (out.u.heartbeat.interval_ms, UINT32_MAX);
    assert_int_equal (zl_heartbeat_stated (UINT32_MAX), ZL_HEARTBEAT_STATED_MAX_MS);
    assert_int_equal (zl_heartbeat_stated (250), 250);
}

static void
test_extend_ack_settled (void **state)
{
    fixture_t *f = *state;
    enum { N = 300 };
    zl_extend_item_t *ext = zl_arena_calloc (f->arena, N, sizeof *ext);
    zl_ack_item_t *ack = zl_arena_calloc (f->arena, N, sizeof *ack);
    zl_lease_ref_t *ref = zl_arena_calloc (f->arena, N, sizeof *ref);
    for (size_t i = 0; i < N; i++) {
        uint64_t id = i == 0 ? UINT64_MAX : i * 1000003;
        uint64_t lease = i == 1 ? UINT64_MAX : id << 8 | (i & 0xff);
        ext[i] = (zl_extend_item_t){id, lease, i == 2 ? UINT32_MAX : (uint32_t)i * 10};
        ack[i] = (zl_ack_item_t){id, lease, i == 3 ? UINT64_MAX : i * 77};
        ref[i] = (zl_lease_ref_t){id, lease};
    }
    zl_msg_t out;

    zl_msg_t in = {.kind = ZL_MSG_EXTEND, .u.extend = {N, ext}};
    s_roundtrip (f, &in, &out);
    assert_int_equal (out.u.extend.n, N);
    for (size_t i = 0; i < N; i++) {
        assert_int_equal (out.u.extend.items[i].job_id, ext[i].job_id);
        assert_int_equal (out.u.extend.items[i].lease, ext[i].lease);
        assert_int_equal (out.u.extend.items[i].lease_ms, ext[i].lease_ms);
    }

    in = (zl_msg_t){.kind = ZL_MSG_ACK, .u.ack = {N, ack}};
    s_roundtrip (f, &in, &out);
    assert_int_equal (out.u.ack.n, N);
    for (size_t i = 0; i < N; i++) {
        assert_int_equal (out.u.ack.items[i].job_id, ack[i].job_id);
        assert_int_equal (out.u.ack.items[i].lease, ack[i].lease);
        assert_int_equal (out.u.ack.items[i].run_us, ack[i].run_us);
    }

    in = (zl_msg_t){.kind = ZL_MSG_SETTLED, .u.settled = {N, ref}};
    s_roundtrip (f, &in, &out);
    assert_int_equal (out.u.settled.n, N);
    for (size_t i = 0; i < N; i++) {
        assert_int_equal (out.u.settled.items[i].job_id, ref[i].job_id);
        assert_int_equal (out.u.settled.items[i].lease, ref[i].lease);
    }

    //  empty batches
    zl_msg_kind_t kinds[] = {ZL_MSG_EXTEND, ZL_MSG_ACK, ZL_MSG_SETTLED, ZL_MSG_NACK};
    for (size_t k = 0; k < 4; k++) {
        memset (&in, 0, sizeof in);
        in.kind = kinds[k];
        s_roundtrip (f, &in, &out);
        assert_int_equal (out.u.ack.n, 0); // n is the first member of each
    }
}

static void
test_nack (void **state)
{
    fixture_t *f = *state;
    enum { N = 200 };
    zl_nack_item_t *items = zl_arena_calloc (f->arena, N, sizeof *items);
    for (size_t i = 0; i < N; i++)
        items[i] = (zl_nack_item_t){
            .job_id = i == 0 ? UINT64_MAX : i + 1,
            .lease = i == 0 ? UINT64_MAX : (i + 1) << 4,
            .cls = (zl_fail_class_t)(i % 4),
            .error = i % 5 ? s_str (f, "stderr tail %zu:\n  Traceback ...\n", i) : "",
            .retry_after_ms = i % 4 == ZL_FAIL_THROTTLED ? 1500 : (i == 0 ? UINT32_MAX : 0),
            .run_us = i == 0 ? UINT64_MAX : i * 999};
    zl_msg_t in = {.kind = ZL_MSG_NACK, .u.nack = {N, items}};
    zl_msg_t out;
    s_roundtrip (f, &in, &out);
    assert_int_equal (out.u.nack.n, N);
    for (size_t i = 0; i < N; i++) {
        const zl_nack_item_t *w = &items[i], *g = &out.u.nack.items[i];
        assert_int_equal (g->job_id, w->job_id);
        assert_int_equal (g->lease, w->lease);
        assert_int_equal (g->cls, w->cls);
        s_check_str (w->error, g->error);
        assert_int_equal (g->retry_after_ms, w->retry_after_ms);
        assert_int_equal (g->run_us, w->run_us);
    }
}

static void
test_dispatch_many (void **state)
{
    fixture_t *f = *state;
    enum { N = 300 };
    zl_job_msg_t *jobs = zl_arena_calloc (f->arena, N, sizeof *jobs);
    for (size_t i = 0; i < N; i++)
        jobs[i] = s_job (f, i);
    zl_msg_t in = {.kind = ZL_MSG_DISPATCH, .u.dispatch = {N, jobs}};
    zl_msg_t out;
    s_roundtrip (f, &in, &out);
    assert_int_equal (out.u.dispatch.n, N);
    for (size_t i = 0; i < N; i++)
        s_check_job (&jobs[i], &out.u.dispatch.jobs[i]);
}

static void
test_error (void **state)
{
    fixture_t *f = *state;
    for (int c = 0; c < ZL_ERR_CODE_COUNT; c++) {
        zl_msg_t in = {.kind = ZL_MSG_ERROR,
                       .u.error = {.code = (zl_error_code_t)c,
                                   .message = c % 2 ? s_str (f, "error %d", c) : "",
                                   .job_id = c ? (uint64_t)c : UINT64_MAX,
                                   .lease = c ? (uint64_t)c << 32 : UINT64_MAX}};
        zl_msg_t out;
        s_roundtrip (f, &in, &out);
        assert_int_equal (out.u.error.code, c);
        s_check_str (in.u.error.message, out.u.error.message);
        assert_int_equal (out.u.error.job_id, in.u.error.job_id);
        assert_int_equal (out.u.error.lease, in.u.error.lease);
        assert_int_equal (out.u.error.n_leader_endpoints, 0);
    }
    // a standby names the leader's endpoints, in order
    const char *leader[] = {"tcp://b.example:5570", "tcp://10.0.0.2:5570"};
    zl_msg_t in = {.kind = ZL_MSG_ERROR,
                   .u.error = {.code = ZL_ERR_NOT_LEADER,
                               .message = "standby",
                               .n_leader_endpoints = 2,
                               .leader_endpoints = leader}};
    zl_msg_t out;
    s_roundtrip (f, &in, &out);
    assert_int_equal (out.u.error.code, ZL_ERR_NOT_LEADER);
    assert_string_equal (zl_error_code_name (out.u.error.code), "not_leader");
    assert_int_equal (out.u.error.n_leader_endpoints, 2);
    assert_string_equal (out.u.error.leader_endpoints[0], leader[0]);
    assert_string_equal (out.u.error.leader_endpoints[1], leader[1]);
}

// ---------------------------------------------------------------- events
static void
test_dead_letter (void **state)
{
    fixture_t *f = *state;
    zl_msg_t in = {.kind = ZL_MSG_DEAD_LETTER, .u.dead_letter = s_dead_letter (f, 0, 12, 5000)};
    zl_msg_t out;
    s_roundtrip (f, &in, &out);
    s_check_dead_letter (&in.u.dead_letter, &out.u.dead_letter);

    //  no attempts, no payload, no headers, all strings empty
    zl_dead_letter_t empty = {.tenant = "", .lane = "", .idempotency_key = "", .error = ""};
    in.u.dead_letter = empty;
    s_roundtrip (f, &in, &out);
    s_check_dead_letter (&empty, &out.u.dead_letter);
}

static void
test_dlq_alert (void **state)
{
    fixture_t *f = *state;
    zl_msg_t in = {.kind = ZL_MSG_DLQ_ALERT, .u.dlq_alert = {UINT64_MAX, 86400000}};
    zl_msg_t out;
    s_roundtrip (f, &in, &out);
    assert_int_equal (out.u.dlq_alert.depth, UINT64_MAX);
    assert_int_equal (out.u.dlq_alert.oldest_age_ms, 86400000);
}

// ---------------------------------------------------------------- admin
static void
test_admin_requests (void **state)
{
    fixture_t *f = *state;
    uint64_t ids[] = {1, 42, UINT64_MAX};
    zl_dlq_filter_t filters[] = {
        {.lane = "", .tenant = "", .all = true},
        {.lane = "email", .tenant = "acme", .n_ids = 3, .ids = ids},
        {.lane = "email", .tenant = ""},
    };
    for (int op = ZL_ADMIN_NONE; op < ZL_ADMIN_OP_COUNT; op++)
        for (size_t k = 0; k < 3; k++) {
            zl_admin_request_t r = {.request_id = k == 2 ? UINT64_MAX : (uint64_t)op * 10 + k,
                                    .op = (zl_admin_op_t)op,
                                    .filter = {.lane = "", .tenant = ""},
                                    .lane = ""};
            switch (op) {
            case ZL_ADMIN_DLQ_LIST:
                r.filter = filters[k];
                r.limit = k == 2 ? UINT32_MAX : 100;
                r.after_id = k == 2 ? UINT64_MAX : k;
                break;
            case ZL_ADMIN_DLQ_SHOW: r.job_id = k == 2 ? UINT64_MAX : 77; break;
            case ZL_ADMIN_DLQ_REDRIVE:
            case ZL_ADMIN_DLQ_PURGE: r.filter = filters[k]; break;
            case ZL_ADMIN_PAUSE:
            case ZL_ADMIN_RESUME: r.lane = k == 0 ? "" : s_str (f, "lane-%zu", k); break;
            case ZL_ADMIN_CANCEL:
                r.n_ids = k + 1;
                r.ids = ids;
                break;
            default: break;
            }
            zl_msg_t in = {.kind = ZL_MSG_ADMIN_REQUEST, .u.admin_request = r};
            zl_msg_t out;
            s_roundtrip (f, &in, &out);
            const zl_admin_request_t *g = &out.u.admin_request;
            assert_int_equal (g->request_id, r.request_id);
            assert_int_equal (g->op, r.op);
            s_check_filter (&r.filter, &g->filter);
            assert_int_equal (g->limit, r.limit);
            assert_int_equal (g->after_id, r.after_id);
            assert_int_equal (g->job_id, r.job_id);
            s_check_str (r.lane, g->lane);
            assert_int_equal (g->n_ids, r.n_ids);
            for (size_t i = 0; i < r.n_ids; i++)
                assert_int_equal (g->ids[i], r.ids[i]);
        }
}

// Cancel (broker -> worker) and the cancel reply, both ways.
static void
test_cancel (void **state)
{
    fixture_t *f = *state;
    zl_lease_ref_t refs[] = {{1, 2}, {UINT64_MAX, UINT64_MAX - 1}};
    zl_msg_t in = {.kind = ZL_MSG_CANCEL, .u.cancel = {2, refs}};
    zl_msg_t out;
    s_roundtrip (f, &in, &out);
    assert_int_equal (out.kind, ZL_MSG_CANCEL);
    assert_int_equal (out.u.cancel.n, 2);
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal (out.u.cancel.items[i].job_id, refs[i].job_id);
        assert_int_equal (out.u.cancel.items[i].lease, refs[i].lease);
    }
    assert_string_equal (zl_msg_kind_name (ZL_MSG_CANCEL), "cancel");
    assert_string_equal (zl_error_code_name (ZL_ERR_CANCELLED), "cancelled");
    assert_string_equal (zl_error_code_name (ZL_ERR_RESULT_TOO_LARGE), "result_too_large");
    assert_string_equal (zl_outcome_name (ZL_OUTCOME_CANCELLED), "cancelled");
    assert_string_equal (zl_cancel_outcome_name (ZL_CANCEL_ALREADY_CANCELLED), "already_cancelled");

    zl_cancel_item_t items[] = {{5, ZL_CANCEL_CANCELLED, "leased", 1700000000000ULL},
                                {6, ZL_CANCEL_ALREADY_CANCELLED, "ready", 1},
                                {7, ZL_CANCEL_FINISHED, "", 0},
                                {8, ZL_CANCEL_UNKNOWN, "", 0}};
    zl_msg_t rin = {.kind = ZL_MSG_ADMIN_REPLY,
                    .u.admin_reply = {.request_id = 9,
                                      .ok = true,
                                      .error = "",
                                      .result = ZL_ADMIN_RESULT_CANCEL,
                                      .count = 1,
                                      .n_cancel_items = 4,
                                      .cancel_items = items}};
    s_roundtrip (f, &rin, &out);
    const zl_admin_reply_t *r = &out.u.admin_reply;
    assert_int_equal (r->result, ZL_ADMIN_RESULT_CANCEL);
    assert_int_equal (r->count, 1);
    assert_int_equal (r->n_cancel_items, 4);
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal (r->cancel_items[i].job_id, items[i].job_id);
        assert_int_equal (r->cancel_items[i].outcome, items[i].outcome);
        assert_string_equal (r->cancel_items[i].state, items[i].state);
        assert_int_equal (r->cancel_items[i].cancelled_at_ms, items[i].cancelled_at_ms);
    }
}

static void
test_admin_reply_stats (void **state)
{
    fixture_t *f = *state;
    zl_counter_t counters[] = {{"frames_in", 123456}, {"bad_frames", 0}, {"", UINT64_MAX}};
    zl_group_stats_t lanes[] = {s_group (0, "default", ""), s_group (1, "email", "")};
    zl_group_stats_t tenants[] = {s_group (2, "", "acme"), s_group (3, "", "globex"),
                                  s_group (4, "", "")};
    zl_group_stats_t groups[6];
    for (size_t i = 0; i < 6; i++)
        groups[i] = s_group (10 + i, lanes[i % 2].lane, tenants[i % 3].tenant);
    zl_latency_t lat[] = {{"submit_to_ack", 1000, 150, 900, 4000, 123456},
                          {"queue_time", UINT64_MAX, 1, 2, 3, UINT64_MAX}};
    zl_stats_t st = {.uptime_ms = 3600000,
                     .n_counters = 3,
                     .counters = counters,
                     .n_lanes = 2,
                     .lanes = lanes,
                     .n_tenants = 3,
                     .tenants = tenants,
                     .n_groups = 6,
                     .groups = groups,
                     .n_latencies = 2,
                     .latencies = lat,
                     .workers = 17,
                     .producers = UINT32_MAX,
                     .store_backend = "postgresql",
                     .role = "standby",
                     .epoch = UINT64_MAX,
                     .store_reachable = true,
                     .takeovers = 3,
                     .fenced = 1ULL << 40,
                     .leader = "broker-a:4242"};
    zl_msg_t in = {.kind = ZL_MSG_ADMIN_REPLY,
                   .u.admin_reply = {.request_id = UINT64_MAX,
                                     .ok = true,
                                     .error = "",
                                     .result = ZL_ADMIN_RESULT_STATS,
                                     .stats = st}};
    zl_msg_t out;
    s_roundtrip (f, &in, &out);
    const zl_admin_reply_t *g = &out.u.admin_reply;
    assert_int_equal (g->request_id, UINT64_MAX);
    assert_true (g->ok);
    s_check_str ("", g->error);
    assert_int_equal (g->result, ZL_ADMIN_RESULT_STATS);
    s_check_stats (&st, &g->stats);

    //  empty stats
    zl_stats_t none = {0};
    in.u.admin_reply.stats = none;
    s_roundtrip (f, &in, &out);
    assert_int_equal (out.u.admin_reply.result, ZL_ADMIN_RESULT_STATS);
    s_check_stats (&none, &out.u.admin_reply.stats);
}

static void
test_admin_reply_dlq (void **state)
{
    fixture_t *f = *state;
    enum { N = 50 };
    zl_dead_letter_t *items = zl_arena_calloc (f->arena, N, sizeof *items);
    for (size_t i = 0; i < N; i++) // as listed: payload and attempts omitted
        items[i] = s_dead_letter (f, i, i % 2 ? 0 : 3, i % 3 ? 0 : 64);
    zl_msg_t in = {.kind = ZL_MSG_ADMIN_REPLY,
                   .u.admin_reply = {.request_id = 9,
                                     .ok = true,
                                     .result = ZL_ADMIN_RESULT_DLQ_LIST,
                                     .n_dead_letters = N,
                                     .dead_letters = items}};
    zl_msg_t out;
    s_roundtrip (f, &in, &out);
    assert_int_equal (out.u.admin_reply.result, ZL_ADMIN_RESULT_DLQ_LIST);
    assert_int_equal (out.u.admin_reply.n_dead_letters, N);
    for (size_t i = 0; i < N; i++)
        s_check_dead_letter (&items[i], &out.u.admin_reply.dead_letters[i]);

    in.u.admin_reply.n_dead_letters = 0; // an empty listing
    s_roundtrip (f, &in, &out);
    assert_int_equal (out.u.admin_reply.result, ZL_ADMIN_RESULT_DLQ_LIST);
    assert_int_equal (out.u.admin_reply.n_dead_letters, 0);

    //  show: one dead letter with its full attempt history
    zl_dead_letter_t d = s_dead_letter (f, 7, 25, 1000);
    in.u.admin_reply = (zl_admin_reply_t){
        .request_id = 10, .ok = true, .result = ZL_ADMIN_RESULT_DEAD_LETTER, .dead_letter = d};
    s_roundtrip (f, &in, &out);
    assert_int_equal (out.u.admin_reply.result, ZL_ADMIN_RESULT_DEAD_LETTER);
    s_check_dead_letter (&d, &out.u.admin_reply.dead_letter);
}

static void
test_admin_reply_count_and_error (void **state)
{
    fixture_t *f = *state;
    const uint64_t counts[] = {0, 1, UINT64_MAX};
    for (size_t i = 0; i < 3; i++) {
        zl_msg_t in = {
            .kind = ZL_MSG_ADMIN_REPLY,
            .u.admin_reply = {
                .request_id = i, .ok = true, .result = ZL_ADMIN_RESULT_COUNT, .count = counts[i]}};
        zl_msg_t out;
        s_roundtrip (f, &in, &out);
        assert_int_equal (out.u.admin_reply.result, ZL_ADMIN_RESULT_COUNT);
        assert_int_equal (out.u.admin_reply.count, counts[i]);
        assert_true (out.u.admin_reply.ok);
    }
    zl_msg_t in = {.kind = ZL_MSG_ADMIN_REPLY,
                   .u.admin_reply = {.request_id = 5,
                                     .ok = false,
                                     .error = "no such dead letter: 12345",
                                     .result = ZL_ADMIN_RESULT_NONE}};
    zl_msg_t out;
    s_roundtrip (f, &in, &out);
    assert_false (out.u.admin_reply.ok);
    assert_int_equal (out.u.admin_reply.request_id, 5);
    assert_int_equal (out.u.admin_reply.result, ZL_ADMIN_RESULT_NONE);
    s_check_str (in.u.admin_reply.error, out.u.admin_reply.error);
}

// ---------------------------------------------------------------- codec rules
static void
test_encode_unknown_kind (void **state)
{
    fixture_t *f = *state;
    size_t size = 12345;
    zl_msg_t in = {.kind = ZL_MSG_NONE};
    assert_null (zl_codec_encode (f->codec, &in, &size));
    in.kind = ZL_MSG_KIND_COUNT;
    assert_null (zl_codec_encode (f->codec, &in, &size));
    in.kind = (zl_msg_kind_t)-1;
    assert_null (zl_codec_encode (f->codec, &in, &size));
    //  the codec still works afterwards
    in = (zl_msg_t){.kind = ZL_MSG_CREDIT, .u.credit.limit = 3};
    zl_msg_t out;
    s_roundtrip (f, &in, &out);
    assert_int_equal (out.u.credit.limit, 3);
}

static void
test_encode_buffer_survives_decode (void **state)
{
    fixture_t *f = *state;
    zl_msg_t hello = {.kind = ZL_MSG_HELLO, .u.hello.client = "first"};
    size_t size;
    const void *frame = zl_codec_encode (f->codec, &hello, &size);
    assert_non_null (frame);
    uint8_t *saved = malloc (size);
    memcpy (saved, frame, size);

    //  decoding on the same codec must not disturb the encoded frame
    zl_msg_t out;
    for (int i = 0; i < 10; i++) {
        assert_int_equal (zl_codec_decode (f->codec, saved, size, &out), ZL_DECODE_OK);
        assert_int_equal (zl_codec_decode (f->codec, "\xff", 1, &out), ZL_DECODE_BAD_FRAME);
    }
    assert_memory_equal (frame, saved, size);
    free (saved);
}

static void
test_decoded_message_outlives_other_codec (void **state)
{
    fixture_t *f = *state;
    zl_codec_t *other = zl_codec_new ();
    zl_msg_t in = {.kind = ZL_MSG_HELLO, .u.hello.client = "kept"};
    zl_msg_t out;
    s_roundtrip (f, &in, &out);

    zl_msg_t in2 = {.kind = ZL_MSG_HELLO, .u.hello.client = "other"};
    size_t size;
    const void *frame = zl_codec_encode (other, &in2, &size);
    zl_msg_t out2;
    assert_int_equal (zl_codec_decode (other, frame, size, &out2), ZL_DECODE_OK);
    s_check_str ("kept", out.u.hello.client);
    s_check_str ("other", out2.u.hello.client);
    zl_codec_destroy (&other);
    assert_null (other);
    zl_codec_destroy (&other); // NULL-safe
    zl_codec_destroy (NULL);
}

// ---------------------------------------------------------------- bad input
static void
test_bad_version (void **state)
{
    fixture_t *f = *state;
    zl_msg_t out;
    //  version 2 with a Hello{client: "x"} body (field 10)
    const uint8_t v2[] = {0x08, 0x02, 0x52, 0x03, 0x0a, 0x01, 'x'};
    assert_int_equal (s_decode_copy (f->codec, v2, sizeof v2, &out), ZL_DECODE_BAD_VERSION);
    assert_int_equal (out.kind, ZL_MSG_NONE);
    //  the same body with version 1 decodes
    const uint8_t v1[] = {0x08, 0x01, 0x52, 0x03, 0x0a, 0x01, 'x'};
    assert_int_equal (s_decode_copy (f->codec, v1, sizeof v1, &out), ZL_DECODE_OK);
    assert_int_equal (out.kind, ZL_MSG_HELLO);
    s_check_str ("x", out.u.hello.client);
    //  no version field at all (version 0)
    const uint8_t v0[] = {0x52, 0x03, 0x0a, 0x01, 'x'};
    assert_int_equal (s_decode_copy (f->codec, v0, sizeof v0, &out), ZL_DECODE_BAD_VERSION);
    //  a huge version
    const uint8_t vmax[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0x0f};
    assert_int_equal (s_decode_copy (f->codec, vmax, sizeof vmax, &out), ZL_DECODE_BAD_VERSION);

    //  an encoded frame with its version byte patched to 2
    zl_msg_t in = {.kind = ZL_MSG_HEARTBEAT};
    size_t size;
    const uint8_t *frame = zl_codec_encode (f->codec, &in, &size);
    assert_true (size >= 2);
    assert_int_equal (frame[0], 0x08);
    assert_int_equal (frame[1], ZL_PROTOCOL_VERSION);
    uint8_t *copy = malloc (size);
    memcpy (copy, frame, size);
    copy[1] = 2;
    assert_int_equal (s_decode_copy (f->codec, copy, size, &out), ZL_DECODE_BAD_VERSION);
    free (copy);
}

static void
test_no_body (void **state)
{
    fixture_t *f = *state;
    zl_msg_t out;
    const uint8_t only_version[] = {0x08, 0x01};
    assert_int_equal (s_decode_copy (f->codec, only_version, 2, &out), ZL_DECODE_NO_BODY);
    assert_int_equal (out.kind, ZL_MSG_NONE);
    //  an unknown field (99, varint) from a newer peer is skipped: still no body
    const uint8_t unknown[] = {0x08, 0x01, 0x98, 0x06, 0x01};
    assert_int_equal (s_decode_copy (f->codec, unknown, sizeof unknown, &out), ZL_DECODE_NO_BODY);
}

static void
test_zero_length (void **state)
{
    fixture_t *f = *state;
    zl_msg_t out;
    assert_int_not_equal (zl_codec_decode (f->codec, NULL, 0, &out), ZL_DECODE_OK);
    assert_int_not_equal (zl_codec_decode (f->codec, "", 0, &out), ZL_DECODE_OK);
    assert_int_equal (out.kind, ZL_MSG_NONE);
}

//  Read every byte a decoded message points at, as a consumer would.
static size_t
s_touch_str (const char *s)
{
    assert_non_null (s);
    return strlen (s);
}

static size_t
s_touch_bytes (zl_bytes_t b)
{
    size_t sum = 0;
    for (size_t i = 0; i < b.len; i++)
        sum += b.data[i];
    return sum;
}

static size_t
s_touch_headers (size_t n, const zl_header_t *h)
{
    size_t sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += s_touch_str (h[i].key) + s_touch_str (h[i].value);
    return sum;
}

static size_t
s_touch_dead_letter (const zl_dead_letter_t *d)
{
    size_t sum = s_touch_str (d->tenant) + s_touch_str (d->lane) + s_touch_bytes (d->payload) +
                 s_touch_str (d->idempotency_key) + s_touch_str (d->error);
    for (size_t i = 0; i < d->n_attempts; i++)
        sum += s_touch_str (d->attempts[i].worker) + s_touch_str (d->attempts[i].error);
    return sum + s_touch_headers (d->n_headers, d->headers);
}

static size_t
s_touch_groups (size_t n, const zl_group_stats_t *g)
{
    size_t sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += s_touch_str (g[i].lane) + s_touch_str (g[i].tenant) + g[i].ready;
    return sum;
}

static size_t
s_touch (const zl_msg_t *m)
{
    size_t sum = 0;
    switch (m->kind) {
    case ZL_MSG_HELLO: return s_touch_str (m->u.hello.client);
    case ZL_MSG_SUBMIT:
        for (size_t i = 0; i < m->u.submit.n; i++) {
            const zl_job_spec_t *s = &m->u.submit.jobs[i];
            sum += s_touch_str (s->tenant) + s_touch_str (s->lane) + s_touch_bytes (s->payload) +
                   s_touch_str (s->idempotency_key) + s_touch_headers (s->n_headers, s->headers);
        }
        return sum;
    case ZL_MSG_ACCEPTED:
        for (size_t i = 0; i < m->u.accepted.n; i++)
            sum += m->u.accepted.jobs[i].job_id;
        return sum;
    case ZL_MSG_REJECTED:
        for (size_t i = 0; i < m->u.rejected.n; i++)
            sum += s_touch_str (m->u.rejected.jobs[i].reason) +
                   strlen (zl_reject_code_name (m->u.rejected.jobs[i].code));
        return sum;
    case ZL_MSG_READY:
        sum = s_touch_str (m->u.ready.name);
        for (size_t i = 0; i < m->u.ready.n_lanes; i++)
            sum += s_touch_str (m->u.ready.lanes[i]);
        return sum;
    case ZL_MSG_EXTEND:
        for (size_t i = 0; i < m->u.extend.n; i++)
            sum += m->u.extend.items[i].lease;
        return sum;
    case ZL_MSG_ACK:
        for (size_t i = 0; i < m->u.ack.n; i++)
            sum += m->u.ack.items[i].lease;
        return sum;
    case ZL_MSG_NACK:
        for (size_t i = 0; i < m->u.nack.n; i++)
            sum += s_touch_str (m->u.nack.items[i].error) +
                   strlen (zl_fail_class_name (m->u.nack.items[i].cls));
        return sum;
    case ZL_MSG_DISPATCH:
        for (size_t i = 0; i < m->u.dispatch.n; i++) {
            const zl_job_msg_t *j = &m->u.dispatch.jobs[i];
            sum += s_touch_str (j->tenant) + s_touch_str (j->lane) + s_touch_bytes (j->payload) +
                   s_touch_str (j->idempotency_key) + s_touch_headers (j->n_headers, j->headers);
        }
        return sum;
    case ZL_MSG_SETTLED:
        for (size_t i = 0; i < m->u.settled.n; i++)
            sum += m->u.settled.items[i].lease;
        return sum;
    case ZL_MSG_ERROR:
        sum = s_touch_str (m->u.error.message) + strlen (zl_error_code_name (m->u.error.code));
        for (size_t i = 0; i < m->u.error.n_leader_endpoints; i++)
            sum += s_touch_str (m->u.error.leader_endpoints[i]);
        return sum;
    case ZL_MSG_DEAD_LETTER: return s_touch_dead_letter (&m->u.dead_letter);
    case ZL_MSG_ADMIN_REQUEST: {
        const zl_admin_request_t *r = &m->u.admin_request;
        assert_true ((unsigned)r->op < ZL_ADMIN_OP_COUNT);
        sum = s_touch_str (r->lane) + s_touch_str (r->filter.lane) + s_touch_str (r->filter.tenant);
        for (size_t i = 0; i < r->filter.n_ids; i++)
            sum += r->filter.ids[i];
        for (size_t i = 0; i < r->n_ids; i++)
            sum += r->ids[i];
        return sum;
    }
    case ZL_MSG_CANCEL:
        for (size_t i = 0; i < m->u.cancel.n; i++)
            sum += m->u.cancel.items[i].lease;
        return sum;
    case ZL_MSG_ADMIN_REPLY: {
        const zl_admin_reply_t *r = &m->u.admin_reply;
        sum = s_touch_str (r->error);
        switch (r->result) {
        case ZL_ADMIN_RESULT_STATS:
            for (size_t i = 0; i < r->stats.n_counters; i++)
                sum += s_touch_str (r->stats.counters[i].name);
            for (size_t i = 0; i < r->stats.n_latencies; i++)
                sum += s_touch_str (r->stats.latencies[i].name);
            sum += s_touch_groups (r->stats.n_lanes, r->stats.lanes);
            sum += s_touch_groups (r->stats.n_tenants, r->stats.tenants);
            sum += s_touch_groups (r->stats.n_groups, r->stats.groups);
            break;
        case ZL_ADMIN_RESULT_DLQ_LIST:
            for (size_t i = 0; i < r->n_dead_letters; i++)
                sum += s_touch_dead_letter (&r->dead_letters[i]);
            break;
        case ZL_ADMIN_RESULT_DEAD_LETTER: sum += s_touch_dead_letter (&r->dead_letter); break;
        case ZL_ADMIN_RESULT_COUNT: sum += r->count; break;
        case ZL_ADMIN_RESULT_CANCEL:
            for (size_t i = 0; i < r->n_cancel_items; i++)
                sum += s_touch_str (r->cancel_items[i].state) + r->cancel_items[i].job_id;
            break;
        case ZL_ADMIN_RESULT_JOB:
            sum += s_touch_str (r->job.state) + s_touch_str (r->job.error) + r->job.result.len;
            break;
        case ZL_ADMIN_RESULT_BATCH:
            sum += s_touch_str (r->batch.batch_id) + s_touch_str (r->batch.tenant) +
                   s_touch_str (r->batch.lane) + r->batch.n_failed;
            for (size_t i = 0; i < r->batch.n_failed; i++)
                sum += r->batch.failed[i];
            break;
        default: assert_int_equal (r->result, ZL_ADMIN_RESULT_NONE); break;
        }
        return sum;
    }
    case ZL_MSG_WATCH: {
        uint64_t sum = 0;
        for (size_t i = 0; i < m->u.watch.n; i++)
            sum += m->u.watch.job_ids[i];
        return sum;
    }
    case ZL_MSG_OUTCOME:
    case ZL_MSG_JOB_DONE:
        return s_touch_str (m->u.outcome.state) + s_touch_str (m->u.outcome.error) +
               s_touch_str (m->u.outcome.tenant) + s_touch_str (m->u.outcome.lane) +
               m->u.outcome.result.len;
    case ZL_MSG_BATCH_DONE: {
        uint64_t sum = s_touch_str (m->u.batch_done.batch_id) +
                       s_touch_str (m->u.batch_done.tenant) + s_touch_str (m->u.batch_done.lane);
        for (size_t i = 0; i < m->u.batch_done.n_failed; i++)
            sum += m->u.batch_done.failed[i];
        return sum;
    }
    case ZL_MSG_BREAKER:
        return s_touch_str (m->u.breaker.lane) + m->u.breaker.state + m->u.breaker.opened;
    case ZL_MSG_CREDIT:
    case ZL_MSG_HEARTBEAT:
    case ZL_MSG_DLQ_ALERT: return 0;
    default: fail_msg ("decode returned OK with kind %d", m->kind);
    }
    return 0;
}

//  Decode `frame` from an exact-size copy; any result is allowed but one,
//  and an OK message must be safe to read in full.
static zl_decode_rc_t
s_decode_any (zl_codec_t *codec, const void *frame, size_t size)
{
    zl_msg_t out;
    zl_decode_rc_t rc = s_decode_copy (codec, frame, size, &out);
    assert_true (rc == ZL_DECODE_OK || rc == ZL_DECODE_BAD_FRAME || rc == ZL_DECODE_BAD_VERSION ||
                 rc == ZL_DECODE_NO_BODY || rc == ZL_DECODE_BAD_TEXT);
    if (rc == ZL_DECODE_BAD_TEXT) // decoded all the same, with the field named
        assert_non_null (strstr (zl_codec_error (codec), "field '"));
    if (rc == ZL_DECODE_OK || rc == ZL_DECODE_BAD_TEXT)
        s_touch (&out);
    else
        assert_int_equal (out.kind, ZL_MSG_NONE);
    return rc;
}

static void
test_random_garbage (void **state)
{
    fixture_t *f = *state;
    zl_rng_t rng;
    zl_rng_seed (&rng, 20240601);
    uint8_t buf[512];
    int bad = 0;
    for (int iter = 0; iter < 20000; iter++) {
        size_t len = (size_t)zl_rng_range (&rng, sizeof buf - 1);
        for (size_t k = 0; k < len; k++)
            buf[k] = (uint8_t)zl_rng_next (&rng);
        if (iter % 2) // half the time, look like a v1 envelope at first
            memcpy (buf, "\x08\x01", len < 2 ? len : 2);
        bad += s_decode_any (f->codec, buf, len) != ZL_DECODE_OK;
    }
    assert_true (bad > 10000); // garbage is mostly refused
}

//  A sample frame of every kind, for the truncation and mutation tests.
static size_t
s_sample (fixture_t *f, zl_msg_kind_t kind, zl_msg_t *m)
{
    memset (m, 0, sizeof *m);
    m->kind = kind;
    switch (kind) {
    case ZL_MSG_HELLO: m->u.hello.client = "client"; break;
    case ZL_MSG_SUBMIT: {
        size_t n = 12;
        m->u.submit.n = n;
        m->u.submit.jobs = zl_arena_calloc (f->arena, n, sizeof (zl_job_spec_t));
        for (size_t i = 0; i < n; i++)
            m->u.submit.jobs[i] = s_spec (f, i);
        break;
    }
    case ZL_MSG_ACCEPTED: {
        static zl_acceptance_t a[] = {{1, 100, false}, {2, UINT64_MAX, true}};
        m->u.accepted = (zl_accepted_t){2, a};
        break;
    }
    case ZL_MSG_REJECTED: {
        static zl_rejection_t r[] = {{1, ZL_REJECT_QUEUE_FULL, "full", 100}};
        m->u.rejected = (zl_rejected_t){1, r};
        break;
    }
    case ZL_MSG_CREDIT: m->u.credit.limit = 1000; break;
    case ZL_MSG_READY: {
        static const char *lanes[] = {"a", "bb", "ccc"};
        m->u.ready = (zl_ready_t){"w", 3, lanes, 8};
        break;
    }
    case ZL_MSG_EXTEND: {
        static zl_extend_item_t x[] = {{1, 2, 3}, {4, 5, 6}};
        m->u.extend = (zl_extend_t){2, x};
        break;
    }
    case ZL_MSG_ACK: {
        static zl_ack_item_t x[] = {{1, 2, 3}, {4, 5, 6}};
        m->u.ack = (zl_ack_t){2, x};
        break;
    }
    case ZL_MSG_NACK: {
        static zl_nack_item_t x[] = {{1, 2, ZL_FAIL_THROTTLED, "slow down", 500, 7}};
        m->u.nack = (zl_nack_t){1, x};
        break;
    }
    case ZL_MSG_DISPATCH: {
        size_t n = 4;
        m->u.dispatch.n = n;
        m->u.dispatch.jobs = zl_arena_calloc (f->arena, n, sizeof (zl_job_msg_t));
        for (size_t i = 0; i < n; i++)
            m->u.dispatch.jobs[i] = s_job (f, i + 1);
        break;
    }
    case ZL_MSG_SETTLED: {
        static zl_lease_ref_t x[] = {{1, 2}, {3, 4}};
        m->u.settled = (zl_settled_t){2, x};
        break;
    }
    case ZL_MSG_CANCEL: {
        static zl_lease_ref_t x[] = {{5, 6}, {7, 8}};
        m->u.cancel = (zl_cancel_t){2, x};
        break;
    }
    case ZL_MSG_ERROR: m->u.error = (zl_error_t){ZL_ERR_STALE_LEASE, "stale", 5, 6}; break;
    case ZL_MSG_DEAD_LETTER: m->u.dead_letter = s_dead_letter (f, 3, 3, 40); break;
    case ZL_MSG_DLQ_ALERT: m->u.dlq_alert = (zl_dlq_alert_t){3, 4}; break;
    case ZL_MSG_ADMIN_REQUEST: {
        static uint64_t ids[] = {7, 8};
        m->u.admin_request =
            (zl_admin_request_t){.request_id = 1,
                                 .op = ZL_ADMIN_DLQ_LIST,
                                 .filter = {.lane = "l", .tenant = "t", .n_ids = 2, .ids = ids},
                                 .limit = 10};
        break;
    }
    case ZL_MSG_ADMIN_REPLY: {
        static zl_counter_t c[] = {{"c", 1}};
        static zl_latency_t l[] = {{"lat", 1, 2, 3, 4, 5}};
        zl_group_stats_t *g = zl_arena_calloc (f->arena, 2, sizeof *g);
        g[0] = s_group (1, "lane", "");
        g[1] = s_group (2, "lane", "tenant");
        m->u.admin_reply = (zl_admin_reply_t){.request_id = 2,
                                              .ok = true,
                                              .error = "",
                                              .result = ZL_ADMIN_RESULT_STATS,
                                              .stats = {.n_counters = 1,
                                                        .counters = c,
                                                        .n_lanes = 1,
                                                        .lanes = g,
                                                        .n_groups = 2,
                                                        .groups = g,
                                                        .n_latencies = 1,
                                                        .latencies = l}};
        break;
    }
    case ZL_MSG_BATCH_DONE: {
        static const uint64_t failed[] = {3, 9, 12};
        m->u.batch_done = (zl_batch_info_t){.batch_id = "nightly",
                                            .found = true,
                                            .tenant = "t",
                                            .lane = "cb",
                                            .job_id = 1,
                                            .callback = true,
                                            .jobs = 10,
                                            .acked = 7,
                                            .dead = 2,
                                            .cancelled_jobs = 1,
                                            .n_failed = 3,
                                            .failed = failed,
                                            .settled_at_ms = 99};
        break;
    }
    case ZL_MSG_BREAKER: {
        m->u.breaker = (zl_breaker_info_t){
            .lane = "mail", .state = 1, .failures = 5, .until_ms = 77, .opened = 2};
        break;
    }
    default: break;
    }
    size_t size = 0;
    assert_non_null (zl_codec_encode (f->codec, m, &size));
    return size;
}

static void
test_truncated_submit (void **state)
{
    fixture_t *f = *state;
    zl_msg_t m;
    size_t size = s_sample (f, ZL_MSG_SUBMIT, &m);
    uint8_t *frame = malloc (size);
    memcpy (frame, zl_codec_encode (f->codec, &m, &size), size);
    assert_true (size > 1000);

    //  Wire layout: version (2 bytes), then the submit field, which covers the
    //  rest of the frame. Cutting inside it must always be a bad frame; the
    //  two cuts at field boundaries are valid (if useless) envelopes.
    for (size_t len = 0; len <= size; len++) {
        zl_decode_rc_t rc = s_decode_any (f->codec, frame, len);
        if (len == 0)
            assert_int_equal (rc, ZL_DECODE_BAD_VERSION); // empty: version 0
        else if (len == 2)
            assert_int_equal (rc, ZL_DECODE_NO_BODY); // version only
        else if (len == size)
            assert_int_equal (rc, ZL_DECODE_OK);
        else
            assert_int_equal (rc, ZL_DECODE_BAD_FRAME);
    }
    free (frame);
}

static void
test_truncated_every_kind (void **state)
{
    fixture_t *f = *state;
    for (int kind = ZL_MSG_HELLO; kind < ZL_MSG_KIND_COUNT; kind++) {
        zl_msg_t m;
        size_t size = s_sample (f, (zl_msg_kind_t)kind, &m);
        uint8_t *frame = malloc (size);
        memcpy (frame, zl_codec_encode (f->codec, &m, &size), size);
        for (size_t len = 0; len < size; len++)
            s_decode_any (f->codec, frame, len);
        assert_int_equal (s_decode_any (f->codec, frame, size), ZL_DECODE_OK);
        free (frame);
    }
}

static void
test_mutated_frames (void **state)
{
    fixture_t *f = *state;
    zl_rng_t rng;
    zl_rng_seed (&rng, 77);
    for (int kind = ZL_MSG_HELLO; kind < ZL_MSG_KIND_COUNT; kind++) {
        zl_msg_t m;
        size_t size = s_sample (f, (zl_msg_kind_t)kind, &m);
        uint8_t *frame = malloc (size);
        uint8_t *work = malloc (size);
        memcpy (frame, zl_codec_encode (f->codec, &m, &size), size);
        //  every single-bit flip of small frames, random multi-byte damage of all
        if (size <= 256)
            for (size_t bit = 0; bit < size * 8; bit++) {
                memcpy (work, frame, size);
                work[bit / 8] ^= (uint8_t)(1u << (bit % 8));
                s_decode_any (f->codec, work, size);
            }
        for (int iter = 0; iter < 2000; iter++) {
            memcpy (work, frame, size);
            int n = 1 + (int)zl_rng_range (&rng, 3);
            for (int k = 0; k < n; k++)
                work[zl_rng_range (&rng, size - 1)] = (uint8_t)zl_rng_next (&rng);
            size_t len = iter % 4 ? size : 1 + (size_t)zl_rng_range (&rng, size - 1);
            s_decode_any (f->codec, work, len);
        }
        free (work);
        free (frame);
    }
}

static void
test_decode_after_failure (void **state)
{
    fixture_t *f = *state;
    zl_msg_t m;
    size_t size = s_sample (f, ZL_MSG_DISPATCH, &m);
    uint8_t *frame = malloc (size);
    memcpy (frame, zl_codec_encode (f->codec, &m, &size), size);

    zl_msg_t out;
    const uint8_t garbage[] = {0x08, 0x01, 0xca, 0x01, 0xff, 0xff, 0xff}; // dispatch, bad length
    size_t high_water = 0;
    for (int round = 0; round < 500; round++) {
        assert_int_equal (zl_codec_decode (f->codec, garbage, sizeof garbage, &out),
                          ZL_DECODE_BAD_FRAME);
        assert_int_equal (out.kind, ZL_MSG_NONE);
        assert_int_equal (zl_codec_decode (f->codec, frame, size, &out), ZL_DECODE_OK);
        assert_int_equal (out.kind, ZL_MSG_DISPATCH);
        assert_int_equal (out.u.dispatch.n, m.u.dispatch.n);
        for (size_t i = 0; i < m.u.dispatch.n; i++)
            s_check_job (&m.u.dispatch.jobs[i], &out.u.dispatch.jobs[i]);
        //  each decode starts from an empty arena: memory does not pile up
        size_t used = zl_arena_used (zl_codec_scratch (f->codec));
        if (round == 0)
            high_water = used;
        assert_int_equal (used, high_water);
    }
    free (frame);
}

static void
test_hand_built_frames (void **state)
{
    fixture_t *f = *state;
    zl_msg_t out;
    //  AdminRequest{request_id 7, dlq_list{limit 5}} without a filter
    const uint8_t list[] = {0x08, 0x01, 0xc2, 0x02, 0x06, 0x08, 0x07, 0x5a, 0x02, 0x10, 0x05};
    assert_int_equal (s_decode_copy (f->codec, list, sizeof list, &out), ZL_DECODE_OK);
    assert_int_equal (out.kind, ZL_MSG_ADMIN_REQUEST);
    assert_int_equal (out.u.admin_request.request_id, 7);
    assert_int_equal (out.u.admin_request.op, ZL_ADMIN_DLQ_LIST);
    assert_int_equal (out.u.admin_request.limit, 5);
    s_check_str ("", out.u.admin_request.filter.lane);
    s_check_str ("", out.u.admin_request.filter.tenant);
    assert_int_equal (out.u.admin_request.filter.n_ids, 0);
    assert_false (out.u.admin_request.filter.all);

    //  AdminRequest with no op at all
    const uint8_t noop[] = {0x08, 0x01, 0xc2, 0x02, 0x02, 0x08, 0x09};
    assert_int_equal (s_decode_copy (f->codec, noop, sizeof noop, &out), ZL_DECODE_OK);
    assert_int_equal (out.u.admin_request.op, ZL_ADMIN_NONE);
    s_check_str ("", out.u.admin_request.lane);

    //  AdminReply with no result
    const uint8_t reply[] = {0x08, 0x01, 0xca, 0x02, 0x02, 0x08, 0x09};
    assert_int_equal (s_decode_copy (f->codec, reply, sizeof reply, &out), ZL_DECODE_OK);
    assert_int_equal (out.kind, ZL_MSG_ADMIN_REPLY);
    assert_int_equal (out.u.admin_reply.result, ZL_ADMIN_RESULT_NONE);
    s_check_str ("", out.u.admin_reply.error);

    //  Hello with an empty body: client defaults to ""
    const uint8_t hello[] = {0x08, 0x01, 0x52, 0x00};
    assert_int_equal (s_decode_copy (f->codec, hello, sizeof hello, &out), ZL_DECODE_OK);
    s_check_str ("", out.u.hello.client);

    //  Two bodies in one envelope: the oneof keeps the last (Credit{limit 9})
    const uint8_t two[] = {0x08, 0x01, 0x52, 0x00, 0x72, 0x02, 0x08, 0x09};
    assert_int_equal (s_decode_copy (f->codec, two, sizeof two, &out), ZL_DECODE_OK);
    assert_int_equal (out.kind, ZL_MSG_CREDIT);
    assert_int_equal (out.u.credit.limit, 9);

    //  enum values this build does not know travel through unchanged; their
    //  names are "unknown" (consumers must range-check them)
    zl_rejection_t r = {1, (zl_reject_code_t)99, "future", 0};
    zl_msg_t in = {.kind = ZL_MSG_REJECTED, .u.rejected = {1, &r}};
    s_roundtrip (f, &in, &out);
    assert_int_equal (out.u.rejected.jobs[0].code, 99);
    assert_string_equal (zl_reject_code_name (out.u.rejected.jobs[0].code), "unknown");
}

// ---------------------------------------------------------------- names
static void
test_names (void **state)
{
    (void)state;
    assert_string_equal (zl_msg_kind_name (ZL_MSG_NONE), "none");
    assert_string_equal (zl_msg_kind_name (ZL_MSG_HELLO), "hello");
    assert_string_equal (zl_msg_kind_name (ZL_MSG_SUBMIT), "submit");
    assert_string_equal (zl_msg_kind_name (ZL_MSG_ACCEPTED), "accepted");
    assert_string_equal (zl_msg_kind_name (ZL_MSG_REJECTED), "rejected");
    assert_string_equal (zl_msg_kind_name (ZL_MSG_CREDIT), "credit");
    assert_string_equal (zl_msg_kind_name (ZL_MSG_READY), "ready");
    assert_string_equal (zl_msg_kind_name (ZL_MSG_HEARTBEAT), "heartbeat");
    assert_string_equal (zl_msg_kind_name (ZL_MSG_EXTEND), "extend");
    assert_string_equal (zl_msg_kind_name (ZL_MSG_ACK), "ack");
    assert_string_equal (zl_msg_kind_name (ZL_MSG_NACK), "nack");
    assert_string_equal (zl_msg_kind_name (ZL_MSG_DISPATCH), "dispatch");
    assert_string_equal (zl_msg_kind_name (ZL_MSG_SETTLED), "settled");
    assert_string_equal (zl_msg_kind_name (ZL_MSG_ERROR), "error");
    assert_string_equal (zl_msg_kind_name (ZL_MSG_DEAD_LETTER), "dead_letter");
    assert_string_equal (zl_msg_kind_name (ZL_MSG_DLQ_ALERT), "dlq_alert");
    assert_string_equal (zl_msg_kind_name (ZL_MSG_ADMIN_REQUEST), "admin_request");
    assert_string_equal (zl_msg_kind_name (ZL_MSG_ADMIN_REPLY), "admin_reply");
    assert_string_equal (zl_msg_kind_name (ZL_MSG_CANCEL), "cancel");
    assert_string_equal (zl_msg_kind_name (ZL_MSG_BATCH_DONE), "batch_done");
    assert_string_equal (zl_msg_kind_name (ZL_MSG_BREAKER), "breaker");
    assert_string_equal (zl_msg_kind_name (ZL_MSG_KIND_COUNT), "unknown");
    assert_string_equal (zl_msg_kind_name ((zl_msg_kind_t)-1), "unknown");
    assert_string_equal (zl_msg_kind_name ((zl_msg_kind_t)1000), "unknown");

    static const char *reject[] = {
        "unspecified", "invalid",      "payload_too_large", "unknown_lane", "queue_full",
        "store_full",  "unauthorized", "shutting_down",     "unavailable",  "unknown_parent",
        "cycle",       "fan_in",       "unknown_batch",     "batch_closed", "batch_exists"};
    assert_int_equal (sizeof reject / sizeof *reject, ZL_REJECT_CODE_COUNT);
    for (int c = 0; c < ZL_REJECT_CODE_COUNT; c++)
        assert_string_equal (zl_reject_code_name ((zl_reject_code_t)c), reject[c]);
    assert_string_equal (zl_reject_code_name (ZL_REJECT_CODE_COUNT), "unknown");
    assert_string_equal (zl_reject_code_name ((zl_reject_code_t)-1), "unknown");

    static const char *error[] = {
        "unspecified", "bad_frame",        "bad_version", "unknown_kind",        "invalid",
        "unknown_job", "stale_lease",      "not_ready",   "unknown_lane",        "unauthorized",
        "not_found",   "internal",         "max_run",     "not_holder",          "not_leader",
        "unavailable", "result_too_large", "cancelled",   "checkpoint_too_large"};
    assert_int_equal (sizeof error / sizeof *error, ZL_ERR_CODE_COUNT);
    for (int c = 0; c < ZL_ERR_CODE_COUNT; c++)
        assert_string_equal (zl_error_code_name ((zl_error_code_t)c), error[c]);
    assert_string_equal (zl_error_code_name (ZL_ERR_CODE_COUNT), "unknown");
    assert_string_equal (zl_error_code_name ((zl_error_code_t)-1), "unknown");

    static const char *outcome[] = {
        "unspecified",   "acked",         "transient", "throttled",      "permanent",
        "lease_expired", "worker_dead",   "max_run",   "broker_restart", "leader_change",
        "cancelled",     "parent_failed", "not_yet",   "expired"};
    assert_int_equal (sizeof outcome / sizeof *outcome, ZL_OUTCOME_COUNT);
    for (int c = 0; c < ZL_OUTCOME_COUNT; c++)
        assert_string_equal (zl_outcome_name ((zl_outcome_t)c), outcome[c]);
    assert_string_equal (zl_outcome_name (ZL_OUTCOME_COUNT), "unknown");
    assert_string_equal (zl_outcome_name ((zl_outcome_t)-1), "unknown");

    assert_string_equal (zl_fail_class_name (ZL_FAIL_UNSPECIFIED), "transient");
    assert_string_equal (zl_fail_class_name (ZL_FAIL_TRANSIENT), "transient");
    assert_string_equal (zl_fail_class_name (ZL_FAIL_THROTTLED), "throttled");
    assert_string_equal (zl_fail_class_name (ZL_FAIL_NOT_YET), "not_yet");
    assert_string_equal (zl_fail_class_name (ZL_FAIL_PERMANENT), "permanent");
    assert_string_equal (zl_fail_class_name ((zl_fail_class_t)42), "transient");
}

// ---------------------------------------------------------------- text
//  Encode `m` and turn each 0x01 byte between two letters into `with`.
static uint8_t *
s_encode_patched (zl_codec_t *codec, const zl_msg_t *m, uint8_t with, size_t *size)
{
    const uint8_t *enc = zl_codec_encode (codec, m, size);
    assert_non_null (enc);
    uint8_t *frame = malloc (*size);
    memcpy (frame, enc, *size);
    for (size_t i = 1; i + 1 < *size; i++)
        if (frame[i] == 0x01 && frame[i - 1] >= 'a' && frame[i + 1] >= 'a')
            frame[i] = with;
    return frame;
}

//  Strings are checked on the wire: a bad one in a job spec marks that spec
//  only; anywhere else the message decodes with ZL_DECODE_BAD_TEXT.
static void
test_bad_text (void **state)
{
    fixture_t *f = *state;
    zl_header_t h[2] = {{"ok", "fine"}, {"x", "\xe2\x82"}};
    zl_job_spec_t specs[3] = {{.seq = 1, .tenant = "acme", .lane = "a", .idempotency_key = ""},
                              {.seq = 2,
                               .tenant = "acme\x01"
                                         "evil",
                               .lane = "a",
                               .idempotency_key = ""},
                              {.seq = 3,
                               .tenant = "t",
                               .lane = "a",
                               .idempotency_key = "",
                               .n_headers = 2,
                               .headers = h}};
    zl_msg_t m = {.kind = ZL_MSG_SUBMIT, .u.submit = {3, specs}};
    size_t size;
    uint8_t *frame = s_encode_patched (f->codec, &m, 0, &size);
    zl_msg_t out;
    assert_int_equal (zl_codec_decode (f->codec, frame, size, &out), ZL_DECODE_OK);
    assert_int_equal (out.u.submit.n, 3);
    assert_null (out.u.submit.jobs[0].invalid);
    assert_string_equal (out.u.submit.jobs[1].tenant, "acme"); // what protobuf-c alone gives
    assert_string_equal (out.u.submit.jobs[1].invalid, "field 'tenant' contains a NUL byte");
    assert_string_equal (out.u.submit.jobs[2].invalid,
                         "field 'headers[1].value' is not valid UTF-8");
    assert_string_equal (zl_codec_error (f->codec), "");
    free (frame);

    const char *lanes[] = {"a", "b\x01"
                                "c"};
    m = (zl_msg_t){.kind = ZL_MSG_READY, .u.ready = {"w\xff", 2, lanes, 1, 0}};
    frame = s_encode_patched (f->codec, &m, 0, &size);
    assert_int_equal (zl_codec_decode (f->codec, frame, size, &out), ZL_DECODE_BAD_TEXT);
    assert_int_equal (out.kind, ZL_MSG_READY);
    assert_string_equal (zl_codec_error (f->codec), "field 'ready.name' is not valid UTF-8");
    free (frame);

    // the leader's endpoints are text too: a client never dials a bad one
    const char *leader[] = {"tcp://a:1", "tcp://b\x01"
                                         "c:2"};
    m = (zl_msg_t){.kind = ZL_MSG_ERROR,
                   .u.error = {.code = ZL_ERR_NOT_LEADER,
                               .message = "",
                               .n_leader_endpoints = 2,
                               .leader_endpoints = leader}};
    frame = s_encode_patched (f->codec, &m, 0, &size);
    assert_int_equal (zl_codec_decode (f->codec, frame, size, &out), ZL_DECODE_BAD_TEXT);
    assert_string_equal (zl_codec_error (f->codec),
                         "field 'error.leader_endpoints[1]' contains a NUL byte");
    free (frame);

    // the next decode forgets it; good text of any script passes
    m = (zl_msg_t){.kind = ZL_MSG_HELLO, .u.hello.client = "\xe6\x97\xa5\xe6\x9c\xac web-1"};
    const void *enc = zl_codec_encode (f->codec, &m, &size);
    assert_int_equal (zl_codec_decode (f->codec, enc, size, &out), ZL_DECODE_OK);
    assert_string_equal (zl_codec_error (f->codec), "");
}

//  A strict codec (the broker's) refuses to send what is not text: in debug
//  builds encoding it aborts, so tests find any reply that would carry it.
static void
test_strict_encode (void **state)
{
    fixture_t *f = *state;
    zl_msg_t m = {.kind = ZL_MSG_ERROR, .u.error = {ZL_ERR_INVALID, "cut \xe2\x82", 0, 0, 0, NULL}};
    size_t size;
    assert_non_null (zl_codec_encode (f->codec, &m, &size)); // not strict: sent as given
#ifndef NDEBUG
    pid_t pid = fork ();
    assert_true (pid >= 0);
    if (pid == 0) {
        zl_codec_set_strict (f->codec, true);
        zl_codec_encode (f->codec, &m, &size);
        _exit (0);
    }
    int status;
    assert_int_equal (waitpid (pid, &status, 0), pid);
    assert_true (WIFSIGNALED (status) && WTERMSIG (status) == SIGABRT);
#endif
    zl_codec_set_strict (f->codec, true);
    m.u.error.message = "fine";
    assert_non_null (zl_codec_encode (f->codec, &m, &size));
}

#define T(fn) cmocka_unit_test_setup_teardown (fn, s_setup, s_teardown)

int
main (void)
{
    const struct CMUnitTest tests[] = {
        T (test_hello),
        T (test_submit_many),
        T (test_submit_empty),
        T (test_submit_large_payload),
        T (test_accepted),
        T (test_rejected),
        T (test_credit),
        T (test_ready),
        T (test_heartbeat),
        T (test_extend_ack_settled),
        T (test_nack),
        T (test_dispatch_many),
        T (test_error),
        T (test_dead_letter),
        T (test_dlq_alert),
        T (test_admin_requests),
        T (test_admin_reply_stats),
        T (test_admin_reply_dlq),
        T (test_cancel),
        T (test_admin_reply_count_and_error),
        T (test_encode_unknown_kind),
        T (test_encode_buffer_survives_decode),
        T (test_decoded_message_outlives_other_codec),
        T (test_bad_version),
        T (test_no_body),
        T (test_zero_length),
        T (test_random_garbage),
        T (test_truncated_submit),
        T (test_truncated_every_kind),
        T (test_mutated_frames),
        T (test_decode_after_failure),
        T (test_hand_built_frames),
        T (test_bad_text),
        T (test_strict_encode),
        T (test_batch_fields),
        cmocka_unit_test (test_names),
    };
    return cmocka_run_group_tests_name ("codec", tests, NULL, NULL);
}
