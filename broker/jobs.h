/*  jobs: the job table and its state machine -- the one place where a job
    changes state, in memory and in the store (each transition writes its
    record into the turn's store batch; the broker commits the batch).

        accept --> READY <-----------------+---------------+
          |  ^       | lease               | retry due     | redrive
          |  |       v                     |               |
          | WAITING LEASED --ack--> (deleted) or DONE      |
          v  (parents) | nack / lease lapse / worker dead  |  (kept outcome,
       DELAYED --------+--> DELAYED (backoff) or DEAD -----+   result_retention)

    Workflows (deps.h holds the graph): a job accepted with parents that
    are not all acked is WAITING; the last parent's ack makes it READY. A
    parent dead-lettered sends its WAITING descendants to the DLQ too
    (outcome parent_failed, the parent's id in the error and the state's
    failed_parent). Redriving a job in a workflow puts it WAITING, READY or
    straight back in the DLQ by its parents' states, and brings back the
    descendants it buried the same way. An acked job is deleted, unless its
    outcome is needed: a result, children, a watcher (zl_jobs_keep), or a
    lane with keep_outcomes: then it is DONE, its result in the store, until
    zl_jobs_expire_done (never while a child of it may still run).

       READY, DELAYED, LEASED, DEAD --cancel--> CANCELLED --result_retention--> (deleted)

    A CANCELLED job is inert: no queue, no timer, no lease, no depth. It
    stays (in memory and in the store, state 7) so that a late Ack, Nack or
    Extend of it is refused CANCELLED and an operator can be told it was
    cancelled, until zl_jobs_expire_cancelled deletes it. A restart
    recovers it CANCELLED: it is never ready again.

    Every transition updates the flow's gauges and counters, and tells the
    listener (the broker) about dead-letters, settlements and cancels. */
#ifndef ZL_JOBS_H
#define ZL_JOBS_H

#include "batches.h"
#include "clock.h"
#include "dlq.h"
#include "job.h"
#include "lease.h"
#include "msg.h"
#include "rng.h"
#include "scheduler.h"
#include "store.h"
#include "timers.h"
#include "workers.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct _zl_jobs_t zl_jobs_t;

typedef enum {
    ZL_SETTLE_OK = 0,
    ZL_SETTLE_UNKNOWN_JOB, // no such job (never issued, or already settled and deleted)
    ZL_SETTLE_STALE_LEASE, // the job exists but the token is not its current lease
    ZL_SETTLE_NOT_HOLDER,  // the token is current, but the lease is another worker's
    ZL_SETTLE_MAX_RUN,     // extend: the lease now ends at the max run deadline, no later
    ZL_SETTLE_CANCELLED    // the job was cancelled: nothing changed (any lease token)
} zl_settle_rc_t;

typedef enum {
    ZL_JOBS_EV_DEAD = 1,     // job was dead-lettered
    ZL_JOBS_EV_ACKED,        // job completed (called before it is freed; zl_jobs_outcome works)
    ZL_JOBS_EV_CANCELLED,    // job is being cancelled, told before it leaves its state: a
                             // LEASED job still holds its lease (job->lease), so that the
                             // listener can tell its worker
    ZL_JOBS_EV_CANCEL_FINAL, // ... and once it is CANCELLED (its outcome is final)
    ZL_JOBS_EV_EXPIRING      // a LEASED job's deadline passed: told while it holds its lease,
                             // so that the listener can tell its worker to stop it
} zl_jobs_event_t;

/*  The workflow and result side of the table. */
typedef struct {
    uint64_t waiting;           // WAITING jobs (gauge)
    uint64_t kept;              // DONE jobs: outcomes kept (gauge)
    uint64_t nodes;             // jobs in the dependency graph (gauge)
    uint64_t edges;             // dependency edges linked (counter)
    uint64_t parent_failed;     // jobs dead-lettered because a parent was (counter)
    uint64_t rearmed;           // of those, brought back by a parent's redrive (counter)
    uint64_t expired;           // kept outcomes forgotten at result_retention (counter)
    uint64_t not_yet;           // NOT_YET nacks (counter)
    uint64_t not_yet_exhausted; // jobs dead-lettered for passing max_not_yet (counter)
    uint64_t ordering_keys;     // ordering keys with jobs (gauge)
    uint64_t ordering_held;     // jobs waiting for their ordering key's turn (gauge)
} zl_jobs_graph_stats_t;

#define ZL_NOT_YET_DEFAULT_MS 1000 // a NOT_YET nack's delay when it gives none

