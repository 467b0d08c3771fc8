/*  codec: the one place where zlane messages meet protobuf-c.
    Decode: unpack the Envelope into the decode arena (protobuf-c allocates
    through it), then translate to msg.h types in the same arena. Encode:
    translate msg.h types to protobuf-c structs in the encode arena, pack. */
#include "codec.h"

#include "arena.h"
#include "text.h"
#include "zl_alloc.h"
#include "zlane.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct _zl_codec_t {
    zl_arena_t *dec; // decoded protobuf structs and zl_msg_t arrays
    zl_arena_t *enc; // encode scratch and the packed output
    ProtobufCAllocator allocator;
    const char *error; // why the last decode was ZL_DECODE_BAD_TEXT (in dec)
    bool strict;       // debug builds: abort on encoding a string that is not text
    zl_codec_tap_fn *tap;
    void *tap_arg;
};

static void *
s_arena_alloc (void *data, size_t size)
{
    return zl_arena_alloc ((zl_arena_t *)data, size);
}

static void
s_arena_free (void *data, void *ptr)
{
    (void)data;
    (void)ptr; // freed all at once by zl_arena_reset
}

zl_codec_t *
zl_codec_new (void)
{
    zl_codec_t *self = ZL_NEW (zl_codec_t);
    self->dec = zl_arena_new (64 * 1024);
    self->enc = zl_arena_new (64 * 1024);
    self->allocator.alloc = s_arena_alloc;
    self->allocator.free = s_arena_free;
    self->allocator.allocator_data = self->dec;
    return self;
}

void
zl_codec_destroy (zl_codec_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_codec_t *self = *self_p;
    zl_arena_destroy (&self->dec);
    zl_arena_destroy (&self->enc);
    free (self);
    *self_p = NULL;
}

void
zl_codec_set_tap (zl_codec_t *self, zl_codec_tap_fn *fn, void *arg)
{
    self->tap = fn;
    self->tap_arg = arg;
}

void
zl_codec_set_strict (zl_codec_t *self, bool strict)
{
    self->strict = strict;
}

zl_arena_t *
zl_codec_scratch (zl_codec_t *self)
{
    return self->dec;
}

// ---------------------------------------------------------------- names
const char *
zl_msg_kind_name (zl_msg_kind_t kind)
{
    static const char *names[ZL_MSG_KIND_COUNT] = {
        "none",    "hello",     "submit",      "accepted",  "rejected",      "credit",
        "ready",   "heartbeat", "extend",      "ack",       "nack",          "dispatch",
        "settled", "error",     "dead_letter", "dlq_alert", "admin_request", "admin_reply",
        "cancel",  "watch",     "outcome",     "job_done",  "batch_done",    "breaker"};
    return (unsigned)kind < ZL_MSG_KIND_COUNT ? names[kind] : "unknown";
}

const char *
zl_reject_code_name (zl_reject_code_t code)
{
    static const char *names[ZL_REJECT_CODE_COUNT] = {
        "unspecified", "invalid",      "payload_too_large", "unknown_lane", "queue_full",
        "store_full",  "unauthorized", "shutting_down",     "unavailable",  "unknown_parent",
        "cycle",       "fan_in",       "unknown_batch",     "batch_closed", "batch_exists"};
    return (unsigned)code < ZL_REJECT_CODE_COUNT ? names[code] : "unknown";
}

const char *
zl_error_code_name (zl_error_code_t code)
{
    static const char *names[ZL_ERR_CODE_COUNT] = {
        "unspecified", "bad_frame",        "bad_version", "unknown_kind",        "invalid",
        "unknown_job", "stale_lease",      "not_ready",   "unknown_lane",        "unauthorized",
        "not_found",   "internal",         "max_run",     "not_holder",          "not_leader",
        "unavailable", "result_too_large", "cancelled",   "checkpoint_too_large"};
    return (unsigned)code < ZL_ERR_CODE_COUNT && names[code] ? names[code] : "unknown";
}

const char *
zl_fail_class_name (zl_fail_class_t cls)
{
    switch (cls) {
    case ZL_FAIL_THROTTLED: return "throttled";
    case ZL_FAIL_PERMANENT: return "permanent";
    case ZL_FAIL_NOT_YET: return "not_yet";
    default: return "transient";
    }
}

const char *
zl_outcome_name (zl_outcome_t outcome)
{
    static const char *names[ZL_OUTCOME_COUNT] = {
        "unspecified",   "acked",         "transient", "throttled",      "permanent",
        "lease_expired", "worker_dead",   "max_run",   "broker_restart", "leader_change",
        "cancelled",     "parent_failed", "not_yet",   "expired"};
    return (unsigned)outcome < ZL_OUTCOME_COUNT ? names[outcome] : "unknown";
}

const char *
zl_cancel_outcome_name (zl_cancel_outcome_t outcome)
{
    static const char *names[ZL_CANCEL_OUTCOME_COUNT] = {
        "unspecified", "cancelled", "already_cancelled", "finished", "unknown"};
    return (unsigned)outcome < ZL_CANCEL_OUTCOME_COUNT ? names[outcome] : "unknown";
}

// ---------------------------------------------------------------- decode
#define ARR(a, n, type) ((type *)zl_arena_calloc ((a), (n) ? (n) : 1, sizeof (type)))

static zl_lease_ref_t *
s_dec_lease_refs (zl_arena_t *a, Zlane__V1__LeaseRef *const *in, size_t n)
{
    zl_lease_ref_t *out = ARR (a, n, zl_lease_ref_t);
    for (size_t i = 0; i < n; i++)
        out[i] = (zl_lease_ref_t){in[i]->job_id, in[i]->lease};
    return out;
}

static zl_bytes_t
s_bytes (ProtobufCBinaryData b)
{
    zl_bytes_t out = {b.data, b.len};
    return out;
}

static zl_header_t *
s_dec_headers (zl_arena_t *a, size_t n, Zlane__V1__Header **in)
{
    zl_header_t *out = ARR (a, n, zl_header_t);
    for (size_t i = 0; i < n; i++) {
        out[i].key = in[i]->key;
        out[i].value = in[i]->value;
    }
    return out;
}

static void
s_dec_filter (zl_dlq_filter_t *out, const Zlane__V1__DlqFilter *in)
{
    if (!in) {
        out->lane = out->tenant = out->error_contains = "";
        return;
    }
    out->lane = in->lane;
    out->tenant = in->tenant;
    out->n_ids = in->n_ids;
    out->ids = in->ids;
    out->all = in->all;
    out->error_contains = in->error_contains;
    out->dead_from_ms = in->dead_from_ms;
    out->dead_to_ms = in->dead_to_ms;
}

static void
s_dec_dead_letter (zl_arena_t *a, zl_dead_letter_t *out, const Zlane__V1__DeadLetter *in)
{
    out->job_id = in->job_id;
    out->tenant = in->tenant;
    out->lane = in->lane;
    out->payload = s_bytes (in->payload);
    out->idempotency_key = in->idempotency_key;
    out->enqueued_at_ms = in->enqueued_at_ms;
    out->dead_at_ms = in->dead_at_ms;
    out->error = in->error;
    out->n_attempts = in->n_attempts;
    out->attempts = ARR (a, in->n_attempts, zl_attempt_t);
    for (size_t i = 0; i < in->n_attempts; i++) {
        const Zlane__V1__Attempt *t = in->attempts[i];
        out->attempts[i] = (zl_attempt_t){
            t->attempt, t->worker, t->started_at_ms, t->ended_at_ms, (zl_outcome_t)t->outcome,
            t->error};
    }
    out->n_headers = in->n_headers;
    out->headers = s_dec_headers (a, in->n_headers, in->headers);
    out->ordering_key = in->ordering_key;
    out->ordering_head = in->ordering_head;
    out->checkpoint = s_bytes (in->checkpoint);
}

static void
s_dec_group (zl_group_stats_t *o, const Zlane__V1__GroupStats *g)
{
    *o = (zl_group_stats_t){.lane = g->lane,
                            .tenant = g->tenant,
                            .ready = g->ready,
                            .delayed = g->delayed,
                            .in_flight = g->in_flight,
                            .dlq = g->dlq,
                            .oldest_ready_age_ms = g->oldest_ready_age_ms,
                            .oldest_dlq_age_ms = g->oldest_dlq_age_ms,
                            .submitted = g->submitted,
                            .acked = g->acked,
                            .nacked_transient = g->nacked_transient,
                            .nacked_throttled = g->nacked_throttled,
                            .nacked_permanent = g->nacked_permanent,
                            .lease_expired = g->lease_expired,
                            .dead_lettered = g->dead_lettered,
                            .run_us = g->run_us,
                            .throttled = g->throttled,
                            .capped = g->capped,
                            .paused = g->paused};
}

static zl_group_stats_t *
s_dec_groups (zl_arena_t *a, size_t n, Zlane__V1__GroupStats **in)
{
    zl_group_stats_t *out = ARR (a, n, zl_group_stats_t);
    for (size_t i = 0; i < n; i++)
        s_dec_group (&out[i], in[i]);
    return out;
}

static void s_dec_breaker (zl_breaker_info_t *o, const Zlane__V1__Breaker *in);

