/*  pending: a ring of job records indexed by seq (seq & mask), holding every
    seq in [first, end). `first` moves up as the lowest jobs leave, so the
    ring's size follows the spread between the oldest unfinished job and the
    newest, never the total submitted. */
#include "pending.h"

#include "zl_alloc.h"

#include <stdlib.h>
#include <string.h>

#define S_INITIAL_SLOTS 1024 // power of two

struct _zl_pending_t {
    zl_pending_job_t **slots;
    uint64_t mask;  // slot count - 1
    uint64_t first; // no job below this seq
    uint64_t end;   // one past the highest seq inserted
    size_t size;    // jobs held
};

// ---------------------------------------------------------------- job record

//  Copy `len` bytes to *cursor (with a NUL after them) and advance it.
static char *
s_put (char **cursor, const void *data, size_t len)
{
    char *out = *cursor;
    if (len)
        memcpy (out, data, len);
    out[len] = '\0';
    *cursor += len + 1;
    return out;
}

static size_t
s_len (const char *s)
{
    return s ? strlen (s) : 0;
}

zl_pending_job_t *
zl_pending_job_new (const zl_producer_job_t *job, uint64_t seq, const char *key, uint64_t batch_seq)
{
    bool auto_key = !job->idempotency_key || !*job->idempotency_key;
    const char *use_key = auto_key ? key : job->idempotency_key;

    //  One block: the record, the header array, then every string and the
    //  payload, each followed by a NUL.
    size_t bytes = sizeof (zl_pending_job_t) + job->n_headers * sizeof (zl_header_t) +
                   (job->n_depends_on + job->n_parents_in_batch) * sizeof (uint64_t);
    bytes += s_len (job->tenant) + 1 + s_len (job->lane) + 1 + s_len (use_key) + 1;
    bytes += job->payload_len + 1;
    bytes += s_len (job->batch) + 1 + s_len (job->open_batch_id) + 1;
    bytes += s_len (job->ordering_key) + 1;
    for (size_t i = 0; i < job->n_headers; i++)
        bytes += s_len (job->headers[i].key) + 1 + s_len (job->headers[i].value) + 1;

    zl_pending_job_t *self = zl_calloc (1, bytes);
    uint64_t *parents = (uint64_t *)(self->headers + job->n_headers);
    if (job->n_depends_on)
        memcpy (parents, job->depends_on, job->n_depends_on * sizeof (uint64_t));
    self->spec.n_depends_on = job->n_depends_on;
    self->spec.depends_on = job->n_depends_on ? parents : NULL;
    uint64_t *seqs = parents + job->n_depends_on;
    for (size_t i = 0; i < job->n_parents_in_batch; i++)
        seqs[i] = batch_seq + job->parents_in_batch[i];
    self->spec.n_depends_on_seq = job->n_parents_in_batch;
    self->spec.depends_on_seq = job->n_parents_in_batch ? seqs : NULL;
    char *cursor = (char *)(seqs + job->n_parents_in_batch);
    self->spec.seq = seq;
    self->spec.tenant = s_put (&cursor, job->tenant, s_len (job->tenant));
    self->spec.lane = s_put (&cursor, job->lane, s_len (job->lane));
    self->spec.idempotency_key = s_put (&cursor, use_key, s_len (use_key));
    self->spec.payload.data = (const uint8_t *)s_put (&cursor, job->payload, job->payload_len);
    self->spec.payload.len = job->payload_len;
    self->spec.delay_ms = job->delay_ms;
    self->spec.max_attempts = job->max_attempts;
    self->spec.lease_ms = job->lease_ms;
    self->spec.max_run_ms = job->max_run_ms;
    self->spec.batch = s_put (&cursor, job->batch, s_len (job->batch));
    self->spec.open_batch = job->open_batch;
    self->spec.open_batch_id = s_put (&cursor, job->open_batch_id, s_len (job->open_batch_id));
    self->spec.batch_no_callback = job->batch_no_callback;
    self->spec.batch_close = job->batch_close;
    self->spec.has_priority = job->has_priority;
    self->spec.deadline_ms = job->deadline_ms;
    self->spec.max_age_ms = job->max_age_ms;
    self->spec.priority = job->priority;
    self->spec.ordering_key = s_put (&cursor, job->ordering_key, s_len (job->ordering_key));
    for (size_t i = 0; i < job->n_headers; i++) {
        const zl_header_t *h = &job->headers[i];
        self->headers[i].key = s_put (&cursor, h->key, s_len (h->key));
        self->headers[i].value = s_put (&cursor, h->value, s_len (h->value));
    }
    self->spec.n_headers = job->n_headers;
    self->spec.headers = job->n_headers ? self->headers : NULL;
    self->auto_key = auto_key;
    self->spec.generated_key = auto_key; // the broker keeps it for the resend window only
    self->state = ZL_PENDING_QUEUED;
    return self;
}

