#include "config.h"

#include "wire.h"
#include "zl_alloc.h"

#include <czmq.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void
zl_broker_config_defaults (zl_broker_config_t *cfg)
{
    memset (cfg, 0, sizeof *cfg);
    cfg->frontend = zl_strdup ("tcp://127.0.0.1:5570");
    cfg->backend = zl_strdup ("tcp://127.0.0.1:5571");
    cfg->events = zl_strdup ("tcp://127.0.0.1:5572");
    cfg->admin = zl_strdup ("tcp://127.0.0.1:5573");
    cfg->data_dir = zl_strdup ("./zlane-data");
    cfg->durability = ZL_DURABILITY_FSYNC;
    cfg->map_size = 4ULL << 30;
    cfg->commit_interval_ms = 5;
    cfg->scheduler = ZL_SCHED_WFQ;
    cfg->wfq_quantum_us = ZL_SCHED_QUANTUM_US;
    cfg->max_payload = 1024 * 1024;
    cfg->heartbeat_ms = 1000;
    cfg->liveness = 3;
    cfg->max_depth = 10 * 1000 * 1000;
    cfg->max_tenants = 100 * 1000;
    cfg->max_lanes = 1000;
    cfg->producer_window = 20000;
    cfg->producer_idle_ms = 5 * 60 * 1000;
    cfg->dlq_alert_ms = 10000;
    cfg->result_retention_ms = 24 * 3600 * 1000ULL;
    cfg->dedup_window_ms = 24ULL * 3600 * 1000;
    // longer than any deadline producers give their jobs (the library's
    // default is 30 s): the library never resends a job after its deadline
    cfg->resend_window_ms = 10ULL * 60 * 1000;
    cfg->dedup_max_keys = 0; // auto: zl_broker_config_dedup_max_keys
    cfg->max_result = 64 * 1024;
    cfg->max_checkpoint = 64 * 1024;
    cfg->max_fan_in = 1000;
    cfg->leader_lease_ms = 2000;
    cfg->lane_defaults = (zl_lane_config_t){.weight = 1,
                                            .lease_ms = 30000,
                                            .max_attempts = 5,
                                            .backoff_base_ms = 1000,
                                            .backoff_cap_ms = 300000,
                                            .jitter = true,
                                            .max_not_yet = 100,
                                            .breaker_window_ms = 30000,
                                            .breaker_cooldown_ms = 30000,
                                            .breaker_probes = 1};
    cfg->tenant_defaults = (zl_tenant_config_t){.weight = 1};
}

zl_lane_config_t *
zl_broker_config_lane (zl_broker_config_t *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->n_lanes; i++)
        if (strcmp (cfg->lanes[i].name, name) == 0)
            return &cfg->lanes[i];
    cfg->lanes = zl_realloc (cfg->lanes, (cfg->n_lanes + 1) * sizeof *cfg->lanes);
    zl_lane_config_t *lane = &cfg->lanes[cfg->n_lanes++];
    *lane = cfg->lane_defaults;
    lane->set_mask = 0;
    lane->name = zl_strdup (name);
    return lane;
}

zl_tenant_config_t *
zl_broker_config_tenant (zl_broker_config_t *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->n_tenants; i++)
        if (strcmp (cfg->tenants[i].name, name) == 0)
            return &cfg->tenants[i];
    cfg->tenants = zl_realloc (cfg->tenants, (cfg->n_tenants + 1) * sizeof *cfg->tenants);
    zl_tenant_config_t *t = &cfg->tenants[cfg->n_tenants++];
    *t = cfg->tenant_defaults;
    t->name = zl_strdup (name);
    return t;
}

#define ERR(...)                                                                                   \
    do {                                                                                           \
        snprintf (err, errlen, __VA_ARGS__);                                                       \
        return -1;                                                                                 \
    } while (0)

/*  The keys of a section, as data: a key's name, the parser of its text, the
    field the value goes to, and for integers the bounds it must keep. A
    parser checks the text and the bounds before it writes: a value it
    refuses leaves the field as it was. */
typedef struct s_key s_key_t;
typedef int (s_parse_fn) (const s_key_t *key, const char *value, void *field, char *err,
                          size_t errlen);
