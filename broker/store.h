/*  store: the durable job store, one interface with a backend behind it.

    One write transaction spans one loop turn (group commit): the broker
    calls zl_store_begin, records every change of the turn, then
    zl_store_commit, and only then sends replies that promise durability.
    A Submit's new jobs go in a nested transaction (zl_store_sub_*) so that
    a full store rejects just that Submit and keeps the rest of the turn.

    This is the one seam between the broker and its storage: jobs,
    admission, recovery and stats call only these functions and do not know
    which backend is underneath. zl_store_open picks the backend from the
    store's location (store.c); a backend fills the table of
    store_backend.h. Backends: LMDB in a data directory (store_lmdb.c, which
    describes its databases, format and room). A PostgreSQL location is
    recognised and refused: that backend is not built in yet.
    tests/broker/test_store_conformance.c checks these contracts on each
    backend. */
#ifndef ZL_STORE_H
#define ZL_STORE_H

#include "arena.h"
#include "record.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*  What a commit waits for: fsync (Accepted means on disk) or none (the page
    cache only; a clean close still syncs). */
typedef enum { ZL_DURABILITY_FSYNC = 0, ZL_DURABILITY_NONE = 1 } zl_durability_t;

typedef struct _zl_store_t zl_store_t;

typedef enum {
    ZL_STORE_OK = 0,
    ZL_STORE_ERROR = -1, // I/O or corruption: the turn cannot be committed
    ZL_STORE_FULL = -2,  // the map (or the disk) has no room
    ZL_STORE_NOT_FOUND = -3
} zl_store_rc_t;

/*  The store's sizes and counters. The sizes and room walks are LMDB's; a
    backend without them leaves them 0. */
typedef struct {
    uint64_t map_size;   // the configured limit
    uint64_t used_bytes; // pages in use (the file's pages less its free list)
    uint64_t file_bytes; // size of data.mdb on disk (preallocated ahead of use)
    uint64_t free_bytes; // room: free pages in the file + what the disk and map let it grow
    uint64_t jobs, states;
    uint64_t idem_keys;                      // keys in the dedup index
    uint64_t idem_resend_log, idem_user_log; // expiry log entries per class
    uint64_t dedup_expired;    // keys forgotten at the end of their window (since open)
    uint64_t dedup_evicted;    // keys forgotten early, at dedup_max_keys (since open)
    uint64_t room_walks;       // walks of LMDB's free list to measure the room (since open)
    uint64_t room_walk_max_us; // the longest of them
    uint64_t commits;
    uint64_t commit_us; // total time spent committing (sync included)
    uint64_t commit_max_us;
} zl_store_stats_t;

/*  How long idempotency keys are kept, and how many at most. */
typedef struct {
    uint64_t resend_window_ms; // keys a client library made for its own resends
    uint64_t user_window_ms;   // keys the users gave (dedup_window)
    uint64_t max_keys;         // the bound; 0 = none
} zl_idem_policy_t;

/*  Callbacks for zl_store_recover, in job id order. Records are borrowed
    until the callback returns; `state` is NULL for never-attempted jobs. */
typedef void (zl_store_job_fn) (void *ctx, uint64_t id, const zl_job_rec_t *job,
                                const zl_state_rec_t *state);

/*  What a store location names (zl_store_location_kind): a PostgreSQL
    database -- a postgresql:// or postgres:// URI, or a libpq key=value
    string ("host=db1 dbname=zlane ...", first keyword one of libpq's) --,
    a URI of a scheme zlane does not know, or else a directory (LMDB). */
typedef enum {
    ZL_STORE_KIND_LMDB = 0,
    ZL_STORE_KIND_POSTGRESQL = 1,
    ZL_STORE_KIND_UNKNOWN = 2
} zl_store_kind_t;

zl_store_kind_t zl_store_location_kind (const char *location);
/*  `location` for logs and error messages, with any password in it (a
    URI's user:password@, a password= parameter) written as "***".
    Truncates to `size`. */
void zl_store_location_safe (const char *location, char *out, size_t size);

/*  Open (creating if needed) the store at `location`: a directory opens the
    LMDB store there (`map_size` bounds it). Refuses a directory that holds
    something other than a zlane store; upgrades a zlane-store-1 or -2 store
    in place (one transaction, logged). A PostgreSQL location is refused
    ("not built in yet"), as is a URI of another scheme. Returns NULL with a
    reason. */
zl_store_t *zl_store_open (const char *location, zl_durability_t mode, uint64_t map_size, char *err,
                           size_t errlen);
/*  The backend's name ("lmdb"). */
const char *zl_store_backend_name (zl_store_t *self);
/*  Close; an open batch is aborted. Nulls the caller's pointer. */
void zl_store_close (zl_store_t **self_p);

/*  Start the turn's batch if none is open. */
zl_store_rc_t zl_store_begin (zl_store_t *self);
/*  Nested batch for one Submit: begin, then commit into the turn's batch or
    abort (undoing only the nested writes). */
