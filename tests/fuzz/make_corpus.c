/*  make_corpus: writes the seed corpus of the fuzz targets.

        fuzz_make_corpus DIR     (the committed copy is tests/fuzz/corpus)

    DIR/fuzz_envelope/   one encoded Envelope of every message kind
    DIR/fuzz_broker_<socket>/ record sequences in fuzz_broker.c's input format:
                         flags:u8 [idlen:u8 id] len:u16le frame
    DIR/fuzz_zmtp/       a mode byte and a ZMTP peer's bytes (fuzz_zmtp.c):
                         handshakes of both roles, NULL and CURVE, made by a
                         peer engine against one that draws the harness's
                         random bytes, then frames; and malformed ones
    Output is deterministic: rerun it after a change to the protocol and
    commit the result. */
#include "codec.h"
#include "fuzz_zmtp.h"
#include "msg.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

// record flags (see fuzz_broker.c)
#define PEER(n) (n)
#define LITERAL 3
#define PATCH 4
#define ADVANCE(k) ((k) << 3) // 0, 1, 50, 400, 1500, 5000, 40000 ms, 25 h

static const char *s_root;
static zl_codec_t *s_codec;

typedef struct {
    uint8_t data[65536];
    size_t len;
} buf_t;

static void
s_mkdir (const char *path)
{
    if (mkdir (path, 0755) != 0 && errno != EEXIST) {
        perror (path);
        exit (1);
    }
}

static void
s_write (const char *dir, const char *name, const void *data, size_t len)
{
    char path[4096];
    snprintf (path, sizeof path, "%s/%s", s_root, dir);
    s_mkdir (path);
    snprintf (path, sizeof path, "%s/%s/%s", s_root, dir, name);
    FILE *f = fopen (path, "wb");
    if (!f || fwrite (data, 1, len, f) != len || fclose (f) != 0) {
        perror (path);
        exit (1);
    }
}

static const void *
s_encode (const zl_msg_t *m, size_t *len)
{
    const void *data = zl_codec_encode (s_codec, m, len);
    if (!data) {
        fprintf (stderr, "make_corpus: cannot encode %s\n", zl_msg_kind_name (m->kind));
        exit (1);
    }
    return data;
}

static void
s_envelope (const char *name, const zl_msg_t *m)
{
    size_t len;
    const void *data = s_encode (m, &len);
    s_write ("fuzz_envelope", name, data, len);
}

// Append one record: `peer` is a literal routing id when flags say LITERAL.
static void
s_record (buf_t *b, uint8_t flags, const char *peer, const zl_msg_t *m)
{
    size_t len = 0;
    const void *data = m ? s_encode (m, &len) : NULL;
    size_t need = 1 + ((flags & 3) == LITERAL ? 1 + strlen (peer) : 0) + 2 + len;
    if (b->len + need > sizeof b->data) {
        fprintf (stderr, "make_corpus: sequence too long\n");
        exit (1);
    }
    b->data[b->len++] = flags;
    if ((flags & 3) == LITERAL) {
        b->data[b->len++] = (uint8_t)strlen (peer);
        memcpy (b->data + b->len, peer, strlen (peer));
        b->len += strlen (peer);
    }
    b->data[b->len++] = (uint8_t)(len & 0xff);
    b->data[b->len++] = (uint8_t)(len >> 8);
    if (len)
        memcpy (b->data + b->len, data, len);
    b->len += len;
}

// Append one record of `m`'s frame with every 0x01 byte that stands between
// two letters or digits (inside a string) made a NUL byte: what a C string
// cannot carry, and a client in another language can send.
static void
s_record_nul (buf_t *b, uint8_t flags, const zl_msg_t *m)
{
    size_t at = b->len;
    s_record (b, flags, NULL, m);
    for (size_t i = at + 4; i + 1 < b->len; i++)
        if (b->data[i] == 0x01 && isalnum (b->data[i - 1]) && isalnum (b->data[i + 1]))
            b->data[i] = 0;
}

// A record whose frame is raw bytes (not an Envelope).
static void
s_raw (buf_t *b, uint8_t flags, const void *frame, size_t len)
{
    b->data[b->len++] = flags;
    b->data[b->len++] = (uint8_t)(len & 0xff);
    b->data[b->len++] = (uint8_t)(len >> 8);
    memcpy (b->data + b->len, frame, len);
    b->len += len;
}

// ---------------------------------------------------------------- messages
static const zl_header_t s_headers[] = {{"trace-id", "abc123"}, {"content-type", "json"}};
static const char *s_lanes[] = {"a", "b"};

static zl_msg_t
s_hello (const char *client)
{
    zl_msg_t m = {.kind = ZL_MSG_HELLO};
    m.u.hello.client = client;
    return m;
}

static zl_job_spec_t s_specs[16];

// A Submit of `n` jobs; `variant` picks tenants, lanes, keys, delays.
static zl_msg_t
s_submit (size_t n, int variant)
{
    static char keys[16][16];
    for (size_t i = 0; i < n && i < 16; i++) {
        snprintf (keys[i], sizeof keys[i], "key-%zu", i % 3);
        s_specs[i] = (zl_job_spec_t){.seq = i + 1,
                                     .tenant = (i + (size_t)variant) % 2 ? "acme" : "globex",
                                     .lane = i % 2 ? "b" : "a",
                                     .payload = {(const uint8_t *)"{\"n\":1}", 7},
                                     .idempotency_key = variant == 1 ? keys[i] : "",
                                     .delay_ms = variant == 2 ? (uint32_t)(i * 500) : 0,
                                     .max_attempts = variant == 3 ? 1 : 0,
                                     .lease_ms = variant == 3 ? 1000 : 0,
                                     .max_run_ms = variant == 3 ? 3000 : 0,
                                     .n_headers = i % 2 ? 2 : 0,
                                     .headers = (zl_header_t *)s_headers};
    }
    zl_msg_t m = {.kind = ZL_MSG_SUBMIT};
    m.u.submit = (zl_submit_t){n < 16 ? n : 16, s_specs};
    return m;
}

static zl_msg_t
s_ready (uint32_t capacity, size_t n_lanes)
{
    zl_msg_t m = {.kind = ZL_MSG_READY};
    m.u.ready = (zl_ready_t){"worker-1", n_lanes, s_lanes, capacity};
    return m;
}

