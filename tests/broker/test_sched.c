/*  test_sched: which ready job goes next (broker/scheduler.c). FIFO pops in
    global arrival order across tenants; WFQ shares dispatch by tenant weight,
    charges by worker time (so slow jobs do not buy more than their share),
    gives a tenant returning from idle no banked burst, and keeps FIFO order
    inside each tenant. Limits, under both policies on a simulated clock:
    tenant and per-lane tenant concurrency caps, the lane cap, tenant and
    lane token buckets, THROTTLED pauses, zl_sched_next_wake, and parked
    flows costing nothing per pop (10,000 of them, counted, not timed).
    Jobs are plain records; no sockets, no real clock. */
#include "config.h"
#include "job.h"
#include "lane.h"
#include "breaker.h"
#include "scheduler.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

// pops in tests that do not exercise caps, rate limits or pauses
#define S_NO_LIMITS_NOW (INT64_MAX / 4)
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TENANTS 8

// WFQ's quantum for the worlds the tests make: the WFQ tests run twice, with
// the default quantum and with 0 (exact start-time fair queuing).
static uint64_t s_quantum_us = ZL_SCHED_QUANTUM_US;

typedef struct {
    zl_broker_config_t cfg;
    zl_lanes_t *lanes;
    zl_sched_t *sched;
    zl_lane_t *lane;
    size_t n_tenants;
    zl_tenant_t *tenant[MAX_TENANTS];
    zl_flow_t *flow[MAX_TENANTS];
    uint64_t last_seq[MAX_TENANTS];    // FIFO check per tenant
    uint64_t next_seq;                 // the caller's ready order, as jobs.c keeps it
    uint64_t flow_seq[2][MAX_TENANTS]; // FIFO check per (lane, tenant) in the limit tests
    zl_job_t *pool;
    size_t n_pool, used;
} world_t;

static world_t *
s_world (zl_sched_policy_t policy, const uint32_t *weights, size_t n_tenants, size_t n_jobs)
{
    world_t *w = calloc (1, sizeof *w);
    zl_broker_config_defaults (&w->cfg);
    zl_broker_config_lane (&w->cfg, "lane");
    zl_broker_config_lane (&w->cfg, "other");
    char name[32];
    for (size_t i = 0; i < n_tenants; i++) {
        snprintf (name, sizeof name, "t%zu", i);
        zl_broker_config_tenant (&w->cfg, name)->weight = weights[i];
    }
    w->lanes = zl_lanes_new (&w->cfg);
    w->sched = zl_sched_new (policy);
    zl_sched_set_quantum (w->sched, s_quantum_us);
    w->lane = zl_lanes_lookup (w->lanes, "lane");
    w->n_tenants = n_tenants;
    for (size_t i = 0; i < n_tenants; i++) {
        snprintf (name, sizeof name, "t%zu", i);
        w->tenant[i] = zl_lanes_tenant (w->lanes, name);
        assert_int_equal (w->tenant[i]->cfg.weight, weights[i]);
        w->flow[i] = zl_sched_flow (w->sched, w->lane, w->tenant[i]);
    }
    w->pool = calloc (n_jobs, sizeof (zl_job_t));
    for (size_t i = 0; i < n_jobs; i++)
        w->pool[i].timer_idx = UINT32_MAX; // no timer (as jobs.c makes them)
    w->n_pool = n_jobs;
    return w;
}

static void
s_world_destroy (world_t **w_p)
{
    world_t *w = *w_p;
    zl_sched_destroy (&w->sched);
    assert_null (w->sched);
    zl_lanes_destroy (&w->lanes);
    zl_broker_config_free (&w->cfg);
    free (w->pool);
    free (w);
    *w_p = NULL;
}

// Push a job that (again) became ready: the caller gives it the next ready
// sequence number, as jobs.c does (zl_jobs_take_id) before zl_sched_push.
static void
s_push (world_t *w, zl_job_t *job)
{
    job->seq = ++w->next_seq;
    zl_sched_push (w->sched, job);
}

// Push a new job for tenant `t`.
static zl_job_t *
s_push_new (world_t *w, size_t t)
{
    assert_true (w->used < w->n_pool);
    zl_job_t *job = &w->pool[w->used++];
    job->id = w->used;
    job->flow = w->flow[t];
    job->state = ZL_JOB_READY;
    s_push (w, job);
    return job;
}

// Pop the next job; return its tenant index, checking FIFO inside the tenant.
static size_t
s_pop (world_t *w, zl_job_t **job_p)
{
    zl_job_t *job = zl_sched_pop (w->sched, w->lane, S_NO_LIMITS_NOW);
    assert_non_null (job);
    size_t t = 0;
    while (t < w->n_tenants && w->flow[t] != job->flow)
        t++;
    assert_true (t < w->n_tenants);
    assert_true (job->seq > w->last_seq[t]); // FIFO within one tenant
    w->last_seq[t] = job->seq;
    *job_p = job;
    return t;
}

// ---------------------------------------------------------------- basics
static void
test_empty_and_flows (void **state)
{
    (void)state;
    uint32_t weights[2] = {1, 1};
    world_t *w = s_world (ZL_SCHED_WFQ, weights, 2, 16);
    assert_int_equal (zl_sched_policy (w->sched), ZL_SCHED_WFQ);
    assert_false (zl_sched_has_ready (w->sched, w->lane));
    assert_null (zl_sched_pop (w->sched, w->lane, S_NO_LIMITS_NOW));
    // a lane with no flow at all
    zl_lane_t *other = zl_lanes_lookup (w->lanes, "other");
    assert_false (zl_sched_has_ready (w->sched, other));
    assert_null (zl_sched_pop (w->sched, other, S_NO_LIMITS_NOW));
    // one flow per (lane, tenant), found again
    assert_ptr_equal (zl_sched_flow (w->sched, w->lane, w->tenant[0]), w->flow[0]);
    assert_ptr_not_equal (w->flow[0], w->flow[1]);
    zl_flow_t *of = zl_sched_flow (w->sched, other, w->tenant[0]);
    assert_ptr_not_equal (of, w->flow[0]);
    size_t n;
    zl_flow_t **flows = zl_sched_flows (w->sched, &n);
    assert_int_equal (n, 3);
    assert_ptr_equal (flows[2], of);
    // a job in the other lane does not show in this one
    zl_job_t *j = &w->pool[w->used++];
    j->id = 99;
    j->flow = of;
    s_push (w, j);
    assert_int_equal (of->ready, 1);
    assert_false (zl_sched_has_ready (w->sched, w->lane));
    assert_true (zl_sched_has_ready (w->sched, other));
    assert_ptr_equal (zl_sched_pop (w->sched, other, S_NO_LIMITS_NOW), j);
    assert_int_equal (of->ready, 0);
    assert_null (of->head);
    assert_int_equal (of->q_mask, 0);
    assert_false (zl_sched_has_ready (w->sched, other));
    s_world_destroy (&w);
}

static void
test_fifo_global_arrival_order (void **state)
{
    (void)state;
    uint32_t weights[3] = {1, 5, 9}; // weights do not matter under FIFO
    world_t *w = s_world (ZL_SCHED_FIFO, weights, 3, 3000);
    assert_int_equal (zl_sched_policy (w->sched), ZL_SCHED_FIFO);
    // irregular arrivals across tenants, pops interleaved with pushes
    uint64_t seed = 12345;
    uint64_t next_expected = 1;
    for (int round = 0; round < 3000; round++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        size_t t = (size_t)(seed >> 33) % 3;
        s_push_new (w, t);
        if ((seed >> 20) % 3 == 0) {
            zl_job_t *job;
            s_pop (w, &job);
            assert_int_equal (job->id, next_expected++);
            zl_sched_charge (w->sched, job, (t + 1) * 100000); // no effect on order
        }
    }
    zl_job_t *job;
    while (zl_sched_has_ready (w->sched, w->lane)) {
        s_pop (w, &job);
        assert_int_equal (job->id, next_expected++);
    }
    assert_int_equal (next_expected, 3001);
    for (size_t t = 0; t < 3; t++)
        assert_int_equal (w->flow[t]->ready, 0);
    // charges are still accounted for stats
    assert_true (w->flow[0]->run_us > 0);
    s_world_destroy (&w);
}

// FIFO orders by the sequence the caller set (a retried or recovered job
// carries its own), not by the order of the zl_sched_push calls.
static void
test_fifo_orders_by_caller_seq (void **state)
{
    (void)state;
    uint32_t weights[2] = {1, 1};
    world_t *w = s_world (ZL_SCHED_FIFO, weights, 2, 8);
    static const struct {
        size_t t;
        uint64_t seq;
    } in[] = {{0, 50}, {1, 20}, {0, 60}, {1, 70}, {1, 80}, {0, 75}};
    zl_job_t *jobs[6];
    for (size_t i = 0; i < 6; i++) {
        jobs[i] = &w->pool[w->used++];
        jobs[i]->id = i + 1;
        jobs[i]->flow = w->flow[in[i].t];
        jobs[i]->seq = in[i].seq;
        zl_sched_push (w->sched, jobs[i]);
    }
    // heads 50 (t0) and 20 (t1): t1 first; then 50, 60 (t0), 70 (t1), 75 (t0), 80 (t1)
    const size_t expect[6] = {1, 0, 2, 3, 5, 4};
    for (size_t i = 0; i < 6; i++) {
        zl_job_t *job = zl_sched_pop (w->sched, w->lane, S_NO_LIMITS_NOW);
        assert_non_null (job);
        if (job != jobs[expect[i]])
            fail_msg ("pop %zu: got job seq %llu, expected seq %llu", i,
                      (unsigned long long)job->seq, (unsigned long long)in[expect[i]].seq);
    }
    assert_null (zl_sched_pop (w->sched, w->lane, S_NO_LIMITS_NOW));
    s_world_destroy (&w);
}

