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

#endif
