#include "jobs.h"

#include "clock.h"
#include "hist.h"
#include "log.h"
#include "u64map.h"
#include "zl_alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NO_SLOT UINT32_MAX
#define MAX_ERROR_TEXT 1024

struct _zl_jobs_t {
    zl_u64map_t *by_id;  // every live job (ready, delayed, leased, dead)
    zl_sched_t *sched;
    zl_timers_t *timers;
    zl_rng_t *rng;
    zl_dlq_t *dlq;
    zl_jobs_listener_fn *listener;
    void *listener_ctx;
    zl_hist_t lat_start;  // submit -> first start
    zl_hist_t lat_ack;    // submit -> ack
};

zl_now_t
zl_now (void)
{
    zl_now_t now;
    now.mono_us = zl_clock_mono_us ();
    now.mono_ms = now.mono_us / 1000;
    now.wall_ms = zl_clock_wall_ms ();
    return now;
}

const char *
zl_job_state_name (zl_job_state_t state)
{
    switch (state) {
    case ZL_JOB_READY: return "ready";
    case ZL_JOB_DELAYED: return "delayed";
    case ZL_JOB_LEASED: return "leased";
    case ZL_JOB_DEAD: return "dead";
    }
    return "unknown";
}

zl_jobs_t *
zl_jobs_new (zl_sched_t *sched, zl_timers_t *timers, zl_rng_t *rng)
{
    zl_jobs_t *self = ZL_NEW (zl_jobs_t);
    self->by_id = zl_u64map_new ();
    self->sched = sched;
    self->timers = timers;
    self->rng = rng;
    self->dlq = zl_dlq_new ();
    return self;
}

static void
s_free_history (zl_job_t *job)
{
    for (uint32_t i = 0; i < job->n_history; i++) {
        free (job->history[i].worker);
        free (job->history[i].error);
    }
    free (job->history);
    job->history = NULL;
    job->n_history = 0;
}

static void
s_free_job (zl_job_t *job)
{
    free (job->payload);
    free (job->idempotency_key);
    for (uint32_t i = 0; i < job->n_headers; i++) {
        free ((char *) job->headers[i].key);
        free ((char *) job->headers[i].value);
    }
    free (job->headers);
    s_free_history (job);
    free (job);
}

void
zl_jobs_destroy (zl_jobs_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_jobs_t *self = *self_p;
    size_t cursor = 0;
    zl_job_t *job;
    while ((job = zl_u64map_next (self->by_id, &cursor, NULL)))
        s_free_job (job);
    zl_u64map_destroy (&self->by_id);
    zl_dlq_destroy (&self->dlq);
    free (self);
    *self_p = NULL;
}

void
zl_jobs_set_listener (zl_jobs_t *self, zl_jobs_listener_fn *fn, void *ctx)
{
    self->listener = fn;
    self->listener_ctx = ctx;
}

static void
s_tell (zl_jobs_t *self, zl_jobs_event_t ev, zl_job_t *job)
{
    if (self->listener)
        self->listener (self->listener_ctx, ev, job);
}

uint64_t
zl_backoff_ms (uint64_t base_ms, uint64_t cap_ms, uint32_t attempt, bool jitter, zl_rng_t *rng)
{
    // min (cap, base * 2^attempt) without overflow, for any attempt
    uint64_t upper = cap_ms;
    if (base_ms == 0)
        upper = 0;
    else if (attempt < 64 && base_ms <= (cap_ms >> attempt))
        upper = base_ms << attempt;
    return jitter ? zl_rng_range (rng, upper) : upper;
}

// ---------------------------------------------------------------- helpers
static void
s_depth (zl_job_t *job, int delta)
{
    job->flow->lane->depth += (uint64_t) (int64_t) delta;
    job->flow->tenant->depth += (uint64_t) (int64_t) delta;
}

static void
s_make_ready (zl_jobs_t *self, zl_job_t *job, zl_now_t now)
{
    job->state = ZL_JOB_READY;
    job->ready_ms = now.mono_ms;
    zl_sched_push (self->sched, job);
}

static void
s_make_delayed (zl_jobs_t *self, zl_job_t *job, uint64_t delay_ms, zl_now_t now)
{
    job->state = ZL_JOB_DELAYED;
    job->due_ms = now.mono_ms + (int64_t) delay_ms;
    job->flow->delayed++;
    zl_timers_set (self->timers, job);
}

