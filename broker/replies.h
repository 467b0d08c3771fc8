/*  replies: everything the broker sends, and the one place where the rule
    "nothing that promises a state change leaves before the commit" is kept.

    Two ways out:
    - at once (zl_replies_send, zl_replies_error, the refusals): Errors for
      bad input, read-only admin replies, heartbeats, the NOT_READY told to
      a forgotten producer, DLQ alerts, and what a broker that does not lead
      answers (NOT_LEADER, UNAVAILABLE). None of them promises a state
      change.
    - after the turn's commit (zl_replies_flush), in this order: Accepted,
      Rejected and Credit to producers; admin replies that report a change
      ("redrove 3", "cancelled 2"); DeadLetter events; job outcomes (Watch
      answers, done events); Settled, Cancel and Dispatch to workers. The
      exception: on a store only this broker writes, a Dispatch of a job a
      crash can only make run again (zl_replies_flush_early) goes before
      the commit: it promises nothing to the producer or the worker. The
      handlers only queue them: into the outbox of each producer and worker
      (embedded in its record, written only by this module) and into the
      lists kept here.

    Every failed send to a peer is counted (err_peer_unreachable). */
#ifndef ZL_REPLIES_H
#define ZL_REPLIES_H

#include "arena.h"
#include "clock.h"
#include "codec.h"
#include "counters.h"
#include "job.h"
#include "msg.h"
#include "wire.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*  The broker's ROUTER sockets. */
typedef enum { ZL_SOCK_FRONTEND = 0, ZL_SOCK_BACKEND, ZL_SOCK_ADMIN, ZL_SOCK_COUNT } zl_sock_t;

/*  "frontend", "backend" or "admin". */
const char *zl_sock_name (zl_sock_t sock);

/*  What a producer is sent after the commit (inside its record). */
typedef struct {
    zl_acceptance_t *acc;
    uint32_t n_acc, cap_acc;
    zl_rejection_t *rej; // reasons are static strings or turn-arena strings
    uint32_t n_rej, cap_rej;
    zl_batch_closed_t *closed; // Submit.close_batches answered (turn-arena strings)
    uint32_t n_closed, cap_closed;
    uint64_t sent_limit; // the credit limit last sent
} zl_producer_outbox_t;

/*  What a worker is sent after the commit (inside its record). */
typedef struct {
    zl_job_t **jobs; // leased this turn: one Dispatch per frame's worth
    uint32_t n_jobs, cap_jobs;
    zl_lease_ref_t *settled;
    uint32_t n_settled, cap_settled;
    zl_lease_ref_t *cancels; // its running jobs an operator cancelled this turn
    uint32_t n_cancels, cap_cancels;
} zl_worker_outbox_t;

struct zl_producer_conn;
struct zl_worker_conn;
struct _zl_producers_t;
struct _zl_workers_t;
struct _zl_jobs_t;

typedef struct _zl_replies_t zl_replies_t;

/*  What the replies need, all borrowed and outliving them. */
typedef struct {
    struct _zl_router_t *routers[ZL_SOCK_COUNT];
    void *events; // the PUB socket (libzmq)
    zl_codec_t *codec;
    struct _zl_jobs_t *jobs; // payloads for Dispatch, dead letters for events
    uint64_t *counters;      // the broker's counters (ZL_CTR_*)
    zl_arena_t *turn;        // strings that live until the next turn
} zl_replies_env_t;

/*  Return the broker's replies over `env` (copied). */
zl_replies_t *zl_replies_new (const zl_replies_env_t *env);
/*  Destroy; nulls the caller's pointer. */
void zl_replies_destroy (zl_replies_t **self_p);
/*  Take `jobs` as the job table from now on (the broker rebuilt its state):
    what was queued for after the commit (dead-letter events, admin replies
    reporting a change) is dropped, never sent. The producers' and workers'
    outboxes go with their records. */
void zl_replies_rebind (zl_replies_t *self, struct _zl_jobs_t *jobs);
/*  wire_dump: append every frame sent from now on to the file `path`, each
    as a 4-byte little-endian length and the frame, in one write (a broker
    killed at any moment leaves whole records, or a last one cut). Returns
    0, or -1 with the reason in `err`. */
int zl_replies_dump_to (zl_replies_t *self, const char *path, char *err, size_t errlen);

// ---------------------------------------------------------------- at once
/*  Send `msg` to `peer` on `sock` now. Returns 0, or -1 (counted as
    unreachable). Only for what promises no state change. */
int zl_replies_send (zl_replies_t *self, zl_sock_t sock, const zl_peer_t *peer,
                     const zl_msg_t *msg);
/*  The one path for bad input: count `counter`, log, and send an Error with
    `code` and the text (cut to 511 bytes on a character boundary). */
