/*  watches: who waits for which job's outcome (Watch). A job id maps to the
    producer connections (ROUTER peers) that asked; taking a job's watchers
    forgets them. Bounded: at most `max` watches are held at once. Held in
    memory only: a producer whose broker restarted watches again. */
#ifndef ZL_WATCHES_H
#define ZL_WATCHES_H

#include "wire.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct _zl_watches_t zl_watches_t;

/*  Return an empty registry holding at most `max` watches. */
zl_watches_t *zl_watches_new (size_t max);
/*  Destroy it; nulls the caller's pointer. */
void zl_watches_destroy (zl_watches_t **self_p);
/*  `peer` watches job `id` (once, however often it asks). Returns 0, or -1
    when the registry is full. */
int zl_watches_add (zl_watches_t *self, uint64_t id, const zl_peer_t *peer);
/*  True if anyone watches job `id`. */
bool zl_watches_any (zl_watches_t *self, uint64_t id);
/*  Move the watchers of job `id` into `out` (up to `cap`; the rest are
    dropped) and forget them. Returns how many. */
size_t zl_watches_take (zl_watches_t *self, uint64_t id, zl_peer_t *out, size_t cap);
/*  Watches held. */
size_t zl_watches_count (zl_watches_t *self);

#endif