static zl_ack_item_t s_acks[4] = {{1, 0, 1500}, {2, 0, 2500}, {3, 0, 100}, {4, 1, 100}};
static zl_nack_item_t s_nacks[3] = {{1, 0, ZL_FAIL_TRANSIENT, "boom", 0, 10},
                                    {2, 0, ZL_FAIL_THROTTLED, "slow down", 2000, 20},
                                    {3, 0, ZL_FAIL_PERMANENT, "bad input", 0, 30}};
static zl_extend_item_t s_extends[2] = {{1, 0, 60000}, {2, 0, 5000}};

static zl_msg_t
s_ack (size_t n)
{
    zl_msg_t m = {.kind = ZL_MSG_ACK};
    m.u.ack = (zl_ack_t){n, s_acks};
    return m;
}

static zl_msg_t
s_nack (size_t n)
{
    zl_msg_t m = {.kind = ZL_MSG_NACK};
    m.u.nack = (zl_nack_t){n, s_nacks};
    return m;
}

static zl_msg_t
s_extend (size_t n)
{
    zl_msg_t m = {.kind = ZL_MSG_EXTEND};
    m.u.extend = (zl_extend_t){n, s_extends};
    return m;
}

static zl_msg_t
s_heartbeat (void)
{
    zl_msg_t m = {.kind = ZL_MSG_HEARTBEAT};
    return m;
}

static uint64_t s_ids[3] = {1, 2, 3};

static zl_msg_t
s_admin (zl_admin_op_t op, int variant)
{
    zl_msg_t m = {.kind = ZL_MSG_ADMIN_REQUEST};
    zl_admin_request_t *r = &m.u.admin_request;
    r->request_id = 7 + (uint64_t)variant;
    r->op = op;
    r->filter = (zl_dlq_filter_t){"", "", 0, NULL, false};
    r->lane = "";
    switch (variant) {
    case 1: r->filter.all = true; break;
    case 2: r->filter.lane = "a"; break;
    case 3: r->filter.tenant = "t1"; break;
    case 4:
        r->filter.n_ids = 3;
        r->filter.ids = s_ids;
        break;
    default: break;
    }
    if (op == ZL_ADMIN_DLQ_LIST) {
        r->limit = variant == 5 ? 2 : 0;
        r->after_id = variant == 5 ? 1 : 0;
    }
    if (op == ZL_ADMIN_DLQ_SHOW)
        r->job_id = 1;
    if (op == ZL_ADMIN_PAUSE || op == ZL_ADMIN_RESUME)
        r->lane = variant == 6 ? "nope" : "a";
    return m;
}

