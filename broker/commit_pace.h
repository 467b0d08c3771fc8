/*  commit_pace: when the LMDB store's commit thread may start its next
    commit (store_lmdb.c; the broker's --commit-interval).

    Each commit is two flushes of the disk, and on a VM a flush stalls the
    other processes too, so a thread that commits back to back under a
    steady stream of writes puts a tail on jobs that never waited for a
    commit. A batch whose first write came while the commit before it was
    still unfinished (a stream) therefore starts its commit no sooner than
    the interval after that commit began. Any other batch (a lone job, a
    producer that waits for each Accepted before sending the next) goes at
    once, and so does a batch whose caller waits for it.

    Times are microseconds of one monotonic clock, given by the caller.
    The loop calls _write, _hand_over, _ended and _not_behind; the commit
    thread calls _due and _started; _set_interval either, under the lock
    the store holds around the hand-over. */
#ifndef ZL_COMMIT_PACE_H
#define ZL_COMMIT_PACE_H

#include <stdbool.h>
#include <stdint.h>

typedef struct _zl_commit_pace_t zl_commit_pace_t;

/*  `interval_us` <= 0: no interval (every commit at once). */
zl_commit_pace_t *zl_commit_pace_new (int64_t interval_us);
/*  Destroy; nulls the caller's pointer. */
void zl_commit_pace_destroy (zl_commit_pace_t **self_p);
void zl_commit_pace_set_interval (zl_commit_pace_t *self, int64_t interval_us);

/*  The loop wrote into its open batch, which held nothing before when
    `first`: written while a commit it handed over is unfinished, the batch
    follows a stream. */
void zl_commit_pace_write (zl_commit_pace_t *self, bool first);
/*  The loop hands its open batch to the thread. Returns true if the batch
    follows a stream (it waits for zl_commit_pace_due); the next batch starts
    afresh. */
bool zl_commit_pace_hand_over (zl_commit_pace_t *self);
/*  The loop saw the commit it handed over end. */
void zl_commit_pace_ended (zl_commit_pace_t *self);
/*  The open batch is dropped, or its caller will wait for its commit: it
    does not wait for the interval. */
void zl_commit_pace_not_behind (zl_commit_pace_t *self);

/*  When the commit of a batch may start: for one that follows a stream
    (`behind`), the last commit's start plus the interval; else 0 (now). */
int64_t zl_commit_pace_due (const zl_commit_pace_t *self, bool behind);
/*  A commit starts at `now_us`. */
void zl_commit_pace_started (zl_commit_pace_t *self, int64_t now_us);

#endif