void
zl_pending_job_destroy (zl_pending_job_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_pending_job_t *self = *self_p;
    free (self->reason);
    free (self->batch_id);
    free (self);
    *self_p = NULL;
}

void
zl_pending_job_set_reason (zl_pending_job_t *self, const char *reason)
{
    free (self->reason);
    self->reason = reason && *reason ? zl_strdup (reason) : NULL;
}

// ---------------------------------------------------------------- table

zl_pending_t *
zl_pending_new (void)
{
    zl_pending_t *self = ZL_NEW (zl_pending_t);
    self->slots = zl_calloc (S_INITIAL_SLOTS, sizeof *self->slots);
    self->mask = S_INITIAL_SLOTS - 1;
    self->first = 1;
    self->end = 1;
    return self;
}

void
zl_pending_destroy (zl_pending_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_pending_t *self = *self_p;
    for (uint64_t seq = self->first; seq < self->end; seq++)
        zl_pending_job_destroy (&self->slots[seq & self->mask]);
    free (self->slots);
    free (self);
    *self_p = NULL;
}

//  Double the ring until [first, seq] fits, re-placing every held job.
static void
s_grow (zl_pending_t *self, uint64_t seq)
{
    uint64_t slots = self->mask + 1;
    while (seq - self->first >= slots)
        slots *= 2;
    zl_pending_job_t **grown = zl_calloc (slots, sizeof *grown);
    for (uint64_t s = self->first; s < self->end; s++)
        grown[s & (slots - 1)] = self->slots[s & self->mask];
    free (self->slots);
    self->slots = grown;
    self->mask = slots - 1;
}

void
zl_pending_insert (zl_pending_t *self, zl_pending_job_t *job)
{
    uint64_t seq = job->spec.seq;
    if (self->size == 0)
        self->first = seq; // an empty table may jump forward
    if (seq - self->first > self->mask)
        s_grow (self, seq);
    self->slots[seq & self->mask] = job;
    self->end = seq + 1;
    self->size++;
}

zl_pending_job_t *
zl_pending_get (zl_pending_t *self, uint64_t seq)
{
    if (seq < self->first || seq >= self->end)
        return NULL;
    return self->slots[seq & self->mask];
}

zl_pending_job_t *
zl_pending_remove (zl_pending_t *self, uint64_t seq)
{
    zl_pending_job_t *job = zl_pending_get (self, seq);
    if (!job)
        return NULL;
    self->slots[seq & self->mask] = NULL;
    self->size--;
    while (self->first < self->end && !self->slots[self->first & self->mask])
        self->first++;
    return job;
}

size_t
zl_pending_size (zl_pending_t *self)
{
    return self->size;
}

uint64_t
zl_pending_first (zl_pending_t *self)
{
    return self->first;
}

uint64_t
zl_pending_end (zl_pending_t *self)
{
    return self->end;
}
