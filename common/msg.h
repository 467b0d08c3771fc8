/*  msg: zlane's own types for every message of the wire protocol.
    The codec (codec.h) turns frames into these and back; nothing outside
    common/codec.c sees the generated protobuf types. Strings are
    NUL-terminated; payloads are (data, len). A decoded message borrows all
    its memory from the codec's arena. */
#ifndef ZL_MSG_H
#define ZL_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ZL_PROTOCOL_VERSION 1

// The limits on text fields the broker enforces (README, "Protocol").
#define ZL_MAX_NAME 128          // tenant, lane, worker, client names, header keys
#define ZL_MAX_KEY 256           // idempotency keys
#define ZL_MAX_HEADERS 64        // headers per job
#define ZL_MAX_HEADER_VALUE 4096 // bytes per header value

typedef struct {
    const uint8_t *data;
    size_t len;
} zl_bytes_t;

typedef struct {
    const char *key;
    const char *value;
} zl_header_t;

typedef enum {
    ZL_MSG_NONE = 0,
    ZL_MSG_HELLO,
    ZL_MSG_SUBMIT,
    ZL_MSG_ACCEPTED,
    ZL_MSG_REJECTED,
    ZL_MSG_CREDIT,
    ZL_MSG_READY,
    ZL_MSG_HEARTBEAT,
    ZL_MSG_EXTEND,
    ZL_MSG_ACK,
    ZL_MSG_NACK,
    ZL_MSG_DISPATCH,
    ZL_MSG_SETTLED,
    ZL_MSG_ERROR,
    ZL_MSG_DEAD_LETTER,
    ZL_MSG_DLQ_ALERT,
    ZL_MSG_ADMIN_REQUEST,
    ZL_MSG_ADMIN_REPLY,
    ZL_MSG_CANCEL, // broker -> worker
    ZL_MSG_WATCH,
    ZL_MSG_OUTCOME,    // the Envelope's `outcome` (a Watch's answer)
    ZL_MSG_JOB_DONE,   // the Envelope's `job_done` (the done.<lane>.<tenant> event)
    ZL_MSG_BATCH_DONE, // the Envelope's `batch_done` (the batch.<id> event)
    ZL_MSG_BREAKER,    // the Envelope's `breaker` (the breaker.<lane> event)
    ZL_MSG_KIND_COUNT
} zl_msg_kind_t;

/*  Return the kind's name ("submit", ...), "unknown" when out of range. */
const char *zl_msg_kind_name (zl_msg_kind_t kind);

// ------------------------------------------------------------------ producer
typedef struct {
    const char *client;
} zl_hello_t;

typedef struct {
    uint64_t seq;
    const char *tenant;
    const char *lane;
    zl_bytes_t payload;
    const char *idempotency_key; // "" when none
    uint32_t delay_ms;
    uint32_t max_attempts;
    uint32_t lease_ms;
    uint32_t max_run_ms;
    size_t n_headers;
    zl_header_t *headers;
    bool generated_key;  // the client made the key only for its own resends
    size_t n_depends_on; // parents by job id
    const uint64_t *depends_on;
    size_t n_depends_on_seq; // parents by the seq of another spec of the same Submit
    const uint64_t *depends_on_seq;
    const char *batch;         // join this batch ("" none)
    bool open_batch;           // this spec opens a batch and is its callback job
    const char *open_batch_id; // open_batch: its id ("" = the broker names it)
    bool batch_no_callback;    // open_batch: nothing runs when it settles
    bool batch_close;          // open_batch: closed at once after this Submit's jobs
    uint64_t deadline_ms;      // wall clock, 0 = none
    uint32_t max_age_ms;       // from acceptance, 0 = none
    bool has_priority;         // priority given (else ZL_PRIORITY_DEFAULT)
    uint32_t priority;         // 0 (lowest) to ZL_PRIORITY_MAX
    const char *ordering_key;  // FIFO group within (lane, tenant) ("" none)
    const char *invalid;       // decode: why a string field of this spec is bad, or NULL
} zl_job_spec_t;

#define ZL_BATCH_ID_MAX 128     // bytes of a batch id
#define ZL_PRIORITY_MAX 9       // priorities are 0 .. 9
#define ZL_PRIORITY_DEFAULT 5   // a spec that gives none
#define ZL_ORDERING_KEY_MAX 256 // bytes of an ordering key

