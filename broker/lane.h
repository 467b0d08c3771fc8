/*  lane and tenant: the runtime side of configured job classes and of the
    customers submitting to them, with their registries. */
#ifndef ZL_LANE_H
#define ZL_LANE_H

#include "bucket.h"
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
    uint64_t depth;     // ready + delayed jobs
    double vtime;       // fair-queuing virtual time of this lane
    double pass;        // weighted share of workers serving several lanes
    zl_bucket_t bucket; // the lane's dispatch rate limit
    void *heap;         // owned by sched: flows with ready jobs
} zl_lane_t;

typedef struct zl_tenant {
    uint32_t index;
    char *name;
    zl_tenant_config_t cfg; // copy; cfg.name borrowed from `name`
    uint32_t in_flight;
    uint64_t depth;
    zl_bucket_t bucket;     // the tenant's dispatch rate limit
    struct zl_flow *capped; // flows parked by this tenant's cap (sched)
} zl_tenant_t;

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

#endif
