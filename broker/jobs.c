#include "jobs.h"

#include "job_index.h"

#include "breaker.h"
#include "clock.h"
#include "deps.h"
#include "heap.h"
#include "hist.h"
#include "log.h"
#include "ordering.h"
#include "text.h"
#include "u64map.h"
#include "zl_alloc.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NO_SLOT UINT32_MAX
#define MAX_ERROR_TEXT 1024
#define POOL_CHUNK 4096 // jobs allocated at a time

typedef struct pool_chunk {
    struct pool_chunk *next;
    zl_job_t jobs[POOL_CHUNK];
} pool_chunk_t;

struct _zl_jobs_t {
    zl_job_index_t *by_id; // every live job (ready, delayed, leased, dead)
    zl_sched_t *sched;
    zl_timers_t *timers;
    zl_rng_t *rng;             // backoff jitter
    zl_lease_tokens_t *tokens; // lease tokens (CSPRNG)
    zl_store_t *store;
    zl_dlq_t *dlq;
    zl_arena_t *scratch; // state records read during a transition
    uint64_t next_id;
    zl_store_rc_t store_error; // the first failed write since zl_jobs_store_error
    zl_jobs_listener_fn *listener;
    void *listener_ctx;
    zl_hist_t lat_start;  // submit -> first start
    zl_hist_t lat_ack;    // submit -> ack
    pool_chunk_t *chunks; // job records come from here, no malloc per job
    zl_job_t *free_jobs;
    zl_job_t **restored; // recovery: ready, dead and cancelled jobs to order
    size_t n_restored, cap_restored;
    zl_job_t *cancelled_head, *cancelled_tail; // kept cancelled jobs, oldest first (next)
    size_t n_cancelled;
    // results and workflows
    zl_deps_t *deps;                 // the dependency graph (jobs with parents or children)
    zl_job_t *done_head, *done_tail; // DONE jobs, in the order they were acked (mostly)
    zl_arena_t *graph;               // parents read from the store (cascade, re-arm)
    zl_job_t **stack;                // cascade and re-arm work list
    size_t n_stack, cap_stack;
    const zl_job_t *ack_job; // during an ACKED event: the job and its result
    zl_bytes_t ack_result;
    zl_jobs_graph_stats_t gstats;
    struct s_restored_deps *rdeps; // recovery: jobs with parents, resolved at the end
    size_t n_rdeps, cap_rdeps;
    zl_batches_t *batches;               // batches.h: what each batch counts
    char batch_name[24];                 // zl_jobs_batch_name's
    uint64_t not_yet, not_yet_exhausted; // NOT_YET nacks; jobs dead-lettered past max_not_yet
    // deadlines: only jobs that have one, earliest first (lazily dropped once
    // their job finished)
    zl_u64map_t *deadline_of; // job id -> s_deadline_t
    zl_heap_t *deadlines;
    uint64_t expired;              // jobs dead-lettered at their deadline
    zl_bytes_t put_checkpoint;     // the next s_put_state's new checkpoint (then cleared)
    zl_ordering_t *ordering;       // ordering keys: who goes next in each group
    struct s_restored_order *rord; // recovery: jobs with an ordering key, grouped at the end
    size_t n_rord, cap_rord;
};

// A recovered job of an ordering key: its group and place, joined in order
// once every job is in.
typedef struct s_restored_order {
    zl_job_t *job;
    uint64_t group, seq;
} s_restored_order_t;

typedef struct {
    int64_t at_ms; // wall clock
    uint64_t id;
    uint32_t slot;
} s_deadline_t;

static bool
s_deadline_less (const void *a, const void *b)
{
    const s_deadline_t *x = a, *y = b;
    return x->at_ms < y->at_ms || (x->at_ms == y->at_ms && x->id < y->id);
}

static void
s_deadline_set (zl_jobs_t *self, uint64_t id, int64_t at_ms)
{
    if (!at_ms)
        return;
    s_deadline_t *d = zl_u64map_get (self->deadline_of, id);
    if (!d) {
        d = ZL_NEW (s_deadline_t);
        d->id = id;
        d->slot = UINT32_MAX;
        zl_u64map_put (self->deadline_of, id, d);
    }
    d->at_ms = at_ms;
    zl_heap_set (self->deadlines, d);
}

static void
s_deadline_drop (zl_jobs_t *self, uint64_t id)
{
    s_deadline_t *d = zl_u64map_remove (self->deadline_of, id);
    if (d) {
        zl_heap_remove (self->deadlines, d);
        free (d);
    }
}

// A job's deadline, from its spec and its lane (0 = none).
static int64_t
s_deadline_of (const zl_job_spec_t *spec, const zl_lane_config_t *lc, zl_now_t now)
{
    int64_t d = (int64_t)spec->deadline_ms;
    int64_t ages[2] = {spec->max_age_ms, (int64_t)lc->max_age_ms};
    for (int i = 0; i < 2; i++)
        if (ages[i] > 0 && (d == 0 || now.wall_ms + ages[i] < d))
            d = now.wall_ms + ages[i];
    return d;
}

typedef struct s_restored_deps {
    zl_job_t *job;
    uint64_t *parents; // owned
    uint32_t n_parents;
    bool resolve;  // it had no state of its own (never released): decide from its parents
    uint32_t left; // resolve: parents not acked
    uint64_t dead; // resolve: a dead parent
} s_restored_deps_t;

const char *
zl_job_state_name (zl_job_state_t state)
{
    switch (state) {
    case ZL_JOB_READY: return "ready";
    case ZL_JOB_DELAYED: return "delayed";
    case ZL_JOB_LEASED: return "leased";
    case ZL_JOB_DEAD: return "dead";
    case ZL_JOB_CANCELLED: return "cancelled";
    case ZL_JOB_DONE: return "done";
    case ZL_JOB_WAITING: return "waiting";
    }
    return "unknown";
}

// ---------------------------------------------------------------- records
static zl_job_t *
s_job_new (zl_jobs_t *self)
{
    if (!self->free_jobs) {
        pool_chunk_t *c = zl_malloc (sizeof (pool_chunk_t));
        c->next = self->chunks;
        self->chunks = c;
        for (int i = POOL_CHUNK - 1; i >= 0; i--) {
            c->jobs[i].next = self->free_jobs;
            self->free_jobs = &c->jobs[i];
        }
    }
    zl_job_t *job = self->free_jobs;
    self->free_jobs = job->next;
    memset (job, 0, sizeof *job);
    job->timer_idx = NO_SLOT;
    return job;
}

static void
s_job_free (zl_jobs_t *self, zl_job_t *job)
{
    if (job->state == ZL_JOB_LEASED)
        zl_lease_destroy (&job->lease);
    job->next = self->free_jobs;
    self->free_jobs = job;
}

zl_jobs_t *
zl_jobs_new (zl_sched_t *sched, zl_timers_t *timers, zl_rng_t *rng, zl_store_t *store)
{
    zl_jobs_t *self = ZL_NEW (zl_jobs_t);
    self->by_id = zl_job_index_new ();
    self->sched = sched;
    self->timers = timers;
    self->rng = rng;
    self->tokens = zl_lease_tokens_new ();
    self->store = store;
    self->dlq = zl_dlq_new ();
    self->scratch = zl_arena_new (16 * 1024);
    self->next_id = 1;
    self->deps = zl_deps_new ();
    self->graph = zl_arena_new (16 * 1024);
    self->batches = zl_batches_new ();
    self->deadline_of = zl_u64map_new ();
    self->deadlines = zl_heap_new (s_deadline_less, offsetof (s_deadline_t, slot), UINT32_MAX);
    self->ordering = zl_ordering_new ();
    return self;
}

void
zl_jobs_destroy (zl_jobs_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_jobs_t *self = *self_p;
    size_t cursor = 0;
    zl_job_t *job;
    while ((job = zl_job_index_next (self->by_id, &cursor)))
        if (job->state == ZL_JOB_LEASED)
            zl_lease_destroy (&job->lease);
    while (self->chunks) {
        pool_chunk_t *next = self->chunks->next;
        free (self->chunks);
        self->chunks = next;
    }
    zl_job_index_destroy (&self->by_id);
    zl_dlq_destroy (&self->dlq);
    zl_arena_destroy (&self->scratch);
    zl_lease_tokens_destroy (&self->tokens);
    free (self->restored);
    zl_deps_destroy (&self->deps);
    zl_batches_destroy (&self->batches);
    size_t dc = 0;
    s_deadline_t *d;
    while ((d = zl_u64map_next (self->deadline_of, &dc, NULL)))
        free (d);
    zl_u64map_destroy (&self->deadline_of);
    zl_heap_destroy (&self->deadlines);
    zl_arena_destroy (&self->graph);
    free (self->stack);
    for (size_t i = 0; i < self->n_rdeps; i++)
        free (self->rdeps[i].parents);
    free (self->rdeps);
    free (self->rord);
    zl_ordering_destroy (&self->ordering);
    free (self);
    *self_p = NULL;
}

void
zl_jobs_set_listener (zl_jobs_t *self, zl_jobs_listener_fn *fn, void *ctx)
{
    self->listener = fn;
    self->listener_ctx = ctx;
}

uint64_t
zl_jobs_take_id (zl_jobs_t *self)
{
    return self->next_id++;
}

uint64_t
zl_jobs_next_id (zl_jobs_t *self)
{
    return self->next_id;
}

zl_store_rc_t
zl_jobs_store_error (zl_jobs_t *self)
{
    zl_store_rc_t rc = self->store_error;
    self->store_error = ZL_STORE_OK;
    return rc;
}

static void
s_tell (zl_jobs_t *self, zl_jobs_event_t ev, zl_job_t *job)
{
    if (self->listener)
        self->listener (self->listener_ctx, ev, job);
}

// How a batch counts a member in this state.
static zl_batch_class_t
s_batch_class (const zl_job_t *job)
{
    switch (job->state) {
    case ZL_JOB_DONE: return ZL_BATCH_ACKED;
    case ZL_JOB_DEAD: return ZL_BATCH_DEAD;
    case ZL_JOB_CANCELLED: return ZL_BATCH_CANCELLED;
    default: return ZL_BATCH_PENDING;
    }
}

// A batch member changed state: its batch recounts it.
static void
s_batch_note (zl_jobs_t *self, const zl_job_t *job)
{
    if (job->flags & ZL_JOBF_BATCH)
        zl_batches_moved (self->batches, job->id, s_batch_class (job));
}

uint64_t
zl_backoff_ms (uint64_t base_ms, uint64_t cap_ms, uint32_t attempt, bool jitter, zl_rng_t *rng)
{
    // upper = min(cap, base * 2^attempt), without overflow
    uint64_t upper;
    if (base_ms == 0)
        upper = 0;
    else if (attempt <= 63 && base_ms <= (cap_ms >> attempt))
        upper = base_ms << attempt;
    else
        upper = cap_ms;
    return jitter ? zl_rng_range (rng, upper) : upper;
}

