/*  schedules (zl_schedules_t): cron schedules that enqueue a job at every
    tick (cron.h), exactly once across restarts and failovers.

    A schedule is stored as a record of its own in the job table's key space
    (JobRec.schedule: the template of its jobs and its expression; StateRec:
    the last tick and whether it is paused), written into the turn's batch
    by each change; recovery hands such records here, never to the jobs. At
    a tick the schedule enqueues a job through the job table (zl_jobs_stage
    and zl_jobs_accept, as a Submit would, but past no credit or depth cap)
    under the idempotency key "cron:<name>:<tick ms>", with the headers
    zlane-schedule and zlane-cron-tick, and writes its last tick in the same
    batch: one commit makes both durable or neither, so a tick is enqueued
    once. Ticks missed while no broker ran are skipped (counted), or, with
    catch_up, the latest catch_up_max of them are enqueued late. */
#ifndef ZL_SCHEDULES_H
#define ZL_SCHEDULES_H

#include "arena.h"
#include "clock.h"
#include "config.h"
#include "jobs.h"
#include "lane.h"
#include "msg.h"
#include "record.h"
#include "scheduler.h"
#include "store.h"

#include <stddef.h>
#include <stdint.h>

#define ZL_SCHEDULE_CATCH_UP_DEFAULT 10 // catch_up_max 0 means this
#define ZL_SCHEDULE_CATCH_UP_MAX 1000

typedef struct _zl_schedules_t zl_schedules_t;

/*  Where ticks go (borrowed). */
typedef struct {
    zl_jobs_t *jobs;
    zl_sched_t *sched;
    zl_lanes_t *lanes;
    zl_store_t *store;
} zl_schedules_env_t;

/*  Return an empty table over `env` (copied). */
zl_schedules_t *zl_schedules_new (const zl_schedules_env_t *env);
/*  Destroy; nulls the caller's pointer. */
void zl_schedules_destroy (zl_schedules_t **self_p);
/*  Add `s` (or replace the schedule of its name, keeping its last tick: a
    tick already enqueued is not enqueued again) and write its record.
    Returns 0, or -1 with the reason in `err` (a bad name, expression,
    tenant or lane; a store write that failed). */
int zl_schedules_add (zl_schedules_t *self, const zl_schedule_info_t *s, zl_now_t now, char *err,
                      size_t errlen);
/*  Add (or update, keeping their ticks so far) the schedules `cfg`
    declares; one that is refused is logged and left out. */
void zl_schedules_add_config (zl_schedules_t *self, const zl_broker_config_t *cfg, zl_now_t now);
/*  Remove, pause or resume (`paused`) the schedule `name`. Returns 0, or -1
    if there is none of that name. */
int zl_schedules_remove (zl_schedules_t *self, const char *name);
int zl_schedules_pause (zl_schedules_t *self, const char *name, bool paused, zl_now_t now);
/*  The schedules, by name, into `arena` (their strings borrowed). */
size_t zl_schedules_list (zl_schedules_t *self, zl_arena_t *arena, zl_now_t now,
                          zl_schedule_info_t **out);
/*  Recovery: a stored schedule record. */
void zl_schedules_restore (zl_schedules_t *self, uint64_t id, const zl_job_rec_t *rec,
                           const zl_state_rec_t *st);
/*  Enqueue the jobs of every tick due by `now` (wall clock). Returns how
    many were enqueued. */
size_t zl_schedules_fire (zl_schedules_t *self, zl_now_t now);
/*  The wall-clock ms of the next tick of a schedule not paused, or -1. */
int64_t zl_schedules_next_ms (zl_schedules_t *self);
/*  Counters: ticks enqueued, ticks skipped (missed, or past catch_up_max),
    ticks that could not be enqueued (the lane is gone, the store refused). */
void zl_schedules_counts (zl_schedules_t *self, uint64_t *fired, uint64_t *skipped,
                          uint64_t *failed);
/*  Number of schedules. */
size_t zl_schedules_count (zl_schedules_t *self);

#endif
