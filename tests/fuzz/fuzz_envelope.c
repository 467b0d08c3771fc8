/*  fuzz_envelope: libFuzzer target for the codec (common/codec.c).
    Decode the input; if it is a valid Envelope, encode the message, decode
    that again and require the round trip to be stable: the second decode
    succeeds, yields the same message field by field, and encodes to the
    same bytes. Any difference aborts with the field that differs. */
#include "codec.h"
#include "msg.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *s_field; // the field being compared, for the report

static void
s_fail (const char *what)
{
    fprintf (stderr, "fuzz_envelope: round trip not stable: %s (%s)\n", what,
             s_field ? s_field : "?");
    abort ();
}

#define EQ(a, b)                                                                                   \
    do {                                                                                           \
        s_field = #a;                                                                              \
        if ((a) != (b))                                                                            \
            s_fail ("value differs");                                                              \
    } while (0)

static void
s_str (const char *a, const char *b, const char *name)
{
    s_field = name;
    if (strcmp (a ? a : "", b ? b : "") != 0)
        s_fail ("string differs");
}
#define STR(a, b) s_str ((a), (b), #a)

static void
s_bytes (zl_bytes_t a, zl_bytes_t b)
{
    s_field = "bytes";
    if (a.len != b.len || (a.len && memcmp (a.data, b.data, a.len) != 0))
        s_fail ("bytes differ");
}

static void
s_headers (size_t na, const zl_header_t *a, size_t nb, const zl_header_t *b)
{
    EQ (na, nb);
    for (size_t i = 0; i < na; i++) {
        STR (a[i].key, b[i].key);
        STR (a[i].value, b[i].value);
    }
}

static void
s_filter (const zl_dlq_filter_t *a, const zl_dlq_filter_t *b)
{
    STR (a->lane, b->lane);
    STR (a->tenant, b->tenant);
    EQ (a->all, b->all);
    EQ (a->n_ids, b->n_ids);
    for (size_t i = 0; i < a->n_ids; i++)
        EQ (a->ids[i], b->ids[i]);
    STR (a->error_contains, b->error_contains);
    EQ (a->dead_from_ms, b->dead_from_ms);
    EQ (a->dead_to_ms, b->dead_to_ms);
}

static void
s_dead_letter (const zl_dead_letter_t *a, const zl_dead_letter_t *b)
{
    EQ (a->job_id, b->job_id);
    STR (a->tenant, b->tenant);
    STR (a->lane, b->lane);
    s_bytes (a->payload, b->payload);
    STR (a->idempotency_key, b->idempotency_key);
    EQ (a->enqueued_at_ms, b->enqueued_at_ms);
    EQ (a->dead_at_ms, b->dead_at_ms);
    STR (a->error, b->error);
    EQ (a->n_attempts, b->n_attempts);
    for (size_t i = 0; i < a->n_attempts; i++) {
        const zl_attempt_t *x = &a->attempts[i], *y = &b->attempts[i];
        EQ (x->attempt, y->attempt);
        STR (x->worker, y->worker);
        EQ (x->started_at_ms, y->started_at_ms);
        EQ (x->ended_at_ms, y->ended_at_ms);
        EQ (x->outcome, y->outcome);
        STR (x->error, y->error);
    }
    s_headers (a->n_headers, a->headers, b->n_headers, b->headers);
    STR (a->ordering_key, b->ordering_key);
    EQ (a->ordering_head, b->ordering_head);
    s_bytes (a->checkpoint, b->checkpoint);
}

