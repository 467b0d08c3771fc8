/*  batches: the bookkeeping of batches -- jobs that join a batch while it
    is open, and one callback job enqueued once the batch is closed and
    every job of it has settled (acked, dead-lettered or cancelled).

    A batch is kept in the store as its record job (job.h ZL_JOBF_BATCH_REC):
    the spec that opened it, WAITING while the batch is open or settling,
    its progress in its state record (zl_batch_rec_t: closed, how many
    joined, the members deleted before it settled). A member's job record
    names its batch (JobRec.batch). Recovery rebuilds the counts from those:
    acked = joined - the members still pending, dead or cancelled - the
    deleted ones. So a member costs the store nothing beyond its own record,
    and an acked member need not be kept.

    This module holds only memory: jobs.c tells it of every member's move
    (zl_batches_moved) and writes what it says must be written
    (zl_jobs_settle_batches). Once a batch has settled its members are
    forgotten here; its id stays known (for batch show, and so that no
    other batch takes it) until its record job is deleted. */
#ifndef ZL_BATCHES_H
#define ZL_BATCHES_H

#include "arena.h"
#include "msg.h"
#include "record.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct _zl_batches_t zl_batches_t;
typedef struct zl_batch zl_batch_t;

/*  Where a member stands, as the batch counts it. */
typedef enum {
    ZL_BATCH_PENDING = 0, // not settled (ready, delayed, leased, waiting)
    ZL_BATCH_ACKED,
    ZL_BATCH_DEAD,
    ZL_BATCH_CANCELLED,
    ZL_BATCH_GONE // deleted (purged or expired) while dead or cancelled
} zl_batch_class_t;

/*  Return an empty table. */
zl_batches_t *zl_batches_new (void);
/*  Destroy it and every batch; nulls the caller's pointer. */
void zl_batches_destroy (zl_batches_t **self_p);

/*  True if `id` may name a batch a producer opens: 1 to ZL_BATCH_ID_MAX bytes
    of [A-Za-z0-9._:-], not all digits (those are the broker's names). */
bool zl_batches_id_valid (const char *id);

/*  Open batch `id` (not known yet) recorded by job `job_id`, in `tenant`
    and `lane` (copied); `callback` false: nothing runs when it settles. */
zl_batch_t *zl_batches_open (zl_batches_t *self, const char *id, uint64_t job_id,
                             const char *tenant, const char *lane, bool callback,
                             int64_t opened_at_ms);
/*  The batch `id`, or NULL. */
zl_batch_t *zl_batches_find (zl_batches_t *self, const char *id);
/*  The batch whose record job is `job_id`, or NULL. */
zl_batch_t *zl_batches_of_record (zl_batches_t *self, uint64_t job_id);

/*  Its id, record job, tenant. */
const char *zl_batch_id (const zl_batch_t *b);
uint64_t zl_batch_job (const zl_batch_t *b);
const char *zl_batch_tenant (const zl_batch_t *b);
/*  True once closed / settled / cancelled (its record job was cancelled). */
bool zl_batch_closed (const zl_batch_t *b);
bool zl_batch_settled (const zl_batch_t *b);
bool zl_batch_cancelled (const zl_batch_t *b);
bool zl_batch_has_callback (const zl_batch_t *b);

/*  Job `member` joined open batch `b` (pending). */
void zl_batches_join (zl_batches_t *self, zl_batch_t *b, uint64_t member);
/*  Member `member` moved to `cls`; nothing if it is no member of a batch
    still settling. */
void zl_batches_moved (zl_batches_t *self, uint64_t member, zl_batch_class_t cls);
/*  Close `b` (nothing if it was). */
void zl_batches_close (zl_batches_t *self, zl_batch_t *b, int64_t at_ms);
/*  Its record job was cancelled: it never settles, nothing joins it. */
void zl_batches_cancelled (zl_batches_t *self, zl_batch_t *b);
/*  Its record job was deleted: the batch is forgotten. */
void zl_batches_forget (zl_batches_t *self, uint64_t job_id);

/*  The batches whose progress changed since the last call (their record
    must be rewritten), and those now due to settle (closed, none pending),
    each list in `arena`; both lists are emptied. */
void zl_batches_take_changes (zl_batches_t *self, zl_arena_t *arena, zl_batch_t ***dirty,
                              size_t *n_dirty, zl_batch_t ***due, size_t *n_due);
/*  True if zl_batches_take_changes has something to hand out. */
bool zl_batches_pending_changes (const zl_batches_t *self);
/*  `b`'s progress as its record holds it (arrays in `arena`). */
void zl_batches_progress (const zl_batch_t *b, zl_arena_t *arena, zl_batch_rec_t *out);
/*  Settle `b` at `at_ms`: fill `out` with its summary (arrays in `arena`),
    forget its members. */
void zl_batches_settle (zl_batches_t *self, zl_batch_t *b, int64_t at_ms, zl_arena_t *arena,
                        zl_batch_rec_t *out);
/*  `b` as the protocol shows it; a settled one from `summary` (its stored
    record), a live one from memory. Strings borrowed, arrays in `arena`. */
void zl_batches_info (const zl_batch_t *b, const zl_batch_rec_t *summary, zl_arena_t *arena,
                      zl_batch_info_t *out);

/*  A settled batch as the protocol shows it, from its stored summary
    (strings and arrays borrowed). */
void zl_batches_info_settled (const char *id, const char *tenant, const char *lane, uint64_t job_id,
                              bool callback, const zl_batch_rec_t *summary, zl_batch_info_t *out);

/*  Recovery: a batch still settling, from its record job's progress ... */
zl_batch_t *zl_batches_restore (zl_batches_t *self, const char *id, uint64_t job_id,
                                const char *tenant, const char *lane, bool callback,
                                const zl_batch_rec_t *progress);
/*  ... one that settled or was cancelled (its id kept) ... */
void zl_batches_restore_settled (zl_batches_t *self, const char *id, uint64_t job_id,
                                 const char *tenant, const char *lane, bool callback,
                                 bool cancelled);
/*  ... a member of batch `id` (any order: resolved by restore_done) ... */
void zl_batches_restore_member (zl_batches_t *self, const char *id, uint64_t member,
                                zl_batch_class_t cls);
/*  ... and once every job is in: the counts, and which are due. Returns
    the members whose batch was not found (ignored). */
size_t zl_batches_restore_done (zl_batches_t *self);

/*  Batches known (settling, or settled and still kept). */
size_t zl_batches_count (zl_batches_t *self);
/*  Members of batches still settling. */
size_t zl_batches_members (zl_batches_t *self);

#endif