// ---------------------------------------------------------------- envelopes
static void
s_envelopes (void)
{
    zl_msg_t m = s_hello ("producer-1");
    s_envelope ("hello", &m);
    m = s_submit (3, 1);
    s_envelope ("submit", &m);
    m = s_submit (4, 2);
    s_envelope ("submit-delayed", &m);
    zl_job_spec_t text[2] = {{.seq = 1,
                              .tenant = "acme\x01"
                                        "evil",
                              .lane = "a",
                              .idempotency_key = "\xff",
                              .generated_key = true},
                             {.seq = 2, .tenant = "t", .lane = "a", .idempotency_key = "k"}};
    m = (zl_msg_t){.kind = ZL_MSG_SUBMIT, .u.submit = {2, text}};
    {
        buf_t *nul = calloc (1, sizeof *nul);
        s_record_nul (nul, 0, &m); // flags u8, len u16: the frame follows
        s_write ("fuzz_envelope", "submit-bad-text", nul->data + 3, nul->len - 3);
        free (nul);
    }
    static const char *ready_lanes[] = {"a", "b\xc0\xaf"};
    m = (zl_msg_t){.kind = ZL_MSG_READY, .u.ready = {"w\xe2\x82", 2, ready_lanes, 4, 0xfeed}};
    s_envelope ("ready-bad-text", &m);

    zl_acceptance_t acc[2] = {{1, 100, false}, {2, 42, true}};
    m = (zl_msg_t){.kind = ZL_MSG_ACCEPTED};
    m.u.accepted = (zl_accepted_t){2, acc};
    s_envelope ("accepted", &m);

    zl_rejection_t rej[2] = {{3, ZL_REJECT_QUEUE_FULL, "the broker's queue is full", 200},
                             {4, ZL_REJECT_UNKNOWN_LANE, "lane 'x' is not declared", 0}};
    m = (zl_msg_t){.kind = ZL_MSG_REJECTED};
    m.u.rejected = (zl_rejected_t){2, rej};
    s_envelope ("rejected", &m);

    m = (zl_msg_t){.kind = ZL_MSG_CREDIT};
    m.u.credit.limit = 20000;
    s_envelope ("credit", &m);

    m = s_ready (8, 2);
    s_envelope ("ready", &m);
    static const zl_lease_ref_t held[3] = {{1, 2}, {UINT64_MAX, 1}, {3, UINT64_MAX}};
    m.u.ready.instance = 0x1234;
    m.u.ready.held_listed = true;
    m.u.ready.n_held = 3;
    m.u.ready.held = held;
    m.u.ready.heartbeat_ms = 250;
    s_envelope ("ready-held", &m);
    m = s_heartbeat ();
    s_envelope ("heartbeat", &m);
    m.u.heartbeat.interval_ms = UINT32_MAX;
    s_envelope ("heartbeat-paced", &m);
    m = s_extend (2);
    s_envelope ("extend", &m);
    m = s_ack (3);
    s_envelope ("ack", &m);
    m = s_nack (3);
    s_envelope ("nack", &m);

    zl_job_msg_t jobs[2] = {{.job_id = 100,
                             .lease = 0x123456789abcull,
                             .attempt = 1,
                             .tenant = "acme",
                             .lane = "a",
                             .payload = {(const uint8_t *)"hello", 5},
                             .n_headers = 2,
                             .headers = (zl_header_t *)s_headers,
                             .idempotency_key = "job-100",
                             .lease_ms = 30000,
                             .max_run_ms = 0,
                             .max_attempts = 5,
                             .enqueued_at_ms = 1767225600000ull},
                            {.job_id = 101,
                             .lease = 7,
                             .attempt = 3,
                             .tenant = "globex",
                             .lane = "b",
                             .idempotency_key = "order-9",
                             .lease_ms = 1000,
                             .max_run_ms = 60000,
                             .max_attempts = 3}};
    m = (zl_msg_t){.kind = ZL_MSG_DISPATCH};
    m.u.dispatch = (zl_dispatch_t){2, jobs};
    s_envelope ("dispatch", &m);

    zl_lease_ref_t refs[2] = {{100, 0x123456789abcull}, {101, 7}};
    m = (zl_msg_t){.kind = ZL_MSG_SETTLED};
    m.u.settled = (zl_settled_t){2, refs};
    s_envelope ("settled", &m);

    m = (zl_msg_t){.kind = ZL_MSG_ERROR};
    m.u.error = (zl_error_t){ZL_ERR_STALE_LEASE, "ack for job 100 with stale lease 6", 100, 6};
    s_envelope ("error", &m);
    zl_item_error_t items[2] = {{7, 70, ZL_ERR_UNKNOWN_JOB}, {8, 80, ZL_ERR_NOT_HOLDER}};
    m = (zl_msg_t){.kind = ZL_MSG_ERROR,
                   .u.error = {ZL_ERR_UNKNOWN_JOB, "2 of 2 ack items refused", 7, 70, 2, items}};
    s_envelope ("error-items", &m);

    zl_attempt_t attempts[2] = {
        {1, "worker-1", 1767225600000ull, 1767225601000ull, ZL_OUTCOME_TRANSIENT, "timeout"},
        {2, "worker-2", 1767225602000ull, 1767225603000ull, ZL_OUTCOME_PERMANENT, "bad input"}};
    zl_dead_letter_t dl = {.job_id = 100,
                           .tenant = "acme",
                           .lane = "a",
                           .payload = {(const uint8_t *)"hello", 5},
                           .idempotency_key = "job-100",
                           .enqueued_at_ms = 1767225600000ull,
                           .dead_at_ms = 1767225603000ull,
                           .error = "bad input",
                           .n_attempts = 2,
                           .attempts = attempts,
                           .n_headers = 1,
                           .headers = (zl_header_t *)s_headers};
    m = (zl_msg_t){.kind = ZL_MSG_DEAD_LETTER};
    m.u.dead_letter = dl;
    s_envelope ("dead-letter", &m);

    m = (zl_msg_t){.kind = ZL_MSG_DLQ_ALERT};
    m.u.dlq_alert = (zl_dlq_alert_t){3, 60000};
    s_envelope ("dlq-alert", &m);

    static const struct {
        zl_admin_op_t op;
        int variant;
        const char *name;
    } ops[] = {{ZL_ADMIN_STATS, 0, "admin-stats"},       {ZL_ADMIN_DLQ_LIST, 5, "admin-dlq-list"},
               {ZL_ADMIN_DLQ_SHOW, 0, "admin-dlq-show"}, {ZL_ADMIN_DLQ_REDRIVE, 4, "admin-redrive"},
               {ZL_ADMIN_DLQ_PURGE, 2, "admin-purge"},   {ZL_ADMIN_PAUSE, 0, "admin-pause"},
               {ZL_ADMIN_RESUME, 0, "admin-resume"}};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        m = s_admin (ops[i].op, ops[i].variant);
        s_envelope (ops[i].name, &m);
    }

    zl_counter_t counters[2] = {{"frames_in", 10}, {"accepted", 7}};
    zl_group_stats_t groups[1] = {{.lane = "a",
                                   .tenant = "acme",
                                   .ready = 3,
                                   .in_flight = 1,
                                   .dlq = 1,
                                   .oldest_ready_age_ms = 50,
                                   .submitted = 10,
                                   .acked = 5,
                                   .nacked_transient = 1,
                                   .run_us = 12345,
                                   .paused = true}};
    zl_latency_t lat[1] = {{"submit_to_ack", 5, 100, 200, 300, 400}};
    m = (zl_msg_t){.kind = ZL_MSG_ADMIN_REPLY};
    m.u.admin_reply = (zl_admin_reply_t){.request_id = 7,
                                         .ok = true,
                                         .error = "",
                                         .result = ZL_ADMIN_RESULT_STATS,
                                         .stats = {.uptime_ms = 1000,
                                                   .n_counters = 2,
                                                   .counters = counters,
                                                   .n_lanes = 1,
                                                   .lanes = groups,
                                                   .n_tenants = 1,
                                                   .tenants = groups,
                                                   .n_groups = 1,
                                                   .groups = groups,
                                                   .n_latencies = 1,
                                                   .latencies = lat,
                                                   .workers = 2,
                                                   .producers = 1}};
    s_envelope ("admin-reply-stats", &m);
    m.u.admin_reply = (zl_admin_reply_t){.request_id = 8,
                                         .ok = true,
                                         .error = "",
                                         .result = ZL_ADMIN_RESULT_DLQ_LIST,
                                         .n_dead_letters = 1,
                                         .dead_letters = &dl};
    s_envelope ("admin-reply-dlq-list", &m);
    m.u.admin_reply = (zl_admin_reply_t){.request_id = 9,
                                         .ok = true,
                                         .error = "",
                                         .result = ZL_ADMIN_RESULT_DEAD_LETTER,
                                         .dead_letter = dl};
    s_envelope ("admin-reply-dead-letter", &m);
    m.u.admin_reply = (zl_admin_reply_t){
        .request_id = 10, .ok = false, .error = "say which dead letters", .result = 0};
    s_envelope ("admin-reply-error", &m);
    m.u.admin_reply = (zl_admin_reply_t){
        .request_id = 11, .ok = true, .error = "", .result = ZL_ADMIN_RESULT_COUNT, .count = 4};
    s_envelope ("admin-reply-count", &m);
}

