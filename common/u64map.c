#include "u64map.h"

#include "zl_alloc.h"

#include <stdlib.h>

typedef struct {
    uint64_t key; // 0 = empty
    void *value;
} slot_t;

struct _zl_u64map_t {
    slot_t *slots;
    size_t cap; // power of two
    size_t size;
};

static inline size_t
s_hash (uint64_t k, size_t mask)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return (size_t)k & mask;
}

zl_u64map_t *
zl_u64map_new (void)
{
    zl_u64map_t *self = ZL_NEW (zl_u64map_t);
    self->cap = 64;
    self->slots = zl_calloc (self->cap, sizeof (slot_t));
    return self;
}

void
zl_u64map_destroy (zl_u64map_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    free ((*self_p)->slots);
    free (*self_p);
    *self_p = NULL;
}

static void
s_grow (zl_u64map_t *self)
{
    slot_t *old = self->slots;
    size_t old_cap = self->cap;
    self->cap *= 2;
    self->slots = zl_calloc (self->cap, sizeof (slot_t));
    size_t mask = self->cap - 1;
    for (size_t i = 0; i < old_cap; i++) {
        if (!old[i].key)
            continue;
        size_t j = s_hash (old[i].key, mask);
        while (self->slots[j].key)
            j = (j + 1) & mask;
        self->slots[j] = old[i];
    }
    free (old);
}

void
zl_u64map_put (zl_u64map_t *self, uint64_t key, void *value)
{
    if ((self->size + 1) * 4 > self->cap * 3)
        s_grow (self);
    size_t mask = self->cap - 1;
    size_t j = s_hash (key, mask);
    while (self->slots[j].key && self->slots[j].key != key)
        j = (j + 1) & mask;
    if (!self->slots[j].key)
        self->size++;
    self->slots[j].key = key;
    self->slots[j].value = value;
}

void *
zl_u64map_get (zl_u64map_t *self, uint64_t key)
{
    if (!key)
        return NULL;
    size_t mask = self->cap - 1;
    size_t j = s_hash (key, mask);
    while (self->slots[j].key) {
        if (self->slots[j].key == key)
            return self->slots[j].value;
        j = (j + 1) & mask;
    }
    return NULL;
}

void *
zl_u64map_remove (zl_u64map_t *self, uint64_t key)
{
    if (!key)
        return NULL;
    size_t mask = self->cap - 1;
    size_t j = s_hash (key, mask);
    while (self->slots[j].key && self->slots[j].key != key)
        j = (j + 1) & mask;
    if (!self->slots[j].key)
        return NULL;
    void *value = self->slots[j].value;
    self->slots[j].key = 0;
    self->slots[j].value = NULL;
    self->size--;
    // backward-shift deletion keeps probe chains intact without tombstones
    size_t i = j;
    for (size_t k = (j + 1) & mask; self->slots[k].key; k = (k + 1) & mask) {
        size_t home = s_hash (self->slots[k].key, mask);
        // move k into the hole at i if its home is not in (i, k]
        if ((i <= k) ? (home <= i || home > k) : (home <= i && home > k)) {
            self->slots[i] = self->slots[k];
            self->slots[k].key = 0;
            self->slots[k].value = NULL;
            i = k;
        }
    }
    return value;
}

size_t
zl_u64map_size (zl_u64map_t *self)
{
    return self->size;
}

void *
zl_u64map_next (zl_u64map_t *self, size_t *cursor, uint64_t *key)
{
    while (*cursor < self->cap) {
        slot_t *s = &self->slots[(*cursor)++];
        if (s->key) {
            if (key)
                *key = s->key;
            return s->value;
        }
    }
    return NULL;
}
