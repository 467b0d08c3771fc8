/*  job: the broker's in-memory job record.
    A job knows its state, its deadline and the worker holding it. Every
    change of state goes through jobs.c (the state machine); other modules
    only read these fields or link the job into their own structures. */
#ifndef ZL_JOB_H
#define ZL_JOB_H

#include "msg.h"

#include <stdint.h>

typedef enum {
    ZL_JOB_READY = 1,  // waiting in its flow's FIFO for a worker
    ZL_JOB_DELAYED,    // waiting for due_ms (delay, retry backoff, throttle)
    ZL_JOB_LEASED,     // held by a worker until due_ms (lease or max run)
    ZL_JOB_DEAD        // parked in the dead-letter queue
} zl_job_state_t;

/*  Return "ready", "delayed", "leased" or "dead". */
const char *zl_job_state_name (zl_job_state_t state);

typedef struct zl_attempt_rec {
    uint32_t attempt;
    zl_outcome_t outcome;
    int64_t started_at_ms;  // wall clock
    int64_t ended_at_ms;
    char *worker;
    char *error;
} zl_attempt_rec_t;

struct zl_worker;
struct zl_flow;

typedef struct zl_job {
    uint64_t id;
    struct zl_job *next;  // flow FIFO link
    uint64_t seq;         // order in which it last became ready (FIFO key)
    uint64_t est_us;      // cost charged at dispatch (fair queuing)
    struct zl_flow *flow; // lane x tenant this job belongs to
    zl_job_state_t state;
    uint32_t attempt;       // attempts started so far
    uint32_t max_attempts;  // resolved at accept (spec or lane default)
    uint32_t lease_ms;      // resolved at accept
    uint32_t max_run_ms;    // resolved at accept, 0 = unlimited
    uint32_t timer_idx;     // position in the timer heap, UINT32_MAX if none
    int64_t due_ms;         // monotonic deadline while DELAYED or LEASED
    int64_t ready_ms;       // monotonic time it last became ready (oldest age)
    int64_t accepted_us;    // monotonic time of acceptance (latency stats)
    int64_t enqueued_at_ms; // wall clock of first acceptance
    int64_t dead_at_ms;     // wall clock of dead-lettering
    // payload and metadata, owned
    uint8_t *payload;
    uint32_t payload_len;
    char *idempotency_key;  // NULL when the producer gave none
    uint32_t n_headers;
    zl_header_t *headers;   // keys and values owned
    // lease, while LEASED
    uint64_t lease;          // current lease token, 0 when not leased
    int64_t lease_deadline_ms;  // monotonic
    int64_t run_deadline_ms;    // monotonic, 0 = none
    int64_t started_at_ms;      // wall clock of this attempt's start
    int64_t started_us;         // monotonic, for run time
    struct zl_worker *worker;
    struct zl_job *wprev, *wnext;  // the worker's list of held jobs
    // history of finished attempts
    uint32_t n_history;
    zl_attempt_rec_t *history;
} zl_job_t;

#endif