static void
s_dec_stats (zl_arena_t *a, zl_stats_t *o, const Zlane__V1__Stats *s)
{
    o->uptime_ms = s->uptime_ms;
    o->n_counters = s->n_counters;
    o->counters = ARR (a, s->n_counters, zl_counter_t);
    for (size_t i = 0; i < s->n_counters; i++)
        o->counters[i] = (zl_counter_t){s->counters[i]->name, s->counters[i]->value};
    o->n_lanes = s->n_lanes;
    o->lanes = s_dec_groups (a, s->n_lanes, s->lanes);
    o->n_tenants = s->n_tenants;
    o->tenants = s_dec_groups (a, s->n_tenants, s->tenants);
    o->n_groups = s->n_groups;
    o->groups = s_dec_groups (a, s->n_groups, s->groups);
    o->n_latencies = s->n_latencies;
    o->latencies = ARR (a, s->n_latencies, zl_latency_t);
    for (size_t i = 0; i < s->n_latencies; i++) {
        const Zlane__V1__Latency *l = s->latencies[i];
        o->latencies[i] =
            (zl_latency_t){l->name, l->count, l->p50_us, l->p90_us, l->p99_us, l->max_us};
    }
    o->workers = s->workers;
    o->producers = s->producers;
    o->store_backend = s->store_backend;
    o->role = s->role;
    o->epoch = s->epoch;
    o->store_reachable = s->store_reachable;
    o->takeovers = s->takeovers;
    o->fenced = s->fenced;
    o->leader = s->leader;
    o->tenants_known = s->tenants_known;
    o->groups_matched = s->groups_matched;
    o->n_breakers = s->n_breakers;
    o->breakers = ARR (a, s->n_breakers, zl_breaker_info_t);
    for (size_t i = 0; i < s->n_breakers; i++)
        s_dec_breaker (&o->breakers[i], s->breakers[i]);
}

static void
s_dec_schedule (zl_arena_t *a, zl_schedule_info_t *o, const Zlane__V1__Schedule *in)
{
    *o = (zl_schedule_info_t){.name = in->name,
                              .cron = in->cron,
                              .tenant = in->tenant,
                              .lane = in->lane,
                              .payload = s_bytes (in->payload),
                              .n_headers = in->n_headers,
                              .headers = s_dec_headers (a, in->n_headers, in->headers),
                              .catch_up = in->catch_up,
                              .catch_up_max = in->catch_up_max,
                              .paused = in->paused,
                              .last_tick_ms = in->last_tick_ms,
                              .next_tick_ms = in->next_tick_ms};
}

static void
s_dec_breaker (zl_breaker_info_t *o, const Zlane__V1__Breaker *in)
{
    *o = (zl_breaker_info_t){in->lane,     (uint32_t)in->state, in->failures,
                             in->until_ms, in->probes_out,      in->opened};
}

static void
s_dec_outcome (zl_job_outcome_t *o, const Zlane__V1__JobOutcome *in)
{
    *o = (zl_job_outcome_t){.job_id = in->job_id,
                            .found = in->found,
                            .final = in->final,
                            .state = in->state,
                            .outcome = (zl_outcome_t)in->outcome,
                            .result = s_bytes (in->result),
                            .error = in->error,
                            .failed_parent = in->failed_parent,
                            .tenant = in->tenant,
                            .lane = in->lane,
                            .finished_at_ms = in->finished_at_ms,
                            .attempts = in->attempts,
                            .n_parents = in->n_parents,
                            .parents = in->parents,
                            .n_children = in->n_children,
                            .children = in->children};
}

static zl_batch_info_t *
s_dec_batch (zl_arena_t *a, const Zlane__V1__BatchInfo *in)
{
    zl_batch_info_t *o = ARR (a, 1, zl_batch_info_t);
    if (!in)
        return o;
    *o = (zl_batch_info_t){.batch_id = in->batch_id,
                           .found = in->found,
                           .tenant = in->tenant,
                           .lane = in->lane,
                           .job_id = in->job_id,
                           .callback = in->callback,
                           .closed = in->closed,
                           .settled = in->settled,
                           .cancelled = in->cancelled,
                           .jobs = in->jobs,
                           .acked = in->acked,
                           .dead = in->dead,
                           .cancelled_jobs = in->cancelled_jobs,
                           .pending = in->pending,
                           .n_failed = in->n_failed,
                           .failed = in->failed,
                           .failed_more = in->failed_more,
                           .opened_at_ms = in->opened_at_ms,
                           .closed_at_ms = in->closed_at_ms,
                           .settled_at_ms = in->settled_at_ms};
    return o;
}

