/*  zlane_worker: the worker side of zlane as a C library.
    A worker holds one connection to the broker's backend (ZMTP spoken by
    the library itself, in its own threads: link.h), announces itself with
    Ready, receives leased jobs and runs `concurrency` of them at once: on
    its handler threads, and on the thread that called zl_worker_run, which
    runs a job it just received itself when a handler thread is idle to
    take its other work over (so the job starts without waiting for another
    thread to wake). Results are batched into Ack / Nack
    frames; leases are extended at half-life; heartbeats flow both ways and a
    silent broker is reconnected to with jittered backoff (Paranoid Pirate).
    Given several brokers (one leads, the others stand by), it connects to
    one at a time: the next of the list when that one goes silent, the
    leader a standby names when it answers NOT_LEADER (or the next).
    Settlements stay pending until the broker answers Settled and are resent
    after a reconnect with the same lease token. Every Ready carries the
    worker's instance, a random nonzero number chosen by zl_worker_new and
    kept across reconnects, so the broker can give a reconnected worker the
    leases of its old connection. A Nack's error text is sent as valid UTF-8
    (invalid bytes become U+FFFD; at most ZL_WORKER_ERROR_MAX - 1 bytes, cut
    between characters). */
#ifndef ZLANE_WORKER_H
#define ZLANE_WORKER_H

#include "curve.h"
#include "msg.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct _zl_worker_t zl_worker_t;

// ------------------------------------------------------------------ job
/*  A job as a handler sees it. Every pointer is borrowed from the worker and
    valid until the handler returns. */
typedef struct {
    uint64_t job_id;
    uint64_t lease;   // lease token: fences this attempt's Ack/Nack/Extend
    uint32_t attempt; // 1 for the first delivery
    const char *tenant;
    const char *lane;
    const uint8_t *payload;
    size_t len;
    const char *idempotency_key; // never empty when it comes from a broker
    size_t n_headers;
    const zl_header_t *headers;
    uint32_t lease_ms;   // lease granted, counted from receipt
    uint32_t max_run_ms; // 0 = unlimited
    uint32_t max_attempts;
    uint64_t enqueued_at_ms; // broker wall clock
    // workflows: one per parent, in the order the job named them (empty
    // result for a parent that returned none)
    size_t n_parent_results;
    const zl_parent_result_t *parent_results;
    // a batch's callback: the batch as it settled (counts, failed ids); else NULL
    const zl_batch_info_t *batch;
    const char *ordering_key; // its ordering key ("" none)
    // progress: the last checkpoint an earlier attempt saved
    // (zl_worker_job_checkpoint); NULL and 0 when none
    const uint8_t *checkpoint;
    size_t checkpoint_len;
} zl_worker_job_t;

/*  Why a job was cancelled; ZL_WORKER_LIVE while it is not. */
typedef enum {
    ZL_WORKER_LIVE = 0,
    ZL_WORKER_LEASE_LOST,   // the broker refused an Extend (stale lease, unknown job, not holder)
    ZL_WORKER_DISCONNECTED, // the broker connection was lost; the lease is presumed lost
    ZL_WORKER_MAX_RUN,      // max_run_ms elapsed (the worker's own timer, counted from receipt)
    ZL_WORKER_SHUTDOWN,     // the worker is stopping and the drain grace ran out
    ZL_WORKER_CANCELLED     // an operator cancelled the job: the broker sent Cancel (or
                            // refused a settlement or Extend of it CANCELLED)
} zl_worker_cancel_t;

/*  Return true once the job is cancelled: its lease is lost (or presumed
    lost), it ran out of time, or the broker cancelled it. Long handlers
    should poll this (or wait on zl_worker_job_cancel_fd) and return early;
    whatever they report is still sent, and the broker fences it (a job the
    broker cancelled ends cancelled whatever the handler reports: its Ack or
    Nack is refused CANCELLED and counted in `refused`). */
bool zl_worker_job_cancelled (const zl_worker_job_t *job);
/*  Return why the job was cancelled, ZL_WORKER_LIVE if it is not. */
zl_worker_cancel_t zl_worker_job_cancel_reason (const zl_worker_job_t *job);
/*  Return a short text for `why`: "lease lost", "max run time exceeded", ... */
const char *zl_worker_cancel_text (zl_worker_cancel_t why);
/*  Block up to `timeout_ms` (-1 = forever) until the job is cancelled.
    Returns true if it is cancelled. */
