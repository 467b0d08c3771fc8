/*  recovery: the broker's state rebuilt from the store when it starts to
    lead -- at start, or when it takes over from another broker -- queues,
    timers, the DLQ and the id counter, one stored job at a time through
    the job state machine (zl_jobs_restore). The attempts that were running
    when the last leader stopped count as failed: `broker_restart` when this
    store's broker restarted, `leader_change` when another broker took the
    lead. A lane no longer declared keeps its stored jobs (the lane comes
    back with the default settings). */
#ifndef ZL_RECOVERY_H
#define ZL_RECOVERY_H

#include "jobs.h"
#include "lane.h"
#include "scheduler.h"
#include "store.h"

#include <stddef.h>

/*  What recovery works on (borrowed). */
typedef struct {
    zl_store_t *store;
    zl_lanes_t *lanes;
    zl_sched_t *sched;
    zl_jobs_t *jobs;
    const char *where;                // the store location (password hidden), for messages
    const char *cause;                // zl_store_recovery_cause: "restart" or "leader_change"
    int (*commit) (void *commit_arg); // the broker's commit: 0 or -1
    void *commit_arg;
    struct _zl_schedules_t *schedules; // where stored cron schedules go (schedules.h)
} zl_recovery_env_t;

/*  Recover everything the store holds, commit what recovery changed (the
    failed attempts) and log a summary. Returns 0, or -1 with the reason in
    `err`. */
int zl_recover (const zl_recovery_env_t *env, char *err, size_t errlen);

#endif