typedef struct {
    size_t n;
    zl_job_spec_t *jobs;
    size_t n_close;
    const char **close_batches; // closed after the jobs joined
} zl_submit_t;

typedef struct {
    uint64_t seq;
    uint64_t job_id;
    bool duplicate;
    const char *batch_id; // a spec that opened a batch: its id ("" otherwise)
} zl_acceptance_t;

typedef struct {
    const char *batch_id;
    bool ok;
    const char *error; // "" when ok
} zl_batch_closed_t;

typedef struct {
    size_t n;
    zl_acceptance_t *jobs;
    size_t n_closed;
    zl_batch_closed_t *closed;
} zl_accepted_t;

typedef enum {
    ZL_REJECT_UNSPECIFIED = 0,
    ZL_REJECT_INVALID = 1,
    ZL_REJECT_PAYLOAD_TOO_LARGE = 2,
    ZL_REJECT_UNKNOWN_LANE = 3,
    ZL_REJECT_QUEUE_FULL = 4,
    ZL_REJECT_STORE_FULL = 5,
    ZL_REJECT_UNAUTHORIZED = 6,
    ZL_REJECT_SHUTTING_DOWN = 7,
    ZL_REJECT_UNAVAILABLE = 8,    // no writable database answers: retry after retry_after_ms
    ZL_REJECT_UNKNOWN_PARENT = 9, // a parent is unknown, not kept, or was rejected
    ZL_REJECT_CYCLE = 10,         // depends_on_seq makes a cycle
    ZL_REJECT_FAN_IN = 11,        // more parents than max_fan_in
    ZL_REJECT_UNKNOWN_BATCH = 12, // the batch to join is not open here, or another tenant's
    ZL_REJECT_BATCH_CLOSED = 13,  // the batch to join is closed or cancelled
    ZL_REJECT_BATCH_EXISTS = 14,  // a batch of that id exists
    ZL_REJECT_CODE_COUNT
} zl_reject_code_t;

/*  Return the code's name ("queue_full", ...). */
const char *zl_reject_code_name (zl_reject_code_t code);

typedef struct {
    uint64_t seq;
    zl_reject_code_t code;
    const char *reason;
    uint32_t retry_after_ms;
} zl_rejection_t;

typedef struct {
    size_t n;
    zl_rejection_t *jobs;
} zl_rejected_t;

typedef struct {
    uint64_t limit; // cumulative job specs this connection may have sent
} zl_credit_t;

// ------------------------------------------------------------------ worker
typedef struct {
    uint64_t job_id;
    uint64_t lease;
} zl_lease_ref_t;

typedef struct {
    const char *name;
    size_t n_lanes;
    const char **lanes;
    uint32_t capacity;
    uint64_t instance; // the worker process, across reconnects; 0 = none
    bool held_listed;  // held lists every lease the worker knows of
    size_t n_held;
    const zl_lease_ref_t *held;
    uint32_t heartbeat_ms; // the worker's heartbeat interval; 0 = unstated
} zl_ready_t;

typedef struct {
    uint32_t interval_ms; // the sender's heartbeat interval; 0 = unstated
} zl_heartbeat_t;

/*  The longest heartbeat interval the other side of a worker's connection
    may state (Ready.heartbeat_ms, Heartbeat.interval_ms): each side waits
    liveness x the longer of its own interval and the other's, and a longer
    statement counts as this one. */
#define ZL_HEARTBEAT_STATED_MAX_MS 60000u
static inline uint32_t
zl_heartbeat_stated (uint32_t interval_ms)
{
    return interval_ms < ZL_HEARTBEAT_STATED_MAX_MS ? interval_ms : ZL_HEARTBEAT_STATED_MAX_MS;
}

typedef struct {
    uint64_t job_id;
    uint64_t lease;
    uint32_t lease_ms;
    zl_bytes_t checkpoint; // empty: none (the stored one stays)
} zl_extend_item_t;

typedef struct {
    size_t n;
    zl_extend_item_t *items;
} zl_extend_t;

typedef struct {
    uint64_t job_id;
    uint64_t lease;
    uint64_t run_us;
    zl_bytes_t result; // the job's result (may be empty)
} zl_ack_item_t;

typedef struct {
    size_t n;
    zl_ack_item_t *items;
} zl_ack_t;