typedef void (zl_jobs_listener_fn) (void *ctx, zl_jobs_event_t ev, zl_job_t *job);

/*  Return a job table using (borrowing) `sched`, `timers`, `rng` (backoff
    jitter) and `store`. Lease tokens come from its own CSPRNG token source
    (lease.h), not from `rng`. */
zl_jobs_t *zl_jobs_new (zl_sched_t *sched, zl_timers_t *timers, zl_rng_t *rng, zl_store_t *store);
/*  Destroy the table and every job in it; nulls the caller's pointer. */
void zl_jobs_destroy (zl_jobs_t **self_p);
/*  Set the listener told of dead-letters and acks. */
void zl_jobs_set_listener (zl_jobs_t *self, zl_jobs_listener_fn *fn, void *ctx);

/*  Take the next value of the id counter (job ids and ready sequence
    numbers share it, so both stay unique and ordered for the store's life). */
uint64_t zl_jobs_take_id (zl_jobs_t *self);
/*  The id counter's next value (persisted at every commit). */
uint64_t zl_jobs_next_id (zl_jobs_t *self);

/*  Phase 1 of accepting: write the job record (and its idempotency key)
    into the store batch. Nothing changes in memory. ZL_STORE_FULL is the
    caller's to answer; any other failure also marks the store failed (the
    turn cannot be committed, zl_jobs_store_failed). */
zl_store_rc_t zl_jobs_stage (zl_jobs_t *self, uint64_t id, const zl_job_spec_t *spec,
                             const zl_lane_config_t *lane, zl_now_t now);
/*  Phase 2, once the stage is in the batch: the job exists in memory, READY,
    or DELAYED if the spec asks for a delay; with parents (spec->depends_on,
    ids only: each a job of this table, or gone, which counts as acked),
    WAITING while one is not acked, or dead-lettered (parent_failed) if one
    is dead. */
zl_job_t *zl_jobs_accept (zl_jobs_t *self, uint64_t id, const zl_job_spec_t *spec, zl_flow_t *flow,
                          zl_now_t now);
/*  Lease a READY job (already popped from the scheduler) to `worker` under
    a new lease (lease.h: a fresh unguessable token, deadlines from the job's
    lease_ms and max_run_ms): attempt + 1, timer armed at the lease's due time. */
void zl_jobs_lease (zl_jobs_t *self, zl_job_t *job, zl_worker_conn_t *worker, zl_now_t now);
/*  Settlements and extensions quote (job_id, lease) and must come from the
    worker holding the lease (ZL_SETTLE_NOT_HOLDER otherwise). */
/*  Ack (job_id, lease) from `worker`; on success the job is deleted, or
    kept DONE with ack->result (see above); its WAITING children whose
    parents are all acked now become READY. */
zl_settle_rc_t zl_jobs_ack (zl_jobs_t *self, zl_worker_conn_t *worker, const zl_ack_item_t *ack,
                            zl_now_t now);
/*  Nack (job_id, lease) from `worker`: retry with backoff, honour THROTTLED's
    retry-after, or dead-letter (PERMANENT, or attempts used up). NOT_YET:
    ready again after its retry_after_ms (ZL_NOT_YET_DEFAULT_MS if 0)
    without spending an attempt (the history records it), dead-lettered
    once the job had more than its lane's max_not_yet of them. */
zl_settle_rc_t zl_jobs_nack (zl_jobs_t *self, zl_worker_conn_t *worker, const zl_nack_item_t *nack,
                             zl_now_t now);
/*  Extend the lease (job_id, lease) to now + ext->lease_ms (> 0). Past the
    job's max run deadline it is extended only to that deadline and
    ZL_SETTLE_MAX_RUN returned (the lease changed all the same). A
    checkpoint (ext->checkpoint, not empty) replaces the job's stored one:
    its state record goes into the batch, and every later state write keeps
    it (a retry's Job carries it, the DLQ shows it, a redrive keeps it); a
    Nack's checkpoint is saved the same way with the failure. */
zl_settle_rc_t zl_jobs_extend (zl_jobs_t *self, zl_worker_conn_t *worker,
                               const zl_extend_item_t *ext, zl_now_t now);
/*  Fail every job `worker` holds with `outcome` (worker dead or gone);
    each counts as a failed attempt and is ready again at once, or
    dead-lettered if that was its last attempt. */
size_t zl_jobs_release_worker (zl_jobs_t *self, zl_worker_conn_t *worker, zl_outcome_t outcome,
                               const char *error, zl_now_t now);
