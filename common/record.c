#include "record.h"

#include "text.h"

#include "zlane_store.pb-c.h"

#include <string.h>

#define S(x) ((char *)((x) ? (x) : ""))

static void *
s_alloc (void *data, size_t size)
{
    return zl_arena_alloc ((zl_arena_t *)data, size);
}

static void
s_free (void *data, void *ptr)
{
    (void)data;
    (void)ptr;
}

static Zlane__Store__V1__BatchRec *
s_batch_prepare (zl_arena_t *a, const zl_batch_rec_t *r)
{
    if (!r)
        return NULL;
    Zlane__Store__V1__BatchRec *m = zl_arena_alloc (a, sizeof *m);
    zlane__store__v1__batch_rec__init (m);
    m->closed = r->closed;
    m->joined = r->joined;
    m->n_lost_dead = r->n_lost_dead;
    m->lost_dead = (uint64_t *)r->lost_dead;
    m->n_lost_cancelled = r->n_lost_cancelled;
    m->lost_cancelled = (uint64_t *)r->lost_cancelled;
    m->opened_at_ms = r->opened_at_ms;
    m->closed_at_ms = r->closed_at_ms;
    m->acked = r->acked;
    m->dead = r->dead;
    m->cancelled = r->cancelled;
    m->n_failed = r->n_failed;
    m->failed = (uint64_t *)r->failed;
    m->failed_more = r->failed_more;
    m->settled_at_ms = r->settled_at_ms;
    return m;
}

static const zl_batch_rec_t *
s_batch_decode (zl_arena_t *a, const Zlane__Store__V1__BatchRec *m)
{
    if (!m)
        return NULL;
    zl_batch_rec_t *r = zl_arena_alloc (a, sizeof *r);
    *r = (zl_batch_rec_t){.closed = m->closed,
                          .joined = m->joined,
                          .n_lost_dead = m->n_lost_dead,
                          .lost_dead = m->lost_dead,
                          .n_lost_cancelled = m->n_lost_cancelled,
                          .lost_cancelled = m->lost_cancelled,
                          .opened_at_ms = m->opened_at_ms,
                          .closed_at_ms = m->closed_at_ms,
                          .acked = m->acked,
                          .dead = m->dead,
                          .cancelled = m->cancelled,
                          .n_failed = m->n_failed,
                          .failed = m->failed,
                          .failed_more = m->failed_more,
                          .settled_at_ms = m->settled_at_ms};
    return r;
}

size_t
zl_record_job_prepare (zl_arena_t *a, const zl_job_rec_t *r, void **handle)
{
    Zlane__Store__V1__JobRec *m = zl_arena_alloc (a, sizeof *m);
    zlane__store__v1__job_rec__init (m);
    m->tenant = S (r->tenant);
    m->lane = S (r->lane);
    m->payload.data = (uint8_t *)r->payload.data;
    m->payload.len = r->payload.len;
    m->idempotency_key = S (r->idempotency_key);
    m->n_headers = r->n_headers;
    if (r->n_headers) {
        m->headers = zl_arena_alloc (a, r->n_headers * sizeof (void *));
        Zlane__Store__V1__HeaderRec *h = zl_arena_alloc (a, r->n_headers * sizeof *h);
        for (size_t i = 0; i < r->n_headers; i++) {
            zlane__store__v1__header_rec__init (&h[i]);
            h[i].key = S (r->headers[i].key);
            h[i].value = S (r->headers[i].value);
            m->headers[i] = &h[i];
        }
    }
    m->max_attempts = r->max_attempts;
    m->lease_ms = r->lease_ms;
    m->max_run_ms = r->max_run_ms;
    m->enqueued_at_ms = r->enqueued_at_ms;
    m->n_depends_on = r->n_depends_on;
    m->depends_on = (uint64_t *)r->depends_on;
    m->batch = S (r->batch);
    m->batch_self = S (r->batch_self);
    m->batch_no_callback = r->batch_no_callback;
    m->batch_summary = s_batch_prepare (a, r->batch_summary);
    m->deadline_ms = r->deadline_ms;
    m->ordering_key = S (r->ordering_key);
    if (r->schedule) {
        Zlane__Store__V1__ScheduleRec *sr = zl_arena_alloc (a, sizeof *sr);
        zlane__store__v1__schedule_rec__init (sr);
        sr->name = S (r->schedule->name);
        sr->cron = S (r->schedule->cron);
        sr->catch_up = r->schedule->catch_up;
        sr->catch_up_max = r->schedule->catch_up_max;
        sr->created_at_ms = r->schedule->created_at_ms;
        m->schedule = sr;
    }
    if (r->priority_plus1) {
        m->priority_given_case = ZLANE__STORE__V1__JOB_REC__PRIORITY_GIVEN_PRIORITY;
        m->priority = r->priority_plus1 - 1;
    }
    *handle = m;
    return zlane__store__v1__job_rec__get_packed_size (m);
}