// ---------------------------------------------------------------- store writes
static void
s_check (zl_jobs_t *self, zl_store_rc_t rc, const char *what, uint64_t id)
{
    if (rc == ZL_STORE_OK)
        return;
    zl_error ("jobs", "job %llu: store write failed (%s): the turn cannot be committed",
              (unsigned long long)id, what);
    if (self->store_error == ZL_STORE_OK)
        self->store_error = rc;
}

// Write the job's state record: the stored history (if any) plus `extra`.
// Works in self->scratch without resetting it: `extra` (its error text) may
// live there. Each transition resets the scratch before it starts.
static void
s_put_state (zl_jobs_t *self, zl_job_t *job, const zl_attempt_t *extra, const char *leased_to,
             int64_t started_at_ms, int64_t due_at_ms)
{
    zl_state_rec_t st;
    memset (&st, 0, sizeof st);
    if (job->has_history || (job->flags & ZL_JOBF_CHECKPOINT)) {
        zl_state_rec_t old;
        if (zl_store_get_state (self->store, job->id, self->scratch, &old) == ZL_STORE_OK) {
            if (job->has_history) {
                st.n_history = old.n_history;
                st.history = old.history;
            }
            st.checkpoint = old.checkpoint; // kept through every state, the DLQ's too
        }
    }
    if (self->put_checkpoint.len) { // a worker saved its progress
        st.checkpoint = self->put_checkpoint;
        self->put_checkpoint = (zl_bytes_t){0};
        job->flags |= ZL_JOBF_CHECKPOINT;
    }
    if (extra) {
        zl_attempt_t *h = zl_arena_alloc (self->scratch, (st.n_history + 1) * sizeof *h);
        if (st.n_history) // memcpy from NULL is undefined even for 0 bytes
            memcpy (h, st.history, st.n_history * sizeof *h);
        h[st.n_history++] = *extra;
        st.history = h;
        job->has_history = 1;
    }
    st.state = job->state;
    st.attempt = job->attempt;
    // READY: its place in the FIFO; DEAD: its place in the DLQ (deaths in
    // the same millisecond keep their order across a restart)
    // CANCELLED: the order it was cancelled in (retention expires them in it)
    st.ready_seq =
        job->state == ZL_JOB_READY || job->state == ZL_JOB_DEAD || job->state == ZL_JOB_CANCELLED
            ? job->seq
            : 0;
    st.due_at_ms = due_at_ms;
    st.dead_at_ms = job->state == ZL_JOB_DEAD ? job->dead_at_ms : 0;
    if (job->state == ZL_JOB_CANCELLED) {
        st.cancelled_at_ms = job->cancelled_at_ms;
        st.cancelled_from = job->cancelled_from;
    }
    st.leased_to = leased_to;
    st.started_at_ms = started_at_ms;
    if (job->state == ZL_JOB_DEAD && (job->flags & ZL_JOBF_DEPS)) {
        zl_dep_t *dep = zl_deps_get (self->deps, job->id, false);
        st.failed_parent = dep ? dep->failed_parent : 0;
    }
    if (job->flags & ZL_JOBF_ORDER)
        st.order_seq = zl_ordering_seq (self->ordering, job->id);
    st.ordering_head = job->state == ZL_JOB_DEAD && (job->flags & ZL_JOBF_ORDER_DIED);
    s_check (self, zl_store_put_state (self->store, job->id, &st), "state", job->id);
}

// ---------------------------------------------------------------- helpers
static void
s_depth (zl_job_t *job, int delta)
{
    zl_lanes_count_depth (job->flow->lane, job->flow->tenant, delta);
}

// READY in memory; the caller writes the state record when it must.
static void
s_make_ready (zl_jobs_t *self, zl_job_t *job, zl_now_t now)
{
    job->state = ZL_JOB_READY;
    job->ready_ms = now.mono_ms;
    job->seq = zl_jobs_take_id (self); // one order for the scheduler and the store
    zl_sched_push (self->sched, job);
}

static void
s_make_delayed (zl_jobs_t *self, zl_job_t *job, uint64_t delay_ms, zl_now_t now)
{
    job->state = ZL_JOB_DELAYED;
    job->due_ms = now.mono_ms + (int64_t)delay_ms;
    job->flow->delayed++;
    zl_timers_set (self->timers, job);
}

static void s_waiting_count (zl_jobs_t *self, zl_job_t *job, int delta);

// A job of an ordering key is held behind another: WAITING (its own delay,
// if it has one, counted from its acceptance, kept in due_ms).
static void
s_hold (zl_jobs_t *self, zl_job_t *job, int64_t due_ms)
{
    job->state = ZL_JOB_WAITING;
    job->due_ms = due_ms;
    s_waiting_count (self, job, +1);
}

// `job` leaves its ordering key's group (its turn ended, or it was taken
// out while held): the next job of the key goes, READY, or DELAYED until
// its own delay ends. Its stored state needs no write: recovery finds the
// order again from the records. A head that dies is marked so in the DLQ.
// Called before `job` is linked into the DLQ or another list (a held job's
// next/prev are its group's links) and without using the scratch.
static void
s_order_leave (zl_jobs_t *self, zl_job_t *job, zl_now_t now)
{
    if (!(job->flags & ZL_JOBF_ORDER))
        return;
    if (job->state == ZL_JOB_DEAD && !(job->flags & ZL_JOBF_HELD))
        job->flags |= ZL_JOBF_ORDER_DIED;
    zl_job_t *next = zl_ordering_leave (self->ordering, job);
    if (!next)
        return;
    s_waiting_count (self, next, -1);
    if (next->due_ms > now.mono_ms)
        s_make_delayed (self, next, (uint64_t)(next->due_ms - now.mono_ms), now);
    else {
        next->state = ZL_JOB_READY;
        next->ready_ms = now.mono_ms;
        // its place among flows is its acceptance's, as recovery gives it (a
        // never-attempted job's order is its id), and takes no id
        next->seq = next->id;
        zl_sched_push (self->sched, next);
    }
}

// How an attempt ended, for its lane's circuit breaker (breaker.h).
enum { S_BRK_SUCCESS, S_BRK_FAILURE, S_BRK_NEUTRAL };

static void
s_breaker_note (const zl_job_t *job, int how, zl_now_t now)
{
    zl_breaker_t *b = job->flow->lane->breaker;
    if (!b)
        return;
    if (how == S_BRK_SUCCESS)
        zl_breaker_success (b, now.mono_ms);
    else if (how == S_BRK_FAILURE)
        zl_breaker_failure (b, now.mono_ms);
    else
        zl_breaker_neutral (b);
}

static void
s_unlease (zl_jobs_t *self, zl_job_t *job)
{
    zl_timers_cancel (self->timers, job);
    if (job->lease->worker)
        zl_worker_conn_release (job->lease->worker, job);
    job->flow->in_flight--;
    zl_lanes_count_running (job->flow->lane, job->flow->tenant, -1);
    zl_lease_destroy (&job->lease);
    zl_sched_released (self->sched, job->flow);
}

static void
s_delete (zl_jobs_t *self, zl_job_t *job)
{
    if (job->flags & ZL_JOBF_BATCH) // deleted while dead or cancelled: on its batch's record
        zl_batches_moved (self->batches, job->id, ZL_BATCH_GONE);
    if (job->flags & ZL_JOBF_BATCH_REC)
        zl_batches_forget (self->batches, job->id);
    s_deadline_drop (self, job->id);
    s_check (self, zl_store_del_job (self->store, job->id, job->priority), "delete", job->id);
    zl_job_index_remove (self->by_id, job->id);
    if (job->flags & ZL_JOBF_DEPS)
        zl_deps_remove (self->deps, job->id);
    s_job_free (self, job);
}

// Dead-letter `job` (not leased, counted in depth): into the DLQ, its state
// written with `last` added to its history, the listener told.
static void
s_entomb (zl_jobs_t *self, zl_job_t *job, const zl_attempt_t *last, zl_now_t now)
{
    job->state = ZL_JOB_DEAD;
    job->dead_at_ms = now.wall_ms;
    job->seq = zl_jobs_take_id (self); // order of death
    job->flow->dlq++;
    job->flow->dead_lettered++;
    s_depth (job, -1);
    s_order_leave (self, job, now); // (first: a held job's links are the DLQ's next)
    zl_dlq_add (self->dlq, job);
    s_put_state (self, job, last, NULL, 0, 0);
    zl_info ("jobs", "job %llu dead-lettered after %u attempt(s), lane=%s tenant=%s: %s",
             (unsigned long long)job->id, job->attempt, job->flow->lane->name,
             job->flow->tenant->name, last ? last->error : "");
    s_batch_note (self, job);
    s_tell (self, ZL_JOBS_EV_DEAD, job);
}

static void s_cascade (zl_jobs_t *self, zl_job_t *root, zl_now_t now);

static void
s_bury (zl_jobs_t *self, zl_job_t *job, const zl_attempt_t *last, zl_now_t now)
{
    s_entomb (self, job, last, now);
    if (job->flags & ZL_JOBF_DEPS)
        s_cascade (self, job, now);
}

// A finished attempt that failed (the job is no longer leased): dead-letter
// it, or make it ready again after `retry_ms` (< 0 asks for the backoff).
static void
s_fail (zl_jobs_t *self, zl_job_t *job, const zl_attempt_t *att, int64_t retry_ms, zl_now_t now)
{
    if (att->outcome == ZL_OUTCOME_PERMANENT || job->attempt >= job->max_attempts) {
        s_bury (self, job, att, now);
        return;
    }
    if (retry_ms < 0) {
        const zl_lane_config_t *lc = &job->flow->lane->cfg;
        retry_ms = (int64_t)zl_backoff_ms (lc->backoff_base_ms, lc->backoff_cap_ms, job->attempt,
                                           lc->jitter, self->rng);
    }
    if (retry_ms == 0) {
        s_make_ready (self, job, now);
        s_put_state (self, job, att, NULL, 0, 0);
    } else {
        s_make_delayed (self, job, (uint64_t)retry_ms, now);
        s_put_state (self, job, att, NULL, 0, now.wall_ms + retry_ms);
    }
}

// How many NOT_YET nacks `job` had, from its stored history.
static uint32_t
s_not_yet_count (zl_jobs_t *self, const zl_job_t *job)
{
    if (!job->has_history)
        return 0;
    zl_state_rec_t st;
    if (zl_store_get_state (self->store, job->id, self->scratch, &st) != ZL_STORE_OK)
        return 0;
    uint32_t n = 0;
    for (size_t i = 0; i < st.n_history; i++)
        n += st.history[i].outcome == ZL_OUTCOME_NOT_YET;
    return n;
}

