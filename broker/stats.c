#include "stats.h"

#include "breaker.h"
#include "schedules.h"

#include "counters.h"
#include "dlq.h"
#include "hist.h"

#include "text.h"

#include <stdlib.h>
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

// A flow a group query picked, with what it sorts by.
typedef struct {
    zl_flow_t *f;
    int64_t key; // numeric sorts: the figure, negated for largest first
    int8_t by;   // 0 the key, 1 the tenant's name, 2 the lane's
    int8_t dir;  // names: 1 A first, -1 Z first
} s_pick_t;

static int
s_pick_cmp (const void *x, const void *y)
{
    const s_pick_t *a = x, *b = y;
    int c = 0;
    if (a->by == 0)
        c = a->key < b->key ? -1 : a->key > b->key;
    else if (a->by == 1)
        c = a->dir * strcmp (a->f->tenant->name, b->f->tenant->name);
    else
        c = a->dir * strcmp (a->f->lane->name, b->f->lane->name);
    if (!c)
        c = strcmp (a->f->tenant->name, b->f->tenant->name);
    if (!c)
        c = strcmp (a->f->lane->name, b->f->lane->name);
    return c;
}

static int64_t
s_figure (const zl_flow_t *f, zl_group_sort_t sort, int64_t now_ms)
{
    switch (sort) {
    case ZL_GROUP_SORT_READY: return (int64_t)f->ready;
    case ZL_GROUP_SORT_DELAYED: return (int64_t)f->delayed;
    case ZL_GROUP_SORT_IN_FLIGHT: return (int64_t)f->in_flight;
    case ZL_GROUP_SORT_DLQ: return (int64_t)f->dlq;
    case ZL_GROUP_SORT_OLDEST_READY: {
        int64_t oldest = zl_sched_oldest_ready_ms (f);
        return oldest >= 0 ? now_ms - oldest : -1;
    }
    case ZL_GROUP_SORT_SUBMITTED: return (int64_t)f->submitted;
    case ZL_GROUP_SORT_ACKED: return (int64_t)f->acked;
    case ZL_GROUP_SORT_CAPPED: return (int64_t)f->capped;
    case ZL_GROUP_SORT_THROTTLED: return (int64_t)f->throttled;
    default: return 0;
    }
}

static void s_build (const zl_stats_sources_t *src, zl_arena_t *a, zl_now_t now, bool lanes_only,
                     const zl_group_query_t *q, zl_stats_t *st);

void
zl_stats_build (const zl_stats_sources_t *src, zl_arena_t *a, zl_now_t now, bool lanes_only,
                zl_stats_t *st)
{
    s_build (src, a, now, lanes_only, NULL, st);
}

int
zl_stats_query (const zl_stats_sources_t *src, zl_arena_t *a, zl_now_t now,
                const zl_group_query_t *q, zl_stats_t *st, const char **why)
{
    if (q->limit > ZL_GROUP_QUERY_MAX) {
        *why = "stats: groups.limit is over 1000 rows";
        return -1;
    }
    if ((unsigned)q->sort >= ZL_GROUP_SORT_COUNT) {
        *why = "stats: groups.sort is not a known GroupSort";
        return -1;
    }
    s_build (src, a, now, false, q, st);
    return 0;
}