struct s_key {
    const char *name;
    s_parse_fn *parse;
    size_t offset;      // of the field in its struct
    uint64_t min, max;  // integers: with `bounds` set, the value must be in [min, max],
    const char *bounds; // and this is the message when it is not
};

typedef struct {
    const char *what; // the section's kind, for "unknown <what> key"
    const s_key_t *keys;
    size_t n_keys;
} s_keyset_t;

static int
s_in_bounds (const s_key_t *k, uint64_t v, char *err, size_t errlen)
{
    if (k->bounds && (v < k->min || v > k->max))
        ERR ("%s", k->bounds);
    return 0;
}

static int
s_dur (const s_key_t *k, const char *value, void *field, char *err, size_t errlen)
{
    uint64_t v;
    if (zl_parse_duration_ms (value, &v) != 0)
        ERR ("%s: '%s' is not a duration (e.g. 250ms, 30s, 5m)", k->name, value);
    if (s_in_bounds (k, v, err, errlen) != 0)
        return -1;
    *(uint64_t *)field = v;
    return 0;
}

static int
s_num (const s_key_t *k, const char *value, void *field, char *err, size_t errlen)
{
    uint64_t v;
    if (zl_parse_size (value, &v) != 0)
        ERR ("%s: '%s' is not a number", k->name, value);
    if (s_in_bounds (k, v, err, errlen) != 0)
        return -1;
    *(uint64_t *)field = v;
    return 0;
}

static int
s_u32 (const s_key_t *k, const char *value, void *field, char *err, size_t errlen)
{
    uint64_t v;
    if (zl_parse_size (value, &v) != 0)
        ERR ("%s: '%s' is not a number", k->name, value);
    if (v > UINT32_MAX)
        ERR ("%s: %s is too large", k->name, value);
    if (s_in_bounds (k, v, err, errlen) != 0)
        return -1;
    *(uint32_t *)field = (uint32_t)v;
    return 0;
}

static int
s_real (const s_key_t *k, const char *value, void *field, char *err, size_t errlen)
{
    char *end;
    double v = strtod (value, &end);
    if (end == value || *end || v < 0)
        ERR ("%s: '%s' is not a non-negative number", k->name, value);
    *(double *)field = v;
    return 0;
}

static int
s_bool (const s_key_t *k, const char *value, void *field, char *err, size_t errlen)
{
    bool *out = field;
    if (!strcmp (value, "1") || !strcmp (value, "true") || !strcmp (value, "yes") ||
        !strcmp (value, "on"))
        *out = true;
    else if (!strcmp (value, "0") || !strcmp (value, "false") || !strcmp (value, "no") ||
             !strcmp (value, "off"))
        *out = false;
    else
        ERR ("%s: '%s' is not a boolean (true/false)", k->name, value);
    return 0;
}

static int
s_str (const s_key_t *k, const char *value, void *field, char *err, size_t errlen)
{
    char **slot = field;
    free (*slot);
    *slot = zl_strdup (value);
    return 0;
}

static int
s_durability (const s_key_t *k, const char *value, void *field, char *err, size_t errlen)
{
    zl_durability_t *out = field;
    if (!strcmp (value, "fsync"))
        *out = ZL_DURABILITY_FSYNC;
    else if (!strcmp (value, "none"))
        *out = ZL_DURABILITY_NONE;
    else
        ERR ("%s: '%s' is not fsync or none", k->name, value);
    return 0;
}

// A directory, never a database: --data DIR is the LMDB store.
static int
s_data (const s_key_t *k, const char *value, void *field, char *err, size_t errlen)
{
    if (!value[0])
        ERR ("%s: give a directory", k->name);
    if (zl_store_location_kind (value) != ZL_STORE_KIND_LMDB) {
        char safe[256];
        zl_store_location_safe (value, safe, sizeof safe);
        ERR ("%s: '%s' is not a directory (data names the LMDB store's directory; give a "
             "database as store, --store)",
             k->name, safe);
    }
    return s_str (k, value, field, err, errlen);
}

// A directory (LMDB) or a database zl_store_open knows.
static int
s_store (const s_key_t *k, const char *value, void *field, char *err, size_t errlen)
{
    if (!value[0])
        ERR ("%s: give a directory or a postgresql:// URI", k->name);
    if (zl_store_location_kind (value) == ZL_STORE_KIND_UNKNOWN) {
        char safe[256];
        zl_store_location_safe (value, safe, sizeof safe);
        ERR ("%s: '%s' is neither a directory (LMDB) nor a PostgreSQL database (postgresql://, "
             "postgres:// or libpq's key=value form)",
             k->name, safe);
    }
    return s_str (k, value, field, err, errlen);
}

