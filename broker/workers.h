/*  workers: the broker's registry of connected workers (zl_worker_conn_t, not to
    be confused with the worker library's zl_worker_t), keyed by routing id, with
    the lanes each serves, its capacity, the jobs it holds and its liveness. */
#ifndef ZL_WORKERS_H
#define ZL_WORKERS_H

#include "job.h"
#include "lane.h"
#include "wire.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct zl_worker_conn {
    zl_peer_t peer;
    char key[2 * ZL_PEER_ID_MAX + 1]; // hex of the routing id
    char *name;
    uint64_t instance; // from Ready: the worker process across reconnects; 0 = none
    char *curve_key;   // with CURVE: the client's public key (Z85), else NULL
    zl_lane_t **lanes;
    uint32_t n_lanes;
    uint32_t capacity;
    uint32_t in_flight;
    int64_t last_seen_ms; // monotonic
    zl_job_t *jobs;       // held jobs (job->lease->next list)
    // per-turn outbox
    zl_job_t **out_jobs;
    uint32_t n_out, cap_out;
    zl_lease_ref_t *out_settled;
    uint32_t n_settled, cap_settled;
    struct zl_worker_conn *next_dirty;
} zl_worker_conn_t;

typedef struct _zl_workers_t zl_workers_t;

/*  Return an empty registry. */
zl_workers_t *zl_workers_new (void);
/*  Destroy the registry and its workers; nulls the caller's pointer. */
void zl_workers_destroy (zl_workers_t **self_p);
/*  Return the worker with routing id `peer`, or NULL. */
zl_worker_conn_t *zl_workers_lookup (zl_workers_t *self, const zl_peer_t *peer);
/*  Register (or re-register) the worker `peer`. Returns it (borrowed). */
zl_worker_conn_t *zl_workers_add (zl_workers_t *self, const zl_peer_t *peer, const char *name,
                                  uint64_t instance, const char *curve_key, zl_lane_t **lanes,
                                  uint32_t n_lanes, uint32_t capacity, int64_t now_ms);
/*  Forget `worker` (its held jobs must have been released). */
void zl_workers_remove (zl_workers_t *self, zl_worker_conn_t *worker);
/*  Return another worker than `except` registered with `instance` (nonzero)
    and the same CURVE key (both NULL without CURVE), or NULL. */
zl_worker_conn_t *zl_workers_find_instance (zl_workers_t *self, uint64_t instance,
                                            const char *curve_key, const zl_worker_conn_t *except);
/*  Move every job `from` holds, and its queued Settled entries, to `to`
    (the same worker process on a new connection); `from` is left holding
    nothing, to be removed. */
void zl_worker_conn_adopt (zl_worker_conn_t *to, zl_worker_conn_t *from);
/*  Link `job` (which has its lease) into the worker's held list and count it
    in flight. */
void zl_worker_conn_hold (zl_worker_conn_t *worker, zl_job_t *job);
/*  Unlink `job` from its worker. */
void zl_worker_conn_release (zl_worker_conn_t *worker, zl_job_t *job);
/*  Queue `job` for this turn's Dispatch to the worker. */
void zl_worker_conn_queue_job (zl_worker_conn_t *worker, zl_job_t *job);
/*  Queue a Settled entry for this turn. */
void zl_worker_conn_queue_settled (zl_worker_conn_t *worker, uint64_t job_id, uint64_t lease);
/*  Return the workers as an array (borrowed) and their count. */
zl_worker_conn_t **zl_workers_all (zl_workers_t *self, size_t *count);
/*  Return the workers with something queued this turn, linked by next_dirty. */
zl_worker_conn_t *zl_workers_take_dirty (zl_workers_t *self);
/*  Number of workers. */
size_t zl_workers_count (zl_workers_t *self);

#endif