static void
s_build (const zl_stats_sources_t *src, zl_arena_t *a, zl_now_t now, bool lanes_only,
         const zl_group_query_t *q, zl_stats_t *st)
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
                            {"store_room_measures", ss.room_measures},
                            {"store_room_measures_on_submit", ss.room_measures_on_submit},
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
    st->tenants_known = nt;
    st->n_tenants = lanes_only || q ? 0 : nt;
    st->tenants = zl_arena_calloc (a, st->n_tenants ? st->n_tenants : 1, sizeof (zl_group_stats_t));
    for (uint32_t i = 0; i < st->n_tenants; i++) {
        st->tenants[i].lane = "";
        st->tenants[i].tenant = zl_lanes_tenant_at (src->lanes, i)->name;
    }
    size_t nf;
    zl_flow_t **flows = zl_sched_flows (src->sched, &nf);
    st->n_groups = lanes_only || q ? 0 : nf;
    st->groups = zl_arena_calloc (a, st->n_groups ? st->n_groups : 1, sizeof (zl_group_stats_t));
    // a group query: the flows it picks, sorted, then the page cut out
    s_pick_t *picks = q ? zl_arena_alloc (a, (nf ? nf : 1) * sizeof *picks) : NULL;
    size_t n_picks = 0;
    size_t dead_flows = 0; // flows holding dead letters
    for (size_t i = 0; i < nf; i++) {
        zl_flow_t *f = flows[i];
        dead_flows += f->dlq > 0;
        s_add_group (&st->lanes[f->lane->index], f, now.mono_ms);
        if (q) {
            if ((q->lane && q->lane[0] && strcmp (q->lane, f->lane->name) != 0) ||
                (q->tenant_contains &&
                 !zl_text_contains_nocase (f->tenant->name, q->tenant_contains)))
                continue;
            s_pick_t *p = &picks[n_picks++];
            p->f = f;
            p->by = q->sort == ZL_GROUP_SORT_TENANT ? 1 : q->sort == ZL_GROUP_SORT_LANE ? 2 : 0;
            p->dir = q->ascending ? 1 : -1;
            p->key = p->by ? 0 : s_figure (f, q->sort, now.mono_ms) * (q->ascending ? 1 : -1);
            continue;
        }
        if (lanes_only)
            continue;
        st->groups[i].lane = f->lane->name;
        st->groups[i].tenant = f->tenant->name;
        st->groups[i].paused = f->lane->paused;
        s_add_group (&st->groups[i], f, now.mono_ms);
        s_add_group (&st->tenants[f->tenant->index], f, now.mono_ms);
    }
    // the page: its rows in order; `row_of` maps a flow to its row, or -1
    int32_t *row_of = NULL;
    if (q) {
        qsort (picks, n_picks, sizeof *picks, s_pick_cmp);
        st->groups_matched = n_picks;
        uint32_t limit = q->limit ? q->limit : 50;
        size_t from = q->offset < n_picks ? q->offset : n_picks;
        size_t n = n_picks - from < limit ? n_picks - from : limit;
        st->n_groups = n;
        st->groups = zl_arena_calloc (a, n ? n : 1, sizeof (zl_group_stats_t));
        row_of = zl_arena_alloc (a, (nf ? nf : 1) * sizeof *row_of);
        for (size_t i = 0; i < nf; i++)
            row_of[i] = -1;
        for (size_t i = 0; i < n; i++) {
            zl_flow_t *f = picks[from + i].f;
            st->groups[i].lane = f->lane->name;
            st->groups[i].tenant = f->tenant->name;
            st->groups[i].paused = f->lane->paused;
            s_add_group (&st->groups[i], f, now.mono_ms);
            row_of[f->index] = (int32_t)i;
        }
    }
    /*  The oldest dead letter of each flow: the DLQ is in the order jobs
        died, so a flow's first is its oldest, and the walk ends once every
        flow holding one has been met (with dead letters spread over many
        flows, a small part of the queue). */
    uint64_t *oldest = zl_arena_calloc (a, nf ? nf : 1, sizeof *oldest); // age + 1, 0 unseen
    zl_dlq_t *dlq = zl_jobs_dlq (src->jobs);
    for (zl_job_t *j = zl_dlq_first (dlq); j && dead_flows; j = zl_dlq_next (dlq, j)) {
        uint32_t fi = j->flow->index;
        if (fi >= nf || oldest[fi])
            continue;
        int64_t age = now.wall_ms - j->dead_at_ms;
        oldest[fi] = (uint64_t)(age > 0 ? age : 0) + 1;
        dead_flows--;
    }
    for (size_t i = 0; i < nf; i++) {
        if (!oldest[i])
            continue;
        uint64_t age = oldest[i] - 1;
        zl_group_stats_t *lane = &st->lanes[flows[i]->lane->index];
        if (age > lane->oldest_dlq_age_ms)
            lane->oldest_dlq_age_ms = age;
        if (q) {
            if (row_of[i] >= 0)
                st->groups[row_of[i]].oldest_dlq_age_ms = age;
            continue;
        }
        if (lanes_only)
            continue;
        st->groups[i].oldest_dlq_age_ms = age;
        zl_group_stats_t *t = &st->tenants[flows[i]->tenant->index];
        if (age > t->oldest_dlq_age_ms)
            t->oldest_dlq_age_ms = age;
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
