/*  test_jobs: the job state machine in broker/jobs.c, driven without sockets
    and without the real clock, against a real LMDB store in a fresh temp
    directory (durability none). Every test builds a lane, a tenant, a
    scheduler, a timer heap and fake workers, moves time by hand-made zl_now_t
    values, and checks after every step that each gauge (flow ready, delayed,
    in flight, dlq; lane and tenant depth and in flight; worker in flight;
    timer heap size; DLQ depth) agrees with a recount from the jobs, and that
    the store agrees with memory (job and state records, attempt history,
    ready order, deleted jobs gone). The payload and the attempt history live
    only in the store: tests read them back with zl_jobs_load. */
#define _GNU_SOURCE // nftw, mkdtemp
#include "arena.h"
#include "config.h"
#include "dlq.h"
#include "hist.h"
#include "job.h"
#include "jobs.h"
#include "text.h"
#include "lane.h"
#include "log.h"
#include "record.h"
#include "rng.h"
#include "scheduler.h"
#include "store.h"
#include "timers.h"
#include "workers.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

// pops in tests that do not exercise caps, rate limits or pauses
#define S_NO_LIMITS_NOW (INT64_MAX / 4)
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NO_SLOT UINT32_MAX
#define MAX_IDS 4096
#define MAX_EVENTS 256
#define MAP_SIZE (64ull << 20)

// Times are offsets from these bases; the real clock is never read.
#define MONO_BASE_MS 5000000LL
#define WALL_BASE_MS 1700000000000LL

#define LANE_LEASE_MS 1000
#define LANE_ATTEMPTS 3
#define LANE_BASE_MS 100
#define LANE_CAP_MS 5000

typedef struct {
    zl_jobs_event_t ev;
    uint64_t id;
    zl_job_state_t state;  // the job's state when the listener ran
    zl_job_state_t stored; // the state record's state then (0 = none)
    uint32_t n_history;    // stored attempts then
    zl_outcome_t last;     // outcome of the last stored attempt
} event_t;

typedef struct {
    char dir[PATH_MAX];
    zl_store_t *store;
    zl_arena_t *arena;       // s_state / s_record results
    zl_arena_t *check_arena; // the invariant checks
    zl_arena_t *ev_arena;    // the listener
    zl_state_rec_t st;
    zl_job_rec_t rec;
    bool per_step_commit; // commit the batch after every step (one turn per step)
    zl_broker_config_t cfg;
    zl_lanes_t *lanes;
    zl_sched_t *sched;
    zl_timers_t *timers;
    zl_rng_t rng;
    zl_jobs_t *jobs;
    zl_workers_t *workers;
    zl_lane_t *lane;
    zl_tenant_t *tenant, *tenant2;
    zl_flow_t *flow, *flow2;
    zl_worker_conn_t *w1, *w2;
    uint64_t ids[MAX_IDS];
    size_t n_ids;
    event_t events[MAX_EVENTS];
    size_t n_events;
    int64_t restart_t; // the restart's clock, for zl_jobs_restore
} fx_t;

static zl_now_t
at (int64_t ms)
{
    zl_now_t now;
    now.mono_ms = MONO_BASE_MS + ms;
    now.mono_us = (MONO_BASE_MS + ms) * 1000;
    now.wall_ms = WALL_BASE_MS + ms;
    return now;
}

static void
s_listener (void *ctx, zl_jobs_event_t ev, zl_job_t *job)
{
    fx_t *fx = ctx;
    // the job is still whole when the listener runs, and its records are in
    // the batch already (a dead-letter event shows the full history)
    assert_ptr_equal (zl_jobs_find (fx->jobs, job->id), job);
    if (ev == ZL_JOBS_EV_DEAD)
        assert_int_equal (job->state, ZL_JOB_DEAD);
    zl_arena_reset (fx->ev_arena);
    zl_job_rec_t rec;
    zl_state_rec_t st;
    assert_int_equal (zl_jobs_load (fx->jobs, job, fx->ev_arena, &rec, &st), ZL_STORE_OK);
    if (fx->n_events < MAX_EVENTS) // long runs keep only the first ones
        fx->events[fx->n_events] =
            (event_t){.ev = ev,
                      .id = job->id,
                      .state = job->state,
                      .stored = st.state,
                      .n_history = (uint32_t)st.n_history,
                      .last = st.n_history ? st.history[st.n_history - 1].outcome : 0};
    fx->n_events++;
}

static zl_peer_t
s_peer (const char *id)
{
    zl_peer_t peer;
    memset (&peer, 0, sizeof peer);
    peer.len = (uint8_t)strlen (id);
    memcpy (peer.data, id, peer.len);
    return peer;
}

static int
s_rm_entry (const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove (path);
}