// ---------------------------------------------------------------- priorities
// Push a new job for tenant `t` at priority `p`.
static zl_job_t *
s_push_prio (world_t *w, size_t t, uint8_t p)
{
    assert_true (w->used < w->n_pool);
    zl_job_t *job = &w->pool[w->used++];
    job->id = w->used;
    job->flow = w->flow[t];
    job->state = ZL_JOB_READY;
    job->priority = p;
    s_push (w, job);
    return job;
}

// Within one flow the highest priority goes first, and within a priority
// the order of arrival; a retried job goes behind its priority's others; a
// job taken out (a cancel) from the head lets the next priority lead. The
// oldest ready job is the oldest of any priority.
static void
test_priority_within_a_flow (void **state)
{
    (void)state;
    uint32_t weights[1] = {1};
    zl_sched_policy_t policies[] = {ZL_SCHED_FIFO, ZL_SCHED_WFQ};
    for (size_t k = 0; k < 2; k++) {
        world_t *w = s_world (policies[k], weights, 1, 16);
        uint8_t prio[] = {5, 9, 0, 9, 5, 3};
        zl_job_t *j[6];
        for (int i = 0; i < 6; i++) {
            j[i] = s_push_prio (w, 0, prio[i]);
            j[i]->ready_ms = 100 + i;
        }
        assert_int_equal (w->flow[0]->ready, 6);
        assert_int_equal (zl_sched_oldest_ready_ms (w->flow[0]), 100); // j[0], priority 5
        zl_job_t *want[] = {j[1], j[3], j[0], j[4], j[5], j[2]};
        zl_job_t *got = zl_sched_pop (w->sched, w->lane, S_NO_LIMITS_NOW);
        assert_ptr_equal (got, want[0]);
        s_push (w, got); // retried: behind the other 9
        assert_ptr_equal (zl_sched_pop (w->sched, w->lane, S_NO_LIMITS_NOW), j[3]);
        assert_ptr_equal (zl_sched_pop (w->sched, w->lane, S_NO_LIMITS_NOW), j[1]);
        for (int i = 2; i < 6; i++)
            assert_ptr_equal (zl_sched_pop (w->sched, w->lane, S_NO_LIMITS_NOW), want[i]);
        assert_null (zl_sched_pop (w->sched, w->lane, S_NO_LIMITS_NOW));
        assert_int_equal (zl_sched_oldest_ready_ms (w->flow[0]), -1);
        // a removed head: the next priority leads
        zl_job_t *a = s_push_prio (w, 0, 1), *b = s_push_prio (w, 0, 8);
        zl_sched_remove (w->sched, b);
        assert_ptr_equal (w->flow[0]->head, a);
        assert_ptr_equal (zl_sched_pop (w->sched, w->lane, S_NO_LIMITS_NOW), a);
        assert_int_equal (w->flow[0]->q_mask, 0);
        assert_int_equal (w->flow[0]->ready, 0);
        s_world_destroy (&w);
    }
}

// A job pushed with a sequence below its priority's tail (an ordering key's
// next job keeps its id) waits in the late heap, and the flow still gives
// its jobs in sequence order within a priority, a higher priority first;
// such a job can be taken out wherever it waits, and leaves no slot behind.
static void
test_late_pushes_leave_in_sequence_order (void **state)
{
    (void)state;
    uint32_t weights[1] = {1};
    world_t *w = s_world (ZL_SCHED_WFQ, weights, 1, 16);
    uint64_t seqs[] = {10, 20, 30, 15, 25, 12, 40};
    uint8_t prio[] = {5, 5, 5, 5, 5, 9, 5};
    zl_job_t *j[7];
    for (int i = 0; i < 7; i++) {
        j[i] = &w->pool[w->used++];
        j[i]->id = (uint64_t)i + 1;
        j[i]->flow = w->flow[0];
        j[i]->state = ZL_JOB_READY;
        j[i]->priority = prio[i];
        j[i]->seq = seqs[i];
        j[i]->ready_ms = 100 + (int64_t)seqs[i];
        zl_sched_push (w->sched, j[i]);
    }
    assert_int_equal (w->flow[0]->ready, 7);
    assert_ptr_equal (w->flow[0]->head, j[5]);          // 12 at priority 9: late, and first
    assert_int_not_equal (j[3]->timer_idx, UINT32_MAX); // 15: in the late heap
    assert_int_equal (j[6]->timer_idx, UINT32_MAX);     // 40: in order, in the FIFO
    assert_int_equal (zl_sched_oldest_ready_ms (w->flow[0]), 110);
    zl_sched_remove (w->sched, j[4]); // 25 leaves from the late heap
    assert_int_equal (j[4]->timer_idx, UINT32_MAX);
    zl_job_t *want[] = {j[5], j[0], j[3], j[1], j[2], j[6]}; // 12 (9), then 10 15 20 30 40
    for (int i = 0; i < 6; i++) {
        zl_job_t *got = zl_sched_pop (w->sched, w->lane, S_NO_LIMITS_NOW);
        assert_ptr_equal (got, want[i]);
        assert_int_equal (got->timer_idx, UINT32_MAX); // free for a lease's timer
    }
    assert_null (zl_sched_pop (w->sched, w->lane, S_NO_LIMITS_NOW));
    assert_int_equal (w->flow[0]->ready, 0);
    assert_null (w->flow[0]->head);
    s_world_destroy (&w);
}

// Across tenants weighted fair queuing decides as before: a tenant whose
// jobs all have priority 9 gets no more worker time than one at priority 0
// with the same weight, and weights 1:3 still split 1:3 whatever the
// priorities.
static void
test_priority_does_not_buy_share (void **state)
{
    (void)state;
    uint32_t weights[2] = {1, 1};
    world_t *w = s_world (ZL_SCHED_WFQ, weights, 2, 64);
    for (int k = 0; k < 8; k++) {
        s_push_prio (w, 0, 9);
        s_push_prio (w, 1, 0);
    }
    uint64_t count[2] = {0};
    for (int i = 0; i < 20000; i++) {
        zl_job_t *job = zl_sched_pop (w->sched, w->lane, S_NO_LIMITS_NOW);
        assert_non_null (job);
        size_t t = job->flow == w->flow[0] ? 0 : 1;
        count[t]++;
        zl_sched_charge (w->sched, job, 1000);
        s_push (w, job);
    }
    double ratio = (double)count[0] / (double)count[1];
    if (fabs (ratio - 1.0) > 0.02)
        fail_msg ("priority 9 vs 0 at equal weight: %llu vs %llu dispatches",
                  (unsigned long long)count[0], (unsigned long long)count[1]);
    s_world_destroy (&w);

    uint32_t w13[2] = {1, 3};
    w = s_world (ZL_SCHED_WFQ, w13, 2, 64);
    for (int k = 0; k < 8; k++) {
        s_push_prio (w, 0, 9);
        s_push_prio (w, 1, (uint8_t)(k % 10));
    }
    count[0] = count[1] = 0;
    for (int i = 0; i < 40000; i++) {
        zl_job_t *job = zl_sched_pop (w->sched, w->lane, S_NO_LIMITS_NOW);
        size_t t = job->flow == w->flow[0] ? 0 : 1;
        count[t]++;
        zl_sched_charge (w->sched, job, 1000);
        s_push (w, job);
    }
    ratio = (double)count[1] / (double)count[0];
    if (fabs (ratio - 3.0) > 0.06)
        fail_msg ("weights 1:3 with priorities: %llu vs %llu dispatches",
                  (unsigned long long)count[0], (unsigned long long)count[1]);
    s_world_destroy (&w);
}

// ---------------------------------------------------------------- WFQ shares
// Keep every tenant backlogged: pop, charge `cost[t]`, push the job back.
static void
s_run_backlogged (world_t *w, const uint64_t *cost, size_t pops, uint64_t *count, uint64_t *time)
{
    for (size_t i = 0; i < pops; i++) {
        zl_job_t *job;
        size_t t = s_pop (w, &job);
        count[t]++;
        time[t] += cost[t];
        zl_sched_charge (w->sched, job, cost[t]);
        s_push (w, job);
    }
}

static void
test_wfq_weights_1_2_4 (void **state)
{
    (void)state;
    uint32_t weights[3] = {1, 2, 4};
    world_t *w = s_world (ZL_SCHED_WFQ, weights, 3, 64);
    for (int k = 0; k < 8; k++)
        for (size_t t = 0; t < 3; t++)
            s_push_new (w, t);
    uint64_t cost[3] = {2500, 2500, 2500}; // not the default estimate
    uint64_t count[3] = {0}, time[3] = {0};
    s_run_backlogged (w, cost, 70000, count, time);
    double expect[3] = {10000, 20000, 40000};
    for (size_t t = 0; t < 3; t++) {
        double ratio = (double)count[t] / expect[t];
        if (fabs (ratio - 1.0) > 0.02)
            fail_msg ("tenant %zu (weight %u): %llu dispatches, expected %.0f +- 2%%", t,
                      weights[t], (unsigned long long)count[t], expect[t]);
    }
    // and already over a short horizon
    memset (count, 0, sizeof count);
    s_run_backlogged (w, cost, 700, count, time);
    assert_true (count[0] >= 95 && count[0] <= 105);
    assert_true (count[1] >= 195 && count[1] <= 205);
    assert_true (count[2] >= 395 && count[2] <= 405);
    s_world_destroy (&w);
}

