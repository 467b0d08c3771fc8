#define _GNU_SOURCE // open_memstream
#include "metrics.h"

#include "zl_alloc.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The store's figures that are levels, not counts of events.
static const char *const s_gauges[] = {"store_map_bytes",     "store_used_bytes",
                                       "store_file_bytes",    "store_free_bytes",
                                       "store_jobs",          "store_states",
                                       "store_idem_keys",     "store_idem_resend_log",
                                       "store_idem_user_log", "store_commit_avg_us",
                                       "store_commit_max_us", "store_room_walk_max_us",
                                       "store_log_rows",      "store_log_segments",
                                       "jobs_waiting",        "outcomes_kept",
                                       "dep_nodes",           "batches",
                                       "batch_members"};

static bool
s_is_gauge (const char *name)
{
    for (size_t i = 0; i < sizeof s_gauges / sizeof s_gauges[0]; i++)
        if (!strcmp (name, s_gauges[i]))
            return true;
    return false;
}

// A label value, escaped as the format asks (backslash, quote, newline).
static void
s_label (FILE *f, const char *value)
{
    fputc ('"', f);
    for (const char *p = value ? value : ""; *p; p++) {
        if (*p == '\\' || *p == '"')
            fputc ('\\', f), fputc (*p, f);
        else if (*p == '\n')
            fputs ("\\n", f);
        else
            fputc (*p, f);
    }
    fputc ('"', f);
}