/*  Make every job `worker` holds ready again at once as if never leased:
    its Dispatch never reached the worker (lost with a connection the worker
    left), so no attempt is spent and no history is written. Returns how many. */
size_t zl_jobs_return_unreached (zl_jobs_t *self, zl_worker_conn_t *worker, zl_now_t now);
/*  Fire due timers: lapsed leases fail (ready again, or DLQ), delays end
    (READY). Returns how many fired. */
size_t zl_jobs_fire_timers (zl_jobs_t *self, zl_now_t now);
/*  Return the monotonic ms of the next timer, or -1 if none. */
int64_t zl_jobs_next_timer (zl_jobs_t *self);
/*  Return the live job with `id` (any state), or NULL. */
zl_job_t *zl_jobs_find (zl_jobs_t *self, uint64_t id);
/*  Read a job's stored record and state (state zeroed when it has none);
    data lives in `arena`. */
zl_store_rc_t zl_jobs_load (zl_jobs_t *self, const zl_job_t *job, zl_arena_t *arena,
                            zl_job_rec_t *rec, zl_state_rec_t *state);
/*  Fill `d` with a DEAD job as the protocol shows it; `full` adds payload,
    headers and the attempt history. Data lives in `arena`. Returns 0, or -1
    if the store cannot read the job. */
int zl_jobs_dead_letter (zl_jobs_t *self, zl_job_t *job, bool full, zl_arena_t *arena,
                         zl_dead_letter_t *d);
/*  Put a DEAD job back as READY with a fresh attempt count and history (a
    job with parents: READY, WAITING, or dead again, by their states), and
    bring back the descendants that its death buried. */
void zl_jobs_redrive (zl_jobs_t *self, zl_job_t *job, zl_now_t now);
/*  Delete a DEAD job. */
void zl_jobs_purge (zl_jobs_t *self, zl_job_t *job);
/*  Cancel job `id` and fill `out` (its strings static): a READY, DELAYED
    or DEAD job leaves its queue, timer or the DLQ; a LEASED one ends its
    attempt with outcome CANCELLED (the run time charged, the lease freed,
    the listener told first, while it still holds the lease). The job
    becomes CANCELLED with its record in the batch, then its descendants are
    cancelled (s_cancel_descendants). Returns the outcome: CANCELLED, or
    ALREADY_CANCELLED (nothing changed), FINISHED (no live job, but the id
    was issued) or UNKNOWN (id 0, or never issued). */
zl_cancel_outcome_t zl_jobs_cancel (zl_jobs_t *self, uint64_t id, zl_now_t now,
                                    zl_cancel_item_t *out);
/*  Delete the cancelled jobs kept longer than `keep_ms` (0 = kept for
    ever), oldest first, at most `max`. Returns how many. */
uint64_t zl_jobs_expire_cancelled (zl_jobs_t *self, zl_now_t now, uint64_t keep_ms, uint64_t max);
/*  Number of cancelled jobs kept. */
size_t zl_jobs_cancelled_kept (zl_jobs_t *self);
/*  Purge the dead letters older than `keep_ms` (0 = keep them all), oldest
    first, at most `max`; logs how many. Returns how many. */
uint64_t zl_jobs_expire_dead (zl_jobs_t *self, zl_now_t now, uint64_t keep_ms, uint64_t max);

/*  Forget the kept outcomes older than `keep_ms`, oldest first, looking at
    at most `max`; one a child may still need is kept longer. Returns how
    many were forgotten. */
uint64_t zl_jobs_expire_done (zl_jobs_t *self, zl_now_t now, uint64_t keep_ms, uint64_t max);
/*  Keep `job`'s outcome when it finishes (someone watches it). */
void zl_jobs_keep (zl_jobs_t *self, zl_job_t *job);
/*  Fill `out` with job `id`'s outcome as the protocol shows it: not found,
    not final (its state), or final (acked with its result, read from the
    store; dead-lettered with its last error). Data lives in `arena`.
    Returns 0, or -1 if the store cannot read it. */
int zl_jobs_outcome (zl_jobs_t *self, uint64_t id, zl_arena_t *arena, zl_job_outcome_t *out);
/*  Fill out->parents and out->children of job `id` while it is in the
    dependency graph (a workflow's job not yet forgotten): its record's
    depends_on, and the node's children. Nothing for any other job. Returns
    0, or -1 when the store cannot read the record. */
