#include "heap.h"

#include "zl_alloc.h"

#include <stdlib.h>

struct _zl_heap_t {
    void **items;
    size_t size, cap;
    zl_heap_less_fn *less;
    size_t slot_offset;
    uint32_t slot_none; // 0: slots are stored 1-based; UINT32_MAX: 0-based
};

static inline uint32_t *
s_slot (const zl_heap_t *self, const void *item)
{
    return (uint32_t *)((char *)item + self->slot_offset);
}

// The item's position, or SIZE_MAX if it is not in the heap.
static inline size_t
s_index (const zl_heap_t *self, const void *item)
{
    uint32_t v = *s_slot (self, item);
    if (v == self->slot_none)
        return SIZE_MAX;
    return self->slot_none == 0 ? (size_t)v - 1 : (size_t)v;
}

static inline void
s_place (zl_heap_t *self, size_t i, void *item)
{
    self->items[i] = item;
    *s_slot (self, item) = (uint32_t)(self->slot_none == 0 ? i + 1 : i);
}

static size_t
s_up (zl_heap_t *self, size_t i)
{
    void *item = self->items[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!self->less (item, self->items[parent]))
            break;
        s_place (self, i, self->items[parent]);
        i = parent;
    }
    s_place (self, i, item);
    return i;
}

static void
s_down (zl_heap_t *self, size_t i)
{
    void *item = self->items[i];
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, best = i;
        void *best_item = item;
        if (l < self->size && self->less (self->items[l], best_item))
            best = l, best_item = self->items[l];
        if (r < self->size && self->less (self->items[r], best_item))
            best = r, best_item = self->items[r];
        if (best == i)
            break;
        s_place (self, i, best_item);
        i = best;
    }
    s_place (self, i, item);
}

zl_heap_t *
zl_heap_new (zl_heap_less_fn *less, size_t slot_offset, uint32_t slot_none)
{
    zl_heap_t *self = ZL_NEW (zl_heap_t);
    self->less = less;
    self->slot_offset = slot_offset;
    self->slot_none = slot_none;
    self->cap = 64;
    self->items = zl_malloc (self->cap * sizeof (void *));
    return self;
}

void
zl_heap_destroy (zl_heap_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    free ((*self_p)->items);
    free (*self_p);
    *self_p = NULL;
}

void
zl_heap_set (zl_heap_t *self, void *item)
{
    size_t i = s_index (self, item);
    if (i != SIZE_MAX) {
        s_down (self, s_up (self, i));
        return;
    }
    if (self->size == self->cap) {
        self->cap *= 2;
        self->items = zl_realloc (self->items, self->cap * sizeof (void *));
    }
    s_place (self, self->size++, item);
    s_up (self, self->size - 1);
}

void
zl_heap_remove (zl_heap_t *self, void *item)
{
    size_t i = s_index (self, item);
    if (i == SIZE_MAX)
        return;
    *s_slot (self, item) = self->slot_none;
    void *last = self->items[--self->size];
    if (i < self->size) {
        s_place (self, i, last);
        s_down (self, s_up (self, i));
    }
}

bool
zl_heap_contains (zl_heap_t *self, const void *item)
{
    return s_index (self, item) != SIZE_MAX;
}

void *
zl_heap_top (zl_heap_t *self)
{
    return self->size ? self->items[0] : NULL;
}

void *
zl_heap_pop (zl_heap_t *self)
{
    void *top = zl_heap_top (self);
    if (top)
        zl_heap_remove (self, top);
    return top;
}

size_t
zl_heap_size (zl_heap_t *self)
{
    return self->size;
}