// ---------------------------------------------------------------- sequences
static void
s_frontend (void)
{
    const char *dir = "fuzz_broker_frontend";
    buf_t *b = calloc (1, sizeof *b);
    zl_msg_t m;

    m = s_hello ("producer-1");
    s_record (b, PEER (0), NULL, &m);
    m = s_submit (4, 0);
    s_record (b, PEER (0), NULL, &m);
    s_write (dir, "hello-submit", b->data, b->len);

    b->len = 0; // the same keys twice (duplicates)
    m = s_hello ("producer-2");
    s_record (b, PEER (1), NULL, &m);
    m = s_submit (6, 1);
    s_record (b, PEER (1), NULL, &m);
    s_record (b, PEER (1), NULL, &m);
    s_write (dir, "idempotent-twice", b->data, b->len);

    b->len = 0; // the key again after the dedup window
    m = s_hello ("producer-1");
    s_record (b, PEER (0), NULL, &m);
    m = s_submit (3, 1);
    s_record (b, PEER (0), NULL, &m);
    s_record (b, PEER (0) | ADVANCE (7), NULL, &m);
    s_write (dir, "idempotent-expired", b->data, b->len);

    b->len = 0;
    m = s_hello ("producer-3");
    s_record (b, PEER (2), NULL, &m);
    m = s_submit (5, 2);
    s_record (b, PEER (2), NULL, &m);
    s_record (b, PEER (2) | ADVANCE (4), NULL, &m);
    s_write (dir, "delayed", b->data, b->len);

    b->len = 0; // invalid specs of every kind
    static char long_name[200];
    memset (long_name, 'x', sizeof long_name - 1);
    static uint8_t big[1100];
    zl_job_spec_t bad[5] = {{.seq = 1, .tenant = "", .lane = "a", .idempotency_key = ""},
                            {.seq = 2, .tenant = "acme", .lane = "", .idempotency_key = ""},
                            {.seq = 3, .tenant = long_name, .lane = "a", .idempotency_key = ""},
                            {.seq = 4, .tenant = "acme", .lane = "nope", .idempotency_key = ""},
                            {.seq = 5,
                             .tenant = "acme",
                             .lane = "a",
                             .payload = {big, sizeof big},
                             .idempotency_key = ""}};
    m = s_hello ("producer-1");
    s_record (b, PEER (0), NULL, &m);
    m = (zl_msg_t){.kind = ZL_MSG_SUBMIT};
    m.u.submit = (zl_submit_t){5, bad};
    s_record (b, PEER (0), NULL, &m);
    s_write (dir, "invalid-specs", b->data, b->len);

    b->len = 0; // strings that are not text: NUL bytes, invalid UTF-8, control characters
    static const zl_header_t bad_headers[] = {{"ok", "v\x01"
                                                     "alue"},
                                              {"x", "\xe2\x82"}};
    zl_job_spec_t text[7] = {{.seq = 1,
                              .tenant = "acme\x01"
                                        "evil",
                              .lane = "a",
                              .idempotency_key = ""},
                             {.seq = 2,
                              .tenant = "acme",
                              .lane = "a",
                              .idempotency_key = "order\x01"
                                                 "001"},
                             {.seq = 3,
                              .tenant = "acme",
                              .lane = "a",
                              .idempotency_key = "order\x01"
                                                 "002"},
                             {.seq = 4, .tenant = "t\xff\xfe", .lane = "a", .idempotency_key = ""},
                             {.seq = 5,
                              .tenant = "line\nbreak",
                              .lane = "a\x01"
                                      "b",
                              .idempotency_key = "\xc0\xaf"},
                             {.seq = 6,
                              .tenant = "acme",
                              .lane = "a",
                              .idempotency_key = "",
                              .n_headers = 2,
                              .headers = (zl_header_t *)bad_headers},
                             {.seq = 7, .tenant = "acme", .lane = "a", .idempotency_key = "good"}};
    m = s_hello ("web\x01"
                 "1");
    s_record_nul (b, PEER (0), &m);
    m = s_hello ("producer-1");
    s_record (b, PEER (0), NULL, &m);
    m = (zl_msg_t){.kind = ZL_MSG_SUBMIT};
    m.u.submit = (zl_submit_t){7, text};
    s_record_nul (b, PEER (0), &m);
    s_write (dir, "bad-text", b->data, b->len);

    b->len = 0; // a Submit before Hello takes nothing
    m = s_submit (4, 0);
    s_record (b, LITERAL, "no-hello", &m);
    s_write (dir, "no-hello", b->data, b->len);

    b->len = 0; // producers with their own routing ids
    m = s_hello ("a");
    s_record (b, LITERAL, "producer-x", &m);
    m = s_submit (16, 3);
    s_record (b, LITERAL, "producer-x", &m);
    s_record (b, LITERAL, "", &m);
    s_write (dir, "literal-peers", b->data, b->len);

    b->len = 0; // what does not belong on this socket
    m = s_ack (2);
    s_record (b, PEER (0), NULL, &m);
    m = s_ready (4, 2);
    s_record (b, PEER (0), NULL, &m);
    m = s_admin (ZL_ADMIN_STATS, 0);
    s_record (b, PEER (0), NULL, &m);
    s_raw (b, PEER (0), "\x08\x02", 2); // version 2
    s_raw (b, PEER (0), "\xff\xff\xff", 3);
    s_raw (b, PEER (0), "", 0);
    s_write (dir, "wrong-kinds", b->data, b->len);

    b->len = 0; // more jobs than credit: re-hello resets the count
    m = s_hello ("p");
    s_record (b, PEER (0), NULL, &m);
    m = s_submit (16, 0);
    for (int i = 0; i < 4; i++)
        s_record (b, PEER (0), NULL, &m);
    m = s_hello ("p");
    s_record (b, PEER (0), NULL, &m);
    s_write (dir, "credit", b->data, b->len);
    free (b);
}

