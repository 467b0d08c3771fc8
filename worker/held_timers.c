/*  held_timers: the worker's per-job deadlines on the shared heap
    (common/heap.h). Each job remembers its slot in timer_idx, 1-based so a
    zeroed job is unscheduled. */
#include "held_timers.h"

#include "heap.h"
#include "zl_alloc.h"

#include <stddef.h>
#include <stdlib.h>

struct _zl_held_timers_t {
    zl_heap_t *heap;
};

static bool
s_before (const void *a, const void *b)
{
    const zl_held_job_t *x = a, *y = b;
    return x->due_ms < y->due_ms || (x->due_ms == y->due_ms && x->seq < y->seq);
}

zl_held_timers_t *
zl_held_timers_new (void)
{
    zl_held_timers_t *self = ZL_NEW (zl_held_timers_t);
    self->heap = zl_heap_new (s_before, offsetof (zl_held_job_t, timer_idx), 0);
    return self;
}

void
zl_held_timers_destroy (zl_held_timers_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_heap_destroy (&(*self_p)->heap);
    free (*self_p);
    *self_p = NULL;
}

void
zl_held_timers_remove (zl_held_timers_t *self, zl_held_job_t *job)
{
    zl_heap_remove (self->heap, job);
}

void
zl_held_timers_update (zl_held_timers_t *self, zl_held_job_t *job)
{
    int64_t a = job->next_extend_ms, b = job->max_run_at_ms;
    if (!a && !b) {
        zl_heap_remove (self->heap, job);
        return;
    }
    job->due_ms = !a ? b : !b ? a : a < b ? a : b;
    zl_heap_set (self->heap, job);
}

zl_held_job_t *
zl_held_timers_due (zl_held_timers_t *self, int64_t now_ms)
{
    zl_held_job_t *top = zl_heap_top (self->heap);
    return top && top->due_ms <= now_ms ? top : NULL;
}

int64_t
zl_held_timers_next_ms (zl_held_timers_t *self)
{
    zl_held_job_t *top = zl_heap_top (self->heap);
    return top ? top->due_ms : INT64_MAX;
}

size_t
zl_held_timers_size (zl_held_timers_t *self)
{
    return zl_heap_size (self->heap);
}
