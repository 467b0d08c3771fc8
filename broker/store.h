/*  store: the durable job store, one interface with a backend behind it.

    One write transaction spans one loop turn (group commit): the broker
    calls zl_store_begin, records every change of the turn, then
    zl_store_commit, and only then sends replies that promise durability.
    (With a commit thread, zl_store_use_commit_thread, a batch may span the
    turns that ran while the commit before it was under way.)
    A Submit's new jobs go in a nested transaction (zl_store_sub_*) so that
    a full store rejects just that Submit and keeps the rest of the turn.

    This is the one seam between the broker and its storage: jobs,
    admission, recovery and stats call only these functions and do not know
    which backend is underneath. zl_store_open picks the backend from the
    store's location (store.c); a backend fills the table of
    store_backend.h. Backends: LMDB in a data directory (store_lmdb.c, which
    describes its databases, format and room), and PostgreSQL from a
    postgresql:// URI or a libpq key=value string (store_pg.c, built when
    libpq is found: the log, the memory image, the lease and its fence).
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
    ZL_STORE_NOT_FOUND = -3,
    ZL_STORE_FENCED = -4,      // another broker leads now: the batch was not committed
    ZL_STORE_UNAVAILABLE = -5, // the database did not answer: the batch's fate is unknown
    ZL_STORE_PENDING = 1       // zl_store_commit_start: the commit is under way
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
    uint64_t dedup_expired;           // keys forgotten at the end of their window (since open)
    uint64_t dedup_evicted;           // keys forgotten early, at dedup_max_keys (since open)
    uint64_t room_measures;           // measures of the room (since open), the walks among them
    uint64_t room_measures_on_submit; // of them, made by a Submit's has_room (not ahead)
    uint64_t room_walks;              // walks of LMDB's free list to measure the room (since open)
    uint64_t room_walk_max_us;        // the longest of them
    uint64_t commits;
    uint64_t commit_us; // total time spent committing (sync included)
    uint64_t commit_max_us;
    // leadership (stores that several brokers share; LMDB: leader, epoch 0)
    uint32_t role;          // zl_store_role_t
    uint64_t epoch;         // the lease's epoch
    uint64_t takeovers;     // times this broker took the lead (since start)
    uint64_t fenced;        // commits refused because another broker led
    uint64_t unreachable;   // times the database stopped answering
    uint64_t reachable;     // 1 while the database answers
    uint64_t log_rows;      // rows in the database's log (PostgreSQL)
    uint64_t log_segments;  // partitions of the log kept
    uint64_t log_rotations; // partitions dropped (since start)
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
    in place (one transaction, logged). A PostgreSQL location opens that
    backend (refused, saying why, in a build without libpq); a URI of another
    scheme is refused. Returns NULL with a reason. */
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
/*  Start committing the turn's batch without waiting for the outcome,
    where the backend can (PostgreSQL: the batch is sent, and the database
    commits it while the caller goes on): returns ZL_STORE_PENDING, and
    zl_store_commit_finish tells how it ended. A backend that cannot (LMDB)
    commits as zl_store_commit does and returns its result. At most one
    commit is under way: starting one (or zl_store_commit) first waits for
    the one before, and if that one failed, drops the batch and returns its
    failure. While one is under way the next batch may be opened and
    written, and reads see its writes; no election runs (zl_store_elect
    returns the role unchanged). */
zl_store_rc_t zl_store_commit_start (zl_store_t *self);
/*  The outcome of the commit under way: ZL_STORE_OK when none is or it
    committed, a failure as zl_store_commit's (FENCED, UNAVAILABLE: the
    store no longer leads; an open batch is dropped with it), or
    ZL_STORE_PENDING when `wait` is false and it has not ended. */
zl_store_rc_t zl_store_commit_finish (zl_store_t *self, bool wait);
/*  Commit on a thread of the store's own from now on, where that takes the
    commit off the caller's thread: the LMDB store in fsync mode, whose
    commit holds its thread for two flushes of the disk. The caller's
    writes then go into memory (an overlay its reads look in first), and
    zl_store_commit_start hands the batch to the thread and returns
    ZL_STORE_PENDING, as on PostgreSQL. Call after open, outside a batch.
    Returns false where the backend has no such thread (PostgreSQL, whose
    database commits while the caller goes on; LMDB in `none` mode, whose
    commit writes only into the page cache).
    `interval_us`: while writes come in a steady stream (a batch's first
    write came while the loop still waited for the commit before), the
    thread starts a commit no sooner than this after the last one began:
    fewer flushes, each with more in it, and the same jobs dispatched; a
    batch begun while the thread was idle, or committed by zl_store_commit,
    goes at once. 0: every commit as soon as the last one ended. Called
    again, it sets the interval of the thread there is. */
