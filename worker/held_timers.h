/*  held_timers: a min-heap of the worker's held jobs by their next deadline
    (local max run time or the next lease extension), so the I/O loop pops
    only what is due and reads its next wake-up from the top. Insert, move
    and remove are O(log n). Internal to the worker library; I/O thread only. */
#ifndef ZL_HELD_TIMERS_H
#define ZL_HELD_TIMERS_H

#include "worker_job.h"

#include <stddef.h>
#include <stdint.h>

typedef struct _zl_held_timers_t zl_held_timers_t;

/*  Return a new empty heap. */
zl_held_timers_t *zl_held_timers_new (void);
/*  Destroy the heap (not the jobs); nulls the caller's pointer. */
void zl_held_timers_destroy (zl_held_timers_t **self_p);
/*  (Re)schedule `job` at the earlier of its non-zero next_extend_ms and
    max_run_at_ms (stored in job->due_ms); removes it if both are 0. */
void zl_held_timers_update (zl_held_timers_t *self, zl_held_job_t *job);
/*  Remove `job` if scheduled. */
void zl_held_timers_remove (zl_held_timers_t *self, zl_held_job_t *job);
/*  Return the job with the earliest deadline if it is due at `now_ms`
    (left in the heap: update or remove it), else NULL. Borrowed. */
zl_held_job_t *zl_held_timers_due (zl_held_timers_t *self, int64_t now_ms);
/*  Return the earliest deadline, or INT64_MAX if nothing is scheduled. */
int64_t zl_held_timers_next_ms (zl_held_timers_t *self);
/*  Number of scheduled jobs. */
size_t zl_held_timers_size (zl_held_timers_t *self);

#endif