typedef enum {
    ZL_FAIL_UNSPECIFIED = 0, // treated as transient
    ZL_FAIL_TRANSIENT = 1,
    ZL_FAIL_THROTTLED = 2,
    ZL_FAIL_PERMANENT = 3,
    ZL_FAIL_NOT_YET = 4 // retried after its delay without spending an attempt
} zl_fail_class_t;

/*  Return "transient", "throttled" or "permanent". */
const char *zl_fail_class_name (zl_fail_class_t cls);

typedef struct {
    uint64_t job_id;
    uint64_t lease;
    zl_fail_class_t cls;
    const char *error;
    uint32_t retry_after_ms;
    uint64_t run_us;
    zl_bytes_t checkpoint; // empty: none (the stored one stays)
} zl_nack_item_t;

typedef struct {
    size_t n;
    zl_nack_item_t *items;
} zl_nack_t;

/*  A batch's progress or summary (BatchInfo). */
#define ZL_BATCH_FAILED_MAX 1000 // failed ids listed in a BatchInfo
typedef struct {
    const char *batch_id;
    bool found;
    const char *tenant;
    const char *lane;
    uint64_t job_id;
    bool callback, closed, settled, cancelled;
    uint64_t jobs, acked, dead, cancelled_jobs, pending;
    size_t n_failed;
    const uint64_t *failed;
    uint64_t failed_more;
    uint64_t opened_at_ms, closed_at_ms, settled_at_ms;
} zl_batch_info_t;

typedef struct zl_parent_result {
    uint64_t job_id;
    zl_bytes_t result;
} zl_parent_result_t;

typedef struct {
    uint64_t job_id;
    uint64_t lease;
    uint32_t attempt;
    const char *tenant;
    const char *lane;
    zl_bytes_t payload;
    size_t n_headers;
    zl_header_t *headers;
    const char *idempotency_key;
    uint32_t lease_ms;
    uint32_t max_run_ms;
    uint32_t max_attempts;
    uint64_t enqueued_at_ms;
    size_t n_parent_results; // one per parent, in depends_on order
    const struct zl_parent_result *parent_results;
    const zl_batch_info_t *batch; // a batch's callback: the batch as it settled (else NULL)
    const char *ordering_key;     // "" none
    zl_bytes_t checkpoint;        // the last one an earlier attempt saved (empty: none)
} zl_job_msg_t;

typedef struct {
    size_t n;
    zl_job_msg_t *jobs;
} zl_dispatch_t;

typedef struct {
    size_t n;
    zl_lease_ref_t *items;
} zl_settled_t;

/*  Broker -> worker: these running jobs were cancelled. */
typedef struct {
    size_t n;
    zl_lease_ref_t *items;
} zl_cancel_t;

typedef enum {
    ZL_ERR_UNSPECIFIED = 0,
    ZL_ERR_BAD_FRAME = 1,
    ZL_ERR_BAD_VERSION = 2,
    ZL_ERR_UNKNOWN_KIND = 3,
    ZL_ERR_INVALID = 4,
    ZL_ERR_UNKNOWN_JOB = 5,
    ZL_ERR_STALE_LEASE = 6,
    ZL_ERR_NOT_READY = 7,
    ZL_ERR_UNKNOWN_LANE = 8,
    ZL_ERR_UNAUTHORIZED = 9,
    ZL_ERR_NOT_FOUND = 10,
    ZL_ERR_INTERNAL = 11,
    ZL_ERR_MAX_RUN = 12,
    ZL_ERR_NOT_HOLDER = 13,
    ZL_ERR_NOT_LEADER = 14,       // a standby: go to leader_endpoints, or the next broker
    ZL_ERR_UNAVAILABLE = 15,      // no writable database answers: retry later, here or elsewhere
    ZL_ERR_RESULT_TOO_LARGE = 16, // an Ack's result is over max_result: not settled
    ZL_ERR_CANCELLED = 17,        // the job was cancelled: the Ack/Nack/Extend changed nothing
    ZL_ERR_CHECKPOINT_TOO_LARGE = 18, // a checkpoint over max_checkpoint: the item refused
    ZL_ERR_CODE_COUNT
} zl_error_code_t;

/*  Return the code's name ("stale_lease", ...). */
const char *zl_error_code_name (zl_error_code_t code);

typedef struct {
    uint64_t job_id;
    uint64_t lease;
    zl_error_code_t code;
} zl_item_error_t;

