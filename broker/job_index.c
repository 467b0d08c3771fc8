#include "job_index.h"

#include "log.h"
#include "zl_alloc.h"

#include <stdlib.h>

#define PTR_BITS 48
#define PTR_MASK ((UINT64_C (1) << PTR_BITS) - 1)

struct _zl_job_index_t {
    uint64_t *slots; // 0 = empty; else tag << 48 | pointer
    size_t cap;      // a power of two
    size_t size;
};

static inline uint64_t
s_mix (uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return k;
}

// The slot's tag for a hash: its top 16 bits, never 0.
static inline uint64_t
s_tag (uint64_t h)
{
    uint64_t t = h >> PTR_BITS;
    return (t ? t : 1) << PTR_BITS;
}

static inline zl_job_t *
s_job (uint64_t slot)
{
    return (zl_job_t *)(uintptr_t)(slot & PTR_MASK);
}

zl_job_index_t *
zl_job_index_new (void)
{
    zl_job_index_t *self = ZL_NEW (zl_job_index_t);
    self->cap = 64;
    self->slots = zl_calloc (self->cap, sizeof *self->slots);
    return self;
}

void
zl_job_index_destroy (zl_job_index_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    free ((*self_p)->slots);
    free (*self_p);
    *self_p = NULL;
}

static void
s_grow (zl_job_index_t *self)
{
    uint64_t *old = self->slots;
    size_t old_cap = self->cap;
    self->cap *= 2;
    self->slots = zl_calloc (self->cap, sizeof *self->slots);
    size_t mask = self->cap - 1;
    for (size_t i = 0; i < old_cap; i++) {
        if (!old[i])
            continue;
        size_t j = (size_t)s_mix (s_job (old[i])->id) & mask;
        while (self->slots[j])
            j = (j + 1) & mask;
        self->slots[j] = old[i];
    }
    free (old);
}

void
zl_job_index_put (zl_job_index_t *self, zl_job_t *job)
{
    uintptr_t p = (uintptr_t)job;
    if ((uint64_t)p & ~PTR_MASK) {
        zl_error ("jobs", "a job's address does not fit in %d bits: stopping", PTR_BITS);
        abort ();
    }
    if ((self->size + 1) * 4 > self->cap * 3)
        s_grow (self);
    uint64_t h = s_mix (job->id), tag = s_tag (h);
    size_t mask = self->cap - 1, j = (size_t)h & mask;
    while (self->slots[j]) {
        if ((self->slots[j] & ~PTR_MASK) == tag && s_job (self->slots[j])->id == job->id)
            break;
        j = (j + 1) & mask;
    }
    if (!self->slots[j])
        self->size++;
    self->slots[j] = tag | (uint64_t)p;
}

// The slot of `id`, or the empty slot where its probe ends.
static size_t
s_find (const zl_job_index_t *self, uint64_t id)
{
    uint64_t h = s_mix (id), tag = s_tag (h);
    size_t mask = self->cap - 1, j = (size_t)h & mask;
    while (self->slots[j]) {
        if ((self->slots[j] & ~PTR_MASK) == tag && s_job (self->slots[j])->id == id)
            return j;
        j = (j + 1) & mask;
    }
    return j;
}

zl_job_t *
zl_job_index_get (const zl_job_index_t *self, uint64_t id)
{
    if (!id)
        return NULL;
    uint64_t s = self->slots[s_find (self, id)];
    return s ? s_job (s) : NULL;
}

zl_job_t *
zl_job_index_remove (zl_job_index_t *self, uint64_t id)
{
    if (!id)
        return NULL;
    size_t mask = self->cap - 1, j = s_find (self, id);
    if (!self->slots[j])
        return NULL;
    zl_job_t *job = s_job (self->slots[j]);
    self->slots[j] = 0;
    self->size--;
    // backward-shift deletion keeps probe chains whole without tombstones
    size_t i = j;
    for (size_t k = (j + 1) & mask; self->slots[k]; k = (k + 1) & mask) {
        size_t home = (size_t)s_mix (s_job (self->slots[k])->id) & mask;
        // move k into the hole at i if its home is not in (i, k]
        if ((i <= k) ? (home <= i || home > k) : (home <= i && home > k)) {
            self->slots[i] = self->slots[k];
            self->slots[k] = 0;
            i = k;
        }
    }
    return job;
}

size_t
zl_job_index_size (const zl_job_index_t *self)
{
    return self->size;
}

zl_job_t *
zl_job_index_next (const zl_job_index_t *self, size_t *cursor)
{
    while (*cursor < self->cap) {
        uint64_t s = self->slots[(*cursor)++];
        if (s)
            return s_job (s);
    }
    return NULL;
}