// The attempt record for the lease `job` holds, ending now.
static zl_attempt_t
s_attempt (zl_job_t *job, zl_outcome_t outcome, const char *error, zl_now_t now)
{
    zl_attempt_t a;
    a.attempt = job->attempt;
    a.worker = job->lease->worker ? job->lease->worker->name : "";
    a.started_at_ms = (uint64_t)job->lease->started_at_ms;
    a.ended_at_ms = (uint64_t)now.wall_ms;
    a.outcome = outcome;
    a.error = error ? error : "";
    return a;
}

// The leased job (job_id, lease) if `worker` holds it.
static zl_settle_rc_t
s_lookup (zl_jobs_t *self, const zl_worker_conn_t *worker, uint64_t job_id, uint64_t lease,
          zl_job_t **job_p)
{
    zl_job_t *job = zl_job_index_get (self->by_id, job_id);
    if (!job)
        return ZL_SETTLE_UNKNOWN_JOB;
    if (job->state == ZL_JOB_CANCELLED)
        return ZL_SETTLE_CANCELLED; // whatever the token: a restart forgot the tokens
    if (job->state != ZL_JOB_LEASED || job->lease->token != lease)
        return ZL_SETTLE_STALE_LEASE;
    if (job->lease->worker != worker)
        return ZL_SETTLE_NOT_HOLDER;
    *job_p = job;
    return ZL_SETTLE_OK;
}

static uint64_t
s_run_us (const zl_job_t *job, uint64_t reported, zl_now_t now)
{
    // trust the worker's measure when it gives one, bounded by what we saw
    uint64_t seen = zl_lease_run_us (job->lease, now);
    return reported && reported <= seen ? reported : seen;
}

static char *
s_clip (zl_jobs_t *self, const char *error)
{
    // the head of the text, cut on a character boundary: it is sent on as text
    size_t len = error ? zl_text_cut (error, strlen (error), MAX_ERROR_TEXT) : 0;
    return zl_arena_strndup (self->scratch, error ? error : "", len);
}

// ---------------------------------------------------------------- workflows
static void
s_stack_push (zl_jobs_t *self, zl_job_t *job)
{
    if (self->n_stack == self->cap_stack) {
        self->cap_stack = self->cap_stack ? self->cap_stack * 2 : 64;
        self->stack = zl_realloc (self->stack, self->cap_stack * sizeof *self->stack);
    }
    self->stack[self->n_stack++] = job;
}

// The attempt record of a job buried because `parent` was dead-lettered
// (its error text in self->scratch).
static zl_attempt_t
s_parent_failed (zl_jobs_t *self, zl_job_t *job, uint64_t parent, zl_now_t now)
{
    return (zl_attempt_t){
        .attempt = job->attempt,
        .worker = "",
        .started_at_ms = (uint64_t)now.wall_ms,
        .ended_at_ms = (uint64_t)now.wall_ms,
        .outcome = ZL_OUTCOME_PARENT_FAILED,
        .error = zl_arena_printf (
            self->scratch, "parent_failed: parent job %" PRIu64 " was dead-lettered", parent)};
}

static void
s_waiting_count (zl_jobs_t *self, zl_job_t *job, int delta)
{
    job->flow->waiting += (uint64_t)(int64_t)delta;
    self->gstats.waiting += (uint64_t)(int64_t)delta;
}

// A WAITING job whose parent `parent` was dead-lettered goes to the DLQ.
static void
s_bury_for_parent (zl_jobs_t *self, zl_job_t *job, zl_dep_t *dep, uint64_t parent, zl_now_t now)
{
    if (job->state == ZL_JOB_WAITING)
        s_waiting_count (self, job, -1);
    dep->failed_parent = parent;
    dep->parents_left = 0;
    zl_arena_reset (self->scratch);
    zl_attempt_t att = s_parent_failed (self, job, parent, now);
    self->gstats.parent_failed++;
    s_entomb (self, job, &att, now);
}

// `root` was dead-lettered: every WAITING descendant follows it, with
// outcome parent_failed naming the parent that failed (work list, not
// recursion: a chain may be long).
static void
s_cascade (zl_jobs_t *self, zl_job_t *root, zl_now_t now)
{
    size_t base = self->n_stack;
    s_stack_push (self, root);
    while (self->n_stack > base) {
        zl_job_t *j = self->stack[--self->n_stack];
        zl_dep_t *dep = zl_deps_get (self->deps, j->id, false);
        for (uint32_t i = 0; dep && i < dep->n_children; i++) {
            zl_job_t *c = zl_job_index_get (self->by_id, dep->children[i]);
            if (!c || c->state != ZL_JOB_WAITING)
                continue;
            zl_dep_t *cd = zl_deps_get (self->deps, c->id, true);
            s_bury_for_parent (self, c, cd, j->id, now);
            s_stack_push (self, c);
            dep = zl_deps_get (self->deps, j->id, false); // (not moved: nodes are heap cells)
        }
    }
}

// `parent` was acked: its WAITING children with no other parent left
// become READY.
static void
s_release_children (zl_jobs_t *self, const zl_dep_t *dep, zl_now_t now)
{
    for (uint32_t i = 0; i < dep->n_children; i++) {
        zl_job_t *c = zl_job_index_get (self->by_id, dep->children[i]);
        if (!c || c->state != ZL_JOB_WAITING)
            continue;
        zl_dep_t *cd = zl_deps_get (self->deps, c->id, false);
        if (cd && cd->parents_left > 1) {
            cd->parents_left--;
            continue;
        }
        if (cd)
            cd->parents_left = 0;
        s_waiting_count (self, c, -1);
        s_make_ready (self, c, now);
    }
}

/*  How the parents of `job` stand (its record's depends_on): how many are
    not acked yet (`*left`) and the first that is dead-lettered (`*dead`, 0
    none). A parent whose record is gone (purged, or its outcome expired)
    counts as done. Returns how many parents the job has. */
static uint32_t
s_parents_state (zl_jobs_t *self, const zl_job_t *job, uint32_t *left, uint64_t *dead)
{
    *left = 0;
    *dead = 0;
    zl_arena_reset (self->graph);
    zl_job_rec_t rec;
    if (zl_store_get_job (self->store, job->id, job->priority, self->graph, &rec) != ZL_STORE_OK)
        return 0;
    for (size_t i = 0; i < rec.n_depends_on; i++) {
        zl_job_t *p = zl_job_index_get (self->by_id, rec.depends_on[i]);
        if (!p || p->state == ZL_JOB_DONE)
            continue;
        if (p->state == ZL_JOB_DEAD) {
            if (!*dead)
                *dead = p->id;
        } else
            (*left)++;
    }
    return (uint32_t)rec.n_depends_on;
}

/*  A job with parents is back from the DLQ (counted in depth, attempts
    reset): READY if its parents are all acked, WAITING while some are not,
    or straight back to the DLQ (parent_failed) while one is dead. */
static void
s_rearm (zl_jobs_t *self, zl_job_t *job, zl_now_t now)
{
    uint32_t left;
    uint64_t dead;
    zl_dep_t *dep = zl_deps_get (self->deps, job->id, true);
    job->flags |= ZL_JOBF_DEPS;
    s_parents_state (self, job, &left, &dead);
    zl_arena_reset (self->scratch);
    if (dead) {
        job->state = ZL_JOB_WAITING; // (for s_bury_for_parent's count)
        s_waiting_count (self, job, +1);
        s_bury_for_parent (self, job, dep, dead, now);
        return;
    }
    dep->failed_parent = 0;
    dep->parents_left = left;
    if (left) {
        job->state = ZL_JOB_WAITING;
        s_waiting_count (self, job, +1);
    } else
        s_make_ready (self, job, now);
    s_put_state (self, job, NULL, NULL, 0, 0);
}

// `root` was redriven: its descendants dead-lettered because of it (and
// theirs because of them) come back from the DLQ as s_rearm decides.
static void s_deadline_again (zl_jobs_t *self, const zl_job_t *job);

static void
s_rearm_children (zl_jobs_t *self, zl_job_t *root, zl_now_t now)
{
    size_t base = self->n_stack;
    s_stack_push (self, root);
    while (self->n_stack > base) {
        zl_job_t *j = self->stack[--self->n_stack];
        zl_dep_t *dep = zl_deps_get (self->deps, j->id, false);
        for (uint32_t i = 0; dep && i < dep->n_children; i++) {
            zl_job_t *c = zl_job_index_get (self->by_id, dep->children[i]);
            zl_dep_t *cd = c ? zl_deps_get (self->deps, c->id, false) : NULL;
            if (!c || c->state != ZL_JOB_DEAD || !cd || cd->failed_parent != j->id)
                continue;
            zl_dlq_remove (self->dlq, c);
            c->flow->dlq--;
            c->attempt = 0;
            c->has_history = 0;
            s_depth (c, +1);
            self->gstats.rearmed++;
            s_rearm (self, c, now);
            s_batch_note (self, c);
            s_deadline_again (self, c);
            if (c->state != ZL_JOB_DEAD)
                s_stack_push (self, c);
        }
    }
}

// Link the job `id` (its node `dep`) under each of `parents` that still
// exists; count the ones not acked yet and find a dead one.
static void
s_link_parents (zl_jobs_t *self, uint64_t id, const uint64_t *parents, size_t n, uint32_t *left,
                uint64_t *dead)
{
    *left = 0;
    *dead = 0;
    for (size_t i = 0; i < n; i++) {
        zl_job_t *p = zl_job_index_get (self->by_id, parents[i]);
        if (!p)
            continue; // gone (purged, expired): counts as done
        p->flags |= ZL_JOBF_DEPS;
        zl_deps_add_child (zl_deps_get (self->deps, p->id, true), id);
        self->gstats.edges++;
        if (p->state == ZL_JOB_DEAD) {
            if (!*dead)
                *dead = p->id;
        } else if (p->state != ZL_JOB_DONE)
            (*left)++;
    }
}

static void
s_done_push (zl_jobs_t *self, zl_job_t *job)
{
    job->next = NULL;
    if (self->done_tail)
        self->done_tail->next = job;
    else
        self->done_head = job;
    self->done_tail = job;
    self->gstats.kept++;
}

static zl_job_t *
s_done_pop (zl_jobs_t *self)
{
    zl_job_t *job = self->done_head;
    if (job) {
        self->done_head = job->next;
        if (!self->done_head)
            self->done_tail = NULL;
        self->gstats.kept--;
    }
    return job;
}

// True while a job of `dep`'s children may still run (it needs the
// results): the outcome is kept past its retention.
static bool
s_children_live (zl_jobs_t *self, const zl_dep_t *dep)
{
    for (uint32_t i = 0; dep && i < dep->n_children; i++) {
        zl_job_t *c = zl_job_index_get (self->by_id, dep->children[i]);
        if (c && c->state != ZL_JOB_DONE && c->state != ZL_JOB_DEAD)
            return true;
    }
    return false;
}

