/*  held_timers: the worker's per-job deadlines in one binary min-heap. Each
    job remembers its slot (timer_idx, 1-based so a zeroed job is
    unscheduled), which makes moving and removing it O(log n). */
#include "held_timers.h"

#include "zl_alloc.h"

#include <stdlib.h>

struct _zl_held_timers_t {
    zl_held_job_t **heap;
    size_t size;
    size_t cap;
};

zl_held_timers_t *
zl_held_timers_new (void)
{
    zl_held_timers_t *self = ZL_NEW (zl_held_timers_t);
    self->cap = 64;
    self->heap = zl_malloc (self->cap * sizeof (zl_held_job_t *));
    return self;
}

void
zl_held_timers_destroy (zl_held_timers_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    free ((*self_p)->heap);
    free (*self_p);
    *self_p = NULL;
}

static inline bool
s_before (const zl_held_job_t *a, const zl_held_job_t *b)
{
    return a->due_ms < b->due_ms || (a->due_ms == b->due_ms && a->seq < b->seq);
}

static inline void
s_place (zl_held_timers_t *self, size_t i, zl_held_job_t *job)
{
    self->heap[i] = job;
    job->timer_idx = (uint32_t)(i + 1);
}

static void
s_up (zl_held_timers_t *self, size_t i)
{
    zl_held_job_t *job = self->heap[i];
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
s_down (zl_held_timers_t *self, size_t i)
{
    zl_held_job_t *job = self->heap[i];
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, best = i;
        zl_held_job_t *best_job = job;
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
zl_held_timers_remove (zl_held_timers_t *self, zl_held_job_t *job)
{
    if (!job->timer_idx)
        return;
    size_t i = job->timer_idx - 1;
    job->timer_idx = 0;
    zl_held_job_t *last = self->heap[--self->size];
    if (i < self->size) {
        s_place (self, i, last);
        s_up (self, i);
        s_down (self, last->timer_idx - 1);
    }
}

void
zl_held_timers_update (zl_held_timers_t *self, zl_held_job_t *job)
{
    int64_t a = job->next_extend_ms, b = job->max_run_at_ms;
    if (!a && !b) {
        zl_held_timers_remove (self, job);
        return;
    }
    job->due_ms = !a ? b : !b ? a : a < b ? a : b;
    if (job->timer_idx) {
        s_up (self, job->timer_idx - 1);
        s_down (self, job->timer_idx - 1);
        return;
    }
    if (self->size == self->cap) {
        self->cap *= 2;
        self->heap = zl_realloc (self->heap, self->cap * sizeof (zl_held_job_t *));
    }
    s_place (self, self->size++, job);
    s_up (self, self->size - 1);
}

zl_held_job_t *
zl_held_timers_due (zl_held_timers_t *self, int64_t now_ms)
{
    return self->size && self->heap[0]->due_ms <= now_ms ? self->heap[0] : NULL;
}

int64_t
zl_held_timers_next_ms (zl_held_timers_t *self)
{
    return self->size ? self->heap[0]->due_ms : INT64_MAX;
}

size_t
zl_held_timers_size (zl_held_timers_t *self)
{
    return self->size;
}