bool zl_store_use_commit_thread (zl_store_t *self, int64_t interval_us);
/*  True while a commit is under way. */
bool zl_store_commit_pending (zl_store_t *self);
/*  The file descriptor that turns readable when the commit under way may
    have ended (for the caller's poll), or -1 when none is under way. */
int zl_store_commit_fd (zl_store_t *self);
/*  True while a batch is open. */
bool zl_store_in_batch (zl_store_t *self);
/*  True when the open batch holds a write. */
bool zl_store_batch_dirty (zl_store_t *self);

/*  Writes inside the open batch. */
zl_store_rc_t zl_store_put_job (zl_store_t *self, uint64_t id, const zl_job_rec_t *rec);
zl_store_rc_t zl_store_put_state (zl_store_t *self, uint64_t id, const zl_state_rec_t *rec);
/*  Delete a job and its state. `priority` is the one its record was put
    with (zl_record_priority): the LMDB store keeps each priority's records
    in a tree of their own, so that each is appended to and emptied in id
    order. A record put with another priority is still found, after a
    lookup in each other priority's tree. */
zl_store_rc_t zl_store_del_job (zl_store_t *self, uint64_t id, unsigned priority);
/*  Record idempotency key `key` of `tenant` for job rec->job_id (replacing
    an earlier job's), in the expiry log of its class (rec->generated). */
zl_store_rc_t zl_store_put_idem (zl_store_t *self, const char *tenant, const char *key,
                                 const zl_idem_rec_t *rec);
zl_store_rc_t zl_store_set_next_id (zl_store_t *self, uint64_t next_id);

/*  Reads (inside the batch when one is open, so they see its writes).
    Decoded data lives in `arena`. */
zl_store_rc_t zl_store_get_job (zl_store_t *self, uint64_t id, unsigned priority, zl_arena_t *arena,
                                zl_job_rec_t *out); // priority: as del_job's
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
    went. Call inside a batch (outside one it does nothing). With a commit
    thread the pruning is the commit's: the call asks for it and returns 0,
    the thread prunes in the batch's transaction (a batch with no write
    asks at most once a second), and until then reads still find the keys. */
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

#define ZL_STORE_ROOM_RETRY_MS 1000 // a full store: the retry-after of a refused Submit
#define ZL_STORE_ROOM_SOON_MS 20    // room expected at the next commit
/*  After zl_store_has_room said no: how long a refused Submit should wait
    before it comes back (its Rejected's retry_after_ms): ZL_STORE_ROOM_SOON_MS
    when the next commit brings room back (this turn's Submits took what the
    last commit left, the file grows at the next commit, or the pages the
    last commit freed become room), ZL_STORE_ROOM_RETRY_MS when the disk or
    the map is full. */
uint32_t zl_store_room_retry_ms (zl_store_t *self);

/*  Measure the room now if a commit made the last measure stale, so that
    the next zl_store_has_room answers from it. The broker calls this at the
    end of a turn, after its replies: a measure reads every tree's totals
    (LMDB: about 10 us at a light load, with cold caches), which the next
    Submit would otherwise spend before its job is dispatched. A measure
    that finds less than twice the last Submit's need is dropped: that
    Submit's successor measures for its own need, as without this call. */
void zl_store_measure_room (zl_store_t *self);

/*  Read every job in id order into `fn`; sets *next_id. Returns 0 or -1 with
    a reason (a record that does not decode is corruption). */
int zl_store_recover (zl_store_t *self, zl_store_job_fn *fn, void *ctx, uint64_t *next_id,
                      char *err, size_t errlen);
/*  Fill `st` (LMDB: walks the free list once). */
void zl_store_stats (zl_store_t *self, zl_store_stats_t *st);