uint64_t
zl_jobs_expire_done (zl_jobs_t *self, zl_now_t now, uint64_t keep_ms, uint64_t max)
{
    uint64_t n = 0, looked = 0;
    zl_job_t *j;
    while (looked < max && (j = self->done_head) &&
           now.wall_ms - j->dead_at_ms >= (int64_t)keep_ms) {
        looked++;
        s_done_pop (self);
        zl_dep_t *dep = (j->flags & ZL_JOBF_DEPS) ? zl_deps_get (self->deps, j->id, false) : NULL;
        if (s_children_live (self, dep)) {
            s_done_push (self, j); // a child still needs it: later
            continue;
        }
        s_delete (self, j);
        n++;
    }
    self->gstats.expired += n;
    if (n)
        zl_debug ("jobs",
                  "forgot %" PRIu64 " outcome(s) older than result_retention (%" PRIu64 " ms)", n,
                  keep_ms);
    return n;
}

void
zl_jobs_graph_stats (zl_jobs_t *self, zl_jobs_graph_stats_t *out)
{
    self->gstats.not_yet = self->not_yet;
    self->gstats.not_yet_exhausted = self->not_yet_exhausted;
    *out = self->gstats;
    out->nodes = zl_deps_count (self->deps);
    out->ordering_keys = zl_ordering_groups (self->ordering);
    out->ordering_held = zl_ordering_held (self->ordering);
}

void
zl_jobs_keep (zl_jobs_t *self, zl_job_t *job)
{
    (void)self;
    job->flags |= ZL_JOBF_KEEP;
}

int
zl_jobs_graph_of (zl_jobs_t *self, uint64_t id, zl_arena_t *arena, zl_job_outcome_t *out)
{
    zl_dep_t *dep = id ? zl_deps_get (self->deps, id, false) : NULL;
    if (!dep)
        return 0;
    uint64_t *kids = zl_arena_alloc (arena, (dep->n_children ? dep->n_children : 1) * sizeof *kids);
    if (dep->n_children)
        memcpy (kids, dep->children, dep->n_children * sizeof *kids);
    out->n_children = dep->n_children; // a copy: the graph may change before the reply goes
    out->children = kids;
    zl_job_t *job = zl_job_index_get (self->by_id, id);
    if (!job)
        return 0;
    zl_job_rec_t rec;
    if (zl_store_get_job (self->store, id, job->priority, arena, &rec) != ZL_STORE_OK)
        return -1;
    out->n_parents = rec.n_depends_on;
    out->parents = rec.depends_on;
    return 0;
}

int
zl_jobs_outcome (zl_jobs_t *self, uint64_t id, zl_arena_t *arena, zl_job_outcome_t *out)
{
    memset (out, 0, sizeof *out);
    out->job_id = id;
    out->state = out->error = out->tenant = out->lane = "";
    zl_job_t *job = id ? zl_job_index_get (self->by_id, id) : NULL;
    if (!job)
        return 0;
    out->found = true;
    out->state = zl_job_state_name (job->state);
    out->tenant = job->flow->tenant->name;
    out->lane = job->flow->lane->name;
    out->attempts = job->attempt;
    if (job->state == ZL_JOB_CANCELLED) { // final too
        out->final = true;
        out->outcome = ZL_OUTCOME_CANCELLED;
        out->error = "cancelled";
        out->finished_at_ms = (uint64_t)job->cancelled_at_ms;
        return 0;
    }
    if (job->state != ZL_JOB_DONE && job->state != ZL_JOB_DEAD)
        return 0;
    out->final = true;
    out->finished_at_ms = (uint64_t)job->dead_at_ms;
    if (job == self->ack_job) { // being acked now (maybe not kept)
        out->outcome = ZL_OUTCOME_ACKED;
        uint8_t *copy = zl_arena_alloc (arena, self->ack_result.len ? self->ack_result.len : 1);
        if (self->ack_result.len)
            memcpy (copy, self->ack_result.data, self->ack_result.len);
        out->result = (zl_bytes_t){copy, self->ack_result.len};
        return 0;
    }
    zl_state_rec_t st;
    if (zl_store_get_state (self->store, id, arena, &st) != ZL_STORE_OK)
        return -1;
    if (job->state == ZL_JOB_DONE) {
        out->outcome = ZL_OUTCOME_ACKED;
        out->result = st.result;
        return 0;
    }
    const zl_attempt_t *last = st.n_history ? &st.history[st.n_history - 1] : NULL;
    out->outcome = last ? last->outcome : ZL_OUTCOME_UNSPECIFIED;
    out->error = last ? last->error : "";
    out->failed_parent = st.failed_parent;
    return 0;
}

int
zl_jobs_parent_results (zl_jobs_t *self, const zl_job_rec_t *rec, zl_arena_t *arena, size_t *n,
                        const zl_parent_result_t **out)
{
    *n = 0;
    *out = NULL;
    if (!rec->n_depends_on)
        return 0;
    zl_parent_result_t *r = zl_arena_alloc (arena, rec->n_depends_on * sizeof *r);
    for (size_t i = 0; i < rec->n_depends_on; i++) {
        r[i] = (zl_parent_result_t){rec->depends_on[i], {NULL, 0}};
        zl_state_rec_t st;
        zl_job_t *p = zl_job_index_get (self->by_id, rec->depends_on[i]);
        if (p && p->state == ZL_JOB_DONE &&
            zl_store_get_state (self->store, p->id, arena, &st) == ZL_STORE_OK)
            r[i].result = st.result;
    }
    *n = rec->n_depends_on;
    *out = r;
    return 0;
}

// ---------------------------------------------------------------- transitions
zl_store_rc_t
zl_jobs_stage (zl_jobs_t *self, uint64_t id, const zl_job_spec_t *spec, const zl_lane_config_t *lc,
               zl_now_t now)
{
    zl_job_rec_t rec = {.tenant = spec->tenant,
                        .lane = lc->name, // the lane it landed in (maybe the default)
                        .payload = spec->payload,
                        .idempotency_key = spec->idempotency_key,
                        .n_headers = spec->n_headers,
                        .headers = spec->headers,
                        .max_attempts = spec->max_attempts ? spec->max_attempts : lc->max_attempts,
                        .lease_ms = spec->lease_ms ? spec->lease_ms : (uint32_t)lc->lease_ms,
                        .max_run_ms =
                            spec->max_run_ms ? spec->max_run_ms : (uint32_t)lc->max_run_ms,
                        .enqueued_at_ms = now.wall_ms,
                        .n_depends_on = spec->n_depends_on,
                        .depends_on = spec->depends_on,
                        .batch = spec->batch ? spec->batch : "",
                        .batch_self = spec->open_batch ? zl_jobs_batch_name (self, id, spec) : "",
                        .batch_no_callback = spec->open_batch && spec->batch_no_callback,
                        .priority_plus1 = spec->has_priority ? spec->priority + 1 : 0,
                        .ordering_key = spec->ordering_key ? spec->ordering_key : "",
                        .deadline_ms = spec->open_batch ? 0 : s_deadline_of (spec, lc, now)};
    zl_store_rc_t rc = zl_store_put_job (self->store, id, &rec);
    if (rc == ZL_STORE_OK && spec->idempotency_key[0]) {
        zl_idem_rec_t idem = {id, now.wall_ms, spec->generated_key};
        rc = zl_store_put_idem (self->store, spec->tenant, spec->idempotency_key, &idem);
    }
    if (rc == ZL_STORE_OK && spec->delay_ms) {
        zl_state_rec_t st = {.state = ZL_JOB_DELAYED, .due_at_ms = now.wall_ms + spec->delay_ms};
        rc = zl_store_put_state (self->store, id, &st);
    }
    // No room is the Submit's answer (STORE_FULL); any other failure is the
    // store's, and the turn cannot be committed: the broker stops.
    if (rc != ZL_STORE_OK && rc != ZL_STORE_FULL)
        s_check (self, rc, "new job", id);
    return rc;
}

static void
s_settings (zl_job_t *job, const zl_lane_config_t *lc, uint32_t max_attempts, uint32_t lease_ms,
            uint32_t max_run_ms)
{
    uint32_t ma = max_attempts ? max_attempts : lc->max_attempts;
    job->max_attempts = (uint16_t)(ma == 0 ? 1 : ma > UINT16_MAX ? UINT16_MAX : ma);
    job->lease_ms = lease_ms ? lease_ms : (uint32_t)lc->lease_ms;
    job->max_run_ms = max_run_ms ? max_run_ms : (uint32_t)lc->max_run_ms;
}

zl_job_t *
zl_jobs_accept (zl_jobs_t *self, uint64_t id, const zl_job_spec_t *spec, zl_flow_t *flow,
                zl_now_t now)
{
    zl_job_t *job = s_job_new (self);
    job->id = id;
    job->flow = flow;
    s_settings (job, &flow->lane->cfg, spec->max_attempts, spec->lease_ms, spec->max_run_ms);
    job->priority = (uint8_t)(spec->has_priority ? spec->priority : ZL_PRIORITY_DEFAULT);
    if (!spec->open_batch) // (a batch's callback has none: it waits for the batch)
        s_deadline_set (self, id, s_deadline_of (spec, &flow->lane->cfg, now));
    job->accepted_us = now.mono_us;
    zl_job_index_put (self->by_id, job);
    flow->submitted++;
    s_depth (job, +1);
    if (spec->open_batch) {
        // the batch's record: WAITING until the batch settles (its record
        // is written at the end of the turn, zl_jobs_settle_batches)
        job->flags |= ZL_JOBF_BATCH_REC | ZL_JOBF_KEEP;
        job->state = ZL_JOB_WAITING;
        job->seq = id;
        s_waiting_count (self, job, +1);
        zl_batches_open (self->batches, zl_jobs_batch_name (self, id, spec), id, flow->tenant->name,
                         flow->lane->name, !spec->batch_no_callback, now.wall_ms);
        return job;
    }
    if (spec->batch && spec->batch[0]) {
        zl_batch_t *b = zl_batches_find (self->batches, spec->batch); // admission checked
        if (b) {
            job->flags |= ZL_JOBF_BATCH;
            zl_batches_join (self->batches, b, id);
        }
    }
    if (spec->ordering_key && spec->ordering_key[0]) { // (admission: no parents then)
        uint64_t group = zl_ordering_group (self->ordering, flow, spec->ordering_key);
        if (!zl_ordering_join (self->ordering, job, group, id)) {
            job->seq = id;
            s_hold (self, job, spec->delay_ms ? now.mono_ms + spec->delay_ms : 0);
            return job;
        }
    }
    if (spec->n_depends_on) {
        // its parents exist (admission checked), or were staged before it
        job->flags |= ZL_JOBF_DEPS;
        zl_dep_t *dep = zl_deps_get (self->deps, id, true);
        uint32_t left;
        uint64_t dead;
        s_link_parents (self, id, spec->depends_on, spec->n_depends_on, &left, &dead);
        job->seq = id;
        if (dead || left) {
            job->state = ZL_JOB_WAITING;
            s_waiting_count (self, job, +1);
            dep->parents_left = left;
            if (dead) // a parent is in the DLQ already: so is this job
                s_bury_for_parent (self, job, dep, dead, now);
            return job;
        }
    }
    if (spec->delay_ms)
        s_make_delayed (self, job, spec->delay_ms, now);
    else {
        // never-attempted jobs have no state record: their order is their id
        job->state = ZL_JOB_READY;
        job->ready_ms = now.mono_ms;
        job->seq = id;
        zl_sched_push (self->sched, job);
    }
    return job;
}

