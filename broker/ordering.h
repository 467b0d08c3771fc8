/*  ordering (zl_ordering_t): FIFO groups. Jobs of one flow (lane x tenant)
    that carry the same ordering key run one at a time, in the order they
    joined: a group has at most one job whose turn it is (its head: ready,
    delayed, running or being retried) and a FIFO of held jobs behind it.
    The job state machine (jobs.c) asks it who may go and is told when a
    head's turn ends (acked, dead-lettered, cancelled, expired); then the
    next held job becomes the head and the caller releases it.

    A group is found by a keyed 64-bit hash of (flow, key): the key's text
    stays in the store. Two keys of one flow whose hashes collide share a
    group, which only orders them more strictly than asked (and nobody
    outside can aim for it: the hash key is random). A group costs one map
    entry and a small cell while it has jobs, and nothing once it has none,
    so a million distinct keys cost what a million jobs do.

    Held jobs are linked through their `next`/`prev` fields (free in their
    state, WAITING). Jobs of a group are marked ZL_JOBF_ORDER; held ones also
    ZL_JOBF_HELD. */
#ifndef ZL_ORDERING_H
#define ZL_ORDERING_H

#include "job.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct _zl_ordering_t zl_ordering_t;

/*  Return an empty table with a random hash key. */
zl_ordering_t *zl_ordering_new (void);
/*  Destroy it (not the jobs); nulls the caller's pointer. */
void zl_ordering_destroy (zl_ordering_t **self_p);
/*  The group of `key` (non-empty) in `flow`. */
uint64_t zl_ordering_group (zl_ordering_t *self, const struct zl_flow *flow, const char *key);
/*  `job` joins the group at its tail with place `seq` (order among its
    group's jobs: its id, or a later value for a job that joins again).
    Returns true if it is the group's head (it may go now; marked ORDER), or
    false if it is held behind another (marked ORDER | HELD, linked). */
bool zl_ordering_join (zl_ordering_t *self, zl_job_t *job, uint64_t group, uint64_t seq);
/*  `job` leaves its group: a held one is unlinked (NULL returned); the head
    ends its turn and the next held job, if any, becomes the head (unmarked
    HELD, unlinked) and is returned for the caller to release. Clears the
    job's ORDER and HELD marks. Returns NULL too for a job in no group. */
zl_job_t *zl_ordering_leave (zl_ordering_t *self, zl_job_t *job);
/*  The place a job that joined again was given (0: none, its id). */
uint64_t zl_ordering_seq (zl_ordering_t *self, uint64_t job_id);
/*  Groups with jobs, and jobs held in them (gauges). */
size_t zl_ordering_groups (zl_ordering_t *self);
uint64_t zl_ordering_held (zl_ordering_t *self);

#endif