typedef struct {
    zl_error_code_t code;
    const char *message;
    uint64_t job_id;
    uint64_t lease;
    size_t n_items; // the refused items of one Ack, Nack or Extend
    zl_item_error_t *items;
    size_t n_leader_endpoints; // NOT_LEADER: where the leader is, if known
    const char **leader_endpoints;
} zl_error_t;

// ------------------------------------------------------------------ events
typedef enum {
    ZL_OUTCOME_UNSPECIFIED = 0,
    ZL_OUTCOME_ACKED = 1,
    ZL_OUTCOME_TRANSIENT = 2,
    ZL_OUTCOME_THROTTLED = 3,
    ZL_OUTCOME_PERMANENT = 4,
    ZL_OUTCOME_LEASE_EXPIRED = 5,
    ZL_OUTCOME_WORKER_DEAD = 6,
    ZL_OUTCOME_MAX_RUN = 7,
    ZL_OUTCOME_BROKER_RESTART = 8,
    ZL_OUTCOME_LEADER_CHANGE = 9,  // another broker took the lead while it ran
    ZL_OUTCOME_CANCELLED = 10,     // an operator cancelled the job while it ran
    ZL_OUTCOME_PARENT_FAILED = 11, // a parent was dead-lettered: the job never ran
    ZL_OUTCOME_NOT_YET = 12,       // the handler said "not yet"
    ZL_OUTCOME_EXPIRED = 13,       // its deadline passed
    ZL_OUTCOME_COUNT
} zl_outcome_t;

/*  Return the outcome's name ("lease_expired", ...). */
const char *zl_outcome_name (zl_outcome_t outcome);

typedef struct {
    uint32_t attempt;
    const char *worker;
    uint64_t started_at_ms;
    uint64_t ended_at_ms;
    zl_outcome_t outcome;
    const char *error;
} zl_attempt_t;

typedef struct {
    uint64_t job_id;
    const char *tenant;
    const char *lane;
    zl_bytes_t payload;
    const char *idempotency_key;
    uint64_t enqueued_at_ms;
    uint64_t dead_at_ms;
    const char *error;
    size_t n_attempts;
    zl_attempt_t *attempts;
    size_t n_headers;
    zl_header_t *headers;
    const char *ordering_key; // "" none
    bool ordering_head;       // it died at the head of its ordering key
    zl_bytes_t checkpoint;    // the last progress checkpoint (full only)
} zl_dead_letter_t;

typedef struct {
    uint64_t depth;
    uint64_t oldest_age_ms;
} zl_dlq_alert_t;

// ------------------------------------------------------------------ outcomes
typedef struct {
    size_t n;
    const uint64_t *job_ids;
} zl_watch_t;

/*  A job's outcome (Watch answer, job show, done event). */
typedef struct {
    uint64_t job_id;
    bool found;        // false: unknown, or its outcome is no longer kept
    bool final;        // acked or dead-lettered
    const char *state; // "done", "dead", "ready", "waiting", ... ("" when not found)
    zl_outcome_t outcome;
    zl_bytes_t result;
    const char *error;
    uint64_t failed_parent;
    const char *tenant;
    const char *lane;
    uint64_t finished_at_ms;
    uint32_t attempts;
    size_t n_parents; // job show: its parents (depends_on) and children, while known
    const uint64_t *parents;
    size_t n_children;
    const uint64_t *children;
} zl_job_outcome_t;

// ------------------------------------------------------------------ admin
typedef enum {
    ZL_ADMIN_NONE = 0,
    ZL_ADMIN_STATS,
    ZL_ADMIN_DLQ_LIST,
    ZL_ADMIN_DLQ_SHOW,
    ZL_ADMIN_DLQ_REDRIVE,
    ZL_ADMIN_DLQ_PURGE,
    ZL_ADMIN_PAUSE,
    ZL_ADMIN_RESUME,
    ZL_ADMIN_CANCEL,
    ZL_ADMIN_JOB_SHOW,
    ZL_ADMIN_BATCH_SHOW,
    ZL_ADMIN_SCHEDULE_ADD,
    ZL_ADMIN_SCHEDULE_LIST,
    ZL_ADMIN_SCHEDULE_REMOVE,
    ZL_ADMIN_SCHEDULE_PAUSE,
    ZL_ADMIN_SCHEDULE_RESUME,
    ZL_ADMIN_WORKERS,
    ZL_ADMIN_OP_COUNT
} zl_admin_op_t;