static void
s_backend (void)
{
    const char *dir = "fuzz_broker_backend";
    buf_t *b = calloc (1, sizeof *b);
    zl_msg_t m;

    m = s_ready (4, 2);
    s_record (b, PEER (0), NULL, &m);
    m = s_ack (3);
    s_record (b, PEER (0) | PATCH, NULL, &m);
    s_record (b, PEER (0) | PATCH, NULL, &m); // again: unknown or stale
    s_write (dir, "ready-ack", b->data, b->len);

    b->len = 0;
    m = s_ready (4, 2);
    s_record (b, PEER (1), NULL, &m);
    m = s_nack (3);
    s_record (b, PEER (1) | PATCH, NULL, &m);
    m = s_heartbeat ();
    s_record (b, PEER (1) | ADVANCE (4), NULL, &m);
    s_write (dir, "ready-nack", b->data, b->len);

    b->len = 0;
    m = s_ready (2, 1);
    s_record (b, PEER (0), NULL, &m);
    m = s_extend (2);
    s_record (b, PEER (0) | PATCH | ADVANCE (4), NULL, &m);
    m = s_ack (2);
    s_record (b, PEER (0) | PATCH | ADVANCE (6), NULL, &m); // after the lease lapsed
    s_write (dir, "extend-lapse", b->data, b->len);

    b->len = 0; // a worker that goes silent is dead; its acks then need Ready
    m = s_ready (8, 2);
    s_record (b, PEER (2), NULL, &m);
    m = s_heartbeat ();
    s_record (b, PEER (0), NULL, &m);
    s_record (b, PEER (0) | ADVANCE (5), NULL, &m);
    m = s_ack (2);
    s_record (b, PEER (2) | PATCH, NULL, &m);
    m = s_ready (8, 2);
    s_record (b, PEER (2), NULL, &m);
    s_write (dir, "dead-worker", b->data, b->len);

    b->len = 0; // a worker nobody can reach
    m = s_ready (4, 2);
    s_record (b, LITERAL, "ghost", &m);
    m = s_ack (1);
    s_record (b, LITERAL | PATCH, "ghost", &m);
    s_write (dir, "unreachable", b->data, b->len);

    b->len = 0;
    static const char *odd[] = {"nope", "a", "a", ""};
    m = (zl_msg_t){.kind = ZL_MSG_READY};
    m.u.ready = (zl_ready_t){"odd", 4, odd, 3};
    s_record (b, PEER (0), NULL, &m);
    m.u.ready = (zl_ready_t){"none", 0, odd, 3};
    s_record (b, PEER (1), NULL, &m);
    m = s_ready (0, 2); // draining
    s_record (b, PEER (0), NULL, &m);
    m = s_ack (1); // before Ready
    s_record (b, PEER (2), NULL, &m);
    m = s_submit (1, 0); // wrong socket
    s_record (b, PEER (2), NULL, &m);
    s_write (dir, "odd-ready", b->data, b->len);

    b->len = 0; // strings that are not text, settlements that are refused
    static const char *nul_lanes[] = {"a\x01"
                                      "b"};
    m = (zl_msg_t){.kind = ZL_MSG_READY};
    m.u.ready = (zl_ready_t){"w\xff", 2, s_lanes, 3, 7};
    s_record (b, PEER (0), NULL, &m);
    m.u.ready = (zl_ready_t){"w", 1, nul_lanes, 3, 7};
    s_record_nul (b, PEER (0), &m);
    m.u.ready = (zl_ready_t){"w", 2, s_lanes, 3, 7};
    s_record (b, PEER (0), NULL, &m);
    m.u.ready = (zl_ready_t){"w", 2, s_lanes, 3, 7}; // the same instance reconnects
    s_record (b, PEER (1), NULL, &m);
    static zl_nack_item_t odd_nacks[2] = {{1, 0, ZL_FAIL_TRANSIENT, "\xff binary", 0, 10},
                                          {2, 0, (zl_fail_class_t)9, "odd class", 0, 10}};
    m = (zl_msg_t){.kind = ZL_MSG_NACK};
    m.u.nack = (zl_nack_t){2, odd_nacks};
    s_record (b, PEER (1) | PATCH, NULL, &m);
    static zl_extend_item_t odd_extends[2] = {{1, 0, 0}, {2, 0, 4000000000u}};
    m = (zl_msg_t){.kind = ZL_MSG_EXTEND};
    m.u.extend = (zl_extend_t){2, odd_extends};
    s_record (b, PEER (1) | PATCH, NULL, &m);
    m = s_ack (4); // from the old connection: not the holder
    s_record (b, PEER (0) | PATCH, NULL, &m);
    s_write (dir, "bad-text", b->data, b->len);

    b->len = 0; // a reconnect that lists what it holds: the rest is ready again
    m = s_ready (4, 2);
    m.u.ready.instance = 9;
    s_record (b, PEER (0), NULL, &m);
    static const zl_lease_ref_t held[2] = {{1, 0}, {2, 0}};
    m.u.ready.held_listed = true;
    m.u.ready.n_held = 2;
    m.u.ready.held = held;
    s_record (b, PEER (1), NULL, &m);
    m = s_ack (2);
    s_record (b, PEER (1) | PATCH, NULL, &m);
    s_write (dir, "reconnect-held", b->data, b->len);

    b->len = 0; // retries until the DLQ
    m = s_ready (16, 2);
    s_record (b, PEER (0), NULL, &m);
    for (int i = 0; i < 6; i++) {
        m = s_nack (1);
        s_record (b, PEER (0) | PATCH, NULL, &m);
        m = s_heartbeat ();
        s_record (b, PEER (0) | ADVANCE (6), NULL, &m);
    }
    s_write (dir, "retries", b->data, b->len);
    free (b);
}

