/*  admin: the operator's requests on the admin socket (zlane-ctl), carried
    out on the broker's state: stats, the dead-letter queue (list, show,
    redrive, purge), pausing or resuming a lane, and cancelling jobs. The broker checks the
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
    uint64_t *counters;                // the broker's (counters.h): redriven, purged
    zl_arena_t *arena;                 // the reply's strings and arrays
    const zl_stats_sources_t *stats;   // for ZL_ADMIN_STATS
    struct _zl_schedules_t *schedules; // cron schedules (schedules.h)
    struct _zl_workers_t *workers;     // the connected workers (workers.h)
} zl_admin_env_t;

/*  True if `req` changes the broker (redrive, purge, pause, resume, cancel). */
bool zl_admin_changes (const zl_admin_request_t *req);
/*  Carry out `req` and fill `reply`. A request that cannot be done -- it
    names an id that is not a dead letter, a lane that is not declared, a
    page cursor (after_id) no longer in the DLQ, or a redrive or purge that
    names nothing -- changes nothing and gets ok false with the reason,
    counted in err_admin_refused. A filter that matches no dead letter is a
    success with count 0. A cancel answers each id on its own (cancelled,
    already cancelled, finished, unknown: zl_jobs_cancel), with count the
    jobs it cancelled. Returns 0; or -1, with the reason in reply->error,
    for a malformed request (no operation, a name breaking the text rules,
    a cancel of no ids or of more than ZL_CANCEL_MAX_IDS), which the caller
    rejects as INVALID. */
int zl_admin_apply (const zl_admin_env_t *env, const zl_admin_request_t *req, zl_now_t now,
                    zl_admin_reply_t *reply);

#endif