static void
s_rm_tree (const char *dir)
{
    nftw (dir, s_rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

static void
s_mkdtemp (char *out, size_t size, const char *what)
{
    const char *tmp = getenv ("TMPDIR");
    snprintf (out, size, "%s/zlane-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", what);
    assert_non_null (mkdtemp (out));
}

static int
s_setup (void **state)
{
    zl_log_set_level (ZL_LOG_ERROR); // dead-letters and lapses log at INFO
    fx_t *fx = calloc (1, sizeof *fx);
    s_mkdtemp (fx->dir, sizeof fx->dir, "test-jobs");
    char err[512] = "";
    fx->store = zl_store_open (fx->dir, ZL_DURABILITY_NONE, MAP_SIZE, err, sizeof err);
    if (!fx->store)
        fail_msg ("zl_store_open %s: %s", fx->dir, err);
    assert_int_equal (zl_store_begin (fx->store), ZL_STORE_OK);
    fx->arena = zl_arena_new (16 * 1024);
    fx->check_arena = zl_arena_new (16 * 1024);
    fx->ev_arena = zl_arena_new (16 * 1024);
    fx->per_step_commit = true;
    zl_broker_config_defaults (&fx->cfg);
    zl_lane_config_t *lc = zl_broker_config_lane (&fx->cfg, "work");
    lc->lease_ms = LANE_LEASE_MS;
    lc->max_attempts = LANE_ATTEMPTS;
    lc->backoff_base_ms = LANE_BASE_MS;
    lc->backoff_cap_ms = LANE_CAP_MS;
    lc->jitter = true;
    lc->max_run_ms = 0;
    fx->lanes = zl_lanes_new (&fx->cfg);
    fx->sched = zl_sched_new (ZL_SCHED_WFQ);
    fx->timers = zl_timers_new ();
    zl_rng_seed (&fx->rng, 42);
    fx->jobs = zl_jobs_new (fx->sched, fx->timers, &fx->rng, fx->store);
    zl_jobs_set_listener (fx->jobs, s_listener, fx);
    fx->workers = zl_workers_new ();
    fx->lane = zl_lanes_lookup (fx->lanes, "work");
    assert_non_null (fx->lane);
    fx->tenant = zl_lanes_tenant (fx->lanes, "acme");
    fx->tenant2 = zl_lanes_tenant (fx->lanes, "globex");
    fx->flow = zl_sched_flow (fx->sched, fx->lane, fx->tenant);
    fx->flow2 = zl_sched_flow (fx->sched, fx->lane, fx->tenant2);
    zl_peer_t p1 = s_peer ("peer-one"), p2 = s_peer ("peer-two");
    fx->w1 = zl_workers_add (fx->workers, &p1, "w1", 0, NULL, &fx->lane, 1, 16, at (0).mono_ms);
    fx->w2 = zl_workers_add (fx->workers, &p2, "w2", 0, NULL, &fx->lane, 1, 16, at (0).mono_ms);
    *state = fx;
    return 0;
}

static int
s_teardown (void **state)
{
    fx_t *fx = *state;
    // destroying with jobs in every state must free everything (ASan checks)
    zl_jobs_destroy (&fx->jobs);
    assert_null (fx->jobs);
    zl_jobs_destroy (&fx->jobs); // NULL-safe
    zl_workers_destroy (&fx->workers);
    zl_timers_destroy (&fx->timers);
    zl_sched_destroy (&fx->sched);
    zl_lanes_destroy (&fx->lanes);
    zl_broker_config_free (&fx->cfg);
    zl_store_close (&fx->store); // aborts the open batch
    assert_null (fx->store);
    zl_store_close (&fx->store);
    zl_arena_destroy (&fx->arena);
    zl_arena_destroy (&fx->check_arena);
    zl_arena_destroy (&fx->ev_arena);
    s_rm_tree (fx->dir);
    free (fx);
    return 0;
}

// ---------------------------------------------------------------- store views
// The job's stored state, history included (valid until the next s_state).
static const zl_state_rec_t *
s_state (fx_t *fx, const zl_job_t *job)
{
    zl_arena_reset (fx->arena);
    assert_int_equal (zl_jobs_load (fx->jobs, job, fx->arena, NULL, &fx->st), ZL_STORE_OK);
    return &fx->st;
}

// The job's stored record (valid until the next s_state or s_record).
static const zl_job_rec_t *
s_record (fx_t *fx, const zl_job_t *job)
{
    zl_arena_reset (fx->arena);
    assert_int_equal (zl_jobs_load (fx->jobs, job, fx->arena, &fx->rec, NULL), ZL_STORE_OK);
    return &fx->rec;
}

// End the turn: commit the batch, start the next one.
static void
s_turn (fx_t *fx)
{
    assert_int_equal (zl_jobs_store_error (fx->jobs), ZL_STORE_OK);
    assert_int_equal (zl_store_commit (fx->store), ZL_STORE_OK);
    assert_false (zl_store_in_batch (fx->store));
    assert_int_equal (zl_store_begin (fx->store), ZL_STORE_OK);
    assert_true (zl_store_in_batch (fx->store));
}

// ---------------------------------------------------------------- invariants
// The store agrees with the job in memory; `job` NULL means `id` was deleted.
static void
s_check_store (fx_t *fx, uint64_t id, const zl_job_t *job)
{
    zl_arena_reset (fx->check_arena);
    zl_job_rec_t rec;
    zl_state_rec_t st;
    zl_store_rc_t jrc =
        zl_store_get_job (fx->store, id, ZL_PRIORITY_DEFAULT, fx->check_arena, &rec);
    zl_store_rc_t src = zl_store_get_state (fx->store, id, fx->check_arena, &st);
    if (!job) {
        if (jrc != ZL_STORE_NOT_FOUND || src != ZL_STORE_NOT_FOUND)
            fail_msg ("job %llu is gone from memory but not from the store (job %d, state %d)",
                      (unsigned long long)id, jrc, src);
        return;
    }
    assert_int_equal (jrc, ZL_STORE_OK);
    assert_string_equal (rec.tenant, job->flow->tenant->name);
    assert_string_equal (rec.lane, job->flow->lane->name);
    assert_int_equal (rec.lease_ms, job->lease_ms);
    assert_int_equal (rec.max_run_ms, job->max_run_ms);
    if (src == ZL_STORE_NOT_FOUND) {
        // never attempted, never delayed: ready in id order
        if (job->state != ZL_JOB_READY || job->attempt != 0 || job->seq != id || job->has_history)
            fail_msg ("job %llu (%s, attempt %u, seq %llu) has no state record",
                      (unsigned long long)id, zl_job_state_name (job->state), job->attempt,
                      (unsigned long long)job->seq);
        return;
    }
    assert_int_equal (src, ZL_STORE_OK);
    if (st.state != job->state)
        fail_msg ("job %llu: %s in memory, %s in the store", (unsigned long long)id,
                  zl_job_state_name (job->state), zl_job_state_name (st.state));
    assert_int_equal (st.attempt, job->attempt);
    // one history entry per finished attempt, and one per NOT_YET (which
    // spends none: it has the number of the attempt that comes again), and
    // an expiry of a job not running (no worker: the attempt that never came)
    uint32_t finished = job->attempt - (job->state == ZL_JOB_LEASED ? 1 : 0), spent = 0;
    size_t not_yet = 0;
#define S_UNSPENT(h)                                                                               \
    ((h).outcome == ZL_OUTCOME_NOT_YET || ((h).outcome == ZL_OUTCOME_EXPIRED && !(h).worker[0]))
    for (size_t i = 0; i < st.n_history; i++)
        not_yet += S_UNSPENT (st.history[i]);
    if (st.n_history - not_yet != finished)
        fail_msg ("job %llu (%s, attempt %u): %zu attempts in the stored history",
                  (unsigned long long)id, zl_job_state_name (job->state), job->attempt,
                  st.n_history - not_yet);
    assert_int_equal (job->has_history != 0, st.n_history > 0);
    for (size_t i = 0; i < st.n_history; i++) {
        assert_int_equal (st.history[i].attempt, spent + 1);
        spent += !S_UNSPENT (st.history[i]);
        assert_true (st.history[i].ended_at_ms >= st.history[i].started_at_ms);
        assert_true (st.history[i].outcome > ZL_OUTCOME_ACKED);
        assert_true (st.history[i].outcome < ZL_OUTCOME_COUNT);
    }
    switch (job->state) {
    case ZL_JOB_READY: assert_int_equal (st.ready_seq, job->seq); break;
    case ZL_JOB_DELAYED:
        // the stored due time is wall clock; both clocks moved together here
        assert_int_equal (st.due_at_ms - WALL_BASE_MS, job->due_ms - MONO_BASE_MS);
        break;
    case ZL_JOB_LEASED:
        assert_string_equal (st.leased_to, job->lease->worker->name);
        assert_int_equal (st.started_at_ms, job->lease->started_at_ms);
        break;
    case ZL_JOB_DEAD:
        assert_int_equal (st.dead_at_ms, job->dead_at_ms);
        assert_int_equal (st.ready_seq, job->seq); // its place in the DLQ
        break;
    case ZL_JOB_CANCELLED:
        assert_int_equal (st.cancelled_at_ms, job->cancelled_at_ms);
        assert_int_equal (st.cancelled_from, job->cancelled_from);
        assert_int_equal (st.ready_seq, job->seq); // its place in the retention order
        break;
    }
}

// Recount every gauge from the jobs themselves and compare; then the store.
static void
s_check_gauges (fx_t *fx)
{
    assert_int_equal (zl_jobs_store_error (fx->jobs), ZL_STORE_OK);
    size_t n_flows;
    zl_flow_t **flows = zl_sched_flows (fx->sched, &n_flows);
    uint64_t ready[8] = {0}, delayed[8] = {0}, in_flight[8] = {0}, dlq[8] = {0};
    assert_true (n_flows <= 8);
    size_t live = 0, timed = 0, dead = 0, cancelled = 0;
    uint32_t w1_held = 0, w2_held = 0;
    for (size_t i = 0; i < fx->n_ids; i++) {
        zl_job_t *job = zl_jobs_find (fx->jobs, fx->ids[i]);
        s_check_store (fx, fx->ids[i], job);
        if (!job)
            continue;
        live++;
        assert_int_equal (job->id, fx->ids[i]);
        size_t f = 0;
        while (f < n_flows && flows[f] != job->flow)
            f++;
        assert_true (f < n_flows);
        switch (job->state) {
        case ZL_JOB_READY:
            ready[f]++;
            assert_int_equal (job->timer_idx, NO_SLOT);
            assert_true (job->seq > 0 && job->seq < zl_jobs_next_id (fx->jobs));
            break;
        case ZL_JOB_DELAYED:
            delayed[f]++;
            timed++;
            assert_int_not_equal (job->timer_idx, NO_SLOT);
            break;
        case ZL_JOB_LEASED:
            in_flight[f]++;
            timed++;
            assert_int_not_equal (job->timer_idx, NO_SLOT);
            assert_non_null (job->lease);
            assert_int_not_equal (job->lease->token, 0);
            assert_non_null (job->lease->worker);
            assert_true (job->attempt >= 1);
            assert_true (job->attempt <= job->max_attempts);
            if (job->lease->worker == fx->w1)
                w1_held++;
            else if (job->lease->worker == fx->w2)
                w2_held++;
            break;
        case ZL_JOB_DEAD:
            dlq[f]++;
            dead++;
            assert_int_equal (job->timer_idx, NO_SLOT);
            assert_ptr_equal (zl_dlq_find (zl_jobs_dlq (fx->jobs), job->id), job);
            break;
        case ZL_JOB_CANCELLED: // inert: no queue, no timer, no lease, no depth
            cancelled++;
            assert_int_equal (job->timer_idx, NO_SLOT);
            assert_null (zl_dlq_find (zl_jobs_dlq (fx->jobs), job->id));
            assert_true (job->cancelled_from >= ZL_JOB_READY && job->cancelled_from <= ZL_JOB_DEAD);
            break;
        default: fail_msg ("job %llu in bad state %d", (unsigned long long)job->id, job->state);
        }
    }
    uint64_t lane_depth = 0, lane_in_flight = 0;
    uint64_t t_depth[2] = {0}, t_in_flight[2] = {0};
    for (size_t f = 0; f < n_flows; f++) {
        zl_flow_t *flow = flows[f];
        assert_int_equal (flow->ready, ready[f]);
        assert_int_equal (flow->delayed, delayed[f]);
        assert_int_equal (flow->in_flight, in_flight[f]);
        assert_int_equal (flow->dlq, dlq[f]);
        // the flow's FIFO holds exactly its READY jobs, in ready-sequence
        // order (the order recovery rebuilds from the store)
        uint64_t listed = 0, last_seq = 0;
        for (zl_job_t *j = flow->head; j; j = j->next) {
            assert_int_equal (j->state, ZL_JOB_READY);
            assert_ptr_equal (j->flow, flow);
            assert_true (j->seq > last_seq);
            last_seq = j->seq;
            listed++;
        }
        assert_int_equal (listed, ready[f]);
        // depth counts every live job that is not dead (ready, delayed, leased)
        lane_depth += ready[f] + delayed[f] + in_flight[f];
        lane_in_flight += in_flight[f];
        int t = flow->tenant == fx->tenant ? 0 : 1;
        t_depth[t] += ready[f] + delayed[f] + in_flight[f];
        t_in_flight[t] += in_flight[f];
    }
    assert_int_equal (fx->lane->depth, lane_depth);
    assert_int_equal (fx->lane->in_flight, lane_in_flight);
    assert_int_equal (fx->tenant->depth, t_depth[0]);
    assert_int_equal (fx->tenant->in_flight, t_in_flight[0]);
    assert_int_equal (fx->tenant2->depth, t_depth[1]);
    assert_int_equal (fx->tenant2->in_flight, t_in_flight[1]);
    assert_int_equal (fx->w1->in_flight, w1_held);
    assert_int_equal (fx->w2->in_flight, w2_held);
    zl_worker_conn_t *ws[2] = {fx->w1, fx->w2};
    uint32_t held[2] = {w1_held, w2_held};
    for (int k = 0; k < 2; k++) {
        uint32_t listed = 0;
        for (zl_job_t *j = ws[k]->jobs; j; j = j->lease->next) {
            assert_int_equal (j->state, ZL_JOB_LEASED);
            assert_ptr_equal (j->lease->worker, ws[k]);
            if (j->lease->next)
                assert_ptr_equal (j->lease->next->lease->prev, j);
            listed++;
        }
        assert_int_equal (listed, held[k]);
    }
    // the DLQ list links exactly the dead jobs
    size_t in_dlq = 0;
    zl_dlq_t *q = zl_jobs_dlq (fx->jobs);
    for (zl_job_t *j = zl_dlq_first (q); j; j = zl_dlq_next (q, j)) {
        assert_int_equal (j->state, ZL_JOB_DEAD);
        in_dlq++;
    }
    assert_int_equal (in_dlq, dead);
    assert_int_equal (zl_timers_size (fx->timers), timed);
    assert_int_equal (zl_dlq_depth (q), dead);
    assert_int_equal (zl_jobs_count (fx->jobs), live);
    assert_int_equal (zl_jobs_cancelled_kept (fx->jobs), cancelled);
    assert_int_equal (zl_sched_has_ready (fx->sched, fx->lane) != 0,
                      ready[0] + ready[1] + (n_flows > 2 ? ready[2] : 0) > 0);
}

// After a step: end the turn if the test commits per step, then recount.
static void
s_step (fx_t *fx)
{
    if (fx->per_step_commit)
        s_turn (fx);
    s_check_gauges (fx);
}

// ---------------------------------------------------------------- helpers
// Accept as the broker does: take an id, stage the record in a nested batch,
// commit it into the turn's batch, then make the job live.
static zl_job_t *
s_accept_full (fx_t *fx, zl_flow_t *flow, const zl_job_spec_t *spec, zl_now_t now)
{
    uint64_t id = zl_jobs_take_id (fx->jobs);
    assert_true (fx->n_ids < MAX_IDS);
    fx->ids[fx->n_ids++] = id;
    assert_int_equal (zl_store_sub_begin (fx->store), ZL_STORE_OK);
    assert_int_equal (zl_jobs_stage (fx->jobs, id, spec, &flow->lane->cfg, now), ZL_STORE_OK);
    assert_null (zl_jobs_find (fx->jobs, id)); // staging changes nothing in memory
    assert_int_equal (zl_store_sub_commit (fx->store), ZL_STORE_OK);
    zl_job_t *job = zl_jobs_accept (fx->jobs, id, spec, flow, now);
    assert_non_null (job);
    assert_int_equal (job->id, id);
    assert_ptr_equal (zl_jobs_find (fx->jobs, id), job);
    s_step (fx);
    return job;
}

static zl_job_t *
s_accept (fx_t *fx, uint32_t delay_ms, uint32_t max_attempts, zl_now_t now)
{
    zl_job_spec_t spec = {.seq = 1,
                          .tenant = "acme",
                          .lane = "work",
                          .payload = {(const uint8_t *)"hello", 5},
                          .idempotency_key = "",
                          .delay_ms = delay_ms,
                          .max_attempts = max_attempts};
    return s_accept_full (fx, fx->flow, &spec, now);
}

// Pop the lane's next job (it must be `expect` when given) and lease it.
static zl_job_t *
s_lease (fx_t *fx, zl_worker_conn_t *w, zl_job_t *expect, zl_now_t now)
{
    zl_job_t *job = zl_sched_pop (fx->sched, fx->lane, S_NO_LIMITS_NOW);
    assert_non_null (job);
    if (expect)
        assert_ptr_equal (job, expect);
    zl_jobs_lease (fx->jobs, job, w, now);
    s_step (fx);
    return job;
}

static zl_settle_rc_t
s_ack (fx_t *fx, zl_worker_conn_t *w, uint64_t id, uint64_t lease, uint64_t run_us, zl_now_t now)
{
    zl_ack_item_t ack = {.job_id = id, .lease = lease, .run_us = run_us};
    zl_settle_rc_t rc = zl_jobs_ack (fx->jobs, w, &ack, now);
    s_step (fx);
    return rc;
}

static zl_settle_rc_t
s_nack (fx_t *fx, zl_worker_conn_t *w, uint64_t id, uint64_t lease, zl_fail_class_t cls,
        const char *error, uint32_t retry_after_ms, zl_now_t now)
{
    zl_nack_item_t nack = {
        .job_id = id, .lease = lease, .cls = cls, .error = error, .retry_after_ms = retry_after_ms};
    zl_settle_rc_t rc = zl_jobs_nack (fx->jobs, w, &nack, now);
    s_step (fx);
    return rc;
}

static zl_settle_rc_t
s_extend (fx_t *fx, zl_worker_conn_t *w, uint64_t id, uint64_t lease, uint32_t lease_ms,
          zl_now_t now)
{
    zl_extend_item_t ext = {.job_id = id, .lease = lease, .lease_ms = lease_ms};
    zl_settle_rc_t rc = zl_jobs_extend (fx->jobs, w, &ext, now);
    s_step (fx);
    return rc;
}

static size_t
s_fire (fx_t *fx, zl_now_t now)
{
    size_t n = zl_jobs_fire_timers (fx->jobs, now);
    s_step (fx);
    return n;
}

// Bring a DELAYED job to READY by firing the timers at its due time.
static void
s_wait_ready (fx_t *fx, zl_job_t *job, int64_t *t_ms)
{
    if (job->state == ZL_JOB_READY)
        return;
    assert_int_equal (job->state, ZL_JOB_DELAYED);
    *t_ms = job->due_ms - MONO_BASE_MS;
    assert_true (s_fire (fx, at (*t_ms)) >= 1);
    assert_int_equal (job->state, ZL_JOB_READY);
}

// ---------------------------------------------------------------- accept
static void
test_accept_ready_copies_spec (void **state)
{
    fx_t *fx = *state;
    char payload[] = "payload\0bytes"; // binary: a NUL inside
    char key[] = "order-17";
    char hk[] = "trace", hv[] = "abc123";
    zl_header_t headers[1] = {{hk, hv}};
    zl_job_spec_t spec = {.seq = 9,
                          .tenant = "acme",
                          .lane = "work",
                          .payload = {(const uint8_t *)payload, sizeof payload - 1},
                          .idempotency_key = key,
                          .n_headers = 1,
                          .headers = headers};
    zl_job_t *job = s_accept_full (fx, fx->flow, &spec, at (0));
    // the spec's memory may go away: the store holds copies
    memset (payload, 'x', sizeof payload - 1);
    memset (key, 'x', sizeof key - 1);
    memset (hk, 'x', sizeof hk - 1);
    memset (hv, 'x', sizeof hv - 1);
    assert_int_equal (job->state, ZL_JOB_READY);
    assert_int_equal (job->attempt, 0);
    assert_int_equal (job->seq, job->id); // never attempted: ready in id order
    assert_int_equal (job->max_attempts, LANE_ATTEMPTS);
    assert_int_equal (job->lease_ms, LANE_LEASE_MS);
    assert_int_equal (job->max_run_ms, 0);
    const zl_job_rec_t *rec = s_record (fx, job);
    assert_string_equal (rec->tenant, "acme");
    assert_string_equal (rec->lane, "work");
    assert_int_equal (rec->enqueued_at_ms, at (0).wall_ms);
    assert_int_equal (rec->payload.len, 13);
    assert_memory_equal (rec->payload.data, "payload\0bytes", 13);
    assert_string_equal (rec->idempotency_key, "order-17");
    assert_int_equal (rec->n_headers, 1);
    assert_string_equal (rec->headers[0].key, "trace");
    assert_string_equal (rec->headers[0].value, "abc123");
    assert_int_equal (rec->max_attempts, LANE_ATTEMPTS);
    assert_int_equal (rec->lease_ms, LANE_LEASE_MS);
    assert_int_equal (s_state (fx, job)->n_history, 0);
    // the key is remembered for deduplication, with the job id and the time
    zl_idem_rec_t idem;
    assert_int_equal (zl_store_get_idem (fx->store, "acme", "order-17", &idem), ZL_STORE_OK);
    assert_int_equal (idem.job_id, job->id);
    assert_int_equal (idem.seen_at_ms, at (0).wall_ms);
    assert_int_equal (fx->flow->submitted, 1);
    assert_int_equal (fx->flow->ready, 1);
    assert_int_equal (fx->lane->depth, 1);
    assert_int_equal (fx->tenant->depth, 1);
    assert_int_equal (zl_timers_size (fx->timers), 0);
    assert_int_equal (zl_jobs_next_timer (fx->jobs), -1);

    // no key: none kept; per-job overrides beat the lane defaults
    zl_job_spec_t spec2 = {.tenant = "acme",
                           .lane = "work",
                           .idempotency_key = "",
                           .max_attempts = 7,
                           .lease_ms = 250,
                           .max_run_ms = 900};
    zl_job_t *j2 = s_accept_full (fx, fx->flow, &spec2, at (1));
    assert_true (j2->id > job->id);
    rec = s_record (fx, j2);
    assert_string_equal (rec->idempotency_key, "");
    assert_int_equal (rec->payload.len, 0);
    assert_int_equal (rec->n_headers, 0);
    assert_int_equal (rec->max_attempts, 7);
    assert_int_equal (rec->enqueued_at_ms, at (1).wall_ms);
    assert_int_equal (j2->max_attempts, 7);
    assert_int_equal (j2->lease_ms, 250);
    assert_int_equal (j2->max_run_ms, 900);
    assert_int_equal (zl_store_get_idem (fx->store, "acme", "", &idem), ZL_STORE_NOT_FOUND);
    assert_int_equal (fx->lane->depth, 2);
    assert_null (zl_jobs_find (fx->jobs, 99999));
    // FIFO: the first accepted is at the head
    assert_ptr_equal (fx->flow->head, job);
    assert_ptr_equal (fx->flow->q[ZL_PRIORITY_DEFAULT].tail, j2);
}

// Staging writes the store only; an aborted nested batch leaves nothing.
static void
test_stage_is_store_only_and_abortable (void **state)
{
    fx_t *fx = *state;
    zl_job_spec_t spec = {.tenant = "acme",
                          .lane = "work",
                          .payload = {(const uint8_t *)"p", 1},
                          .idempotency_key = "k-1",
                          .delay_ms = 300};
    uint64_t id = zl_jobs_take_id (fx->jobs);
    assert_int_equal (zl_jobs_next_id (fx->jobs), id + 1);
    assert_int_equal (zl_store_sub_begin (fx->store), ZL_STORE_OK);
    assert_int_equal (zl_jobs_stage (fx->jobs, id, &spec, &fx->lane->cfg, at (5)), ZL_STORE_OK);
    // in the store (reads inside the batch see it), not in memory
    zl_arena_reset (fx->arena);
    zl_job_rec_t rec;
    zl_state_rec_t st;
    assert_int_equal (zl_store_get_job (fx->store, id, ZL_PRIORITY_DEFAULT, fx->arena, &rec),
                      ZL_STORE_OK);
    assert_int_equal (zl_store_get_state (fx->store, id, fx->arena, &st), ZL_STORE_OK);
    assert_int_equal (st.state, ZL_JOB_DELAYED);
    assert_int_equal (st.due_at_ms, at (305).wall_ms);
    zl_idem_rec_t idem;
    assert_int_equal (zl_store_get_idem (fx->store, "acme", "k-1", &idem), ZL_STORE_OK);
    assert_null (zl_jobs_find (fx->jobs, id));
    assert_int_equal (zl_jobs_count (fx->jobs), 0);
    assert_int_equal (fx->lane->depth, 0);
    assert_int_equal (fx->flow->submitted, 0);
    assert_int_equal (zl_timers_size (fx->timers), 0);
    // the Submit is refused: its nested batch goes, nothing stays
    zl_store_sub_abort (fx->store);
    assert_true (zl_store_in_batch (fx->store));
    assert_int_equal (zl_store_get_job (fx->store, id, ZL_PRIORITY_DEFAULT, fx->arena, &rec),
                      ZL_STORE_NOT_FOUND);
    assert_int_equal (zl_store_get_state (fx->store, id, fx->arena, &st), ZL_STORE_NOT_FOUND);
    assert_int_equal (zl_store_get_idem (fx->store, "acme", "k-1", &idem), ZL_STORE_NOT_FOUND);
    s_step (fx);
    // the id is not reused: the next job gets a new one
    zl_job_t *job = s_accept (fx, 0, 0, at (10));
    assert_true (job->id > id);
}

static void
test_accept_delayed_ready_at_due (void **state)
{
    fx_t *fx = *state;
    zl_job_t *job = s_accept (fx, 500, 0, at (10));
    assert_int_equal (job->state, ZL_JOB_DELAYED);
    assert_int_equal (job->due_ms, at (510).mono_ms);
    assert_int_equal (fx->flow->delayed, 1);
    assert_int_equal (fx->flow->ready, 0);
    assert_int_equal (fx->lane->depth, 1);
    assert_int_equal (fx->tenant->depth, 1);
    assert_false (zl_sched_has_ready (fx->sched, fx->lane));
    assert_null (zl_sched_pop (fx->sched, fx->lane, S_NO_LIMITS_NOW));
    assert_int_equal (zl_jobs_next_timer (fx->jobs), at (510).mono_ms);
    // stored as delayed until a wall-clock due time (what recovery uses)
    zl_arena_reset (fx->arena);
    zl_state_rec_t st;
    assert_int_equal (zl_store_get_state (fx->store, job->id, fx->arena, &st), ZL_STORE_OK);
    assert_int_equal (st.state, ZL_JOB_DELAYED);
    assert_int_equal (st.due_at_ms, at (510).wall_ms);

    assert_int_equal (s_fire (fx, at (10)), 0);
    assert_int_equal (s_fire (fx, at (509)), 0);
    assert_int_equal (job->state, ZL_JOB_DELAYED);
    uint64_t next = zl_jobs_next_id (fx->jobs);
    assert_int_equal (s_fire (fx, at (510)), 1);
    assert_int_equal (job->state, ZL_JOB_READY);
    assert_int_equal (job->attempt, 0);
    // ready now, ordered after everything that became ready before it
    assert_int_equal (job->seq, next);
    assert_int_equal (zl_jobs_next_id (fx->jobs), next + 1);
    assert_int_equal (zl_store_get_state (fx->store, job->id, fx->arena, &st), ZL_STORE_OK);
    assert_int_equal (st.state, ZL_JOB_READY);
    assert_int_equal (st.ready_seq, next);
    assert_int_equal (fx->flow->delayed, 0);
    assert_int_equal (fx->flow->ready, 1);
    assert_int_equal (fx->lane->depth, 1);
    assert_int_equal (zl_jobs_next_timer (fx->jobs), -1);
    assert_true (zl_sched_has_ready (fx->sched, fx->lane));

    // firing late (well past due) also makes it ready, once
    zl_job_t *late = s_accept (fx, 100, 0, at (1000));
    assert_int_equal (s_fire (fx, at (99999)), 1);
    assert_int_equal (late->state, ZL_JOB_READY);
    assert_int_equal (s_fire (fx, at (99999)), 0);
}

// ---------------------------------------------------------------- lease and ack
static void
test_lease_then_ack (void **state)
{
    fx_t *fx = *state;
    zl_job_t *job = s_accept (fx, 0, 0, at (0));
    uint64_t id = job->id;
    zl_job_t *leased = s_lease (fx, fx->w1, job, at (20));
    assert_int_equal (leased->state, ZL_JOB_LEASED);
    assert_int_equal (leased->attempt, 1);
    assert_non_null (leased->lease);
    uint64_t token = leased->lease->token;
    assert_int_not_equal (token, 0);
    assert_ptr_equal (leased->lease->worker, fx->w1);
    assert_ptr_equal (fx->w1->jobs, leased);
    assert_int_equal (leased->lease->lease_deadline_ms, at (20 + LANE_LEASE_MS).mono_ms);
    assert_int_equal (leased->due_ms, at (20 + LANE_LEASE_MS).mono_ms);
    assert_int_equal (leased->lease->run_deadline_ms, 0);
    assert_int_equal (leased->lease->started_at_ms, at (20).wall_ms);
    assert_int_equal (zl_jobs_next_timer (fx->jobs), at (20 + LANE_LEASE_MS).mono_ms);
    assert_int_equal (fx->flow->in_flight, 1);
    assert_int_equal (fx->lane->in_flight, 1);
    assert_int_equal (fx->tenant->in_flight, 1);
    assert_int_equal (fx->w1->in_flight, 1);
    assert_int_equal (fx->flow->ready, 0);
    assert_int_equal (zl_hist_quantile (zl_jobs_latency (fx->jobs, 0), 1.0) > 0, 1);
    // the store knows who holds it since when (recovery counts the attempt)
    const zl_state_rec_t *st = s_state (fx, job);
    assert_int_equal (st->state, ZL_JOB_LEASED);
    assert_int_equal (st->attempt, 1);
    assert_string_equal (st->leased_to, "w1");
    assert_int_equal (st->started_at_ms, at (20).wall_ms);
    assert_int_equal (st->n_history, 0);

    // ack with the right token: the job is gone and the worker slot is free
    assert_int_equal (s_ack (fx, fx->w1, id, token, 3000, at (30)), ZL_SETTLE_OK);
    assert_null (zl_jobs_find (fx->jobs, id));
    assert_int_equal (zl_jobs_count (fx->jobs), 0);
    assert_int_equal (fx->w1->in_flight, 0);
    assert_null (fx->w1->jobs);
    assert_int_equal (fx->flow->in_flight, 0);
    assert_int_equal (fx->lane->in_flight, 0);
    assert_int_equal (fx->tenant->in_flight, 0);
    assert_int_equal (fx->lane->depth, 0);
    assert_int_equal (fx->tenant->depth, 0);
    assert_int_equal (fx->flow->acked, 1);
    assert_int_equal (zl_timers_size (fx->timers), 0);
    assert_int_equal (zl_jobs_latency (fx->jobs, 1)->count, 1);
    // reported run time (3 ms) is within what the broker saw (10 ms): charged
    assert_int_equal (fx->flow->run_us, 3000);
    assert_int_equal (fx->n_events, 1);
    assert_int_equal (fx->events[0].ev, ZL_JOBS_EV_ACKED);
    assert_int_equal (fx->events[0].id, id);
    assert_int_equal (fx->events[0].stored, ZL_JOB_LEASED); // told before the delete
    // deleted from the store, record and state
    zl_arena_reset (fx->arena);
    zl_job_rec_t rec;
    zl_state_rec_t gone;
    assert_int_equal (zl_store_get_job (fx->store, id, ZL_PRIORITY_DEFAULT, fx->arena, &rec),
                      ZL_STORE_NOT_FOUND);
    assert_int_equal (zl_store_get_state (fx->store, id, fx->arena, &gone), ZL_STORE_NOT_FOUND);
    // the same ack again: the job is unknown now
    assert_int_equal (s_ack (fx, fx->w1, id, token, 0, at (31)), ZL_SETTLE_UNKNOWN_JOB);
    // firing after the old deadline finds nothing
    assert_int_equal (s_fire (fx, at (5000)), 0);
}

static void
test_ack_run_time_is_bounded_by_what_broker_saw (void **state)
{
    fx_t *fx = *state;
    zl_job_t *a = s_accept (fx, 0, 0, at (0));
    zl_job_t *b = s_accept (fx, 0, 0, at (0));
    s_lease (fx, fx->w1, a, at (0));
    s_lease (fx, fx->w1, b, at (0));
    // claims 1 s but only 40 ms passed: charged 40 ms
    assert_int_equal (s_ack (fx, fx->w1, a->id, a->lease->token, 1000000, at (40)), ZL_SETTLE_OK);
    assert_int_equal (fx->flow->run_us, 40000);
    // reports nothing: charged what the broker saw
    assert_int_equal (s_ack (fx, fx->w1, b->id, b->lease->token, 0, at (50)), ZL_SETTLE_OK);
    assert_int_equal (fx->flow->run_us, 90000);
}

static void
test_stale_and_unknown_tokens_change_nothing (void **state)
{
    fx_t *fx = *state;
    zl_job_t *job = s_accept (fx, 0, 0, at (0));
    uint64_t id = job->id;

    // a READY job has no lease: any token is stale
    assert_int_equal (s_ack (fx, fx->w1, id, 0, 0, at (1)), ZL_SETTLE_STALE_LEASE);
    assert_int_equal (s_ack (fx, fx->w1, id, 12345, 0, at (1)), ZL_SETTLE_STALE_LEASE);
    assert_int_equal (job->state, ZL_JOB_READY);

    s_lease (fx, fx->w1, job, at (10));
    uint64_t token = job->lease->token;
    int64_t due = job->due_ms;
    for (int k = 0; k < 2; k++) {
        uint64_t bad = k == 0 ? token + 1 : token - 1;
        assert_int_equal (s_ack (fx, fx->w1, id, bad, 0, at (20)), ZL_SETTLE_STALE_LEASE);
        assert_int_equal (s_nack (fx, fx->w1, id, bad, ZL_FAIL_PERMANENT, "x", 0, at (20)),
                          ZL_SETTLE_STALE_LEASE);
        assert_int_equal (s_extend (fx, fx->w1, id, bad, 60000, at (20)), ZL_SETTLE_STALE_LEASE);
    }
    assert_int_equal (s_ack (fx, fx->w1, id + 1000, token, 0, at (20)), ZL_SETTLE_UNKNOWN_JOB);
    assert_int_equal (s_nack (fx, fx->w1, id + 1000, token, ZL_FAIL_TRANSIENT, "x", 0, at (20)),
                      ZL_SETTLE_UNKNOWN_JOB);
    assert_int_equal (s_extend (fx, fx->w1, id + 1000, token, 60000, at (20)),
                      ZL_SETTLE_UNKNOWN_JOB);
    // unchanged
    assert_int_equal (job->state, ZL_JOB_LEASED);
    assert_int_equal (job->lease->token, token);
    assert_int_equal (job->due_ms, due);
    assert_int_equal (job->attempt, 1);
    assert_int_equal (s_state (fx, job)->n_history, 0);
    assert_int_equal (s_state (fx, job)->state, ZL_JOB_LEASED);
    assert_ptr_equal (job->lease->worker, fx->w1);
    assert_int_equal (fx->flow->acked, 0);
    assert_int_equal (fx->flow->nacked_permanent, 0);
    assert_int_equal (fx->flow->nacked_transient, 0);
    assert_int_equal (fx->flow->run_us, 0);
    assert_int_equal (fx->n_events, 0);
    // and the real token still works
    assert_int_equal (s_ack (fx, fx->w1, id, token, 0, at (30)), ZL_SETTLE_OK);
}

// ---------------------------------------------------------------- lease lapse
static void
test_lapsed_lease_requeues_and_fences_old_token (void **state)
{
    fx_t *fx = *state;
    zl_job_t *job = s_accept (fx, 0, 0, at (0));
    uint64_t id = job->id;
    s_lease (fx, fx->w1, job, at (100));
    uint64_t old = job->lease->token;

    assert_int_equal (s_fire (fx, at (100 + LANE_LEASE_MS - 1)), 0);
    assert_int_equal (job->state, ZL_JOB_LEASED);
    assert_int_equal (s_fire (fx, at (100 + LANE_LEASE_MS)), 1);
    assert_int_equal (job->state, ZL_JOB_READY);
    assert_int_equal (job->attempt, 1); // the lapsed attempt counts
    assert_int_equal (fx->w1->in_flight, 0);
    assert_null (fx->w1->jobs);
    assert_int_equal (fx->flow->lease_expired, 1);
    const zl_state_rec_t *st = s_state (fx, job);
    assert_int_equal (st->n_history, 1);
    const zl_attempt_t *h = &st->history[0];
    assert_int_equal (h->attempt, 1);
    assert_int_equal (h->outcome, ZL_OUTCOME_LEASE_EXPIRED);
    assert_string_equal (h->worker, "w1");
    assert_int_equal (h->started_at_ms, at (100).wall_ms);
    assert_int_equal (h->ended_at_ms, at (100 + LANE_LEASE_MS).wall_ms);
    assert_non_null (strstr (h->error, "lease"));
    assert_string_equal (st->leased_to, "");
    // the worker time the lapsed attempt held counts against the tenant's share
    assert_int_equal (fx->flow->run_us, (uint64_t)LANE_LEASE_MS * 1000);

    // the old holder's token is refused, before and after the next lease
    assert_int_equal (s_ack (fx, fx->w1, id, old, 0, at (1200)), ZL_SETTLE_STALE_LEASE);
    s_lease (fx, fx->w2, job, at (1300));
    assert_int_equal (job->attempt, 2);
    assert_int_not_equal (job->lease->token, old);
    uint64_t cur = job->lease->token;
    assert_int_equal (s_ack (fx, fx->w1, id, old, 0, at (1400)), ZL_SETTLE_STALE_LEASE);
    assert_int_equal (s_nack (fx, fx->w1, id, old, ZL_FAIL_PERMANENT, "late", 0, at (1400)),
                      ZL_SETTLE_STALE_LEASE);
    assert_int_equal (s_extend (fx, fx->w1, id, old, 5000, at (1400)), ZL_SETTLE_STALE_LEASE);
    assert_int_equal (job->state, ZL_JOB_LEASED);
    assert_ptr_equal (job->lease->worker, fx->w2);
    assert_int_equal (job->lease->token, cur);
    // the history of the first attempt survived the second lease
    st = s_state (fx, job);
    assert_int_equal (st->n_history, 1);
    assert_int_equal (st->history[0].outcome, ZL_OUTCOME_LEASE_EXPIRED);
    assert_string_equal (st->leased_to, "w2");
    assert_int_equal (s_ack (fx, fx->w2, id, cur, 0, at (1500)), ZL_SETTLE_OK);
    assert_null (zl_jobs_find (fx->jobs, id));
}

static void
test_lapses_use_up_attempts (void **state)
{
    fx_t *fx = *state;
    zl_job_t *job = s_accept (fx, 0, 2, at (0));
    uint64_t id = job->id;
    s_lease (fx, fx->w1, job, at (0));
    assert_int_equal (s_fire (fx, at (LANE_LEASE_MS)), 1);
    assert_int_equal (job->state, ZL_JOB_READY);
    s_lease (fx, fx->w2, job, at (2000));
    assert_int_equal (s_fire (fx, at (2000 + LANE_LEASE_MS)), 1);
    assert_int_equal (job->state, ZL_JOB_DEAD);
    assert_int_equal (job->attempt, 2);
    assert_int_equal (job->dead_at_ms, at (2000 + LANE_LEASE_MS).wall_ms);
    const zl_state_rec_t *st = s_state (fx, job);
    assert_int_equal (st->state, ZL_JOB_DEAD);
    assert_int_equal (st->n_history, 2);
    assert_int_equal (st->history[0].outcome, ZL_OUTCOME_LEASE_EXPIRED);
    assert_int_equal (st->history[1].outcome, ZL_OUTCOME_LEASE_EXPIRED);
    assert_string_equal (st->history[0].worker, "w1");
    assert_string_equal (st->history[1].worker, "w2");
    assert_int_equal (fx->n_events, 1);
    assert_int_equal (fx->events[0].ev, ZL_JOBS_EV_DEAD);
    assert_int_equal (fx->events[0].id, id);
    assert_int_equal (fx->events[0].stored, ZL_JOB_DEAD);
    assert_int_equal (fx->events[0].n_history, 2);
    assert_int_equal (fx->flow->dlq, 1);
}

// ---------------------------------------------------------------- extend, max run
static void
test_extend_moves_deadline (void **state)
{
    fx_t *fx = *state;
    zl_job_t *job = s_accept (fx, 0, 0, at (0));
    s_lease (fx, fx->w1, job, at (0));
    uint64_t token = job->lease->token;
    assert_int_equal (s_extend (fx, fx->w1, job->id, token, 1500, at (800)), ZL_SETTLE_OK);
    assert_int_equal (job->lease->lease_deadline_ms, at (2300).mono_ms);
    assert_int_equal (job->due_ms, at (2300).mono_ms);
    assert_int_equal (zl_jobs_next_timer (fx->jobs), at (2300).mono_ms);
    // the old deadline passes without effect
    assert_int_equal (s_fire (fx, at (LANE_LEASE_MS)), 0);
    assert_int_equal (s_fire (fx, at (2299)), 0);
    assert_int_equal (job->state, ZL_JOB_LEASED);
    assert_int_equal (job->lease->token, token);
    // the job's own lease again; a shorter lease moves it earlier (lease_ms 0 is
    // refused by the broker before it gets here)
    assert_int_equal (s_extend (fx, fx->w1, job->id, token, LANE_LEASE_MS, at (2000)),
                      ZL_SETTLE_OK);
    assert_int_equal (job->due_ms, at (2000 + LANE_LEASE_MS).mono_ms);
    assert_int_equal (s_extend (fx, fx->w1, job->id, token, 10, at (2100)), ZL_SETTLE_OK);
    assert_int_equal (job->due_ms, at (2110).mono_ms);
    assert_int_equal (s_fire (fx, at (2109)), 0);
    assert_int_equal (s_fire (fx, at (2110)), 1);
    assert_int_equal (job->state, ZL_JOB_READY);
    const zl_state_rec_t *st = s_state (fx, job);
    assert_int_equal (st->n_history, 1);
    assert_int_equal (st->history[0].outcome, ZL_OUTCOME_LEASE_EXPIRED);
    assert_int_equal (st->history[0].ended_at_ms, at (2110).wall_ms);
}

static void
test_max_run_bounds_extensions (void **state)
{
    fx_t *fx = *state;
    zl_job_spec_t spec = {
        .tenant = "acme", .lane = "work", .idempotency_key = "", .max_run_ms = 2500};
    zl_job_t *job = s_accept_full (fx, fx->flow, &spec, at (0));
    s_lease (fx, fx->w1, job, at (0));
    uint64_t token = job->lease->token;
    assert_int_equal (job->lease->run_deadline_ms, at (2500).mono_ms);
    assert_int_equal (job->due_ms, at (LANE_LEASE_MS).mono_ms);
    assert_int_equal (s_extend (fx, fx->w1, job->id, token, 1000, at (900)), ZL_SETTLE_OK);
    assert_int_equal (job->due_ms, at (1900).mono_ms);
    // an extension past the run deadline is cut to it, and says so
    assert_int_equal (s_extend (fx, fx->w1, job->id, token, 1000, at (1800)), ZL_SETTLE_MAX_RUN);
    assert_int_equal (job->due_ms, at (2500).mono_ms);
    assert_int_equal (s_fire (fx, at (2499)), 0);
    assert_int_equal (job->state, ZL_JOB_LEASED);
    // at the run deadline, an extension says so again and changes nothing
    assert_int_equal (s_extend (fx, fx->w1, job->id, token, 1000, at (2500)), ZL_SETTLE_MAX_RUN);
    assert_int_equal (s_extend (fx, fx->w1, job->id, token, 1000, at (2600)), ZL_SETTLE_MAX_RUN);
    assert_int_equal (job->state, ZL_JOB_LEASED);
    assert_int_equal (job->due_ms, at (2500).mono_ms);
    assert_int_equal (job->lease->token, token);
    // the run deadline fires: outcome MAX_RUN, retried at once
    assert_int_equal (s_fire (fx, at (2500)), 1);
    assert_int_equal (job->state, ZL_JOB_READY);
    const zl_state_rec_t *st = s_state (fx, job);
    assert_int_equal (st->n_history, 1);
    assert_int_equal (st->history[0].outcome, ZL_OUTCOME_MAX_RUN);
    assert_non_null (strstr (st->history[0].error, "max run"));
    // the old token is now simply stale
    assert_int_equal (s_extend (fx, fx->w1, job->id, token, 1000, at (2600)),
                      ZL_SETTLE_STALE_LEASE);
    // the next attempt gets a fresh run budget
    s_lease (fx, fx->w2, job, at (3000));
    assert_int_equal (job->lease->run_deadline_ms, at (5500).mono_ms);

    // a max run shorter than the lease sets the first deadline
    zl_job_spec_t spec2 = {
        .tenant = "acme", .lane = "work", .idempotency_key = "", .max_run_ms = 300};
    zl_job_t *short_run = s_accept_full (fx, fx->flow, &spec2, at (3000));
    s_lease (fx, fx->w1, short_run, at (3000));
    assert_int_equal (short_run->due_ms, at (3300).mono_ms);
    assert_int_equal (s_fire (fx, at (3300)), 1);
    assert_int_equal (s_state (fx, short_run)->history[0].outcome, ZL_OUTCOME_MAX_RUN);
}

// ---------------------------------------------------------------- nack
static uint64_t
s_bound (uint32_t attempt)
{
    uint64_t b = (uint64_t)LANE_BASE_MS << attempt;
    return b < LANE_CAP_MS ? b : LANE_CAP_MS;
}

static void
test_nack_transient_backs_off_with_jitter (void **state)
{
    fx_t *fx = *state;
    enum { N = 200 };
    zl_job_t *jobs[N];
    for (int i = 0; i < N; i++)
        jobs[i] = s_accept (fx, 0, 10, at (0));
    // attempt 1 and then attempt 2, every job
    for (uint32_t attempt = 1; attempt <= 2; attempt++) {
        int64_t t = 10000 * attempt;
        // retries come back in due order, not in submission order
        for (int i = 0; i < N; i++)
            jobs[i] = s_lease (fx, fx->w1, NULL, at (t));
        int64_t delays[N];
        int distinct = 0;
        for (int i = 0; i < N; i++) {
            assert_int_equal (s_nack (fx, fx->w1, jobs[i]->id, jobs[i]->lease->token,
                                      ZL_FAIL_TRANSIENT, "boom", 0, at (t + 5)),
                              ZL_SETTLE_OK);
            zl_job_t *j = jobs[i];
            assert_int_equal (j->attempt, attempt);
            const zl_state_rec_t *st = s_state (fx, j);
            assert_int_equal (st->n_history, attempt);
            assert_int_equal (st->history[attempt - 1].outcome, ZL_OUTCOME_TRANSIENT);
            assert_string_equal (st->history[attempt - 1].error, "boom");
            if (j->state == ZL_JOB_READY)
                delays[i] = 0; // a zero backoff is a valid draw
            else {
                assert_int_equal (j->state, ZL_JOB_DELAYED);
                delays[i] = j->due_ms - at (t + 5).mono_ms;
                assert_int_equal (st->due_at_ms, at (t + 5).wall_ms + delays[i]);
            }
            assert_true (delays[i] >= 0);
            assert_true ((uint64_t)delays[i] <= s_bound (attempt));
            if (i > 0 && delays[i] != delays[0])
                distinct++;
        }
        assert_true (distinct > 0); // jittered, not one fixed delay
        assert_int_equal (fx->flow->nacked_transient, attempt * N);
        // nothing is ready early; everything is ready at the bound
        for (int i = 0; i < N; i++)
            if (jobs[i]->state == ZL_JOB_DELAYED)
                assert_true (jobs[i]->due_ms > at (t + 5).mono_ms);
        s_fire (fx, at (t + 5 + (int64_t)s_bound (attempt)));
        for (int i = 0; i < N; i++)
            assert_int_equal (jobs[i]->state, ZL_JOB_READY);
    }
}

static void
test_nack_transient_without_jitter_waits_the_bound (void **state)
{
    fx_t *fx = *state;
    fx->lane->cfg.jitter = false;
    zl_job_t *job = s_accept (fx, 0, 10, at (0));
    int64_t t = 0;
    for (uint32_t attempt = 1; attempt <= 8; attempt++) {
        s_lease (fx, fx->w1, job, at (t));
        assert_int_equal (
            s_nack (fx, fx->w1, job->id, job->lease->token, ZL_FAIL_TRANSIENT, "e", 0, at (t + 1)),
            ZL_SETTLE_OK);
        assert_int_equal (job->state, ZL_JOB_DELAYED);
        assert_int_equal (job->due_ms, at (t + 1).mono_ms + (int64_t)s_bound (attempt));
        assert_int_equal (s_fire (fx, at (t + 1 + (int64_t)s_bound (attempt) - 1)), 0);
        s_wait_ready (fx, job, &t);
    }
    assert_int_equal (s_state (fx, job)->n_history, 8);
}

static void
test_nack_throttled_honours_retry_after (void **state)
{
    fx_t *fx = *state;
    zl_job_t *job = s_accept (fx, 0, 0, at (0));
    s_lease (fx, fx->w1, job, at (0));
    assert_int_equal (s_nack (fx, fx->w1, job->id, job->lease->token, ZL_FAIL_THROTTLED,
                              "slow down", 7500, at (10)),
                      ZL_SETTLE_OK);
    assert_int_equal (job->state, ZL_JOB_DELAYED);
    assert_int_equal (job->due_ms, at (7510).mono_ms);
    assert_int_equal (fx->flow->nacked_throttled, 1);
    const zl_state_rec_t *st = s_state (fx, job);
    assert_int_equal (st->history[0].outcome, ZL_OUTCOME_THROTTLED);
    assert_string_equal (st->history[0].error, "slow down");
    assert_int_equal (st->due_at_ms, at (7510).wall_ms);
    assert_int_equal (s_fire (fx, at (7509)), 0);
    assert_int_equal (job->state, ZL_JOB_DELAYED);
    assert_null (zl_sched_pop (fx->sched, fx->lane, S_NO_LIMITS_NOW));
    assert_int_equal (s_fire (fx, at (7510)), 1);
    assert_int_equal (job->state, ZL_JOB_READY);

    // without a retry-after, a throttled nack backs off like a transient one
    s_lease (fx, fx->w1, job, at (8000));
    assert_int_equal (
        s_nack (fx, fx->w1, job->id, job->lease->token, ZL_FAIL_THROTTLED, "slow", 0, at (8000)),
        ZL_SETTLE_OK);
    if (job->state == ZL_JOB_DELAYED)
        assert_true ((uint64_t)(job->due_ms - at (8000).mono_ms) <= s_bound (2));
    else
        assert_int_equal (job->state, ZL_JOB_READY);
    assert_int_equal (s_state (fx, job)->n_history, 2);
}

static void s_restart (fx_t *fx, int64_t t);

// NOT_YET: ready again after the delay it gives (1 s without one), no
// attempt spent (the next lease has the same number; the history records
// each), and dead-lettered once the job had more than its lane's
// max_not_yet; the count lives in the stored history, so a restart keeps
// it. A transient failure after them still has its attempts.
static void
test_nack_not_yet_spends_no_attempt (void **state)
{
    fx_t *fx = *state;
    zl_broker_config_lane (&fx->cfg, "work")->max_not_yet = 3;
    fx->lane->cfg.max_not_yet = 3;
    zl_job_t *job = s_accept (fx, 0, 0, at (0));
    uint64_t id = job->id;
    int64_t t = 0;
    for (uint32_t k = 1; k <= 3; k++) {
        s_lease (fx, fx->w1, job, at (t));
        assert_int_equal (job->attempt, 1);
        uint32_t delay = k == 2 ? 0 : 2000;
        assert_int_equal (s_nack (fx, fx->w1, id, job->lease->token, ZL_FAIL_NOT_YET,
                                  "row not there", delay, at (t + 10)),
                          ZL_SETTLE_OK);
        assert_int_equal (job->state, ZL_JOB_DELAYED);
        assert_int_equal (job->attempt, 0);
        assert_int_equal (job->due_ms,
                          at (t + 10 + (delay ? delay : ZL_NOT_YET_DEFAULT_MS)).mono_ms);
        const zl_state_rec_t *st = s_state (fx, job);
        assert_int_equal (st->n_history, k);
        assert_int_equal (st->history[k - 1].outcome, ZL_OUTCOME_NOT_YET);
        assert_int_equal (st->history[k - 1].attempt, 1);
        assert_int_equal (st->attempt, 0);
        s_wait_ready (fx, job, &t);
        if (k == 2) { // the count survives a restart
            s_restart (fx, t);
            job = zl_jobs_find (fx->jobs, id);
            assert_non_null (job);
        }
    }
    zl_jobs_graph_stats_t gs;
    zl_jobs_graph_stats (fx->jobs, &gs);
    assert_int_equal (gs.not_yet, 1); // (counted since the restart)
    // a transient failure now: attempt 1 of LANE_ATTEMPTS, retried
    s_lease (fx, fx->w1, job, at (t));
    assert_int_equal (
        s_nack (fx, fx->w1, id, job->lease->token, ZL_FAIL_TRANSIENT, "flaky", 0, at (t + 10)),
        ZL_SETTLE_OK);
    assert_int_not_equal (job->state, ZL_JOB_DEAD);
    assert_int_equal (job->attempt, 1);
    s_wait_ready (fx, job, &t);
    // the fourth NOT_YET passes max_not_yet (3): dead-lettered, saying why
    s_lease (fx, fx->w1, job, at (t));
    assert_int_equal (
        s_nack (fx, fx->w1, id, job->lease->token, ZL_FAIL_NOT_YET, "still not", 500, at (t + 10)),
        ZL_SETTLE_OK);
    assert_int_equal (job->state, ZL_JOB_DEAD);
    const zl_state_rec_t *st = s_state (fx, job);
    assert_int_equal (st->history[st->n_history - 1].outcome, ZL_OUTCOME_NOT_YET);
    assert_non_null (strstr (st->history[st->n_history - 1].error,
                             "not_yet 4 times, past the lane's max_not_yet (3): still not"));
    zl_jobs_graph_stats (fx->jobs, &gs);
    assert_int_equal (gs.not_yet_exhausted, 1);
}

// Deadlines: a job past its deadline is dead-lettered EXPIRED whatever it
// is doing: ready (never dispatched), delayed (its timer dropped), leased
// (its attempt ends, the listener told first to stop the worker, a late ack
// refused); max_age counts from acceptance, the lane's max_age too, the
// earliest wins; one acked in time leaves nothing behind; a restart keeps
// the deadline, and so does a redrive.
static void
test_deadline_expires_in_every_state (void **state)
{
    fx_t *fx = *state;
    zl_job_spec_t spec = {.tenant = "acme",
                          .lane = "work",
                          .payload = {(const uint8_t *)"p", 1},
                          .idempotency_key = "",
                          .max_age_ms = 1000};
    zl_job_t *ready = s_accept_full (fx, fx->flow, &spec, at (0));
    spec.max_age_ms = 0;
    spec.deadline_ms = (uint64_t)at (1500).wall_ms;
    spec.delay_ms = 5000;
    zl_job_t *delayed = s_accept_full (fx, fx->flow, &spec, at (0));
    spec.delay_ms = 0;
    spec.deadline_ms = (uint64_t)at (2000).wall_ms;
    spec.max_age_ms = 1800; // earlier: 1800
    zl_job_t *leased = s_accept_full (fx, fx->flow, &spec, at (0));
    spec.deadline_ms = 0;
    spec.max_age_ms = 0;
    zl_job_t *plain = s_accept_full (fx, fx->flow, &spec, at (0));
    spec.max_age_ms = 500;
    zl_job_t *in_time = s_accept_full (fx, fx->flow, &spec, at (0));
    uint64_t ids[] = {ready->id, delayed->id, leased->id, plain->id, in_time->id};
    assert_int_equal (zl_jobs_next_deadline (fx->jobs), at (500).wall_ms);
    // `leased` and `in_time` run; in_time is acked at once
    zl_sched_remove (fx->sched, leased);
    zl_jobs_lease (fx->jobs, leased, fx->w1, at (10));
    s_step (fx);
    zl_sched_remove (fx->sched, in_time);
    zl_jobs_lease (fx->jobs, in_time, fx->w2, at (10));
    s_step (fx);
    assert_int_equal (s_ack (fx, fx->w2, ids[4], in_time->lease->token, 100, at (20)),
                      ZL_SETTLE_OK);
    assert_int_equal (zl_jobs_expire_deadlines (fx->jobs, at (999), 100), 0);
    s_step (fx);
    s_restart (fx, 999); // deadlines come back from the records
    assert_int_equal (zl_jobs_expire_deadlines (fx->jobs, at (1000), 100), 1);
    s_step (fx);
    zl_job_t *j = zl_jobs_find (fx->jobs, ids[0]);
    assert_int_equal (j->state, ZL_JOB_DEAD);
    const zl_state_rec_t *st = s_state (fx, j);
    assert_int_equal (st->history[st->n_history - 1].outcome, ZL_OUTCOME_EXPIRED);
    assert_non_null (strstr (st->history[st->n_history - 1].error, "expired"));
    // redriven, it keeps its deadline: it expires again at once
    zl_jobs_redrive (fx->jobs, j, at (1100));
    s_step (fx);
    assert_int_equal (j->state, ZL_JOB_READY);
    assert_int_equal (zl_jobs_expire_deadlines (fx->jobs, at (1100), 100), 1);
    s_step (fx);
    assert_int_equal (j->state, ZL_JOB_DEAD);
    assert_int_equal (zl_jobs_expire_deadlines (fx->jobs, at (1500), 100), 1);
    s_step (fx);
    assert_int_equal (zl_jobs_find (fx->jobs, ids[1])->state, ZL_JOB_DEAD);
    // the leased one was released by the restart: it is ready again (the
    // broker_restart attempt counted); lease it and let the deadline pass
    j = zl_jobs_find (fx->jobs, ids[2]);
    assert_int_equal (j->state, ZL_JOB_READY);
    zl_sched_remove (fx->sched, j);
    zl_jobs_lease (fx->jobs, j, fx->w1, at (1600));
    s_step (fx);
    uint64_t token = j->lease->token;
    size_t before = fx->n_events;
    assert_int_equal (zl_jobs_expire_deadlines (fx->jobs, at (1800), 100), 1);
    s_step (fx);
    assert_true (fx->n_events >= before + 2);
    assert_int_equal (fx->events[before].ev, ZL_JOBS_EV_EXPIRING);
    assert_int_equal (fx->events[before].state, ZL_JOB_LEASED); // told while it held its lease
    assert_int_equal (j->state, ZL_JOB_DEAD);
    st = s_state (fx, j);
    assert_int_equal (st->history[st->n_history - 1].outcome, ZL_OUTCOME_EXPIRED);
    assert_string_equal (st->history[st->n_history - 1].worker, "w1");
    assert_int_not_equal (s_ack (fx, fx->w1, ids[2], token, 100, at (1900)), ZL_SETTLE_OK);
    // the plain one never expires; the acked one left nothing
    assert_int_equal (zl_jobs_expire_deadlines (fx->jobs, at (100000), 100), 0);
    assert_int_equal (zl_jobs_find (fx->jobs, ids[3])->state, ZL_JOB_READY);
    assert_int_equal (zl_jobs_next_deadline (fx->jobs), -1);
    assert_int_equal (zl_jobs_expired (fx->jobs), 4); // ready (twice), delayed, leased

    // the lane's max_age applies to a job that gives none
    zl_broker_config_lane (&fx->cfg, "work")->max_age_ms = 300;
    fx->lane->cfg.max_age_ms = 300;
    zl_job_t *lane_aged = s_accept_full (fx, fx->flow, &spec, at (200000)); // its own 500
    spec.max_age_ms = 0;
    zl_job_t *lane_only = s_accept_full (fx, fx->flow, &spec, at (200000));
    assert_int_equal (zl_jobs_next_deadline (fx->jobs), at (200300).wall_ms);
    assert_int_equal (zl_jobs_expire_deadlines (fx->jobs, at (200300), 100), 2);
    s_step (fx);
    assert_int_equal (lane_aged->state, ZL_JOB_DEAD);
    assert_int_equal (lane_only->state, ZL_JOB_DEAD);
}

static void
test_nack_permanent_dead_letters_at_once (void **state)
{
    fx_t *fx = *state;
    zl_job_t *job = s_accept (fx, 0, 0, at (0));
    uint64_t id = job->id;
    zl_job_t *other = s_accept (fx, 0, 0, at (0));
    s_lease (fx, fx->w1, job, at (5));
    assert_int_equal (
        s_nack (fx, fx->w1, id, job->lease->token, ZL_FAIL_PERMANENT, "bad input", 0, at (25)),
        ZL_SETTLE_OK);
    assert_int_equal (job->state, ZL_JOB_DEAD);
    assert_int_equal (job->attempt, 1);
    const zl_state_rec_t *st = s_state (fx, job);
    assert_int_equal (st->n_history, 1);
    assert_int_equal (st->history[0].attempt, 1);
    assert_int_equal (st->history[0].outcome, ZL_OUTCOME_PERMANENT);
    assert_string_equal (st->history[0].error, "bad input");
    assert_string_equal (st->history[0].worker, "w1");
    assert_int_equal (st->history[0].started_at_ms, at (5).wall_ms);
    assert_int_equal (st->history[0].ended_at_ms, at (25).wall_ms);
    assert_int_equal (st->dead_at_ms, at (25).wall_ms);
    assert_int_equal (job->dead_at_ms, at (25).wall_ms);
    assert_int_equal (fx->flow->nacked_permanent, 1);
    assert_int_equal (fx->flow->dead_lettered, 1);
    assert_int_equal (fx->flow->dlq, 1);
    assert_int_equal (fx->lane->depth, 1); // only `other` is still queued
    assert_int_equal (fx->n_events, 1);
    assert_int_equal (fx->events[0].ev, ZL_JOBS_EV_DEAD);
    assert_int_equal (fx->events[0].id, id);
    assert_int_equal (fx->events[0].state, ZL_JOB_DEAD);
    assert_int_equal (fx->events[0].stored, ZL_JOB_DEAD);
    assert_int_equal (fx->events[0].n_history, 1);
    assert_int_equal (fx->events[0].last, ZL_OUTCOME_PERMANENT);
    zl_dlq_t *dlq = zl_jobs_dlq (fx->jobs);
    assert_ptr_equal (zl_dlq_first (dlq), job);
    assert_ptr_equal (zl_dlq_find (dlq, id), job);
    assert_null (zl_dlq_next (dlq, job));
    // still findable (admin shows it, payload included), no longer settleable
    assert_ptr_equal (zl_jobs_find (fx->jobs, id), job);
    const zl_job_rec_t *rec = s_record (fx, job);
    assert_int_equal (rec->payload.len, 5);
    assert_memory_equal (rec->payload.data, "hello", 5);
    assert_int_equal (s_ack (fx, fx->w1, id, 0, 0, at (30)), ZL_SETTLE_STALE_LEASE);
    assert_int_equal (s_fire (fx, at (100000)), 0);
    assert_int_equal (job->state, ZL_JOB_DEAD);
    assert_int_equal (other->state, ZL_JOB_READY);
}

static void
test_transient_failures_dead_after_max_attempts (void **state)
{
    fx_t *fx = *state;
    zl_job_t *job = s_accept (fx, 0, 3, at (0));
    uint64_t id = job->id;
    zl_worker_conn_t *who[3] = {fx->w1, fx->w2, fx->w1};
    const char *names[3] = {"w1", "w2", "w1"};
    const char *errors[3] = {"timeout talking to db", "connection reset", "out of disk"};
    int64_t started[3], ended[3];
    int64_t t = 0;
    for (int a = 0; a < 3; a++) {
        assert_int_equal (job->state, ZL_JOB_READY);
        started[a] = t + 10;
        s_lease (fx, who[a], job, at (started[a]));
        assert_int_equal (job->attempt, (uint32_t)a + 1);
        ended[a] = started[a] + 7;
        assert_int_equal (s_nack (fx, who[a], id, job->lease->token, ZL_FAIL_TRANSIENT, errors[a],
                                  0, at (ended[a])),
                          ZL_SETTLE_OK);
        t = ended[a];
        if (a < 2) {
            assert_int_not_equal (job->state, ZL_JOB_DEAD);
            assert_int_equal (fx->n_events, 0);
            s_wait_ready (fx, job, &t);
        }
    }
    assert_int_equal (job->state, ZL_JOB_DEAD);
    assert_int_equal (job->attempt, 3);
    const zl_state_rec_t *st = s_state (fx, job);
    assert_int_equal (st->n_history, 3);
    for (int a = 0; a < 3; a++) {
        const zl_attempt_t *h = &st->history[a];
        assert_int_equal (h->attempt, (uint32_t)a + 1);
        assert_int_equal (h->outcome, ZL_OUTCOME_TRANSIENT);
        assert_string_equal (h->worker, names[a]);
        assert_string_equal (h->error, errors[a]);
        assert_int_equal (h->started_at_ms, at (started[a]).wall_ms);
        assert_int_equal (h->ended_at_ms, at (ended[a]).wall_ms);
    }
    assert_int_equal (fx->n_events, 1);
    assert_int_equal (fx->events[0].ev, ZL_JOBS_EV_DEAD);
    assert_int_equal (fx->events[0].n_history, 3);
    assert_int_equal (fx->flow->nacked_transient, 3);
    assert_int_equal (fx->flow->dead_lettered, 1);
}

// The same three attempts, all inside one store batch (one turn): each
// transition reads the history the previous one wrote but did not commit.
static void
test_history_builds_up_inside_one_batch (void **state)
{
    fx_t *fx = *state;
    fx->per_step_commit = false;
    fx->lane->cfg.jitter = false;
    fx->lane->cfg.backoff_base_ms = 0; // retry at once: no timers needed
    zl_job_t *job = s_accept (fx, 0, 3, at (0));
    const char *errors[3] = {"first", "second", "third"};
    for (int a = 0; a < 3; a++) {
        s_lease (fx, a == 1 ? fx->w2 : fx->w1, job, at (10 * a));
        assert_int_equal (s_nack (fx, a == 1 ? fx->w2 : fx->w1, job->id, job->lease->token,
                                  ZL_FAIL_TRANSIENT, errors[a], 0, at (10 * a + 5)),
                          ZL_SETTLE_OK);
    }
    assert_int_equal (job->state, ZL_JOB_DEAD);
    const zl_state_rec_t *st = s_state (fx, job);
    assert_int_equal (st->n_history, 3);
    for (int a = 0; a < 3; a++) {
        assert_string_equal (st->history[a].error, errors[a]);
        assert_string_equal (st->history[a].worker, a == 1 ? "w2" : "w1");
    }
    // committed as a whole, read back outside any batch
    assert_int_equal (zl_store_commit (fx->store), ZL_STORE_OK);
    st = s_state (fx, job);
    assert_int_equal (st->n_history, 3);
    assert_string_equal (st->history[2].error, "third");
    assert_int_equal (zl_store_begin (fx->store), ZL_STORE_OK);
}

static void
test_long_error_text_is_bounded (void **state)
{
    fx_t *fx = *state;
    zl_job_t *job = s_accept (fx, 0, 0, at (0));
    s_lease (fx, fx->w1, job, at (0));
    size_t len = 100000;
    char *text = malloc (len + 1);
    memset (text, 'e', len);
    text[len] = '\0';
    assert_int_equal (
        s_nack (fx, fx->w1, job->id, job->lease->token, ZL_FAIL_PERMANENT, text, 0, at (1)),
        ZL_SETTLE_OK);
    free (text);
    const zl_state_rec_t *st = s_state (fx, job);
    size_t kept = strlen (st->history[0].error);
    assert_true (kept >= 64); // clipped, not dropped
    assert_true (kept < len);
    assert_true (kept <= 4096);
    for (size_t i = 0; i < kept; i++)
        assert_int_equal (st->history[0].error[i], 'e');
    // and a NULL error is kept as empty text
    zl_job_t *j2 = s_accept (fx, 0, 0, at (0));
    s_lease (fx, fx->w1, j2, at (0));
    assert_int_equal (
        s_nack (fx, fx->w1, j2->id, j2->lease->token, ZL_FAIL_PERMANENT, NULL, 0, at (1)),
        ZL_SETTLE_OK);
    assert_string_equal (s_state (fx, j2)->history[0].error, "");
    // a clip never splits a character: 2-byte characters across the limit
    zl_job_t *j3 = s_accept (fx, 0, 0, at (0));
    s_lease (fx, fx->w1, j3, at (0));
    char wide[5001];
    for (size_t i = 0; i + 1 < sizeof wide; i += 2)
        memcpy (wide + i, "\xc3\xa9", 2);
    wide[sizeof wide - 1] = '\0';
    memmove (wide + 1, wide, sizeof wide - 2); // odd offset: the limit falls inside one
    wide[0] = 'x';
    assert_int_equal (
        s_nack (fx, fx->w1, j3->id, j3->lease->token, ZL_FAIL_PERMANENT, wide, 0, at (1)),
        ZL_SETTLE_OK);
    const char *kept3 = s_state (fx, j3)->history[0].error;
    assert_true (strlen (kept3) < strlen (wide));
    assert_true (zl_text_valid (kept3, strlen (kept3)));
}

// A lease is settled or extended only by the worker holding it, even with
// the right token.
static void
test_only_the_holder_settles (void **state)
{
    fx_t *fx = *state;
    zl_job_t *job = s_accept (fx, 0, 0, at (0));
    s_lease (fx, fx->w1, job, at (0));
    uint64_t token = job->lease->token;
    assert_int_equal (s_ack (fx, fx->w2, job->id, token, 10, at (1)), ZL_SETTLE_NOT_HOLDER);
    assert_int_equal (s_nack (fx, fx->w2, job->id, token, ZL_FAIL_PERMANENT, "x", 0, at (1)),
                      ZL_SETTLE_NOT_HOLDER);
    assert_int_equal (s_extend (fx, fx->w2, job->id, token, 1000, at (1)), ZL_SETTLE_NOT_HOLDER);
    assert_int_equal (job->state, ZL_JOB_LEASED);
    assert_int_equal (job->due_ms, at (LANE_LEASE_MS).mono_ms);
    // a wrong token says stale, whoever sends it
    assert_int_equal (s_ack (fx, fx->w2, job->id, token + 1, 10, at (1)), ZL_SETTLE_STALE_LEASE);
    // the holder's lease moves with the worker process to its new connection
    zl_peer_t p3 = {.len = 2, .data = {'w', '3'}};
    zl_worker_conn_t *again =
        zl_workers_add (fx->workers, &p3, "w1", 7, NULL, &fx->lane, 1, 16, at (2).mono_ms);
    zl_worker_conn_adopt (again, fx->w1);
    assert_int_equal (fx->w1->in_flight, 0);
    assert_int_equal (again->in_flight, 1);
    assert_int_equal (s_ack (fx, fx->w1, job->id, token, 10, at (2)), ZL_SETTLE_NOT_HOLDER);
    assert_int_equal (s_ack (fx, again, job->id, token, 10, at (2)), ZL_SETTLE_OK);
    assert_int_equal (again->in_flight, 0);
}

// ---------------------------------------------------------------- worker death
static void
test_release_worker_requeues_at_once (void **state)
{
    fx_t *fx = *state;
    zl_job_t *a = s_accept (fx, 0, 0, at (0));
    zl_job_t *b = s_accept (fx, 0, 0, at (0));
    zl_job_t *c = s_accept (fx, 0, 0, at (0));
    zl_job_t *d = s_accept (fx, 0, 0, at (0));
    zl_job_t *last = s_accept (fx, 0, 1, at (0)); // on its only attempt
    s_lease (fx, fx->w1, a, at (10));
    s_lease (fx, fx->w1, b, at (10));
    s_lease (fx, fx->w2, c, at (10));
    s_lease (fx, fx->w1, d, at (10));
    s_lease (fx, fx->w1, last, at (10));
    uint64_t c_token = c->lease->token;
    uint64_t a_token = a->lease->token;
    assert_int_equal (fx->w1->in_flight, 4);

    size_t n = zl_jobs_release_worker (fx->jobs, fx->w1, ZL_OUTCOME_WORKER_DEAD,
                                       "worker silent for 3000 ms", at (500));
    s_step (fx);
    assert_int_equal (n, 4);
    assert_int_equal (fx->w1->in_flight, 0);
    assert_null (fx->w1->jobs);
    zl_job_t *requeued[3] = {a, b, d};
    for (int i = 0; i < 3; i++) {
        zl_job_t *j = requeued[i];
        assert_int_equal (j->state, ZL_JOB_READY); // at once, no backoff
        assert_int_equal (j->attempt, 1);
        const zl_state_rec_t *st = s_state (fx, j);
        assert_int_equal (st->n_history, 1);
        assert_int_equal (st->history[0].outcome, ZL_OUTCOME_WORKER_DEAD);
        assert_string_equal (st->history[0].worker, "w1");
        assert_string_equal (st->history[0].error, "worker silent for 3000 ms");
        assert_int_equal (st->history[0].started_at_ms, at (10).wall_ms);
        assert_int_equal (st->history[0].ended_at_ms, at (500).wall_ms);
    }
    assert_int_equal (last->state, ZL_JOB_DEAD);
    assert_int_equal (s_state (fx, last)->history[0].outcome, ZL_OUTCOME_WORKER_DEAD);
    assert_int_equal (fx->n_events, 1);
    assert_int_equal (fx->events[0].id, last->id);
    // the other worker's job is untouched
    assert_int_equal (c->state, ZL_JOB_LEASED);
    assert_ptr_equal (c->lease->worker, fx->w2);
    assert_int_equal (c->lease->token, c_token);
    // the dead worker's tokens are fenced; its old deadline fires nothing
    assert_int_equal (s_ack (fx, fx->w1, a->id, a_token, 0, at (600)), ZL_SETTLE_STALE_LEASE);
    assert_int_equal (s_fire (fx, at (10 + LANE_LEASE_MS - 1)), 0);
    // nothing left to release
    assert_int_equal (
        zl_jobs_release_worker (fx->jobs, fx->w1, ZL_OUTCOME_WORKER_DEAD, "x", at (700)), 0);
    assert_int_equal (s_ack (fx, fx->w2, c->id, c_token, 0, at (700)), ZL_SETTLE_OK);
}

// ---------------------------------------------------------------- DLQ
static void
test_redrive_and_purge (void **state)
{
    fx_t *fx = *state;
    zl_job_t *a = s_accept (fx, 0, 0, at (0));
    zl_job_t *b = s_accept (fx, 0, 0, at (0));
    uint64_t b_id = b->id;
    s_lease (fx, fx->w1, a, at (0));
    s_lease (fx, fx->w1, b, at (0));
    s_nack (fx, fx->w1, a->id, a->lease->token, ZL_FAIL_PERMANENT, "x", 0, at (1));
    s_nack (fx, fx->w1, b->id, b->lease->token, ZL_FAIL_PERMANENT, "y", 0, at (2));
    zl_dlq_t *dlq = zl_jobs_dlq (fx->jobs);
    assert_int_equal (zl_dlq_depth (dlq), 2);
    assert_ptr_equal (zl_dlq_first (dlq), a);
    assert_ptr_equal (zl_dlq_next (dlq, a), b);
    assert_int_equal (fx->lane->depth, 0);

    uint64_t next = zl_jobs_next_id (fx->jobs);
    zl_jobs_redrive (fx->jobs, a, at (100));
    s_step (fx);
    assert_int_equal (a->state, ZL_JOB_READY);
    assert_int_equal (a->attempt, 0);
    assert_int_equal (a->seq, next); // at the back of the queue
    const zl_state_rec_t *st = s_state (fx, a);
    assert_int_equal (st->state, ZL_JOB_READY);
    assert_int_equal (st->attempt, 0);
    assert_int_equal (st->n_history, 0);
    assert_int_equal (fx->flow->dlq, 1);
    assert_int_equal (fx->lane->depth, 1);
    assert_int_equal (fx->tenant->depth, 1);
    assert_ptr_equal (zl_dlq_first (dlq), b);
    assert_null (zl_dlq_find (dlq, a->id));
    // a fresh attempt count: it gets all its attempts again
    s_lease (fx, fx->w2, a, at (200));
    assert_int_equal (a->attempt, 1);
    s_nack (fx, fx->w2, a->id, a->lease->token, ZL_FAIL_TRANSIENT, "again", 0, at (201));
    assert_int_not_equal (a->state, ZL_JOB_DEAD);
    st = s_state (fx, a);
    assert_int_equal (st->n_history, 1);
    assert_string_equal (st->history[0].error, "again");
    assert_int_equal (st->history[0].attempt, 1);

    size_t before = zl_jobs_count (fx->jobs);
    zl_jobs_purge (fx->jobs, b);
    s_step (fx);
    assert_null (zl_jobs_find (fx->jobs, b_id));
    assert_int_equal (zl_jobs_count (fx->jobs), before - 1);
    assert_int_equal (zl_dlq_depth (dlq), 0);
    assert_null (zl_dlq_first (dlq));
    assert_int_equal (fx->flow->dlq, 0);
    assert_int_equal (fx->lane->depth, 1);
    // purged from the store too
    zl_arena_reset (fx->arena);
    zl_job_rec_t rec;
    assert_int_equal (zl_store_get_job (fx->store, b_id, ZL_PRIORITY_DEFAULT, fx->arena, &rec),
                      ZL_STORE_NOT_FOUND);
}

// ---------------------------------------------------------------- a long random walk
// Random operations on many jobs across two tenants, several per store batch;
// the recount after each one catches any path that forgets a gauge or a
// store write.
// `steps` random operations from time *t on; returns the commits made.
static uint64_t
s_walk (fx_t *fx, zl_rng_t *r, int64_t *t_p, int steps)
{
    int64_t t = *t_p;
    uint64_t commits = 0;
    for (int step = 0; step < steps; step++) {
        t += (int64_t)zl_rng_range (r, 120);
        int op = (int)zl_rng_range (r, 9);
        zl_worker_conn_t *w = zl_rng_range (r, 1) ? fx->w1 : fx->w2;
        if (op <= 1 && fx->n_ids < MAX_IDS - 1) {
            zl_flow_t *flow = zl_rng_range (r, 1) ? fx->flow : fx->flow2;
            zl_job_spec_t spec = {.tenant = flow->tenant->name,
                                  .lane = "work",
                                  .idempotency_key = "",
                                  .delay_ms = zl_rng_range (r, 3) == 0 ? 50 : 0,
                                  .max_attempts = (uint32_t)zl_rng_range (r, 3) + 1};
            s_accept_full (fx, flow, &spec, at (t));
        } else if (op == 2 && zl_sched_has_ready (fx->sched, fx->lane)) {
            s_lease (fx, w, NULL, at (t));
        } else if (op >= 3 && op <= 6 && w->jobs) {
            zl_job_t *j = w->jobs;
            if (op == 3)
                assert_int_equal (s_ack (fx, w, j->id, j->lease->token, 10, at (t)), ZL_SETTLE_OK);
            else if (op == 4)
                assert_int_equal (s_nack (fx, w, j->id, j->lease->token,
                                          (zl_fail_class_t)zl_rng_range (r, 3), "e",
                                          (uint32_t)zl_rng_range (r, 200), at (t)),
                                  ZL_SETTLE_OK);
            else if (op == 5)
                s_extend (fx, w, j->id, j->lease->token, 500, at (t));
            else
                assert_int_equal (s_ack (fx, w, j->id, j->lease->token + 1, 0, at (t)),
                                  ZL_SETTLE_STALE_LEASE);
        } else if (op == 7) {
            s_fire (fx, at (t));
        } else if (op == 8 && zl_rng_range (r, 20) == 0) {
            zl_jobs_release_worker (fx->jobs, w, ZL_OUTCOME_WORKER_DEAD, "gone", at (t));
            s_step (fx);
        } else {
            zl_job_t *dead = zl_dlq_first (zl_jobs_dlq (fx->jobs));
            if (dead && zl_rng_range (r, 1))
                zl_jobs_redrive (fx->jobs, dead, at (t));
            else if (dead)
                zl_jobs_purge (fx->jobs, dead);
            s_step (fx);
        }
        // a turn holds a few transitions, then commits
        if (zl_rng_range (r, 4) == 0) {
            s_turn (fx);
            commits++;
        }
    }
    *t_p = t;
    return commits;
}

static void
test_random_walk_keeps_gauges (void **state)
{
    fx_t *fx = *state;
    fx->per_step_commit = false;
    zl_rng_t r;
    zl_rng_seed (&r, 7);
    int64_t t = 0;
    uint64_t commits = s_walk (fx, &r, &t, 4000);
    s_turn (fx);
    s_check_gauges (fx);
    // the walk went down every path, not just one
    zl_flow_t *f[2] = {fx->flow, fx->flow2};
    uint64_t acked = 0, dead = 0, lapsed = 0, transient = 0, throttled = 0;
    for (int i = 0; i < 2; i++) {
        acked += f[i]->acked;
        dead += f[i]->dead_lettered;
        lapsed += f[i]->lease_expired;
        transient += f[i]->nacked_transient;
        throttled += f[i]->nacked_throttled;
    }
    zl_store_stats_t ss;
    zl_store_stats (fx->store, &ss);
    print_message ("walk: %zu jobs, acked %llu, dead %llu, lapsed %llu, transient %llu, "
                   "throttled %llu, %llu commits; store: %llu jobs, %llu states\n",
                   fx->n_ids, (unsigned long long)acked, (unsigned long long)dead,
                   (unsigned long long)lapsed, (unsigned long long)transient,
                   (unsigned long long)throttled, (unsigned long long)commits,
                   (unsigned long long)ss.jobs, (unsigned long long)ss.states);
    assert_true (acked > 20 && dead > 20 && lapsed > 20 && transient > 20 && throttled > 20);
    assert_int_equal (ss.jobs, zl_jobs_count (fx->jobs));
    assert_true (ss.states <= ss.jobs);
}

// ---------------------------------------------------------------- restarts
typedef struct {
    uint64_t id, key;
} ord_t;

static int
s_cmp_ord (const void *a, const void *b)
{
    const ord_t *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

typedef struct {
    ord_t ready[2][MAX_IDS]; // per tenant: the FIFO a restart must rebuild
    size_t n_ready[2];
    ord_t dead[MAX_IDS]; // the DLQ a restart must rebuild
    size_t n_dead;
    uint64_t delayed_ids[MAX_IDS];
    int64_t delayed_due[MAX_IDS]; // wall clock
    uint32_t delayed_attempt[MAX_IDS];
    size_t n_delayed;
    size_t live;
    uint64_t next_id;
} expect_t;

static void
s_restore_cb (void *ctx, uint64_t id, const zl_job_rec_t *rec, const zl_state_rec_t *st)
{
    fx_t *fx = ctx;
    zl_lane_t *lane = zl_lanes_lookup (fx->lanes, rec->lane);
    assert_non_null (lane);
    zl_flow_t *flow = zl_sched_flow (fx->sched, lane, zl_lanes_tenant (fx->lanes, rec->tenant));
    static const zl_jobs_cut_t cut = {ZL_OUTCOME_BROKER_RESTART, "restarted"};
    zl_jobs_restore (fx->jobs, id, flow, rec, st, &cut, at (fx->restart_t));
}

// Stop the broker at time t (after its timers fired and its turn committed)
// and start a new one on the same store: the jobs table, scheduler, timers
// and workers are new, rebuilt by recovery. The rebuilt state must be the
// one the old broker had, the leased jobs ready (or dead) with the attempt
// counted.
static void
s_restart (fx_t *fx, int64_t t)
{
    s_fire (fx, at (t)); // nothing overdue is left behind
    s_turn (fx);
    static expect_t e;
    memset (&e, 0, sizeof e);
    zl_flow_t *flows[2] = {fx->flow, fx->flow2};
    for (int f = 0; f < 2; f++)
        for (zl_job_t *j = flows[f]->head; j; j = j->next)
            e.ready[f][e.n_ready[f]++] = (ord_t){j->id, j->seq};
    zl_dlq_t *q = zl_jobs_dlq (fx->jobs);
    for (zl_job_t *j = zl_dlq_first (q); j; j = zl_dlq_next (q, j))
        e.dead[e.n_dead++] = (ord_t){j->id, e.n_dead};
    size_t n_dead_before = e.n_dead;
    for (size_t i = 0; i < fx->n_ids; i++) {
        zl_job_t *j = zl_jobs_find (fx->jobs, fx->ids[i]);
        if (!j)
            continue;
        e.live++;
        int f = j->flow == fx->flow ? 0 : 1;
        if (j->state == ZL_JOB_LEASED && j->attempt < j->max_attempts)
            e.ready[f][e.n_ready[f]++] = (ord_t){j->id, j->id}; // back at its id
        else if (j->state == ZL_JOB_LEASED)
            e.dead[e.n_dead++] = (ord_t){j->id, UINT64_MAX}; // dies at the restart
        else if (j->state == ZL_JOB_DELAYED) {
            e.delayed_ids[e.n_delayed] = j->id;
            e.delayed_attempt[e.n_delayed] = j->attempt;
            e.delayed_due[e.n_delayed++] = j->due_ms - MONO_BASE_MS + WALL_BASE_MS;
        }
    }
    for (int f = 0; f < 2; f++)
        qsort (e.ready[f], e.n_ready[f], sizeof (ord_t), s_cmp_ord);
    qsort (e.dead + n_dead_before, e.n_dead - n_dead_before, sizeof (ord_t), s_cmp_ord);
    e.next_id = zl_jobs_next_id (fx->jobs);
    assert_int_equal (zl_store_set_next_id (fx->store, e.next_id), ZL_STORE_OK);
    assert_int_equal (zl_store_commit (fx->store), ZL_STORE_OK);

    // stop
    zl_jobs_destroy (&fx->jobs);
    zl_workers_destroy (&fx->workers);
    zl_timers_destroy (&fx->timers);
    zl_sched_destroy (&fx->sched);
    zl_lanes_destroy (&fx->lanes);
    zl_store_close (&fx->store);
    // start
    fx->lanes = zl_lanes_new (&fx->cfg);
    fx->lane = zl_lanes_lookup (fx->lanes, "work");
    fx->tenant = zl_lanes_tenant (fx->lanes, "acme");
    fx->tenant2 = zl_lanes_tenant (fx->lanes, "globex");
    char err[512] = "";
    fx->store = zl_store_open (fx->dir, ZL_DURABILITY_NONE, MAP_SIZE, err, sizeof err);
    if (!fx->store)
        fail_msg ("reopen: %s", err);
    fx->sched = zl_sched_new (ZL_SCHED_WFQ);
    fx->timers = zl_timers_new ();
    fx->jobs = zl_jobs_new (fx->sched, fx->timers, &fx->rng, fx->store);
    zl_jobs_set_listener (fx->jobs, s_listener, fx);
    fx->workers = zl_workers_new ();
    zl_peer_t p1 = s_peer ("peer-one"), p2 = s_peer ("peer-two");
    fx->w1 = zl_workers_add (fx->workers, &p1, "w1", 0, NULL, &fx->lane, 1, 16, at (t).mono_ms);
    fx->w2 = zl_workers_add (fx->workers, &p2, "w2", 0, NULL, &fx->lane, 1, 16, at (t).mono_ms);
    fx->flow = zl_sched_flow (fx->sched, fx->lane, fx->tenant);
    fx->flow2 = zl_sched_flow (fx->sched, fx->lane, fx->tenant2);
    fx->restart_t = t;
    uint64_t next_id = 0;
    assert_int_equal (zl_store_begin (fx->store), ZL_STORE_OK);
    if (zl_store_recover (fx->store, s_restore_cb, fx, &next_id, err, sizeof err) != 0)
        fail_msg ("recover: %s", err);
    assert_int_equal (next_id, e.next_id);
    zl_jobs_restore_done (fx->jobs, next_id, at (t));
    s_turn (fx);
    s_check_gauges (fx);

    // the same jobs, queues, DLQ, timers and counter
    assert_int_equal (zl_jobs_count (fx->jobs), e.live);
    assert_int_equal (zl_jobs_next_id (fx->jobs), e.next_id);
    flows[0] = fx->flow;
    flows[1] = fx->flow2;
    for (int f = 0; f < 2; f++) {
        size_t i = 0;
        for (zl_job_t *j = flows[f]->head; j; j = j->next, i++) {
            assert_true (i < e.n_ready[f]);
            if (j->id != e.ready[f][i].id)
                fail_msg ("flow %d position %zu: job %llu, expected %llu", f, i,
                          (unsigned long long)j->id, (unsigned long long)e.ready[f][i].id);
        }
        assert_int_equal (i, e.n_ready[f]);
    }
    q = zl_jobs_dlq (fx->jobs);
    size_t i = 0;
    for (zl_job_t *j = zl_dlq_first (q); j; j = zl_dlq_next (q, j), i++) {
        assert_true (i < e.n_dead);
        if (j->id != e.dead[i].id)
            fail_msg ("DLQ position %zu: job %llu, expected %llu", i, (unsigned long long)j->id,
                      (unsigned long long)e.dead[i].id);
    }
    assert_int_equal (i, e.n_dead);
    for (size_t k = 0; k < e.n_delayed; k++) {
        zl_job_t *j = zl_jobs_find (fx->jobs, e.delayed_ids[k]);
        assert_non_null (j);
        assert_int_equal (j->state, ZL_JOB_DELAYED);
        assert_int_equal (j->attempt, e.delayed_attempt[k]);
        assert_int_equal (j->due_ms - at (t).mono_ms, e.delayed_due[k] - at (t).wall_ms);
    }
    assert_int_equal (zl_timers_size (fx->timers), e.n_delayed);
    // the attempts that were running ended with the restart
    for (size_t k = n_dead_before; k < e.n_dead; k++) {
        zl_job_t *j = zl_jobs_find (fx->jobs, e.dead[k].id);
        const zl_state_rec_t *st = s_state (fx, j);
        assert_int_equal (st->history[st->n_history - 1].outcome, ZL_OUTCOME_BROKER_RESTART);
    }
}

// ---------------------------------------------------------------- cancellation
static zl_cancel_outcome_t
s_cancel (fx_t *fx, uint64_t id, zl_now_t now, zl_cancel_item_t *item)
{
    zl_cancel_outcome_t rc = zl_jobs_cancel (fx->jobs, id, now, item);
    assert_int_equal (item->outcome, rc);
    assert_int_equal (item->job_id, id);
    s_step (fx);
    return rc;
}

// A cancelled job is stored cancelled, from `from`, with `n_history` attempts.
static void
s_assert_cancelled (fx_t *fx, zl_job_t *job, zl_job_state_t from, size_t n_history)
{
    assert_non_null (job);
    assert_int_equal (job->state, ZL_JOB_CANCELLED);
    assert_int_equal (job->cancelled_from, from);
    const zl_state_rec_t *st = s_state (fx, job);
    assert_int_equal (st->state, ZL_JOB_CANCELLED);
    assert_int_equal (st->cancelled_from, from);
    assert_int_equal (st->n_history, n_history);
}

// Ready jobs leave their FIFO wherever they wait (head, middle, tail) and a
// delayed one its timer; a second cancel says "already", with when and from
// what; the rest of the queue runs on in order.
static void
test_cancel_ready_and_delayed (void **state)
{
    fx_t *fx = *state;
    zl_job_t *a = s_accept (fx, 0, 0, at (0));
    zl_job_t *b = s_accept (fx, 0, 0, at (1));
    zl_job_t *c = s_accept (fx, 0, 0, at (2));
    zl_job_t *d = s_accept (fx, 0, 0, at (3));
    zl_job_t *late = s_accept (fx, 500, 0, at (4));
    zl_cancel_item_t item;
    fx->n_events = 0;
    assert_int_equal (s_cancel (fx, b->id, at (10), &item), ZL_CANCEL_CANCELLED); // middle
    assert_string_equal (item.state, "ready");
    assert_int_equal (item.cancelled_at_ms, at (10).wall_ms);
    assert_int_equal (fx->n_events, 2);
    assert_int_equal (fx->events[0].ev, ZL_JOBS_EV_CANCELLED);
    assert_int_equal (fx->events[0].state, ZL_JOB_READY); // told before it changed
    assert_int_equal (fx->events[1].ev, ZL_JOBS_EV_CANCEL_FINAL);
    assert_int_equal (fx->events[1].state, ZL_JOB_CANCELLED);                     // and once it did
    assert_int_equal (s_cancel (fx, a->id, at (11), &item), ZL_CANCEL_CANCELLED); // head
    assert_int_equal (s_cancel (fx, d->id, at (12), &item), ZL_CANCEL_CANCELLED); // tail
    assert_int_equal (s_cancel (fx, late->id, at (13), &item), ZL_CANCEL_CANCELLED);
    assert_string_equal (item.state, "delayed");
    s_assert_cancelled (fx, a, ZL_JOB_READY, 0);
    s_assert_cancelled (fx, late, ZL_JOB_DELAYED, 0);
    assert_int_equal (fx->flow->ready, 1);
    assert_ptr_equal (fx->flow->head, c);
    assert_ptr_equal (fx->flow->q[ZL_PRIORITY_DEFAULT].tail, c);
    assert_int_equal (fx->lane->depth, 1);

    // again: nothing changes, the answer says when and from what
    fx->n_events = 0;
    assert_int_equal (s_cancel (fx, b->id, at (20), &item), ZL_CANCEL_ALREADY_CANCELLED);
    assert_string_equal (item.state, "ready");
    assert_int_equal (item.cancelled_at_ms, at (10).wall_ms);
    assert_int_equal (fx->n_events, 0);

    // the delayed one never becomes ready; the one left runs
    assert_int_equal (s_fire (fx, at (600)), 0);
    assert_int_equal (late->state, ZL_JOB_CANCELLED);
    zl_job_t *j = s_lease (fx, fx->w1, c, at (601));
    assert_int_equal (s_ack (fx, fx->w1, j->id, j->lease->token, 0, at (602)), ZL_SETTLE_OK);
    assert_null (zl_sched_pop (fx->sched, fx->lane, S_NO_LIMITS_NOW));
    // a job pushed after the cancels queues normally behind nothing
    zl_job_t *e = s_accept (fx, 0, 0, at (603));
    s_lease (fx, fx->w1, e, at (604));
}

// A running job is cancelled at once: its attempt ends CANCELLED in the
// history, its lease, timer and worker slot go, and whatever its worker
// says later (ack, nack, extend, with its token or any other) is refused
// CANCELLED and changes nothing.
static void
test_cancel_leased_refuses_late_settlements (void **state)
{
    fx_t *fx = *state;
    zl_job_t *job = s_accept (fx, 0, 0, at (0));
    s_lease (fx, fx->w1, job, at (10));
    uint64_t token = job->lease->token;
    assert_int_equal (fx->w1->in_flight, 1);
    zl_cancel_item_t item;
    fx->n_events = 0;
    assert_int_equal (s_cancel (fx, job->id, at (40), &item), ZL_CANCEL_CANCELLED);
    assert_string_equal (item.state, "leased");
    assert_int_equal (fx->n_events, 2);
    assert_int_equal (fx->events[0].state, ZL_JOB_LEASED); // the listener saw the lease
    assert_int_equal (fx->events[1].ev, ZL_JOBS_EV_CANCEL_FINAL);
    s_assert_cancelled (fx, job, ZL_JOB_LEASED, 1);
    const zl_state_rec_t *st = s_state (fx, job);
    assert_int_equal (st->history[0].outcome, ZL_OUTCOME_CANCELLED);
    assert_string_equal (st->history[0].worker, "w1");
    assert_int_equal (st->history[0].ended_at_ms, at (40).wall_ms);
    assert_int_equal (fx->w1->in_flight, 0);
    assert_int_equal (fx->lane->depth, 0);

    assert_int_equal (s_ack (fx, fx->w1, job->id, token, 0, at (50)), ZL_SETTLE_CANCELLED);
    assert_int_equal (s_nack (fx, fx->w1, job->id, token, ZL_FAIL_TRANSIENT, "x", 0, at (51)),
                      ZL_SETTLE_CANCELLED);
    assert_int_equal (s_extend (fx, fx->w1, job->id, token, 1000, at (52)), ZL_SETTLE_CANCELLED);
    assert_int_equal (s_ack (fx, fx->w2, job->id, token + 1, 0, at (53)), ZL_SETTLE_CANCELLED);
    s_assert_cancelled (fx, job, ZL_JOB_LEASED, 1);
    assert_int_equal (fx->flow->acked, 0);
    // its lease deadline passes: nothing fires
    assert_int_equal (s_fire (fx, at (10 + LANE_LEASE_MS + 1)), 0);
    assert_int_equal (job->state, ZL_JOB_CANCELLED);
    // releasing the worker gives nothing back
    assert_int_equal (
        zl_jobs_release_worker (fx->jobs, fx->w1, ZL_OUTCOME_WORKER_DEAD, "gone", at (2000)), 0);
    s_step (fx);
}

// A dead letter can be cancelled: it leaves the DLQ (redrive no longer
// finds it) and stays cancelled with its history.
static void
test_cancel_dead_letter (void **state)
{
    fx_t *fx = *state;
    zl_job_t *job = s_accept (fx, 0, 0, at (0));
    s_lease (fx, fx->w1, job, at (1));
    assert_int_equal (
        s_nack (fx, fx->w1, job->id, job->lease->token, ZL_FAIL_PERMANENT, "bad", 0, at (2)),
        ZL_SETTLE_OK);
    assert_int_equal (job->state, ZL_JOB_DEAD);
    assert_int_equal (zl_dlq_depth (zl_jobs_dlq (fx->jobs)), 1);
    zl_cancel_item_t item;
    assert_int_equal (s_cancel (fx, job->id, at (3), &item), ZL_CANCEL_CANCELLED);
    assert_string_equal (item.state, "dead");
    s_assert_cancelled (fx, job, ZL_JOB_DEAD, 1);
    assert_int_equal (zl_dlq_depth (zl_jobs_dlq (fx->jobs)), 0);
    assert_int_equal (fx->flow->dlq, 0);
    assert_null (zl_dlq_find (zl_jobs_dlq (fx->jobs), job->id));
}

// Ids with no live job: one issued (acked, so deleted) is "finished"; 0 and
// ids past the counter were never issued.
static void
test_cancel_unknown_and_finished (void **state)
{
    fx_t *fx = *state;
    zl_job_t *job = s_accept (fx, 0, 0, at (0));
    uint64_t id = job->id;
    s_lease (fx, fx->w1, job, at (1));
    assert_int_equal (s_ack (fx, fx->w1, id, job->lease->token, 0, at (2)), ZL_SETTLE_OK);
    zl_cancel_item_t item;
    fx->n_events = 0;
    assert_int_equal (s_cancel (fx, id, at (3), &item), ZL_CANCEL_FINISHED);
    assert_string_equal (item.state, "");
    assert_int_equal (s_cancel (fx, 0, at (3), &item), ZL_CANCEL_UNKNOWN);
    assert_int_equal (s_cancel (fx, zl_jobs_next_id (fx->jobs), at (3), &item), ZL_CANCEL_UNKNOWN);
    assert_int_equal (s_cancel (fx, UINT64_MAX, at (3), &item), ZL_CANCEL_UNKNOWN);
    assert_int_equal (fx->n_events, 0);
    assert_int_equal (zl_jobs_count (fx->jobs), 0);
}

// Cancelled jobs survive a restart as they were: a running one is not
// ready again (no restart attempt is added), none is queued, the late ack
// is still refused, and the retention order is kept.
static void
test_cancel_survives_restart (void **state)
{
    fx_t *fx = *state;
    zl_job_t *ready = s_accept (fx, 0, 0, at (0));
    zl_job_t *running = s_accept (fx, 0, 0, at (1));
    zl_job_t *other = s_accept (fx, 0, 0, at (2));
    zl_job_t *delayed = s_accept (fx, 300, 0, at (3));
    uint64_t ids[3] = {ready->id, running->id, delayed->id};
    s_lease (fx, fx->w1, ready, at (4));                 // the FIFO's head goes to w1...
    zl_job_t *j = s_lease (fx, fx->w2, running, at (5)); // ...this to w2
    uint64_t token = j->lease->token;
    // ready is back in the queue, with one attempt made (its worker died)
    assert_int_equal (
        zl_jobs_release_worker (fx->jobs, fx->w1, ZL_OUTCOME_WORKER_DEAD, "gone", at (6)), 1);
    s_step (fx);
    assert_int_equal (ready->state, ZL_JOB_READY);
    zl_cancel_item_t item;
    assert_int_equal (s_cancel (fx, running->id, at (10), &item), ZL_CANCEL_CANCELLED);
    assert_int_equal (s_cancel (fx, ready->id, at (11), &item), ZL_CANCEL_CANCELLED);
    assert_int_equal (s_cancel (fx, delayed->id, at (12), &item), ZL_CANCEL_CANCELLED);
    uint64_t other_id = other->id;

    s_restart (fx, 100);
    static const zl_job_state_t from[3] = {ZL_JOB_READY, ZL_JOB_LEASED, ZL_JOB_DELAYED};
    static const size_t hist[3] = {1, 1, 0};
    for (int k = 0; k < 3; k++) {
        zl_job_t *c = zl_jobs_find (fx->jobs, ids[k]);
        s_assert_cancelled (fx, c, from[k], hist[k]);
        assert_int_equal (c->cancelled_at_ms, at (10 + (k == 0 ? 1 : k == 1 ? 0 : 2)).wall_ms);
    }
    const zl_state_rec_t *st = s_state (fx, zl_jobs_find (fx->jobs, ids[1]));
    assert_int_equal (st->history[0].outcome, ZL_OUTCOME_CANCELLED); // no restart attempt
    assert_int_equal (zl_jobs_cancelled_kept (fx->jobs), 3);
    // only the job that was not cancelled is queued
    zl_job_t *next = s_lease (fx, fx->w1, NULL, at (101));
    assert_int_equal (next->id, other_id);
    assert_null (zl_sched_pop (fx->sched, fx->lane, S_NO_LIMITS_NOW));
    assert_int_equal (s_fire (fx, at (1000)), 0); // the delayed one's timer is gone too
    // the worker of the cancelled attempt reconnects and acks: refused
    assert_int_equal (s_ack (fx, fx->w2, ids[1], token, 0, at (1001)), ZL_SETTLE_CANCELLED);
    // again recover: the order of cancellation is the retention order
    s_restart (fx, 2000);
    uint64_t kept =
        zl_jobs_expire_cancelled (fx->jobs, at (2000), at (2000).wall_ms - at (10).wall_ms, 10);
    s_step (fx);
    assert_int_equal (kept, 1); // the first cancelled (running, at 10) only
    assert_null (zl_jobs_find (fx->jobs, ids[1]));
    assert_non_null (zl_jobs_find (fx->jobs, ids[0]));
}

// result_retention: cancelled jobs are deleted once kept that long, oldest
// first, at most `max` per call; then their ids say "finished".
static void
test_cancelled_expire_after_retention (void **state)
{
    fx_t *fx = *state;
    zl_job_t *jobs[3];
    uint64_t ids[3];
    zl_cancel_item_t item;
    for (int k = 0; k < 3; k++) {
        jobs[k] = s_accept (fx, 0, 0, at (k));
        ids[k] = jobs[k]->id;
    }
    for (int k = 0; k < 3; k++)
        assert_int_equal (s_cancel (fx, ids[k], at (100 * k), &item), ZL_CANCEL_CANCELLED);
    assert_int_equal (zl_jobs_expire_cancelled (fx->jobs, at (999), 1000, 10), 0);
    assert_int_equal (zl_jobs_expire_cancelled (fx->jobs, at (100000), 0, 10), 0); // 0 = keep
    s_step (fx);
    assert_int_equal (zl_jobs_expire_cancelled (fx->jobs, at (1150), 1000, 1), 1); // bounded
    s_step (fx);
    assert_int_equal (zl_jobs_expire_cancelled (fx->jobs, at (1150), 1000, 10), 1);
    s_step (fx);
    assert_null (zl_jobs_find (fx->jobs, ids[0]));
    assert_null (zl_jobs_find (fx->jobs, ids[1]));
    assert_non_null (zl_jobs_find (fx->jobs, ids[2]));
    assert_int_equal (zl_jobs_cancelled_kept (fx->jobs), 1);
    assert_int_equal (s_cancel (fx, ids[0], at (1300), &item), ZL_CANCEL_FINISHED);
    assert_int_equal (s_cancel (fx, ids[2], at (1300), &item), ZL_CANCEL_ALREADY_CANCELLED);
}

// Random walks with restarts in between: what recovery rebuilds is what the
// broker had, and the rebuilt broker goes on working.
static void
test_random_walk_survives_restarts (void **state)
{
    fx_t *fx = *state;
    fx->per_step_commit = false;
    zl_rng_t r;
    zl_rng_seed (&r, 11);
    int64_t t = 0;
    uint64_t restarted_dead = 0;
    for (int round = 0; round < 4; round++) {
        s_walk (fx, &r, &t, 1000);
        s_restart (fx, ++t);
        restarted_dead += fx->flow->dead_lettered + fx->flow2->dead_lettered;
    }
    s_walk (fx, &r, &t, 500);
    s_turn (fx);
    s_check_gauges (fx);
    // some restarts caught jobs on their last attempt
    assert_true (restarted_dead > 0);
}

#define T(fn) cmocka_unit_test_setup_teardown (fn, s_setup, s_teardown)

int
main (void)
{
    const struct CMUnitTest tests[] = {
        T (test_accept_ready_copies_spec),
        T (test_stage_is_store_only_and_abortable),
        T (test_accept_delayed_ready_at_due),
        T (test_lease_then_ack),
        T (test_ack_run_time_is_bounded_by_what_broker_saw),
        T (test_stale_and_unknown_tokens_change_nothing),
        T (test_lapsed_lease_requeues_and_fences_old_token),
        T (test_lapses_use_up_attempts),
        T (test_extend_moves_deadline),
        T (test_max_run_bounds_extensions),
        T (test_nack_transient_backs_off_with_jitter),
        T (test_nack_transient_without_jitter_waits_the_bound),
        T (test_nack_throttled_honours_retry_after),
        T (test_nack_not_yet_spends_no_attempt),
        T (test_deadline_expires_in_every_state),
        T (test_nack_permanent_dead_letters_at_once),
        T (test_transient_failures_dead_after_max_attempts),
        T (test_history_builds_up_inside_one_batch),
        T (test_long_error_text_is_bounded),
        T (test_only_the_holder_settles),
        T (test_release_worker_requeues_at_once),
        T (test_redrive_and_purge),
        T (test_random_walk_keeps_gauges),
        T (test_random_walk_survives_restarts),
        T (test_cancel_ready_and_delayed),
        T (test_cancel_leased_refuses_late_settlements),
        T (test_cancel_dead_letter),
        T (test_cancel_unknown_and_finished),
        T (test_cancel_survives_restart),
        T (test_cancelled_expire_after_retention),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
