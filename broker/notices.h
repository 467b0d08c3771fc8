/*  notices: who is told when a job ends, and how. A watcher (Watch) gets
    the job's JobOutcome once it is final; a lane with publish_done
    publishes it as done.<lane>.<tenant>; a dead letter's event and a
    settled batch's batch.<id> go on the events socket; the worker of a job
    cancelled or expired while it ran is sent Cancel. Everything is queued
    in replies.h, so it goes after the turn's commit. Owns the table of
    watches (watches.h); listens to the job table (zl_notices_job_event). */
#ifndef ZL_NOTICES_H
#define ZL_NOTICES_H

#include "arena.h"
#include "clock.h"
#include "jobs.h"
#include "lane.h"
#include "replies.h"
#include "wire.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ZL_NOTICES_MAX_WATCHES 100000  // job ids watched at once, by all producers
#define ZL_NOTICES_MAX_WATCH_IDS 10000 // job ids in one Watch

typedef struct _zl_notices_t zl_notices_t;

/*  What notices work on, all borrowed and outliving it. */
typedef struct {
    zl_jobs_t *jobs;
    zl_replies_t *replies;
    uint64_t *counters; // the broker's counters (ZL_CTR_*)
    zl_arena_t *turn;   // strings that live until the next turn
    const bool *live;   // false while recovering: nobody is told then
} zl_notices_env_t;

/*  Return the notices over `env` (copied), with no watch. */
zl_notices_t *zl_notices_new (const zl_notices_env_t *env);
/*  Destroy; nulls the caller's pointer. */
void zl_notices_destroy (zl_notices_t **self_p);

/*  The job table's listener (zl_jobs_set_listener, with the notices as
    its context). */
void zl_notices_job_event (void *self, zl_jobs_event_t ev, zl_job_t *job);

/*  May the watcher see this job (its key's tenants)? */
typedef bool (zl_notices_may_fn) (void *arg, const char *tenant);

/*  A Watch of `n` job ids (1 to ZL_NOTICES_MAX_WATCH_IDS: the caller
    checked) from `peer`: each answered at once when final or unknown (or
    a tenant `may` refuses: unknown), else when it becomes final. Returns
    how many could not be watched (the table is full). */
size_t zl_notices_watch (zl_notices_t *self, const zl_peer_t *peer, const uint64_t *ids, size_t n,
                         zl_notices_may_fn *may, void *may_arg);

/*  After dispatch: every lane whose circuit breaker changed state this turn
    (its cool-down's end included: ticked here) publishes breaker.<lane>
    (a Breaker) at once: the breaker is not stored, nothing waits for the
    commit. */
void zl_notices_breakers (zl_notices_t *self, zl_lanes_t *lanes, zl_now_t now);
/*  End of a turn's work, before dispatch: the batches that settled enqueue
    their callbacks (jobs.h) and their batch.<id> events. Returns how many. */
size_t zl_notices_settle_batches (zl_notices_t *self, zl_now_t now);

#endif