size_t
zl_record_state_prepare (zl_arena_t *a, const zl_state_rec_t *r, void **handle)
{
    Zlane__Store__V1__StateRec *m = zl_arena_alloc (a, sizeof *m);
    zlane__store__v1__state_rec__init (m);
    m->state = r->state;
    m->attempt = r->attempt;
    m->ready_seq = r->ready_seq;
    m->due_at_ms = r->due_at_ms;
    m->dead_at_ms = r->dead_at_ms;
    m->n_history = r->n_history;
    if (r->n_history) {
        m->history = zl_arena_alloc (a, r->n_history * sizeof (void *));
        Zlane__Store__V1__AttemptRec *h = zl_arena_alloc (a, r->n_history * sizeof *h);
        for (size_t i = 0; i < r->n_history; i++) {
            const zl_attempt_t *t = &r->history[i];
            zlane__store__v1__attempt_rec__init (&h[i]);
            h[i].attempt = t->attempt;
            h[i].worker = S (t->worker);
            h[i].started_at_ms = (int64_t)t->started_at_ms;
            h[i].ended_at_ms = (int64_t)t->ended_at_ms;
            h[i].outcome = t->outcome;
            h[i].error = S (t->error);
            m->history[i] = &h[i];
        }
    }
    m->leased_to = S (r->leased_to);
    m->started_at_ms = r->started_at_ms;
    m->cancelled_at_ms = r->cancelled_at_ms;
    m->cancelled_from = r->cancelled_from;
    m->result.data = (uint8_t *)r->result.data;
    m->result.len = r->result.len;
    m->done_at_ms = r->done_at_ms;
    m->failed_parent = r->failed_parent;
    m->batch = s_batch_prepare (a, r->batch);
    m->order_seq = r->order_seq;
    m->ordering_head = r->ordering_head;
    m->checkpoint.data = (uint8_t *)r->checkpoint.data;
    m->checkpoint.len = r->checkpoint.len;
    m->schedule_last_tick_ms = r->schedule_last_tick_ms;
    m->schedule_paused = r->schedule_paused;
    *handle = m;
    return zlane__store__v1__state_rec__get_packed_size (m);
}

size_t
zl_record_write (void *handle, uint8_t *out)
{
    return protobuf_c_message_pack ((const ProtobufCMessage *)handle, out);
}

// A stored string as text: records written before the broker checked its
// input may hold invalid UTF-8, which must not reach a reply (text.h).
static const char *
s_text (zl_arena_t *arena, const char *s)
{
    return zl_text_repair (arena, s, strlen (s));
}

