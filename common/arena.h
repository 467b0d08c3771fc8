/*  arena: a bump allocator for short-lived decode and encode scratch.
    Everything allocated lives until the next zl_arena_reset. */
#ifndef ZL_ARENA_H
#define ZL_ARENA_H

#include <stddef.h>

typedef struct _zl_arena_t zl_arena_t;

/*  Return a new arena whose first chunk holds `chunk_size` bytes. */
zl_arena_t *zl_arena_new (size_t chunk_size);
/*  Destroy the arena and everything in it; nulls the caller's pointer. */
void zl_arena_destroy (zl_arena_t **self_p);
/*  Return `size` bytes aligned to 16; never NULL. */
void *zl_arena_alloc (zl_arena_t *self, size_t size);
/*  Return a zeroed array of `count` × `size` bytes. */
void *zl_arena_calloc (zl_arena_t *self, size_t count, size_t size);
/*  Return a copy of `len` bytes of `s` with a NUL after them. */
char *zl_arena_strndup (zl_arena_t *self, const char *s, size_t len);
/*  Return printf's text for `fmt` (for messages: at most
    ZL_ARENA_PRINTF_MAX bytes: longer text is cut, never inside a UTF-8
    character). */
#define ZL_ARENA_PRINTF_MAX 511
char *zl_arena_printf (zl_arena_t *self, const char *fmt, ...)
    __attribute__ ((format (printf, 2, 3)));
/*  Forget every allocation; keeps the first chunk, frees the others. */
void zl_arena_reset (zl_arena_t *self);
/*  Bytes handed out since the last reset. */
size_t zl_arena_used (zl_arena_t *self);

#endif