bool zl_worker_job_wait_cancelled (const zl_worker_job_t *job, int timeout_ms);
/*  Return a file descriptor that becomes readable (POLLIN) once the job is
    cancelled, for handlers that poll(2) on their own fds; made on first
    call. Borrowed: do not read or close it. -1 if no descriptor could be
    made (then poll zl_worker_job_cancelled instead). */
int zl_worker_job_cancel_fd (const zl_worker_job_t *job);

/*  Save the job's progress (README, "Progress checkpoints"): `len` bytes
    (1 to the broker's max_checkpoint, 64 KiB by default) that the worker
    sends in an Extend at once (before the job's Ack or Nack), the broker
    stores durably, and a later attempt of the job gets as job->checkpoint
    if this one does not finish. A later call replaces one not sent yet.
    Thread-safe: call it from the handler. Returns 0, or -1 with errno
    EINVAL (len 0) or ENOTCONN (a job made by zl_worker_job_new). */
int zl_worker_job_checkpoint (const zl_worker_job_t *job, const void *data, size_t len);

/*  Return a job that belongs to no worker, copied from `fields` (strings,
    payload and headers are copied), so handlers can be run and tested
    without a broker. Never NULL. Caller owns; destroy with
    zl_worker_job_destroy. */
zl_worker_job_t *zl_worker_job_new (const zl_worker_job_t *fields);
/*  Destroy a job made by zl_worker_job_new; nulls the caller's pointer. */
void zl_worker_job_destroy (zl_worker_job_t **self_p);
/*  Cancel the job for `why` (the first reason sticks) and wake everything
    waiting for it. The worker does this itself; exposed for tests. */
void zl_worker_job_cancel (const zl_worker_job_t *job, zl_worker_cancel_t why);

// ------------------------------------------------------------------ result
#define ZL_WORKER_ERROR_MAX 1024

typedef enum {
    ZL_WORKER_ACK = 0,   // done: Ack
    ZL_WORKER_TRANSIENT, // failed, retry with backoff
    ZL_WORKER_THROTTLED, // failed, retry after retry_after_ms
    ZL_WORKER_PERMANENT, // failed for good: dead-letter it
    ZL_WORKER_NOT_YET    // not yet (what it needs has not arrived): again after
                         // retry_after_ms, no attempt spent (the lane's max_not_yet bounds it)
} zl_worker_outcome_t;

/*  What a handler reports. The worker zeroes it (outcome ACK) before each
    call. `error` is sent with Nacks; NUL-terminated, truncated to fit. */
typedef struct {
    zl_worker_outcome_t outcome;
    uint32_t retry_after_ms; // THROTTLED, NOT_YET: when to retry
    char error[ZL_WORKER_ERROR_MAX];
    uint8_t *data; // ACK: the job's result (zl_worker_result_data), owned by the worker
    size_t data_len;
} zl_worker_result_t;

/*  Give the job a result, copied (replacing an earlier one): sent with
    its Ack, kept by the broker for result_retention and handed to the
    job's children. Ignored unless the outcome is ACK. The broker refuses
    a result over its max_result (64 KiB by default): the worker then
    dead-letters the job (PERMANENT Nack, "result too large"). */
void zl_worker_result_data (zl_worker_result_t *result, const void *data, size_t len);

/*  Set `result` to `outcome` with a printf-formatted error text (truncated to
    ZL_WORKER_ERROR_MAX - 1 bytes). */
void zl_worker_result_set (zl_worker_result_t *result, zl_worker_outcome_t outcome,
                           uint32_t retry_after_ms, const char *fmt, ...)
    __attribute__ ((format (printf, 4, 5)));
/*  Return "ack", "transient", "throttled" or "permanent". */
const char *zl_worker_outcome_name (zl_worker_outcome_t outcome);

/*  Runs one job and fills `result`, on a handler thread or on the thread
    that called zl_worker_run (with every signal blocked while it runs). Several
    calls run at once when concurrency > 1, so `arg` must be safe to share. */
typedef void (zl_worker_handler_fn) (const zl_worker_job_t *job, zl_worker_result_t *result,
                                     void *arg);