void zl_replies_error (zl_replies_t *self, zl_sock_t sock, const zl_peer_t *peer,
                       zl_counter_id_t counter, zl_error_code_t code, uint64_t job_id,
                       uint64_t lease, const char *fmt, ...)
    __attribute__ ((format (printf, 8, 9)));
/*  A standby's answer to any message, at once: Error{NOT_LEADER} naming
    `leader`, the leader's endpoint for `sock` ("" when unknown: none is
    named), and `leader_name` in its text ("" unknown). Counted in
    err_not_leader. */
void zl_replies_not_leader (zl_replies_t *self, zl_sock_t sock, const zl_peer_t *peer,
                            const char *leader, const char *leader_name);
/*  The answer of a broker that no writable database answers, at once: each
    spec of a Submit is Rejected{UNAVAILABLE, retry_after_ms}, any other
    message gets Error{UNAVAILABLE}. Counted in err_unavailable, once per
    message. */
void zl_replies_unavailable (zl_replies_t *self, zl_sock_t sock, const zl_peer_t *peer,
                             const zl_msg_t *msg, uint32_t retry_after_ms);
/*  The broker forgot its state (it lost the lead, or leads again from the
    store): tell each producer and worker it held, at once, so that none
    waits for an answer that will not come: Error{code, `why`}, `code` being
    NOT_LEADER (naming `leader[sock]`, the leader's endpoint for the
    client's socket, "" unknown), UNAVAILABLE, or NOT_READY (this broker
    leads: Hello or Ready again). Not counted as refusals. */
void zl_replies_forgotten (zl_replies_t *self, struct _zl_producers_t *producers,
                           struct _zl_workers_t *workers, zl_error_code_t code,
                           const char *const leader[ZL_SOCK_COUNT], const char *why);
/*  Publish `msg` on the events socket under `topic` now; counts it. */
void zl_replies_publish (zl_replies_t *self, const char *topic, const zl_msg_t *msg);
/*  Publish a DlqAlert (depth, age of the oldest) under "alert.dlq", if the
    DLQ holds anything. */
void zl_replies_dlq_alert (zl_replies_t *self, zl_now_t now);

/*  The refusals of one message's items -- the items of an Ack, Nack or
    Extend, the lanes of a Ready -- answered together by one Error, so that
    no message earns more than one reply or one log line. Each refused item
    is counted. With `job_items`, the Error lists every refused job item
    with its code; its code, job_id and lease are those of the first. */
typedef struct {
    zl_replies_t *replies;
    zl_sock_t sock;
    const zl_peer_t *peer;
    const char *what; // "ack", "Ready lane", ...
    size_t total;     // items in the message
    bool job_items;
    size_t n;
    zl_item_error_t *items; // turn arena, `total` slots
    zl_error_code_t code;   // of the first refusal
    uint64_t job_id, lease; // of the first refusal
    char first[256];        // the first refusal in words
    uint32_t by_code[ZL_ERR_CODE_COUNT];
} zl_refusals_t;

/*  Start collecting the refusals of a message of `total` items. */
void zl_refusals_init (zl_refusals_t *r, zl_replies_t *replies, zl_sock_t sock,
                       const zl_peer_t *peer, const char *what, size_t total, bool job_items);
/*  Count and record one refused item. */
void zl_refusals_add (zl_refusals_t *r, zl_counter_id_t counter, zl_error_code_t code,
                      uint64_t job_id, uint64_t lease, const char *fmt, ...)
    __attribute__ ((format (printf, 6, 7)));
/*  Send the one Error for the refused items, if any; `tail` (or NULL) is
    appended to its text. */
void zl_refusals_send (zl_refusals_t *r, const char *tail);

// ---------------------------------------------------------------- after the commit
/*  Queue the acceptance of the producer's job `seq` as `job_id`. */
void zl_replies_accept (zl_replies_t *self, struct zl_producer_conn *p, uint64_t seq,
                        uint64_t job_id, bool duplicate);
/*  ... of a spec that opened batch `batch_id` (outliving the turn). */
void zl_replies_accept_batch (zl_replies_t *self, struct zl_producer_conn *p, uint64_t seq,
                              uint64_t job_id, bool duplicate, const char *batch_id);
/*  Queue the answer to one of a Submit's close_batches (strings outlive the
    turn; `error` NULL when closed). */
void zl_replies_batch_closed (zl_replies_t *self, struct zl_producer_conn *p, const char *batch_id,
                              const char *error);
/*  Queue the batch.<id> event of a settled batch (its data in the turn arena). */
void zl_replies_batch_done (zl_replies_t *self, const zl_batch_info_t *info);
/*  Queue the rejection of job `seq` (`reason` must outlive the turn). */
void zl_replies_reject (zl_replies_t *self, struct zl_producer_conn *p, uint64_t seq,
                        zl_reject_code_t code, const char *reason, uint32_t retry_after_ms);