static zl_decode_rc_t
s_decode_body (zl_arena_t *a, const Zlane__V1__Envelope *e, zl_msg_t *out)
{
    switch (e->body_case) {
    case ZLANE__V1__ENVELOPE__BODY_HELLO:
        out->kind = ZL_MSG_HELLO;
        out->u.hello.client = e->hello->client;
        break;
    case ZLANE__V1__ENVELOPE__BODY_SUBMIT: {
        out->kind = ZL_MSG_SUBMIT;
        const Zlane__V1__Submit *s = e->submit;
        zl_submit_t *o = &out->u.submit;
        o->n = s->n_jobs;
        o->jobs = ARR (a, s->n_jobs, zl_job_spec_t);
        for (size_t i = 0; i < s->n_jobs; i++) {
            const Zlane__V1__JobSpec *j = s->jobs[i];
            o->jobs[i] =
                (zl_job_spec_t){.seq = j->seq,
                                .tenant = j->tenant,
                                .lane = j->lane,
                                .payload = s_bytes (j->payload),
                                .idempotency_key = j->idempotency_key,
                                .delay_ms = j->delay_ms,
                                .max_attempts = j->max_attempts,
                                .lease_ms = j->lease_ms,
                                .max_run_ms = j->max_run_ms,
                                .n_headers = j->n_headers,
                                .headers = s_dec_headers (a, j->n_headers, j->headers),
                                .generated_key = j->generated_key,
                                .n_depends_on = j->n_depends_on,
                                .depends_on = j->depends_on,
                                .n_depends_on_seq = j->n_depends_on_seq,
                                .depends_on_seq = j->depends_on_seq,
                                .batch = j->batch,
                                .open_batch = j->open_batch != NULL,
                                .deadline_ms = j->deadline_ms,
                                .max_age_ms = j->max_age_ms,
                                .has_priority = j->priority_given_case ==
                                                ZLANE__V1__JOB_SPEC__PRIORITY_GIVEN_PRIORITY,
                                .priority = j->priority,
                                .ordering_key = j->ordering_key};
            if (j->open_batch) {
                o->jobs[i].open_batch_id = j->open_batch->batch_id;
                o->jobs[i].batch_no_callback = j->open_batch->no_callback;
                o->jobs[i].batch_close = j->open_batch->close;
            }
        }
        o->n_close = s->n_close_batches;
        o->close_batches = (const char **)s->close_batches;
        break;
    }
    case ZLANE__V1__ENVELOPE__BODY_ACCEPTED: {
        out->kind = ZL_MSG_ACCEPTED;
        const Zlane__V1__Accepted *s = e->accepted;
        out->u.accepted.n = s->n_jobs;
        out->u.accepted.jobs = ARR (a, s->n_jobs, zl_acceptance_t);
        for (size_t i = 0; i < s->n_jobs; i++)
            out->u.accepted.jobs[i] = (zl_acceptance_t){
                s->jobs[i]->seq, s->jobs[i]->job_id, s->jobs[i]->duplicate, s->jobs[i]->batch_id};
        out->u.accepted.n_closed = s->n_closed;
        out->u.accepted.closed = ARR (a, s->n_closed, zl_batch_closed_t);
        for (size_t i = 0; i < s->n_closed; i++)
            out->u.accepted.closed[i] =
                (zl_batch_closed_t){s->closed[i]->batch_id, s->closed[i]->ok, s->closed[i]->error};
        break;
    }
    case ZLANE__V1__ENVELOPE__BODY_REJECTED: {
        out->kind = ZL_MSG_REJECTED;
        const Zlane__V1__Rejected *s = e->rejected;
        out->u.rejected.n = s->n_jobs;
        out->u.rejected.jobs = ARR (a, s->n_jobs, zl_rejection_t);
        for (size_t i = 0; i < s->n_jobs; i++)
            out->u.rejected.jobs[i] =
                (zl_rejection_t){s->jobs[i]->seq, (zl_reject_code_t)s->jobs[i]->code,
                                 s->jobs[i]->reason, s->jobs[i]->retry_after_ms};
        break;
    }
    case ZLANE__V1__ENVELOPE__BODY_CREDIT:
        out->kind = ZL_MSG_CREDIT;
        out->u.credit.limit = e->credit->limit;
        break;
    case ZLANE__V1__ENVELOPE__BODY_READY:
        out->kind = ZL_MSG_READY;
        out->u.ready.name = e->ready->name;
        out->u.ready.n_lanes = e->ready->n_lanes;
        out->u.ready.lanes = (const char **)e->ready->lanes;
        out->u.ready.capacity = e->ready->capacity;
        out->u.ready.instance = e->ready->instance;
        out->u.ready.held_listed = e->ready->held_listed;
        out->u.ready.n_held = e->ready->n_held;
        out->u.ready.held = s_dec_lease_refs (a, e->ready->held, e->ready->n_held);
        out->u.ready.heartbeat_ms = e->ready->heartbeat_ms;
        break;
    case ZLANE__V1__ENVELOPE__BODY_HEARTBEAT:
        out->kind = ZL_MSG_HEARTBEAT;
        out->u.heartbeat.interval_ms = e->heartbeat->interval_ms;
        break;
    case ZLANE__V1__ENVELOPE__BODY_EXTEND: {
        out->kind = ZL_MSG_EXTEND;
        const Zlane__V1__Extend *s = e->extend;
        out->u.extend.n = s->n_items;
        out->u.extend.items = ARR (a, s->n_items, zl_extend_item_t);
        for (size_t i = 0; i < s->n_items; i++)
            out->u.extend.items[i] =
                (zl_extend_item_t){s->items[i]->job_id, s->items[i]->lease, s->items[i]->lease_ms,
                                   s_bytes (s->items[i]->checkpoint)};
        break;
    }
    case ZLANE__V1__ENVELOPE__BODY_ACK: {
        out->kind = ZL_MSG_ACK;
        const Zlane__V1__Ack *s = e->ack;
        out->u.ack.n = s->n_items;
        out->u.ack.items = ARR (a, s->n_items, zl_ack_item_t);
        for (size_t i = 0; i < s->n_items; i++)
            out->u.ack.items[i] =
                (zl_ack_item_t){s->items[i]->job_id, s->items[i]->lease, s->items[i]->run_us,
                                s_bytes (s->items[i]->result)};
        break;
    }
    case ZLANE__V1__ENVELOPE__BODY_NACK: {
        out->kind = ZL_MSG_NACK;
        const Zlane__V1__Nack *s = e->nack;
        out->u.nack.n = s->n_items;
        out->u.nack.items = ARR (a, s->n_items, zl_nack_item_t);
        for (size_t i = 0; i < s->n_items; i++) {
            const Zlane__V1__NackItem *t = s->items[i];
            out->u.nack.items[i] =
                (zl_nack_item_t){t->job_id,         t->lease,  (zl_fail_class_t)t->class_, t->error,
                                 t->retry_after_ms, t->run_us, s_bytes (t->checkpoint)};
        }
        break;
    }
    case ZLANE__V1__ENVELOPE__BODY_DISPATCH: {
        out->kind = ZL_MSG_DISPATCH;
        const Zlane__V1__Dispatch *s = e->dispatch;
        out->u.dispatch.n = s->n_jobs;
        out->u.dispatch.jobs = ARR (a, s->n_jobs, zl_job_msg_t);
        for (size_t i = 0; i < s->n_jobs; i++) {
            const Zlane__V1__Job *j = s->jobs[i];
            out->u.dispatch.jobs[i] =
                (zl_job_msg_t){.job_id = j->job_id,
                               .lease = j->lease,
                               .attempt = j->attempt,
                               .tenant = j->tenant,
                               .lane = j->lane,
                               .payload = s_bytes (j->payload),
                               .n_headers = j->n_headers,
                               .headers = s_dec_headers (a, j->n_headers, j->headers),
                               .idempotency_key = j->idempotency_key,
                               .lease_ms = j->lease_ms,
                               .max_run_ms = j->max_run_ms,
                               .max_attempts = j->max_attempts,
                               .enqueued_at_ms = j->enqueued_at_ms,
                               .n_parent_results = j->n_parent_results,
                               .ordering_key = j->ordering_key,
                               .checkpoint = s_bytes (j->checkpoint)};
            zl_parent_result_t *pr = ARR (a, j->n_parent_results, zl_parent_result_t);
            for (size_t k = 0; k < j->n_parent_results; k++)
                pr[k] = (zl_parent_result_t){j->parent_results[k]->job_id,
                                             s_bytes (j->parent_results[k]->result)};
            out->u.dispatch.jobs[i].parent_results = pr;
            if (j->batch)
                out->u.dispatch.jobs[i].batch = s_dec_batch (a, j->batch);
        }
        break;
    }
    case ZLANE__V1__ENVELOPE__BODY_SETTLED: {
        out->kind = ZL_MSG_SETTLED;
        const Zlane__V1__Settled *s = e->settled;
        out->u.settled.n = s->n_items;
        out->u.settled.items = s_dec_lease_refs (a, s->items, s->n_items);
        break;
    }
    case ZLANE__V1__ENVELOPE__BODY_CANCEL: {
        out->kind = ZL_MSG_CANCEL;
        const Zlane__V1__Cancel *s = e->cancel;
        out->u.cancel.n = s->n_items;
        out->u.cancel.items = s_dec_lease_refs (a, s->items, s->n_items);
        break;
    }
    case ZLANE__V1__ENVELOPE__BODY_ERROR: {
        out->kind = ZL_MSG_ERROR;
        const Zlane__V1__Error *s = e->error;
        out->u.error = (zl_error_t){(zl_error_code_t)s->code,
                                    s->message,
                                    s->job_id,
                                    s->lease,
                                    s->n_items,
                                    ARR (a, s->n_items, zl_item_error_t),
                                    s->n_leader_endpoints,
                                    (const char **)s->leader_endpoints};
        for (size_t i = 0; i < s->n_items; i++)
            out->u.error.items[i] = (zl_item_error_t){s->items[i]->job_id, s->items[i]->lease,
                                                      (zl_error_code_t)s->items[i]->code};
        break;
    }
    case ZLANE__V1__ENVELOPE__BODY_DEAD_LETTER:
        out->kind = ZL_MSG_DEAD_LETTER;
        s_dec_dead_letter (a, &out->u.dead_letter, e->dead_letter);
        break;
    case ZLANE__V1__ENVELOPE__BODY_DLQ_ALERT:
        out->kind = ZL_MSG_DLQ_ALERT;
        out->u.dlq_alert.depth = e->dlq_alert->depth;
        out->u.dlq_alert.oldest_age_ms = e->dlq_alert->oldest_age_ms;
        break;
    case ZLANE__V1__ENVELOPE__BODY_WATCH:
        out->kind = ZL_MSG_WATCH;
        out->u.watch.n = e->watch->n_job_ids;
        out->u.watch.job_ids = e->watch->job_ids;
        break;
    case ZLANE__V1__ENVELOPE__BODY_OUTCOME:
        out->kind = ZL_MSG_OUTCOME;
        s_dec_outcome (&out->u.outcome, e->outcome);
        break;
    case ZLANE__V1__ENVELOPE__BODY_JOB_DONE:
        out->kind = ZL_MSG_JOB_DONE;
        s_dec_outcome (&out->u.outcome, e->job_done);
        break;
    case ZLANE__V1__ENVELOPE__BODY_BATCH_DONE:
        out->kind = ZL_MSG_BATCH_DONE;
        out->u.batch_done = *s_dec_batch (a, e->batch_done);
        break;
    case ZLANE__V1__ENVELOPE__BODY_BREAKER:
        out->kind = ZL_MSG_BREAKER;
        s_dec_breaker (&out->u.breaker, e->breaker);
        break;
    case ZLANE__V1__ENVELOPE__BODY_ADMIN_REQUEST: {
        out->kind = ZL_MSG_ADMIN_REQUEST;
        const Zlane__V1__AdminRequest *r = e->admin_request;
        zl_admin_request_t *o = &out->u.admin_request;
        o->request_id = r->request_id;
        o->lane = "";
        s_dec_filter (&o->filter, NULL);
        switch (r->op_case) {
        case ZLANE__V1__ADMIN_REQUEST__OP_STATS:
            o->op = ZL_ADMIN_STATS;
            o->stats_lanes_only = r->stats->lanes_only;
            if (r->stats->groups) {
                const Zlane__V1__GroupQuery *g = r->stats->groups;
                o->stats_groups = (zl_group_query_t){.set = true,
                                                     .lane = g->lane,
                                                     .tenant_contains = g->tenant_contains,
                                                     .sort = (zl_group_sort_t)g->sort,
                                                     .ascending = g->ascending,
                                                     .offset = g->offset,
                                                     .limit = g->limit};
            }
            break;
        case ZLANE__V1__ADMIN_REQUEST__OP_DLQ_LIST:
            o->op = ZL_ADMIN_DLQ_LIST;
            s_dec_filter (&o->filter, r->dlq_list->filter);
            o->limit = r->dlq_list->limit;
            o->after_id = r->dlq_list->after_id;
            break;
        case ZLANE__V1__ADMIN_REQUEST__OP_DLQ_SHOW:
            o->op = ZL_ADMIN_DLQ_SHOW;
            o->job_id = r->dlq_show->job_id;
            break;
        case ZLANE__V1__ADMIN_REQUEST__OP_DLQ_REDRIVE:
            o->op = ZL_ADMIN_DLQ_REDRIVE;
            s_dec_filter (&o->filter, r->dlq_redrive);
            break;
        case ZLANE__V1__ADMIN_REQUEST__OP_DLQ_PURGE:
            o->op = ZL_ADMIN_DLQ_PURGE;
            s_dec_filter (&o->filter, r->dlq_purge);
            break;
        case ZLANE__V1__ADMIN_REQUEST__OP_PAUSE:
            o->op = ZL_ADMIN_PAUSE;
            o->lane = r->pause->lane;
            break;
        case ZLANE__V1__ADMIN_REQUEST__OP_RESUME:
            o->op = ZL_ADMIN_RESUME;
            o->lane = r->resume->lane;
            break;
        case ZLANE__V1__ADMIN_REQUEST__OP_CANCEL:
            o->op = ZL_ADMIN_CANCEL;
            o->n_ids = r->cancel->n_ids;
            o->ids = r->cancel->ids;
            break;
        case ZLANE__V1__ADMIN_REQUEST__OP_JOB_SHOW:
            o->op = ZL_ADMIN_JOB_SHOW;
            o->job_id = r->job_show->job_id;
            break;
        case ZLANE__V1__ADMIN_REQUEST__OP_BATCH_SHOW:
            o->op = ZL_ADMIN_BATCH_SHOW;
            o->batch_id = r->batch_show->batch_id;
            break;
        case ZLANE__V1__ADMIN_REQUEST__OP_SCHEDULE_ADD:
            o->op = ZL_ADMIN_SCHEDULE_ADD;
            s_dec_schedule (a, &o->schedule, r->schedule_add);
            break;
        case ZLANE__V1__ADMIN_REQUEST__OP_SCHEDULE_LIST: o->op = ZL_ADMIN_SCHEDULE_LIST; break;
        case ZLANE__V1__ADMIN_REQUEST__OP_WORKERS: o->op = ZL_ADMIN_WORKERS; break;
        case ZLANE__V1__ADMIN_REQUEST__OP_SCHEDULE_REMOVE:
            o->op = ZL_ADMIN_SCHEDULE_REMOVE;
            o->schedule.name = r->schedule_remove->name;
            break;
        case ZLANE__V1__ADMIN_REQUEST__OP_SCHEDULE_PAUSE:
            o->op = ZL_ADMIN_SCHEDULE_PAUSE;
            o->schedule.name = r->schedule_pause->name;
            break;
        case ZLANE__V1__ADMIN_REQUEST__OP_SCHEDULE_RESUME:
            o->op = ZL_ADMIN_SCHEDULE_RESUME;
            o->schedule.name = r->schedule_resume->name;
            break;
        default: o->op = ZL_ADMIN_NONE; break;
        }
        break;
    }
    case ZLANE__V1__ENVELOPE__BODY_ADMIN_REPLY: {
        out->kind = ZL_MSG_ADMIN_REPLY;
        const Zlane__V1__AdminReply *r = e->admin_reply;
        zl_admin_reply_t *o = &out->u.admin_reply;
        o->request_id = r->request_id;
        o->ok = r->ok;
        o->error = r->error;
        switch (r->result_case) {
        case ZLANE__V1__ADMIN_REPLY__RESULT_STATS:
            o->result = ZL_ADMIN_RESULT_STATS;
            s_dec_stats (a, &o->stats, r->stats);
            break;
        case ZLANE__V1__ADMIN_REPLY__RESULT_DLQ_LIST:
            o->result = ZL_ADMIN_RESULT_DLQ_LIST;
            o->n_dead_letters = r->dlq_list->n_items;
            o->dead_letters = ARR (a, r->dlq_list->n_items, zl_dead_letter_t);
            for (size_t i = 0; i < r->dlq_list->n_items; i++)
                s_dec_dead_letter (a, &o->dead_letters[i], r->dlq_list->items[i]);
            break;
        case ZLANE__V1__ADMIN_REPLY__RESULT_DEAD_LETTER:
            o->result = ZL_ADMIN_RESULT_DEAD_LETTER;
            s_dec_dead_letter (a, &o->dead_letter, r->dead_letter);
            break;
        case ZLANE__V1__ADMIN_REPLY__RESULT_COUNT:
            o->result = ZL_ADMIN_RESULT_COUNT;
            o->count = r->count;
            break;
        case ZLANE__V1__ADMIN_REPLY__RESULT_CANCEL: {
            const Zlane__V1__CancelReply *c = r->cancel;
            o->result = ZL_ADMIN_RESULT_CANCEL;
            o->count = c->count;
            o->n_cancel_items = c->n_items;
            o->cancel_items = ARR (a, c->n_items, zl_cancel_item_t);
            for (size_t i = 0; i < c->n_items; i++) {
                const Zlane__V1__CancelItem *t = c->items[i];
                o->cancel_items[i] = (zl_cancel_item_t){t->job_id, (zl_cancel_outcome_t)t->outcome,
                                                        t->state, t->cancelled_at_ms};
            }
            break;
        }
        case ZLANE__V1__ADMIN_REPLY__RESULT_JOB:
            o->result = ZL_ADMIN_RESULT_JOB;
            s_dec_outcome (&o->job, r->job);
            break;
        case ZLANE__V1__ADMIN_REPLY__RESULT_BATCH:
            o->result = ZL_ADMIN_RESULT_BATCH;
            o->batch = *s_dec_batch (a, r->batch);
            break;
        case ZLANE__V1__ADMIN_REPLY__RESULT_SCHEDULES:
            o->result = ZL_ADMIN_RESULT_SCHEDULES;
            o->n_schedules = r->schedules->n_items;
            o->schedules = ARR (a, r->schedules->n_items, zl_schedule_info_t);
            for (size_t i = 0; i < r->schedules->n_items; i++)
                s_dec_schedule (a, &o->schedules[i], r->schedules->items[i]);
            break;
        case ZLANE__V1__ADMIN_REPLY__RESULT_WORKERS:
            o->result = ZL_ADMIN_RESULT_WORKERS;
            o->n_workers = r->workers->n_items;
            o->workers = ARR (a, r->workers->n_items, zl_worker_info_t);
            for (size_t i = 0; i < r->workers->n_items; i++) {
                const Zlane__V1__WorkerInfo *w = r->workers->items[i];
                o->workers[i] = (zl_worker_info_t){.name = w->name,
                                                   .host = w->host,
                                                   .n_lanes = w->n_lanes,
                                                   .lanes = (const char **)w->lanes,
                                                   .capacity = w->capacity,
                                                   .in_flight = w->in_flight,
                                                   .last_seen_age_ms = w->last_seen_age_ms,
                                                   .instance = w->instance,
                                                   .heartbeat_ms = w->heartbeat_ms};
            }
            break;
        default: o->result = ZL_ADMIN_RESULT_NONE; break;
        }
        break;
    }
    default: return ZL_DECODE_NO_BODY;
    }
    return ZL_DECODE_OK;
}