// A host name or an address that clients put in tcp://HOST:PORT: no
// scheme, port, path, wildcard or blank; an IPv6 address bare or in
// brackets.
static int
s_host (const s_key_t *k, const char *value, void *field, char *err, size_t errlen)
{
    size_t len = strlen (value);
    bool bracketed = value[0] == '[' || (len && value[len - 1] == ']');
    size_t colons = 0;
    for (const char *p = value; *p; p++)
        colons += *p == ':';
    bool bad = len == 0 || len > 253 || strcspn (value, "/@*[] \t\r\n\"'") != len;
    if (bracketed) // [v6]: the brackets around an address, nothing else
        bad = len < 4 || len > 255 || value[0] != '[' || value[len - 1] != ']' ||
              strcspn (value + 1, "[]/@* \t\r\n\"'") != len - 2 || colons < 2;
    else if (colons == 1) // host:port
        bad = true;
    if (!strcmp (value, "0.0.0.0") || !strcmp (value, "::") || !strcmp (value, "[::]"))
        bad = true; // every address: none that a client can dial
    if (bad)
        ERR ("%s: '%s' is not a host name or address (give the name clients reach this "
             "broker by, e.g. broker-a.example.net or 10.0.0.5; no scheme or port)",
             k->name, value);
    return s_str (k, value, field, err, errlen);
}

static int
s_scheduler (const s_key_t *k, const char *value, void *field, char *err, size_t errlen)
{
    zl_sched_policy_t *out = field;
    if (!strcmp (value, "wfq"))
        *out = ZL_SCHED_WFQ;
    else if (!strcmp (value, "fifo"))
        *out = ZL_SCHED_FIFO;
    else
        ERR ("%s: '%s' is not wfq or fifo", k->name, value);
    return 0;
}

//  A parser and the offset of `field` in `st`; does not compile unless the
//  field has the C type that parser writes.
#define S_FIELD(st, field, ctype)                                                                  \
    (offsetof (st, field) + 0 * sizeof (_Generic(((st *)0)->field, ctype : 1)))
#define S_DUR(st, field) s_dur, S_FIELD (st, field, uint64_t)
#define S_NUM(st, field) s_num, S_FIELD (st, field, uint64_t)
#define S_U32(st, field) s_u32, S_FIELD (st, field, uint32_t)
#define S_REAL(st, field) s_real, S_FIELD (st, field, double)
#define S_BOOL(st, field) s_bool, S_FIELD (st, field, bool)
#define S_STR(st, field) s_str, S_FIELD (st, field, char *)

