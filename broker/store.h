/*  store: the durable job store, LMDB behind a small interface.

    One write transaction spans one loop turn (group commit): the broker
    calls zl_store_begin, records every change of the turn, then
    zl_store_commit, and only then sends replies that promise durability.
    A Submit's new jobs go in a nested transaction (zl_store_sub_*) so that
    a full map rejects just that Submit and keeps the rest of the turn.

    Databases: meta (format, next id), jobs (id -> immutable job record),
    state (id -> mutable state, absent = never attempted), idem (key+tenant ->
    job id and time; format 2, key first), idem_log (id -> key+tenant, in
    expiry order). */
#ifndef ZL_STORE_H
#define ZL_STORE_H

#include "arena.h"
#include "config.h"
#include "record.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct _zl_store_t zl_store_t;

typedef enum {
    ZL_STORE_OK = 0,
    ZL_STORE_ERROR = -1,     // I/O or corruption: the turn cannot be committed
    ZL_STORE_FULL = -2,      // the map (or the disk) has no room
    ZL_STORE_NOT_FOUND = -3
} zl_store_rc_t;

typedef struct {
    uint64_t map_size;
    uint64_t used_bytes;   // pages in use
    uint64_t file_bytes;   // size of data.mdb on disk
    uint64_t jobs, states, idem_keys;
    uint64_t commits;
    uint64_t commit_us;    // total time spent committing (sync included)
    uint64_t commit_max_us;
} zl_store_stats_t;

/*  Callbacks for zl_store_recover, in job id order. Records are borrowed
    until the callback returns; `state` is NULL for never-attempted jobs. */
typedef void (zl_store_job_fn) (void *ctx, uint64_t id, const zl_job_rec_t *job,
                                const zl_state_rec_t *state);

/*  Open (creating if needed) the store in `dir`. Refuses a directory that
    holds something other than a zlane store. Returns NULL with a reason. */
zl_store_t *zl_store_open (const char *dir, zl_durability_t mode, uint64_t map_size, char *err,
                           size_t errlen);
/*  Close; an open batch is aborted. Nulls the caller's pointer. */
void zl_store_close (zl_store_t **self_p);

/*  Start the turn's batch if none is open. */
zl_store_rc_t zl_store_begin (zl_store_t *self);
/*  Nested batch for one Submit: begin, then commit into the turn's batch or
    abort (undoing only the nested writes). */
zl_store_rc_t zl_store_sub_begin (zl_store_t *self);
zl_store_rc_t zl_store_sub_commit (zl_store_t *self);
void zl_store_sub_abort (zl_store_t *self);
/*  Commit the turn's batch (fsync per the durability mode). On failure the
    batch is aborted and ZL_STORE_ERROR or ZL_STORE_FULL returned. */
zl_store_rc_t zl_store_commit (zl_store_t *self);
/*  True while a batch is open. */
bool zl_store_in_batch (zl_store_t *self);

/*  Writes inside the open batch. */
zl_store_rc_t zl_store_put_job (zl_store_t *self, uint64_t id, const zl_job_rec_t *rec);
zl_store_rc_t zl_store_put_state (zl_store_t *self, uint64_t id, const zl_state_rec_t *rec);
/*  Delete a job and its state. */
zl_store_rc_t zl_store_del_job (zl_store_t *self, uint64_t id);
zl_store_rc_t zl_store_put_idem (zl_store_t *self, const char *tenant, const char *key,
                                 const zl_idem_rec_t *rec);
zl_store_rc_t zl_store_set_next_id (zl_store_t *self, uint64_t next_id);

/*  Reads (inside the batch when one is open, so they see its writes).
    Decoded data lives in `arena`. */
zl_store_rc_t zl_store_get_job (zl_store_t *self, uint64_t id, zl_arena_t *arena,
                                zl_job_rec_t *out);
zl_store_rc_t zl_store_get_state (zl_store_t *self, uint64_t id, zl_arena_t *arena,
                                  zl_state_rec_t *out);
zl_store_rc_t zl_store_get_idem (zl_store_t *self, const char *tenant, const char *key,
                                 zl_idem_rec_t *out);

/*  Delete up to `max` idempotency keys first seen before `before_ms`.
    Returns how many went. Call inside a batch. */
size_t zl_store_prune_idem (zl_store_t *self, int64_t before_ms, size_t max);
/*  True if roughly `bytes` more can be written without filling the map. */
bool zl_store_has_room (zl_store_t *self, size_t bytes);

/*  Read every job in id order into `fn`; sets *next_id. Returns 0 or -1 with
    a reason (a record that does not decode is corruption). */
int zl_store_recover (zl_store_t *self, zl_store_job_fn *fn, void *ctx, uint64_t *next_id,
                      char *err, size_t errlen);
/*  Fill `st`. */
void zl_store_stats (zl_store_t *self, zl_store_stats_t *st);

#endif