/*  Send the producer a Credit after this turn's commit even if its limit
    did not change (a Hello's answer). */
void zl_replies_credit_due (zl_replies_t *self, struct zl_producer_conn *p);
/*  True if the producer has acceptances or rejections queued. */
bool zl_replies_producer_pending (const struct zl_producer_conn *p);
/*  Queue a leased job for the worker's Dispatch. */
void zl_replies_dispatch (zl_replies_t *self, struct zl_worker_conn *w, zl_job_t *job);
/*  Queue a Settled entry for the worker. */
void zl_replies_settled (zl_replies_t *self, struct zl_worker_conn *w, uint64_t job_id,
                         uint64_t lease);
/*  Queue a Cancel entry for the worker: its job `job_id` under `lease` was
    cancelled (sent after the commit that recorded it). */
void zl_replies_cancel (zl_replies_t *self, struct zl_worker_conn *w, uint64_t job_id,
                        uint64_t lease);
/*  Move the Settled and Cancel entries queued for `from` to `to` (the same
    worker process on a new connection). */
void zl_replies_move_settled (zl_replies_t *self, struct zl_worker_conn *to,
                              struct zl_worker_conn *from);
/*  Queue the DeadLetter event of job `job_id`. */
void zl_replies_dead (zl_replies_t *self, uint64_t job_id);
/*  Queue a job's outcome (its data in the turn arena): a JobOutcome for
    the watcher `peer` on the frontend, or with `topic` (turn arena) a
    job_done event on the events socket. */
void zl_replies_outcome (zl_replies_t *self, const zl_peer_t *peer, const char *topic,
                         const zl_job_outcome_t *outcome);
/*  Queue an admin reply that reports a change (its strings in the turn
    arena). */
void zl_replies_admin (zl_replies_t *self, const zl_peer_t *peer, const zl_msg_t *reply);

/*  Before the turn's commit, on a store no other broker writes (LMDB):
    send each worker, in Dispatch frames, the jobs leased to it this turn
    that a crash before the commit can at worst make run twice (a job that
    waits for no other and none for it, resumes no checkpoint, and whose id
    is below `below_id`, the id counter as last committed); the others stay
    queued for zl_replies_flush. The lease is not durable yet: the broker
    holds only what no reply promised, and a crash gives the job back (a
    job submitted in the same turn was never Accepted). Counted in
    jobs_dispatched_before_commit. Returns the workers found unreachable
    (turn arena; their queue emptied) and their count in `*n_gone`. */
struct zl_worker_conn **zl_replies_flush_early (zl_replies_t *self, struct _zl_workers_t *workers,
                                                uint64_t below_id, size_t *n_gone);

/*  Step 7 of the turn, once its commit returned or started: send
    everything queued, the workers' frames first (a lone job starts
    sooner), then the producers', the admin replies and the events, and
    empty the queues. Returns
    the workers found unreachable (turn arena) and their count in
    `*n_gone`: the caller gives their jobs back. With `hold` (the commit is
    under way) the frames are made now and kept, in that order, until
    zl_replies_release sends them (none is found unreachable here). */
struct zl_worker_conn **zl_replies_flush (zl_replies_t *self, struct _zl_producers_t *producers,
                                          struct _zl_workers_t *workers, bool hold, size_t *n_gone);
/*  True when something was queued for after the commit since the last
    flush (a Credit raised by zl_admission_regrant alone does not count). */
bool zl_replies_queued (const zl_replies_t *self);
/*  True when what is queued for after the commit (and not sent by
    zl_replies_flush_early) is Settled alone: no reply to a producer
    (Accepted, Rejected, a Credit due), no admin reply, event, outcome,
    Cancel or job to send. Nobody waits on a Settled to go on: a turn that
    only settled jobs may leave its commit to the next (broker.c). */
bool zl_replies_settles_only (const zl_replies_t *self, struct _zl_producers_t *producers);
/*  True while frames are held for a commit under way. */
bool zl_replies_held (const zl_replies_t *self);
/*  A commit started: the frames held so far wait for it; those held from
    now on, for the commit after it (a store with a commit thread goes on
    writing the next batch while one commits). */
void zl_replies_cut (zl_replies_t *self);
/*  The commit under way is done: send the frames held for it (up to the
    last zl_replies_cut), in order; the rest stay held. Returns the backend peers a frame could not
   reach (turn arena), their count in `*n_gone`. */
zl_peer_t *zl_replies_release (zl_replies_t *self, size_t *n_gone);
/*  The commit they waited for failed: the held frames are dropped, never
    sent (also done by zl_replies_rebind). */
void zl_replies_drop_held (zl_replies_t *self);

/*  Free an outbox's buffers (when its record is freed). */
void zl_producer_outbox_free (zl_producer_outbox_t *out);
void zl_worker_outbox_free (zl_worker_outbox_t *out);

#endif