static void
s_unlease (zl_jobs_t *self, zl_job_t *job)
{
    zl_timers_cancel (self->timers, job);
    if (job->worker)
        zl_worker_release (job->worker, job);
    job->flow->in_flight--;
    job->flow->lane->in_flight--;
    job->flow->tenant->in_flight--;
    job->lease = 0;
}

static void
s_record_attempt (zl_job_t *job, zl_outcome_t outcome, const char *worker, const char *error,
                  zl_now_t now)
{
    job->history = zl_realloc (job->history, (job->n_history + 1) * sizeof (zl_attempt_rec_t));
    zl_attempt_rec_t *rec = &job->history[job->n_history++];
    rec->attempt = job->attempt;
    rec->outcome = outcome;
    rec->started_at_ms = job->started_at_ms;
    rec->ended_at_ms = now.wall_ms;
    rec->worker = zl_strdup (worker ? worker : "");
    size_t len = error ? strlen (error) : 0;
    rec->error = zl_strndup (error ? error : "", len > MAX_ERROR_TEXT ? MAX_ERROR_TEXT : len);
}

static void
s_delete (zl_jobs_t *self, zl_job_t *job)
{
    zl_u64map_remove (self->by_id, job->id);
    s_free_job (job);
}

static void
s_bury (zl_jobs_t *self, zl_job_t *job, zl_now_t now)
{
    job->state = ZL_JOB_DEAD;
    job->dead_at_ms = now.wall_ms;
    job->flow->dlq++;
    job->flow->dead_lettered++;
    s_depth (job, -1);
    zl_dlq_add (self->dlq, job);
    zl_info ("jobs", "job %llu dead-lettered after %u attempt(s), lane=%s tenant=%s: %s",
             (unsigned long long) job->id, job->attempt, job->flow->lane->name,
             job->flow->tenant->name,
             job->n_history ? job->history[job->n_history - 1].error : "");
    s_tell (self, ZL_JOBS_EV_DEAD, job);
}

// A finished attempt that failed: dead-letter it, or schedule the retry.
// `retry_ms` < 0 asks for the lane's backoff.
static void
s_fail (zl_jobs_t *self, zl_job_t *job, zl_outcome_t outcome, int64_t retry_ms, zl_now_t now)
{
    if (outcome == ZL_OUTCOME_PERMANENT || job->attempt >= job->max_attempts) {
        s_bury (self, job, now);
        return;
    }
    if (retry_ms < 0) {
        const zl_lane_config_t *lc = &job->flow->lane->cfg;
        retry_ms = (int64_t) zl_backoff_ms (lc->backoff_base_ms, lc->backoff_cap_ms, job->attempt,
                                            lc->jitter, self->rng);
    }
    if (retry_ms == 0)
        s_make_ready (self, job, now);
    else
        s_make_delayed (self, job, (uint64_t) retry_ms, now);
}

static zl_settle_rc_t
s_check (zl_jobs_t *self, uint64_t job_id, uint64_t lease, zl_job_t **job_p)
{
    zl_job_t *job = zl_u64map_get (self->by_id, job_id);
    if (!job)
        return ZL_SETTLE_UNKNOWN_JOB;
    if (job->state != ZL_JOB_LEASED || job->lease != lease)
        return ZL_SETTLE_STALE_LEASE;
    *job_p = job;
    return ZL_SETTLE_OK;
}

// ---------------------------------------------------------------- transitions
zl_job_t *
zl_jobs_accept (zl_jobs_t *self, uint64_t id, const zl_job_spec_t *spec, zl_flow_t *flow,
                zl_now_t now)
{
    const zl_lane_config_t *lc = &flow->lane->cfg;
    zl_job_t *job = ZL_NEW (zl_job_t);
    job->id = id;
    job->flow = flow;
    job->timer_idx = NO_SLOT;
    job->max_attempts = spec->max_attempts ? spec->max_attempts : lc->max_attempts;
    if (job->max_attempts == 0)
        job->max_attempts = 1;
    job->lease_ms = spec->lease_ms ? spec->lease_ms : (uint32_t) lc->lease_ms;
    job->max_run_ms = spec->max_run_ms ? spec->max_run_ms : (uint32_t) lc->max_run_ms;
    job->accepted_us = now.mono_us;
    job->enqueued_at_ms = now.wall_ms;
    job->payload_len = (uint32_t) spec->payload.len;
    job->payload = zl_malloc (spec->payload.len ? spec->payload.len : 1);
    if (spec->payload.len)
        memcpy (job->payload, spec->payload.data, spec->payload.len);
    if (spec->idempotency_key && *spec->idempotency_key)
        job->idempotency_key = zl_strdup (spec->idempotency_key);
    if (spec->n_headers) {
        job->n_headers = (uint32_t) spec->n_headers;
        job->headers = zl_calloc (spec->n_headers, sizeof (zl_header_t));
        for (size_t i = 0; i < spec->n_headers; i++) {
            job->headers[i].key = zl_strdup (spec->headers[i].key);
            job->headers[i].value = zl_strdup (spec->headers[i].value);
        }
    }
    zl_u64map_put (self->by_id, id, job);
    flow->submitted++;
    s_depth (job, +1);
    if (spec->delay_ms)
        s_make_delayed (self, job, spec->delay_ms, now);
    else
        s_make_ready (self, job, now);
    return job;
}

