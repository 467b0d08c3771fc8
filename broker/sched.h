/*  sched: which ready job goes next. Knows nothing of sockets.
    Jobs wait in flows (one FIFO per lane x tenant). Each lane keeps a
    min-heap of its backlogged flows: under FIFO the key is the sequence of
    the flow's head job (global arrival order); under WFQ it is the flow's
    virtual start time (start-time fair queuing, charged by worker time /
    tenant weight). Choosing the next job is O(log flows). */
#ifndef ZL_SCHED_H
#define ZL_SCHED_H

#include "config.h"
#include "job.h"
#include "lane.h"

#include <stddef.h>
#include <stdint.h>

typedef struct zl_flow {
    zl_lane_t *lane;
    zl_tenant_t *tenant;
    zl_job_t *head, *tail;  // READY jobs, FIFO
    uint32_t heap_idx;      // UINT32_MAX when not backlogged in the lane heap
    double key;             // heap key (see above)
    double vfinish;         // virtual finish of the last dispatched job
    uint64_t est_us;        // running estimate of one job's cost
    // gauges
    uint64_t ready, delayed, in_flight, dlq;
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
    is the global arrival order FIFO uses). */
void zl_sched_push (zl_sched_t *self, zl_job_t *job);
/*  Remove and return the next job of `lane`, or NULL if none is ready. */
zl_job_t *zl_sched_pop (zl_sched_t *self, zl_lane_t *lane);
/*  True if `lane` has a ready job. */
int zl_sched_has_ready (zl_sched_t *self, zl_lane_t *lane);
/*  Charge the job's flow for `run_us` of worker time (on ack or nack). */
void zl_sched_charge (zl_sched_t *self, zl_job_t *job, uint64_t run_us);
/*  Return the array of all flows and their count (borrowed). */
zl_flow_t **zl_sched_flows (zl_sched_t *self, size_t *count);
/*  The policy in force. */
zl_sched_policy_t zl_sched_policy (zl_sched_t *self);

#endif