// ---------------------------------------------------------------- text check
/*  protobuf-c hands back strings NUL-terminated and unchecked: "acme\0evil"
    would reach the broker as "acme", and invalid UTF-8 would pass on to
    decoders that refuse it. So every string field is checked on the wire
    bytes: a walk over the frame guided by the generated descriptors. It runs
    after the unpack succeeded, so the frame is known to be well formed. */
#define WALK_DEPTH 8 // deeper than any zlane message nests
#define WALK_FIELDS 64

typedef struct {
    const char *name; // field name at this depth
    int index;        // occurrence of a repeated field, or -1
} walk_level_t;

typedef struct {
    zl_arena_t *arena;
    walk_level_t stack[WALK_DEPTH];
    const char *error;         // the first bad field outside a Submit's specs
    const char **spec_invalid; // per spec of a Submit (grown as needed)
    size_t n_spec_invalid;
} walk_t;

static int
s_varint (const uint8_t *p, size_t len, size_t *pos, uint64_t *out)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 64 && *pos < len; shift += 7) {
        uint8_t b = p[(*pos)++];
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return -1;
}

static void
s_walk_bad (walk_t *w, int depth, const char *what)
{
    // a Submit's spec: the spec is refused alone, by its own seq
    int from = 0;
    bool spec = depth >= 2 && !strcmp (w->stack[0].name, "submit") && w->stack[1].index >= 0;
    if (spec)
        from = 2;
    char path[256];
    size_t n = 0;
    path[0] = '\0';
    for (int i = from; i <= depth && n < sizeof path; i++) {
        int k = w->stack[i].index >= 0
                    ? snprintf (path + n, sizeof path - n, "%s%s[%d]", i > from ? "." : "",
                                w->stack[i].name, w->stack[i].index)
                    : snprintf (path + n, sizeof path - n, "%s%s", i > from ? "." : "",
                                w->stack[i].name);
        n += k > 0 ? (size_t)k : 0;
    }
    const char *text = zl_arena_printf (w->arena, "field '%s' %s", path, what);
    if (!spec) {
        if (!w->error)
            w->error = text;
        return;
    }
    size_t i = (size_t)w->stack[1].index;
    if (i >= w->n_spec_invalid) {
        size_t n_new = i + 1 > 2 * w->n_spec_invalid ? i + 1 : 2 * w->n_spec_invalid;
        const char **grown = zl_arena_calloc (w->arena, n_new, sizeof *grown);
        if (w->n_spec_invalid)
            memcpy (grown, w->spec_invalid, w->n_spec_invalid * sizeof *grown);
        w->spec_invalid = grown;
        w->n_spec_invalid = n_new;
    }
    if (!w->spec_invalid[i])
        w->spec_invalid[i] = text;
}

static void
s_walk (walk_t *w, const ProtobufCMessageDescriptor *d, const uint8_t *p, size_t len, int depth)
{
    uint32_t seen[WALK_FIELDS] = {0}; // occurrences per field, for repeated indexes
    size_t pos = 0;
    while (pos < len) {
        uint64_t key, n;
        if (s_varint (p, len, &pos, &key) != 0)
            return;
        switch (key & 7) {
        case 0:
            if (s_varint (p, len, &pos, &n) != 0)
                return;
            continue;
        case 1: pos += 8; continue;
        case 5: pos += 4; continue;
        case 2: break;
        default: return; // groups: not in zlane's schema (the unpack refused them)
        }
        if (s_varint (p, len, &pos, &n) != 0 || n > len - pos)
            return;
        const uint8_t *value = p + pos;
        pos += (size_t)n;
        const ProtobufCFieldDescriptor *f =
            key >> 3 <= UINT32_MAX
                ? protobuf_c_message_descriptor_get_field (d, (unsigned)(key >> 3))
                : NULL;
        if (!f || (f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE))
            continue; // unknown fields, bytes, packed numbers
        size_t fi = (size_t)(f - d->fields);
        w->stack[depth].name = f->name;
        w->stack[depth].index =
            f->label == PROTOBUF_C_LABEL_REPEATED && fi < WALK_FIELDS ? (int)seen[fi]++ : -1;
        if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
            if (depth + 1 < WALK_DEPTH)
                s_walk (w, f->descriptor, value, (size_t)n, depth + 1);
        } else if (!zl_text_valid ((const char *)value, (size_t)n))
            s_walk_bad (w, depth,
                        memchr (value, 0, (size_t)n) ? "contains a NUL byte"
                                                     : "is not valid UTF-8");
    }
}

zl_decode_rc_t
zl_codec_decode (zl_codec_t *self, const void *data, size_t size, zl_msg_t *out)
{
    zl_arena_reset (self->dec);
    memset (out, 0, sizeof *out);
    self->error = "";
    Zlane__V1__Envelope *e =
        zlane__v1__envelope__unpack (&self->allocator, size, (const uint8_t *)data);
    if (!e)
        return ZL_DECODE_BAD_FRAME;
    if (e->version != ZL_PROTOCOL_VERSION)
        return ZL_DECODE_BAD_VERSION;
    zl_decode_rc_t rc = s_decode_body (self->dec, e, out);
    if (rc != ZL_DECODE_OK)
        return rc;
    walk_t w = {.arena = self->dec};
    s_walk (&w, &zlane__v1__envelope__descriptor, data, size, 0);
    if (out->kind == ZL_MSG_SUBMIT)
        for (size_t i = 0; i < w.n_spec_invalid && i < out->u.submit.n; i++)
            out->u.submit.jobs[i].invalid = w.spec_invalid[i];
    self->error = w.error ? w.error : "";
    return w.error ? ZL_DECODE_BAD_TEXT : ZL_DECODE_OK;
}