static void
s_admin_seqs (void)
{
    const char *dir = "fuzz_broker_admin";
    buf_t *b = calloc (1, sizeof *b);
    zl_msg_t m;
    static const struct {
        zl_admin_op_t op;
        int variant;
        const char *name;
    } ops[] = {{ZL_ADMIN_STATS, 0, "stats"},
               {ZL_ADMIN_DLQ_LIST, 0, "dlq-list"},
               {ZL_ADMIN_DLQ_LIST, 5, "dlq-list-page"},
               {ZL_ADMIN_DLQ_LIST, 2, "dlq-list-lane"},
               {ZL_ADMIN_DLQ_SHOW, 0, "dlq-show"},
               {ZL_ADMIN_DLQ_REDRIVE, 1, "redrive-all"},
               {ZL_ADMIN_DLQ_REDRIVE, 4, "redrive-ids"},
               {ZL_ADMIN_DLQ_PURGE, 3, "purge-tenant"},
               {ZL_ADMIN_DLQ_PURGE, 0, "purge-unnarrowed"},
               {ZL_ADMIN_PAUSE, 0, "pause"},
               {ZL_ADMIN_PAUSE, 6, "pause-unknown"},
               {ZL_ADMIN_NONE, 0, "no-op"}};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        b->len = 0;
        m = s_admin (ops[i].op, ops[i].variant);
        s_record (b, PEER (i % 3) | PATCH, NULL, &m);
        m = s_admin (ZL_ADMIN_STATS, 0);
        s_record (b, PEER (0) | ADVANCE (3), NULL, &m);
        s_write (dir, ops[i].name, b->data, b->len);
    }
    b->len = 0; // pause, time passes, resume, stats
    m = s_admin (ZL_ADMIN_PAUSE, 0);
    s_record (b, PEER (0), NULL, &m);
    m = s_admin (ZL_ADMIN_STATS, 0);
    s_record (b, PEER (1) | ADVANCE (6), NULL, &m);
    m = s_admin (ZL_ADMIN_RESUME, 0);
    s_record (b, PEER (0), NULL, &m);
    m = s_admin (ZL_ADMIN_DLQ_LIST, 1);
    s_record (b, LITERAL, "ops", &m);
    s_write (dir, "pause-resume", b->data, b->len);

    b->len = 0; // names that are not text, and filters that name nothing
    m = s_admin (ZL_ADMIN_DLQ_LIST, 0);
    m.u.admin_request.filter.tenant = "acme\x01"
                                      "evil";
    s_record_nul (b, PEER (0), &m);
    m = s_admin (ZL_ADMIN_PAUSE, 0);
    m.u.admin_request.lane = "\xff";
    s_record (b, PEER (0), NULL, &m);
    m = s_admin (ZL_ADMIN_DLQ_PURGE, 0);
    m.u.admin_request.filter.lane = "nolane";
    s_record (b, PEER (1), NULL, &m);
    static uint64_t unknown_ids[2] = {987654, 1};
    m = s_admin (ZL_ADMIN_DLQ_REDRIVE, 0);
    m.u.admin_request.filter.n_ids = 2;
    m.u.admin_request.filter.ids = unknown_ids;
    s_record (b, PEER (1), NULL, &m);
    s_write (dir, "bad-text", b->data, b->len);
    free (b);
}

// ---------------------------------------------------------------- ZMTP
#define ZPEER_RNG 42 // the peer engine's stream at each seed's start

static fz_keys_t s_keys;
static fz_rng_t s_engine_rng, s_peer_rng;

//  An engine set up as fuzz_zmtp's for `mode` (its random bytes drawn from
//  the stream the harness resets at every input) and the peer that talks
//  to it. What the peer sends the engine is the input, after `mode`.
typedef struct {
    zl_zmtp_t *engine, *peer;
    buf_t *b;
} zpair_t;

static void
s_zput (zpair_t *p, const void *data, size_t len)
{
    if (p->b->len + len > sizeof p->b->data) {
        fprintf (stderr, "make_corpus: ZMTP seed too long\n");
        exit (1);
    }
    memcpy (p->b->data + p->b->len, data, len);
    p->b->len += len;
}

static zpair_t
s_zpair (uint8_t mode, const zl_zmtp_opts_t *peer_opts)
{
    zpair_t p = {.b = calloc (1, sizeof (buf_t))};
    s_engine_rng.state = FZ_SEED_RNG;
    s_peer_rng.state = ZPEER_RNG;
    zl_zmtp_opts_t o = fz_opts (mode, &s_keys, fz_auth);
    fz_rng_current = &s_engine_rng;
    p.engine = zl_zmtp_new (&o);
    fz_rng_current = &s_peer_rng;
    p.peer = zl_zmtp_new (peer_opts);
    if (!p.engine || !p.peer)
        exit (1);
    s_zput (&p, &mode, 1);
    return p;
}

//  Parse all that `z` holds, with its own random bytes.
static void
s_zparse (zl_zmtp_t *z, fz_rng_t *rng)
{
    fz_rng_current = rng;
    zl_zmtp_frame_t f;
    zl_zmtp_rc_t rc;
    while ((rc = zl_zmtp_next (z, &f)) != ZL_ZMTP_AGAIN && rc != ZL_ZMTP_ERROR)
        ;
}

//  Move what `from` queued into `to`; `record`: it goes into the input too.
static size_t
s_zmove (zpair_t *p, zl_zmtp_t *from, zl_zmtp_t *to, fz_rng_t *rng, bool record)
{
    const uint8_t *data;
    size_t n = zl_zmtp_out (from, &data), room;
    if (!n)
        return 0;
    if (record)
        s_zput (p, data, n);
    memcpy (zl_zmtp_in_space (to, n, &room), data, n);
    zl_zmtp_in_commit (to, n);
    zl_zmtp_sent (from, n);
    s_zparse (to, rng);
    return n;
}

//  Both ways until neither sends: the handshake, the peer's frames.
static void
s_zshuttle (zpair_t *p)
{
    while (s_zmove (p, p->peer, p->engine, &s_engine_rng, true) +
               s_zmove (p, p->engine, p->peer, &s_peer_rng, false) >
           0)
        ;
}

static void
s_zwrite (zpair_t *p, const char *name)
{
    s_write ("fuzz_zmtp", name, p->b->data, p->b->len);
}

static void
s_zfree (zpair_t *p)
{
    zl_zmtp_destroy (&p->engine);
    zl_zmtp_destroy (&p->peer);
    free (p->b);
}

//  The peer's frames after the handshake: a two-part message, an empty
//  frame, a long one (a LONG header), a PING; `n_small` short ones more.
static void
s_zframes (zpair_t *p, int n_small)
{
    static uint8_t big[300];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (uint8_t)i;
    zl_zmtp_send (p->peer, "hello", 5, true);
    zl_zmtp_send (p->peer, "world", 5, false);
    zl_zmtp_send (p->peer, "", 0, false);
    zl_zmtp_send (p->peer, big, sizeof big, false);
    zl_zmtp_ping (p->peer, 3000);
    for (int i = 0; i < n_small; i++)
        zl_zmtp_send (p->peer, "job", 3, i % 2 == 0);
    s_zshuttle (p);
}