static const s_key_t s_broker_key_list[] = {
    {"frontend", S_STR (zl_broker_config_t, frontend)},
    {"backend", S_STR (zl_broker_config_t, backend)},
    {"events", S_STR (zl_broker_config_t, events)},
    {"admin", S_STR (zl_broker_config_t, admin)},
    {"metrics", S_STR (zl_broker_config_t, metrics)},
    {"ports_file", S_STR (zl_broker_config_t, ports_file)},
    {"wire_dump", S_STR (zl_broker_config_t, wire_dump)},
    {"data", s_data, S_FIELD (zl_broker_config_t, data_dir, char *)},
    {"store", s_store, S_FIELD (zl_broker_config_t, store, char *)},
    {"durability", s_durability, S_FIELD (zl_broker_config_t, durability, zl_durability_t)},
    {"dispatch_after_commit", S_BOOL (zl_broker_config_t, dispatch_after_commit)},
    {"commit_on_loop", S_BOOL (zl_broker_config_t, commit_on_loop)},
    {"commit_interval", S_DUR (zl_broker_config_t, commit_interval_ms), 0, 1000,
     "commit_interval must be between 0 and 1s"},
    {"scheduler", s_scheduler, S_FIELD (zl_broker_config_t, scheduler, zl_sched_policy_t)},
    {"wfq_quantum_us", S_NUM (zl_broker_config_t, wfq_quantum_us)},
    {"map_size", S_NUM (zl_broker_config_t, map_size), 1u << 20, UINT64_MAX,
     "map_size must be at least 1MiB"},
    {"max_payload", S_NUM (zl_broker_config_t, max_payload)},
    {"heartbeat", S_DUR (zl_broker_config_t, heartbeat_ms), 1, 3600000,
     "heartbeat must be between 1ms and 1h"},
    {"liveness", S_U32 (zl_broker_config_t, liveness), 1, 1000,
     "liveness must be between 1 and 1000"},
    {"max_depth", S_NUM (zl_broker_config_t, max_depth)},
    {"max_tenants", S_NUM (zl_broker_config_t, max_tenants)},
    {"max_lanes", S_NUM (zl_broker_config_t, max_lanes)},
    {"producer_window", S_NUM (zl_broker_config_t, producer_window)},
    {"producer_idle", S_DUR (zl_broker_config_t, producer_idle_ms)},
    {"dlq_retention", S_DUR (zl_broker_config_t, dlq_retention_ms)},
    {"dlq_alert_interval", S_DUR (zl_broker_config_t, dlq_alert_ms)},
    {"dedup_window", S_DUR (zl_broker_config_t, dedup_window_ms)},
    {"resend_window", S_DUR (zl_broker_config_t, resend_window_ms)},
    {"dedup_max_keys", S_NUM (zl_broker_config_t, dedup_max_keys)},
    {"max_result", S_NUM (zl_broker_config_t, max_result), 0, 64u << 20,
     "max_result must be at most 64MiB"},
    {"max_checkpoint", S_NUM (zl_broker_config_t, max_checkpoint), 0, 16u << 20,
     "max_checkpoint must be at most 16MiB"},
    {"result_retention", S_DUR (zl_broker_config_t, result_retention_ms), 1, UINT64_MAX,
     "result_retention must be above 0"},
    {"max_fan_in", S_NUM (zl_broker_config_t, max_fan_in), 1, 1000000,
     "max_fan_in must be between 1 and 1000000"},
    {"curve", S_BOOL (zl_broker_config_t, curve)},
    {"insecure", S_BOOL (zl_broker_config_t, insecure)},
    {"cert", S_STR (zl_broker_config_t, cert)},
    {"clients", S_STR (zl_broker_config_t, clients)},
    {"default_lane", S_STR (zl_broker_config_t, default_lane)},
    {"auto_lanes", S_BOOL (zl_broker_config_t, auto_lanes)},
    {"leader_lease", S_DUR (zl_broker_config_t, leader_lease_ms), 100, 300000,
     "leader_lease must be between 100ms and 5m"},
    {"advertise", s_host, S_FIELD (zl_broker_config_t, advertise, char *)},
};

//  A key's index here is its bit in zl_lane_config_t.set_mask.
static const s_key_t s_lane_key_list[] = {
    {"weight", S_U32 (zl_lane_config_t, weight), 1, UINT32_MAX, "weight must be at least 1"},
    {"lease", S_DUR (zl_lane_config_t, lease_ms), 1, UINT32_MAX,
     "lease must be between 1ms and 49 days"},
    {"max_attempts", S_U32 (zl_lane_config_t, max_attempts), 1, 65535,
     "max_attempts must be between 1 and 65535"},
    {"backoff_base", S_DUR (zl_lane_config_t, backoff_base_ms)},
    {"backoff_cap", S_DUR (zl_lane_config_t, backoff_cap_ms)},
    {"jitter", S_BOOL (zl_lane_config_t, jitter)},
    {"max_run", S_DUR (zl_lane_config_t, max_run_ms), 0, UINT32_MAX,
     "max_run must be at most 49 days"},
    {"max_depth", S_NUM (zl_lane_config_t, max_depth)},
    {"max_in_flight", S_U32 (zl_lane_config_t, max_in_flight)},
    {"tenant_max_in_flight", S_U32 (zl_lane_config_t, tenant_max_in_flight)},
    {"rate", S_REAL (zl_lane_config_t, rate)},
    {"burst", S_REAL (zl_lane_config_t, burst)},
    {"keep_outcomes", S_BOOL (zl_lane_config_t, keep_outcomes)},
    {"publish_done", S_BOOL (zl_lane_config_t, publish_done)},
    {"max_not_yet", S_U32 (zl_lane_config_t, max_not_yet)},
    {"max_age", S_DUR (zl_lane_config_t, max_age_ms)},
    {"breaker_failures", S_U32 (zl_lane_config_t, breaker_failures)},
    {"breaker_window", S_DUR (zl_lane_config_t, breaker_window_ms), 1, UINT32_MAX,
     "breaker_window must be between 1ms and 49 days"},
    {"breaker_cooldown", S_DUR (zl_lane_config_t, breaker_cooldown_ms), 1, UINT32_MAX,
     "breaker_cooldown must be between 1ms and 49 days"},
    {"breaker_probes", S_U32 (zl_lane_config_t, breaker_probes), 1, 1000000,
     "breaker_probes must be at least 1"},
};