static void
test_wfq_charges_worker_time_not_job_count (void **state)
{
    (void)state;
    uint32_t weights[2] = {1, 1};
    world_t *w = s_world (ZL_SCHED_WFQ, weights, 2, 64);
    for (int k = 0; k < 8; k++)
        for (size_t t = 0; t < 2; t++)
            s_push_new (w, t);
    uint64_t cost[2] = {10000, 1000}; // tenant 0's jobs are 10x as slow
    uint64_t count[2] = {0}, time[2] = {0};
    s_run_backlogged (w, cost, 22000, count, time);
    double time_ratio = (double)time[0] / (double)time[1];
    if (fabs (time_ratio - 1.0) > 0.02)
        fail_msg ("worker time %llu vs %llu (ratio %.3f): slow jobs bought more than their share",
                  (unsigned long long)time[0], (unsigned long long)time[1], time_ratio);
    double count_ratio = (double)count[1] / (double)count[0];
    assert_true (count_ratio > 9.5 && count_ratio < 10.5);
    assert_int_equal (w->flow[0]->run_us, time[0]);
    assert_int_equal (w->flow[1]->run_us, time[1]);
    s_world_destroy (&w);
}

// Charges arrive late (on ack, while other jobs are in flight), so dispatch
// uses the flow's running estimate; the share must still converge.
static void
test_wfq_late_charges_with_weights (void **state)
{
    (void)state;
    uint32_t weights[3] = {1, 1, 2};
    world_t *w = s_world (ZL_SCHED_WFQ, weights, 3, 128);
    for (int k = 0; k < 30; k++)
        for (size_t t = 0; t < 3; t++)
            s_push_new (w, t);
    uint64_t cost[3] = {20000, 1000, 5000};
    enum { SLOTS = 16, POPS = 60000 };
    zl_job_t *slot[SLOTS];
    size_t slot_t[SLOTS];
    uint64_t time[3] = {0};
    for (int s = 0; s < SLOTS; s++)
        slot_t[s] = s_pop (w, &slot[s]);
    for (int i = 0; i < POPS; i++) {
        int s = i % SLOTS; // the oldest in flight completes
        size_t t = slot_t[s];
        time[t] += cost[t];
        zl_sched_charge (w->sched, slot[s], cost[t]);
        s_push (w, slot[s]);
        slot_t[s] = s_pop (w, &slot[s]);
    }
    // worker time by weight: 1 : 1 : 2
    double unit = (double)(time[0] + time[1] + time[2]) / 4.0;
    double expect[3] = {unit, unit, 2 * unit};
    for (size_t t = 0; t < 3; t++) {
        double ratio = (double)time[t] / expect[t];
        if (fabs (ratio - 1.0) > 0.03)
            fail_msg ("tenant %zu: worker time %.0f, expected %.0f +- 3%%", t, (double)time[t],
                      expect[t]);
    }
    s_world_destroy (&w);
}

// Dispatch charges a running estimate; the real cost, charged later, must
// replace it at once -- also for a flow that is still backlogged -- so that one
// expensive job is paid for in full before its tenant is picked again.
static void
test_wfq_charge_corrects_the_estimate (void **state)
{
    (void)state;
    uint32_t weights[2] = {1, 1};
    world_t *w = s_world (ZL_SCHED_WFQ, weights, 2, 64);
    for (int k = 0; k < 8; k++)
        for (size_t t = 0; t < 2; t++)
            s_push_new (w, t);
    // warm up with equal cheap jobs
    uint64_t cheap[2] = {1000, 1000}, count[2] = {0}, time[2] = {0};
    s_run_backlogged (w, cheap, 100, count, time);
    // tenant 1's next job turns out to take 100x as long
    zl_job_t *job;
    size_t t;
    do {
        t = s_pop (w, &job);
        zl_sched_charge (w->sched, job, 1000);
        s_push (w, job);
    } while (t != 0);
    t = s_pop (w, &job);
    assert_int_equal (t, 1);
    zl_sched_charge (w->sched, job, 100000);
    s_push (w, job);
    // tenant 0 now gets about 100 jobs (100 ms of its own) before tenant 1 again
    int zeros = 0;
    while ((t = s_pop (w, &job)) == 0) {
        zeros++;
        zl_sched_charge (w->sched, job, 1000);
        s_push (w, job);
        assert_true (zeros < 200);
    }
    if (zeros < 95 || zeros > 105)
        fail_msg ("after a 100 ms job of tenant 1, tenant 0 got %d jobs of 1 ms (expected ~100)",
                  zeros);
    s_world_destroy (&w);
}

static void
test_wfq_idle_tenant_gets_no_burst (void **state)
{
    (void)state;
    uint32_t weights[3] = {1, 1, 1};
    world_t *w = s_world (ZL_SCHED_WFQ, weights, 3, 2000);
    for (int k = 0; k < 8; k++) {
        s_push_new (w, 0);
        s_push_new (w, 1);
    }
    uint64_t cost[3] = {1000, 1000, 1000};
    uint64_t count[3] = {0}, time[3] = {0};
    s_run_backlogged (w, cost, 10000, count, time);
    assert_int_equal (count[2], 0);
    assert_true (count[0] >= 4990 && count[0] <= 5010);
    // tenant 2 wakes up with a deep backlog
    for (int k = 0; k < 1000; k++)
        s_push_new (w, 2);
    enum { N = 300 };
    uint64_t picks[3] = {0};
    int run = 0, longest_run = 0;
    for (int i = 0; i < N; i++) {
        zl_job_t *job;
        size_t t = s_pop (w, &job);
        picks[t]++;
        run = t == 2 ? run + 1 : 0;
        longest_run = run > longest_run ? run : longest_run;
        zl_sched_charge (w->sched, job, cost[t]);
        if (t != 2)
            s_push (w, job); // the others stay backlogged
        if (i == 29)
            assert_true (picks[2] <= 10 + 2); // no burst in the first picks
    }
    // its fair share (one third) and no more; and it is not starved either
    if (picks[2] > N / 3 + 3 || picks[2] < N / 3 - 3)
        fail_msg ("returning tenant got %llu of %d picks (fair share %d)",
                  (unsigned long long)picks[2], N, N / 3);
    assert_true (longest_run <= 2);
    s_world_destroy (&w);
}

static void
test_wfq_fifo_within_tenant_and_single_flow (void **state)
{
    (void)state;
    uint32_t weights[1] = {3};
    world_t *w = s_world (ZL_SCHED_WFQ, weights, 1, 500);
    for (int k = 0; k < 500; k++)
        s_push_new (w, 0);
    assert_int_equal (w->flow[0]->ready, 500);
    for (uint64_t k = 1; k <= 500; k++) {
        zl_job_t *job;
        s_pop (w, &job);
        assert_int_equal (job->id, k);
        zl_sched_charge (w->sched, job, k * 10);
    }
    assert_false (zl_sched_has_ready (w->sched, w->lane));
    assert_int_equal (w->flow[0]->ready, 0);
    // a charge for a flow that is no longer backlogged is fine
    assert_int_equal (w->flow[0]->run_us, 10 * 500 * 501 / 2);
    s_world_destroy (&w);
}

static void
test_wfq_many_tenants_equal_share (void **state)
{
    (void)state;
    uint32_t weights[MAX_TENANTS] = {1, 1, 1, 1, 1, 1, 1, 1};
    world_t *w = s_world (ZL_SCHED_WFQ, weights, MAX_TENANTS, 64);
    for (int k = 0; k < 4; k++)
        for (size_t t = 0; t < MAX_TENANTS; t++)
            s_push_new (w, t);
    uint64_t cost[MAX_TENANTS] = {100, 200, 400, 800, 1600, 3200, 6400, 12800};
    uint64_t count[MAX_TENANTS] = {0}, time[MAX_TENANTS] = {0};
    s_run_backlogged (w, cost, 80000, count, time);
    double total = 0;
    for (size_t t = 0; t < MAX_TENANTS; t++)
        total += (double)time[t];
    for (size_t t = 0; t < MAX_TENANTS; t++)
        assert_true (fabs ((double)time[t] / (total / MAX_TENANTS) - 1.0) < 0.03);
    s_world_destroy (&w);
}

// Backlogged tenants with random job costs and weights 1:2:3, each charged
// at once: after every dispatch, the normalized service (worker time /
// weight) of any two tenants differs by at most one quantum plus one job's
// cost over the weight (the bound scheduler.h promises; exact SFQ's bound with
// quantum 0).
static void
test_wfq_lag_is_bounded_by_quantum_plus_job (void **state)
{
    (void)state;
    uint32_t weights[3] = {1, 2, 3};
    world_t *w = s_world (ZL_SCHED_WFQ, weights, 3, 64);
    for (int k = 0; k < 8; k++)
        for (size_t t = 0; t < 3; t++)
            s_push_new (w, t);
    enum { MAX_COST = 3000 };
    double bound = (double)s_quantum_us + MAX_COST; // weight >= 1
    uint64_t time[3] = {0};
    srand (7);
    double worst = 0;
    for (int i = 0; i < 50000; i++) {
        zl_job_t *job;
        size_t t = s_pop (w, &job);
        uint64_t cost = 1 + (uint64_t)(rand () % MAX_COST);
        time[t] += cost;
        zl_sched_charge (w->sched, job, cost);
        s_push (w, job);
        for (size_t a = 0; a < 3; a++)
            for (size_t b = 0; b < 3; b++) {
                double lag = (double)time[a] / weights[a] - (double)time[b] / weights[b];
                worst = lag > worst ? lag : worst;
            }
        if (worst > bound)
            fail_msg (
                "quantum %llu: after %d dispatches one tenant leads another by %.0f us/weight "
                "(bound %.0f)",
                (unsigned long long)s_quantum_us, i + 1, worst, bound);
    }
    s_world_destroy (&w);
}

