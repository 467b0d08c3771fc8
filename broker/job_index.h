/*  job_index: every live job by id, in 8 bytes a job. An open-addressing
    table (linear probing, backward-shift deletion, load at most 3/4) of
    job pointers: the id is read from the job itself; the slot's top 16 bits
    (a user-space pointer fits in 48 on the machines zlane runs on) hold 8
    bits of the id's hash, so that a probe past another job seldom reads it,
    and the job's distance from its home slot, so that a deletion shifts the
    chain back without reading any. Half the size of a u64map of (id,
    pointer) pairs: 16 MiB less with a million jobs queued. */
#ifndef ZL_JOB_INDEX_H
#define ZL_JOB_INDEX_H

#include "job.h"

#include <stddef.h>
#include <stdint.h>

typedef struct _zl_job_index_t zl_job_index_t;

/*  Return an empty index. */
zl_job_index_t *zl_job_index_new (void);
/*  Destroy the index (not the jobs); nulls the caller's pointer. */
void zl_job_index_destroy (zl_job_index_t **self_p);
/*  Add `job` under job->id (nonzero), or put it in place of the job of that id. */
void zl_job_index_put (zl_job_index_t *self, zl_job_t *job);
/*  Return the job of `id`, or NULL. */
zl_job_t *zl_job_index_get (const zl_job_index_t *self, uint64_t id);
/*  Take the job of `id` out; returns it, or NULL if there is none. */
zl_job_t *zl_job_index_remove (zl_job_index_t *self, uint64_t id);
/*  Number of jobs. */
size_t zl_job_index_size (const zl_job_index_t *self);
/*  The next job from *cursor (start at 0), or NULL at the end; nothing may
    be added or removed while walking. */
zl_job_t *zl_job_index_next (const zl_job_index_t *self, size_t *cursor);

#endif
