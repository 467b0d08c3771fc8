/*  u64map: an open-addressing hash map from non-zero uint64 keys to pointers.
    Used for job id -> job and similar hot lookups; no allocation per entry. */
#ifndef ZL_U64MAP_H
#define ZL_U64MAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct _zl_u64map_t zl_u64map_t;

/*  Return a new empty map. */
zl_u64map_t *zl_u64map_new (void);
/*  Destroy the map (not the values); nulls the caller's pointer. */
void zl_u64map_destroy (zl_u64map_t **self_p);
/*  Set key -> value (key != 0, value != NULL); replaces an existing value. */
void zl_u64map_put (zl_u64map_t *self, uint64_t key, void *value);
/*  Return the value for key, or NULL. */
void *zl_u64map_get (zl_u64map_t *self, uint64_t key);
/*  Remove key; returns the old value or NULL. */
void *zl_u64map_remove (zl_u64map_t *self, uint64_t key);
/*  Number of entries. */
size_t zl_u64map_size (zl_u64map_t *self);
/*  Iterate: start with *cursor = 0; returns the next value or NULL at the end.
    The map must not be modified during iteration. */
void *zl_u64map_next (zl_u64map_t *self, size_t *cursor, uint64_t *key);

#endif
