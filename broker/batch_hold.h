/*  batch_hold: where the broker's loop commits (LMDB in `none` mode, or
    --commit-on-loop), when a turn may leave its batch open for a later
    turn's commit instead of committing it now (--commit-interval).

    A turn whose only promising replies are Settled (acks, nacks, retries:
    nobody waits on one to go on) may leave its batch open while less than
    the interval has passed since the loop's last commit; the batch is then
    committed by the next turn that must commit, or once the interval has
    passed (the loop wakes for it). Which replies a turn owes is the
    caller's to know (replies.h); this keeps the times. Milliseconds of one
    monotonic clock, given by the caller. */
#ifndef ZL_BATCH_HOLD_H
#define ZL_BATCH_HOLD_H

#include <stdbool.h>
#include <stdint.h>

typedef struct _zl_batch_hold_t zl_batch_hold_t;

/*  `interval_ms` 0: never hold (every turn commits). No commit yet: the
    first turn commits. */
zl_batch_hold_t *zl_batch_hold_new (uint64_t interval_ms);
/*  Destroy; nulls the caller's pointer. NULL-safe. */
void zl_batch_hold_destroy (zl_batch_hold_t **self_p);
/*  True if a turn at `now_ms` may leave its batch open: the last commit
    was less than the interval ago. */
bool zl_batch_hold_may (const zl_batch_hold_t *self, int64_t now_ms);
/*  The turn leaves its batch open: it is due for commit at the last
    commit plus the interval (zl_batch_hold_due). */
void zl_batch_hold_leave (zl_batch_hold_t *self);
/*  The loop committed every turn's batch at `now_ms`: none is held open. */
void zl_batch_hold_committed (zl_batch_hold_t *self, int64_t now_ms);
/*  When the batch left open must be committed; -1 while none is. */
int64_t zl_batch_hold_due (const zl_batch_hold_t *self);

#endif