// ------------------------------------------------------------------ worker
typedef struct {
    const char *endpoint;     // broker backend, or several: "tcp://a:5571,tcp://b:5571"
                              // (one at a time); default "tcp://127.0.0.1:5571"
    const char *name;         // NULL = "<hostname>-<pid>"
    const char *const *lanes; // lanes served (at least one)
    size_t n_lanes;
    uint32_t concurrency;      // jobs run at once (handler threads); default 1
    uint32_t prefetch;         // jobs held beyond concurrency; default 0
    uint32_t heartbeat_ms;     // default 1000
    uint32_t liveness;         // heartbeats of broker silence before reconnecting; default 3
    uint32_t reconnect_min_ms; // first reconnect backoff; default 100
    uint32_t reconnect_max_ms; // backoff cap; default 5000
    uint32_t drain_ms;         // after zl_worker_stop, how long running jobs may finish
                               // before they are cancelled (ZL_WORKER_SHUTDOWN); default 30000
    bool extend; // extend leases at half-life; default true (false: tests of lapsed leases)
    /*  UNSAFE, default false. Ack each job before its handler runs and ignore
        the handler's result: at-most-once delivery (a crash or failure loses
        the job). Exists only for the at-most-once comparison experiment; never
        use it for real work. Jobs are acked when a handler thread takes them,
        so the local backlog stays bounded. */
    bool ack_early;
    zl_worker_handler_fn *handler;
    void *handler_arg;
    zl_curve_t curve; // CURVE keys (zl_curve_load), set on every connection; zero = plaintext.
                      // One server key for every broker of the list (they share it)
} zl_worker_opts_t;

/*  Fill `opts` with the defaults above (no lanes, no handler). */
void zl_worker_opts_defaults (zl_worker_opts_t *opts);

/*  Counters, for tests and logs. Settlements count the first time they are
    sent; `refused` counts Acks/Nacks the broker fenced (STALE_LEASE,
    UNKNOWN_JOB or NOT_HOLDER). An Extend answered MAX_RUN (the lease
    reaches the job's max run time, no further) ends that job's extensions;
    the job runs on until its own max run time. */
typedef struct {
    uint64_t received;     // jobs dispatched to us
    uint64_t acked;        // Ack items sent
    uint64_t nacked;       // Nack items sent
    uint64_t settled;      // settlements the broker confirmed
    uint64_t refused;      // settlements the broker refused
    uint64_t extends_sent; // Extend items sent
    uint64_t lease_lost;   // jobs cancelled because the broker refused an Extend
    uint64_t cancelled;    // held jobs the broker cancelled (Cancel, or a CANCELLED refusal)
    uint64_t reconnects;   // connections replaced after broker silence
    uint32_t threads_idle; // now: handler threads waiting for a job (or for the loop)
} zl_worker_stats_t;

/*  Return a new worker for `opts` (copied), or NULL if the options are
    invalid (no handler, no lanes, zero concurrency, a bad endpoint in the
    list...); the reason is logged.
    Nothing connects until zl_worker_run. */
zl_worker_t *zl_worker_new (const zl_worker_opts_t *opts);
/*  Destroy the worker (it must not be running); nulls the caller's pointer. */
void zl_worker_destroy (zl_worker_t **self_p);
/*  Run the worker in the calling thread until zl_worker_stop: connect, serve
    jobs, then drain (see zl_worker_stop). Returns 0, or -1 if it could not
    start. Call at most once per worker. */
int zl_worker_run (zl_worker_t *self);
/*  Ask a running worker to stop; safe from any thread and from a signal
    handler. The first call stops taking work (Ready with capacity 0 tells
    the broker to send nothing new, then unstarted jobs are handed back
    with a THROTTLED Nack), lets running jobs finish for up to drain_ms,
    then cancels them; a second call cancels them at once. The
    library installs no signal handlers: call this from yours (and disable
    czmq's with zsys_handler_set (NULL) if it would take SIGINT first). */
void zl_worker_stop (zl_worker_t *self);
/*  Copy the worker's counters into `stats`; safe from any thread. */
void zl_worker_stats (zl_worker_t *self, zl_worker_stats_t *stats);
/*  Return the worker's name (borrowed). */
const char *zl_worker_name (zl_worker_t *self);

#endif
