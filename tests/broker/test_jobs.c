/*  test_jobs: the job state machine in broker/jobs.c, driven without sockets
    and without the real clock. Every test builds a lane, a tenant, a
    scheduler, a timer heap and fake workers, moves time by hand-made zl_now_t
    values, and checks after every step that each gauge (flow ready, delayed,
    in flight, dlq; lane and tenant depth and in flight; worker in flight;
    timer heap size; DLQ depth) agrees with a recount from the jobs. */
#include "config.h"
#include "dlq.h"
#include "hist.h"
#include "job.h"
#include "jobs.h"
#include "lane.h"
#include "log.h"
#include "rng.h"
#include "sched.h"
#include "timers.h"
#include "workers.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NO_SLOT UINT32_MAX
#define MAX_IDS 4096
#define MAX_EVENTS 256

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
    zl_job_state_t state; // the job's state when the listener ran
    uint32_t n_history;
} event_t;

typedef struct {
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
    zl_bworker_t *w1, *w2;
    uint64_t ids[MAX_IDS];
    size_t n_ids;
    uint64_t next_id;
    uint64_t next_lease;
    event_t events[MAX_EVENTS];
    size_t n_events;
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
    // the job is still whole when the listener runs
    assert_ptr_equal (zl_jobs_find (fx->jobs, job->id), job);
    if (ev == ZL_JOBS_EV_DEAD)
        assert_int_equal (job->state, ZL_JOB_DEAD);
    if (fx->n_events < MAX_EVENTS) // long runs keep only the first ones
        fx->events[fx->n_events] =
            (event_t){.ev = ev, .id = job->id, .state = job->state, .n_history = job->n_history};
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
s_setup (void **state)
{
    zl_log_set_level (ZL_LOG_WARN); // dead-letters and lapses log at INFO
    fx_t *fx = calloc (1, sizeof *fx);
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
    fx->jobs = zl_jobs_new (fx->sched, fx->timers, &fx->rng);
    zl_jobs_set_listener (fx->jobs, s_listener, fx);
    fx->workers = zl_workers_new ();
    fx->lane = zl_lanes_lookup (fx->lanes, "work");
    assert_non_null (fx->lane);
    fx->tenant = zl_lanes_tenant (fx->lanes, "acme");
    fx->tenant2 = zl_lanes_tenant (fx->lanes, "globex");
    fx->flow = zl_sched_flow (fx->sched, fx->lane, fx->tenant);
    fx->flow2 = zl_sched_flow (fx->sched, fx->lane, fx->tenant2);
    zl_peer_t p1 = s_peer ("peer-one"), p2 = s_peer ("peer-two");
    fx->w1 = zl_workers_add (fx->workers, &p1, "w1", &fx->lane, 1, 16, at (0).mono_ms);
    fx->w2 = zl_workers_add (fx->workers, &p2, "w2", &fx->lane, 1, 16, at (0).mono_ms);
    fx->next_id = 100;
    fx->next_lease = 0x5000;
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
    free (fx);
    return 0;
}

// ---------------------------------------------------------------- invariants
// Recount every gauge from the jobs themselves and compare.
static void
s_check_gauges (fx_t *fx)
{
    size_t n_flows;
    zl_flow_t **flows = zl_sched_flows (fx->sched, &n_flows);
    uint64_t ready[8] = {0}, delayed[8] = {0}, in_flight[8] = {0}, dlq[8] = {0};
    assert_true (n_flows <= 8);
    size_t live = 0, timed = 0, dead = 0;
    uint32_t w1_held = 0, w2_held = 0;
    for (size_t i = 0; i < fx->n_ids; i++) {
        zl_job_t *job = zl_jobs_find (fx->jobs, fx->ids[i]);
        if (!job)
            continue;
        live++;
        size_t f = 0;
        while (f < n_flows && flows[f] != job->flow)
            f++;
        assert_true (f < n_flows);
        switch (job->state) {
        case ZL_JOB_READY:
            ready[f]++;
            assert_int_equal (job->timer_idx, NO_SLOT);
            assert_int_equal (job->lease, 0);
            assert_null (job->worker);
            break;
        case ZL_JOB_DELAYED:
            delayed[f]++;
            timed++;
            assert_int_not_equal (job->timer_idx, NO_SLOT);
            assert_int_equal (job->lease, 0);
            assert_null (job->worker);
            break;
        case ZL_JOB_LEASED:
            in_flight[f]++;
            timed++;
            assert_int_not_equal (job->timer_idx, NO_SLOT);
            assert_int_not_equal (job->lease, 0);
            assert_non_null (job->worker);
            assert_true (job->attempt >= 1);
            assert_true (job->attempt <= job->max_attempts);
            if (job->worker == fx->w1)
                w1_held++;
            else if (job->worker == fx->w2)
                w2_held++;
            break;
        case ZL_JOB_DEAD:
            dlq[f]++;
            dead++;
            assert_int_equal (job->timer_idx, NO_SLOT);
            assert_null (job->worker);
            assert_ptr_equal (zl_dlq_find (zl_jobs_dlq (fx->jobs), job->id), job);
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
        // the flow's FIFO holds exactly its READY jobs
        uint64_t listed = 0;
        for (zl_job_t *j = flow->head; j; j = j->next) {
            assert_int_equal (j->state, ZL_JOB_READY);
            assert_ptr_equal (j->flow, flow);
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
    uint32_t listed = 0;
    for (zl_job_t *j = fx->w1->jobs; j; j = j->wnext)
        listed++;
    assert_int_equal (listed, w1_held);
    assert_int_equal (zl_timers_size (fx->timers), timed);
    assert_int_equal (zl_dlq_depth (zl_jobs_dlq (fx->jobs)), dead);
    assert_int_equal (zl_jobs_count (fx->jobs), live);
    assert_int_equal (zl_sched_has_ready (fx->sched, fx->lane) != 0,
                      ready[0] + ready[1] + (n_flows > 2 ? ready[2] : 0) > 0);
}

// ---------------------------------------------------------------- helpers
static zl_job_t *
s_accept_full (fx_t *fx, zl_flow_t *flow, const zl_job_spec_t *spec, zl_now_t now)
{
    uint64_t id = fx->next_id++;
    assert_true (fx->n_ids < MAX_IDS);
    fx->ids[fx->n_ids++] = id;
    zl_job_t *job = zl_jobs_accept (fx->jobs, id, spec, flow, now);
    assert_non_null (job);
    assert_int_equal (job->id, id);
    assert_ptr_equal (zl_jobs_find (fx->jobs, id), job);
    s_check_gauges (fx);
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
s_lease (fx_t *fx, zl_bworker_t *w, zl_job_t *expect, zl_now_t now)
{
    zl_job_t *job = zl_sched_pop (fx->sched, fx->lane);
    assert_non_null (job);
    if (expect)
        assert_ptr_equal (job, expect);
    zl_jobs_lease (fx->jobs, job, w, fx->next_lease++, now);
    s_check_gauges (fx);
    return job;
}

static zl_settle_rc_t
s_ack (fx_t *fx, zl_bworker_t *w, uint64_t id, uint64_t lease, uint64_t run_us, zl_now_t now)
{
    zl_ack_item_t ack = {.job_id = id, .lease = lease, .run_us = run_us};
    zl_settle_rc_t rc = zl_jobs_ack (fx->jobs, w, &ack, now);
    s_check_gauges (fx);
    return rc;
}

static zl_settle_rc_t
s_nack (fx_t *fx, zl_bworker_t *w, uint64_t id, uint64_t lease, zl_fail_class_t cls,
        const char *error, uint32_t retry_after_ms, zl_now_t now)
{
    zl_nack_item_t nack = {
        .job_id = id, .lease = lease, .cls = cls, .error = error, .retry_after_ms = retry_after_ms};
    zl_settle_rc_t rc = zl_jobs_nack (fx->jobs, w, &nack, now);
    s_check_gauges (fx);
    return rc;
}

static zl_settle_rc_t
s_extend (fx_t *fx, zl_bworker_t *w, uint64_t id, uint64_t lease, uint32_t lease_ms, zl_now_t now)
{
    zl_extend_item_t ext = {.job_id = id, .lease = lease, .lease_ms = lease_ms};
    zl_settle_rc_t rc = zl_jobs_extend (fx->jobs, w, &ext, now);
    s_check_gauges (fx);
    return rc;
}

static size_t
s_fire (fx_t *fx, zl_now_t now)
{
    size_t n = zl_jobs_fire_timers (fx->jobs, now);
    s_check_gauges (fx);
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
    char payload[] = "payload-bytes";
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
    // the spec's memory may go away: the job owns copies
    memset (payload, 'x', sizeof payload - 1);
    memset (key, 'x', sizeof key - 1);
    memset (hk, 'x', sizeof hk - 1);
    memset (hv, 'x', sizeof hv - 1);
    assert_int_equal (job->state, ZL_JOB_READY);
    assert_int_equal (job->attempt, 0);
    assert_int_equal (job->lease, 0);
    assert_int_equal (job->max_attempts, LANE_ATTEMPTS);
    assert_int_equal (job->lease_ms, LANE_LEASE_MS);
    assert_int_equal (job->max_run_ms, 0);
    assert_int_equal (job->enqueued_at_ms, at (0).wall_ms);
    assert_int_equal (job->payload_len, 13);
    assert_memory_equal (job->payload, "payload-bytes", 13);
    assert_string_equal (job->idempotency_key, "order-17");
    assert_int_equal (job->n_headers, 1);
    assert_string_equal (job->headers[0].key, "trace");
    assert_string_equal (job->headers[0].value, "abc123");
    assert_int_equal (job->n_history, 0);
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
    assert_null (j2->idempotency_key);
    assert_int_equal (j2->payload_len, 0);
    assert_int_equal (j2->max_attempts, 7);
    assert_int_equal (j2->lease_ms, 250);
    assert_int_equal (j2->max_run_ms, 900);
    assert_int_equal (fx->lane->depth, 2);
    assert_null (zl_jobs_find (fx->jobs, 99999));
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
    assert_null (zl_sched_pop (fx->sched, fx->lane));
    assert_int_equal (zl_jobs_next_timer (fx->jobs), at (510).mono_ms);

    assert_int_equal (s_fire (fx, at (10)), 0);
    assert_int_equal (s_fire (fx, at (509)), 0);
    assert_int_equal (job->state, ZL_JOB_DELAYED);
    assert_int_equal (s_fire (fx, at (510)), 1);
    assert_int_equal (job->state, ZL_JOB_READY);
    assert_int_equal (job->attempt, 0);
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
    uint64_t token = leased->lease;
    assert_int_not_equal (token, 0);
    assert_ptr_equal (leased->worker, fx->w1);
    assert_ptr_equal (fx->w1->jobs, leased);
    assert_int_equal (leased->lease_deadline_ms, at (20 + LANE_LEASE_MS).mono_ms);
    assert_int_equal (leased->due_ms, at (20 + LANE_LEASE_MS).mono_ms);
    assert_int_equal (leased->run_deadline_ms, 0);
    assert_int_equal (leased->started_at_ms, at (20).wall_ms);
    assert_int_equal (zl_jobs_next_timer (fx->jobs), at (20 + LANE_LEASE_MS).mono_ms);
    assert_int_equal (fx->flow->in_flight, 1);
    assert_int_equal (fx->lane->in_flight, 1);
    assert_int_equal (fx->tenant->in_flight, 1);
    assert_int_equal (fx->w1->in_flight, 1);
    assert_int_equal (fx->flow->ready, 0);
    assert_int_equal (zl_hist_quantile (zl_jobs_latency (fx->jobs, 0), 1.0) > 0, 1);

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
    assert_int_equal (s_ack (fx, fx->w1, a->id, a->lease, 1000000, at (40)), ZL_SETTLE_OK);
    assert_int_equal (fx->flow->run_us, 40000);
    // reports nothing: charged what the broker saw
    assert_int_equal (s_ack (fx, fx->w1, b->id, b->lease, 0, at (50)), ZL_SETTLE_OK);
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
    uint64_t token = job->lease;
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
    assert_int_equal (job->lease, token);
    assert_int_equal (job->due_ms, due);
    assert_int_equal (job->attempt, 1);
    assert_int_equal (job->n_history, 0);
    assert_ptr_equal (job->worker, fx->w1);
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
    uint64_t old = job->lease;

    assert_int_equal (s_fire (fx, at (100 + LANE_LEASE_MS - 1)), 0);
    assert_int_equal (job->state, ZL_JOB_LEASED);
    assert_int_equal (s_fire (fx, at (100 + LANE_LEASE_MS)), 1);
    assert_int_equal (job->state, ZL_JOB_READY);
    assert_int_equal (job->attempt, 1); // the lapsed attempt counts
    assert_int_equal (job->lease, 0);
    assert_null (job->worker);
    assert_int_equal (fx->w1->in_flight, 0);
    assert_int_equal (fx->flow->lease_expired, 1);
    assert_int_equal (job->n_history, 1);
    zl_attempt_rec_t *h = &job->history[0];
    assert_int_equal (h->attempt, 1);
    assert_int_equal (h->outcome, ZL_OUTCOME_LEASE_EXPIRED);
    assert_string_equal (h->worker, "w1");
    assert_int_equal (h->started_at_ms, at (100).wall_ms);
    assert_int_equal (h->ended_at_ms, at (100 + LANE_LEASE_MS).wall_ms);
    assert_non_null (strstr (h->error, "lease"));
    // the worker time the lapsed attempt held counts against the tenant's share
    assert_int_equal (fx->flow->run_us, (uint64_t)LANE_LEASE_MS * 1000);

    // the old holder's token is refused, before and after the next lease
    assert_int_equal (s_ack (fx, fx->w1, id, old, 0, at (1200)), ZL_SETTLE_STALE_LEASE);
    s_lease (fx, fx->w2, job, at (1300));
    assert_int_equal (job->attempt, 2);
    assert_int_not_equal (job->lease, old);
    uint64_t cur = job->lease;
    assert_int_equal (s_ack (fx, fx->w1, id, old, 0, at (1400)), ZL_SETTLE_STALE_LEASE);
    assert_int_equal (s_nack (fx, fx->w1, id, old, ZL_FAIL_PERMANENT, "late", 0, at (1400)),
                      ZL_SETTLE_STALE_LEASE);
    assert_int_equal (s_extend (fx, fx->w1, id, old, 5000, at (1400)), ZL_SETTLE_STALE_LEASE);
    assert_int_equal (job->state, ZL_JOB_LEASED);
    assert_ptr_equal (job->worker, fx->w2);
    assert_int_equal (job->lease, cur);
    assert_int_equal (job->n_history, 1);
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
    assert_int_equal (job->n_history, 2);
    assert_int_equal (job->history[0].outcome, ZL_OUTCOME_LEASE_EXPIRED);
    assert_int_equal (job->history[1].outcome, ZL_OUTCOME_LEASE_EXPIRED);
    assert_string_equal (job->history[1].worker, "w2");
    assert_int_equal (fx->n_events, 1);
    assert_int_equal (fx->events[0].ev, ZL_JOBS_EV_DEAD);
    assert_int_equal (fx->events[0].id, id);
    assert_int_equal (fx->flow->dlq, 1);
}

// ---------------------------------------------------------------- extend, max run
static void
test_extend_moves_deadline (void **state)
{
    fx_t *fx = *state;
    zl_job_t *job = s_accept (fx, 0, 0, at (0));
    s_lease (fx, fx->w1, job, at (0));
    uint64_t token = job->lease;
    assert_int_equal (s_extend (fx, fx->w1, job->id, token, 1500, at (800)), ZL_SETTLE_OK);
    assert_int_equal (job->lease_deadline_ms, at (2300).mono_ms);
    assert_int_equal (job->due_ms, at (2300).mono_ms);
    assert_int_equal (zl_jobs_next_timer (fx->jobs), at (2300).mono_ms);
    // the old deadline passes without effect
    assert_int_equal (s_fire (fx, at (LANE_LEASE_MS)), 0);
    assert_int_equal (s_fire (fx, at (2299)), 0);
    assert_int_equal (job->state, ZL_JOB_LEASED);
    assert_int_equal (job->lease, token);
    // lease_ms 0 asks for the job's own lease again; a shorter lease moves it earlier
    assert_int_equal (s_extend (fx, fx->w1, job->id, token, 0, at (2000)), ZL_SETTLE_OK);
    assert_int_equal (job->due_ms, at (2000 + LANE_LEASE_MS).mono_ms);
    assert_int_equal (s_extend (fx, fx->w1, job->id, token, 10, at (2100)), ZL_SETTLE_OK);
    assert_int_equal (job->due_ms, at (2110).mono_ms);
    assert_int_equal (s_fire (fx, at (2109)), 0);
    assert_int_equal (s_fire (fx, at (2110)), 1);
    assert_int_equal (job->state, ZL_JOB_READY);
    assert_int_equal (job->history[0].outcome, ZL_OUTCOME_LEASE_EXPIRED);
}

static void
test_max_run_bounds_extensions (void **state)
{
    fx_t *fx = *state;
    zl_job_spec_t spec = {
        .tenant = "acme", .lane = "work", .idempotency_key = "", .max_run_ms = 2500};
    zl_job_t *job = s_accept_full (fx, fx->flow, &spec, at (0));
    s_lease (fx, fx->w1, job, at (0));
    uint64_t token = job->lease;
    assert_int_equal (job->run_deadline_ms, at (2500).mono_ms);
    assert_int_equal (job->due_ms, at (LANE_LEASE_MS).mono_ms);
    assert_int_equal (s_extend (fx, fx->w1, job->id, token, 1000, at (900)), ZL_SETTLE_OK);
    assert_int_equal (job->due_ms, at (1900).mono_ms);
    // an extension past the run deadline is cut to it
    assert_int_equal (s_extend (fx, fx->w1, job->id, token, 1000, at (1800)), ZL_SETTLE_OK);
    assert_int_equal (job->due_ms, at (2500).mono_ms);
    assert_int_equal (s_fire (fx, at (2499)), 0);
    assert_int_equal (job->state, ZL_JOB_LEASED);
    // at the run deadline, an extension is refused and changes nothing
    assert_int_equal (s_extend (fx, fx->w1, job->id, token, 1000, at (2500)), ZL_SETTLE_MAX_RUN);
    assert_int_equal (s_extend (fx, fx->w1, job->id, token, 1000, at (2600)), ZL_SETTLE_MAX_RUN);
    assert_int_equal (job->state, ZL_JOB_LEASED);
    assert_int_equal (job->due_ms, at (2500).mono_ms);
    assert_int_equal (job->lease, token);
    // the run deadline fires: outcome MAX_RUN, retried at once
    assert_int_equal (s_fire (fx, at (2500)), 1);
    assert_int_equal (job->state, ZL_JOB_READY);
    assert_int_equal (job->n_history, 1);
    assert_int_equal (job->history[0].outcome, ZL_OUTCOME_MAX_RUN);
    assert_non_null (strstr (job->history[0].error, "max run"));
    // the old token is now simply stale
    assert_int_equal (s_extend (fx, fx->w1, job->id, token, 1000, at (2600)),
                      ZL_SETTLE_STALE_LEASE);
    // the next attempt gets a fresh run budget
    s_lease (fx, fx->w2, job, at (3000));
    assert_int_equal (job->run_deadline_ms, at (5500).mono_ms);

    // a max run shorter than the lease sets the first deadline
    zl_job_spec_t spec2 = {
        .tenant = "acme", .lane = "work", .idempotency_key = "", .max_run_ms = 300};
    zl_job_t *short_run = s_accept_full (fx, fx->flow, &spec2, at (3000));
    s_lease (fx, fx->w1, short_run, at (3000));
    assert_int_equal (short_run->due_ms, at (3300).mono_ms);
    assert_int_equal (s_fire (fx, at (3300)), 1);
    assert_int_equal (short_run->history[0].outcome, ZL_OUTCOME_MAX_RUN);
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
            assert_int_equal (s_nack (fx, fx->w1, jobs[i]->id, jobs[i]->lease, ZL_FAIL_TRANSIENT,
                                      "boom", 0, at (t + 5)),
                              ZL_SETTLE_OK);
            zl_job_t *j = jobs[i];
            assert_int_equal (j->attempt, attempt);
            assert_int_equal (j->history[attempt - 1].outcome, ZL_OUTCOME_TRANSIENT);
            assert_string_equal (j->history[attempt - 1].error, "boom");
            if (j->state == ZL_JOB_READY)
                delays[i] = 0; // a zero backoff is a valid draw
            else {
                assert_int_equal (j->state, ZL_JOB_DELAYED);
                delays[i] = j->due_ms - at (t + 5).mono_ms;
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
            s_nack (fx, fx->w1, job->id, job->lease, ZL_FAIL_TRANSIENT, "e", 0, at (t + 1)),
            ZL_SETTLE_OK);
        assert_int_equal (job->state, ZL_JOB_DELAYED);
        assert_int_equal (job->due_ms, at (t + 1).mono_ms + (int64_t)s_bound (attempt));
        assert_int_equal (s_fire (fx, at (t + 1 + (int64_t)s_bound (attempt) - 1)), 0);
        s_wait_ready (fx, job, &t);
    }
}

static void
test_nack_throttled_honours_retry_after (void **state)
{
    fx_t *fx = *state;
    zl_job_t *job = s_accept (fx, 0, 0, at (0));
    s_lease (fx, fx->w1, job, at (0));
    assert_int_equal (
        s_nack (fx, fx->w1, job->id, job->lease, ZL_FAIL_THROTTLED, "slow down", 7500, at (10)),
        ZL_SETTLE_OK);
    assert_int_equal (job->state, ZL_JOB_DELAYED);
    assert_int_equal (job->due_ms, at (7510).mono_ms);
    assert_int_equal (fx->flow->nacked_throttled, 1);
    assert_int_equal (job->history[0].outcome, ZL_OUTCOME_THROTTLED);
    assert_string_equal (job->history[0].error, "slow down");
    assert_int_equal (s_fire (fx, at (7509)), 0);
    assert_int_equal (job->state, ZL_JOB_DELAYED);
    assert_null (zl_sched_pop (fx->sched, fx->lane));
    assert_int_equal (s_fire (fx, at (7510)), 1);
    assert_int_equal (job->state, ZL_JOB_READY);

    // without a retry-after, a throttled nack backs off like a transient one
    s_lease (fx, fx->w1, job, at (8000));
    assert_int_equal (
        s_nack (fx, fx->w1, job->id, job->lease, ZL_FAIL_THROTTLED, "slow", 0, at (8000)),
        ZL_SETTLE_OK);
    if (job->state == ZL_JOB_DELAYED)
        assert_true ((uint64_t)(job->due_ms - at (8000).mono_ms) <= s_bound (2));
    else
        assert_int_equal (job->state, ZL_JOB_READY);
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
        s_nack (fx, fx->w1, id, job->lease, ZL_FAIL_PERMANENT, "bad input", 0, at (25)),
        ZL_SETTLE_OK);
    assert_int_equal (job->state, ZL_JOB_DEAD);
    assert_int_equal (job->attempt, 1);
    assert_int_equal (job->n_history, 1);
    assert_int_equal (job->history[0].outcome, ZL_OUTCOME_PERMANENT);
    assert_string_equal (job->history[0].error, "bad input");
    assert_string_equal (job->history[0].worker, "w1");
    assert_int_equal (job->history[0].started_at_ms, at (5).wall_ms);
    assert_int_equal (job->history[0].ended_at_ms, at (25).wall_ms);
    assert_int_equal (job->dead_at_ms, at (25).wall_ms);
    assert_int_equal (fx->flow->nacked_permanent, 1);
    assert_int_equal (fx->flow->dead_lettered, 1);
    assert_int_equal (fx->flow->dlq, 1);
    assert_int_equal (fx->lane->depth, 1); // only `other` is still queued
    assert_int_equal (fx->n_events, 1);
    assert_int_equal (fx->events[0].ev, ZL_JOBS_EV_DEAD);
    assert_int_equal (fx->events[0].id, id);
    assert_int_equal (fx->events[0].state, ZL_JOB_DEAD);
    assert_int_equal (fx->events[0].n_history, 1);
    zl_dlq_t *dlq = zl_jobs_dlq (fx->jobs);
    assert_ptr_equal (zl_dlq_first (dlq), job);
    assert_ptr_equal (zl_dlq_find (dlq, id), job);
    assert_null (zl_dlq_next (dlq, job));
    // still findable (admin shows it), no longer settleable
    assert_ptr_equal (zl_jobs_find (fx->jobs, id), job);
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
    zl_bworker_t *who[3] = {fx->w1, fx->w2, fx->w1};
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
        assert_int_equal (
            s_nack (fx, who[a], id, job->lease, ZL_FAIL_TRANSIENT, errors[a], 0, at (ended[a])),
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
    assert_int_equal (job->n_history, 3);
    for (int a = 0; a < 3; a++) {
        zl_attempt_rec_t *h = &job->history[a];
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
    assert_int_equal (s_nack (fx, fx->w1, job->id, job->lease, ZL_FAIL_PERMANENT, text, 0, at (1)),
                      ZL_SETTLE_OK);
    free (text);
    size_t kept = strlen (job->history[0].error);
    assert_true (kept > 0);
    assert_true (kept < len);
    // and a NULL error is kept as empty text
    zl_job_t *j2 = s_accept (fx, 0, 0, at (0));
    s_lease (fx, fx->w1, j2, at (0));
    assert_int_equal (s_nack (fx, fx->w1, j2->id, j2->lease, ZL_FAIL_PERMANENT, NULL, 0, at (1)),
                      ZL_SETTLE_OK);
    assert_string_equal (j2->history[0].error, "");
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
    uint64_t c_token = c->lease;
    uint64_t a_token = a->lease;
    assert_int_equal (fx->w1->in_flight, 4);

    size_t n = zl_jobs_release_worker (fx->jobs, fx->w1, ZL_OUTCOME_WORKER_DEAD,
                                       "worker silent for 3000 ms", at (500));
    s_check_gauges (fx);
    assert_int_equal (n, 4);
    assert_int_equal (fx->w1->in_flight, 0);
    assert_null (fx->w1->jobs);
    zl_job_t *requeued[3] = {a, b, d};
    for (int i = 0; i < 3; i++) {
        zl_job_t *j = requeued[i];
        assert_int_equal (j->state, ZL_JOB_READY); // at once, no backoff
        assert_int_equal (j->attempt, 1);
        assert_int_equal (j->n_history, 1);
        assert_int_equal (j->history[0].outcome, ZL_OUTCOME_WORKER_DEAD);
        assert_string_equal (j->history[0].worker, "w1");
        assert_string_equal (j->history[0].error, "worker silent for 3000 ms");
        assert_int_equal (j->history[0].ended_at_ms, at (500).wall_ms);
    }
    assert_int_equal (last->state, ZL_JOB_DEAD);
    assert_int_equal (last->history[0].outcome, ZL_OUTCOME_WORKER_DEAD);
    assert_int_equal (fx->n_events, 1);
    assert_int_equal (fx->events[0].id, last->id);
    // the other worker's job is untouched
    assert_int_equal (c->state, ZL_JOB_LEASED);
    assert_ptr_equal (c->worker, fx->w2);
    assert_int_equal (c->lease, c_token);
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
    s_nack (fx, fx->w1, a->id, a->lease, ZL_FAIL_PERMANENT, "x", 0, at (1));
    s_nack (fx, fx->w1, b->id, b->lease, ZL_FAIL_PERMANENT, "y", 0, at (2));
    zl_dlq_t *dlq = zl_jobs_dlq (fx->jobs);
    assert_int_equal (zl_dlq_depth (dlq), 2);
    assert_ptr_equal (zl_dlq_first (dlq), a);
    assert_ptr_equal (zl_dlq_next (dlq, a), b);
    assert_int_equal (fx->lane->depth, 0);

    zl_jobs_redrive (fx->jobs, a, at (100));
    s_check_gauges (fx);
    assert_int_equal (a->state, ZL_JOB_READY);
    assert_int_equal (a->attempt, 0);
    assert_int_equal (a->n_history, 0);
    assert_null (a->history);
    assert_int_equal (fx->flow->dlq, 1);
    assert_int_equal (fx->lane->depth, 1);
    assert_int_equal (fx->tenant->depth, 1);
    assert_ptr_equal (zl_dlq_first (dlq), b);
    assert_null (zl_dlq_find (dlq, a->id));
    // a fresh attempt count: it gets all its attempts again
    s_lease (fx, fx->w2, a, at (200));
    assert_int_equal (a->attempt, 1);
    s_nack (fx, fx->w2, a->id, a->lease, ZL_FAIL_TRANSIENT, "again", 0, at (201));
    assert_int_not_equal (a->state, ZL_JOB_DEAD);
    assert_int_equal (a->n_history, 1);

    size_t before = zl_jobs_count (fx->jobs);
    zl_jobs_purge (fx->jobs, b);
    s_check_gauges (fx);
    assert_null (zl_jobs_find (fx->jobs, b_id));
    assert_int_equal (zl_jobs_count (fx->jobs), before - 1);
    assert_int_equal (zl_dlq_depth (dlq), 0);
    assert_null (zl_dlq_first (dlq));
    assert_int_equal (fx->flow->dlq, 0);
    assert_int_equal (fx->lane->depth, 1);
}

// ---------------------------------------------------------------- a long random walk
// Random operations on many jobs across two tenants; the recount after each
// one catches any path that forgets a gauge.
static void
test_random_walk_keeps_gauges (void **state)
{
    fx_t *fx = *state;
    zl_rng_t r;
    zl_rng_seed (&r, 7);
    int64_t t = 0;
    for (int step = 0; step < 4000; step++) {
        t += (int64_t)zl_rng_range (&r, 120);
        int op = (int)zl_rng_range (&r, 9);
        zl_bworker_t *w = zl_rng_range (&r, 1) ? fx->w1 : fx->w2;
        if (op <= 1 && fx->n_ids < MAX_IDS - 1) {
            zl_job_spec_t spec = {.tenant = "x",
                                  .lane = "work",
                                  .idempotency_key = "",
                                  .delay_ms = zl_rng_range (&r, 3) == 0 ? 50 : 0,
                                  .max_attempts = (uint32_t)zl_rng_range (&r, 3) + 1};
            s_accept_full (fx, zl_rng_range (&r, 1) ? fx->flow : fx->flow2, &spec, at (t));
        } else if (op == 2 && zl_sched_has_ready (fx->sched, fx->lane)) {
            s_lease (fx, w, NULL, at (t));
        } else if (op >= 3 && op <= 6 && w->jobs) {
            zl_job_t *j = w->jobs;
            if (op == 3)
                assert_int_equal (s_ack (fx, w, j->id, j->lease, 10, at (t)), ZL_SETTLE_OK);
            else if (op == 4)
                assert_int_equal (s_nack (fx, w, j->id, j->lease,
                                          (zl_fail_class_t)zl_rng_range (&r, 3), "e",
                                          (uint32_t)zl_rng_range (&r, 200), at (t)),
                                  ZL_SETTLE_OK);
            else if (op == 5)
                s_extend (fx, w, j->id, j->lease, 500, at (t));
            else
                assert_int_equal (s_ack (fx, w, j->id, j->lease + 1, 0, at (t)),
                                  ZL_SETTLE_STALE_LEASE);
        } else if (op == 7) {
            s_fire (fx, at (t));
        } else if (op == 8 && zl_rng_range (&r, 20) == 0) {
            zl_jobs_release_worker (fx->jobs, w, ZL_OUTCOME_WORKER_DEAD, "gone", at (t));
            s_check_gauges (fx);
        } else {
            zl_job_t *dead = zl_dlq_first (zl_jobs_dlq (fx->jobs));
            if (dead && zl_rng_range (&r, 1))
                zl_jobs_redrive (fx->jobs, dead, at (t));
            else if (dead)
                zl_jobs_purge (fx->jobs, dead);
            s_check_gauges (fx);
        }
    }
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
    print_message ("walk: %zu jobs, acked %llu, dead %llu, lapsed %llu, transient %llu, "
                   "throttled %llu\n",
                   fx->n_ids, (unsigned long long)acked, (unsigned long long)dead,
                   (unsigned long long)lapsed, (unsigned long long)transient,
                   (unsigned long long)throttled);
    assert_true (acked > 20 && dead > 20 && lapsed > 20 && transient > 20 && throttled > 20);
}

#define T(fn) cmocka_unit_test_setup_teardown (fn, s_setup, s_teardown)

int
main (void)
{
    const struct CMUnitTest tests[] = {
        T (test_accept_ready_copies_spec),
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
        T (test_nack_permanent_dead_letters_at_once),
        T (test_transient_failures_dead_after_max_attempts),
        T (test_long_error_text_is_bounded),
        T (test_release_worker_requeues_at_once),
        T (test_redrive_and_purge),
        T (test_random_walk_keeps_gauges),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
