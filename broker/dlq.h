/*  dlq: the dead-letter queue, in the order jobs died. Holds borrowed job
    records (state DEAD); jobs.c moves jobs in and out. */
#ifndef ZL_DLQ_H
#define ZL_DLQ_H

#include "job.h"

#include <stddef.h>
#include <stdint.h>

typedef struct _zl_dlq_t zl_dlq_t;

/*  Return an empty DLQ. */
zl_dlq_t *zl_dlq_new (void);
/*  Destroy (not the jobs); nulls the caller's pointer. */
void zl_dlq_destroy (zl_dlq_t **self_p);
/*  Append a dead job. */
void zl_dlq_add (zl_dlq_t *self, zl_job_t *job);
/*  Remove a dead job. */
void zl_dlq_remove (zl_dlq_t *self, zl_job_t *job);
/*  Return the dead job with `id`, or NULL. */
zl_job_t *zl_dlq_find (zl_dlq_t *self, uint64_t id);
/*  Return the oldest dead job, or NULL. */
zl_job_t *zl_dlq_first (zl_dlq_t *self);
/*  Return the dead job after `job` in death order, or NULL. */
zl_job_t *zl_dlq_next (zl_dlq_t *self, zl_job_t *job);
/*  Number of dead jobs. */
size_t zl_dlq_depth (zl_dlq_t *self);

#endif