static zl_zmtp_opts_t
s_zpeer (bool server, bool curve, bool stranger)
{
    zl_zmtp_opts_t o = {.server = server, .socket_type = server ? "ROUTER" : "DEALER"};
    if (!curve)
        return o;
    o.curve = true;
    if (server) {
        memcpy (o.public_key, s_keys.server_public, ZL_ZMTP_KEY);
        memcpy (o.secret_key, s_keys.server_secret, ZL_ZMTP_KEY);
    } else {
        memcpy (o.public_key, stranger ? s_keys.stranger_public : s_keys.client_public,
                ZL_ZMTP_KEY);
        memcpy (o.secret_key, stranger ? s_keys.stranger_secret : s_keys.client_secret,
                ZL_ZMTP_KEY);
        memcpy (o.server_key, s_keys.server_public, ZL_ZMTP_KEY);
    }
    return o;
}

//  A whole session with the engine in `mode`: handshake, then frames.
static void
s_zsession (uint8_t mode, int n_small, const char *name)
{
    zl_zmtp_opts_t o = s_zpeer (mode & FZ_CLIENT ? true : false, mode & FZ_CURVE, false);
    zpair_t p = s_zpair (mode, &o);
    s_zshuttle (&p);
    if (!zl_zmtp_ready (p.engine) || !zl_zmtp_ready (p.peer)) {
        fprintf (stderr, "make_corpus: the ZMTP handshake of %s did not end\n", name);
        exit (1);
    }
    s_zframes (&p, n_small);
    s_zwrite (&p, name);
    s_zfree (&p);
}

//  A peer's greeting: ZMTP 3.`minor`, `mechanism`.
static void
s_zgreeting (zpair_t *p, uint8_t minor, const char *mechanism, bool as_server)
{
    uint8_t g[64] = {0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 3, minor};
    memcpy (g + 12, mechanism, strlen (mechanism));
    g[32] = as_server;
    s_zput (p, g, sizeof g);
}

//  A command frame (a short one): name, then `data`.
static void
s_zcommand (zpair_t *p, const char *name, const void *data, size_t len)
{
    uint8_t h[2] = {0x04, (uint8_t)(1 + strlen (name) + len)}, n = (uint8_t)strlen (name);
    s_zput (p, h, 2);
    s_zput (p, &n, 1);
    s_zput (p, name, n);
    s_zput (p, data, len);
}

//  A metadata property.
static size_t
s_zprop (uint8_t *at, const char *name, const char *value)
{
    size_t n = strlen (name), v = strlen (value);
    at[0] = (uint8_t)n;
    memcpy (at + 1, name, n);
    at[1 + n] = at[2 + n] = at[3 + n] = 0;
    at[4 + n] = (uint8_t)v;
    memcpy (at + 5 + n, value, v);
    return 5 + n + v;
}

//  The precomputed key of a CURVE session (the engine's and the peer's),
//  from the transient pairs each side drew first from its stream: a client
//  at its HELLO, a server at its WELCOME.
static void
s_zprecom (bool engine_server, uint8_t precom[crypto_box_BEFORENMBYTES])
{
    uint8_t cn_public[32], cn_secret[32], sn_public[32], sn_secret[32];
    fz_rng_t replay = {engine_server ? ZPEER_RNG : FZ_SEED_RNG};
    fz_rng_current = &replay;
    crypto_box_keypair (cn_public, cn_secret);
    replay.state = engine_server ? FZ_SEED_RNG : ZPEER_RNG;
    crypto_box_keypair (sn_public, sn_secret);
    if (crypto_box_beforenm (precom, cn_public, sn_secret) != 0)
        exit (1);
}

//  A frame (`flags`) that carries a box made here, as the peer would:
//  `name` (READY, MESSAGE), the short nonce `n`, then `plain` boxed with
//  the long nonce's `prefix`. What the peer engine would never send.
static void
s_zboxed (zpair_t *p, uint8_t flags, const char *name, const char *prefix, uint64_t n,
          const void *plain, size_t len)
{
    uint8_t precom[crypto_box_BEFORENMBYTES], nonce[crypto_box_NONCEBYTES], frame[2 + 255];
    s_zprecom (!(p->b->data[0] & FZ_CLIENT), precom);
    size_t name_len = strlen (name), body = 1 + name_len + 8 + crypto_box_MACBYTES + len;
    if (body > 255)
        exit (1);
    frame[0] = flags;
    frame[1] = (uint8_t)body;
    frame[2] = (uint8_t)name_len;
    memcpy (frame + 3, name, name_len);
    uint8_t *short_nonce = frame + 3 + name_len;
    for (int i = 7; i >= 0; i--, n >>= 8)
        short_nonce[i] = (uint8_t)n;
    memcpy (nonce, prefix, 16);
    memcpy (nonce + 16, short_nonce, 8);
    if (crypto_box_easy_afternm (short_nonce + 8, plain, len, nonce, precom) != 0)
        exit (1);
    s_zput (p, frame, 2 + body);
}