// Inside one quantum, flows go in the arrival order of their head jobs: with
// jobs far cheaper than the quantum, a backlog that arrived tenant by tenant
// leaves in that order (the store then writes in id order). Exact SFQ
// (quantum 0) alternates between the tenants instead.
static void
test_wfq_quantum_serves_arrival_order (void **state)
{
    (void)state;
    uint32_t weights[3] = {1, 1, 1};
    world_t *w = s_world (ZL_SCHED_WFQ, weights, 3, 30);
    zl_sched_set_quantum (w->sched, 1000);
    for (size_t t = 0; t < 3; t++)
        for (int k = 0; k < 10; k++)
            s_push_new (w, t); // ids 1..10 tenant 0, 11..20 tenant 1, ...
    for (uint64_t id = 1; id <= 30; id++) {
        zl_job_t *job;
        s_pop (w, &job);
        assert_int_equal (job->id, id);
        zl_sched_charge (w->sched, job, 10); // 10 jobs = 100 us, in one quantum
    }
    s_world_destroy (&w);

    w = s_world (ZL_SCHED_WFQ, weights, 3, 30);
    zl_sched_set_quantum (w->sched, 0);
    for (size_t t = 0; t < 3; t++)
        for (int k = 0; k < 10; k++)
            s_push_new (w, t);
    for (int i = 0; i < 30; i++) {
        zl_job_t *job;
        size_t t = s_pop (w, &job);
        assert_int_equal (t, (size_t)i % 3);
        zl_sched_charge (w->sched, job, 10);
    }
    s_world_destroy (&w);
}

// The quantum bounds what arrival order may buy: tenant 0's 1,000 jobs of
// 100 us arrived before tenant 1's, yet tenant 1 starts within one quantum
// (10 of tenant 0's jobs), and from then on they alternate quantum by quantum.
static void
test_wfq_quantum_bounds_arrival_advantage (void **state)
{
    (void)state;
    uint32_t weights[2] = {1, 1};
    world_t *w = s_world (ZL_SCHED_WFQ, weights, 2, 2000);
    zl_sched_set_quantum (w->sched, 1000);
    for (int k = 0; k < 1000; k++)
        s_push_new (w, 0);
    for (int k = 0; k < 1000; k++)
        s_push_new (w, 1);
    int first_of_1 = -1, longest = 0, run = 0;
    size_t prev = 2;
    for (int i = 0; i < 1000; i++) {
        zl_job_t *job;
        size_t t = s_pop (w, &job);
        if (t == 1 && first_of_1 < 0)
            first_of_1 = i;
        run = t == prev ? run + 1 : 1;
        prev = t;
        longest = run > longest ? run : longest;
        zl_sched_charge (w->sched, job, 100);
    }
    assert_true (first_of_1 >= 0 && first_of_1 <= 10);
    assert_true (longest <= 11);
    s_world_destroy (&w);
}

// Across lanes (zl_sched_next): a worker serving two lanes of weights 1 and
// 2 splits its worker time 1:2, although one lane's jobs cost 10x the
// other's. Under FIFO nothing estimates a job's cost at dispatch, so only the
// charge on completion makes the split right.
static void
s_lanes_share (zl_sched_policy_t policy)
{
    uint32_t weights[2] = {1, 1};
    world_t *w = s_world (policy, weights, 2, 64);
    zl_lane_t *other = zl_lanes_lookup (w->lanes, "other");
    w->lane->cfg.weight = 1;
    other->cfg.weight = 2;
    w->flow[1] = zl_sched_flow (w->sched, other, w->tenant[1]); // tenant 1 works in "other"
    for (int k = 0; k < 8; k++)
        for (size_t t = 0; t < 2; t++)
            s_push_new (w, t);
    zl_lane_t *lanes[2] = {w->lane, other};
    uint64_t time[2] = {0}, count[2] = {0};
    for (int i = 0; i < 30000; i++) {
        zl_job_t *job = zl_sched_next (w->sched, lanes, 2, S_NO_LIMITS_NOW);
        assert_non_null (job);
        size_t l = job->flow->lane == other;
        uint64_t cost = l ? 100 : 1000;
        time[l] += cost;
        count[l]++;
        zl_sched_charge (w->sched, job, cost);
        s_push (w, job);
    }
    double ratio = (double)time[1] / (double)time[0];
    if (fabs (ratio - 2.0) > 0.06)
        fail_msg ("%s: worker time %llu (weight 1) vs %llu (weight 2): ratio %.3f, expected 2",
                  policy == ZL_SCHED_WFQ ? "wfq" : "fifo", (unsigned long long)time[0],
                  (unsigned long long)time[1], ratio);
    assert_true (count[1] > 15 * count[0]); // 20x as many of the cheap jobs
    // a paused lane is passed over, and the worker is not held idle
    other->paused = true;
    for (int i = 0; i < 10; i++) {
        zl_job_t *job = zl_sched_next (w->sched, lanes, 2, S_NO_LIMITS_NOW);
        assert_ptr_equal (job->flow->lane, w->lane);
        zl_sched_charge (w->sched, job, 1000);
        s_push (w, job);
    }
    w->lane->paused = true;
    assert_null (zl_sched_next (w->sched, lanes, 2, S_NO_LIMITS_NOW));
    w->lane->paused = false;
    other->paused = false;
    // an open circuit breaker passes its lane over like a pause; half-open,
    // it lets one probe out at a time
    other->breaker = zl_breaker_new (1, 1000, 500, 1);
    zl_breaker_failure (other->breaker, 0); // open until 500
    for (int i = 0; i < 10; i++) {
        zl_job_t *job = zl_sched_next (w->sched, lanes, 2, 100);
        assert_ptr_equal (job->flow->lane, w->lane);
        zl_sched_charge (w->sched, job, 1000);
        s_push (w, job);
    }
    w->lane->paused = true;
    assert_null (zl_sched_next (w->sched, lanes, 2, 100));
    zl_job_t *probe = zl_sched_next (w->sched, lanes, 2, 600); // half-open: one probe
    assert_non_null (probe);
    assert_ptr_equal (probe->flow->lane, other);
    assert_null (zl_sched_next (w->sched, lanes, 2, 600)); // the probe is out
    zl_breaker_success (other->breaker, 700);              // closed again
    assert_non_null (zl_sched_next (w->sched, lanes, 2, 700));
    assert_non_null (zl_sched_next (w->sched, lanes, 2, 700));
    zl_breaker_destroy (&other->breaker);
    s_world_destroy (&w);
}

static void
test_lanes_share_worker_time_by_weight (void **state)
{
    (void)state;
    s_lanes_share (ZL_SCHED_WFQ);
    s_lanes_share (ZL_SCHED_FIFO);
}

// ================================================================ limits
// Caps, rate limits and pauses, on a simulated monotonic clock (ms). The
// caller plays jobs.c: a lease counts a job in flight for its flow, lane
// and tenant; its end charges it, uncounts it and calls zl_sched_released.

#define T0 1000000 // simulated monotonic ms

// Pop the next job of `lane` at `now`, or NULL; checks FIFO within a flow.
static zl_job_t *
s_pop_at (world_t *w, zl_lane_t *lane, int64_t now)
{
    zl_job_t *job = zl_sched_pop (w->sched, lane, now);
    if (!job)
        return NULL;
    assert_ptr_equal (job->flow->lane, lane);
    assert_int_equal (job->state, ZL_JOB_READY);
    assert_null (job->next);
    // FIFO within the flow: ready order (seq) only grows, per flow
    size_t t = job->flow->tenant->index;
    size_t l = lane == w->lane ? 0 : 1;
    assert_true (t < MAX_TENANTS);
    assert_true (job->seq > w->flow_seq[l][t]);
    w->flow_seq[l][t] = job->seq;
    return job;
}

// A popped job starts running (jobs.c zl_jobs_lease).
static void
s_lease (zl_job_t *job)
{
    job->state = ZL_JOB_LEASED;
    job->flow->in_flight++;
    job->flow->lane->in_flight++;
    job->flow->tenant->in_flight++;
}

// A running job ends after `run_us` of worker time (jobs.c s_unlease).
static void
s_finish (world_t *w, zl_job_t *job, uint64_t run_us)
{
    assert_int_equal (job->state, ZL_JOB_LEASED);
    zl_sched_charge (w->sched, job, run_us);
    job->flow->in_flight--;
    job->flow->lane->in_flight--;
    job->flow->tenant->in_flight--;
    job->state = 0;
    zl_sched_released (w->sched, job->flow);
}

// A job that ended is ready again (a retry): to the back of its flow.
static void
s_push_back (world_t *w, zl_job_t *job)
{
    job->state = ZL_JOB_READY;
    s_push (w, job);
}

// A new READY job for the flow of lane `lane` x tenant `t`.
static zl_job_t *
s_push_in (world_t *w, zl_lane_t *lane, size_t t)
{
    assert_true (w->used < w->n_pool);
    zl_job_t *job = &w->pool[w->used++];
    job->id = w->used;
    job->flow = zl_sched_flow (w->sched, lane, w->tenant[t]);
    job->state = ZL_JOB_READY;
    s_push_back (w, job);
    return job;
}

// When `bucket` will next have a token, asked of a copy at `now`.
static int64_t
s_next_token (const zl_bucket_t *bucket, int64_t now)
{
    zl_bucket_t copy = *bucket;
    return zl_bucket_next_ms (&copy, now);
}

static bool
s_in_heap (const zl_flow_t *flow)
{
    return flow->heap_idx != UINT32_MAX;
}

static bool
s_in_wake_heap (const zl_flow_t *flow)
{
    return flow->wake_idx != UINT32_MAX;
}

