/*  zlane_producer: submit jobs to a zlane broker.
    Single-threaded and driven by the caller, like librdkafka without its
    threads: zl_producer_submit copies a job into a pending table and queues it;
    zl_producer_poll / _flush / _wait move bytes and deliver one result per job
    through the result callback. The producer honours the broker's credit, keeps
    every job until the broker accepted it (or rejected it for good, or its
    deadline passed), and resends unaccepted jobs under the same idempotency key
    after a broker restart. Given several brokers (one leads, the others
    stand by), it talks to one at a time: it moves to the next when that one
    goes silent and to the leader a standby names (NOT_LEADER), and resends
    there what was not Accepted, under the same keys. Not thread-safe: one
    producer per thread. */
#ifndef ZLANE_PRODUCER_H
#define ZLANE_PRODUCER_H

#include "curve.h"
#include "msg.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct _zl_producer_t zl_producer_t;

typedef enum {
    ZL_PRODUCER_ACCEPTED = 0, // durable in the broker; job_id is valid
    ZL_PRODUCER_REJECTED,     // final rejection; code and reason say why
    ZL_PRODUCER_TIMEOUT       // deadline passed first; outcome may be unknown
} zl_producer_status_t;

/*  One job's final outcome, passed to the result callback. Strings are
    borrowed for the duration of the callback. */
typedef struct {
    uint64_t seq; // what zl_producer_submit returned
    zl_producer_status_t status;
    uint64_t job_id;             // ACCEPTED: the broker's job id
    bool duplicate;              // ACCEPTED: key seen before; job_id is the original
    zl_reject_code_t code;       // REJECTED: the code; TIMEOUT: last retryable code or 0
    const char *reason;          // "" when accepted; human text otherwise
    const char *idempotency_key; // the key the job was sent with
    uint32_t sends;              // times the job went on the wire
    const char *batch_id;        // ACCEPTED, a job that opened a batch: the batch's id
} zl_producer_result_t;

/*  Called once per job from zl_producer_poll or zl_producer_wait. It may
    submit more jobs; it must not poll, wait or destroy the producer. */
typedef void (zl_producer_result_fn) (const zl_producer_result_t *result, void *arg);

/*  A watched job's outcome (zl_producer_watch), passed to the outcome
    callback. Borrowed for the duration of the callback. found false: the
    broker does not know the job (or no longer keeps its outcome). */
typedef zl_job_outcome_t zl_producer_outcome_t;

/*  Called once per watched job from zl_producer_poll or zl_producer_wait_outcomes. */
typedef void (zl_producer_outcome_fn) (const zl_producer_outcome_t *outcome, void *arg);

typedef struct {
    const char *endpoint;             // broker frontend, or several: "tcp://a:5570,tcp://b:5570"
                                      // (one at a time); default "tcp://127.0.0.1:5570"
    const char *client;               // name sent in Hello; default "zlane-producer"
    uint32_t deadline_ms;             // per job, from the submit call; default 30000
    bool nonblock;                    // submit returns -1/EAGAIN instead of waiting for credit
    uint32_t max_batch;               // job specs per Submit frame; default 256
    zl_producer_result_fn *on_result; // may be NULL
    void *on_result_arg;
    zl_curve_t curve; // CURVE keys (zl_curve_load); all zero = plaintext. One server key
                      // for every broker of the list: brokers of one deployment share it
    zl_producer_outcome_fn *on_outcome; // watched jobs' outcomes; may be NULL
    void *on_outcome_arg;
} zl_producer_opts_t;

