/*  timers: the broker's job deadlines on the shared heap (common/heap.h),
    ordered by due time, then job id. A job's timer_idx is its slot. */
#include "timers.h"

#include "heap.h"
#include "zl_alloc.h"

#include <stddef.h>
#include <stdlib.h>

struct _zl_timers_t {
    zl_heap_t *heap;
};

static bool
s_before (const void *a, const void *b)
{
    const zl_job_t *x = a, *y = b;
    return x->due_ms < y->due_ms || (x->due_ms == y->due_ms && x->id < y->id);
}

zl_timers_t *
zl_timers_new (void)
{
    zl_timers_t *self = ZL_NEW (zl_timers_t);
    self->heap = zl_heap_new (s_before, offsetof (zl_job_t, timer_idx), UINT32_MAX);
    return self;
}

void
zl_timers_destroy (zl_timers_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_heap_destroy (&(*self_p)->heap);
    free (*self_p);
    *self_p = NULL;
}

void
zl_timers_set (zl_timers_t *self, zl_job_t *job)
{
    zl_heap_set (self->heap, job);
}

void
zl_timers_cancel (zl_timers_t *self, zl_job_t *job)
{
    zl_heap_remove (self->heap, job);
}

zl_job_t *
zl_timers_peek (zl_timers_t *self)
{
    return zl_heap_top (self->heap);
}

zl_job_t *
zl_timers_pop_due (zl_timers_t *self, int64_t now_ms)
{
    zl_job_t *job = zl_heap_top (self->heap);
    if (!job || job->due_ms > now_ms)
        return NULL;
    return zl_heap_pop (self->heap);
}

size_t
zl_timers_size (zl_timers_t *self)
{
    return zl_heap_size (self->heap);
}
