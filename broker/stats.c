#include "stats.h"

#include "breaker.h"
#include "schedules.h"

#include "counters.h"
#include "dlq.h"
#include "hist.h"

#include <string.h>

static const char *s_counter_names[ZL_CTR_COUNT] = {
#define ZL_CTR_NAME(id, name) name,
    ZL_COUNTERS (ZL_CTR_NAME)
#undef ZL_CTR_NAME
};

static void
s_add_group (zl_group_stats_t *g, const zl_flow_t *f, int64_t now_ms)
{
    g->ready += f->ready;
    g->delayed += f->delayed;
    g->in_flight += f->in_flight;
    g->dlq += f->dlq;
    int64_t oldest = zl_sched_oldest_ready_ms (f);
    if (oldest >= 0) {
        uint64_t age = (uint64_t)(now_ms - oldest);
        if (age > g->oldest_ready_age_ms)
            g->oldest_ready_age_ms = age;
    }
    g->submitted += f->submitted;
    g->acked += f->acked;
    g->nacked_transient += f->nacked_transient;
    g->nacked_throttled += f->nacked_throttled;
    g->nacked_permanent += f->nacked_permanent;
    g->lease_expired += f->lease_expired;
    g->dead_lettered += f->dead_lettered;
    g->run_us += f->run_us;
    g->throttled += f->throttled;
    g->capped += f->capped;
}

static void
s_latency (zl_latency_t *out, const char *name, const zl_hist_t *h)
{
    *out = (zl_latency_t){name,
                          h->count,
                          zl_hist_quantile (h, 0.50),
                          zl_hist_quantile (h, 0.90),
                          zl_hist_quantile (h, 0.99),
                          h->max};
}

