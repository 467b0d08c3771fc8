/*  config: everything the broker can be told, from defaults, a czmq zconfig
    file and command-line flags (in that order; later wins). */
#ifndef ZL_BROKER_CONFIG_H
#define ZL_BROKER_CONFIG_H

#include "sched_policy.h" // zl_sched_policy_t (not scheduler.h: its lane.h includes this file)
#include "store.h"        // zl_durability_t

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*  A cron schedule the config declares (schedules/NAME/cron, lane, tenant,
    payload, missed = skip | catch_up | catch_up:N). */
typedef struct {
    char *name, *cron, *lane, *tenant, *payload;
    bool catch_up;
    uint32_t catch_up_max;
} zl_schedule_config_t;

typedef struct {
    char *name;
    uint32_t weight;       // share of workers serving several lanes
    uint64_t lease_ms;     // default lease per dispatch
    uint32_t max_attempts; // attempts before the DLQ
    uint64_t backoff_base_ms;
    uint64_t backoff_cap_ms;
    bool jitter;                   // full jitter on (default) or off (experiments)
    uint64_t max_run_ms;           // 0 = unlimited
    uint64_t max_depth;            // queued jobs in this lane, 0 = unlimited
    uint32_t max_in_flight;        // jobs of this lane leased at once, 0 = unlimited
    uint32_t tenant_max_in_flight; // per tenant in this lane, 0 = unlimited
    double rate;                   // jobs/s dispatched, 0 = unlimited
    double burst;
    bool keep_outcomes;   // keep every job's outcome (result_retention), not only where needed
    bool publish_done;    // publish done.<lane>.<tenant> (JobOutcome) on the events socket
    uint32_t max_not_yet; // NOT_YET nacks a job may get before it is dead-lettered
    uint64_t max_age_ms;  // a job's deadline from acceptance, 0 = none
    // circuit breaker (breaker.h): opens after breaker_failures transient
    // failures within breaker_window (0 = no breaker), stays open for
    // breaker_cooldown, then lets breaker_probes jobs try
    uint32_t breaker_failures;
    uint64_t breaker_window_ms;
    uint64_t breaker_cooldown_ms;
    uint32_t breaker_probes;
    uint32_t set_mask; // keys this lane set itself (defaults do not override them)
} zl_lane_config_t;

typedef struct {
    char *name;
    uint32_t weight;
    uint32_t max_in_flight; // over all lanes, 0 = unlimited
    uint64_t max_depth;     // 0 = unlimited
    double rate;            // jobs/s dispatched over all lanes, 0 = unlimited
    double burst;
} zl_tenant_config_t;