typedef struct {
    const char *lane;   // "" = any
    const char *tenant; // "" = any
    size_t n_ids;
    uint64_t *ids;              // none = any
    bool all;                   // required when nothing else narrows the set
    const char *error_contains; // "" = any; else the final error holds it (any case)
    uint64_t dead_from_ms;      // died at or after (wall clock); 0 = any
    uint64_t dead_to_ms;        // died before (wall clock); 0 = any
} zl_dlq_filter_t;

#define ZL_DLQ_ERROR_FILTER_MAX 256 // bytes of DlqFilter.error_contains

/*  A connected worker (WorkerInfo in the protocol). */
typedef struct {
    const char *name;
    const char *host; // the connection's peer address, "" unknown
    size_t n_lanes;
    const char **lanes;
    uint32_t capacity, in_flight;
    uint64_t last_seen_age_ms;
    uint64_t instance;
    uint32_t heartbeat_ms; // its stated heartbeat interval (capped), 0 unstated
} zl_worker_info_t;

/*  A cron schedule (Schedule in the protocol). */
typedef struct {
    const char *name;
    const char *cron;
    const char *tenant;
    const char *lane;
    zl_bytes_t payload;
    size_t n_headers;
    zl_header_t *headers;
    bool catch_up;
    uint32_t catch_up_max;
    bool paused;
    uint64_t last_tick_ms, next_tick_ms;
} zl_schedule_info_t;

typedef enum {
    ZL_GROUP_SORT_READY = 0,
    ZL_GROUP_SORT_DELAYED,
    ZL_GROUP_SORT_IN_FLIGHT,
    ZL_GROUP_SORT_DLQ,
    ZL_GROUP_SORT_OLDEST_READY,
    ZL_GROUP_SORT_SUBMITTED,
    ZL_GROUP_SORT_ACKED,
    ZL_GROUP_SORT_CAPPED,
    ZL_GROUP_SORT_THROTTLED,
    ZL_GROUP_SORT_TENANT,
    ZL_GROUP_SORT_LANE,
    ZL_GROUP_SORT_COUNT
} zl_group_sort_t;

#define ZL_GROUP_QUERY_MAX 1000 // rows one GroupQuery returns

/*  A page of lane x tenant rows (GroupQuery in the protocol). */
typedef struct {
    bool set;
    const char *lane;            // "" every lane
    const char *tenant_contains; // "" all
    zl_group_sort_t sort;
    bool ascending;
    uint32_t offset, limit; // limit 0: 50
} zl_group_query_t;

typedef struct {
    uint64_t request_id;
    zl_admin_op_t op;
    zl_dlq_filter_t filter; // list, redrive, purge
    uint32_t limit;         // list
    uint64_t after_id;      // list
    uint64_t job_id;        // dlq show, job show
    const char *lane;       // pause, resume
    size_t n_ids;           // cancel: the job ids
    const uint64_t *ids;
    const char *batch_id;          // batch show
    zl_schedule_info_t schedule;   // schedule add; its name: remove, pause, resume
    bool stats_lanes_only;         // stats: no per-tenant or lane x tenant rows
    zl_group_query_t stats_groups; // stats: a sorted page of lane x tenant rows
} zl_admin_request_t;

#define ZL_CANCEL_MAX_IDS 1000 // ids per CancelRequest

typedef enum {
    ZL_CANCEL_UNSPECIFIED = 0,
    ZL_CANCEL_CANCELLED = 1,         // cancelled by this request
    ZL_CANCEL_ALREADY_CANCELLED = 2, // cancelled before (record kept for result_retention)
    ZL_CANCEL_FINISHED = 3,          // no live job with this id: acked, purged or expired
    ZL_CANCEL_UNKNOWN = 4,           // the broker never issued this id
    ZL_CANCEL_OUTCOME_COUNT
} zl_cancel_outcome_t;

/*  Return "cancelled", "already_cancelled", "finished" or "unknown". */
const char *zl_cancel_outcome_name (zl_cancel_outcome_t outcome);

typedef struct {
    uint64_t job_id;
    zl_cancel_outcome_t outcome;
    const char *state; // the state it was cancelled in ("ready", ...), "" otherwise
    uint64_t cancelled_at_ms;
} zl_cancel_item_t;

typedef struct {
    const char *name;
    uint64_t value;
} zl_counter_t;