static const s_key_t s_tenant_key_list[] = {
    {"weight", S_U32 (zl_tenant_config_t, weight), 1, UINT32_MAX, "weight must be at least 1"},
    {"max_in_flight", S_U32 (zl_tenant_config_t, max_in_flight)},
    {"max_depth", S_NUM (zl_tenant_config_t, max_depth)},
    {"rate", S_REAL (zl_tenant_config_t, rate)},
    {"burst", S_REAL (zl_tenant_config_t, burst)},
};

#define S_COUNT(list) (sizeof (list) / sizeof (list)[0])
static const s_keyset_t s_broker_keys = {"broker", s_broker_key_list, S_COUNT (s_broker_key_list)};
static const s_keyset_t s_lane_keys = {"lane", s_lane_key_list, S_COUNT (s_lane_key_list)};
static const s_keyset_t s_tenant_keys = {"tenant", s_tenant_key_list, S_COUNT (s_tenant_key_list)};

_Static_assert(S_COUNT (s_lane_key_list) <= 32, "zl_lane_config_t.set_mask has a bit per lane key");
_Static_assert(S_COUNT (s_broker_key_list) <= 64, "zl_broker_config_t.given has a bit per key");

/*  Return the key of `set` named `name`, or NULL. */
static const s_key_t *
s_key_find (const s_keyset_t *set, const char *name)
{
    for (size_t i = 0; i < set->n_keys; i++)
        if (!strcmp (set->keys[i].name, name))
            return &set->keys[i];
    return NULL;
}

/*  Set the key `name` of `set` in the struct at `base` from `value`; returns
    the key, or NULL with a reason in `err`. */
static const s_key_t *
s_key_set (const s_keyset_t *set, void *base, const char *name, const char *value, char *err,
           size_t errlen)
{
    const s_key_t *k = s_key_find (set, name);
    if (!k) {
        snprintf (err, errlen, "unknown %s key '%s'", set->what, name);
        return NULL;
    }
    return k->parse (k, value, (char *)base + k->offset, err, errlen) == 0 ? k : NULL;
}

static int
s_set_lane (zl_lane_config_t *l, const char *key, const char *value, char *err, size_t errlen)
{
    const s_key_t *k = s_key_set (&s_lane_keys, l, key, value, err, errlen);
    if (!k)
        return -1;
    l->set_mask |= 1u << (k - s_lane_key_list);
    return 0;
}

// A default changes every lane that did not set that key itself.
static int
s_set_lane_default (zl_broker_config_t *cfg, const char *key, const char *value, char *err,
                    size_t errlen)
{
    const s_key_t *k = s_key_set (&s_lane_keys, &cfg->lane_defaults, key, value, err, errlen);
    if (!k)
        return -1;
    uint32_t bit = 1u << (k - s_lane_key_list);
    for (size_t i = 0; i < cfg->n_lanes; i++) // the text was just accepted: cannot fail
        if (!(cfg->lanes[i].set_mask & bit))
            k->parse (k, value, (char *)&cfg->lanes[i] + k->offset, err, errlen);
    return 0;
}

static int
s_set_tenant (zl_tenant_config_t *t, const char *key, const char *value, char *err, size_t errlen)
{
    return s_key_set (&s_tenant_keys, t, key, value, err, errlen) ? 0 : -1;
}

static int
s_set_broker (zl_broker_config_t *cfg, const char *key, const char *value, char *err, size_t errlen)
{
    const s_key_t *k = s_key_set (&s_broker_keys, cfg, key, value, err, errlen);
    if (!k)
        return -1;
    cfg->given |= 1ull << (k - s_broker_key_list);
    return 0;
}

