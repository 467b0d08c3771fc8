/*  scheduler (zl_sched_t): which ready job goes next. Knows nothing of sockets.
    Jobs wait in flows (one per lane x tenant): a FIFO per priority (0-9),
    the highest non-empty one first, so that within a flow a higher priority
    goes first and, within a priority, the order of arrival. Each lane keeps a
    min-heap of its backlogged flows: under FIFO the key is the sequence of
    the flow's head job (global arrival order); under WFQ it is the flow's
    virtual start time (start-time fair queuing, charged by worker time /
    tenant weight) counted in quanta, then the head job's sequence. Choosing
    the next job is O(log flows).

    A flow that may not run now leaves its lane's heap and is parked: by a
    concurrency cap (tenant overall, or tenant in this lane) until one of its
    jobs finishes, or by time (the tenant's rate limit, or a worker's
    THROTTLED retry-after) in a wake heap until then. Parked flows cost
    nothing per dispatch.

    Who writes what: the scheduler's own per-lane and per-tenant state
    (virtual times, lane heaps, rate buckets, cap-parked lists) is private to
    scheduler.c. Of a flow, the scheduler writes the queue and its keys
    (head/tail to est_us below) and the gauge `ready` and counters `run_us`,
    `throttled`, `capped`; the job state machine (jobs.c) writes the other
    gauges and counters. */
#ifndef ZL_SCHED_H
#define ZL_SCHED_H

#include "bucket.h"
#include "heap.h"
#include "job.h"
#include "lane.h"
#include "sched_policy.h" // zl_sched_policy_t, ZL_SCHED_QUANTUM_US

#include <stddef.h>
#include <stdint.h>

typedef struct zl_flow {
    uint32_t index; // position in zl_sched_flows
    zl_lane_t *lane;
    zl_tenant_t *tenant;
    zl_job_t *head; // the READY job that goes next: q's highest non-empty head
    struct {
        zl_job_t *head, *tail;
    } q[ZL_PRIORITY_MAX + 1];  // READY jobs, a FIFO per priority
    uint16_t q_mask;           // bit p: q[p] is not empty
    zl_heap_t *late;           // READY jobs pushed behind a later one (see zl_sched_push)
    uint32_t heap_idx;         // UINT32_MAX when not backlogged in the lane heap
    double vstart;             // WFQ: virtual start time of the head job
    uint8_t parked;            // 0, or why it is out of the lane heap
    uint32_t wake_idx;         // position in the wake heap, UINT32_MAX if none
    int64_t wake_ms;           // parked by time: when it may run again
    int64_t paused_until_ms;   // a worker said THROTTLED: not before this
    struct zl_flow *park_next; // the tenant's list of cap-parked flows
    double vfinish;            // virtual finish of the last dispatched job
    uint64_t est_us;           // running estimate of one job's cost
    // gauges
    uint64_t ready, delayed, in_flight, dlq;
    uint64_t waiting; // WAITING jobs (for their parents)
    // counters
    uint64_t submitted, acked, nacked_transient, nacked_throttled, nacked_permanent;
    uint64_t lease_expired, dead_lettered, run_us, throttled, capped;
} zl_flow_t;

typedef struct _zl_sched_t zl_sched_t;

/*  Return a scheduler with `policy`. */
zl_sched_t *zl_sched_new (zl_sched_policy_t policy);
/*  Destroy the scheduler and its flows (not the jobs); nulls the pointer. */
void zl_sched_destroy (zl_sched_t **self_p);
/*  Return the flow of `lane` x `tenant`, creating it. */
zl_flow_t *zl_sched_flow (zl_sched_t *self, zl_lane_t *lane, zl_tenant_t *tenant);
/*  Append a READY job to its flow (job->flow and job->seq must be set; seq
    is the global arrival order FIFO uses). A job whose seq is below its
    priority's tail (an ordering key's next job, released in the order the
    jobs before it were acked, keeps its id as seq) waits in the flow's late
    heap instead, and the flow takes the lower seq of the two at each pop:
    so jobs leave in sequence order, which is the store's key order (its
    writes stay on few pages). A job in the late heap keeps its slot in
    timer_idx (a READY job has no timer). */
void zl_sched_push (zl_sched_t *self, zl_job_t *job);
/*  Take a READY job out of its flow wherever it waits (a cancel), in O(1)
    (plus the lane heap's O(log flows) when it was the flow's head). */
void zl_sched_remove (zl_sched_t *self, zl_job_t *job);
/*  Remove and return the next job of `lane` that may run at `now_ms`
    (caps, rate limits and pauses respected; takes the rate tokens), or
    NULL. */
zl_job_t *zl_sched_pop (zl_sched_t *self, zl_lane_t *lane, int64_t now_ms);
/*  True if `lane` has a backlogged flow (which may still be held back). */
int zl_sched_has_ready (zl_sched_t *self, zl_lane_t *lane);
/*  A job of `flow` stopped running: flows its caps held back may run again. */
void zl_sched_released (zl_sched_t *self, zl_flow_t *flow);
/*  The monotonic ms since which the flow's oldest READY job has waited, or
    -1 if it has none (the heads of its priorities: each FIFO). */
int64_t zl_sched_oldest_ready_ms (const zl_flow_t *flow);
/*  A worker asked for no more of this flow's jobs before `until_ms`. */
void zl_sched_pause (zl_sched_t *self, zl_flow_t *flow, int64_t until_ms);
/*  Put back the flows whose wait ended by `now_ms`. */
void zl_sched_wake (zl_sched_t *self, int64_t now_ms);
/*  The monotonic ms of the next wake (parked flows, lane rate limits), or -1. */
int64_t zl_sched_next_wake (zl_sched_t *self);
/*  The next job for a worker serving `lanes`: the lanes share by weight,
    charged by worker time (an estimate at dispatch, corrected by
    zl_sched_charge), with no banked share for a lane that was idle; a paused
    lane, or one with nothing it may run now, never holds the worker idle.
    NULL if none of the lanes has a job that may run. */
zl_job_t *zl_sched_next (zl_sched_t *self, zl_lane_t *const *lanes, size_t n_lanes, int64_t now_ms);
/*  Charge the job's flow (and lane) for `run_us` of worker time (on ack or
    nack). */
void zl_sched_charge (zl_sched_t *self, zl_job_t *job, uint64_t run_us);
/*  Return the array of all flows and their count (borrowed). */
zl_flow_t **zl_sched_flows (zl_sched_t *self, size_t *count);
/*  The rate bucket the scheduler keeps for `lane` (its configured rate),
    set up if it was not (borrowed; for tests and tools). */
zl_bucket_t *zl_sched_lane_bucket (zl_sched_t *self, const zl_lane_t *lane);
/*  The same for `tenant`. */
zl_bucket_t *zl_sched_tenant_bucket (zl_sched_t *self, const zl_tenant_t *tenant);
/*  The policy in force. */
zl_sched_policy_t zl_sched_policy (zl_sched_t *self);
/*  WFQ's quantum, in us of worker time per unit of weight (default
    ZL_SCHED_QUANTUM_US): flows whose virtual start times fall in the same
    quantum go in the arrival order of their head jobs, so a backlogged
    tenant's lag behind its exact share is at most one quantum plus one job.
    0 = exact start-time fair queuing. */
void zl_sched_set_quantum (zl_sched_t *self, uint64_t quantum_us);

#endif
