/*  metrics: the broker's stats in the Prometheus text exposition format
    (version 0.0.4), for the /metrics page of the broker's HTTP endpoint.

    Broker-wide event counters are `zlane_<name>_total` counters, the store's
    sizes `zlane_<name>` gauges; per lane x tenant: gauges zlane_ready,
    zlane_delayed, zlane_in_flight, zlane_dlq, zlane_oldest_ready_age_seconds,
    zlane_oldest_dlq_age_seconds and counters zlane_flow_*_total with labels
    lane and tenant (or lane only, summed over the tenants); zlane_lane_paused
    per lane; the latency quantiles as zlane_latency_seconds{kind, quantile}. */
#ifndef ZL_METRICS_H
#define ZL_METRICS_H

#include "msg.h"

#include <stdbool.h>
#include <stddef.h>

/*  Render `st`; returns the text (caller frees) and its length in *len.
    With `by_tenant` false the lane x tenant series become per-lane series
    (label lane only): a page whose size does not grow with the tenants. */
char *zl_metrics_render (const zl_stats_t *st, bool by_tenant, size_t *len);

/*  Where the /metrics page gets the stats: `fill` builds them into `st` as
    of now. */
typedef struct {
    void (*fill) (void *arg, zl_stats_t *st);
    void *arg;
} zl_metrics_source_t;

/*  The page function of the HTTP endpoint (http.h) for `source`, a
    zl_metrics_source_t: /metrics rendered, per lane only with the query
    "tenants=0"; 404 for any other path. */
int zl_metrics_page (void *source, const char *path, const char *query, char **body, size_t *len,
                     const char **content_type);

#endif