void
zl_jobs_lease (zl_jobs_t *self, zl_job_t *job, zl_worker_conn_t *worker, zl_now_t now)
{
    job->state = ZL_JOB_LEASED;
    job->lease = zl_lease_new (self->tokens, job->lease_ms, job->max_run_ms, now);
    job->attempt++;
    job->due_ms = zl_lease_due_ms (job->lease);
    zl_timers_set (self->timers, job);
    zl_worker_conn_hold (worker, job);
    job->flow->in_flight++;
    zl_lanes_count_running (job->flow->lane, job->flow->tenant, 1);
    if (job->attempt == 1)
        zl_hist_add (&self->lat_start, (uint64_t)(now.mono_us - job->accepted_us));
    zl_arena_reset (self->scratch);
    s_put_state (self, job, NULL, worker->name, now.wall_ms, 0);
}

zl_settle_rc_t
zl_jobs_ack (zl_jobs_t *self, zl_worker_conn_t *worker, const zl_ack_item_t *ack, zl_now_t now)
{
    zl_job_t *job = NULL;
    zl_settle_rc_t rc = s_lookup (self, worker, ack->job_id, ack->lease, &job);
    if (rc != ZL_SETTLE_OK)
        return rc;
    zl_sched_charge (self->sched, job, s_run_us (job, ack->run_us, now));
    s_breaker_note (job, S_BRK_SUCCESS, now);
    s_unlease (self, job);
    job->flow->acked++;
    s_depth (job, -1);
    zl_hist_add (&self->lat_ack, (uint64_t)(now.mono_us - job->accepted_us));
    zl_dep_t *dep = (job->flags & ZL_JOBF_DEPS) ? zl_deps_get (self->deps, job->id, false) : NULL;
    // its outcome is kept only where it is needed: a result, children that
    // will want it, a watcher, or a lane that keeps every outcome
    bool keep = ack->result.len || (job->flags & ZL_JOBF_KEEP) || (dep && dep->n_children) ||
                job->flow->lane->cfg.keep_outcomes;
    job->state = ZL_JOB_DONE;
    job->dead_at_ms = now.wall_ms;
    s_order_leave (self, job, now); // the next job of its ordering key goes
    s_batch_note (self, job);
    self->ack_job = job;
    self->ack_result = ack->result;
    s_tell (self, ZL_JOBS_EV_ACKED, job);
    self->ack_job = NULL;
    if (dep)
        s_release_children (self, dep, now);
    if (!keep) {
        s_delete (self, job);
        return ZL_SETTLE_OK;
    }
    zl_state_rec_t st = {.state = ZL_JOB_DONE,
                         .attempt = job->attempt,
                         .result = ack->result,
                         .done_at_ms = now.wall_ms,
                         .dead_at_ms = now.wall_ms};
    s_check (self, zl_store_put_state (self->store, job->id, &st), "done", job->id);
    job->has_history = 0; // a kept outcome keeps the result, not the attempts
    s_done_push (self, job);
    return ZL_SETTLE_OK;
}

zl_settle_rc_t
zl_jobs_nack (zl_jobs_t *self, zl_worker_conn_t *worker, const zl_nack_item_t *nack, zl_now_t now)
{
    zl_job_t *job = NULL;
    zl_settle_rc_t rc = s_lookup (self, worker, nack->job_id, nack->lease, &job);
    if (rc != ZL_SETTLE_OK)
        return rc;
    zl_sched_charge (self->sched, job, s_run_us (job, nack->run_us, now));
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
        if (nack->retry_after_ms) {
            retry_ms = nack->retry_after_ms;
            // the downstream said "not now": hold the tenant's jobs in this lane
            zl_sched_pause (self->sched, job->flow, now.mono_ms + retry_ms);
        }
        break;
    case ZL_FAIL_NOT_YET:
        outcome = ZL_OUTCOME_NOT_YET;
        self->not_yet++;
        retry_ms = nack->retry_after_ms ? nack->retry_after_ms : ZL_NOT_YET_DEFAULT_MS;
        break;
    default:
        outcome = ZL_OUTCOME_TRANSIENT;
        job->flow->nacked_transient++;
        break;
    }
    // only a transient failure says the downstream may be down
    s_breaker_note (job, outcome == ZL_OUTCOME_TRANSIENT ? S_BRK_FAILURE : S_BRK_NEUTRAL, now);
    zl_arena_reset (self->scratch);
    zl_attempt_t att = s_attempt (job, outcome, s_clip (self, nack->error), now);
    self->put_checkpoint = nack->checkpoint; // (the failure's state write saves it)
    if (outcome == ZL_OUTCOME_NOT_YET) {
        // not an attempt spent: the next one has the same number; bounded by
        // the lane's max_not_yet, counted in the history (durable)
        uint32_t times = 1 + s_not_yet_count (self, job);
        uint32_t max = job->flow->lane->cfg.max_not_yet;
        job->attempt--;
        if (times > max) {
            att.error = zl_arena_printf (self->scratch,
                                         "not_yet %u times, past the lane's max_not_yet (%u): %s",
                                         times, max, att.error);
            self->not_yet_exhausted++;
            char *wn = zl_strdup (att.worker);
            att.worker = wn;
            s_unlease (self, job);
            s_bury (self, job, &att, now);
            free (wn);
            self->put_checkpoint = (zl_bytes_t){0}; // (written by the burial)
            return ZL_SETTLE_OK;
        }
    }
    char *worker_name = zl_strdup (att.worker);
    att.worker = worker_name;
    s_unlease (self, job);
    s_fail (self, job, &att, retry_ms, now);
    free (worker_name);
    self->put_checkpoint = (zl_bytes_t){0}; // (written by s_fail)
    return ZL_SETTLE_OK;
}

zl_settle_rc_t
zl_jobs_extend (zl_jobs_t *self, zl_worker_conn_t *worker, const zl_extend_item_t *ext,
                zl_now_t now)
{
    zl_job_t *job = NULL;
    zl_settle_rc_t rc = s_lookup (self, worker, ext->job_id, ext->lease, &job);
    if (rc != ZL_SETTLE_OK)
        return rc;
    if (zl_lease_extend (job->lease, ext->lease_ms, now))
        rc = ZL_SETTLE_MAX_RUN; // extended, but only as far as max run allows
    job->due_ms = zl_lease_due_ms (job->lease);
    zl_timers_set (self->timers, job);
    if (ext->checkpoint.len) { // progress saved: durable with this turn's commit
        zl_arena_reset (self->scratch);
        self->put_checkpoint = ext->checkpoint;
        s_put_state (self, job, NULL, job->lease->worker ? job->lease->worker->name : "",
                     job->lease->started_at_ms, 0);
    }
    return rc;
}

// End a lease that nobody settled (lapsed, max run, worker dead): charge the
// time it held a worker, record the attempt, ready again at once or DLQ.
static void
s_abandon (zl_jobs_t *self, zl_job_t *job, zl_outcome_t outcome, const char *error, zl_now_t now)
{
    zl_sched_charge (self->sched, job, zl_lease_run_us (job->lease, now));
    s_breaker_note (job, S_BRK_FAILURE, now); // a lapsed lease, a dead worker
    char *worker_name = zl_strdup (job->lease->worker ? job->lease->worker->name : "");
    zl_arena_reset (self->scratch);
    zl_attempt_t att = s_attempt (job, outcome, s_clip (self, error), now);
    att.worker = worker_name;
    s_unlease (self, job);
    s_fail (self, job, &att, 0, now);
    free (worker_name);
}

size_t
zl_jobs_release_worker (zl_jobs_t *self, zl_worker_conn_t *worker, zl_outcome_t outcome,
                        const char *error, zl_now_t now)
{
    size_t n = 0;
    while (worker->jobs) {
        s_abandon (self, worker->jobs, outcome, error, now);
        n++;
    }
    return n;
}

size_t
zl_jobs_return_unreached (zl_jobs_t *self, zl_worker_conn_t *worker, zl_now_t now)
{
    size_t n = 0;
    while (worker->jobs) {
        zl_job_t *job = worker->jobs;
        zl_info ("jobs", "job %llu attempt %u never reached worker %s: ready again",
                 (unsigned long long)job->id, job->attempt, worker->name);
        s_unlease (self, job);
        job->attempt--;
        s_make_ready (self, job, now);
        zl_arena_reset (self->scratch);
        s_put_state (self, job, NULL, NULL, 0, 0);
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
            zl_arena_reset (self->scratch);
            s_put_state (self, job, NULL, NULL, 0, 0);
            continue;
        }
        if (job->state != ZL_JOB_LEASED)
            continue; // cannot happen: only delayed and leased jobs have timers
        zl_lease_t *lease = job->lease;
        bool max_run = zl_lease_max_run_reached (lease, now.mono_ms);
        char error[128];
        snprintf (error, sizeof error,
                  max_run ? "max run time of %u ms exceeded" : "lease of %u ms lapsed",
                  max_run ? job->max_run_ms : job->lease_ms);
        zl_info ("jobs", "job %llu attempt %u on worker %s: %s", (unsigned long long)job->id,
                 job->attempt, lease->worker ? lease->worker->name : "?", error);
        job->flow->lease_expired++;
        s_abandon (self, job, max_run ? ZL_OUTCOME_MAX_RUN : ZL_OUTCOME_LEASE_EXPIRED, error, now);
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
    return zl_job_index_get (self->by_id, id);
}

zl_store_rc_t
zl_jobs_load (zl_jobs_t *self, const zl_job_t *job, zl_arena_t *arena, zl_job_rec_t *rec,
              zl_state_rec_t *state)
{
    zl_store_rc_t rc = ZL_STORE_OK;
    if (rec)
        rc = zl_store_get_job (self->store, job->id, job->priority, arena, rec);
    if (rc == ZL_STORE_OK && state) {
        // read even when never attempted: a delayed, retried-to-ready or
        // redriven job with attempt 0 has a state record too
        rc = zl_store_get_state (self->store, job->id, arena, state);
        if (rc == ZL_STORE_NOT_FOUND) {
            memset (state, 0, sizeof *state);
            state->leased_to = "";
            rc = ZL_STORE_OK;
        }
    }
    return rc;
}