// Set every tenant's and lane's bucket to the simulated clock.
static void
s_set_tenant_rate (world_t *w, size_t t, double rate, double burst)
{
    w->tenant[t]->cfg.rate = rate;
    w->tenant[t]->cfg.burst = burst;
    zl_bucket_init (zl_sched_tenant_bucket (w->sched, w->tenant[t]), rate, burst, T0);
}

static void
s_set_lane_rate (world_t *w, zl_lane_t *lane, double rate, double burst)
{
    lane->cfg.rate = rate;
    lane->cfg.burst = burst;
    zl_bucket_init (zl_sched_lane_bucket (w->sched, lane), rate, burst, T0);
}

static const zl_sched_policy_t s_policies[2] = {ZL_SCHED_WFQ, ZL_SCHED_FIFO};
static const char *const s_policy_names[2] = {"wfq", "fifo"};

// ---------------------------------------------------------------- caps
/*  Tenant max_in_flight: the capped tenant never has more in flight than its
    cap, the others keep flowing meanwhile, the capped flow leaves the heap,
    and one finishing job lets exactly one more of its jobs start. */
static void
test_tenant_cap_holds (void **state)
{
    (void)state;
    for (int p = 0; p < 2; p++) {
        uint32_t weights[2] = {1, 1};
        world_t *w = s_world (s_policies[p], weights, 2, 64);
        w->tenant[0]->cfg.max_in_flight = 2;
        zl_job_t *t0[6], *t1[5];
        for (int k = 0; k < 6; k++)
            t0[k] = s_push_in (w, w->lane, 0);
        for (int k = 0; k < 5; k++)
            t1[k] = s_push_in (w, w->lane, 1);
        // everything that may run: 2 of t0, all 5 of t1, then nothing
        int got[2] = {0, 0};
        zl_job_t *job;
        while ((job = s_pop_at (w, w->lane, T0))) {
            got[job->flow == w->flow[1]]++;
            s_lease (job);
            assert_true (w->tenant[0]->in_flight <= 2);
        }
        if (got[0] != 2 || got[1] != 5)
            fail_msg ("%s: popped %d of the capped tenant (cap 2) and %d of the other (5)",
                      s_policy_names[p], got[0], got[1]);
        // the capped flow is parked out of the heap, its jobs kept
        assert_false (s_in_heap (w->flow[0]));
        assert_false (s_in_wake_heap (w->flow[0]));
        assert_int_equal (w->flow[0]->ready, 4);
        assert_true (w->flow[0]->capped >= 1);
        assert_false (zl_sched_has_ready (w->sched, w->lane));
        assert_int_equal (zl_sched_next_wake (w->sched), -1); // a cap is not a time
        // a new job of the capped tenant stays parked; another tenant's runs
        s_push_in (w, w->lane, 0);
        assert_false (s_in_heap (w->flow[0]));
        assert_null (s_pop_at (w, w->lane, T0));
        zl_job_t *late = s_push_in (w, w->lane, 1);
        assert_ptr_equal (s_pop_at (w, w->lane, T0), late);
        s_lease (late);
        // another tenant's job ending does not release the cap
        s_finish (w, t1[0], 1000);
        assert_false (s_in_heap (w->flow[0]));
        assert_null (s_pop_at (w, w->lane, T0));
        // one of its own ending does: exactly one more, its next in order
        s_finish (w, t0[0], 1000);
        assert_true (s_in_heap (w->flow[0]));
        assert_true (zl_sched_has_ready (w->sched, w->lane));
        job = s_pop_at (w, w->lane, T0 + 1);
        assert_ptr_equal (job, t0[2]);
        s_lease (job);
        assert_null (s_pop_at (w, w->lane, T0 + 1));
        assert_int_equal (w->tenant[0]->in_flight, 2);
        // and so on until its backlog is done, never more than 2 at once
        zl_job_t *running[2] = {t0[1], job};
        int more = 0;
        while (running[0]) {
            s_finish (w, running[0], 1000); // the older one ends
            running[0] = running[1];
            running[1] = s_pop_at (w, w->lane, T0 + 2 + more);
            if (running[1]) {
                assert_ptr_equal (running[1]->flow, w->flow[0]);
                s_lease (running[1]);
                more++;
            }
            assert_true (w->tenant[0]->in_flight <= 2);
        }
        assert_int_equal (more, 4); // t0[3], t0[4], t0[5] and the late one
        s_world_destroy (&w);
    }
}

/*  Lane tenant_max_in_flight: per tenant in that lane only. Another lane
    is not capped, and a job of the tenant ending there does not let the
    capped flow past its lane cap. */
static void
test_lane_tenant_cap_holds (void **state)
{
    (void)state;
    for (int p = 0; p < 2; p++) {
        uint32_t weights[2] = {1, 1};
        world_t *w = s_world (s_policies[p], weights, 2, 64);
        zl_lane_t *other = zl_lanes_lookup (w->lanes, "other");
        w->lane->cfg.tenant_max_in_flight = 2;
        for (int k = 0; k < 4; k++) {
            s_push_in (w, w->lane, 0);
            s_push_in (w, w->lane, 1);
            s_push_in (w, other, 0);
        }
        zl_job_t *job, *in_lane[2][2], *in_other[4];
        int n[2] = {0, 0};
        while ((job = s_pop_at (w, w->lane, T0))) {
            size_t t = job->flow->tenant == w->tenant[1];
            assert_true (n[t] < 2);
            in_lane[t][n[t]++] = job;
            s_lease (job);
        }
        assert_int_equal (n[0], 2); // each tenant has its own cap in the lane
        assert_int_equal (n[1], 2);
        assert_false (s_in_heap (w->flow[0]));
        assert_false (s_in_heap (w->flow[1]));
        // the other lane has no such cap: all 4 of t0 run there
        for (int k = 0; k < 4; k++) {
            in_other[k] = s_pop_at (w, other, T0);
            assert_non_null (in_other[k]);
            s_lease (in_other[k]);
        }
        assert_null (s_pop_at (w, other, T0));
        assert_int_equal (w->tenant[0]->in_flight, 6);
        // t0 ends a job in the other lane: its capped flow here may be
        // looked at again, but is still at this lane's cap
        s_finish (w, in_other[0], 1000);
        assert_null (s_pop_at (w, w->lane, T0 + 1));
        assert_false (s_in_heap (w->flow[0]));
        assert_int_equal (w->flow[0]->in_flight, 2);
        // t1 ends one here: t1 (not t0) gets the slot
        s_finish (w, in_lane[1][0], 1000);
        job = s_pop_at (w, w->lane, T0 + 2);
        assert_non_null (job);
        assert_ptr_equal (job->flow, w->flow[1]);
        s_lease (job);
        assert_null (s_pop_at (w, w->lane, T0 + 2));
        // t0 ends one here: t0 runs one more
        s_finish (w, in_lane[0][0], 1000);
        job = s_pop_at (w, w->lane, T0 + 3);
        assert_non_null (job);
        assert_ptr_equal (job->flow, w->flow[0]);
        s_lease (job);
        assert_null (s_pop_at (w, w->lane, T0 + 3));
        assert_int_equal (w->flow[0]->in_flight, 2);
        assert_int_equal (w->flow[1]->in_flight, 2);
        s_world_destroy (&w);
    }
}

/*  Lane max_in_flight: pop returns NULL at the cap (the flows stay
    backlogged), the other lane is unaffected, an ending job frees a slot. */
static void
test_lane_cap_holds (void **state)
{
    (void)state;
    for (int p = 0; p < 2; p++) {
        uint32_t weights[2] = {1, 1};
        world_t *w = s_world (s_policies[p], weights, 2, 64);
        zl_lane_t *other = zl_lanes_lookup (w->lanes, "other");
        w->lane->cfg.max_in_flight = 3;
        for (int k = 0; k < 5; k++) {
            s_push_in (w, w->lane, 0);
            s_push_in (w, w->lane, 1);
            s_push_in (w, other, 0);
        }
        zl_job_t *run[3];
        for (int k = 0; k < 3; k++) {
            run[k] = s_pop_at (w, w->lane, T0);
            assert_non_null (run[k]);
            s_lease (run[k]);
        }
        assert_null (s_pop_at (w, w->lane, T0));
        assert_null (s_pop_at (w, w->lane, T0 + 1000));
        assert_int_equal (w->lane->in_flight, 3);
        assert_true (zl_sched_has_ready (w->sched, w->lane)); // still backlogged
        assert_int_equal (w->flow[0]->ready + w->flow[1]->ready, 7);
        // the other lane runs on
        for (int k = 0; k < 5; k++) {
            zl_job_t *job = s_pop_at (w, other, T0);
            assert_non_null (job);
            s_lease (job);
        }
        // one ends: one more, and the cap again
        s_finish (w, run[1], 500);
        zl_job_t *job = s_pop_at (w, w->lane, T0 + 1001);
        assert_non_null (job);
        s_lease (job);
        assert_null (s_pop_at (w, w->lane, T0 + 1001));
        // the cap drains the lane, three at a time, never more
        run[1] = job;
        int64_t now = T0 + 1002;
        size_t n_run = 3;
        while (n_run) {
            s_finish (w, run[0], 500); // the oldest ends
            run[0] = run[1];
            run[1] = run[2];
            n_run--;
            job = s_pop_at (w, w->lane, now++);
            if (job) {
                s_lease (job);
                run[n_run++] = job;
                assert_null (s_pop_at (w, w->lane, now)); // at the cap again
            }
            assert_int_equal (w->lane->in_flight, n_run);
            assert_true (n_run <= 3);
        }
        assert_int_equal (w->flow[0]->ready + w->flow[1]->ready, 0);
        s_world_destroy (&w);
    }
}

