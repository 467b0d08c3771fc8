#include "timers.h"

#include "zl_alloc.h"

#include <stdlib.h>

#define NO_SLOT UINT32_MAX

struct _zl_timers_t {
    zl_job_t **heap;
    size_t size;
    size_t cap;
};

zl_timers_t *
zl_timers_new (void)
{
    zl_timers_t *self = ZL_NEW (zl_timers_t);
    self->cap = 1024;
    self->heap = zl_malloc (self->cap * sizeof (zl_job_t *));
    return self;
}

void
zl_timers_destroy (zl_timers_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    free ((*self_p)->heap);
    free (*self_p);
    *self_p = NULL;
}

static inline int
s_before (const zl_job_t *a, const zl_job_t *b)
{
    return a->due_ms < b->due_ms || (a->due_ms == b->due_ms && a->id < b->id);
}

static void
s_place (zl_timers_t *self, size_t i, zl_job_t *job)
{
    self->heap[i] = job;
    job->timer_idx = (uint32_t) i;
}

static void
s_up (zl_timers_t *self, size_t i)
{
    zl_job_t *job = self->heap[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!s_before (job, self->heap[parent]))
            break;
        s_place (self, i, self->heap[parent]);
        i = parent;
    }
    s_place (self, i, job);
}

static void
s_down (zl_timers_t *self, size_t i)
{
    zl_job_t *job = self->heap[i];
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, best = i;
        zl_job_t *best_job = job;
        if (l < self->size && s_before (self->heap[l], best_job))
            best = l, best_job = self->heap[l];
        if (r < self->size && s_before (self->heap[r], best_job))
            best = r, best_job = self->heap[r];
        if (best == i)
            break;
        s_place (self, i, best_job);
        i = best;
    }
    s_place (self, i, job);
}

void
zl_timers_set (zl_timers_t *self, zl_job_t *job)
{
    if (job->timer_idx != NO_SLOT) {
        size_t i = job->timer_idx;
        s_up (self, i);
        s_down (self, job->timer_idx);
        return;
    }
    if (self->size == self->cap) {
        self->cap *= 2;
        self->heap = zl_realloc (self->heap, self->cap * sizeof (zl_job_t *));
    }
    s_place (self, self->size++, job);
    s_up (self, self->size - 1);
}

void
zl_timers_cancel (zl_timers_t *self, zl_job_t *job)
{
    if (job->timer_idx == NO_SLOT)
        return;
    size_t i = job->timer_idx;
    job->timer_idx = NO_SLOT;
    zl_job_t *last = self->heap[--self->size];
    if (i < self->size) {
        s_place (self, i, last);
        s_up (self, i);
        s_down (self, last->timer_idx);
    }
}

zl_job_t *
zl_timers_peek (zl_timers_t *self)
{
    return self->size ? self->heap[0] : NULL;
}

zl_job_t *
zl_timers_pop_due (zl_timers_t *self, int64_t now_ms)
{
    if (!self->size || self->heap[0]->due_ms > now_ms)
        return NULL;
    zl_job_t *job = self->heap[0];
    zl_timers_cancel (self, job);
    return job;
}

size_t
zl_timers_size (zl_timers_t *self)
{
    return self->size;
}
