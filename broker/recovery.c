#include "recovery.h"

#include "schedules.h"

#include "clock.h"
#include "log.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    const zl_recovery_env_t *env;
    zl_now_t now;
    uint64_t jobs;
    zl_jobs_cut_t cut; // how the attempts cut short end
} recover_ctx_t;

// What the store says ended the attempts that were running.
static zl_jobs_cut_t
s_cut (const char *cause)
{
    if (cause && !strcmp (cause, "leader_change"))
        return (zl_jobs_cut_t){ZL_OUTCOME_LEADER_CHANGE,
                               "another broker took the lead while this attempt ran"};
    return (zl_jobs_cut_t){ZL_OUTCOME_BROKER_RESTART,
                           "the broker restarted while this attempt ran"};
}

static void
s_recover_job (void *arg, uint64_t id, const zl_job_rec_t *rec, const zl_state_rec_t *state)
{
    recover_ctx_t *rc = arg;
    const zl_recovery_env_t *env = rc->env;
    if (rec->schedule) { // a cron schedule's record, not a job
        if (env->schedules)
            zl_schedules_restore (env->schedules, id, rec, state);
        return;
    }
    zl_lane_t *lane = zl_lanes_lookup (env->lanes, rec->lane);
    if (!lane) {
        // a lane no longer declared still owns stored jobs: keep them
        zl_warn ("broker",
                 "job %" PRIu64 " is in lane '%s', which is no longer declared: "
                 "keeping the lane with default settings",
                 id, rec->lane);
        lane = zl_lanes_add (env->lanes, rec->lane);
    }
    zl_tenant_t *tenant = zl_lanes_tenant (env->lanes, rec->tenant);
    zl_flow_t *flow = zl_sched_flow (env->sched, lane, tenant);
    zl_jobs_restore (env->jobs, id, flow, rec, state, &rc->cut, rc->now);
    rc->jobs++;
}

int
zl_recover (const zl_recovery_env_t *env, char *err, size_t errlen)
{
    int64_t t0 = zl_clock_mono_us ();
    recover_ctx_t rc = {env, zl_now (), 0, s_cut (env->cause)};
    uint64_t next_id = 1;
    if (zl_store_begin (env->store) != ZL_STORE_OK ||
        zl_store_recover (env->store, s_recover_job, &rc, &next_id, err, errlen) != 0)
        return -1;
    zl_jobs_restore_done (env->jobs, next_id, rc.now);
    if (env->commit (env->commit_arg) != 0) {
        snprintf (err, errlen, "cannot write the recovered state to %s", env->where);
        return -1;
    }
    uint64_t ready = 0, delayed = 0, dead = 0;
    size_t nf;
    zl_flow_t **flows = zl_sched_flows (env->sched, &nf);
    for (size_t i = 0; i < nf; i++) {
        ready += flows[i]->ready;
        delayed += flows[i]->delayed;
        dead += flows[i]->dlq;
    }
    zl_info ("broker",
             "recovered %" PRIu64 " job(s) from %s in %.3f s: %" PRIu64 " ready, %" PRIu64
             " delayed, %" PRIu64 " dead-lettered; next id %" PRIu64
             "; attempts that were running end as %s",
             rc.jobs, env->where, (double)(zl_clock_mono_us () - t0) / 1e6, ready, delayed, dead,
             zl_jobs_next_id (env->jobs), zl_outcome_name (rc.cut.outcome));
    return 0;
}