const char *
zl_codec_error (zl_codec_t *self)
{
    return self->error ? self->error : "";
}

// ---------------------------------------------------------------- encode
#define S(x) ((char *)((x) ? (x) : ""))
#define NEW(a, type, init)                                                                         \
    ({                                                                                             \
        type *_p = zl_arena_alloc ((a), sizeof (type));                                            \
        init (_p);                                                                                 \
        _p;                                                                                        \
    })
#define PTRS(a, n, type) ((type **)zl_arena_calloc ((a), (n) ? (n) : 1, sizeof (type *)))

static Zlane__V1__LeaseRef **
s_lease_refs (zl_arena_t *a, const zl_lease_ref_t *in, size_t n)
{
    Zlane__V1__LeaseRef **out = PTRS (a, n, Zlane__V1__LeaseRef);
    Zlane__V1__LeaseRef *items = zl_arena_alloc (a, (n ? n : 1) * sizeof *items);
    for (size_t i = 0; i < n; i++) {
        zlane__v1__lease_ref__init (&items[i]);
        items[i].job_id = in[i].job_id;
        items[i].lease = in[i].lease;
        out[i] = &items[i];
    }
    return out;
}

static ProtobufCBinaryData
s_bin (zl_bytes_t b)
{
    ProtobufCBinaryData out = {b.len, (uint8_t *)b.data};
    return out;
}

static Zlane__V1__Header **
s_enc_headers (zl_arena_t *a, size_t n, const zl_header_t *in)
{
    Zlane__V1__Header **out = PTRS (a, n, Zlane__V1__Header);
    for (size_t i = 0; i < n; i++) {
        out[i] = NEW (a, Zlane__V1__Header, zlane__v1__header__init);
        out[i]->key = S (in[i].key);
        out[i]->value = S (in[i].value);
    }
    return out;
}

static Zlane__V1__DlqFilter *
s_enc_filter (zl_arena_t *a, const zl_dlq_filter_t *in)
{
    Zlane__V1__DlqFilter *f = NEW (a, Zlane__V1__DlqFilter, zlane__v1__dlq_filter__init);
    f->lane = S (in->lane);
    f->tenant = S (in->tenant);
    f->n_ids = in->n_ids;
    f->ids = in->ids;
    f->all = in->all;
    f->error_contains = S (in->error_contains);
    f->dead_from_ms = in->dead_from_ms;
    f->dead_to_ms = in->dead_to_ms;
    return f;
}

static Zlane__V1__DeadLetter *
s_enc_dead_letter (zl_arena_t *a, const zl_dead_letter_t *in)
{
    Zlane__V1__DeadLetter *d = NEW (a, Zlane__V1__DeadLetter, zlane__v1__dead_letter__init);
    d->job_id = in->job_id;
    d->tenant = S (in->tenant);
    d->lane = S (in->lane);
    d->payload = s_bin (in->payload);
    d->idempotency_key = S (in->idempotency_key);
    d->enqueued_at_ms = in->enqueued_at_ms;
    d->dead_at_ms = in->dead_at_ms;
    d->error = S (in->error);
    d->n_attempts = in->n_attempts;
    d->attempts = PTRS (a, in->n_attempts, Zlane__V1__Attempt);
    for (size_t i = 0; i < in->n_attempts; i++) {
        const zl_attempt_t *t = &in->attempts[i];
        Zlane__V1__Attempt *x = NEW (a, Zlane__V1__Attempt, zlane__v1__attempt__init);
        x->attempt = t->attempt;
        x->worker = S (t->worker);
        x->started_at_ms = t->started_at_ms;
        x->ended_at_ms = t->ended_at_ms;
        x->outcome = (Zlane__V1__Outcome)t->outcome;
        x->error = S (t->error);
        d->attempts[i] = x;
    }
    d->n_headers = in->n_headers;
    d->headers = s_enc_headers (a, in->n_headers, in->headers);
    d->ordering_key = S (in->ordering_key);
    d->ordering_head = in->ordering_head;
    d->checkpoint = s_bin (in->checkpoint);
    return d;
}

static Zlane__V1__GroupStats **
s_enc_groups (zl_arena_t *a, size_t n, const zl_group_stats_t *in)
{
    Zlane__V1__GroupStats **out = PTRS (a, n, Zlane__V1__GroupStats);
    for (size_t i = 0; i < n; i++) {
        const zl_group_stats_t *g = &in[i];
        Zlane__V1__GroupStats *o = NEW (a, Zlane__V1__GroupStats, zlane__v1__group_stats__init);
        o->lane = S (g->lane);
        o->tenant = S (g->tenant);
        o->ready = g->ready;
        o->delayed = g->delayed;
        o->in_flight = g->in_flight;
        o->dlq = g->dlq;
        o->oldest_ready_age_ms = g->oldest_ready_age_ms;
        o->oldest_dlq_age_ms = g->oldest_dlq_age_ms;
        o->submitted = g->submitted;
        o->acked = g->acked;
        o->nacked_transient = g->nacked_transient;
        o->nacked_throttled = g->nacked_throttled;
        o->nacked_permanent = g->nacked_permanent;
        o->lease_expired = g->lease_expired;
        o->dead_lettered = g->dead_lettered;
        o->run_us = g->run_us;
        o->throttled = g->throttled;
        o->capped = g->capped;
        o->paused = g->paused;
        out[i] = o;
    }
    return out;
}

static Zlane__V1__Schedule *
s_enc_schedule (zl_arena_t *a, const zl_schedule_info_t *in)
{
    Zlane__V1__Schedule *o = NEW (a, Zlane__V1__Schedule, zlane__v1__schedule__init);
    o->name = S (in->name);
    o->cron = S (in->cron);
    o->tenant = S (in->tenant);
    o->lane = S (in->lane);
    o->payload = s_bin (in->payload);
    o->n_headers = in->n_headers;
    o->headers = s_enc_headers (a, in->n_headers, in->headers);
    o->catch_up = in->catch_up;
    o->catch_up_max = in->catch_up_max;
    o->paused = in->paused;
    o->last_tick_ms = in->last_tick_ms;
    o->next_tick_ms = in->next_tick_ms;
    return o;
}

static Zlane__V1__Breaker *
s_enc_breaker (zl_arena_t *a, const zl_breaker_info_t *in)
{
    Zlane__V1__Breaker *o = NEW (a, Zlane__V1__Breaker, zlane__v1__breaker__init);
    o->lane = S (in->lane);
    o->state = (Zlane__V1__BreakerState)in->state;
    o->failures = in->failures;
    o->until_ms = in->until_ms;
    o->probes_out = in->probes_out;
    o->opened = in->opened;
    return o;
}

static Zlane__V1__Stats *
s_enc_stats (zl_arena_t *a, const zl_stats_t *in)
{
    Zlane__V1__Stats *s = NEW (a, Zlane__V1__Stats, zlane__v1__stats__init);
    s->uptime_ms = in->uptime_ms;
    s->n_counters = in->n_counters;
    s->counters = PTRS (a, in->n_counters, Zlane__V1__Counter);
    for (size_t i = 0; i < in->n_counters; i++) {
        Zlane__V1__Counter *c = NEW (a, Zlane__V1__Counter, zlane__v1__counter__init);
        c->name = S (in->counters[i].name);
        c->value = in->counters[i].value;
        s->counters[i] = c;
    }
    s->n_lanes = in->n_lanes;
    s->lanes = s_enc_groups (a, in->n_lanes, in->lanes);
    s->n_tenants = in->n_tenants;
    s->tenants = s_enc_groups (a, in->n_tenants, in->tenants);
    s->n_groups = in->n_groups;
    s->groups = s_enc_groups (a, in->n_groups, in->groups);
    s->n_latencies = in->n_latencies;
    s->latencies = PTRS (a, in->n_latencies, Zlane__V1__Latency);
    for (size_t i = 0; i < in->n_latencies; i++) {
        const zl_latency_t *l = &in->latencies[i];
        Zlane__V1__Latency *o = NEW (a, Zlane__V1__Latency, zlane__v1__latency__init);
        o->name = S (l->name);
        o->count = l->count;
        o->p50_us = l->p50_us;
        o->p90_us = l->p90_us;
        o->p99_us = l->p99_us;
        o->max_us = l->max_us;
        s->latencies[i] = o;
    }
    s->workers = in->workers;
    s->producers = in->producers;
    s->store_backend = S (in->store_backend);
    s->role = S (in->role);
    s->epoch = in->epoch;
    s->store_reachable = in->store_reachable;
    s->takeovers = in->takeovers;
    s->fenced = in->fenced;
    s->leader = S (in->leader);
    s->tenants_known = in->tenants_known;
    s->groups_matched = in->groups_matched;
    s->n_breakers = in->n_breakers;
    s->breakers = PTRS (a, in->n_breakers, Zlane__V1__Breaker);
    for (size_t i = 0; i < in->n_breakers; i++)
        s->breakers[i] = s_enc_breaker (a, &in->breakers[i]);
    return s;
}

