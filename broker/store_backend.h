/*  store_backend: what a store backend fills in for store.c to dispatch to.

    store.h is the one interface the broker uses; store.c holds what every
    backend shares (choosing the backend from the store's location, knowing
    whether a batch or a nested batch is open, the fault-injection hook of
    zl_store_set_fault) and passes each call on through a table of these
    functions. A backend keeps its own state behind `self` and implements the
    contracts of store.h, with these differences:

    - begin is called only when no batch is open, sub_begin only inside one,
      commit only while one is open (a nested batch left open is dropped),
      prune_idem only inside one and outside a nested one: store.c tracks
      both, so zl_store_in_batch costs no call.
    - commit and sub_commit take `fault`: 0, or an error the fault hook
      injected (into an earlier write of that batch, or into this commit):
      the backend then drops the batch and fails as if its engine had
      returned that error.
    - fail maps an error the hook injected into a write to what that write
      returns, with the side effects a real error of the engine has (LMDB: a
      full map is room lost); store.c calls it instead of the write.

    Backends: LMDB (store_lmdb.c) and PostgreSQL (store_pg.c, when built
    with libpq), the one with commit_start/_finish/_fd. */
#ifndef ZL_STORE_BACKEND_H
#define ZL_STORE_BACKEND_H

#include "store.h"

typedef struct {
    const char *name; // "lmdb": for logs and stats
    /*  Open the store at `location` (a directory for LMDB); NULL with a
        reason in `err`. */
    void *(*open) (const char *location, zl_durability_t mode, uint64_t map_size, char *err,
                   size_t errlen);
    /*  Close (an open batch is aborted) and free `self`. */
    void (*close) (void *self);
    zl_store_rc_t (*begin) (void *self);
    zl_store_rc_t (*sub_begin) (void *self);
    zl_store_rc_t (*sub_commit) (void *self, int fault);
    void (*sub_abort) (void *self);
    zl_store_rc_t (*commit) (void *self, int fault);
    /*  The commit in two halves (store.h's zl_store_commit_start and
        _finish), NULL for a backend whose commit always waits: start takes
        `fault` as commit does; fd is the descriptor to poll, -1 when none
        is under way. */
    zl_store_rc_t (*commit_start) (void *self, int fault);
    zl_store_rc_t (*commit_finish) (void *self, bool wait);
    int (*commit_fd) (void *self);
    /*  Commit on a thread of the backend's own from now on (store.h's
        zl_store_use_commit_thread, with its interval); NULL or false: it
        cannot. */
    bool (*commit_thread) (void *self, int64_t interval_us);
    zl_store_rc_t (*fail) (void *self, int error, const char *what);
    zl_store_rc_t (*put_job) (void *self, uint64_t id, const zl_job_rec_t *rec);
    zl_store_rc_t (*put_state) (void *self, uint64_t id, const zl_state_rec_t *rec);
    zl_store_rc_t (*del_job) (void *self, uint64_t id, unsigned priority);
    zl_store_rc_t (*put_idem) (void *self, const char *tenant, const char *key,
                               const zl_idem_rec_t *rec);
    zl_store_rc_t (*set_next_id) (void *self, uint64_t next_id);
    zl_store_rc_t (*get_job) (void *self, uint64_t id, unsigned priority, zl_arena_t *arena,
                              zl_job_rec_t *out);
    zl_store_rc_t (*get_state) (void *self, uint64_t id, zl_arena_t *arena, zl_state_rec_t *out);
    zl_store_rc_t (*get_idem) (void *self, const char *tenant, const char *key, zl_idem_rec_t *out);
    size_t (*prune_idem) (void *self, int64_t now_ms, const zl_idem_policy_t *policy, size_t max);
    bool (*has_room) (void *self, size_t bytes);
    uint32_t (*room_retry_ms) (void *self); // NULL: ZL_STORE_ROOM_RETRY_MS
    void (*measure_room) (void *self);      // NULL: has_room measures nothing ahead
    int (*recover) (void *self, zl_store_job_fn *fn, void *ctx, uint64_t *next_id, char *err,
                    size_t errlen);
    void (*stats) (void *self, zl_store_stats_t *st);
    // leadership: NULL for a backend one broker holds alone (always leads)
    void (*set_candidate) (void *self, const zl_store_candidate_t *who);
    zl_store_role_t (*elect) (void *self, int64_t mono_ms, zl_store_lead_t *out);
    int64_t (*elect_due) (void *self);
    zl_store_role_t (*role) (void *self);
} zl_store_backend_t;

/*  The fault hook's answer for `where` (store.h's zl_store_set_fault): 0
    when none is set. For what a backend asks itself (ZL_STORE_FAULT_FLUSH). */
int zl_store_fault_ask (zl_store_fault_t where);

/*  The LMDB backend (store_lmdb.c). */
extern const zl_store_backend_t zl_store_lmdb;
/*  The PostgreSQL backend (store_pg.c), when built with libpq (ZL_HAVE_PG). */
extern const zl_store_backend_t zl_store_pg;
/*  Its rotation, process-wide, for tests and benchmarks: the log moves to a
    new segment after `rotate_rows` rows or `rotate_ms` (defaults 500,000
    and 60 s), `keep_segs` segments are kept (default 3). 0 = the default. */
void zl_store_pg_tune (uint64_t rotate_rows, int64_t rotate_ms, unsigned keep_segs);

#endif
