/*  counters: broker-wide event counters, one per kind of thing that can
    happen (bad input by kind included), named for stats output. */
#ifndef ZL_COUNTERS_H
#define ZL_COUNTERS_H

#define ZL_COUNTERS(X)                                                                             \
    X (FRAMES_IN, "frames_in")                                                                     \
    X (BAD_FRAME, "err_bad_frame")                                                                 \
    X (BAD_VERSION, "err_bad_version")                                                             \
    X (UNKNOWN_KIND, "err_unknown_kind")                                                           \
    X (INVALID, "err_invalid")                                                                     \
    X (PAYLOAD_TOO_LARGE, "err_payload_too_large")                                                 \
    X (UNKNOWN_LANE, "err_unknown_lane")                                                           \
    X (DEFAULT_LANE, "jobs_to_default_lane")                                                       \
    X (QUEUE_FULL, "err_queue_full")                                                               \
    X (STORE_FULL, "err_store_full")                                                               \
    X (NO_CREDIT, "err_no_credit")                                                                 \
    X (UNKNOWN_JOB, "err_unknown_job")                                                             \
    X (STALE_LEASE, "err_stale_lease")                                                             \
    X (NOT_READY, "err_not_ready")                                                                 \
    X (MAX_RUN, "err_max_run")                                                                     \
    X (NOT_HOLDER, "err_not_holder")                                                               \
    X (LATE_CANCELLED, "err_cancelled")                                                            \
    X (NOT_LEADER, "err_not_leader")                                                               \
    X (UNAVAILABLE, "err_unavailable")                                                             \
    X (UNREACHABLE, "err_peer_unreachable")                                                        \
    X (UNAUTHORIZED, "err_unauthorized")                                                           \
    X (AUTH_FAILED, "err_auth_failed")                                                             \
    X (RESULT_TOO_LARGE, "err_result_too_large")                                                   \
    X (CHECKPOINT_TOO_LARGE, "err_checkpoint_too_large")                                           \
    X (CHECKPOINTS, "checkpoints_saved")                                                           \
    X (UNKNOWN_PARENT, "err_unknown_parent")                                                       \
    X (CYCLE, "err_cycle")                                                                         \
    X (FAN_IN, "err_fan_in")                                                                       \
    X (UNKNOWN_BATCH, "err_unknown_batch")                                                         \
    X (BATCH_CLOSED, "err_batch_closed")                                                           \
    X (BATCH_EXISTS, "err_batch_exists")                                                           \
    X (BATCHES_OPENED, "batches_opened")                                                           \
    X (BATCHES_CLOSED, "batches_closed")                                                           \
    X (BATCHES_SETTLED, "batches_settled")                                                         \
    X (WATCHES, "watches")                                                                         \
    X (WATCH_REFUSED, "err_watch_refused")                                                         \
    X (OUTCOMES_SENT, "outcomes_sent")                                                             \
    X (OUTCOMES_EXPIRED, "outcomes_expired")                                                       \
    X (SUBMITTED, "jobs_submitted")                                                                \
    X (ACCEPTED, "jobs_accepted")                                                                  \
    X (DUPLICATES, "jobs_duplicate")                                                               \
    X (DISPATCHED, "jobs_dispatched")                                                              \
    X (DISPATCHED_EARLY, "jobs_dispatched_before_commit")                                          \
    X (ACKED, "jobs_acked")                                                                        \
    X (NACKED, "jobs_nacked")                                                                      \
    X (EXTENDED, "leases_extended")                                                                \
    X (DEAD_LETTERED, "jobs_dead_lettered")                                                        \
    X (REDRIVEN, "jobs_redriven")                                                                  \
    X (PURGED, "jobs_purged")                                                                      \
    X (CANCELLED, "jobs_cancelled")                                                                \
    X (CANCELS_SENT, "cancels_sent")                                                               \
    X (CANCELLED_EXPIRED, "cancelled_expired")                                                     \
    X (DLQ_EXPIRED, "dlq_expired")                                                                 \
    X (EXPIRED, "jobs_expired")                                                                    \
    X (DEAD_WORKERS, "workers_dead")                                                               \
    X (WORKERS_READY, "workers_ready")                                                             \
    X (WORKERS_RECONNECTED, "workers_reconnected")                                                 \
    X (LEASES_UNREACHED, "leases_unreached")                                                       \
    X (ADMIN_REQUESTS, "admin_requests")                                                           \
    X (ADMIN_REFUSED, "err_admin_refused")                                                         \
    X (EVENTS_PUBLISHED, "events_published")                                                       \
    X (METRICS_REQUESTS, "metrics_requests")                                                       \
    X (METRICS_REFUSED, "err_metrics_refused")                                                     \
    X (STEPDOWNS, "leader_stepdowns")                                                              \
    X (TURNS, "loop_turns")                                                                        \
    X (TURNS_COMMITTED, "loop_turns_committed")

typedef enum {
#define ZL_CTR_ENUM(id, name) ZL_CTR_##id,
    ZL_COUNTERS (ZL_CTR_ENUM)
#undef ZL_CTR_ENUM
        ZL_CTR_COUNT
} zl_counter_id_t;

#endif
