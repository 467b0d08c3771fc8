/*  worker_job: the record of one job a worker holds (internal to the worker
    library). It wraps the handler's view (zl_worker_job_t, the first member,
    so a handler's pointer converts back), the cancellation state shared
    with the handler thread, the I/O thread's timers and the handler's
    result. One allocation holds the record and copies of every string. */
#ifndef ZL_WORKER_JOB_H
#define ZL_WORKER_JOB_H

#include "zlane_worker.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef enum {
    ZL_HELD_BACKLOG = 0, // received; the I/O thread has not handed it over yet
    ZL_HELD_HANDED       // in the handler threads' work queue, or running
} zl_held_state_t;

// A checkpoint a handler saved, not sent yet (zl_worker_job_checkpoint).
typedef struct {
    size_t len;
    uint8_t data[];
} zl_held_ckpt_t;

typedef struct _zl_held_job_t {
    zl_worker_job_t pub; // must stay first: handlers get &pub
    // shared between threads
    atomic_int cancel;    // zl_worker_cancel_t; the first reason sticks
    atomic_int cancel_fd; // eventfd made on first use, readable once cancelled; -1 = none
    _Atomic (zl_held_ckpt_t *) ckpt; // saved by the handler, taken by the I/O thread
    atomic_uint *ckpt_flag;          // the worker's "a checkpoint waits" (NULL: no worker)
    int wake_fd;                     // the worker's loop wake-up (-1: none)
    // owned by the I/O thread
    zl_held_state_t state;
    uint64_t seq;                       // receipt order (ties between equal deadlines)
    int64_t received_ms;                // monotonic
    int64_t next_extend_ms;             // 0 = never extend
    int64_t max_run_at_ms;              // 0 = no local max run time
    int64_t due_ms;                     // the earlier of the two above (held_timers' key)
    uint32_t timer_idx;                 // held_timers' slot + 1; 0 = not scheduled
    bool acked_early;                   // ack_early mode: already acked, result ignored
    struct _zl_held_job_t *prev, *next; // the worker's held list, in receipt order
    struct _zl_held_job_t *id_next;     // next held job with the same job id (other lease)
    // written by the handler thread before it hands the job back
    zl_worker_result_t result;
    uint64_t run_us;
    bool skipped;                 // cancelled before a handler thread took it: it never ran
    struct _zl_held_job_t *qnext; // backlog (I/O thread), work or done queue link
} zl_held_job_t;

/*  Return a new record holding deep copies of `fields`. Caller owns. */
zl_held_job_t *zl_held_job_new (const zl_worker_job_t *fields);
/*  Destroy the record; nulls the caller's pointer. */
void zl_held_job_destroy (zl_held_job_t **self_p);
/*  Return the record behind a handler's job pointer. */
zl_held_job_t *zl_held_job_of (const zl_worker_job_t *job);
/*  Take the checkpoint the handler saved and not yet taken (caller owns,
    free()), or NULL. */
zl_held_ckpt_t *zl_held_job_take_checkpoint (zl_held_job_t *self);
/*  Cancel for `why` if not cancelled yet. Returns true if this call did it. */
bool zl_held_job_cancel (zl_held_job_t *self, zl_worker_cancel_t why);

#endif