/*  Caps under churn: 4 tenants in two lanes, tenant and lane caps, random
    arrivals and job lengths, a worker pool per lane. At every step no cap is
    exceeded, and a free slot stays free only if every flow with ready jobs in
    that lane is held back by a cap (work conserving); every job runs. */
static void
test_caps_under_churn (void **state)
{
    (void)state;
    for (int p = 0; p < 2; p++) {
        enum { TENANTS = 4, SLOTS = 5, JOBS = 3000 };
        uint32_t weights[TENANTS] = {1, 2, 1, 3};
        world_t *w = s_world (s_policies[p], weights, TENANTS, JOBS);
        zl_lane_t *lanes[2] = {w->lane, zl_lanes_lookup (w->lanes, "other")};
        w->tenant[0]->cfg.max_in_flight = 2;
        w->tenant[1]->cfg.max_in_flight = 3;
        lanes[0]->cfg.tenant_max_in_flight = 2;
        lanes[1]->cfg.max_in_flight = 4;
        zl_job_t *slot[2][SLOTS] = {{0}};
        int64_t ends[2][SLOTS] = {{0}};
        uint64_t seed = 7 + (uint64_t)p;
        size_t finished = 0;
        int64_t now = T0;
        while (finished < JOBS) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            // arrivals: a few new jobs at random (lane, tenant)
            for (int a = 0; a < 3 && w->used < JOBS; a++)
                if ((seed >> (20 + a)) & 1)
                    s_push_in (w, lanes[(seed >> (30 + a)) & 1], (seed >> (40 + 2 * a)) % TENANTS);
            // endings
            for (int l = 0; l < 2; l++)
                for (int s = 0; s < SLOTS; s++)
                    if (slot[l][s] && ends[l][s] <= now) {
                        s_finish (w, slot[l][s], (uint64_t)(ends[l][s] - now + 1) * 1000);
                        slot[l][s] = NULL;
                        finished++;
                    }
            // fill free slots
            for (int l = 0; l < 2; l++)
                for (int s = 0; s < SLOTS; s++) {
                    if (slot[l][s])
                        continue;
                    zl_job_t *job = s_pop_at (w, lanes[l], now);
                    if (!job) {
                        // work conserving: every backlogged flow is held by a cap
                        size_t nf;
                        zl_flow_t **flows = zl_sched_flows (w->sched, &nf);
                        for (size_t f = 0; f < nf; f++) {
                            zl_flow_t *fl = flows[f];
                            if (fl->lane != lanes[l] || !fl->ready)
                                continue;
                            zl_tenant_t *t = fl->tenant;
                            bool held =
                                (t->cfg.max_in_flight && t->in_flight >= t->cfg.max_in_flight) ||
                                (lanes[l]->cfg.tenant_max_in_flight &&
                                 fl->in_flight >= lanes[l]->cfg.tenant_max_in_flight) ||
                                (lanes[l]->cfg.max_in_flight &&
                                 lanes[l]->in_flight >= lanes[l]->cfg.max_in_flight);
                            if (!held)
                                fail_msg ("%s: a slot of lane %s idles while tenant %s has %llu "
                                          "ready jobs and no cap holds it",
                                          s_policy_names[p], lanes[l]->name, t->name,
                                          (unsigned long long)fl->ready);
                        }
                        break;
                    }
                    s_lease (job);
                    slot[l][s] = job;
                    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
                    ends[l][s] = now + 1 + (int64_t)((seed >> 33) % 20);
                }
            // no cap exceeded
            for (size_t t = 0; t < TENANTS; t++) {
                zl_tenant_t *tn = w->tenant[t];
                assert_true (!tn->cfg.max_in_flight || tn->in_flight <= tn->cfg.max_in_flight);
                zl_flow_t *fl = zl_sched_flow (w->sched, lanes[0], tn);
                assert_true (fl->in_flight <= 2);
            }
            assert_true (lanes[1]->in_flight <= 4);
            now++;
            assert_true (now < T0 + 10000000);
        }
        assert_int_equal (w->used, JOBS);
        size_t nf;
        zl_flow_t **flows = zl_sched_flows (w->sched, &nf);
        for (size_t f = 0; f < nf; f++) {
            assert_int_equal (flows[f]->ready, 0);
            assert_int_equal (flows[f]->in_flight, 0);
        }
        s_world_destroy (&w);
    }
}

// ---------------------------------------------------------------- rates
// At every ms of `span_ms` from T0: wake, then pop up to `per_ms` jobs of
// `lane` (each ends at once, and is pushed back unless its tenant is
// `drain`); record the pop times of tenant `watch` into `at`.
static size_t
s_run_ms (world_t *w, zl_lane_t *lane, int64_t span_ms, int per_ms, size_t watch, int64_t *at,
          size_t cap, uint64_t *per_tenant, size_t *empty_pops)
{
    size_t n = 0;
    for (int64_t now = T0; now < T0 + span_ms; now++) {
        zl_sched_wake (w->sched, now);
        for (int k = 0; k < per_ms; k++) {
            zl_job_t *job = s_pop_at (w, lane, now);
            if (!job) {
                (*empty_pops)++;
                break;
            }
            size_t t = job->flow->tenant->index;
            per_tenant[t]++;
            if (t == watch) {
                assert_true (n < cap);
                at[n++] = now;
            }
            s_lease (job);
            s_finish (w, job, 1000);
            s_push_back (w, job); // stays backlogged
        }
    }
    return n;
}

static void
s_check_rate (const int64_t *at, size_t n, double rate, double burst, const char *what)
{
    for (size_t i = 0; i < n; i++)
        for (size_t j = i; j < n; j++) {
            double allowed = burst + rate * (double)(at[j] - at[i]) / 1000.0 + 1e-6;
            if ((double)(j - i + 1) > allowed)
                fail_msg ("%s: %zu dispatches in [%lld, %lld] ms, at most %.2f allowed", what,
                          j - i + 1, (long long)(at[i] - T0), (long long)(at[j] - T0), allowed);
        }
}

/*  A tenant's token bucket: its dispatches over any window t stay within
    burst + rate * t (and reach it, less a token or two), while the other
    tenants take every slot it cannot use. */
static void
test_tenant_rate_holds (void **state)
{
    (void)state;
    for (int p = 0; p < 2; p++) {
        enum { SPAN_MS = 10000, PER_MS = 4 };
        uint32_t weights[3] = {1, 1, 1};
        world_t *w = s_world (s_policies[p], weights, 3, 64);
        s_set_tenant_rate (w, 0, 10, 3);
        for (int k = 0; k < 5; k++)
            for (size_t t = 0; t < 3; t++)
                s_push_in (w, w->lane, t);
        int64_t at[1000];
        uint64_t per_tenant[3] = {0};
        size_t empty = 0;
        size_t n = s_run_ms (w, w->lane, SPAN_MS, PER_MS, 0, at, 1000, per_tenant, &empty);
        char what[64];
        snprintf (what, sizeof what, "%s, tenant rate 10/s burst 3", s_policy_names[p]);
        s_check_rate (at, n, 10, 3, what);
        double due = 3 + 10.0 * SPAN_MS / 1000.0;
        if ((double)n < due - 2)
            fail_msg ("%s: %zu dispatches of the rate-limited tenant in %d ms, %.0f due",
                      s_policy_names[p], n, SPAN_MS, due);
        // the others were not held: every slot was used, shared between them
        assert_int_equal (empty, 0);
        assert_int_equal (per_tenant[0] + per_tenant[1] + per_tenant[2], SPAN_MS * PER_MS);
        if (p == 0) // WFQ: the two unlimited tenants split the rest evenly
            assert_true (llabs ((long long)per_tenant[1] - (long long)per_tenant[2]) <= 2);
        s_world_destroy (&w);
    }
}

/*  The lane's token bucket: the lane's dispatches stay within burst +
    rate * t over any window, pop says NULL when it is empty and next_wake
    names the next token; the other lane is unaffected. */
static void
test_lane_rate_holds (void **state)
{
    (void)state;
    for (int p = 0; p < 2; p++) {
        enum { SPAN_MS = 5000, PER_MS = 3 };
        uint32_t weights[2] = {1, 1};
        world_t *w = s_world (s_policies[p], weights, 2, 64);
        zl_lane_t *other = zl_lanes_lookup (w->lanes, "other");
        s_set_lane_rate (w, w->lane, 20, 5);
        for (int k = 0; k < 4; k++)
            for (size_t t = 0; t < 2; t++) {
                s_push_in (w, w->lane, t);
                s_push_in (w, other, t);
            }
        int64_t at[2000];
        size_t n = 0, other_pops = 0;
        int64_t last_next = -1;
        for (int64_t now = T0; now < T0 + SPAN_MS; now++) {
            zl_sched_wake (w->sched, now);
            for (int k = 0; k < PER_MS; k++) {
                zl_job_t *job = s_pop_at (w, w->lane, now);
                if (!job) {
                    // held by the lane's bucket: next_wake names its next token
                    zl_bucket_t copy = *zl_sched_lane_bucket (w->sched, w->lane);
                    int64_t next = zl_bucket_next_ms (&copy, now);
                    assert_true (next > now);
                    int64_t nw = zl_sched_next_wake (w->sched);
                    if (nw <= now || nw > next || nw < next - 1)
                        fail_msg ("%s: next_wake %lld at %lld, the lane's next token at %lld",
                                  s_policy_names[p], (long long)(nw - T0), (long long)(now - T0),
                                  (long long)(next - T0));
                    assert_true (zl_sched_has_ready (w->sched, w->lane));
                    last_next = next;
                    break;
                }
                assert_true (last_next < 0 || now >= last_next - 1); // next_ms: <= 1 ms late
                assert_true (n < 2000);
                at[n++] = now;
                s_lease (job);
                s_finish (w, job, 1000);
                s_push_back (w, job);
            }
            for (int k = 0; k < PER_MS; k++) {
                zl_job_t *job = s_pop_at (w, other, now);
                assert_non_null (job);
                other_pops++;
                s_lease (job);
                s_finish (w, job, 1000);
                s_push_back (w, job);
            }
        }
        char what[64];
        snprintf (what, sizeof what, "%s, lane rate 20/s burst 5", s_policy_names[p]);
        s_check_rate (at, n, 20, 5, what);
        double due = 5 + 20.0 * SPAN_MS / 1000.0;
        if ((double)n < due - 2)
            fail_msg ("%s: %zu dispatches of the rate-limited lane in %d ms, %.0f due",
                      s_policy_names[p], n, SPAN_MS, due);
        assert_int_equal (other_pops, SPAN_MS * PER_MS);
        s_world_destroy (&w);
    }
}

