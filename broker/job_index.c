#include "job_index.h"

#include "log.h"
#include "zl_alloc.h"

#include <stdlib.h>

/*  A slot: 0 empty; else tag (8 bits of the id's hash) << 56 | the job's
    distance from its home slot (8 bits) << 48 | the job's address. The
    distance lets a deletion shift the chain back without reading the jobs
    in it; a chain that would need a distance past 255 grows the table. */
#define PTR_BITS 48
#define PTR_MASK ((UINT64_C (1) << PTR_BITS) - 1)
#define DIST_SHIFT 48
#define TAG_SHIFT 56
#define DIST_MAX 255

struct _zl_job_index_t {
    uint64_t *slots;
    size_t cap; // a power of two
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

static inline uint64_t
s_tag (uint64_t h)
{
    return (h >> TAG_SHIFT) << TAG_SHIFT;
}

static inline zl_job_t *
s_job (uint64_t slot)
{
    return (zl_job_t *)(uintptr_t)(slot & PTR_MASK);
}

static inline size_t
s_dist (uint64_t slot)
{
    return (size_t)((slot >> DIST_SHIFT) & 0xff);
}

static inline uint64_t
s_with_dist (uint64_t slot, size_t d)
{
    return (slot & ~(UINT64_C (0xff) << DIST_SHIFT)) | ((uint64_t)d << DIST_SHIFT);
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

// Place `slot` (its job not in the table) by linear probing from its home;
// false if its distance would pass DIST_MAX.
static bool
s_place (uint64_t *slots, size_t cap, uint64_t slot, uint64_t h)
{
    size_t mask = cap - 1, j = (size_t)h & mask, d = 0;
    while (slots[j]) {
        if (++d > DIST_MAX)
            return false;
        j = (j + 1) & mask;
    }
    slots[j] = s_with_dist (slot, d);
    return true;
}

static void
s_grow (zl_job_index_t *self)
{
    for (size_t cap = self->cap * 2;; cap *= 2) {
        uint64_t *slots = zl_calloc (cap, sizeof *slots);
        bool ok = true;
        for (size_t i = 0; i < self->cap && ok; i++)
            if (self->slots[i])
                ok = s_place (slots, cap, self->slots[i], s_mix (s_job (self->slots[i])->id));
        if (ok) {
            free (self->slots);
            self->slots = slots;
            self->cap = cap;
            return;
        }
        free (slots);
    }
}

// The slot of `id`, or SIZE_MAX.
static size_t
s_find (const zl_job_index_t *self, uint64_t id)
{
    uint64_t h = s_mix (id), tag = s_tag (h);
    size_t mask = self->cap - 1, j = (size_t)h & mask;
    for (size_t d = 0; self->slots[j] && d <= DIST_MAX; d++) {
        uint64_t s = self->slots[j];
        if ((s & (UINT64_C (0xff) << TAG_SHIFT)) == tag && s_job (s)->id == id)
            return j;
        j = (j + 1) & mask;
    }
    return SIZE_MAX;
}

void
zl_job_index_put (zl_job_index_t *self, zl_job_t *job)
{
    uintptr_t p = (uintptr_t)job;
    if ((uint64_t)p & ~PTR_MASK) {
        zl_error ("jobs", "a job's address does not fit in %d bits: stopping", PTR_BITS);
        abort ();
    }
    uint64_t h = s_mix (job->id), slot = s_tag (h) | (uint64_t)p;
    size_t at = s_find (self, job->id);
    if (at != SIZE_MAX) { // another job of that id: in its place
        self->slots[at] = s_with_dist (slot, s_dist (self->slots[at]));
        return;
    }
    if ((self->size + 1) * 4 > self->cap * 3)
        s_grow (self);
    while (!s_place (self->slots, self->cap, slot, h))
        s_grow (self);
    self->size++;
}

zl_job_t *
zl_job_index_get (const zl_job_index_t *self, uint64_t id)
{
    if (!id)
        return NULL;
    size_t at = s_find (self, id);
    return at == SIZE_MAX ? NULL : s_job (self->slots[at]);
}

zl_job_t *
zl_job_index_remove (zl_job_index_t *self, uint64_t id)
{
    if (!id)
        return NULL;
    size_t at = s_find (self, id);
    if (at == SIZE_MAX)
        return NULL;
    zl_job_t *job = s_job (self->slots[at]);
    self->size--;
    // backward shift: each job after the hole (up to an empty slot) whose
    // home is not between the hole and it moves into the hole, which moves
    // to where it was; its home is where it is less its distance
    size_t mask = self->cap - 1, i = at;
    self->slots[i] = 0;
    for (size_t k = (i + 1) & mask; self->slots[k]; k = (k + 1) & mask) {
        uint64_t s = self->slots[k];
        size_t home = (k - s_dist (s)) & mask;
        size_t from_hole = (home - i) & mask; // 1..(k - i): home in (i, k], it stays
        if (from_hole >= 1 && from_hole <= ((k - i) & mask))
            continue;
        self->slots[i] = s_with_dist (s, (i - home) & mask);
        self->slots[k] = 0;
        i = k;
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
