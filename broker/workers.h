/*  workers: the broker's registry of connected workers (zl_worker_conn_t,
    not to be confused with the worker library's zl_worker_t), keyed by
    routing id, with the lanes each serves, its capacity, the jobs it holds
    (linked through their leases) and its liveness. Every field of a record
    is written here, but the outbox, which belongs to replies.c. */
#ifndef ZL_WORKERS_H
#define ZL_WORKERS_H

#include "job.h"
#include "lane.h"
#include "replies.h"
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
    char *host;        // the connection's peer address at its Ready, NULL unknown
    zl_lane_t **lanes;
    uint32_t n_lanes;
    uint32_t capacity;
    uint32_t in_flight;
    int64_t last_seen_ms;   // monotonic
    uint32_t heartbeat_ms;  // from Ready: the interval it heartbeats at (capped); 0 = unstated
    zl_job_t *jobs;         // held jobs (job->lease->next list)
    zl_worker_outbox_t out; // replies.c's
} zl_worker_conn_t;

typedef struct _zl_workers_t zl_workers_t;

/*  Where a Ready is checked and answered (borrowed). */
typedef struct {
    zl_lanes_t *lanes;
    zl_replies_t *replies;
    uint64_t *counters; // workers_ready, workers_reconnected, the err_* of refusals
    zl_arena_t *turn;
    zl_sock_t sock; // where the Ready came from
    const zl_peer_t *peer;
    bool (*may_take) (void *arg, const char *lane); // the sender's key may serve `lane`
    void *may_arg;
    const char *curve_key; // with CURVE: the sender's public key (Z85), else NULL
    const char *host;      // the sender's peer address (ZMQ Peer-Address), else NULL
    // a reconnect whose Ready lists what it holds: `old` keeps the leases
    // the worker never got; this makes them ready again (and returns how many)
    size_t (*unreached) (void *arg, zl_worker_conn_t *old);
    void *unreached_arg;
} zl_ready_env_t;

/*  Return an empty registry, at a heartbeat of 1 s and liveness 3. */
zl_workers_t *zl_workers_new (void);
/*  The broker's pace: it heartbeats every `heartbeat_ms` (stated in each
    Heartbeat, the first answering a Ready served) and a worker is dead
    after `liveness` x the longer of that and the worker's stated one. */
void zl_workers_set_pace (zl_workers_t *self, uint64_t heartbeat_ms, uint32_t liveness);
/*  Send every worker the Heartbeat that states the broker's interval. */
void zl_workers_heartbeat (zl_workers_t *self, zl_replies_t *replies);
/*  Destroy the registry and its workers; nulls the caller's pointer. */
void zl_workers_destroy (zl_workers_t **self_p);
/*  Return the worker with routing id `peer`, or NULL. */
zl_worker_conn_t *zl_workers_lookup (zl_workers_t *self, const zl_peer_t *peer);
/*  Register (or re-register) the worker `peer`. Returns it (borrowed). */
zl_worker_conn_t *zl_workers_add (zl_workers_t *self, const zl_peer_t *peer, const char *name,
                                  uint64_t instance, const char *curve_key, zl_lane_t **lanes,
                                  uint32_t n_lanes, uint32_t capacity, int64_t now_ms);
/*  A Ready from `env->peer`: register (or re-register) the worker with the
    lanes it names that are declared and its key may serve, its capacity (0
    = draining: it keeps what it holds and gets nothing new) and its
    instance. A bad name or no lane is refused INVALID; refused lanes are
    answered by one Error, and with no lane left nothing is registered. The
    same worker process on a new connection (the same instance and key)
    takes over the old connection's leases and queued Settled entries, and
    the old one is forgotten; when the Ready lists the leases the worker
    holds (held_listed), the old connection's others go to env->unreached.
    Returns the worker, or NULL. */
zl_worker_conn_t *zl_workers_ready (zl_workers_t *self, const zl_ready_env_t *env,
                                    const zl_ready_t *ready, int64_t now_ms);
/*  Every connected worker as WorkerInfo (stats of an operator's request):
    an array in `arena`, its length in *count; strings borrowed. */
zl_worker_info_t *zl_workers_describe (zl_workers_t *self, zl_arena_t *arena, int64_t now_ms,
                                       size_t *count);
/*  Forget `worker` (its held jobs must have been released). */
void zl_workers_remove (zl_workers_t *self, zl_worker_conn_t *worker);
/*  Return another worker than `except` registered with `instance` (nonzero)
    and the same CURVE key (both NULL without CURVE), or NULL. */
zl_worker_conn_t *zl_workers_find_instance (zl_workers_t *self, uint64_t instance,
                                            const char *curve_key, const zl_worker_conn_t *except);
/*  Move every job `from` holds to `to` (the same worker process on a new
    connection); `from` is left holding nothing, to be removed. */
void zl_worker_conn_adopt (zl_worker_conn_t *to, zl_worker_conn_t *from);
/*  Move to `to` the jobs `from` holds under one of the `n` leases in `held`
    (sorted in place); `from` keeps the rest. Returns how many moved. */
uint32_t zl_worker_conn_adopt_held (zl_worker_conn_t *to, zl_worker_conn_t *from,
                                    zl_lease_ref_t *held, size_t n);
/*  Link `job` (which has its lease) into the worker's held list and count it
    in flight. */
void zl_worker_conn_hold (zl_worker_conn_t *worker, zl_job_t *job);
/*  Unlink `job` from its worker. */
void zl_worker_conn_release (zl_worker_conn_t *worker, zl_job_t *job);
/*  The worker was heard from at `now_ms`. */
void zl_worker_conn_seen (zl_worker_conn_t *worker, int64_t now_ms);
/*  A worker silent at `now_ms` for longer than liveness x the longer of the
    broker's heartbeat and its own stated one (zl_workers_set_pace), or
    NULL; that limit in *limit_ms. */
zl_worker_conn_t *zl_workers_silent (zl_workers_t *self, int64_t now_ms, int64_t *limit_ms);
/*  Return the workers as an array (borrowed) and their count. */
zl_worker_conn_t **zl_workers_all (zl_workers_t *self, size_t *count);
/*  Number of workers. */
size_t zl_workers_count (zl_workers_t *self);

#endif