static Zlane__V1__JobOutcome *
s_enc_outcome (zl_arena_t *a, const zl_job_outcome_t *in)
{
    Zlane__V1__JobOutcome *o = NEW (a, Zlane__V1__JobOutcome, zlane__v1__job_outcome__init);
    o->job_id = in->job_id;
    o->found = in->found;
    o->final = in->final;
    o->state = S (in->state);
    o->outcome = (Zlane__V1__Outcome)in->outcome;
    o->result = s_bin (in->result);
    o->error = S (in->error);
    o->failed_parent = in->failed_parent;
    o->tenant = S (in->tenant);
    o->lane = S (in->lane);
    o->finished_at_ms = in->finished_at_ms;
    o->attempts = in->attempts;
    o->n_parents = in->n_parents;
    o->parents = (uint64_t *)in->parents;
    o->n_children = in->n_children;
    o->children = (uint64_t *)in->children;
    return o;
}

static Zlane__V1__BatchInfo *
s_enc_batch (zl_arena_t *a, const zl_batch_info_t *in)
{
    Zlane__V1__BatchInfo *o = NEW (a, Zlane__V1__BatchInfo, zlane__v1__batch_info__init);
    o->batch_id = S (in->batch_id);
    o->found = in->found;
    o->tenant = S (in->tenant);
    o->lane = S (in->lane);
    o->job_id = in->job_id;
    o->callback = in->callback;
    o->closed = in->closed;
    o->settled = in->settled;
    o->cancelled = in->cancelled;
    o->jobs = in->jobs;
    o->acked = in->acked;
    o->dead = in->dead;
    o->cancelled_jobs = in->cancelled_jobs;
    o->pending = in->pending;
    o->n_failed = in->n_failed;
    o->failed = (uint64_t *)in->failed;
    o->failed_more = in->failed_more;
    o->opened_at_ms = in->opened_at_ms;
    o->closed_at_ms = in->closed_at_ms;
    o->settled_at_ms = in->settled_at_ms;
    return o;
}