/*  A job to submit. Everything is copied by zl_producer_submit. */
typedef struct {
    const char *tenant;  // required, non-empty
    const char *lane;    // required, non-empty
    const void *payload; // may be NULL when payload_len is 0
    size_t payload_len;
    const char *idempotency_key; // NULL or "" = "<instance hex>-<seq>"
    uint32_t delay_ms;           // 0 = dispatch at once
    uint32_t max_attempts;       // 0 = lane default
    uint32_t lease_ms;           // 0 = lane default
    uint32_t max_run_ms;         // 0 = lane default
    const zl_header_t *headers;
    size_t n_headers;
    const uint64_t *depends_on; // parents (job ids): it runs once they are all acked
    size_t n_depends_on;
    // parents in the same zl_producer_submit_batch call: indexes of earlier
    // jobs of its array (a workflow batch, sent in one Submit: see there)
    const size_t *parents_in_batch;
    size_t n_parents_in_batch;
    // Batches (README, "Batches"): join this open batch of the same tenant ...
    const char *batch; // NULL or "" = none
    // ... or open one: this job is then the batch's callback, enqueued once
    // the closed batch has settled, with the summary (zl_worker_job_batch)
    bool open_batch;
    const char *open_batch_id; // NULL or "": the broker names it (the result's batch_id)
    bool batch_no_callback;    // nothing runs when it settles (tenant and lane place it)
    bool batch_close;          // closed at once after the jobs of its Submit
    // priority within its lane and tenant, 0 (lowest) to 9; has_priority
    // false: the broker's default, 5 (across tenants fair queuing decides)
    bool has_priority;
    uint8_t priority;
    // a deadline: never run after it, dead-lettered EXPIRED (a running
    // attempt is stopped); the earliest of deadline_ms (broker wall clock,
    // 0 none), acceptance + max_age_ms (0 none) and the lane's max_age
    uint64_t deadline_ms;
    uint32_t max_age_ms;
    // ordering key (README, "Ordering keys"): the jobs of this tenant and
    // lane with the same key run one at a time, in the order accepted
    const char *ordering_key; // NULL or "" = none
} zl_producer_job_t;

/*  Counters since zl_producer_new. */
typedef struct {
    uint64_t submitted; // jobs taken by submit
    uint64_t accepted;  // results delivered or pending, by status
    uint64_t rejected;
    uint64_t timed_out;
    uint64_t specs_sent; // job specs put on the wire, resends included
    uint64_t resent;     // specs sent again after a reconnect
    uint64_t retried;    // specs sent again after a retryable rejection
    uint64_t connects;   // handshakes with a broker
    uint64_t disconnects;
    uint64_t moves; // brokers left for another of the list (silent, refused, NOT_LEADER)
} zl_producer_stats_t;

/*  Fill `opts` with the defaults above. */
void zl_producer_opts_defaults (zl_producer_opts_t *opts);

/*  Return a new producer connecting (in the background) to the first
    endpoint of opts->endpoint, or NULL with errno set if the list or one of
    its endpoints is invalid. Copies what it needs from `opts`. */
zl_producer_t *zl_producer_new (const zl_producer_opts_t *opts);

/*  Destroy the producer; jobs without a result are dropped without a callback
    (call zl_producer_wait first). Nulls the caller's pointer; NULL-safe. */
void zl_producer_destroy (zl_producer_t **self_p);

/*  Copy `job`, queue it and store its sequence number in `*seq_out` (may be
    NULL). Sequence numbers start at 1 and increase by one per job taken.
    Returns 0, or -1 without taking the job: EINVAL (bad job), EAGAIN (no
    credit, nonblock mode), ETIMEDOUT (no credit before the deadline), EINTR. */
int zl_producer_submit (zl_producer_t *self, const zl_producer_job_t *job, uint64_t *seq_out);

/*  Submit `n` jobs in order, storing their sequence numbers in `seqs_out`
    (may be NULL). Like write(2): returns how many were taken from the front
    (n on success), or -1 with errno as for zl_producer_submit if none was.
    A workflow batch -- one whose jobs name parents_in_batch (indexes of
    earlier jobs of `jobs`) -- is taken whole or not at all (EINVAL if it
    holds more than max_batch jobs or an index that is not earlier; it waits
    for credit for all of it), and goes in one Submit frame, the parents
    named by seq (JobSpec.depends_on_seq), so that the broker takes the
    whole DAG at once. A job resent alone later (a retryable rejection)
    names its parents that were accepted by their job ids. */