static void
s_groups (size_t na, const zl_group_stats_t *a, size_t nb, const zl_group_stats_t *b)
{
    EQ (na, nb);
    for (size_t i = 0; i < na; i++) {
        const zl_group_stats_t *x = &a[i], *y = &b[i];
        STR (x->lane, y->lane);
        STR (x->tenant, y->tenant);
        EQ (x->ready, y->ready);
        EQ (x->delayed, y->delayed);
        EQ (x->in_flight, y->in_flight);
        EQ (x->dlq, y->dlq);
        EQ (x->oldest_ready_age_ms, y->oldest_ready_age_ms);
        EQ (x->oldest_dlq_age_ms, y->oldest_dlq_age_ms);
        EQ (x->submitted, y->submitted);
        EQ (x->acked, y->acked);
        EQ (x->nacked_transient, y->nacked_transient);
        EQ (x->nacked_throttled, y->nacked_throttled);
        EQ (x->nacked_permanent, y->nacked_permanent);
        EQ (x->lease_expired, y->lease_expired);
        EQ (x->dead_lettered, y->dead_lettered);
        EQ (x->run_us, y->run_us);
        EQ (x->throttled, y->throttled);
        EQ (x->capped, y->capped);
        EQ (x->paused, y->paused);
    }
}

static void
s_breaker (const zl_breaker_info_t *a, const zl_breaker_info_t *b)
{
    STR (a->lane, b->lane);
    EQ (a->state, b->state);
    EQ (a->failures, b->failures);
    EQ (a->until_ms, b->until_ms);
    EQ (a->probes_out, b->probes_out);
    EQ (a->opened, b->opened);
}

static void
s_stats (const zl_stats_t *a, const zl_stats_t *b)
{
    EQ (a->uptime_ms, b->uptime_ms);
    EQ (a->tenants_known, b->tenants_known);
    EQ (a->groups_matched, b->groups_matched);
    EQ (a->n_counters, b->n_counters);
    for (size_t i = 0; i < a->n_counters; i++) {
        STR (a->counters[i].name, b->counters[i].name);
        EQ (a->counters[i].value, b->counters[i].value);
    }
    s_groups (a->n_lanes, a->lanes, b->n_lanes, b->lanes);
    s_groups (a->n_tenants, a->tenants, b->n_tenants, b->tenants);
    s_groups (a->n_groups, a->groups, b->n_groups, b->groups);
    EQ (a->n_latencies, b->n_latencies);
    for (size_t i = 0; i < a->n_latencies; i++) {
        const zl_latency_t *x = &a->latencies[i], *y = &b->latencies[i];
        STR (x->name, y->name);
        EQ (x->count, y->count);
        EQ (x->p50_us, y->p50_us);
        EQ (x->p90_us, y->p90_us);
        EQ (x->p99_us, y->p99_us);
        EQ (x->max_us, y->max_us);
    }
    EQ (a->workers, b->workers);
    EQ (a->producers, b->producers);
    EQ (a->n_breakers, b->n_breakers);
    for (size_t i = 0; i < a->n_breakers; i++)
        s_breaker (&a->breakers[i], &b->breakers[i]);
}

// Compare two decoded messages field by field.
static void
s_outcome (const zl_job_outcome_t *x, const zl_job_outcome_t *y)
{
    EQ (x->job_id, y->job_id);
    EQ (x->found, y->found);
    EQ (x->final, y->final);
    STR (x->state, y->state);
    EQ (x->outcome, y->outcome);
    s_bytes (x->result, y->result);
    STR (x->error, y->error);
    EQ (x->failed_parent, y->failed_parent);
    STR (x->tenant, y->tenant);
    STR (x->lane, y->lane);
    EQ (x->finished_at_ms, y->finished_at_ms);
    EQ (x->attempts, y->attempts);
    EQ (x->n_parents, y->n_parents);
    for (size_t i = 0; i < x->n_parents; i++)
        EQ (x->parents[i], y->parents[i]);
    EQ (x->n_children, y->n_children);
    for (size_t i = 0; i < x->n_children; i++)
        EQ (x->children[i], y->children[i]);
}

static void
s_batch (const zl_batch_info_t *x, const zl_batch_info_t *y)
{
    STR (x->batch_id, y->batch_id);
    EQ (x->found, y->found);
    STR (x->tenant, y->tenant);
    STR (x->lane, y->lane);
    EQ (x->job_id, y->job_id);
    EQ (x->callback, y->callback);
    EQ (x->closed, y->closed);
    EQ (x->settled, y->settled);
    EQ (x->cancelled, y->cancelled);
    EQ (x->jobs, y->jobs);
    EQ (x->acked, y->acked);
    EQ (x->dead, y->dead);
    EQ (x->cancelled_jobs, y->cancelled_jobs);
    EQ (x->pending, y->pending);
    EQ (x->n_failed, y->n_failed);
    for (size_t k = 0; k < x->n_failed; k++)
        EQ (x->failed[k], y->failed[k]);
    EQ (x->failed_more, y->failed_more);
    EQ (x->opened_at_ms, y->opened_at_ms);
    EQ (x->closed_at_ms, y->closed_at_ms);
    EQ (x->settled_at_ms, y->settled_at_ms);
}