zl_store_rc_t zl_store_sub_begin (zl_store_t *self);
zl_store_rc_t zl_store_sub_commit (zl_store_t *self);
void zl_store_sub_abort (zl_store_t *self);
/*  Commit the turn's batch (fsync per the durability mode), then grow the
    preallocated file if it runs short. On failure the batch is aborted and
    ZL_STORE_ERROR or ZL_STORE_FULL returned. */
zl_store_rc_t zl_store_commit (zl_store_t *self);
/*  True while a batch is open. */
bool zl_store_in_batch (zl_store_t *self);

/*  Writes inside the open batch. */
zl_store_rc_t zl_store_put_job (zl_store_t *self, uint64_t id, const zl_job_rec_t *rec);
zl_store_rc_t zl_store_put_state (zl_store_t *self, uint64_t id, const zl_state_rec_t *rec);
/*  Delete a job and its state. */
zl_store_rc_t zl_store_del_job (zl_store_t *self, uint64_t id);
/*  Record idempotency key `key` of `tenant` for job rec->job_id (replacing
    an earlier job's), in the expiry log of its class (rec->generated). */
zl_store_rc_t zl_store_put_idem (zl_store_t *self, const char *tenant, const char *key,
                                 const zl_idem_rec_t *rec);
zl_store_rc_t zl_store_set_next_id (zl_store_t *self, uint64_t next_id);

/*  Reads (inside the batch when one is open, so they see its writes).
    Decoded data lives in `arena`. */
zl_store_rc_t zl_store_get_job (zl_store_t *self, uint64_t id, zl_arena_t *arena,
                                zl_job_rec_t *out);
zl_store_rc_t zl_store_get_state (zl_store_t *self, uint64_t id, zl_arena_t *arena,
                                  zl_state_rec_t *out);
/*  The record of `key` of `tenant`, expired or not (the caller compares
    seen_at_ms with the window of its class), or ZL_STORE_NOT_FOUND. */
zl_store_rc_t zl_store_get_idem (zl_store_t *self, const char *tenant, const char *key,
                                 zl_idem_rec_t *out);

/*  Forget the idempotency keys whose window (per `policy`, by class) ended
    before `now_ms` (wall clock), oldest first; then, while more than
    policy->max_keys are kept, the keys whose window is most used up (counted
    in dedup_evicted, logged). Removes at most `max` keys plus twice the keys
    put since the last call, so that it keeps up with any rate while its
    work stays in proportion to the turn's. Returns how many log entries
    went. Call inside a batch (outside one it does nothing). */
size_t zl_store_prune_idem (zl_store_t *self, int64_t now_ms, const zl_idem_policy_t *policy,
                            size_t max);
/*  True if `bytes` more can be written now and still leave the margin that
    acks and deletes may need. LMDB: 4 MiB (a quarter of a map under 16 MiB). Free
    pages inside the file count (its free list and its preallocated tail):
    as of the last walk of the free list, less what was let in since. The
    walk runs at most once per commit: a second after the last one, or
    while room is short and the pages commits freed since could make it up
    (then at most every 100 ms, unless they alone could) -- never per Submit
    while nothing frees pages. When the answer changes the log says so and
    why (map full, disk full). A refusal that more file would cure makes the
    next commit grow the file. */
bool zl_store_has_room (zl_store_t *self, size_t bytes);

/*  Read every job in id order into `fn`; sets *next_id. Returns 0 or -1 with
    a reason (a record that does not decode is corruption). */
int zl_store_recover (zl_store_t *self, zl_store_job_fn *fn, void *ctx, uint64_t *next_id,
                      char *err, size_t errlen);
/*  Fill `st` (LMDB: walks the free list once). */
void zl_store_stats (zl_store_t *self, zl_store_stats_t *st);

/*  Fault injection, for tests; inert until set. Process-wide: a test reaches
    the store a broker owns. `fn` is asked before every write of a batch
    (zl_store_put_*, zl_store_del_job, zl_store_set_next_id) and before the
    commit of the turn's batch; it returns 0 to let the operation run, or an
    error (EIO, ENOSPC, or a code of the backend's engine, e.g. an MDB_*
    one) that the operation fails with as if the engine had returned it. A
    failed write loses its batch (the commit of a turn whose write failed
    fails too; a failed write in a nested batch fails its sub_commit); a
    failed commit aborts the batch. Every backend gets it (store.c).
    zl_store_set_fault (NULL, NULL) removes it. */
typedef enum { ZL_STORE_FAULT_WRITE, ZL_STORE_FAULT_COMMIT } zl_store_fault_t;
typedef int (zl_store_fault_fn) (void *ctx, zl_store_fault_t where);
void zl_store_set_fault (zl_store_fault_fn *fn, void *ctx);

#endif
