#include "dlq.h"

#include "u64map.h"
#include "zl_alloc.h"

#include <stdlib.h>

// Dead jobs are linked through next / dlq_prev (a dead job is in no FIFO).
struct _zl_dlq_t {
    zl_u64map_t *by_id;
    zl_job_t *head, *tail;
};

zl_dlq_t *
zl_dlq_new (void)
{
    zl_dlq_t *self = ZL_NEW (zl_dlq_t);
    self->by_id = zl_u64map_new ();
    return self;
}

void
zl_dlq_destroy (zl_dlq_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_u64map_destroy (&(*self_p)->by_id);
    free (*self_p);
    *self_p = NULL;
}

void
zl_dlq_add (zl_dlq_t *self, zl_job_t *job)
{
    job->next = NULL;
    job->dlq_prev = self->tail;
    if (self->tail)
        self->tail->next = job;
    else
        self->head = job;
    self->tail = job;
    zl_u64map_put (self->by_id, job->id, job);
}

void
zl_dlq_remove (zl_dlq_t *self, zl_job_t *job)
{
    if (!zl_u64map_remove (self->by_id, job->id))
        return;
    if (job->dlq_prev)
        job->dlq_prev->next = job->next;
    else
        self->head = job->next;
    if (job->next)
        job->next->dlq_prev = job->dlq_prev;
    else
        self->tail = job->dlq_prev;
    job->dlq_prev = job->next = NULL;
}

zl_job_t *
zl_dlq_find (zl_dlq_t *self, uint64_t id)
{
    return zl_u64map_get (self->by_id, id);
}

zl_job_t *
zl_dlq_first (zl_dlq_t *self)
{
    return self->head;
}

zl_job_t *
zl_dlq_next (zl_dlq_t *self, zl_job_t *job)
{
    (void)self;
    return job->next;
}

size_t
zl_dlq_depth (zl_dlq_t *self)
{
    return zl_u64map_size (self->by_id);
}