void
zl_stats_build (const zl_stats_sources_t *src, zl_arena_t *a, zl_now_t now, zl_stats_t *st)
{
    memset (st, 0, sizeof *st);
    st->uptime_ms = (uint64_t)(now.mono_ms - src->started_ms);
    zl_store_stats_t ss;
    zl_store_stats (src->store, &ss);
    zl_jobs_graph_stats_t gs;
    zl_jobs_graph_stats (src->jobs, &gs);
    uint64_t ticks = 0, ticks_skipped = 0, ticks_failed = 0;
    if (src->schedules)
        zl_schedules_counts (src->schedules, &ticks, &ticks_skipped, &ticks_failed);
    zl_counter_t store[] = {{"jobs_waiting", gs.waiting},
                            {"outcomes_kept", gs.kept},
                            {"dep_nodes", gs.nodes},
                            {"batches", zl_batches_count (zl_jobs_batches (src->jobs))},
                            {"batch_members", zl_batches_members (zl_jobs_batches (src->jobs))},
                            {"dep_edges", gs.edges},
                            {"jobs_parent_failed", gs.parent_failed},
                            {"jobs_rearmed", gs.rearmed},
                            {"jobs_not_yet", gs.not_yet},
                            {"jobs_not_yet_exhausted", gs.not_yet_exhausted},
                            {"ordering_keys", gs.ordering_keys},
                            {"schedules", src->schedules ? zl_schedules_count (src->schedules) : 0},
                            {"cron_ticks_enqueued", ticks},
                            {"cron_ticks_skipped", ticks_skipped},
                            {"cron_ticks_failed", ticks_failed},
                            {"jobs_ordering_held", gs.ordering_held},
                            {"store_map_bytes", ss.map_size},
                            {"store_used_bytes", ss.used_bytes},
                            {"store_file_bytes", ss.file_bytes},
                            {"store_jobs", ss.jobs},
                            {"store_states", ss.states},
                            {"store_free_bytes", ss.free_bytes},
                            {"store_idem_keys", ss.idem_keys},
                            {"store_idem_resend_log", ss.idem_resend_log},
                            {"store_idem_user_log", ss.idem_user_log},
                            {"dedup_expired", ss.dedup_expired},
                            {"dedup_evicted", ss.dedup_evicted},
                            {"store_room_walks", ss.room_walks},
                            {"store_room_walk_max_us", ss.room_walk_max_us},
                            {"store_commits", ss.commits},
                            {"store_commit_avg_us", ss.commits ? ss.commit_us / ss.commits : 0},
                            {"store_commit_max_us", ss.commit_max_us},
                            {"store_unreachable", ss.unreachable},
                            {"store_log_rows", ss.log_rows},
                            {"store_log_segments", ss.log_segments},
                            {"store_log_rotations", ss.log_rotations},
                            {"jobs_cancelled_kept", zl_jobs_cancelled_kept (src->jobs)}};
    size_t n_store = sizeof store / sizeof store[0];
    st->n_counters = ZL_CTR_COUNT + n_store;
    st->counters = zl_arena_alloc (a, st->n_counters * sizeof (zl_counter_t));
    for (int i = 0; i < ZL_CTR_COUNT; i++)
        st->counters[i] = (zl_counter_t){s_counter_names[i], src->counters[i]};
    memcpy (st->counters + ZL_CTR_COUNT, store, sizeof store);
    uint32_t nl = zl_lanes_count (src->lanes), nt = zl_lanes_tenant_count (src->lanes);
    st->n_lanes = nl;
    st->lanes = zl_arena_calloc (a, nl ? nl : 1, sizeof (zl_group_stats_t));
    for (uint32_t i = 0; i < nl; i++) {
        zl_lane_t *lane = zl_lanes_at (src->lanes, i);
        st->lanes[i].lane = lane->name;
        st->lanes[i].tenant = "";
        st->lanes[i].paused = lane->paused;
    }
    st->n_tenants = nt;
    st->tenants = zl_arena_calloc (a, nt ? nt : 1, sizeof (zl_group_stats_t));
    for (uint32_t i = 0; i < nt; i++) {
        st->tenants[i].lane = "";
        st->tenants[i].tenant = zl_lanes_tenant_at (src->lanes, i)->name;
    }
    size_t nf;
    zl_flow_t **flows = zl_sched_flows (src->sched, &nf);
    st->n_groups = nf;
    st->groups = zl_arena_calloc (a, nf ? nf : 1, sizeof (zl_group_stats_t));
    for (size_t i = 0; i < nf; i++) {
        zl_flow_t *f = flows[i];
        st->groups[i].lane = f->lane->name;
        st->groups[i].tenant = f->tenant->name;
        st->groups[i].paused = f->lane->paused;
        s_add_group (&st->groups[i], f, now.mono_ms);
        s_add_group (&st->lanes[f->lane->index], f, now.mono_ms);
        s_add_group (&st->tenants[f->tenant->index], f, now.mono_ms);
    }
    // oldest dead-letter age per group: one pass over the DLQ
    zl_dlq_t *dlq = zl_jobs_dlq (src->jobs);
    for (zl_job_t *j = zl_dlq_first (dlq); j; j = zl_dlq_next (dlq, j)) {
        uint64_t age = (uint64_t)(now.wall_ms - j->dead_at_ms);
        zl_group_stats_t *gs[3] = {&st->lanes[j->flow->lane->index],
                                   &st->tenants[j->flow->tenant->index],
                                   &st->groups[j->flow->index]};
        for (int g = 0; g < 3; g++)
            if (age > gs[g]->oldest_dlq_age_ms)
                gs[g]->oldest_dlq_age_ms = age;
    }
    st->n_latencies = 2;
    st->latencies = zl_arena_alloc (a, 2 * sizeof (zl_latency_t));
    s_latency (&st->latencies[0], "submit_to_start", zl_jobs_latency (src->jobs, 0));
    s_latency (&st->latencies[1], "submit_to_ack", zl_jobs_latency (src->jobs, 1));
    uint32_t n_lanes = zl_lanes_count (src->lanes), n_brk = 0;
    st->breakers = zl_arena_alloc (a, (n_lanes ? n_lanes : 1) * sizeof (zl_breaker_info_t));
    for (uint32_t i = 0; i < n_lanes; i++) {
        zl_lane_t *lane = zl_lanes_at (src->lanes, i);
        if (lane->breaker)
            zl_breaker_info (lane->breaker, lane->name, now, &st->breakers[n_brk++]);
    }
    st->n_breakers = n_brk;
    st->workers = (uint32_t)src->workers;
    st->producers = (uint32_t)src->producers;
    st->store_backend = src->store ? zl_store_backend_name (src->store) : "";
    static const char *const roles[] = {"leader", "standby", "unreachable"};
    zl_store_role_t role = src->lead->role;
    st->role = (unsigned)role < sizeof roles / sizeof roles[0] ? roles[role] : "unknown";
    st->epoch = src->lead->epoch;
    st->store_reachable = role != ZL_ROLE_UNREACHABLE;
    st->takeovers = ss.takeovers;
    st->fenced = ss.fenced;
    st->leader = role == ZL_ROLE_LEADER ? src->name : src->lead->leader_name;
}
