/*  stats: the broker's figures gathered into a zl_stats_t (common/msg.h), the
    one snapshot that `zlane-ctl stats` (AdminReply) and the metrics page
    show: the counters, the store's size, each lane, tenant and lane x tenant
    (ready, delayed, in flight, DLQ, oldest ages, outcomes, worker time,
    throttled and capped counts), the latency quantiles, and the broker's
    role among the brokers sharing its store. */
#ifndef ZL_STATS_H
#define ZL_STATS_H

#include "arena.h"
#include "jobs.h"
#include "lane.h"
#include "msg.h"
#include "scheduler.h"
#include "store.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    zl_lanes_t *lanes;
    zl_sched_t *sched;
    zl_jobs_t *jobs;
    zl_store_t *store;
    const uint64_t *counters; // ZL_CTR_COUNT of them (counters.h)
    int64_t started_ms;       // monotonic
    size_t workers, producers;
    const zl_store_lead_t *lead; // the broker's role, the epoch and the leader, as last elected
    const char *name;            // this broker (the leader's name while it leads)
    struct _zl_schedules_t *schedules; // cron schedules (schedules.h), or NULL
} zl_stats_sources_t;

/*  Fill `out` from `src` as of `now`; every array and string lives in
    `arena` or in the sources (valid until either changes). With
    `lanes_only` the per-tenant and lane x tenant rows are left out (the
    lanes' figures are the same): what a dashboard polling every second or
    two needs, at a cost that does not grow with the number of tenants but
    for one pass over the flows. */
void zl_stats_build (const zl_stats_sources_t *src, zl_arena_t *arena, zl_now_t now,
                     bool lanes_only, zl_stats_t *out);
/*  The same with a group query (`q->set`): the per-tenant rows are left
    out and the lane x tenant rows are the page `q` selects, sorted (ties by
    tenant, then lane) and cut at q->offset, q->limit; out->groups_matched
    counts the rows before the cut. Returns 0, or -1 with a reason in `why`
    for a query out of bounds (a limit over ZL_GROUP_QUERY_MAX, an unknown
    sort). */
int zl_stats_query (const zl_stats_sources_t *src, zl_arena_t *arena, zl_now_t now,
                    const zl_group_query_t *q, zl_stats_t *out, const char **why);

#endif