// ---------------------------------------------------------------- pauses
/*  zl_sched_pause holds the flow (not the tenant's other flows, not other
    tenants) until the time, then it runs again at once; a shorter pause
    does not cut a longer one short. */
static void
test_pause_holds_until_then_resumes (void **state)
{
    (void)state;
    for (int p = 0; p < 2; p++) {
        uint32_t weights[2] = {1, 1};
        world_t *w = s_world (s_policies[p], weights, 2, 64);
        zl_lane_t *other = zl_lanes_lookup (w->lanes, "other");
        for (int k = 0; k < 8; k++) {
            s_push_in (w, w->lane, 0);
            s_push_in (w, w->lane, 1);
            s_push_in (w, other, 0);
        }
        zl_flow_t *f0_other = zl_sched_flow (w->sched, other, w->tenant[0]);
        zl_sched_pause (w->sched, w->flow[0], T0 + 500);
        zl_sched_pause (w->sched, w->flow[0], T0 + 200); // shorter: no effect
        int64_t now;
        for (now = T0; now < T0 + 500; now += 10) {
            zl_sched_wake (w->sched, now);
            zl_job_t *job = s_pop_at (w, w->lane, now);
            assert_non_null (job); // the other tenant runs on
            assert_ptr_equal (job->flow, w->flow[1]);
            s_lease (job);
            s_finish (w, job, 1000);
            s_push_back (w, job);
            // the paused flow waits in the wake heap, for T0 + 500
            assert_false (s_in_heap (w->flow[0]));
            assert_true (s_in_wake_heap (w->flow[0]));
            assert_int_equal (zl_sched_next_wake (w->sched), T0 + 500);
            // the same tenant in another lane is not paused
            if (now == T0) {
                zl_job_t *oj = s_pop_at (w, other, now);
                assert_non_null (oj);
                assert_ptr_equal (oj->flow, f0_other);
                s_lease (oj);
                s_finish (w, oj, 1000);
            }
        }
        // one ms early: still held
        zl_sched_wake (w->sched, T0 + 499);
        assert_true (s_in_wake_heap (w->flow[0]));
        // on time: back, and it runs within the next two pops
        zl_sched_wake (w->sched, T0 + 500);
        assert_false (s_in_wake_heap (w->flow[0]));
        assert_true (s_in_heap (w->flow[0]));
        assert_int_equal (zl_sched_next_wake (w->sched), -1);
        int t0_runs = 0;
        for (int k = 0; k < 2; k++) {
            zl_job_t *job = s_pop_at (w, w->lane, T0 + 500);
            assert_non_null (job);
            t0_runs += job->flow == w->flow[0];
            s_lease (job);
            s_finish (w, job, 1000);
            s_push_back (w, job);
        }
        assert_true (t0_runs >= 1);
        // alone in its lane, a paused flow makes pop say NULL, and the lane
        // has nothing ready until the pause ends
        world_t *w1 = s_world (s_policies[p], weights, 1, 8);
        s_push_in (w1, w1->lane, 0);
        zl_sched_pause (w1->sched, w1->flow[0], T0 + 1000);
        assert_null (s_pop_at (w1, w1->lane, T0));
        assert_false (zl_sched_has_ready (w1->sched, w1->lane));
        assert_int_equal (zl_sched_next_wake (w1->sched), T0 + 1000);
        zl_sched_wake (w1->sched, T0 + 999);
        assert_null (s_pop_at (w1, w1->lane, T0 + 999));
        zl_sched_wake (w1->sched, T0 + 1000);
        assert_non_null (s_pop_at (w1, w1->lane, T0 + 1000));
        s_world_destroy (&w1);
        // a flow parked by its cap and paused: its release does not end the pause
        world_t *w2 = s_world (s_policies[p], weights, 1, 8);
        w2->tenant[0]->cfg.max_in_flight = 1;
        s_push_in (w2, w2->lane, 0);
        s_push_in (w2, w2->lane, 0);
        zl_job_t *first = s_pop_at (w2, w2->lane, T0);
        s_lease (first);
        assert_null (s_pop_at (w2, w2->lane, T0)); // capped
        zl_sched_pause (w2->sched, w2->flow[0], T0 + 300);
        s_finish (w2, first, 1000);
        assert_null (s_pop_at (w2, w2->lane, T0 + 1)); // paused now
        assert_int_equal (zl_sched_next_wake (w2->sched), T0 + 300);
        zl_sched_wake (w2->sched, T0 + 300);
        assert_non_null (s_pop_at (w2, w2->lane, T0 + 300));
        s_world_destroy (&w2);
        s_world_destroy (&w);
    }
}

/*  zl_sched_next_wake: -1 with nothing parked by time; else the earliest of
    the parked flows' times and the lanes' next tokens. */
static void
test_next_wake_reports_the_earliest (void **state)
{
    (void)state;
    uint32_t weights[3] = {1, 1, 1};
    world_t *w = s_world (ZL_SCHED_WFQ, weights, 3, 64);
    zl_lane_t *other = zl_lanes_lookup (w->lanes, "other");
    assert_int_equal (zl_sched_next_wake (w->sched), -1);
    s_set_tenant_rate (w, 0, 2, 1);  // a token per 500 ms
    s_set_tenant_rate (w, 1, 10, 1); // a token per 100 ms
    for (int k = 0; k < 3; k++)
        for (size_t t = 0; t < 3; t++)
            s_push_in (w, w->lane, t);
    // take each rate-limited tenant's one token, then both park
    int64_t now = T0;
    zl_job_t *job;
    uint64_t got[3] = {0};
    while ((job = s_pop_at (w, w->lane, now))) {
        got[job->flow->tenant->index]++;
        s_lease (job);
        s_finish (w, job, 1000);
    }
    assert_int_equal (got[0], 1);
    assert_int_equal (got[1], 1);
    assert_int_equal (got[2], 3);
    // t2 is unlimited: it had the rest; t0 and t1 are parked by time
    assert_true (s_in_wake_heap (w->flow[0]));
    assert_true (s_in_wake_heap (w->flow[1]));
    // each waits for its bucket's next token: 500 ms and 100 ms on
    int64_t t0_next = s_next_token (zl_sched_tenant_bucket (w->sched, w->tenant[0]), now);
    int64_t t1_next = s_next_token (zl_sched_tenant_bucket (w->sched, w->tenant[1]), now);
    assert_true (t0_next >= T0 + 500 && t0_next <= T0 + 501); // next_ms: <= 1 ms late
    assert_true (t1_next >= T0 + 100 && t1_next <= T0 + 101);
    assert_int_equal (w->flow[0]->wake_ms, t0_next);
    assert_int_equal (w->flow[1]->wake_ms, t1_next);
    assert_int_equal (zl_sched_next_wake (w->sched), t1_next);
    // a lane bucket that runs dry earlier comes first
    s_set_lane_rate (w, other, 50, 1); // a token per 20 ms
    s_push_in (w, other, 2);
    s_push_in (w, other, 2);
    assert_non_null (s_pop_at (w, other, now));
    assert_null (s_pop_at (w, other, now));
    int64_t lane_next = s_next_token (zl_sched_lane_bucket (w->sched, other), now);
    assert_true (lane_next >= T0 + 20 && lane_next <= T0 + 21);
    assert_int_equal (zl_sched_next_wake (w->sched), lane_next);
    // wake at that time: the lane's time is gone, t1's is next
    zl_sched_wake (w->sched, lane_next);
    assert_int_equal (zl_sched_next_wake (w->sched), t1_next);
    assert_non_null (s_pop_at (w, other, lane_next));
    zl_sched_wake (w->sched, t1_next - 1);
    assert_true (s_in_wake_heap (w->flow[1]));
    zl_sched_wake (w->sched, t1_next);
    assert_false (s_in_wake_heap (w->flow[1]));
    assert_int_equal (zl_sched_next_wake (w->sched), t0_next);
    zl_sched_wake (w->sched, t0_next);
    assert_int_equal (zl_sched_next_wake (w->sched), -1);
    // a pause shows once a pop has parked the flow
    s_push_in (w, w->lane, 2);
    zl_sched_pause (w->sched, w->flow[2], T0 + 2000);
    got[0] = got[1] = got[2] = 0;
    now = T0 + 501;
    while ((job = s_pop_at (w, w->lane, now))) // t0, t1 take a token each
        got[job->flow->tenant->index]++;
    assert_int_equal (got[0], 1);
    assert_int_equal (got[1], 1);
    assert_int_equal (got[2], 0);
    assert_true (s_in_wake_heap (w->flow[2]));
    assert_int_equal (w->flow[2]->wake_ms, T0 + 2000);
    assert_int_equal (w->flow[1]->wake_ms,
                      s_next_token (zl_sched_tenant_bucket (w->sched, w->tenant[1]), now));
    assert_int_equal (w->flow[0]->wake_ms,
                      s_next_token (zl_sched_tenant_bucket (w->sched, w->tenant[0]), now));
    assert_true (w->flow[1]->wake_ms < w->flow[0]->wake_ms);
    assert_int_equal (zl_sched_next_wake (w->sched), w->flow[1]->wake_ms);
    s_world_destroy (&w);
}

