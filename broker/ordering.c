#include "ordering.h"

#include "clock.h"
#include "scheduler.h"
#include "siphash.h"
#include "u64map.h"
#include "zl_alloc.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

typedef struct group {
    uint64_t hash;
    uint64_t head; // id of the job whose turn it is, 0 none
    union {
        zl_job_t *first;         // held jobs, in order ...
        struct group *next_free; // ... or, a cell not in use, the next free one
    };
    zl_job_t *last;
} group_t;

struct _zl_ordering_t {
    uint8_t key[ZL_SIPHASH_KEY_LEN];
    zl_u64map_t *groups;   // hash -> group_t
    zl_u64map_t *group_of; // job id -> group_t (every job of a group)
    zl_u64map_t *seq_of;   // job id -> its place, for jobs that joined again
    uint64_t held;
    group_t *free_cells; // groups are reused: a key's group comes and goes per job
};

zl_ordering_t *
zl_ordering_new (void)
{
    zl_ordering_t *self = ZL_NEW (zl_ordering_t);
    if (getrandom (self->key, sizeof self->key, 0) != (ssize_t)sizeof self->key) {
        // not a secret that guards anything but a tenant's own parallelism
        int64_t t = zl_clock_mono_us ();
        memcpy (self->key, &t, sizeof t);
    }
    self->groups = zl_u64map_new ();
    self->group_of = zl_u64map_new ();
    self->seq_of = zl_u64map_new ();
    return self;
}

void
zl_ordering_destroy (zl_ordering_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_ordering_t *self = *self_p;
    size_t cursor = 0;
    group_t *g;
    while ((g = zl_u64map_next (self->groups, &cursor, NULL)))
        free (g);
    while ((g = self->free_cells)) {
        self->free_cells = g->next_free;
        free (g);
    }
    zl_u64map_destroy (&self->groups);
    zl_u64map_destroy (&self->group_of);
    zl_u64map_destroy (&self->seq_of);
    free (self);
    *self_p = NULL;
}

uint64_t
zl_ordering_group (zl_ordering_t *self, const struct zl_flow *flow, const char *key)
{
    zl_siphash_t h;
    uint8_t out[8];
    zl_siphash_init (&h, self->key, 8);
    zl_siphash_update (&h, &flow->index, sizeof flow->index);
    zl_siphash_update (&h, key, strlen (key));
    zl_siphash_final (&h, out);
    uint64_t v;
    memcpy (&v, out, sizeof v);
    return v ? v : 1; // (map keys are non-zero)
}

bool
zl_ordering_join (zl_ordering_t *self, zl_job_t *job, uint64_t group, uint64_t seq)
{
    group_t *g = zl_u64map_get (self->groups, group);
    if (!g) {
        if ((g = self->free_cells)) {
            self->free_cells = g->next_free;
            memset (g, 0, sizeof *g);
        } else
            g = ZL_NEW (group_t);
        g->hash = group;
        zl_u64map_put (self->groups, group, g);
    }
    zl_u64map_put (self->group_of, job->id, g);
    if (seq && seq != job->id)
        zl_u64map_put (self->seq_of, job->id, (void *)(uintptr_t)seq);
    job->flags |= ZL_JOBF_ORDER;
    if (!g->head) {
        g->head = job->id;
        return true;
    }
    job->flags |= ZL_JOBF_HELD;
    job->next = NULL;
    job->prev = g->last;
    if (g->last)
        g->last->next = job;
    else
        g->first = job;
    g->last = job;
    self->held++;
    return false;
}

static void
s_unlink (zl_ordering_t *self, group_t *g, zl_job_t *job)
{
    if (job->prev)
        job->prev->next = job->next;
    else
        g->first = job->next;
    if (job->next)
        job->next->prev = job->prev;
    else
        g->last = job->prev;
    job->next = job->prev = NULL;
    job->flags &= (uint8_t)~ZL_JOBF_HELD;
    self->held--;
}

zl_job_t *
zl_ordering_leave (zl_ordering_t *self, zl_job_t *job)
{
    if (!(job->flags & ZL_JOBF_ORDER))
        return NULL;
    group_t *g = zl_u64map_remove (self->group_of, job->id);
    if (zl_u64map_size (self->seq_of))
        zl_u64map_remove (self->seq_of, job->id);
    job->flags &= (uint8_t)~ZL_JOBF_ORDER;
    if (!g)
        return NULL;
    zl_job_t *next = NULL;
    if (job->flags & ZL_JOBF_HELD)
        s_unlink (self, g, job);
    else if (g->head == job->id) {
        g->head = 0;
        if ((next = g->first)) {
            s_unlink (self, g, next);
            g->head = next->id;
        }
    }
    if (!g->head && !g->first) {
        zl_u64map_remove (self->groups, g->hash);
        g->next_free = self->free_cells;
        self->free_cells = g;
    }
    return next;
}

uint64_t
zl_ordering_seq (zl_ordering_t *self, uint64_t job_id)
{
    return zl_u64map_size (self->seq_of) ? (uint64_t)(uintptr_t)zl_u64map_get (self->seq_of, job_id)
                                         : 0;
}

size_t
zl_ordering_groups (zl_ordering_t *self)
{
    return zl_u64map_size (self->groups);
}

uint64_t
zl_ordering_held (zl_ordering_t *self)
{
    return self->held;
}
