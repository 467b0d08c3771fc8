/*  job: the broker's in-memory job record, kept small (about 100 bytes):
    the payload, headers and attempt history live only in the store.
    A job knows its state, its deadline and the worker holding it. Every
    change of state goes through jobs.c (the state machine); other modules
    only read these fields or link the job into their own structures. */
#ifndef ZL_JOB_H
#define ZL_JOB_H

#include "msg.h"

#include <stdint.h>

typedef enum {
    ZL_JOB_READY = 1,    // waiting in its flow's FIFO for a worker
    ZL_JOB_DELAYED,      // waiting for due_ms (delay, retry backoff, throttle)
    ZL_JOB_LEASED,       // held by a worker until due_ms (lease or max run)
    ZL_JOB_DEAD,         // parked in the dead-letter queue
    ZL_JOB_DONE,         // acked, its outcome kept for result_retention
    ZL_JOB_WAITING,      // waiting for its parents to be acked (deps.h)
    ZL_JOB_CANCELLED = 7 // cancelled: kept, inert, until result_retention ends
} zl_job_state_t;

// zl_job_t.flags
#define ZL_JOBF_DEPS 1         // it has a node in the dependency graph (parents or children)
#define ZL_JOBF_KEEP 2         // keep its outcome when it finishes (someone watches it)
#define ZL_JOBF_BATCH 4        // a member of a batch (batches.h)
#define ZL_JOBF_BATCH_REC 8    // a batch's record job, and its callback
#define ZL_JOBF_ORDER 16       // in an ordering key's group (ordering.h)
#define ZL_JOBF_HELD 32        // ... held behind the job whose turn it is (WAITING)
#define ZL_JOBF_ORDER_DIED 64  // DEAD: it died at the head of its ordering key
#define ZL_JOBF_CHECKPOINT 128 // its state record holds a progress checkpoint

/*  Return "ready", "delayed", "leased", "dead", "done", "waiting" or "cancelled". */
const char *zl_job_state_name (zl_job_state_t state);

struct zl_flow;

struct zl_lease; // lease.h: what only a leased job needs

/*  80 bytes. Fields that no state uses at the same time share storage. */
typedef struct zl_job {
    uint64_t id;
    struct zl_job *next;  // READY: flow FIFO link; DEAD: next in the DLQ; DONE: next kept;
                          // CANCELLED: next in the order they were cancelled
    struct zl_flow *flow; // lane x tenant this job belongs to
    uint64_t seq;         // order it last became ready (FIFO key), died (DLQ) or was cancelled
    union {
        int64_t due_ms;          // DELAYED, LEASED: monotonic deadline
        int64_t ready_ms;        // READY: monotonic time it became ready (oldest age)
        int64_t dead_at_ms;      // DEAD: wall clock; DONE: when it was acked (wall clock)
        int64_t cancelled_at_ms; // CANCELLED: wall clock
    };
    int64_t accepted_us; // monotonic time of acceptance (latency stats)
    union {
        struct zl_lease *lease;  // LEASED (lease.h), allocated at lease, freed at settle
        struct zl_job *dlq_prev; // DEAD: previous in the DLQ
        struct zl_job *prev;     // READY: previous in the flow FIFO (scheduler.c)
    };
    uint32_t timer_idx;         // position in the timer heap, UINT32_MAX if none
    uint32_t est_us;            // cost charged at dispatch (fair queuing)
    uint32_t lease_ms;          // resolved at accept (spec or lane default)
    uint32_t max_run_ms;        // resolved at accept, 0 = unlimited
    uint16_t attempt;           // attempts started so far
    uint16_t max_attempts;      // resolved at accept
    uint8_t state;              // zl_job_state_t
    uint8_t has_history : 1;    // the store holds attempt history for it
    uint8_t after_commit : 1;   // never sent before a commit (replies.c's s_early): the
                                //   broker made it and would make it again after a crash
                                //   (a schedule's tick, schedules.c)
    uint8_t priority : 4;       // 0-9: its order within its flow (scheduler.h), and its
                                //   record's tree in the store (store.h)
    uint8_t cancelled_from : 4; // CANCELLED (never ready again): the state it was cancelled in
    uint8_t flags;              // ZL_JOBF_*
} zl_job_t;
_Static_assert(sizeof (zl_job_t) == 80, "a queued job's 80 bytes (README, design notes)");

#endif