int zl_jobs_graph_of (zl_jobs_t *self, uint64_t id, zl_arena_t *arena, zl_job_outcome_t *out);
/*  The results of the parents `rec` names, in its order (empty for one
    not DONE), read from the store into `arena`. Returns 0. */
int zl_jobs_parent_results (zl_jobs_t *self, const zl_job_rec_t *rec, zl_arena_t *arena, size_t *n,
                            const zl_parent_result_t **out);
/*  Batches (batches.h): the table, borrowed. A spec that opens a batch is
    accepted WAITING, as the batch's record job; a spec naming an open batch
    joins it. */
zl_batches_t *zl_jobs_batches (zl_jobs_t *self);
/*  The name of the batch that `spec` (open_batch) opens as job `id`: its
    open_batch_id, or `id` in decimal. Valid until the next call. */
const char *zl_jobs_batch_name (zl_jobs_t *self, uint64_t id, const zl_job_spec_t *spec);
/*  End of a turn, before the commit: every batch whose progress changed has
    its record rewritten; every batch due (closed, nothing pending) settles:
    its record job is rewritten with the summary and becomes READY (its
    callback runs) or, without a callback, DONE. Fills `settled` (in
    `arena`) with those settled. Returns how many. */
size_t zl_jobs_settle_batches (zl_jobs_t *self, zl_now_t now, zl_arena_t *arena,
                               zl_batch_info_t **settled);
/*  Batch `id` as the protocol shows it (found false if unknown). Data in
    `arena`. */
void zl_jobs_batch_info (zl_jobs_t *self, const char *id, zl_arena_t *arena, zl_batch_info_t *out);

/*  Deadlines (JobSpec.deadline_ms, max_age_ms, the lane's max_age): dead-
    letter the jobs whose deadline passed by `now` (wall clock), at most
    `max`, with outcome EXPIRED: a READY, DELAYED or WAITING job leaves its
    queue; a LEASED one's attempt ends (the listener told first,
    ZL_JOBS_EV_EXPIRING, to stop its worker); descendants waiting for it are
    buried parent_failed. A batch's callback has no deadline. Returns how
    many. */
size_t zl_jobs_expire_deadlines (zl_jobs_t *self, zl_now_t now, size_t max);
/*  The earliest deadline held (wall clock ms), or -1. */
int64_t zl_jobs_next_deadline (zl_jobs_t *self);
/*  Jobs dead-lettered at their deadline (counter). */
uint64_t zl_jobs_expired (zl_jobs_t *self);

/*  The workflow and result counters and gauges. */
void zl_jobs_graph_stats (zl_jobs_t *self, zl_jobs_graph_stats_t *out);

/*  How recovery ends the attempts that were running when the last leader
    stopped: the outcome their history records, and its error text (static). */
typedef struct {
    zl_outcome_t outcome; // ZL_OUTCOME_BROKER_RESTART or ZL_OUTCOME_LEADER_CHANGE
    const char *error;
} zl_jobs_cut_t;

/*  Recovery, one stored job at a time (in id order), then restore_done to
    rebuild the ready queues in their order. A job that was LEASED is ready
    again (dead if that was its last attempt) with the attempt counted and
    ended as `cut` says. A CANCELLED job stays cancelled. */
void zl_jobs_restore (zl_jobs_t *self, uint64_t id, zl_flow_t *flow, const zl_job_rec_t *rec,
                      const zl_state_rec_t *state, const zl_jobs_cut_t *cut, zl_now_t now);
void zl_jobs_restore_done (zl_jobs_t *self, uint64_t next_id, zl_now_t now);

/*  ZL_STORE_OK, or how the first store write that failed since the last
    call failed (the turn's batch cannot be committed); clears it. */
zl_store_rc_t zl_jobs_store_error (zl_jobs_t *self);
/*  The dead-letter queue (borrowed). */
zl_dlq_t *zl_jobs_dlq (zl_jobs_t *self);
/*  Number of jobs in the table (cancelled ones kept included). */
size_t zl_jobs_count (zl_jobs_t *self);
/*  Latency histograms: 0 submit -> first start, 1 submit -> ack (borrowed). */
const struct zl_hist_s *zl_jobs_latency (zl_jobs_t *self, int which);

/*  Full-jitter backoff: random in [0, min(cap, base * 2^attempt)] ms, or the
    upper bound itself when `jitter` is false. */
uint64_t zl_backoff_ms (uint64_t base_ms, uint64_t cap_ms, uint32_t attempt, bool jitter,
                        zl_rng_t *rng);

#endif