// ---------------------------------------------------------------- cost
/*  Parked flows cost nothing per pop: 10,000 tenants held by their caps (or
    by their rate limits) and one free tenant. After the first pass has
    parked them, the lane heap holds only the free flow, and popping the
    free tenant's jobs never looks at a parked flow again (their park
    counters do not move). Counted, not timed. */
static void
s_many_parked (zl_sched_policy_t policy, bool by_rate)
{
    enum { HELD = 10000, FREE_JOBS = 30000 };
    zl_broker_config_t cfg;
    zl_broker_config_defaults (&cfg);
    zl_broker_config_lane (&cfg, "lane");
    zl_lanes_t *lanes = zl_lanes_new (&cfg);
    zl_sched_t *sched = zl_sched_new (policy);
    zl_lane_t *lane = zl_lanes_lookup (lanes, "lane");
    zl_flow_t **held = calloc (HELD, sizeof *held);
    zl_job_t *pool = calloc (2 * HELD + FREE_JOBS, sizeof (zl_job_t));
    for (size_t i = 0; i < 2 * HELD + FREE_JOBS; i++)
        pool[i].timer_idx = UINT32_MAX;
    size_t used = 0;
    uint64_t seq = 0;
    char name[32];
    for (size_t i = 0; i < HELD; i++) {
        snprintf (name, sizeof name, "held%zu", i);
        zl_tenant_t *t = zl_lanes_tenant (lanes, name);
        if (by_rate)
            zl_bucket_init (zl_sched_tenant_bucket (sched, t), 1, 1,
                            T0); // one now, the next in 1 s
        else
            t->cfg.max_in_flight = 1;
        held[i] = zl_sched_flow (sched, lane, t);
    }
    zl_tenant_t *free_t = zl_lanes_tenant (lanes, "free");
    zl_flow_t *free_flow = zl_sched_flow (sched, lane, free_t);
    // interleaved arrivals: two jobs per held tenant, the free one's backlog
    for (size_t i = 0; i < HELD; i++)
        for (int k = 0; k < 2; k++) {
            zl_job_t *job = &pool[used++];
            job->id = used;
            job->flow = held[i];
            job->seq = ++seq;
            zl_sched_push (sched, job);
        }
    for (size_t i = 0; i < FREE_JOBS; i++) {
        zl_job_t *job = &pool[used++];
        job->id = used;
        job->flow = free_flow;
        job->seq = ++seq;
        zl_sched_push (sched, job);
    }
    // first pass: pop (held tenants' jobs stay in flight) until only the
    // free flow is left in the heap
    size_t pops = 0, free_pops = 0;
    int64_t now = T0;
    for (;;) {
        size_t in_heap = 0;
        if (pops % 1000 == 0 || pops > 2 * HELD) {
            for (size_t i = 0; i < HELD; i++)
                in_heap += s_in_heap (held[i]);
            if (in_heap == 0)
                break;
        }
        zl_job_t *job = zl_sched_pop (sched, lane, now);
        assert_non_null (job);
        pops++;
        assert_true (pops <= 2 * HELD + FREE_JOBS / 2);
        job->flow->in_flight++;
        job->flow->tenant->in_flight++;
        lane->in_flight++;
        if (job->flow == free_flow) { // ends at once
            free_pops++;
            zl_sched_charge (sched, job, 1000);
            job->flow->in_flight--;
            job->flow->tenant->in_flight--;
            lane->in_flight--;
            zl_sched_released (sched, job->flow);
        }
    }
    // every held flow ran its first job and is parked with its second
    uint64_t parks = 0;
    for (size_t i = 0; i < HELD; i++) {
        assert_int_equal (held[i]->ready, 1);
        assert_int_equal (held[i]->in_flight, 1);
        assert_false (s_in_heap (held[i]));
        assert_int_equal (s_in_wake_heap (held[i]), by_rate);
        parks += by_rate ? held[i]->throttled : held[i]->capped;
    }
    assert_int_equal (parks, HELD); // each parked exactly once
    assert_true (s_in_heap (free_flow));
    assert_int_equal (free_flow->heap_idx, 0); // alone in the heap
    // second pass: the free tenant's jobs, never a parked flow again
    size_t left = free_flow->ready;
    assert_true (left > FREE_JOBS / 3);
    for (size_t k = 0; k < left; k++) {
        zl_job_t *job = zl_sched_pop (sched, lane, now + (int64_t)(k / 100));
        assert_non_null (job);
        assert_ptr_equal (job->flow, free_flow);
        zl_sched_charge (sched, job, 1000);
    }
    assert_null (zl_sched_pop (sched, lane, now + 500));
    uint64_t parks_after = 0;
    for (size_t i = 0; i < HELD; i++) {
        assert_false (s_in_heap (held[i]));
        parks_after += by_rate ? held[i]->throttled : held[i]->capped;
    }
    if (parks_after != parks)
        fail_msg ("parked flows were looked at again: %llu park events, %llu before",
                  (unsigned long long)parks_after, (unsigned long long)parks);
    // and they come back: by time, or as their jobs end
    if (by_rate) {
        int64_t next = s_next_token (zl_sched_tenant_bucket (sched, held[0]->tenant), T0);
        assert_true (next >= T0 + 1000 && next <= T0 + 1001);
        assert_int_equal (zl_sched_next_wake (sched), next);
        zl_sched_wake (sched, next - 1);
        assert_true (s_in_wake_heap (held[0]));
        zl_sched_wake (sched, next);
    } else {
        for (size_t i = 0; i < HELD; i++) {
            held[i]->in_flight--;
            held[i]->tenant->in_flight--;
            lane->in_flight--;
            zl_sched_released (sched, held[i]);
        }
    }
    size_t back = 0;
    while (zl_sched_pop (sched, lane, T0 + 1001))
        back++;
    assert_int_equal (back, HELD);
    printf ("  %s, %s: %zu pops to park %d flows (%zu of them the free tenant's)\n",
            policy == ZL_SCHED_WFQ ? "wfq" : "fifo", by_rate ? "rate" : "cap", pops, HELD,
            free_pops);
    free (pool);
    free (held);
    zl_sched_destroy (&sched);
    zl_lanes_destroy (&lanes);
    zl_broker_config_free (&cfg);
}

static void
test_parked_flows_cost_nothing_per_pop (void **state)
{
    (void)state;
    for (int p = 0; p < 2; p++) {
        s_many_parked (s_policies[p], false);
        s_many_parked (s_policies[p], true);
    }
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test (test_empty_and_flows),
        cmocka_unit_test (test_late_pushes_leave_in_sequence_order),
        cmocka_unit_test (test_fifo_global_arrival_order),
        cmocka_unit_test (test_fifo_orders_by_caller_seq),
        cmocka_unit_test (test_wfq_weights_1_2_4),
        cmocka_unit_test (test_wfq_charges_worker_time_not_job_count),
        cmocka_unit_test (test_wfq_late_charges_with_weights),
        cmocka_unit_test (test_wfq_charge_corrects_the_estimate),
        cmocka_unit_test (test_wfq_idle_tenant_gets_no_burst),
        cmocka_unit_test (test_wfq_fifo_within_tenant_and_single_flow),
        cmocka_unit_test (test_wfq_many_tenants_equal_share),
        cmocka_unit_test (test_wfq_lag_is_bounded_by_quantum_plus_job),
        cmocka_unit_test (test_wfq_quantum_serves_arrival_order),
        cmocka_unit_test (test_wfq_quantum_bounds_arrival_advantage),
        cmocka_unit_test (test_lanes_share_worker_time_by_weight),
        cmocka_unit_test (test_tenant_cap_holds),
        cmocka_unit_test (test_lane_tenant_cap_holds),
        cmocka_unit_test (test_lane_cap_holds),
        cmocka_unit_test (test_caps_under_churn),
        cmocka_unit_test (test_tenant_rate_holds),
        cmocka_unit_test (test_lane_rate_holds),
        cmocka_unit_test (test_pause_holds_until_then_resumes),
        cmocka_unit_test (test_next_wake_reports_the_earliest),
        cmocka_unit_test (test_parked_flows_cost_nothing_per_pop),
        cmocka_unit_test (test_priority_within_a_flow),
        cmocka_unit_test (test_priority_does_not_buy_share),
    };
    int failed = cmocka_run_group_tests_name ("default quantum", tests, NULL, NULL);
    // the fairness tests again with exact start-time fair queuing
    const struct CMUnitTest exact[] = {
        cmocka_unit_test (test_wfq_weights_1_2_4),
        cmocka_unit_test (test_wfq_charges_worker_time_not_job_count),
        cmocka_unit_test (test_wfq_late_charges_with_weights),
        cmocka_unit_test (test_wfq_charge_corrects_the_estimate),
        cmocka_unit_test (test_wfq_idle_tenant_gets_no_burst),
        cmocka_unit_test (test_wfq_fifo_within_tenant_and_single_flow),
        cmocka_unit_test (test_wfq_many_tenants_equal_share),
        cmocka_unit_test (test_wfq_lag_is_bounded_by_quantum_plus_job),
    };
    s_quantum_us = 0;
    failed += cmocka_run_group_tests_name ("quantum 0 (exact)", exact, NULL, NULL);
    return failed;
}