static void
s_zmtp_seeds (void)
{
    fz_setup (&s_peer_rng, &s_keys);
    zl_zmtp_opts_t o;
    zpair_t p;

    // whole sessions: NULL and CURVE, both roles, some with the harness
    // sending and pinging (at least 8 reads after the handshake)
    s_zsession (0, 2, "null-server");
    s_zsession (FZ_CLIENT, 2, "null-client");
    s_zsession (FZ_CURVE, 2, "curve-server");
    s_zsession (FZ_CURVE | FZ_CLIENT, 2, "curve-client");
    s_zsession (1 << 2 | FZ_SEND | FZ_PING, 6, "null-server-bytewise-send");
    s_zsession (FZ_CLIENT | 6 << 2 | FZ_SEND | FZ_SLOW, 6, "null-client-mixed-send-slow");
    s_zsession (FZ_CURVE | 3 << 2 | FZ_SEND | FZ_PING, 6, "curve-server-send");
    s_zsession (FZ_CURVE | FZ_CLIENT | 7 << 2 | FZ_SEND | FZ_PING | FZ_SLOW, 6,
                "curve-client-send");

    // CURVE server: the HELLO alone; a client key it does not let in
    o = s_zpeer (false, true, false);
    p = s_zpair (FZ_CURVE | 5 << 2, &o);
    s_zmove (&p, p.peer, p.engine, &s_engine_rng, true); // the greeting
    s_zmove (&p, p.engine, p.peer, &s_peer_rng, false);  // ours, and the HELLO back
    s_zmove (&p, p.peer, p.engine, &s_engine_rng, true);
    s_zwrite (&p, "curve-server-hello");
    s_zfree (&p);
    o = s_zpeer (false, true, true);
    p = s_zpair (FZ_CURVE, &o);
    s_zshuttle (&p);
    s_zwrite (&p, "curve-server-stranger");
    s_zfree (&p);

    // CURVE client: a server's READY with no metadata, with a socket type
    // that does not fit
    o = s_zpeer (true, true, false);
    p = s_zpair (FZ_CURVE | FZ_CLIENT, &o);
    s_zmove (&p, p.peer, p.engine, &s_engine_rng, true); // the greeting; HELLO back
    s_zmove (&p, p.engine, p.peer, &s_peer_rng, false);  // WELCOME back
    s_zmove (&p, p.peer, p.engine, &s_engine_rng, true); // INITIATE back
    size_t at = p.b->len;
    s_zboxed (&p, 0x04, "READY", "CurveZMQREADY---", 1, "", 0);
    s_zwrite (&p, "curve-client-ready-no-metadata");
    p.b->len = at;
    uint8_t meta[128];
    size_t n = s_zprop (meta, "Socket-Type", "PUB");
    s_zboxed (&p, 0x04, "READY", "CurveZMQREADY---", 1, meta, n);
    s_zwrite (&p, "curve-client-pub");
    s_zfree (&p);

    // CURVE server, after the handshake: a box with reserved flags, a PING
    // with no TTL
    o = s_zpeer (false, true, false);
    p = s_zpair (FZ_CURVE, &o);
    s_zshuttle (&p);
    s_zboxed (&p, 0, "MESSAGE", "CurveZMQMESSAGEC", 100, "\x04x", 2);
    s_zwrite (&p, "curve-server-reserved-flags");
    s_zfree (&p);
    p = s_zpair (FZ_CURVE, &o);
    s_zshuttle (&p);
    s_zboxed (&p, 0, "MESSAGE", "CurveZMQMESSAGEC", 100, "\x02\x04PING", 6);
    s_zwrite (&p, "curve-server-short-ping");
    s_zfree (&p);

    // CURVE server: a socket type that does not fit, in the INITIATE
    o = s_zpeer (false, true, false);
    o.socket_type = "PUB";
    p = s_zpair (FZ_CURVE, &o);
    s_zshuttle (&p);
    s_zwrite (&p, "curve-server-pub");
    s_zfree (&p);

    // NULL server, by hand: an Identity and a property nobody knows
    o = s_zpeer (false, false, false);
    p = s_zpair (0, &o);
    n = s_zprop (meta, "Socket-Type", "DEALER");
    n += s_zprop (meta + n, "Identity", "worker-7");
    n += s_zprop (meta + n, "X-Whatever", "");
    s_zgreeting (&p, 1, "NULL", false);
    s_zcommand (&p, "READY", meta, n);
    s_zput (&p, "\x01\x02id\x00\x03job", 9);
    s_zcommand (&p, "PING",
                "\x00\x1e"
                "ctx",
                5);
    s_zcommand (&p, "PONG", "ctx", 3);
    s_zcommand (&p, "SUBSCRIBE", "", 0);
    s_zcommand (&p, "ERROR",
                "\x03"
                "bye",
                4);
    s_zwrite (&p, "null-server-identity");
    s_zfree (&p);

    // a ZMTP 3.0 peer: no PING (the harness's is not sent)
    p = s_zpair (FZ_SEND | FZ_PING | 2 << 2, &o);
    s_zgreeting (&p, 0, "NULL", false);
    n = s_zprop (meta, "Socket-Type", "REQ");
    s_zcommand (&p, "READY", meta, n);
    for (int i = 0; i < 8; i++)
        s_zput (&p, "\x00\x03job", 5);
    s_zwrite (&p, "null-server-zmtp30");
    s_zfree (&p);

    // frames over max_frame: one 4097 bytes long, one claiming 2^63
    p = s_zpair (0, &o);
    s_zgreeting (&p, 1, "NULL", false);
    n = s_zprop (meta, "Socket-Type", "DEALER");
    s_zcommand (&p, "READY", meta, n);
    s_zput (&p, "\x02\x00\x00\x00\x00\x00\x00\x10\x01", 9);
    s_zwrite (&p, "null-server-too-large");
    s_zfree (&p);
    p = s_zpair (FZ_CLIENT, &o);
    s_zgreeting (&p, 1, "NULL", true);
    n = s_zprop (meta, "Socket-Type", "ROUTER");
    s_zcommand (&p, "READY", meta, n);
    s_zput (&p, "\x06\x80\x00\x00\x00\x00\x00\x00\x00", 9);
    s_zwrite (&p, "null-client-huge-command");
    s_zfree (&p);

    // refusals: a socket type that does not fit, an ERROR for a handshake,
    // CURVE against NULL, an old peer
    p = s_zpair (0, &o);
    s_zgreeting (&p, 1, "NULL", false);
    n = s_zprop (meta, "Socket-Type", "PUB");
    s_zcommand (&p, "READY", meta, n);
    s_zwrite (&p, "null-server-pub");
    s_zfree (&p);
    p = s_zpair (FZ_CURVE | FZ_CLIENT, &o);
    s_zgreeting (&p, 1, "CURVE", true);
    s_zcommand (&p, "ERROR",
                "\x03"
                "400",
                4);
    s_zwrite (&p, "curve-client-refused");
    s_zfree (&p);
    p = s_zpair (0, &o);
    s_zgreeting (&p, 1, "CURVE", false);
    s_zwrite (&p, "null-server-curve-peer");
    s_zfree (&p);
    p = s_zpair (4 << 2, &o);
    s_zput (&p, "\xff\x00\x00\x00\x00\x00\x00\x00\x01\x7f\x02\x00", 12);
    s_zwrite (&p, "null-server-zmtp2");
    s_zfree (&p);
}

int
main (int argc, char **argv)
{
    if (argc != 2) {
        fprintf (stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    s_root = argv[1];
    s_mkdir (s_root);
    s_codec = zl_codec_new ();
    s_envelopes ();
    s_frontend ();
    s_backend ();
    s_admin_seqs ();
    s_zmtp_seeds ();
    zl_codec_destroy (&s_codec);
    printf ("make_corpus: wrote the seed corpus to %s\n", s_root);
    return 0;
}
