/*  heap: one intrusive binary min-heap for every deadline queue in zlane
    (broker job timers, parked flows' wake times, the worker's held-job
    timers). Items are the caller's structs; the heap keeps pointers to them
    and writes each item's slot into a uint32_t field of the item, so moving
    or removing an item is O(log n) and "is it scheduled?" is one read. */
#ifndef ZL_HEAP_H
#define ZL_HEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct _zl_heap_t zl_heap_t;

/*  True if item `a` comes before item `b`. */
typedef bool (zl_heap_less_fn) (const void *a, const void *b);

/*  Return an empty heap ordered by `less`. `slot_offset` is the offset of
    the items' uint32_t slot field; `slot_none` is the value that field holds
    while the item is not in the heap (0 or UINT32_MAX): with 0 the slot is
    stored 1-based, with UINT32_MAX 0-based. */
zl_heap_t *zl_heap_new (zl_heap_less_fn *less, size_t slot_offset, uint32_t slot_none);
/*  Destroy the heap (not the items); nulls the caller's pointer. */
void zl_heap_destroy (zl_heap_t **self_p);
/*  Insert `item`, or move it after its key changed if it is already in. */
void zl_heap_set (zl_heap_t *self, void *item);
/*  Remove `item` if it is in the heap. */
void zl_heap_remove (zl_heap_t *self, void *item);
/*  True if `item` is in the heap. */
bool zl_heap_contains (zl_heap_t *self, const void *item);
/*  Return the first item (borrowed), or NULL if empty. */
void *zl_heap_top (zl_heap_t *self);
/*  Remove and return the first item, or NULL if empty. */
void *zl_heap_pop (zl_heap_t *self);
/*  Number of items. */
size_t zl_heap_size (zl_heap_t *self);

#endif
