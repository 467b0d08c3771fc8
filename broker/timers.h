/*  timers: one min-heap of job deadlines (lease expiry, max run, delayed
    retries and delayed submits). A waiting job costs nothing per loop turn;
    insert, remove and pop are O(log n). */
#ifndef ZL_TIMERS_H
#define ZL_TIMERS_H

#include "job.h"

#include <stddef.h>
#include <stdint.h>

typedef struct _zl_timers_t zl_timers_t;

/*  Return a new empty heap. */
zl_timers_t *zl_timers_new (void);
/*  Destroy the heap (not the jobs); nulls the caller's pointer. */
void zl_timers_destroy (zl_timers_t **self_p);
/*  Schedule `job` at job->due_ms (re-schedules if already in the heap). */
void zl_timers_set (zl_timers_t *self, zl_job_t *job);
/*  Remove `job` if scheduled. */
void zl_timers_cancel (zl_timers_t *self, zl_job_t *job);
/*  Return the earliest job without removing it, or NULL. */
zl_job_t *zl_timers_peek (zl_timers_t *self);
/*  Remove and return the earliest job if due at `now_ms`, else NULL. */
zl_job_t *zl_timers_pop_due (zl_timers_t *self, int64_t now_ms);
/*  Number of scheduled jobs. */
size_t zl_timers_size (zl_timers_t *self);

#endif