typedef struct {
    const char *lane;
    const char *tenant;
    uint64_t ready, delayed, in_flight, dlq;
    uint64_t oldest_ready_age_ms, oldest_dlq_age_ms;
    uint64_t submitted, acked;
    uint64_t nacked_transient, nacked_throttled, nacked_permanent;
    uint64_t lease_expired, dead_lettered;
    uint64_t run_us, throttled, capped;
    bool paused;
} zl_group_stats_t;

typedef struct {
    const char *name;
    uint64_t count, p50_us, p90_us, p99_us, max_us;
} zl_latency_t;

/*  A lane's circuit breaker (stats, the breaker.<lane> event). */
typedef struct {
    const char *lane;
    uint32_t state; // 0 closed, 1 open, 2 half_open (breaker.h)
    uint32_t failures;
    uint64_t until_ms; // open: wall clock of the half-open
    uint32_t probes_out;
    uint64_t opened;
} zl_breaker_info_t;

typedef struct {
    uint64_t uptime_ms;
    size_t n_counters;
    zl_counter_t *counters;
    size_t n_lanes;
    zl_group_stats_t *lanes;
    size_t n_tenants;
    zl_group_stats_t *tenants;
    size_t n_groups;
    zl_group_stats_t *groups;
    size_t n_latencies;
    zl_latency_t *latencies;
    uint32_t workers;
    uint32_t producers;
    const char *store_backend; // "lmdb", "postgresql"
    const char *role;          // "leader", "standby", "unreachable"
    uint64_t epoch;            // the leader lease's epoch as last seen (LMDB: 0)
    bool store_reachable;      // false while no writable database answers
    uint64_t takeovers;        // times this broker took the lead
    uint64_t fenced;           // its commits refused because another broker led
    const char *leader;        // the leader's name as last seen, "" unknown
    size_t n_breakers;
    zl_breaker_info_t *breakers;
    uint32_t tenants_known;  // distinct tenants (also with lanes only)
    uint64_t groups_matched; // with a group query: rows matched before paging
} zl_stats_t;

typedef enum {
    ZL_ADMIN_RESULT_NONE = 0,
    ZL_ADMIN_RESULT_STATS,
    ZL_ADMIN_RESULT_DLQ_LIST,
    ZL_ADMIN_RESULT_DEAD_LETTER,
    ZL_ADMIN_RESULT_COUNT,
    ZL_ADMIN_RESULT_CANCEL,
    ZL_ADMIN_RESULT_JOB,
    ZL_ADMIN_RESULT_BATCH,
    ZL_ADMIN_RESULT_SCHEDULES,
    ZL_ADMIN_RESULT_WORKERS
} zl_admin_result_t;

typedef struct {
    uint64_t request_id;
    bool ok;
    const char *error;
    zl_admin_result_t result;
    zl_stats_t stats;
    size_t n_dead_letters; // dlq list (payload, attempts omitted)
    zl_dead_letter_t *dead_letters;
    zl_dead_letter_t dead_letter; // dlq show
    uint64_t count;               // redrive, purge; cancel: jobs cancelled by it
    size_t n_cancel_items;        // cancel: one per requested id, in order
    zl_cancel_item_t *cancel_items;
    zl_job_outcome_t job;  // job show
    zl_batch_info_t batch; // batch show
    size_t n_schedules;    // schedule list, add
    zl_schedule_info_t *schedules;
    size_t n_workers; // workers
    zl_worker_info_t *workers;
} zl_admin_reply_t;

// ------------------------------------------------------------------ envelope
typedef struct {
    zl_msg_kind_t kind;
    union {
        zl_hello_t hello;
        zl_submit_t submit;
        zl_accepted_t accepted;
        zl_rejected_t rejected;
        zl_credit_t credit;
        zl_ready_t ready;
        zl_heartbeat_t heartbeat;
        zl_extend_t extend;
        zl_ack_t ack;
        zl_nack_t nack;
        zl_dispatch_t dispatch;
        zl_settled_t settled;
        zl_cancel_t cancel;
        zl_error_t error;
        zl_dead_letter_t dead_letter;
        zl_dlq_alert_t dlq_alert;
        zl_admin_request_t admin_request;
        zl_admin_reply_t admin_reply;
        zl_watch_t watch;
        zl_job_outcome_t outcome; // ZL_MSG_OUTCOME, ZL_MSG_JOB_DONE
        zl_batch_info_t batch_done;
        zl_breaker_info_t breaker;
    } u;
} zl_msg_t;

#endif