static void
s_family (FILE *f, const char *name, const char *type, const char *help)
{
    fprintf (f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

// One sample of a per lane x tenant (or per lane: tenant "") family.
static void
s_group_sample (FILE *f, const char *name, const zl_group_stats_t *g, const char *extra_label,
                const char *extra_value, double value)
{
    fprintf (f, "%s{lane=", name);
    s_label (f, g->lane);
    if (g->tenant && *g->tenant) {
        fputs (",tenant=", f);
        s_label (f, g->tenant);
    }
    if (extra_label) {
        fprintf (f, ",%s=", extra_label);
        s_label (f, extra_value);
    }
    fprintf (f, "} %.10g\n", value);
}

typedef struct {
    const char *name, *type, *help;
    size_t offset; // of a uint64_t in zl_group_stats_t
    double scale;
} group_metric_t;

#define G(field) offsetof (zl_group_stats_t, field)

static const group_metric_t s_group_metrics[] = {
    {"zlane_ready", "gauge", "Jobs ready to run.", G (ready), 1},
    {"zlane_delayed", "gauge", "Jobs waiting for a delay or a retry backoff.", G (delayed), 1},
    {"zlane_in_flight", "gauge", "Jobs leased to workers.", G (in_flight), 1},
    {"zlane_dlq", "gauge", "Jobs in the dead-letter queue.", G (dlq), 1},
    {"zlane_oldest_ready_age_seconds", "gauge", "Age of the oldest ready job.",
     G (oldest_ready_age_ms), 1e-3},
    {"zlane_oldest_dlq_age_seconds", "gauge", "Age of the oldest dead letter.",
     G (oldest_dlq_age_ms), 1e-3},
    {"zlane_flow_submitted_total", "counter", "Jobs accepted.", G (submitted), 1},
    {"zlane_flow_acked_total", "counter", "Jobs acked.", G (acked), 1},
    {"zlane_flow_lease_expired_total", "counter", "Leases that lapsed.", G (lease_expired), 1},
    {"zlane_flow_dead_lettered_total", "counter", "Jobs dead-lettered.", G (dead_lettered), 1},
    {"zlane_flow_run_seconds_total", "counter", "Worker time charged to the tenant.", G (run_us),
     1e-6},
    {"zlane_flow_throttled_total", "counter",
     "Times the flow was held back by a rate limit or a THROTTLED pause.", G (throttled), 1},
    {"zlane_flow_capped_total", "counter", "Times the flow was held back by a concurrency cap.",
     G (capped), 1},
};

static double
s_field (const zl_group_stats_t *g, size_t offset)
{
    uint64_t v;
    memcpy (&v, (const char *)g + offset, sizeof v);
    return (double)v;
}

char *
zl_metrics_render (const zl_stats_t *st, bool by_tenant, size_t *len)
{
    const zl_group_stats_t *groups = by_tenant ? st->groups : st->lanes;
    size_t n_groups = by_tenant ? st->n_groups : st->n_lanes;
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream (&buf, &size);
    if (!f)
        abort (); // out of memory: the allocator policy
    s_family (f, "zlane_uptime_seconds", "gauge", "Time since the broker started.");
    fprintf (f, "zlane_uptime_seconds %.3f\n", (double)st->uptime_ms / 1e3);
    s_family (f, "zlane_workers", "gauge", "Workers connected.");
    fprintf (f, "zlane_workers %" PRIu32 "\n", st->workers);
    s_family (f, "zlane_producers", "gauge", "Producers known.");
    fprintf (f, "zlane_producers %" PRIu32 "\n", st->producers);
    if (st->n_breakers) {
        s_family (f, "zlane_breaker_state", "gauge",
                  "A lane's circuit breaker: 0 closed, 1 open, 2 half-open.");
        for (size_t i = 0; i < st->n_breakers; i++) {
            fprintf (f, "zlane_breaker_state{lane=");
            s_label (f, st->breakers[i].lane);
            fprintf (f, "} %" PRIu32 "\n", st->breakers[i].state);
        }
        s_family (f, "zlane_breaker_opened_total", "counter",
                  "Times a lane's circuit breaker opened.");
        for (size_t i = 0; i < st->n_breakers; i++) {
            fprintf (f, "zlane_breaker_opened_total{lane=");
            s_label (f, st->breakers[i].lane);
            fprintf (f, "} %" PRIu64 "\n", st->breakers[i].opened);
        }
    }
    if (st->store_backend && st->store_backend[0]) {
        s_family (f, "zlane_store_info", "gauge", "The store behind this broker (label backend).");
        fprintf (f, "zlane_store_info{backend=\"%s\"} 1\n", st->store_backend);
    }
    if (st->role && st->role[0]) { // leadership: every role, 1 for the one held
        static const char *const roles[] = {"leader", "standby", "unreachable"};
        s_family (f, "zlane_store_role", "gauge",
                  "1 for this broker's role among the brokers sharing its store (label role).");
        for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++)
            fprintf (f, "zlane_store_role{role=\"%s\"} %d\n", roles[i],
                     strcmp (st->role, roles[i]) == 0);
        s_family (f, "zlane_store_epoch", "gauge", "The leader lease's epoch as last seen.");
        fprintf (f, "zlane_store_epoch %" PRIu64 "\n", st->epoch);
        s_family (f, "zlane_store_reachable", "gauge",
                  "1 while a writable database answers the broker.");
        fprintf (f, "zlane_store_reachable %d\n", st->store_reachable ? 1 : 0);
        s_family (f, "zlane_store_takeovers_total", "counter", "Times this broker took the lead.");
        fprintf (f, "zlane_store_takeovers_total %" PRIu64 "\n", st->takeovers);
        s_family (f, "zlane_store_fenced_total", "counter",
                  "Commits refused because another broker led.");
        fprintf (f, "zlane_store_fenced_total %" PRIu64 "\n", st->fenced);
    }
    for (size_t i = 0; i < st->n_counters; i++) {
        const zl_counter_t *c = &st->counters[i];
        char name[128];
        bool gauge = s_is_gauge (c->name);
        snprintf (name, sizeof name, "zlane_%s%s", c->name, gauge ? "" : "_total");
        s_family (f, name, gauge ? "gauge" : "counter",
                  gauge ? "Store figure." : "Broker event count.");
        fprintf (f, "%s %" PRIu64 "\n", name, c->value);
    }
    for (size_t m = 0; m < sizeof s_group_metrics / sizeof s_group_metrics[0]; m++) {
        const group_metric_t *gm = &s_group_metrics[m];
        s_family (f, gm->name, gm->type, gm->help);
        for (size_t i = 0; i < n_groups; i++)
            s_group_sample (f, gm->name, &groups[i], NULL, NULL,
                            s_field (&groups[i], gm->offset) * gm->scale);
    }
    s_family (f, "zlane_flow_nacked_total", "counter", "Jobs nacked, by failure class.");
    for (size_t i = 0; i < n_groups; i++) {
        const zl_group_stats_t *g = &groups[i];
        s_group_sample (f, "zlane_flow_nacked_total", g, "class", "transient",
                        (double)g->nacked_transient);
        s_group_sample (f, "zlane_flow_nacked_total", g, "class", "throttled",
                        (double)g->nacked_throttled);
        s_group_sample (f, "zlane_flow_nacked_total", g, "class", "permanent",
                        (double)g->nacked_permanent);
    }
    s_family (f, "zlane_lane_paused", "gauge", "1 while the lane is paused (zlane-ctl pause).");
    for (size_t i = 0; i < st->n_lanes; i++) {
        fputs ("zlane_lane_paused{lane=", f);
        s_label (f, st->lanes[i].lane);
        fprintf (f, "} %d\n", st->lanes[i].paused ? 1 : 0);
    }
    s_family (f, "zlane_latency_seconds", "gauge",
              "Latency quantiles since the broker started (kind: submit_to_start, submit_to_ack).");
    static const char *const q_names[] = {"0.5", "0.9", "0.99", "1"};
    for (size_t i = 0; i < st->n_latencies; i++) {
        const zl_latency_t *l = &st->latencies[i];
        uint64_t q[] = {l->p50_us, l->p90_us, l->p99_us, l->max_us};
        for (int k = 0; k < 4; k++) {
            fputs ("zlane_latency_seconds{kind=", f);
            s_label (f, l->name);
            fprintf (f, ",quantile=\"%s\"} %.6f\n", q_names[k], (double)q[k] / 1e6);
        }
    }
    s_family (f, "zlane_latency_count_total", "counter", "Jobs measured, by kind.");
    for (size_t i = 0; i < st->n_latencies; i++) {
        fputs ("zlane_latency_count_total{kind=", f);
        s_label (f, st->latencies[i].name);
        fprintf (f, "} %" PRIu64 "\n", st->latencies[i].count);
    }
    fclose (f);
    *len = size;
    return buf;
}

int
zl_metrics_page (void *source, const char *path, const char *query, char **body, size_t *len,
                 const char **content_type)
{
    const zl_metrics_source_t *src = source;
    if (strcmp (path, "/metrics"))
        return 404;
    bool by_tenant = true;
    for (const char *p = query; *p;) {
        size_t n = strcspn (p, "&");
        if (n == 9 && !strncmp (p, "tenants=0", 9))
            by_tenant = false;
        p += n + (p[n] == '&');
    }
    zl_stats_t st;
    src->fill (src->arg, &st);
    *body = zl_metrics_render (&st, by_tenant, len);
    *content_type = "text/plain; version=0.0.4; charset=utf-8";
    return 200;
}
