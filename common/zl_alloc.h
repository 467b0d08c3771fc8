/*  zl_alloc: the one out-of-memory policy.
    Every allocation in zlane goes through these wrappers; on failure they log
    and abort, so callers never check for NULL after them. */
#ifndef ZL_ALLOC_H
#define ZL_ALLOC_H

#include <stddef.h>

/*  Return a new block; never NULL (aborts on out-of-memory). */
void *zl_malloc (size_t size);
/*  Return a zeroed block; never NULL. */
void *zl_calloc (size_t count, size_t size);
/*  Resize `ptr` (may be NULL); never NULL. */
void *zl_realloc (void *ptr, size_t size);
/*  Return a copy of `s` (NULL gives NULL). Caller owns. */
char *zl_strdup (const char *s);
/*  Return a NUL-terminated copy of `len` bytes of `s`. Caller owns. */
char *zl_strndup (const char *s, size_t len);

#define ZL_NEW(type) ((type *)zl_calloc (1, sizeof (type)))
#define ZL_FREE(p)                                                                                 \
    do {                                                                                           \
        free (p);                                                                                  \
        (p) = NULL;                                                                                \
    } while (0)

#endif