// A job back from the DLQ keeps its deadline (in its record): one that
// passed expires it again.
static void
s_deadline_again (zl_jobs_t *self, const zl_job_t *job)
{
    zl_job_rec_t rec;
    zl_arena_reset (self->scratch);
    if (zl_store_get_job (self->store, job->id, job->priority, self->scratch, &rec) == ZL_STORE_OK)
        s_deadline_set (self, job->id, rec.deadline_ms);
}

void
zl_jobs_redrive (zl_jobs_t *self, zl_job_t *job, zl_now_t now)
{
    // it keeps its deadline (in its record), and its ordering key: it joins
    // the key's line again at its end, as a job accepted now would
    zl_job_rec_t rec;
    zl_arena_reset (self->scratch);
    uint64_t group = 0;
    if (zl_store_get_job (self->store, job->id, job->priority, self->scratch, &rec) ==
        ZL_STORE_OK) {
        s_deadline_set (self, job->id, rec.deadline_ms);
        if (rec.ordering_key && rec.ordering_key[0])
            group = zl_ordering_group (self->ordering, job->flow, rec.ordering_key);
    }
    zl_dlq_remove (self->dlq, job);
    job->flow->dlq--;
    job->attempt = 0;
    job->has_history = 0; // the history starts again with the fresh attempts
    job->flags &= (uint8_t)~ZL_JOBF_ORDER_DIED;
    s_depth (job, +1);
    if (group && !zl_ordering_join (self->ordering, job, group, zl_jobs_take_id (self))) {
        s_hold (self, job, 0);
        s_batch_note (self, job);
        zl_arena_reset (self->scratch);
        s_put_state (self, job, NULL, NULL, 0, 0); // its new place (order_seq)
        return;
    }
    if (!(job->flags & ZL_JOBF_DEPS)) {
        s_make_ready (self, job, now);
        s_batch_note (self, job);
        zl_arena_reset (self->scratch);
        s_put_state (self, job, NULL, NULL, 0, 0);
        return;
    }
    // in a workflow: READY, WAITING or back to the DLQ by its parents; then
    // the descendants it buried come back with it
    s_rearm (self, job, now);
    s_batch_note (self, job);
    if (job->state != ZL_JOB_DEAD)
        s_rearm_children (self, job, now);
}

void
zl_jobs_purge (zl_jobs_t *self, zl_job_t *job)
{
    zl_dlq_remove (self->dlq, job);
    job->flow->dlq--;
    s_delete (self, job);
}

int
zl_jobs_dead_letter (zl_jobs_t *self, zl_job_t *job, bool full, zl_arena_t *arena,
                     zl_dead_letter_t *d)
{
    zl_job_rec_t rec;
    zl_state_rec_t st;
    if (zl_jobs_load (self, job, arena, &rec, &st) != ZL_STORE_OK)
        return -1;
    memset (d, 0, sizeof *d);
    d->job_id = job->id;
    d->tenant = job->flow->tenant->name;
    d->lane = job->flow->lane->name;
    d->idempotency_key = rec.idempotency_key;
    d->enqueued_at_ms = (uint64_t)rec.enqueued_at_ms;
    d->dead_at_ms = (uint64_t)job->dead_at_ms;
    d->error = st.n_history ? st.history[st.n_history - 1].error : "";
    d->ordering_key = rec.ordering_key ? rec.ordering_key : "";
    d->ordering_head = st.ordering_head;
    if (full) {
        d->checkpoint = st.checkpoint;
        d->payload = rec.payload;
        d->n_headers = rec.n_headers;
        d->headers = rec.headers;
        d->n_attempts = st.n_history;
        d->attempts = st.history;
    }
    return 0;
}

// ---------------------------------------------------------------- cancellation
// Append a CANCELLED job to the kept list (retention order).
static void
s_cancelled_add (zl_jobs_t *self, zl_job_t *job)
{
    job->next = NULL;
    if (self->cancelled_tail)
        self->cancelled_tail->next = job;
    else
        self->cancelled_head = job;
    self->cancelled_tail = job;
    self->n_cancelled++;
}

/*  THE HOOK for "cancelling a job cancels its not-yet-run descendants"
    (issue 15, item 4). Called once for every job that became CANCELLED,
    after its record went into the turn's batch: by an operator's cancel,
    or by this very hook for a descendant. Jobs have no dependencies yet
    (item 2 adds them); when they do, this cancels each descendant of `job`
    that has not run (waiting for its parents, ready or delayed) with
    zl_jobs_cancel (self, child_id, now, &item), which calls this again for
    the child's own descendants, and leaves alone those already finished. A
    descendant that is running is cancelled like any running job (its
    worker is told through the listener). */
static void
s_cancel_descendants (zl_jobs_t *self, zl_job_t *job, zl_now_t now)
{
    zl_dep_t *dep = zl_deps_get (self->deps, job->id, false);
    for (uint32_t i = 0; dep && i < dep->n_children; i++) {
        zl_job_t *c = zl_job_index_get (self->by_id, dep->children[i]);
        if (!c)
            continue;
        zl_dep_t *cd = zl_deps_get (self->deps, c->id, false);
        // not run yet: waiting for its parents, or dead-lettered for a parent
        bool unrun =
            c->state == ZL_JOB_WAITING || (c->state == ZL_JOB_DEAD && cd && cd->failed_parent);
        if (!unrun)
            continue;
        zl_cancel_item_t item;
        (void)zl_jobs_cancel (self, c->id, now, &item);
        dep = zl_deps_get (self->deps, job->id, false); // (nodes are heap cells: not moved)
    }
}

zl_cancel_outcome_t
zl_jobs_cancel (zl_jobs_t *self, uint64_t id, zl_now_t now, zl_cancel_item_t *out)
{
    *out = (zl_cancel_item_t){.job_id = id, .state = ""};
    zl_job_t *job = id ? zl_job_index_get (self->by_id, id) : NULL;
    if (!job) {
        // ids are issued in order: one below the counter was a job once
        out->outcome = id && id < self->next_id ? ZL_CANCEL_FINISHED : ZL_CANCEL_UNKNOWN;
        return out->outcome;
    }
    if (job->state == ZL_JOB_DONE) { // acked, its outcome kept: nothing to cancel
        out->outcome = ZL_CANCEL_FINISHED;
        out->state = "done";
        return out->outcome;
    }
    if (job->state == ZL_JOB_CANCELLED) {
        out->outcome = ZL_CANCEL_ALREADY_CANCELLED;
        out->state = zl_job_state_name (job->cancelled_from);
        out->cancelled_at_ms = (uint64_t)job->cancelled_at_ms;
        return out->outcome;
    }
    out->state = zl_job_state_name (job->state);
    s_tell (self, ZL_JOBS_EV_CANCELLED, job); // before: a LEASED job still holds its lease
    zl_arena_reset (self->scratch);
    zl_attempt_t att, *extra = NULL;
    switch ((zl_job_state_t)job->state) {
    case ZL_JOB_READY:
        zl_sched_remove (self->sched, job);
        s_depth (job, -1);
        break;
    case ZL_JOB_DELAYED:
        zl_timers_cancel (self->timers, job);
        job->flow->delayed--;
        s_depth (job, -1);
        break;
    case ZL_JOB_LEASED: {
        // the attempt ends here, whatever its worker reports later
        zl_sched_charge (self->sched, job, zl_lease_run_us (job->lease, now));
        att = s_attempt (job, ZL_OUTCOME_CANCELLED, "cancelled while it ran", now);
        s_breaker_note (job, S_BRK_NEUTRAL, now);
        att.worker = zl_arena_strndup (self->scratch, att.worker, strlen (att.worker));
        extra = &att;
        s_unlease (self, job);
        s_depth (job, -1);
        break;
    }
    case ZL_JOB_DEAD: // it leaves the dead-letter queue (its depth went at death)
        zl_dlq_remove (self->dlq, job);
        job->flow->dlq--;
        break;
    case ZL_JOB_WAITING: // for its parents: their release skips it from now on
        s_waiting_count (self, job, -1);
        s_depth (job, -1);
        break;
    default: break;
    }
    job->cancelled_from = job->state;
    job->state = ZL_JOB_CANCELLED;
    job->cancelled_at_ms = now.wall_ms;
    job->seq = zl_jobs_take_id (self); // order of cancellation
    s_order_leave (self, job, now);    // (before its links are the kept list's)
    s_cancelled_add (self, job);
    s_put_state (self, job, extra, NULL, 0, 0);
    zl_info ("jobs", "job %llu cancelled (it was %s), lane=%s tenant=%s", (unsigned long long)id,
             out->state, job->flow->lane->name, job->flow->tenant->name);
    out->outcome = ZL_CANCEL_CANCELLED;
    out->cancelled_at_ms = (uint64_t)now.wall_ms;
    s_batch_note (self, job);
    if (job->flags & ZL_JOBF_BATCH_REC) { // the batch never settles now
        zl_batch_t *b = zl_batches_of_record (self->batches, job->id);
        if (b)
            zl_batches_cancelled (self->batches, b);
    }
    s_tell (self, ZL_JOBS_EV_CANCEL_FINAL, job); // its final outcome, for its watchers
    s_cancel_descendants (self, job, now);
    return ZL_CANCEL_CANCELLED;
}

uint64_t
zl_jobs_expire_cancelled (zl_jobs_t *self, zl_now_t now, uint64_t keep_ms, uint64_t max)
{
    if (!keep_ms)
        return 0;
    uint64_t n = 0;
    zl_job_t *j;
    while (n < max && (j = self->cancelled_head) &&
           now.wall_ms - j->cancelled_at_ms >= (int64_t)keep_ms) {
        self->cancelled_head = j->next;
        if (!self->cancelled_head)
            self->cancelled_tail = NULL;
        self->n_cancelled--;
        s_delete (self, j);
        n++;
    }
    if (n)
        zl_debug ("jobs",
                  "deleted %" PRIu64 " cancelled job(s) older than result_retention (%" PRIu64
                  " ms)",
                  n, keep_ms);
    return n;
}

size_t
zl_jobs_cancelled_kept (zl_jobs_t *self)
{
    return self->n_cancelled;
}

// ---------------------------------------------------------------- recovery
static void
s_restored_push (zl_jobs_t *self, zl_job_t *job)
{
    if (self->n_restored == self->cap_restored) {
        self->cap_restored = self->cap_restored ? self->cap_restored * 2 : 1024;
        self->restored = zl_realloc (self->restored, self->cap_restored * sizeof (zl_job_t *));
    }
    self->restored[self->n_restored++] = job;
}

static void s_restore (zl_jobs_t *self, uint64_t id, zl_flow_t *flow, const zl_job_rec_t *rec,
                       const zl_state_rec_t *st, const zl_jobs_cut_t *cut, zl_now_t now);

