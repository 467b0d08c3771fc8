/*  pending: the producer's jobs that have no delivered result yet, by seq.
    Sequence numbers are dense and increasing, so the table is a ring indexed
    by seq: insert, lookup and remove are O(1) without hashing. Each job is one
    allocation holding its record and copies of all its bytes. Internal to the
    producer library. */
#ifndef ZL_PENDING_H
#define ZL_PENDING_H

#include "zlane_producer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    ZL_PENDING_QUEUED = 0, // waiting in the send queue for credit or a connection
    ZL_PENDING_INFLIGHT,   // sent on the current connection, no reply yet
    ZL_PENDING_RETRY,      // rejected as retryable; waits for its retry time
    ZL_PENDING_DONE        // final result known, not yet delivered
} zl_pending_state_t;

/*  Why a job is in the send queue; counted when it goes on the wire. */
typedef enum {
    ZL_PENDING_NEW = 0,
    ZL_PENDING_RESEND, // the connection it was sent on is gone
    ZL_PENDING_RETRIED // a retryable rejection's delay passed
} zl_pending_cause_t;

typedef struct _zl_pending_job_t zl_pending_job_t;
struct _zl_pending_job_t {
    zl_job_spec_t spec; // what goes on the wire; strings point into this block
    zl_pending_state_t state;
    zl_pending_cause_t cause;
    bool auto_key;        // the library generated the idempotency key
    uint32_t sends;       // times put on the wire
    int64_t submitted_ms; // monotonic clock, when submit was called
    int64_t deadline_ms;  // monotonic clock
    // The result (DONE); code and reason also keep the last retryable rejection.
    zl_producer_status_t status;
    uint64_t job_id;
    bool duplicate;
    zl_reject_code_t code;
    char *reason;                // owned; NULL = ""
    char *batch_id;              // owned: the batch it opened (accepted); NULL = none
    zl_pending_job_t *next_done; // link in the producer's delivery list
    uint32_t group;              // the first job of a workflow batch: jobs in it (sent together)
    zl_header_t headers[];       // spec.headers; then the copied bytes
};

typedef struct _zl_pending_t zl_pending_t;

/*  Return a new job record with deep copies of `job`'s fields and sequence
    number `seq`; its parents_in_batch become depends_on_seq, seqs counted
    from `batch_seq` (the seq of the batch's first job). `key` replaces an empty
   job->idempotency_key (auto_key is then set). Caller owns. */
zl_pending_job_t *zl_pending_job_new (const zl_producer_job_t *job, uint64_t seq, const char *key,
                                      uint64_t batch_seq);

/*  Destroy the record; nulls the caller's pointer; NULL-safe. */
void zl_pending_job_destroy (zl_pending_job_t **self_p);

/*  Replace the record's reason with a copy of `reason` (NULL = none). */
void zl_pending_job_set_reason (zl_pending_job_t *self, const char *reason);

/*  Return a new empty table. */
zl_pending_t *zl_pending_new (void);

/*  Destroy the table and every job still in it; nulls the caller's pointer. */
void zl_pending_destroy (zl_pending_t **self_p);

/*  Take ownership of `job`. Its seq must be at least zl_pending_end (the
    table only grows upwards). */
void zl_pending_insert (zl_pending_t *self, zl_pending_job_t *job);

/*  Return the job with sequence number `seq` (borrowed), or NULL. Any seq is
    safe to ask for, including ones read from the network. */
zl_pending_job_t *zl_pending_get (zl_pending_t *self, uint64_t seq);

/*  Remove the job with `seq` and return it (caller owns), or NULL. */
zl_pending_job_t *zl_pending_remove (zl_pending_t *self, uint64_t seq);

/*  Return the number of jobs held. */
size_t zl_pending_size (zl_pending_t *self);

/*  Return the lowest seq that may be held. */
uint64_t zl_pending_first (zl_pending_t *self);

/*  Return one past the highest seq ever inserted. */
uint64_t zl_pending_end (zl_pending_t *self);

#endif