static int
s_encode_body (zl_arena_t *a, const zl_msg_t *m, Zlane__V1__Envelope *e)
{
    switch (m->kind) {
    case ZL_MSG_HELLO:
        e->body_case = ZLANE__V1__ENVELOPE__BODY_HELLO;
        e->hello = NEW (a, Zlane__V1__Hello, zlane__v1__hello__init);
        e->hello->client = S (m->u.hello.client);
        break;
    case ZL_MSG_SUBMIT: {
        const zl_submit_t *in = &m->u.submit;
        e->body_case = ZLANE__V1__ENVELOPE__BODY_SUBMIT;
        e->submit = NEW (a, Zlane__V1__Submit, zlane__v1__submit__init);
        e->submit->n_jobs = in->n;
        e->submit->jobs = PTRS (a, in->n, Zlane__V1__JobSpec);
        for (size_t i = 0; i < in->n; i++) {
            const zl_job_spec_t *j = &in->jobs[i];
            Zlane__V1__JobSpec *o = NEW (a, Zlane__V1__JobSpec, zlane__v1__job_spec__init);
            o->seq = j->seq;
            o->tenant = S (j->tenant);
            o->lane = S (j->lane);
            o->payload = s_bin (j->payload);
            o->idempotency_key = S (j->idempotency_key);
            o->delay_ms = j->delay_ms;
            o->max_attempts = j->max_attempts;
            o->lease_ms = j->lease_ms;
            o->max_run_ms = j->max_run_ms;
            o->n_headers = j->n_headers;
            o->headers = s_enc_headers (a, j->n_headers, j->headers);
            o->generated_key = j->generated_key;
            o->n_depends_on = j->n_depends_on;
            o->depends_on = (uint64_t *)j->depends_on;
            o->n_depends_on_seq = j->n_depends_on_seq;
            o->depends_on_seq = (uint64_t *)j->depends_on_seq;
            o->batch = S (j->batch);
            o->deadline_ms = j->deadline_ms;
            o->max_age_ms = j->max_age_ms;
            o->ordering_key = S (j->ordering_key);
            if (j->has_priority) {
                o->priority_given_case = ZLANE__V1__JOB_SPEC__PRIORITY_GIVEN_PRIORITY;
                o->priority = j->priority;
            }
            if (j->open_batch) {
                o->open_batch = NEW (a, Zlane__V1__BatchOpen, zlane__v1__batch_open__init);
                o->open_batch->batch_id = S (j->open_batch_id);
                o->open_batch->no_callback = j->batch_no_callback;
                o->open_batch->close = j->batch_close;
            }
            e->submit->jobs[i] = o;
        }
        e->submit->n_close_batches = in->n_close;
        e->submit->close_batches = (char **)in->close_batches;
        break;
    }
    case ZL_MSG_ACCEPTED: {
        const zl_accepted_t *in = &m->u.accepted;
        e->body_case = ZLANE__V1__ENVELOPE__BODY_ACCEPTED;
        e->accepted = NEW (a, Zlane__V1__Accepted, zlane__v1__accepted__init);
        e->accepted->n_jobs = in->n;
        e->accepted->jobs = PTRS (a, in->n, Zlane__V1__Acceptance);
        Zlane__V1__Acceptance *items = zl_arena_alloc (a, (in->n ? in->n : 1) * sizeof *items);
        for (size_t i = 0; i < in->n; i++) {
            zlane__v1__acceptance__init (&items[i]);
            items[i].seq = in->jobs[i].seq;
            items[i].job_id = in->jobs[i].job_id;
            items[i].duplicate = in->jobs[i].duplicate;
            items[i].batch_id = S (in->jobs[i].batch_id);
            e->accepted->jobs[i] = &items[i];
        }
        e->accepted->n_closed = in->n_closed;
        e->accepted->closed = PTRS (a, in->n_closed, Zlane__V1__BatchClosed);
        for (size_t i = 0; i < in->n_closed; i++) {
            Zlane__V1__BatchClosed *c =
                NEW (a, Zlane__V1__BatchClosed, zlane__v1__batch_closed__init);
            c->batch_id = S (in->closed[i].batch_id);
            c->ok = in->closed[i].ok;
            c->error = S (in->closed[i].error);
            e->accepted->closed[i] = c;
        }
        break;
    }
    case ZL_MSG_REJECTED: {
        const zl_rejected_t *in = &m->u.rejected;
        e->body_case = ZLANE__V1__ENVELOPE__BODY_REJECTED;
        e->rejected = NEW (a, Zlane__V1__Rejected, zlane__v1__rejected__init);
        e->rejected->n_jobs = in->n;
        e->rejected->jobs = PTRS (a, in->n, Zlane__V1__Rejection);
        for (size_t i = 0; i < in->n; i++) {
            Zlane__V1__Rejection *o = NEW (a, Zlane__V1__Rejection, zlane__v1__rejection__init);
            o->seq = in->jobs[i].seq;
            o->code = (Zlane__V1__RejectCode)in->jobs[i].code;
            o->reason = S (in->jobs[i].reason);
            o->retry_after_ms = in->jobs[i].retry_after_ms;
            e->rejected->jobs[i] = o;
        }
        break;
    }
    case ZL_MSG_CREDIT:
        e->body_case = ZLANE__V1__ENVELOPE__BODY_CREDIT;
        e->credit = NEW (a, Zlane__V1__Credit, zlane__v1__credit__init);
        e->credit->limit = m->u.credit.limit;
        break;
    case ZL_MSG_READY:
        e->body_case = ZLANE__V1__ENVELOPE__BODY_READY;
        e->ready = NEW (a, Zlane__V1__Ready, zlane__v1__ready__init);
        e->ready->name = S (m->u.ready.name);
        e->ready->n_lanes = m->u.ready.n_lanes;
        e->ready->lanes = (char **)m->u.ready.lanes;
        e->ready->capacity = m->u.ready.capacity;
        e->ready->instance = m->u.ready.instance;
        e->ready->held_listed = m->u.ready.held_listed;
        e->ready->n_held = m->u.ready.n_held;
        e->ready->held = s_lease_refs (a, m->u.ready.held, m->u.ready.n_held);
        e->ready->heartbeat_ms = m->u.ready.heartbeat_ms;
        break;
    case ZL_MSG_HEARTBEAT:
        e->body_case = ZLANE__V1__ENVELOPE__BODY_HEARTBEAT;
        e->heartbeat = NEW (a, Zlane__V1__Heartbeat, zlane__v1__heartbeat__init);
        e->heartbeat->interval_ms = m->u.heartbeat.interval_ms;
        break;
    case ZL_MSG_EXTEND: {
        const zl_extend_t *in = &m->u.extend;
        e->body_case = ZLANE__V1__ENVELOPE__BODY_EXTEND;
        e->extend = NEW (a, Zlane__V1__Extend, zlane__v1__extend__init);
        e->extend->n_items = in->n;
        e->extend->items = PTRS (a, in->n, Zlane__V1__ExtendItem);
        for (size_t i = 0; i < in->n; i++) {
            Zlane__V1__ExtendItem *o = NEW (a, Zlane__V1__ExtendItem, zlane__v1__extend_item__init);
            o->job_id = in->items[i].job_id;
            o->lease = in->items[i].lease;
            o->lease_ms = in->items[i].lease_ms;
            o->checkpoint = s_bin (in->items[i].checkpoint);
            e->extend->items[i] = o;
        }
        break;
    }
    case ZL_MSG_ACK: {
        const zl_ack_t *in = &m->u.ack;
        e->body_case = ZLANE__V1__ENVELOPE__BODY_ACK;
        e->ack = NEW (a, Zlane__V1__Ack, zlane__v1__ack__init);
        e->ack->n_items = in->n;
        e->ack->items = PTRS (a, in->n, Zlane__V1__AckItem);
        Zlane__V1__AckItem *items = zl_arena_alloc (a, (in->n ? in->n : 1) * sizeof *items);
        for (size_t i = 0; i < in->n; i++) {
            zlane__v1__ack_item__init (&items[i]);
            items[i].job_id = in->items[i].job_id;
            items[i].lease = in->items[i].lease;
            items[i].run_us = in->items[i].run_us;
            items[i].result = s_bin (in->items[i].result);
            e->ack->items[i] = &items[i];
        }
        break;
    }
    case ZL_MSG_NACK: {
        const zl_nack_t *in = &m->u.nack;
        e->body_case = ZLANE__V1__ENVELOPE__BODY_NACK;
        e->nack = NEW (a, Zlane__V1__Nack, zlane__v1__nack__init);
        e->nack->n_items = in->n;
        e->nack->items = PTRS (a, in->n, Zlane__V1__NackItem);
        for (size_t i = 0; i < in->n; i++) {
            const zl_nack_item_t *t = &in->items[i];
            Zlane__V1__NackItem *o = NEW (a, Zlane__V1__NackItem, zlane__v1__nack_item__init);
            o->job_id = t->job_id;
            o->lease = t->lease;
            o->class_ = (Zlane__V1__FailureClass)t->cls;
            o->error = S (t->error);
            o->retry_after_ms = t->retry_after_ms;
            o->run_us = t->run_us;
            o->checkpoint = s_bin (t->checkpoint);
            e->nack->items[i] = o;
        }
        break;
    }
    case ZL_MSG_DISPATCH: {
        const zl_dispatch_t *in = &m->u.dispatch;
        e->body_case = ZLANE__V1__ENVELOPE__BODY_DISPATCH;
        e->dispatch = NEW (a, Zlane__V1__Dispatch, zlane__v1__dispatch__init);
        e->dispatch->n_jobs = in->n;
        e->dispatch->jobs = PTRS (a, in->n, Zlane__V1__Job);
        Zlane__V1__Job *items = zl_arena_alloc (a, (in->n ? in->n : 1) * sizeof *items);
        for (size_t i = 0; i < in->n; i++) {
            const zl_job_msg_t *j = &in->jobs[i];
            Zlane__V1__Job *o = &items[i];
            zlane__v1__job__init (o);
            o->job_id = j->job_id;
            o->lease = j->lease;
            o->attempt = j->attempt;
            o->tenant = S (j->tenant);
            o->lane = S (j->lane);
            o->payload = s_bin (j->payload);
            o->n_headers = j->n_headers;
            o->headers = s_enc_headers (a, j->n_headers, j->headers);
            o->idempotency_key = S (j->idempotency_key);
            o->lease_ms = j->lease_ms;
            o->max_run_ms = j->max_run_ms;
            o->max_attempts = j->max_attempts;
            o->enqueued_at_ms = j->enqueued_at_ms;
            o->n_parent_results = j->n_parent_results;
            o->parent_results = PTRS (a, j->n_parent_results, Zlane__V1__ParentResult);
            for (size_t k = 0; k < j->n_parent_results; k++) {
                Zlane__V1__ParentResult *pr =
                    NEW (a, Zlane__V1__ParentResult, zlane__v1__parent_result__init);
                pr->job_id = j->parent_results[k].job_id;
                pr->result = s_bin (j->parent_results[k].result);
                o->parent_results[k] = pr;
            }
            if (j->batch)
                o->batch = s_enc_batch (a, j->batch);
            o->ordering_key = S (j->ordering_key);
            o->checkpoint = s_bin (j->checkpoint);
            e->dispatch->jobs[i] = o;
        }
        break;
    }
    case ZL_MSG_SETTLED: {
        const zl_settled_t *in = &m->u.settled;
        e->body_case = ZLANE__V1__ENVELOPE__BODY_SETTLED;
        e->settled = NEW (a, Zlane__V1__Settled, zlane__v1__settled__init);
        e->settled->n_items = in->n;
        e->settled->items = s_lease_refs (a, in->items, in->n);
        break;
    }
    case ZL_MSG_CANCEL: {
        const zl_cancel_t *in = &m->u.cancel;
        e->body_case = ZLANE__V1__ENVELOPE__BODY_CANCEL;
        e->cancel = NEW (a, Zlane__V1__Cancel, zlane__v1__cancel__init);
        e->cancel->n_items = in->n;
        e->cancel->items = s_lease_refs (a, in->items, in->n);
        break;
    }
    case ZL_MSG_ERROR:
        e->body_case = ZLANE__V1__ENVELOPE__BODY_ERROR;
        e->error = NEW (a, Zlane__V1__Error, zlane__v1__error__init);
        e->error->code = (Zlane__V1__ErrorCode)m->u.error.code;
        e->error->message = S (m->u.error.message);
        e->error->job_id = m->u.error.job_id;
        e->error->lease = m->u.error.lease;
        e->error->n_items = m->u.error.n_items;
        e->error->items = PTRS (a, m->u.error.n_items, Zlane__V1__ItemError);
        for (size_t i = 0; i < m->u.error.n_items; i++) {
            Zlane__V1__ItemError *o = NEW (a, Zlane__V1__ItemError, zlane__v1__item_error__init);
            o->job_id = m->u.error.items[i].job_id;
            o->lease = m->u.error.items[i].lease;
            o->code = (Zlane__V1__ErrorCode)m->u.error.items[i].code;
            e->error->items[i] = o;
        }
        e->error->n_leader_endpoints = m->u.error.n_leader_endpoints;
        e->error->leader_endpoints = (char **)m->u.error.leader_endpoints;
        break;
    case ZL_MSG_DEAD_LETTER:
        e->body_case = ZLANE__V1__ENVELOPE__BODY_DEAD_LETTER;
        e->dead_letter = s_enc_dead_letter (a, &m->u.dead_letter);
        break;
    case ZL_MSG_DLQ_ALERT:
        e->body_case = ZLANE__V1__ENVELOPE__BODY_DLQ_ALERT;
        e->dlq_alert = NEW (a, Zlane__V1__DlqAlert, zlane__v1__dlq_alert__init);
        e->dlq_alert->depth = m->u.dlq_alert.depth;
        e->dlq_alert->oldest_age_ms = m->u.dlq_alert.oldest_age_ms;
        break;
    case ZL_MSG_WATCH:
        e->body_case = ZLANE__V1__ENVELOPE__BODY_WATCH;
        e->watch = NEW (a, Zlane__V1__Watch, zlane__v1__watch__init);
        e->watch->n_job_ids = m->u.watch.n;
        e->watch->job_ids = (uint64_t *)m->u.watch.job_ids;
        break;
    case ZL_MSG_OUTCOME:
        e->body_case = ZLANE__V1__ENVELOPE__BODY_OUTCOME;
        e->outcome = s_enc_outcome (a, &m->u.outcome);
        break;
    case ZL_MSG_JOB_DONE:
        e->body_case = ZLANE__V1__ENVELOPE__BODY_JOB_DONE;
        e->job_done = s_enc_outcome (a, &m->u.outcome);
        break;
    case ZL_MSG_BATCH_DONE:
        e->body_case = ZLANE__V1__ENVELOPE__BODY_BATCH_DONE;
        e->batch_done = s_enc_batch (a, &m->u.batch_done);
        break;
    case ZL_MSG_BREAKER:
        e->body_case = ZLANE__V1__ENVELOPE__BODY_BREAKER;
        e->breaker = s_enc_breaker (a, &m->u.breaker);
        break;
    case ZL_MSG_ADMIN_REQUEST: {
        const zl_admin_request_t *in = &m->u.admin_request;
        e->body_case = ZLANE__V1__ENVELOPE__BODY_ADMIN_REQUEST;
        Zlane__V1__AdminRequest *r =
            NEW (a, Zlane__V1__AdminRequest, zlane__v1__admin_request__init);
        e->admin_request = r;
        r->request_id = in->request_id;
        switch (in->op) {
        case ZL_ADMIN_STATS:
            r->op_case = ZLANE__V1__ADMIN_REQUEST__OP_STATS;
            r->stats = NEW (a, Zlane__V1__StatsRequest, zlane__v1__stats_request__init);
            r->stats->lanes_only = in->stats_lanes_only;
            if (in->stats_groups.set) {
                const zl_group_query_t *q = &in->stats_groups;
                Zlane__V1__GroupQuery *g =
                    NEW (a, Zlane__V1__GroupQuery, zlane__v1__group_query__init);
                g->lane = S (q->lane);
                g->tenant_contains = S (q->tenant_contains);
                g->sort = (Zlane__V1__GroupSort)q->sort;
                g->ascending = q->ascending;
                g->offset = q->offset;
                g->limit = q->limit;
                r->stats->groups = g;
            }
            break;
        case ZL_ADMIN_DLQ_LIST:
            r->op_case = ZLANE__V1__ADMIN_REQUEST__OP_DLQ_LIST;
            r->dlq_list = NEW (a, Zlane__V1__DlqListRequest, zlane__v1__dlq_list_request__init);
            r->dlq_list->filter = s_enc_filter (a, &in->filter);
            r->dlq_list->limit = in->limit;
            r->dlq_list->after_id = in->after_id;
            break;
        case ZL_ADMIN_DLQ_SHOW:
            r->op_case = ZLANE__V1__ADMIN_REQUEST__OP_DLQ_SHOW;
            r->dlq_show = NEW (a, Zlane__V1__DlqShowRequest, zlane__v1__dlq_show_request__init);
            r->dlq_show->job_id = in->job_id;
            break;
        case ZL_ADMIN_DLQ_REDRIVE:
            r->op_case = ZLANE__V1__ADMIN_REQUEST__OP_DLQ_REDRIVE;
            r->dlq_redrive = s_enc_filter (a, &in->filter);
            break;
        case ZL_ADMIN_DLQ_PURGE:
            r->op_case = ZLANE__V1__ADMIN_REQUEST__OP_DLQ_PURGE;
            r->dlq_purge = s_enc_filter (a, &in->filter);
            break;
        case ZL_ADMIN_PAUSE:
        case ZL_ADMIN_RESUME: {
            Zlane__V1__LaneControl *c =
                NEW (a, Zlane__V1__LaneControl, zlane__v1__lane_control__init);
            c->lane = S (in->lane);
            if (in->op == ZL_ADMIN_PAUSE) {
                r->op_case = ZLANE__V1__ADMIN_REQUEST__OP_PAUSE;
                r->pause = c;
            } else {
                r->op_case = ZLANE__V1__ADMIN_REQUEST__OP_RESUME;
                r->resume = c;
            }
            break;
        }
        case ZL_ADMIN_CANCEL:
            r->op_case = ZLANE__V1__ADMIN_REQUEST__OP_CANCEL;
            r->cancel = NEW (a, Zlane__V1__CancelRequest, zlane__v1__cancel_request__init);
            r->cancel->n_ids = in->n_ids;
            r->cancel->ids = (uint64_t *)in->ids;
            break;
        case ZL_ADMIN_JOB_SHOW:
            r->op_case = ZLANE__V1__ADMIN_REQUEST__OP_JOB_SHOW;
            r->job_show = NEW (a, Zlane__V1__JobQuery, zlane__v1__job_query__init);
            r->job_show->job_id = in->job_id;
            break;
        case ZL_ADMIN_BATCH_SHOW:
            r->op_case = ZLANE__V1__ADMIN_REQUEST__OP_BATCH_SHOW;
            r->batch_show = NEW (a, Zlane__V1__BatchQuery, zlane__v1__batch_query__init);
            r->batch_show->batch_id = S (in->batch_id);
            break;
        case ZL_ADMIN_SCHEDULE_ADD:
            r->op_case = ZLANE__V1__ADMIN_REQUEST__OP_SCHEDULE_ADD;
            r->schedule_add = s_enc_schedule (a, &in->schedule);
            break;
        case ZL_ADMIN_SCHEDULE_LIST:
            r->op_case = ZLANE__V1__ADMIN_REQUEST__OP_SCHEDULE_LIST;
            r->schedule_list = NEW (a, Zlane__V1__ScheduleQuery, zlane__v1__schedule_query__init);
            break;
        case ZL_ADMIN_WORKERS:
            r->op_case = ZLANE__V1__ADMIN_REQUEST__OP_WORKERS;
            r->workers = NEW (a, Zlane__V1__WorkersRequest, zlane__v1__workers_request__init);
            break;
        case ZL_ADMIN_SCHEDULE_REMOVE:
        case ZL_ADMIN_SCHEDULE_PAUSE:
        case ZL_ADMIN_SCHEDULE_RESUME: {
            Zlane__V1__ScheduleName *n =
                NEW (a, Zlane__V1__ScheduleName, zlane__v1__schedule_name__init);
            n->name = S (in->schedule.name);
            if (in->op == ZL_ADMIN_SCHEDULE_REMOVE) {
                r->op_case = ZLANE__V1__ADMIN_REQUEST__OP_SCHEDULE_REMOVE;
                r->schedule_remove = n;
            } else if (in->op == ZL_ADMIN_SCHEDULE_PAUSE) {
                r->op_case = ZLANE__V1__ADMIN_REQUEST__OP_SCHEDULE_PAUSE;
                r->schedule_pause = n;
            } else {
                r->op_case = ZLANE__V1__ADMIN_REQUEST__OP_SCHEDULE_RESUME;
                r->schedule_resume = n;
            }
            break;
        }
        default: break; // no op: the broker answers with an error
        }
        break;
    }
    case ZL_MSG_ADMIN_REPLY: {
        const zl_admin_reply_t *in = &m->u.admin_reply;
        e->body_case = ZLANE__V1__ENVELOPE__BODY_ADMIN_REPLY;
        Zlane__V1__AdminReply *r = NEW (a, Zlane__V1__AdminReply, zlane__v1__admin_reply__init);
        e->admin_reply = r;
        r->request_id = in->request_id;
        r->ok = in->ok;
        r->error = S (in->error);
        switch (in->result) {
        case ZL_ADMIN_RESULT_STATS:
            r->result_case = ZLANE__V1__ADMIN_REPLY__RESULT_STATS;
            r->stats = s_enc_stats (a, &in->stats);
            break;
        case ZL_ADMIN_RESULT_DLQ_LIST:
            r->result_case = ZLANE__V1__ADMIN_REPLY__RESULT_DLQ_LIST;
            r->dlq_list = NEW (a, Zlane__V1__DlqList, zlane__v1__dlq_list__init);
            r->dlq_list->n_items = in->n_dead_letters;
            r->dlq_list->items = PTRS (a, in->n_dead_letters, Zlane__V1__DeadLetter);
            for (size_t i = 0; i < in->n_dead_letters; i++)
                r->dlq_list->items[i] = s_enc_dead_letter (a, &in->dead_letters[i]);
            break;
        case ZL_ADMIN_RESULT_DEAD_LETTER:
            r->result_case = ZLANE__V1__ADMIN_REPLY__RESULT_DEAD_LETTER;
            r->dead_letter = s_enc_dead_letter (a, &in->dead_letter);
            break;
        case ZL_ADMIN_RESULT_COUNT:
            r->result_case = ZLANE__V1__ADMIN_REPLY__RESULT_COUNT;
            r->count = in->count;
            break;
        case ZL_ADMIN_RESULT_CANCEL: {
            r->result_case = ZLANE__V1__ADMIN_REPLY__RESULT_CANCEL;
            Zlane__V1__CancelReply *c =
                NEW (a, Zlane__V1__CancelReply, zlane__v1__cancel_reply__init);
            c->count = in->count;
            c->n_items = in->n_cancel_items;
            c->items = PTRS (a, in->n_cancel_items, Zlane__V1__CancelItem);
            for (size_t i = 0; i < in->n_cancel_items; i++) {
                const zl_cancel_item_t *t = &in->cancel_items[i];
                Zlane__V1__CancelItem *o =
                    NEW (a, Zlane__V1__CancelItem, zlane__v1__cancel_item__init);
                o->job_id = t->job_id;
                o->outcome = (Zlane__V1__CancelOutcome)t->outcome;
                o->state = S (t->state);
                o->cancelled_at_ms = t->cancelled_at_ms;
                c->items[i] = o;
            }
            r->cancel = c;
            break;
        }
        case ZL_ADMIN_RESULT_JOB:
            r->result_case = ZLANE__V1__ADMIN_REPLY__RESULT_JOB;
            r->job = s_enc_outcome (a, &in->job);
            break;
        case ZL_ADMIN_RESULT_BATCH:
            r->result_case = ZLANE__V1__ADMIN_REPLY__RESULT_BATCH;
            r->batch = s_enc_batch (a, &in->batch);
            break;
        case ZL_ADMIN_RESULT_SCHEDULES:
            r->result_case = ZLANE__V1__ADMIN_REPLY__RESULT_SCHEDULES;
            r->schedules = NEW (a, Zlane__V1__ScheduleList, zlane__v1__schedule_list__init);
            r->schedules->n_items = in->n_schedules;
            r->schedules->items = PTRS (a, in->n_schedules, Zlane__V1__Schedule);
            for (size_t i = 0; i < in->n_schedules; i++)
                r->schedules->items[i] = s_enc_schedule (a, &in->schedules[i]);
            break;
        case ZL_ADMIN_RESULT_WORKERS:
            r->result_case = ZLANE__V1__ADMIN_REPLY__RESULT_WORKERS;
            r->workers = NEW (a, Zlane__V1__WorkerList, zlane__v1__worker_list__init);
            r->workers->n_items = in->n_workers;
            r->workers->items = PTRS (a, in->n_workers, Zlane__V1__WorkerInfo);
            for (size_t i = 0; i < in->n_workers; i++) {
                const zl_worker_info_t *t = &in->workers[i];
                Zlane__V1__WorkerInfo *w =
                    NEW (a, Zlane__V1__WorkerInfo, zlane__v1__worker_info__init);
                w->name = S (t->name);
                w->host = S (t->host);
                w->n_lanes = t->n_lanes;
                w->lanes = (char **)t->lanes;
                w->capacity = t->capacity;
                w->in_flight = t->in_flight;
                w->last_seen_age_ms = t->last_seen_age_ms;
                w->instance = t->instance;
                w->heartbeat_ms = t->heartbeat_ms;
                r->workers->items[i] = w;
            }
            break;
        default: break;
        }
        break;
    }
    default: return -1;
    }
    return 0;
}