// True if broker key `name` was set by a file or a flag.
static bool
s_given (const zl_broker_config_t *cfg, const char *name)
{
    const s_key_t *k = s_key_find (&s_broker_keys, name);
    return k && (cfg->given & 1ull << (k - s_broker_key_list));
}

const char *
zl_broker_config_store (const zl_broker_config_t *cfg, char *err, size_t errlen)
{
    if (cfg->store && s_given (cfg, "data")) {
        char safe[256];
        zl_store_location_safe (cfg->store, safe, sizeof safe);
        snprintf (err, errlen,
                  "both data (%s) and store (%s) are set: give one of them (data DIR is the LMDB "
                  "store in DIR, as is store DIR; store also takes a PostgreSQL database)",
                  cfg->data_dir, safe);
        return NULL;
    }
    return cfg->store ? cfg->store : cfg->data_dir;
}

// schedules/NAME/KEY: a cron schedule's fields (checked when it is added).
static int
s_set_schedule (zl_broker_config_t *cfg, const char *name, const char *key, const char *value,
                char *err, size_t errlen)
{
    zl_schedule_config_t *s = NULL;
    for (size_t i = 0; i < cfg->n_schedules && !s; i++)
        if (!strcmp (cfg->schedules[i].name, name))
            s = &cfg->schedules[i];
    if (!s) {
        cfg->schedules =
            zl_realloc (cfg->schedules, (cfg->n_schedules + 1) * sizeof *cfg->schedules);
        s = &cfg->schedules[cfg->n_schedules++];
        *s = (zl_schedule_config_t){.name = zl_strdup (name)};
    }
    char **field = !strcmp (key, "cron")      ? &s->cron
                   : !strcmp (key, "lane")    ? &s->lane
                   : !strcmp (key, "tenant")  ? &s->tenant
                   : !strcmp (key, "payload") ? &s->payload
                                              : NULL;
    if (field) {
        free (*field);
        *field = zl_strdup (value);
        return 0;
    }
    if (!strcmp (key, "missed")) {
        if (!strcmp (value, "skip")) {
            s->catch_up = false;
            return 0;
        }
        if (!strncmp (value, "catch_up", 8) && (value[8] == '\0' || value[8] == ':')) {
            s->catch_up = true;
            s->catch_up_max = value[8] ? (uint32_t)strtoul (value + 9, NULL, 10) : 0;
            return 0;
        }
        ERR ("schedules/%s/missed wants skip, catch_up or catch_up:N, not '%s'", name, value);
    }
    ERR ("unknown schedule key '%s' (cron, lane, tenant, payload, missed)", key);
}

int
zl_broker_config_set (zl_broker_config_t *cfg, const char *key, const char *value, char *err,
                      size_t errlen)
{
    // "lanes/NAME/KEY", "tenants/NAME/KEY", "defaults/lane/KEY",
    // "defaults/tenant/KEY", "broker/KEY" or a bare broker key
    char buf[512];
    snprintf (buf, sizeof buf, "%s", key);
    char *first = strchr (buf, '/');
    if (!first)
        return s_set_broker (cfg, buf, value, err, errlen);
    *first = '\0';
    char *name = first + 1;
    if (!strcmp (buf, "broker") && !strchr (name, '/')) // "broker/KEY", as in the file
        return s_set_broker (cfg, name, value, err, errlen);
    char *second = strchr (name, '/');
    if (!second)
        ERR ("bad key '%s'", key);
    *second = '\0';
    char *leaf = second + 1;
    if (!strcmp (buf, "broker"))
        return s_set_broker (cfg, name, value, err, errlen);
    if (!strcmp (buf, "lanes"))
        return s_set_lane (zl_broker_config_lane (cfg, name), leaf, value, err, errlen);
    if (!strcmp (buf, "tenants"))
        return s_set_tenant (zl_broker_config_tenant (cfg, name), leaf, value, err, errlen);
    if (!strcmp (buf, "defaults") && !strcmp (name, "lane"))
        return s_set_lane_default (cfg, leaf, value, err, errlen);
    if (!strcmp (buf, "defaults") && !strcmp (name, "tenant"))
        return s_set_tenant (&cfg->tenant_defaults, leaf, value, err, errlen);
    if (!strcmp (buf, "schedules"))
        return s_set_schedule (cfg, name, leaf, value, err, errlen);
    ERR ("unknown section '%s'", buf);
}

