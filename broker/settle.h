/*  settle: a worker's Ack, Nack and Extend messages, item by item, applied
    to the job table (jobs.c decides each item), with the Settled entries
    queued for after the commit and one Error for all the refused items of a
    message (replies.h). The broker has already checked that the sender is
    a registered worker. */
#ifndef ZL_SETTLE_H
#define ZL_SETTLE_H

#include "clock.h"
#include "jobs.h"
#include "msg.h"
#include "replies.h"
#include "workers.h"

#include <stdint.h>

/*  Where a message's items are applied and answered (borrowed). */
typedef struct {
    zl_jobs_t *jobs;
    zl_replies_t *replies;
    uint64_t *counters; // jobs_acked, jobs_nacked, leases_extended, the err_* of refusals
    zl_sock_t sock;     // where the message came from
    const zl_peer_t *peer;
    uint64_t max_result;     // the largest result an Ack item may carry
    uint64_t max_checkpoint; // the largest checkpoint an Extend or Nack item may carry
} zl_settle_env_t;

/*  Ack each item for `w`: the job is done (deleted, or kept with its
    result). An item whose result is over max_result is refused
    RESULT_TOO_LARGE and not settled. */
void zl_settle_ack (const zl_settle_env_t *env, zl_worker_conn_t *w, const zl_ack_t *ack,
                    zl_now_t now);
/*  Nack each item for `w`: retried, throttled or dead-lettered. A class
    above NOT_YET is refused INVALID; a checkpoint over max_checkpoint,
    CHECKPOINT_TOO_LARGE (the item not settled). */
void zl_settle_nack (const zl_settle_env_t *env, zl_worker_conn_t *w, const zl_nack_t *nack,
                     zl_now_t now);
/*  Extend each item's lease for `w` (and save its checkpoint); lease_ms 0
    is refused INVALID, a checkpoint over max_checkpoint CHECKPOINT_TOO_LARGE
    (nothing changed), and an extension cut at the max run deadline is
    refused MAX_RUN (but made). */
void zl_settle_extend (const zl_settle_env_t *env, zl_worker_conn_t *w, const zl_extend_t *ext,
                       zl_now_t now);

#endif