int zl_producer_submit_batch (zl_producer_t *self, const zl_producer_job_t *jobs, size_t n,
                              uint64_t *seqs_out);

/*  Send every queued job that credit allows now; does not wait. Returns 0. */
int zl_producer_flush (zl_producer_t *self);
/*  Close batch `batch_id`: no job joins it from now on, and it settles once
    every job of it has. Waits (up to `timeout_ms`) for every job submitted
    so far to be answered, then for the broker to confirm the close (sent
    again after a reconnect; closing a closed batch is no error). Returns 0,
    or -1 with errno ETIMEDOUT, or EPROTO when the broker refused it (an
    unknown batch, another tenant's, a cancelled one: last_error says). */
int zl_producer_close_batch (zl_producer_t *self, const char *batch_id, int timeout_ms);

/*  Send what credit allows, wait up to `timeout_ms` (-1 = until something
    happens) for replies or timers, and call the result callback for every job
    that has a final result. Returns the number of results delivered, or -1
    with errno EINTR. */
int zl_producer_poll (zl_producer_t *self, int timeout_ms);

/*  Pump until every submitted job has had its result delivered. Returns 0,
    or -1 with errno ETIMEDOUT after `timeout_ms` (-1 = no limit; job
    deadlines still apply) or EINTR. */
int zl_producer_wait (zl_producer_t *self, int timeout_ms);

/*  Watch `n` jobs (ids from accepted results): each one's outcome is
    delivered once through on_outcome, when the job is final (acked with its
    result, or dead-lettered with its error; at once if it already is), or
    as not found. The Watch is sent again on every new connection until
    the outcome came. Returns 0, or -1 with EINVAL (n is 0, or an id is 0). */
int zl_producer_watch (zl_producer_t *self, const uint64_t *ids, size_t n);
/*  Set (replace) the outcome callback of the options. */
void zl_producer_set_outcome_fn (zl_producer_t *self, zl_producer_outcome_fn *fn, void *arg);
/*  Return how many watched jobs have not had their outcome delivered. */
size_t zl_producer_watching (zl_producer_t *self);
/*  Pump until every watched job's outcome was delivered. Returns 0, or -1
    with errno ETIMEDOUT after `timeout_ms` (-1 = no limit) or EINTR. */
int zl_producer_wait_outcomes (zl_producer_t *self, int timeout_ms);

/*  Return the number of jobs taken whose result was not yet delivered. */
size_t zl_producer_outstanding (zl_producer_t *self);

/*  Return how many more jobs may be submitted now without waiting. */
uint64_t zl_producer_credit_available (zl_producer_t *self);

/*  Return true when the producer holds jobs it cannot send for lack of credit
    or connection, or has no credit for one more job (a submit would wait). */
bool zl_producer_waiting_for_credit (zl_producer_t *self);

/*  Return true while a handshake with the broker holds. */
bool zl_producer_connected (zl_producer_t *self);

/*  Return the last problem in words ("broker unreachable at tcp://... for
    30 s"), or "" if none. Borrowed; valid until the next producer call. */
const char *zl_producer_last_error (zl_producer_t *self);

/*  Return why the broker refuses this producer: the last handshake failed
    (with CURVE: a key the broker does not know; plaintext to a CURVE broker)
    or the broker answered UNAUTHORIZED (this key's role may not submit).
    "" if neither happened since the last good handshake. Borrowed; valid
    until the next producer call. */
const char *zl_producer_refusal (zl_producer_t *self);

/*  Return the endpoint the producer connects to now (one of the list, or a
    leader's a standby named). Borrowed; valid until the next producer call. */
const char *zl_producer_endpoint (zl_producer_t *self);

/*  Copy the counters into `*stats`. */
void zl_producer_stats (zl_producer_t *self, zl_producer_stats_t *stats);

#endif