int
zl_broker_config_load (zl_broker_config_t *cfg, const char *path, char *err, size_t errlen)
{
    zconfig_t *root = zconfig_load (path);
    if (!root)
        ERR ("cannot read config file '%s'", path);
    int rc = 0;
    // broker keys, then lane/tenant defaults, then lanes and tenants
    zconfig_t *sec = zconfig_locate (root, "broker");
    for (zconfig_t *k = sec ? zconfig_child (sec) : NULL; k && rc == 0; k = zconfig_next (k))
        rc = s_set_broker (cfg, zconfig_name (k), zconfig_value (k), err, errlen);
    const char *def_sections[] = {"defaults/lane", "defaults/tenant"};
    for (int d = 0; d < 2 && rc == 0; d++) {
        sec = zconfig_locate (root, def_sections[d]);
        for (zconfig_t *k = sec ? zconfig_child (sec) : NULL; k && rc == 0; k = zconfig_next (k))
            rc = d == 0 ? s_set_lane_default (cfg, zconfig_name (k), zconfig_value (k), err, errlen)
                        : s_set_tenant (&cfg->tenant_defaults, zconfig_name (k), zconfig_value (k),
                                        err, errlen);
    }
    sec = zconfig_locate (root, "schedules");
    for (zconfig_t *item = sec ? zconfig_child (sec) : NULL; item && rc == 0;
         item = zconfig_next (item))
        for (zconfig_t *k = zconfig_child (item); k && rc == 0; k = zconfig_next (k))
            rc = s_set_schedule (cfg, zconfig_name (item), zconfig_name (k), zconfig_value (k), err,
                                 errlen);
    const char *groups[] = {"lanes", "tenants"};
    for (int g = 0; g < 2 && rc == 0; g++) {
        sec = zconfig_locate (root, groups[g]);
        for (zconfig_t *item = sec ? zconfig_child (sec) : NULL; item && rc == 0;
             item = zconfig_next (item)) {
            const char *name = zconfig_name (item);
            if (g == 0) {
                zl_lane_config_t *lane = zl_broker_config_lane (cfg, name);
                for (zconfig_t *k = zconfig_child (item); k && rc == 0; k = zconfig_next (k))
                    rc = s_set_lane (lane, zconfig_name (k), zconfig_value (k), err, errlen);
            } else {
                zl_tenant_config_t *t = zl_broker_config_tenant (cfg, name);
                for (zconfig_t *k = zconfig_child (item); k && rc == 0; k = zconfig_next (k))
                    rc = s_set_tenant (t, zconfig_name (k), zconfig_value (k), err, errlen);
            }
        }
    }
    if (rc != 0) {
        char detail[256];
        snprintf (detail, sizeof detail, "%s", err);
        snprintf (err, errlen, "%s: %s", path, detail);
    }
    zconfig_destroy (&root);
    return rc;
}

void
zl_broker_config_free (zl_broker_config_t *cfg)
{
    free (cfg->frontend);
    free (cfg->backend);
    free (cfg->events);
    free (cfg->admin);
    free (cfg->metrics);
    free (cfg->ports_file);
    free (cfg->wire_dump);
    free (cfg->data_dir);
    free (cfg->store);
    free (cfg->default_lane);
    free (cfg->cert);
    free (cfg->clients);
    free (cfg->advertise);
    for (size_t i = 0; i < cfg->n_lanes; i++)
        free (cfg->lanes[i].name);
    free (cfg->lanes);
    for (size_t i = 0; i < cfg->n_tenants; i++)
        free (cfg->tenants[i].name);
    free (cfg->tenants);
    for (size_t i = 0; i < cfg->n_schedules; i++) {
        zl_schedule_config_t *s = &cfg->schedules[i];
        free (s->name);
        free (s->cron);
        free (s->lane);
        free (s->tenant);
        free (s->payload);
    }
    free (cfg->schedules);
    memset (cfg, 0, sizeof *cfg);
}

uint64_t
zl_broker_config_dedup_max_keys (const zl_broker_config_t *cfg)
{
    if (cfg->dedup_max_keys)
        return cfg->dedup_max_keys;
    uint64_t n = cfg->map_size / 4 / ZL_DEDUP_KEY_COST;
    return n ? n : 1;
}