void
zl_jobs_restore (zl_jobs_t *self, uint64_t id, zl_flow_t *flow, const zl_job_rec_t *rec,
                 const zl_state_rec_t *st, const zl_jobs_cut_t *cut, zl_now_t now)
{
    if (rec->batch_self && rec->batch_self[0]) {
        bool callback = !rec->batch_no_callback;
        uint32_t state = st ? st->state : ZL_JOB_WAITING;
        if (!rec->batch_summary && (state == ZL_JOB_WAITING || !st)) {
            // still settling: WAITING, its batch from its progress
            zl_job_t *job = s_job_new (self);
            job->id = id;
            job->flow = flow;
            s_settings (job, &flow->lane->cfg, rec->max_attempts, rec->lease_ms, rec->max_run_ms);
            job->accepted_us = now.mono_us;
            job->flags |= ZL_JOBF_BATCH_REC | ZL_JOBF_KEEP;
            job->priority = (uint8_t)zl_record_priority (rec);
            job->state = ZL_JOB_WAITING;
            job->seq = id;
            zl_job_index_put (self->by_id, job);
            s_depth (job, +1);
            s_waiting_count (self, job, +1);
            zl_batches_restore (self->batches, rec->batch_self, id, flow->tenant->name,
                                flow->lane->name, callback, st ? st->batch : NULL);
            return;
        }
        zl_batches_restore_settled (self->batches, rec->batch_self, id, flow->tenant->name,
                                    flow->lane->name, callback, !rec->batch_summary);
    }
    s_restore (self, id, flow, rec, st, cut, now);
    zl_job_t *job = zl_job_index_get (self->by_id, id);
    if (!job)
        return;
    if (rec->batch_self && rec->batch_self[0])
        job->flags |= ZL_JOBF_BATCH_REC | ZL_JOBF_KEEP;
    if (rec->batch && rec->batch[0]) { // counted by its batch once every job is in
        job->flags |= ZL_JOBF_BATCH;
        zl_batches_restore_member (self->batches, rec->batch, id, s_batch_class (job));
    }
    // (a held job was stored READY, DELAYED or, redriven, WAITING: all come
    // back READY or DELAYED here, and wait their turn again at the end)
    if (rec->ordering_key && rec->ordering_key[0] &&
        (job->state == ZL_JOB_READY || job->state == ZL_JOB_DELAYED)) {
        if (self->n_rord == self->cap_rord) {
            self->cap_rord = self->cap_rord ? self->cap_rord * 2 : 256;
            self->rord = zl_realloc (self->rord, self->cap_rord * sizeof *self->rord);
        }
        self->rord[self->n_rord++] =
            (s_restored_order_t){job, zl_ordering_group (self->ordering, flow, rec->ordering_key),
                                 st && st->order_seq ? st->order_seq : id};
    }
}