typedef struct {
    char *frontend, *backend, *events, *admin;
    char *metrics;    // HTTP endpoint of the Prometheus page, NULL = none
    char *ports_file; // written after bind: the real endpoints
    char *wire_dump;  // debugging: every frame the broker sends is appended here
    char *data_dir;   // the LMDB store's directory (data)
    char *store;      // the store's location (store): a directory or a database; NULL = data_dir
    zl_durability_t durability;
    bool dispatch_after_commit; // hold every Dispatch until its lease is committed (see broker.c)
    bool commit_on_loop;        // LMDB, fsync: commit on the loop's thread, not the store's own
    // LMDB, fsync, its thread: a steady stream's commits this far apart; where
    // the loop commits, how long a turn that only settled jobs may leave its
    // batch open after the last commit (batch_hold.h)
    uint64_t commit_interval_ms;
    uint64_t map_size; // the store's size limit
    zl_sched_policy_t scheduler;
    uint64_t wfq_quantum_us; // see zl_sched_set_quantum
    uint64_t max_payload;
    uint64_t heartbeat_ms;
    uint32_t liveness;
    uint64_t max_depth;        // all queued jobs
    uint64_t max_tenants;      // distinct tenants the broker keeps (memory bound)
    uint64_t max_lanes;        // with auto_lanes: lanes it may create
    uint64_t producer_window;  // credit a producer may hold at once
    uint64_t producer_idle_ms; // a producer silent this long is forgotten
    uint64_t dlq_alert_ms;
    uint64_t dlq_retention_ms;    // dead letters older than this are purged, 0 = kept
    uint64_t dedup_window_ms;     // users' idempotency keys are kept this long
    uint64_t resend_window_ms;    // keys a client library made for its own resends, this long
    uint64_t dedup_max_keys;      // most keys kept (oldest-in-window go first); 0 = from map_size
    uint64_t max_result;          // bytes of a job's result an Ack may carry
    uint64_t max_checkpoint;      // bytes of a progress checkpoint an Extend or Nack may carry
    uint64_t result_retention_ms; // finished jobs kept (outcomes, cancelled records) this long
    uint64_t max_fan_in;          // most parents a job may have
    bool auto_lanes;              // undeclared lanes are created on first use
    char *default_lane;           // jobs for undeclared lanes go here (NULL = reject)
    bool curve;                   // CURVE encryption and ZAP authentication on every socket
    char *cert;                   // the broker's secret certificate file (zcert format)
    char *clients;                // directory of allowed client public certificates
    bool insecure;                // allow non-loopback endpoints without CURVE
    uint64_t leader_lease_ms;     // brokers sharing a store: the leader's lease (takeover time)
    char *advertise; // the host clients reach this broker at (NULL: the bind address, or
                     // gethostname when that is a wildcard): NOT_LEADER names it
    int verbose;
    zl_lane_config_t lane_defaults; // template for lanes that do not say
    zl_lane_config_t *lanes;
    size_t n_lanes;
    zl_tenant_config_t tenant_defaults;
    zl_tenant_config_t *tenants;
    size_t n_tenants;
    zl_schedule_config_t *schedules; // schedules/NAME/...: upserted when the broker leads
    size_t n_schedules;
    uint64_t given; // broker keys set by a file or a flag, a bit per key (not the defaults)
} zl_broker_config_t;

/*  Fill `cfg` with the defaults (no lanes declared). */
void zl_broker_config_defaults (zl_broker_config_t *cfg);
/*  Read a zconfig file into `cfg`. Returns 0, or -1 with a reason in `err`. */
int zl_broker_config_load (zl_broker_config_t *cfg, const char *path, char *err, size_t errlen);
/*  Return the lane named `name`, adding it (from lane_defaults) if absent. */
zl_lane_config_t *zl_broker_config_lane (zl_broker_config_t *cfg, const char *name);
/*  Return the tenant named `name`, adding it (from tenant_defaults) if absent. */
zl_tenant_config_t *zl_broker_config_tenant (zl_broker_config_t *cfg, const char *name);
/*  Set one key of the "broker" section or of a lane/tenant from text, as the
    file would. Returns 0, or -1 with a reason in `err`. */
int zl_broker_config_set (zl_broker_config_t *cfg, const char *key, const char *value, char *err,
                          size_t errlen);
/*  Where the store is, for zl_store_open: `store` when it is set, else the
    data directory (LMDB). NULL with a reason when both `data` and `store`
    were set (by a file or a flag): one store, named once. */
const char *zl_broker_config_store (const zl_broker_config_t *cfg, char *err, size_t errlen);
/*  Bytes an idempotency key takes in the store at most, as measured
    (bench/RESULTS.md, "Idempotency keys": 76 for keys made in sequence, 131
    for random ones), rounded up: sizes the default dedup_max_keys. */
#define ZL_DEDUP_KEY_COST 140
/*  The bound on idempotency keys: dedup_max_keys, or when it is 0 as many as
    fill a quarter of map_size at ZL_DEDUP_KEY_COST (7.7 million for the
    default 4 GiB). */
uint64_t zl_broker_config_dedup_max_keys (const zl_broker_config_t *cfg);
/*  Free everything `cfg` holds. */
void zl_broker_config_free (zl_broker_config_t *cfg);

#endif
