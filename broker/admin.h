/*  admin: the operator's requests on the admin socket (zlane-ctl), carried
    out on the broker's state: stats, the dead-letter queue (list, show,
    redrive, purge) and pausing or resuming a lane. The broker checks the
    sender's role first: zl_admin_changes says whether a request needs the
    admin role or may be read by a subscriber. */
#ifndef ZL_ADMIN_H
#define ZL_ADMIN_H

#include "arena.h"
#include "jobs.h"
#include "lane.h"
#include "msg.h"
#include "stats.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    zl_jobs_t *jobs;
    zl_lanes_t *lanes;
    uint64_t *counters;              // the broker's (counters.h): redriven, purged
    zl_arena_t *arena;               // the reply's strings and arrays
    const zl_stats_sources_t *stats; // for ZL_ADMIN_STATS
} zl_admin_env_t;

/*  True if `req` changes the broker (redrive, purge, pause, resume). */
bool zl_admin_changes (const zl_admin_request_t *req);
/*  Carry out `req` and fill `reply` (ok false with an error text, counted
    in err_admin_refused, for a request that cannot be done: an id not in the
    DLQ, a redrive or purge that names nothing, an undeclared lane). Returns
    0, or -1 for a request without an operation, which the caller rejects. */
int zl_admin_apply (const zl_admin_env_t *env, const zl_admin_request_t *req, zl_now_t now,
                    zl_admin_reply_t *reply);

#endif