int
zl_record_job_decode (zl_arena_t *arena, const void *data, size_t len, zl_job_rec_t *out)
{
    ProtobufCAllocator alloc = {s_alloc, s_free, arena};
    Zlane__Store__V1__JobRec *m =
        zlane__store__v1__job_rec__unpack (&alloc, len, (const uint8_t *)data);
    if (!m)
        return -1;
    memset (out, 0, sizeof *out);
    out->tenant = s_text (arena, m->tenant);
    out->lane = s_text (arena, m->lane);
    out->payload = (zl_bytes_t){m->payload.data, m->payload.len};
    out->idempotency_key = s_text (arena, m->idempotency_key);
    out->n_headers = m->n_headers;
    out->headers = zl_arena_alloc (arena, (m->n_headers + 1) * sizeof (zl_header_t));
    for (size_t i = 0; i < m->n_headers; i++)
        out->headers[i] =
            (zl_header_t){s_text (arena, m->headers[i]->key), s_text (arena, m->headers[i]->value)};
    out->max_attempts = m->max_attempts;
    out->lease_ms = m->lease_ms;
    out->max_run_ms = m->max_run_ms;
    out->enqueued_at_ms = m->enqueued_at_ms;
    out->n_depends_on = m->n_depends_on;
    out->depends_on = m->depends_on;
    out->batch = s_text (arena, m->batch);
    out->batch_self = s_text (arena, m->batch_self);
    out->batch_no_callback = m->batch_no_callback;
    out->batch_summary = s_batch_decode (arena, m->batch_summary);
    out->deadline_ms = m->deadline_ms;
    out->ordering_key = s_text (arena, m->ordering_key);
    out->schedule = NULL;
    if (m->schedule) {
        zl_schedule_rec_t *sr = zl_arena_alloc (arena, sizeof *sr);
        *sr = (zl_schedule_rec_t){s_text (arena, m->schedule->name),
                                  s_text (arena, m->schedule->cron), m->schedule->catch_up,
                                  m->schedule->catch_up_max, m->schedule->created_at_ms};
        out->schedule = sr;
    }
    out->priority_plus1 =
        m->priority_given_case == ZLANE__STORE__V1__JOB_REC__PRIORITY_GIVEN_PRIORITY &&
                m->priority <= ZL_PRIORITY_MAX
            ? m->priority + 1
            : 0;
    return 0;
}

int
zl_record_state_decode (zl_arena_t *arena, const void *data, size_t len, zl_state_rec_t *out)
{
    ProtobufCAllocator alloc = {s_alloc, s_free, arena};
    Zlane__Store__V1__StateRec *m =
        zlane__store__v1__state_rec__unpack (&alloc, len, (const uint8_t *)data);
    if (!m)
        return -1;
    memset (out, 0, sizeof *out);
    out->state = m->state;
    out->attempt = m->attempt;
    out->ready_seq = m->ready_seq;
    out->due_at_ms = m->due_at_ms;
    out->dead_at_ms = m->dead_at_ms;
    out->n_history = m->n_history;
    out->history = zl_arena_alloc (arena, (m->n_history + 1) * sizeof (zl_attempt_t));
    for (size_t i = 0; i < m->n_history; i++) {
        const Zlane__Store__V1__AttemptRec *t = m->history[i];
        out->history[i] = (zl_attempt_t){t->attempt,
                                         s_text (arena, t->worker),
                                         (uint64_t)t->started_at_ms,
                                         (uint64_t)t->ended_at_ms,
                                         (zl_outcome_t)t->outcome,
                                         s_text (arena, t->error)};
    }
    out->leased_to = s_text (arena, m->leased_to);
    out->started_at_ms = m->started_at_ms;
    out->cancelled_at_ms = m->cancelled_at_ms;
    out->cancelled_from = m->cancelled_from;
    out->result = (zl_bytes_t){m->result.data, m->result.len};
    out->done_at_ms = m->done_at_ms;
    out->failed_parent = m->failed_parent;
    out->batch = s_batch_decode (arena, m->batch);
    out->order_seq = m->order_seq;
    out->ordering_head = m->ordering_head;
    out->checkpoint = (zl_bytes_t){m->checkpoint.data, m->checkpoint.len};
    out->schedule_last_tick_ms = m->schedule_last_tick_ms;
    out->schedule_paused = m->schedule_paused;
    return 0;
}

size_t
zl_record_idem_encode (const zl_idem_rec_t *rec, uint8_t *out)
{
    Zlane__Store__V1__IdemRec m = ZLANE__STORE__V1__IDEM_REC__INIT;
    m.job_id = rec->job_id;
    m.seen_at_ms = rec->seen_at_ms;
    return zlane__store__v1__idem_rec__pack (&m, out);
}

int
zl_record_idem_decode (const void *data, size_t len, zl_idem_rec_t *out)
{
    Zlane__Store__V1__IdemRec *m =
        zlane__store__v1__idem_rec__unpack (NULL, len, (const uint8_t *)data);
    if (!m)
        return -1;
    out->job_id = m->job_id;
    out->seen_at_ms = m->seen_at_ms;
    out->generated = false; // formats 1 and 2 did not tell
    zlane__store__v1__idem_rec__free_unpacked (m, NULL);
    return 0;
}