const void *
zl_codec_encode (zl_codec_t *self, const zl_msg_t *msg, size_t *size_p)
{
    zl_arena_reset (self->enc);
    Zlane__V1__Envelope env = ZLANE__V1__ENVELOPE__INIT;
    env.version = ZL_PROTOCOL_VERSION;
    if (s_encode_body (self->enc, msg, &env) != 0)
        return NULL;
    size_t size = zlane__v1__envelope__get_packed_size (&env);
    uint8_t *out = zl_arena_alloc (self->enc, size);
    *size_p = zlane__v1__envelope__pack (&env, out);
    if (self->tap)
        self->tap (self->tap_arg, out, *size_p);
#ifndef NDEBUG
    // what the broker sends is text wherever the schema says string:
    // decoders in other languages refuse anything else (debug builds: tests)
    if (!self->strict)
        return out;
    walk_t w = {.arena = self->enc};
    s_walk (&w, &zlane__v1__envelope__descriptor, out, *size_p, 0);
    for (size_t i = 0; i < w.n_spec_invalid; i++)
        if (w.spec_invalid[i])
            w.error = w.spec_invalid[i];
    if (w.error) {
        fprintf (stderr, "zlane codec: encoding %s: %s\n", zl_msg_kind_name (msg->kind), w.error);
        abort ();
    }
#endif
    return out;
}