void
zl_jobs_lease (zl_jobs_t *self, zl_job_t *job, zl_bworker_t *worker, uint64_t lease, zl_now_t now)
{
    job->state = ZL_JOB_LEASED;
    job->attempt++;
    job->lease = lease;
    job->started_at_ms = now.wall_ms;
    job->started_us = now.mono_us;
    job->lease_deadline_ms = now.mono_ms + job->lease_ms;
    job->run_deadline_ms = job->max_run_ms ? now.mono_ms + job->max_run_ms : 0;
    job->due_ms = job->lease_deadline_ms;
    if (job->run_deadline_ms && job->run_deadline_ms < job->due_ms)
        job->due_ms = job->run_deadline_ms;
    zl_timers_set (self->timers, job);
    zl_worker_hold (worker, job);
    job->flow->in_flight++;
    job->flow->lane->in_flight++;
    job->flow->tenant->in_flight++;
    if (job->attempt == 1)
        zl_hist_add (&self->lat_start, (uint64_t) (now.mono_us - job->accepted_us));
}

static uint64_t
s_run_us (const zl_job_t *job, uint64_t reported, zl_now_t now)
{
    // trust the worker's measure when it gives one, bounded by what we saw
    uint64_t seen = (uint64_t) (now.mono_us - job->started_us);
    return reported && reported <= seen ? reported : seen;
}

zl_settle_rc_t
zl_jobs_ack (zl_jobs_t *self, zl_bworker_t *worker, const zl_ack_item_t *ack, zl_now_t now)
{
    (void) worker;
    zl_job_t *job = NULL;
    zl_settle_rc_t rc = s_check (self, ack->job_id, ack->lease, &job);
    if (rc != ZL_SETTLE_OK)
        return rc;
    zl_sched_charge (self->sched, job, s_run_us (job, ack->run_us, now));
    s_unlease (self, job);
    job->flow->acked++;
    s_depth (job, -1);
    zl_hist_add (&self->lat_ack, (uint64_t) (now.mono_us - job->accepted_us));
    s_tell (self, ZL_JOBS_EV_ACKED, job);
    s_delete (self, job);
    return ZL_SETTLE_OK;
}

zl_settle_rc_t
zl_jobs_nack (zl_jobs_t *self, zl_bworker_t *worker, const zl_nack_item_t *nack, zl_now_t now)
{
    zl_job_t *job = NULL;
    zl_settle_rc_t rc = s_check (self, nack->job_id, nack->lease, &job);
    if (rc != ZL_SETTLE_OK)
        return rc;
    zl_sched_charge (self->sched, job, s_run_us (job, nack->run_us, now));
    const char *worker_name = job->worker ? job->worker->name : (worker ? worker->name : "");
    zl_outcome_t outcome;
    int64_t retry_ms = -1;
    switch (nack->cls) {
    case ZL_FAIL_PERMANENT:
        outcome = ZL_OUTCOME_PERMANENT;
        job->flow->nacked_permanent++;
        break;
    case ZL_FAIL_THROTTLED:
        outcome = ZL_OUTCOME_THROTTLED;
        job->flow->nacked_throttled++;
        if (nack->retry_after_ms)
            retry_ms = nack->retry_after_ms;
        break;
    default:
        outcome = ZL_OUTCOME_TRANSIENT;
        job->flow->nacked_transient++;
        break;
    }
    s_record_attempt (job, outcome, worker_name, nack->error, now);
    s_unlease (self, job);
    s_fail (self, job, outcome, retry_ms, now);
    return ZL_SETTLE_OK;
}

