/*  dedup: the idempotency-key window. A key (scoped by tenant) seen within
    the window maps to the job id it was first accepted as. */
#ifndef ZL_DEDUP_H
#define ZL_DEDUP_H

#include <stddef.h>
#include <stdint.h>

typedef struct _zl_dedup_t zl_dedup_t;

/*  Return an empty window of `window_ms`. */
zl_dedup_t *zl_dedup_new (uint64_t window_ms);
/*  Destroy; nulls the caller's pointer. */
void zl_dedup_destroy (zl_dedup_t **self_p);
/*  Return the job id recorded for (tenant, key) if inside the window at
    `now_ms` (wall clock), else 0. */
uint64_t zl_dedup_lookup (zl_dedup_t *self, const char *tenant, const char *key, int64_t now_ms);
/*  Record (tenant, key) -> job_id as seen at `seen_ms` (wall clock). */
void zl_dedup_insert (zl_dedup_t *self, const char *tenant, const char *key, uint64_t job_id,
                      int64_t seen_ms);
/*  Drop keys older than the window at `now_ms`; returns how many. */
size_t zl_dedup_prune (zl_dedup_t *self, int64_t now_ms);
/*  Number of keys held. */
size_t zl_dedup_size (zl_dedup_t *self);

#endif
