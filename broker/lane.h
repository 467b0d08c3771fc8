/*  lane and tenant: the runtime side of configured job classes and of the
    customers submitting to them, with their registries. Every field of a
    lane or tenant record is written here (the counts through the functions
    below, which the job state machine and admission call); the others only
    read them. The scheduler keeps its own per-lane and per-tenant state
    (virtual times, heaps, rate buckets) in scheduler.c, by index. */
#ifndef ZL_LANE_H
#define ZL_LANE_H

#include "arena.h"
#include "config.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct zl_lane {
    uint32_t index;
    char *name;
    zl_lane_config_t cfg; // copy; cfg.name borrowed from `name`
    bool paused;
    uint32_t in_flight;
    uint64_t depth;                // ready + delayed jobs, and those being admitted
    struct _zl_breaker_t *breaker; // its circuit breaker (breaker.h), NULL if it has none:
                                   // made here, fed by jobs.c, asked by the scheduler
} zl_lane_t;

typedef struct zl_tenant {
    uint32_t index;
    char *name;
    zl_tenant_config_t cfg; // copy; cfg.name borrowed from `name`
    uint32_t in_flight;
    uint64_t depth;
} zl_tenant_t;

#define ZL_LANE_LIST_MAX 16 // lanes named in an error's "declared:" list

typedef struct _zl_lanes_t zl_lanes_t;

/*  Return registries built from `cfg` (lanes and tenants it declares). */
zl_lanes_t *zl_lanes_new (const zl_broker_config_t *cfg);
/*  Destroy; nulls the caller's pointer. */
void zl_lanes_destroy (zl_lanes_t **self_p);
/*  Return the lane named `name`, or NULL if undeclared (or, with auto_lanes,
    a new lane made from the defaults, while there are fewer than max_lanes). */
zl_lane_t *zl_lanes_lookup (zl_lanes_t *self, const char *name);
/*  Return the lane named `name`, or NULL: never creates one (for requests
    that only name a lane, such as an operator's). */
zl_lane_t *zl_lanes_find (zl_lanes_t *self, const char *name);
/*  Add a lane named `name` with the default settings (or return it if it
    exists). */
zl_lane_t *zl_lanes_add (zl_lanes_t *self, const char *name);
/*  Return the lane at `index`, or NULL. */
zl_lane_t *zl_lanes_at (zl_lanes_t *self, uint32_t index);
/*  Number of lanes. */
uint32_t zl_lanes_count (zl_lanes_t *self);
/*  Return the tenant named `name`, or NULL if the broker has none. */
zl_tenant_t *zl_lanes_tenant_find (zl_lanes_t *self, const char *name);
/*  Return the tenant named `name`, creating it with the default settings. */
zl_tenant_t *zl_lanes_tenant (zl_lanes_t *self, const char *name);
/*  Return the tenant at `index`, or NULL. */
zl_tenant_t *zl_lanes_tenant_at (zl_lanes_t *self, uint32_t index);
/*  Number of tenants. */
uint32_t zl_lanes_tenant_count (zl_lanes_t *self);
/*  The first `max` lane names, comma-separated, with " and N more" if there
    are more, in `arena` (for error texts). */
const char *zl_lanes_names (zl_lanes_t *self, zl_arena_t *arena, uint32_t max);
/*  The sum of every lane's depth. */
uint64_t zl_lanes_total_depth (zl_lanes_t *self);

/*  Count `delta` jobs into (> 0) or out of (< 0) the depth of `lane` and
    `tenant`: queued (ready or delayed), or reserved while being admitted. */
void zl_lanes_count_depth (zl_lane_t *lane, zl_tenant_t *tenant, int64_t delta);
/*  Count `delta` jobs into or out of the running jobs of `lane` and
    `tenant`. */
void zl_lanes_count_running (zl_lane_t *lane, zl_tenant_t *tenant, int delta);
/*  The earliest end of an open circuit breaker's cool-down among the lanes
    (monotonic ms), or -1. */
int64_t zl_lanes_breaker_wake (zl_lanes_t *self);
/*  Pause (dispatch nothing from it) or resume `lane`. */
void zl_lane_set_paused (zl_lane_t *lane, bool paused);

#endif