static int
s_cmp_order (const void *a, const void *b)
{
    const s_restored_order_t *x = a, *y = b;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

// Recovery's end for ordering keys: each key's jobs join its group in their
// order; the first still to run is its head (as restored), the others are
// held again.
static void
s_restore_order (zl_jobs_t *self)
{
    if (self->n_rord)
        qsort (self->rord, self->n_rord, sizeof *self->rord, s_cmp_order);
    for (size_t i = 0; i < self->n_rord; i++) {
        s_restored_order_t *r = &self->rord[i];
        zl_job_t *job = r->job;
        if (zl_ordering_join (self->ordering, job, r->group, r->seq))
            continue;
        if (job->state == ZL_JOB_DELAYED) {
            zl_timers_cancel (self->timers, job);
            job->flow->delayed--;
            s_hold (self, job, job->due_ms);
        } else
            s_hold (self, job, 0); // (still in the restored list: not pushed)
    }
    free (self->rord);
    self->rord = NULL;
    self->n_rord = self->cap_rord = 0;
}

static void
s_restore (zl_jobs_t *self, uint64_t id, zl_flow_t *flow, const zl_job_rec_t *rec,
           const zl_state_rec_t *st, const zl_jobs_cut_t *cut, zl_now_t now)
{
    zl_job_t *job = s_job_new (self);
    job->id = id;
    job->flow = flow;
    s_settings (job, &flow->lane->cfg, rec->max_attempts, rec->lease_ms, rec->max_run_ms);
    job->priority = (uint8_t)zl_record_priority (rec);
    s_deadline_set (self, id, rec->deadline_ms);
    job->accepted_us = now.mono_us;
    job->attempt = st ? (uint16_t)st->attempt : 0;
    job->has_history = st && st->n_history > 0;
    if (st && st->checkpoint.len)
        job->flags |= ZL_JOBF_CHECKPOINT;
    zl_job_index_put (self->by_id, job);
    uint32_t state = st ? st->state : ZL_JOB_READY;
    if (state == ZL_JOB_CANCELLED) { // inert: kept until its retention ends
        job->state = ZL_JOB_CANCELLED;
        job->cancelled_at_ms = st->cancelled_at_ms;
        job->cancelled_from = (uint8_t)st->cancelled_from;
        job->seq = st->ready_seq;
        s_restored_push (self, job);
        return;
    }
    if (state == ZL_JOB_DONE) {
        job->state = ZL_JOB_DONE;
        job->dead_at_ms = st->done_at_ms;
        job->has_history = 0;
        s_done_push (self, job); // ordered by restore_done
        return;
    }
    if (rec->n_depends_on) {
        // linked to its parents once every job is in (restore_done)
        job->flags |= ZL_JOBF_DEPS;
        bool resolve =
            state == ZL_JOB_READY && (!st || st->attempt == 0) ? true : state == ZL_JOB_WAITING;
        if (self->n_rdeps == self->cap_rdeps) {
            self->cap_rdeps = self->cap_rdeps ? self->cap_rdeps * 2 : 256;
            self->rdeps = zl_realloc (self->rdeps, self->cap_rdeps * sizeof *self->rdeps);
        }
        s_restored_deps_t *r = &self->rdeps[self->n_rdeps++];
        r->job = job;
        r->n_parents = (uint32_t)rec->n_depends_on;
        r->parents = zl_malloc (rec->n_depends_on * sizeof (uint64_t));
        memcpy (r->parents, rec->depends_on, rec->n_depends_on * sizeof (uint64_t));
        r->resolve = resolve;
        if (state == ZL_JOB_DEAD && st->failed_parent)
            zl_deps_get (self->deps, id, true)->failed_parent = st->failed_parent;
        if (resolve) { // never released: its parents decide (restore_done)
            job->state = ZL_JOB_WAITING;
            job->seq = id;
            s_depth (job, +1);
            s_waiting_count (self, job, +1);
            return;
        }
    }
    if (state == ZL_JOB_DEAD) {
        job->state = ZL_JOB_DEAD;
        job->dead_at_ms = st->dead_at_ms;
        job->seq = st->ready_seq;
        flow->dlq++;
        s_restored_push (self, job);
        return;
    }
    s_depth (job, +1);
    if (state == ZL_JOB_DELAYED) {
        int64_t left = st->due_at_ms - now.wall_ms;
        s_make_delayed (self, job, left > 0 ? (uint64_t)left : 0, now);
        return;
    }
    job->state = ZL_JOB_READY;
    job->seq = st && st->ready_seq ? st->ready_seq : id;
    if (st && st->state == ZL_JOB_LEASED) {
        // the attempt that was running when the last leader stopped counts
        zl_attempt_t att = {.attempt = job->attempt,
                            .worker = st->leased_to,
                            .started_at_ms = (uint64_t)st->started_at_ms,
                            .ended_at_ms = (uint64_t)now.wall_ms,
                            .outcome = cut->outcome,
                            .error = cut->error};
        if (job->attempt >= job->max_attempts) {
            job->state = ZL_JOB_DEAD;
            job->dead_at_ms = now.wall_ms;
            job->seq = 0; // dies now, before any death of this run
            flow->dlq++;
            flow->dead_lettered++;
            s_depth (job, -1);
        }
        zl_arena_reset (self->scratch);
        s_put_state (self, job, &att, NULL, 0, 0);
    }
    s_restored_push (self, job);
}

// Recovery's order: dead letters, cancelled jobs, then ready ones.
static int
s_restored_rank (const zl_job_t *job)
{
    return job->state == ZL_JOB_DEAD ? 0 : job->state == ZL_JOB_CANCELLED ? 1 : 2;
}

static int
s_cmp_restored (const void *a, const void *b)
{
    const zl_job_t *x = *(zl_job_t *const *)a, *y = *(zl_job_t *const *)b;
    // dead letters first, in the order they died; cancelled jobs in the
    // order they were cancelled; then ready jobs in order
    int rx = s_restored_rank (x), ry = s_restored_rank (y);
    if (rx != ry)
        return rx < ry ? -1 : 1;
    if (x->state == ZL_JOB_CANCELLED) {
        if (x->cancelled_at_ms != y->cancelled_at_ms)
            return x->cancelled_at_ms < y->cancelled_at_ms ? -1 : 1;
        if (x->seq != y->seq)
            return x->seq < y->seq ? -1 : 1;
        return x->id < y->id ? -1 : x->id > y->id;
    }
    if (x->state == ZL_JOB_DEAD) {
        if (x->dead_at_ms != y->dead_at_ms)
            return x->dead_at_ms < y->dead_at_ms ? -1 : 1;
        if (x->seq != y->seq) // the same millisecond: in the order they died
            return x->seq < y->seq ? -1 : 1;
        return x->id < y->id ? -1 : x->id > y->id;
    }
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int
s_cmp_done (const void *a, const void *b)
{
    const zl_job_t *x = *(zl_job_t *const *)a, *y = *(zl_job_t *const *)b;
    if (x->dead_at_ms != y->dead_at_ms)
        return x->dead_at_ms < y->dead_at_ms ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

// Recovery's end for workflows: kept outcomes in the order they were acked;
// every job with parents linked under them; the jobs never released
// WAITING, READY (their parents are all acked) or dead-lettered (one is).
static void
s_restore_graph (zl_jobs_t *self, zl_now_t now)
{
    size_t n = (size_t)self->gstats.kept, k = 0;
    if (n) {
        zl_job_t **all = zl_malloc (n * sizeof *all);
        zl_job_t *j;
        while ((j = s_done_pop (self)))
            all[k++] = j;
        qsort (all, k, sizeof *all, s_cmp_done);
        for (size_t i = 0; i < k; i++)
            s_done_push (self, all[i]);
        free (all);
    }
    for (size_t i = 0; i < self->n_rdeps; i++) {
        s_restored_deps_t *r = &self->rdeps[i];
        uint32_t left;
        uint64_t dead;
        s_link_parents (self, r->job->id, r->parents, r->n_parents, &left, &dead);
        if (!r->resolve)
            continue;
        zl_dep_t *dep = zl_deps_get (self->deps, r->job->id, true);
        dep->parents_left = left;
        r->left = left;
        r->dead = dead;
    }
    // decided once every edge is in: a burial cascades to linked children
    for (size_t i = 0; i < self->n_rdeps; i++) {
        s_restored_deps_t *r = &self->rdeps[i];
        zl_job_t *job = r->job;
        if (r->resolve && job->state == ZL_JOB_WAITING) {
            zl_dep_t *dep = zl_deps_get (self->deps, job->id, true);
            if (r->dead) {
                s_bury_for_parent (self, job, dep, r->dead, now);
                s_cascade (self, job, now);
            } else if (!r->left) {
                s_waiting_count (self, job, -1);
                job->state = ZL_JOB_READY;
                job->ready_ms = now.mono_ms;
                zl_sched_push (self->sched, job);
            }
        }
        free (r->parents);
    }
    free (self->rdeps);
    self->rdeps = NULL;
    self->n_rdeps = self->cap_rdeps = 0;
}

void
zl_jobs_restore_done (zl_jobs_t *self, uint64_t next_id, zl_now_t now)
{
    if (next_id > self->next_id)
        self->next_id = next_id;
    s_restore_order (self);
    if (self->n_restored) // qsort of NULL is undefined even for 0 items
        qsort (self->restored, self->n_restored, sizeof (zl_job_t *), s_cmp_restored);
    for (size_t i = 0; i < self->n_restored; i++) {
        zl_job_t *job = self->restored[i];
        if (job->state == ZL_JOB_DEAD)
            zl_dlq_add (self->dlq, job);
        else if (job->state == ZL_JOB_CANCELLED)
            s_cancelled_add (self, job);
        else if (job->state == ZL_JOB_READY) { // (not one held for its ordering key)
            job->ready_ms = now.mono_ms;
            zl_sched_push (self->sched, job);
        }
        if (job->seq >= self->next_id)
            self->next_id = job->seq + 1;
    }
    free (self->restored);
    self->restored = NULL;
    self->n_restored = self->cap_restored = 0;
    size_t lost = zl_batches_restore_done (self->batches);
    if (lost)
        zl_warn ("jobs", "%zu job(s) name a batch the store does not hold: not counted", lost);
    s_restore_graph (self, now);
}

zl_dlq_t *
zl_jobs_dlq (zl_jobs_t *self)
{
    return self->dlq;
}

size_t
zl_jobs_count (zl_jobs_t *self)
{
    return zl_job_index_size (self->by_id);
}

const zl_hist_t *
zl_jobs_latency (zl_jobs_t *self, int which)
{
    return which == 0 ? &self->lat_start : &self->lat_ack;
}

uint64_t
zl_jobs_expire_dead (zl_jobs_t *self, zl_now_t now, uint64_t keep_ms, uint64_t max)
{
    if (!keep_ms)
        return 0;
    // the DLQ is in the order jobs died
    uint64_t n = 0;
    zl_job_t *j;
    while (n < max && (j = zl_dlq_first (self->dlq)) &&
           now.wall_ms - j->dead_at_ms >= (int64_t)keep_ms) {
        zl_jobs_purge (self, j);
        n++;
    }
    if (n)
        zl_info ("broker",
                 "purged %" PRIu64 " dead letter(s) older than dlq_retention (%" PRIu64 " ms)", n,
                 keep_ms);
    return n;
}

// ---------------------------------------------------------------- batches
zl_batches_t *
zl_jobs_batches (zl_jobs_t *self)
{
    return self->batches;
}

const char *
zl_jobs_batch_name (zl_jobs_t *self, uint64_t id, const zl_job_spec_t *spec)
{
    if (spec->open_batch_id && spec->open_batch_id[0])
        return spec->open_batch_id;
    snprintf (self->batch_name, sizeof self->batch_name, "%" PRIu64, id);
    return self->batch_name;
}

// `b` settles: its record job gets the summary, and runs (or is done).
static bool
s_settle_batch (zl_jobs_t *self, zl_batch_t *b, zl_now_t now, zl_arena_t *arena,
                zl_batch_info_t *out)
{
    zl_job_t *job = zl_job_index_get (self->by_id, zl_batch_job (b));
    if (!job || job->state != ZL_JOB_WAITING)
        return false;
    zl_batch_rec_t *sum = zl_arena_alloc (arena, sizeof *sum);
    zl_batches_settle (self->batches, b, now.wall_ms, arena, sum);
    zl_job_rec_t rec;
    zl_store_rc_t rc = zl_store_get_job (self->store, job->id, job->priority, arena, &rec);
    if (rc == ZL_STORE_OK) {
        rec.batch_summary = sum;
        rc = zl_store_put_job (self->store, job->id, &rec);
    }
    s_check (self, rc, "batch summary", job->id);
    s_waiting_count (self, job, -1);
    zl_state_rec_t st;
    if (zl_batch_has_callback (b)) {
        s_make_ready (self, job, now);
        st = (zl_state_rec_t){.state = ZL_JOB_READY, .ready_seq = job->seq};
    } else { // nothing runs: its outcome is the batch's summary
        s_depth (job, -1);
        job->state = ZL_JOB_DONE;
        job->dead_at_ms = now.wall_ms;
        st = (zl_state_rec_t){
            .state = ZL_JOB_DONE, .done_at_ms = now.wall_ms, .dead_at_ms = now.wall_ms};
        s_done_push (self, job);
    }
    s_check (self, zl_store_put_state (self->store, job->id, &st), "batch settled", job->id);
    zl_batches_info (b, sum, arena, out);
    zl_info ("jobs",
             "batch %s settled: %" PRIu64 " job(s), %" PRIu64 " acked, %" PRIu64 " dead, %" PRIu64
             " cancelled%s",
             zl_batch_id (b), sum->joined, sum->acked, sum->dead, sum->cancelled,
             zl_batch_has_callback (b) ? "; its callback is ready" : "");
    return true;
}

size_t
zl_jobs_settle_batches (zl_jobs_t *self, zl_now_t now, zl_arena_t *arena, zl_batch_info_t **settled)
{
    zl_batch_t **dirty, **due;
    size_t n_dirty, n_due, n = 0;
    if (!zl_batches_pending_changes (self->batches)) { // every turn: O(1) while none
        *settled = NULL;
        return 0;
    }
    zl_batches_take_changes (self->batches, arena, &dirty, &n_dirty, &due, &n_due);
    *settled = zl_arena_alloc (arena, (n_due + 1) * sizeof **settled);
    for (size_t i = 0; i < n_due; i++)
        n += s_settle_batch (self, due[i], now, arena, &(*settled)[n]);
    for (size_t i = 0; i < n_dirty; i++) {
        zl_batch_t *b = dirty[i];
        if (zl_batch_settled (b) || zl_batch_cancelled (b))
            continue;
        zl_job_t *job = zl_job_index_get (self->by_id, zl_batch_job (b));
        if (!job || job->state != ZL_JOB_WAITING)
            continue;
        zl_batch_rec_t p;
        zl_batches_progress (b, arena, &p);
        zl_state_rec_t st = {.state = ZL_JOB_WAITING, .batch = &p};
        s_check (self, zl_store_put_state (self->store, job->id, &st), "batch progress", job->id);
    }
    return n;
}

void
zl_jobs_batch_info (zl_jobs_t *self, const char *id, zl_arena_t *arena, zl_batch_info_t *out)
{
    zl_batch_t *b = zl_batches_find (self->batches, id);
    if (!b) {
        *out = (zl_batch_info_t){.batch_id = id, .found = false};
        return;
    }
    const zl_batch_rec_t *sum = NULL;
    zl_job_rec_t rec;
    zl_job_t *job = zl_job_index_get (self->by_id, zl_batch_job (b));
    if (zl_batch_settled (b) &&
        zl_store_get_job (self->store, zl_batch_job (b), job ? job->priority : ZL_PRIORITY_DEFAULT,
                          arena, &rec) == ZL_STORE_OK)
        sum = rec.batch_summary;
    zl_batches_info (b, sum, arena, out);
}

// ---------------------------------------------------------------- deadlines
// Dead-letter `job`, still live and not yet final, at its deadline: out of
// its queue, timer or lease (its worker told to stop it), then buried with
// outcome EXPIRED (its waiting descendants follow, parent_failed).
static void
s_expire (zl_jobs_t *self, zl_job_t *job, int64_t deadline_ms, zl_now_t now)
{
    zl_arena_reset (self->scratch);
    const char *error =
        zl_arena_printf (self->scratch, "expired: its deadline passed (%" PRId64 " ms ago)",
                         now.wall_ms - deadline_ms);
    // not running: the attempt that would have come, never started (no worker)
    zl_attempt_t att = {.attempt = job->attempt + 1u,
                        .worker = "",
                        .started_at_ms = (uint64_t)now.wall_ms,
                        .ended_at_ms = (uint64_t)now.wall_ms,
                        .outcome = ZL_OUTCOME_EXPIRED,
                        .error = error};
    switch ((zl_job_state_t)job->state) {
    case ZL_JOB_READY: zl_sched_remove (self->sched, job); break;
    case ZL_JOB_DELAYED:
        zl_timers_cancel (self->timers, job);
        job->flow->delayed--;
        break;
    case ZL_JOB_WAITING: s_waiting_count (self, job, -1); break;
    case ZL_JOB_LEASED:
        s_tell (self, ZL_JOBS_EV_EXPIRING, job); // its worker is told to stop it
        zl_sched_charge (self->sched, job, zl_lease_run_us (job->lease, now));
        att = s_attempt (job, ZL_OUTCOME_EXPIRED, error, now);
        s_breaker_note (job, S_BRK_NEUTRAL, now);
        att.worker = zl_arena_strndup (self->scratch, att.worker, strlen (att.worker));
        s_unlease (self, job);
        break;
    default: return;
    }
    self->expired++;
    s_bury (self, job, &att, now);
}

size_t
zl_jobs_expire_deadlines (zl_jobs_t *self, zl_now_t now, size_t max)
{
    size_t n = 0;
    s_deadline_t *d;
    while (n < max && (d = zl_heap_top (self->deadlines)) && d->at_ms <= now.wall_ms) {
        zl_heap_pop (self->deadlines);
        zl_u64map_remove (self->deadline_of, d->id);
        zl_job_t *job = zl_job_index_get (self->by_id, d->id);
        int64_t at = d->at_ms;
        free (d);
        if (!job || (job->flags & ZL_JOBF_BATCH_REC))
            continue;
        if (job->state == ZL_JOB_READY || job->state == ZL_JOB_DELAYED ||
            job->state == ZL_JOB_LEASED || job->state == ZL_JOB_WAITING) {
            s_expire (self, job, at, now);
            n++;
        }
    }
    return n;
}

int64_t
zl_jobs_next_deadline (zl_jobs_t *self)
{
    s_deadline_t *d = zl_heap_top (self->deadlines);
    return d ? d->at_ms : -1;
}

uint64_t
zl_jobs_expired (zl_jobs_t *self)
{
    return self->expired;
}