zl_settle_rc_t
zl_jobs_extend (zl_jobs_t *self, zl_bworker_t *worker, const zl_extend_item_t *ext, zl_now_t now)
{
    (void) worker;
    zl_job_t *job = NULL;
    zl_settle_rc_t rc = s_check (self, ext->job_id, ext->lease, &job);
    if (rc != ZL_SETTLE_OK)
        return rc;
    if (job->run_deadline_ms && now.mono_ms >= job->run_deadline_ms)
        return ZL_SETTLE_MAX_RUN;
    uint32_t lease_ms = ext->lease_ms ? ext->lease_ms : job->lease_ms;
    job->lease_deadline_ms = now.mono_ms + lease_ms;
    job->due_ms = job->lease_deadline_ms;
    if (job->run_deadline_ms && job->run_deadline_ms < job->due_ms)
        job->due_ms = job->run_deadline_ms;
    zl_timers_set (self->timers, job);
    return ZL_SETTLE_OK;
}

size_t
zl_jobs_release_worker (zl_jobs_t *self, zl_bworker_t *worker, zl_outcome_t outcome,
                        const char *error, zl_now_t now)
{
    size_t n = 0;
    while (worker->jobs) {
        zl_job_t *job = worker->jobs;
        s_record_attempt (job, outcome, worker->name, error, now);
        zl_sched_charge (self->sched, job, s_run_us (job, 0, now));
        s_unlease (self, job);
        s_fail (self, job, outcome, 0, now);
        n++;
    }
    return n;
}

size_t
zl_jobs_fire_timers (zl_jobs_t *self, zl_now_t now)
{
    size_t n = 0;
    zl_job_t *job;
    while ((job = zl_timers_pop_due (self->timers, now.mono_ms))) {
        n++;
        if (job->state == ZL_JOB_DELAYED) {
            job->flow->delayed--;
            s_make_ready (self, job, now);
            continue;
        }
        if (job->state != ZL_JOB_LEASED)
            continue;  // cannot happen: only delayed and leased jobs have timers
        bool max_run = job->run_deadline_ms && now.mono_ms >= job->run_deadline_ms;
        zl_outcome_t outcome = max_run ? ZL_OUTCOME_MAX_RUN : ZL_OUTCOME_LEASE_EXPIRED;
        char error[128];
        snprintf (error, sizeof error, max_run ? "max run time of %u ms exceeded"
                                               : "lease of %u ms lapsed",
                  max_run ? job->max_run_ms : job->lease_ms);
        zl_info ("jobs", "job %llu attempt %u on worker %s: %s", (unsigned long long) job->id,
                 job->attempt, job->worker ? job->worker->name : "?", error);
        job->flow->lease_expired++;
        s_record_attempt (job, outcome, job->worker ? job->worker->name : "", error, now);
        // the worker time the lapsed attempt held counts against its share
        zl_sched_charge (self->sched, job, s_run_us (job, 0, now));
        s_unlease (self, job);
        s_fail (self, job, outcome, 0, now);
    }
    return n;
}

int64_t
zl_jobs_next_timer (zl_jobs_t *self)
{
    zl_job_t *job = zl_timers_peek (self->timers);
    return job ? job->due_ms : -1;
}

zl_job_t *
zl_jobs_find (zl_jobs_t *self, uint64_t id)
{
    return zl_u64map_get (self->by_id, id);
}

void
zl_jobs_redrive (zl_jobs_t *self, zl_job_t *job, zl_now_t now)
{
    zl_dlq_remove (self->dlq, job);
    job->flow->dlq--;
    job->attempt = 0;
    s_free_history (job);
    s_depth (job, +1);
    s_make_ready (self, job, now);
}

void
zl_jobs_purge (zl_jobs_t *self, zl_job_t *job)
{
    zl_dlq_remove (self->dlq, job);
    job->flow->dlq--;
    s_delete (self, job);
}

zl_dlq_t *
zl_jobs_dlq (zl_jobs_t *self)
{
    return self->dlq;
}

size_t
zl_jobs_count (zl_jobs_t *self)
{
    return zl_u64map_size (self->by_id);
}

const zl_hist_t *
zl_jobs_latency (zl_jobs_t *self, int which)
{
    return which == 0 ? &self->lat_start : &self->lat_ack;
}
