/*  test_sched: which ready job goes next (broker/sched.c). FIFO pops in
    global arrival order across tenants; WFQ shares dispatch by tenant weight,
    charges by worker time (so slow jobs do not buy more than their share),
    gives a tenant returning from idle no banked burst, and keeps FIFO order
    inside each tenant. Jobs are plain records; no sockets, no clock. */
#include "config.h"
#include "job.h"
#include "lane.h"
#include "sched.h"

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

typedef struct {
    zl_broker_config_t cfg;
    zl_lanes_t *lanes;
    zl_sched_t *sched;
    zl_lane_t *lane;
    size_t n_tenants;
    zl_tenant_t *tenant[MAX_TENANTS];
    zl_flow_t *flow[MAX_TENANTS];
    uint64_t last_seq[MAX_TENANTS]; // FIFO check per tenant
    uint64_t next_seq;              // the caller's ready order, as jobs.c keeps it
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
    w->lane = zl_lanes_lookup (w->lanes, "lane");
    w->n_tenants = n_tenants;
    for (size_t i = 0; i < n_tenants; i++) {
        snprintf (name, sizeof name, "t%zu", i);
        w->tenant[i] = zl_lanes_tenant (w->lanes, name);
        assert_int_equal (w->tenant[i]->cfg.weight, weights[i]);
        w->flow[i] = zl_sched_flow (w->sched, w->lane, w->tenant[i]);
    }
    w->pool = calloc (n_jobs, sizeof (zl_job_t));
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
    assert_null (of->tail);
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

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test (test_empty_and_flows),
        cmocka_unit_test (test_fifo_global_arrival_order),
        cmocka_unit_test (test_fifo_orders_by_caller_seq),
        cmocka_unit_test (test_wfq_weights_1_2_4),
        cmocka_unit_test (test_wfq_charges_worker_time_not_job_count),
        cmocka_unit_test (test_wfq_late_charges_with_weights),
        cmocka_unit_test (test_wfq_charge_corrects_the_estimate),
        cmocka_unit_test (test_wfq_idle_tenant_gets_no_burst),
        cmocka_unit_test (test_wfq_fifo_within_tenant_and_single_flow),
        cmocka_unit_test (test_wfq_many_tenants_equal_share),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