/*  Leadership. A store that several brokers share (PostgreSQL) lets one of
    them lead: a lease row whose epoch rises at every takeover, renewed by
    the leader and checked inside every commit, so that a deposed leader's
    commit fails (ZL_STORE_FENCED). A store one broker holds alone (LMDB: a
    lock on the directory) always leads, epoch 0.

    The broker says who it is once (zl_store_set_candidate), then calls
    zl_store_elect whenever zl_store_elect_due says so, outside a batch: a
    leader renews its lease there, a standby watches the lease and takes the
    lead when it lapsed, an unreachable store is dialled again. A commit that
    fails FENCED or UNAVAILABLE makes the role STANDBY or UNREACHABLE at once:
    the broker then forgets what it holds in memory (it is ahead of the
    store) and recovers again when it next leads. */
typedef enum {
    ZL_ROLE_LEADER = 0,     // this broker leads: it may accept, dispatch and settle
    ZL_ROLE_STANDBY = 1,    // another broker leads (or none yet): answer NOT_LEADER
    ZL_ROLE_UNREACHABLE = 2 // no writable database answers: refuse, retry later
} zl_store_role_t;

enum { ZL_ADVERTISE_FRONTEND = 0, ZL_ADVERTISE_BACKEND = 1, ZL_ADVERTISE_ADMIN = 2 };
#define ZL_ADVERTISE_COUNT 3
#define ZL_ADVERTISE_MAX 256 // bytes of one advertised endpoint, NUL included

typedef struct {
    const char *name;                          // this broker, for logs and the lease row
    const char *advertise[ZL_ADVERTISE_COUNT]; // where clients reach it, per socket
    uint32_t lease_ms;                         // the lease's length
} zl_store_candidate_t;

typedef struct {
    zl_store_role_t role;
    uint64_t epoch;                                    // the lease's epoch as last seen
    char leader[ZL_ADVERTISE_COUNT][ZL_ADVERTISE_MAX]; // the leader's endpoints, "" unknown
    char leader_name[128];                             // the leader's name, "" unknown
    bool took_over; // this call made this broker the leader (it must recover now)
} zl_store_lead_t;

/*  Say who this broker is (copied). Before the first zl_store_elect. */
void zl_store_set_candidate (zl_store_t *self, const zl_store_candidate_t *who);
/*  Renew, watch or take the lead (see above), filling `out`; returns the
    role. Call outside a batch. */
zl_store_role_t zl_store_elect (zl_store_t *self, int64_t mono_ms, zl_store_lead_t *out);
/*  The monotonic time at which zl_store_elect wants to run next (INT64_MAX:
    never, as on LMDB). */
int64_t zl_store_elect_due (zl_store_t *self);
/*  True when no other broker can write this store while this one has it
    open (LMDB: one broker per directory, by a lock on it); false where
    brokers share the store and one leads at a time (PostgreSQL), so that a
    deposed leader's writes are refused by fencing. */
bool zl_store_exclusive (zl_store_t *self);
/*  The role as of the last zl_store_elect or commit. */
zl_store_role_t zl_store_role (zl_store_t *self);
/*  What the attempts running at the last leader's end are recorded as, on
    recovery: "restart" (LMDB: the same store's broker restarted) or
    "leader_change" (PostgreSQL: another epoch took over). */
const char *zl_store_recovery_cause (zl_store_t *self);

/*  Fault injection, for tests; inert until set. Process-wide: a test reaches
    the store a broker owns. `fn` is asked before every write of a batch
    (zl_store_put_*, zl_store_del_job, zl_store_set_next_id) and before the
    commit of the turn's batch; it returns 0 to let the operation run, or an
    error (EIO, ENOSPC, or a code of the backend's engine, e.g. an MDB_*
    one) that the operation fails with as if the engine had returned it. A
    failed write loses its batch (the commit of a turn whose write failed
    fails too; a failed write in a nested batch fails its sub_commit); a
    failed commit aborts the batch. Every backend gets it (store.c).
    zl_store_set_fault (NULL, NULL) removes it.
    ZL_STORE_FAULT_FLUSH is asked by a commit thread (zl_store_use_commit_thread)
    on that thread, after it wrote a batch and before LMDB commits it, with
    no lock held: a test may hold the commit there (the caller's thread goes
    on), or fail it as if the commit had. */
typedef enum { ZL_STORE_FAULT_WRITE, ZL_STORE_FAULT_COMMIT, ZL_STORE_FAULT_FLUSH } zl_store_fault_t;
typedef int (zl_store_fault_fn) (void *ctx, zl_store_fault_t where);
void zl_store_set_fault (zl_store_fault_fn *fn, void *ctx);

#endif