static void
s_msg_equal (const zl_msg_t *a, const zl_msg_t *b)
{
    EQ (a->kind, b->kind);
    switch (a->kind) {
    case ZL_MSG_HELLO: STR (a->u.hello.client, b->u.hello.client); break;
    case ZL_MSG_SUBMIT:
        EQ (a->u.submit.n, b->u.submit.n);
        for (size_t i = 0; i < a->u.submit.n; i++) {
            const zl_job_spec_t *x = &a->u.submit.jobs[i], *y = &b->u.submit.jobs[i];
            EQ (x->seq, y->seq);
            STR (x->tenant, y->tenant);
            STR (x->lane, y->lane);
            s_bytes (x->payload, y->payload);
            STR (x->idempotency_key, y->idempotency_key);
            EQ (x->delay_ms, y->delay_ms);
            EQ (x->max_attempts, y->max_attempts);
            EQ (x->lease_ms, y->lease_ms);
            EQ (x->max_run_ms, y->max_run_ms);
            s_headers (x->n_headers, x->headers, y->n_headers, y->headers);
            EQ (x->generated_key, y->generated_key);
            EQ (x->n_depends_on, y->n_depends_on);
            for (size_t k = 0; k < x->n_depends_on; k++)
                EQ (x->depends_on[k], y->depends_on[k]);
            EQ (x->n_depends_on_seq, y->n_depends_on_seq);
            for (size_t k = 0; k < x->n_depends_on_seq; k++)
                EQ (x->depends_on_seq[k], y->depends_on_seq[k]);
            STR (x->batch, y->batch);
            EQ (x->has_priority, y->has_priority);
            EQ (x->deadline_ms, y->deadline_ms);
            EQ (x->max_age_ms, y->max_age_ms);
            EQ (x->priority, y->priority);
            STR (x->ordering_key, y->ordering_key);
            EQ (x->open_batch, y->open_batch);
            if (x->open_batch) {
                STR (x->open_batch_id, y->open_batch_id);
                EQ (x->batch_no_callback, y->batch_no_callback);
                EQ (x->batch_close, y->batch_close);
            }
        }
        EQ (a->u.submit.n_close, b->u.submit.n_close);
        for (size_t i = 0; i < a->u.submit.n_close; i++)
            STR (a->u.submit.close_batches[i], b->u.submit.close_batches[i]);
        break;
    case ZL_MSG_ACCEPTED:
        EQ (a->u.accepted.n, b->u.accepted.n);
        for (size_t i = 0; i < a->u.accepted.n; i++) {
            EQ (a->u.accepted.jobs[i].seq, b->u.accepted.jobs[i].seq);
            EQ (a->u.accepted.jobs[i].job_id, b->u.accepted.jobs[i].job_id);
            EQ (a->u.accepted.jobs[i].duplicate, b->u.accepted.jobs[i].duplicate);
            STR (a->u.accepted.jobs[i].batch_id, b->u.accepted.jobs[i].batch_id);
        }
        EQ (a->u.accepted.n_closed, b->u.accepted.n_closed);
        for (size_t i = 0; i < a->u.accepted.n_closed; i++) {
            STR (a->u.accepted.closed[i].batch_id, b->u.accepted.closed[i].batch_id);
            EQ (a->u.accepted.closed[i].ok, b->u.accepted.closed[i].ok);
            STR (a->u.accepted.closed[i].error, b->u.accepted.closed[i].error);
        }
        break;
    case ZL_MSG_REJECTED:
        EQ (a->u.rejected.n, b->u.rejected.n);
        for (size_t i = 0; i < a->u.rejected.n; i++) {
            const zl_rejection_t *x = &a->u.rejected.jobs[i], *y = &b->u.rejected.jobs[i];
            EQ (x->seq, y->seq);
            EQ (x->code, y->code);
            STR (x->reason, y->reason);
            EQ (x->retry_after_ms, y->retry_after_ms);
        }
        break;
    case ZL_MSG_CREDIT: EQ (a->u.credit.limit, b->u.credit.limit); break;
    case ZL_MSG_READY:
        STR (a->u.ready.name, b->u.ready.name);
        EQ (a->u.ready.capacity, b->u.ready.capacity);
        EQ (a->u.ready.instance, b->u.ready.instance);
        EQ (a->u.ready.n_lanes, b->u.ready.n_lanes);
        for (size_t i = 0; i < a->u.ready.n_lanes; i++)
            STR (a->u.ready.lanes[i], b->u.ready.lanes[i]);
        EQ (a->u.ready.held_listed, b->u.ready.held_listed);
        EQ (a->u.ready.n_held, b->u.ready.n_held);
        for (size_t i = 0; i < a->u.ready.n_held; i++) {
            EQ (a->u.ready.held[i].job_id, b->u.ready.held[i].job_id);
            EQ (a->u.ready.held[i].lease, b->u.ready.held[i].lease);
        }
        break;
    case ZL_MSG_HEARTBEAT: break;
    case ZL_MSG_EXTEND:
        EQ (a->u.extend.n, b->u.extend.n);
        for (size_t i = 0; i < a->u.extend.n; i++) {
            EQ (a->u.extend.items[i].job_id, b->u.extend.items[i].job_id);
            EQ (a->u.extend.items[i].lease, b->u.extend.items[i].lease);
            EQ (a->u.extend.items[i].lease_ms, b->u.extend.items[i].lease_ms);
            s_bytes (a->u.extend.items[i].checkpoint, b->u.extend.items[i].checkpoint);
        }
        break;
    case ZL_MSG_ACK:
        EQ (a->u.ack.n, b->u.ack.n);
        for (size_t i = 0; i < a->u.ack.n; i++) {
            EQ (a->u.ack.items[i].job_id, b->u.ack.items[i].job_id);
            EQ (a->u.ack.items[i].lease, b->u.ack.items[i].lease);
            EQ (a->u.ack.items[i].run_us, b->u.ack.items[i].run_us);
            s_bytes (a->u.ack.items[i].result, b->u.ack.items[i].result);
        }
        break;
    case ZL_MSG_NACK:
        EQ (a->u.nack.n, b->u.nack.n);
        for (size_t i = 0; i < a->u.nack.n; i++) {
            const zl_nack_item_t *x = &a->u.nack.items[i], *y = &b->u.nack.items[i];
            EQ (x->job_id, y->job_id);
            EQ (x->lease, y->lease);
            EQ (x->cls, y->cls);
            STR (x->error, y->error);
            EQ (x->retry_after_ms, y->retry_after_ms);
            EQ (x->run_us, y->run_us);
            s_bytes (x->checkpoint, y->checkpoint);
        }
        break;
    case ZL_MSG_DISPATCH:
        EQ (a->u.dispatch.n, b->u.dispatch.n);
        for (size_t i = 0; i < a->u.dispatch.n; i++) {
            const zl_job_msg_t *x = &a->u.dispatch.jobs[i], *y = &b->u.dispatch.jobs[i];
            EQ (x->job_id, y->job_id);
            EQ (x->lease, y->lease);
            EQ (x->attempt, y->attempt);
            STR (x->tenant, y->tenant);
            STR (x->lane, y->lane);
            s_bytes (x->payload, y->payload);
            s_headers (x->n_headers, x->headers, y->n_headers, y->headers);
            STR (x->idempotency_key, y->idempotency_key);
            EQ (x->lease_ms, y->lease_ms);
            EQ (x->max_run_ms, y->max_run_ms);
            EQ (x->max_attempts, y->max_attempts);
            EQ (x->enqueued_at_ms, y->enqueued_at_ms);
            EQ (x->n_parent_results, y->n_parent_results);
            for (size_t k = 0; k < x->n_parent_results; k++) {
                EQ (x->parent_results[k].job_id, y->parent_results[k].job_id);
                s_bytes (x->parent_results[k].result, y->parent_results[k].result);
            }
            EQ (x->batch != NULL, y->batch != NULL);
            if (x->batch)
                s_batch (x->batch, y->batch);
            STR (x->ordering_key, y->ordering_key);
            s_bytes (x->checkpoint, y->checkpoint);
        }
        break;
    case ZL_MSG_SETTLED:
        EQ (a->u.settled.n, b->u.settled.n);
        for (size_t i = 0; i < a->u.settled.n; i++) {
            EQ (a->u.settled.items[i].job_id, b->u.settled.items[i].job_id);
            EQ (a->u.settled.items[i].lease, b->u.settled.items[i].lease);
        }
        break;
    case ZL_MSG_CANCEL:
        EQ (a->u.cancel.n, b->u.cancel.n);
        for (size_t i = 0; i < a->u.cancel.n; i++) {
            EQ (a->u.cancel.items[i].job_id, b->u.cancel.items[i].job_id);
            EQ (a->u.cancel.items[i].lease, b->u.cancel.items[i].lease);
        }
        break;
    case ZL_MSG_ERROR:
        EQ (a->u.error.code, b->u.error.code);
        STR (a->u.error.message, b->u.error.message);
        EQ (a->u.error.job_id, b->u.error.job_id);
        EQ (a->u.error.lease, b->u.error.lease);
        EQ (a->u.error.n_items, b->u.error.n_items);
        for (size_t i = 0; i < a->u.error.n_items; i++) {
            EQ (a->u.error.items[i].job_id, b->u.error.items[i].job_id);
            EQ (a->u.error.items[i].lease, b->u.error.items[i].lease);
            EQ (a->u.error.items[i].code, b->u.error.items[i].code);
        }
        break;
    case ZL_MSG_DEAD_LETTER: s_dead_letter (&a->u.dead_letter, &b->u.dead_letter); break;
    case ZL_MSG_DLQ_ALERT:
        EQ (a->u.dlq_alert.depth, b->u.dlq_alert.depth);
        EQ (a->u.dlq_alert.oldest_age_ms, b->u.dlq_alert.oldest_age_ms);
        break;
    case ZL_MSG_ADMIN_REQUEST: {
        const zl_admin_request_t *x = &a->u.admin_request, *y = &b->u.admin_request;
        EQ (x->request_id, y->request_id);
        EQ (x->op, y->op);
        EQ (x->stats_lanes_only, y->stats_lanes_only);
        EQ (x->stats_groups.set, y->stats_groups.set);
        if (x->stats_groups.set) {
            STR (x->stats_groups.lane, y->stats_groups.lane);
            STR (x->stats_groups.tenant_contains, y->stats_groups.tenant_contains);
            EQ (x->stats_groups.sort, y->stats_groups.sort);
            EQ (x->stats_groups.ascending, y->stats_groups.ascending);
            EQ (x->stats_groups.offset, y->stats_groups.offset);
            EQ (x->stats_groups.limit, y->stats_groups.limit);
        }
        s_filter (&x->filter, &y->filter);
        EQ (x->limit, y->limit);
        EQ (x->after_id, y->after_id);
        EQ (x->job_id, y->job_id);
        STR (x->lane, y->lane);
        EQ (x->n_ids, y->n_ids);
        for (size_t i = 0; i < x->n_ids; i++)
            EQ (x->ids[i], y->ids[i]);
        if (x->op == ZL_ADMIN_BATCH_SHOW)
            STR (x->batch_id, y->batch_id);
        break;
    }
    case ZL_MSG_ADMIN_REPLY: {
        const zl_admin_reply_t *x = &a->u.admin_reply, *y = &b->u.admin_reply;
        EQ (x->request_id, y->request_id);
        EQ (x->ok, y->ok);
        STR (x->error, y->error);
        EQ (x->result, y->result);
        if (x->result == ZL_ADMIN_RESULT_STATS)
            s_stats (&x->stats, &y->stats);
        EQ (x->n_dead_letters, y->n_dead_letters);
        for (size_t i = 0; i < x->n_dead_letters; i++)
            s_dead_letter (&x->dead_letters[i], &y->dead_letters[i]);
        if (x->result == ZL_ADMIN_RESULT_DEAD_LETTER)
            s_dead_letter (&x->dead_letter, &y->dead_letter);
        EQ (x->count, y->count);
        EQ (x->n_cancel_items, y->n_cancel_items);
        for (size_t i = 0; i < x->n_cancel_items; i++) {
            EQ (x->cancel_items[i].job_id, y->cancel_items[i].job_id);
            EQ (x->cancel_items[i].outcome, y->cancel_items[i].outcome);
            STR (x->cancel_items[i].state, y->cancel_items[i].state);
            EQ (x->cancel_items[i].cancelled_at_ms, y->cancel_items[i].cancelled_at_ms);
        }
        if (x->result == ZL_ADMIN_RESULT_JOB)
            s_outcome (&x->job, &y->job);
        if (x->result == ZL_ADMIN_RESULT_BATCH)
            s_batch (&x->batch, &y->batch);
        EQ (x->n_workers, y->n_workers);
        for (size_t i = 0; i < x->n_workers; i++) {
            const zl_worker_info_t *p = &x->workers[i], *q = &y->workers[i];
            STR (p->name, q->name);
            STR (p->host, q->host);
            EQ (p->n_lanes, q->n_lanes);
            for (size_t k = 0; k < p->n_lanes; k++)
                STR (p->lanes[k], q->lanes[k]);
            EQ (p->capacity, q->capacity);
            EQ (p->in_flight, q->in_flight);
            EQ (p->last_seen_age_ms, q->last_seen_age_ms);
            EQ (p->instance, q->instance);
            EQ (p->heartbeat_ms, q->heartbeat_ms);
        }
        break;
    }
    case ZL_MSG_WATCH:
        EQ (a->u.watch.n, b->u.watch.n);
        for (size_t i = 0; i < a->u.watch.n; i++)
            EQ (a->u.watch.job_ids[i], b->u.watch.job_ids[i]);
        break;
    case ZL_MSG_OUTCOME:
    case ZL_MSG_JOB_DONE: s_outcome (&a->u.outcome, &b->u.outcome); break;
    case ZL_MSG_BATCH_DONE: s_batch (&a->u.batch_done, &b->u.batch_done); break;
    case ZL_MSG_BREAKER: s_breaker (&a->u.breaker, &b->u.breaker); break;
    default: s_fail ("decoded an unknown kind");
    }
    s_field = NULL;
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    static zl_codec_t *first, *second;
    if (!first) {
        first = zl_codec_new ();
        second = zl_codec_new ();
    }
    zl_msg_t m1, m2;
    zl_decode_rc_t rc = zl_codec_decode (first, data, size, &m1);
    if (rc == ZL_DECODE_BAD_TEXT && !strstr (zl_codec_error (first), "field '"))
        s_fail ("a string that is not text, and no field named");
    if (rc != ZL_DECODE_OK && rc != ZL_DECODE_BAD_TEXT) // bad text: decoded all the same
        return 0;
    if (m1.kind <= ZL_MSG_NONE || m1.kind >= ZL_MSG_KIND_COUNT)
        s_fail ("decode returned OK with no kind");
    size_t n1, n2;
    const uint8_t *e1 = zl_codec_encode (first, &m1, &n1);
    if (!e1)
        s_fail ("a decoded message does not encode");
    rc = zl_codec_decode (second, e1, n1, &m2);
    if (rc != ZL_DECODE_OK && rc != ZL_DECODE_BAD_TEXT)
        s_fail ("the encoding of a decoded message does not decode");
    s_msg_equal (&m1, &m2);
    const uint8_t *e2 = zl_codec_encode (second, &m2, &n2);
    if (!e2 || n1 != n2 || memcmp (e1, e2, n1) != 0)
        s_fail ("re-encoding gives different bytes");
    return 0;
}
