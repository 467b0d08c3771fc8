#include "config.h"

#include "wire.h"
#include "zl_alloc.h"

#include <czmq.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void
s_set_str (char **slot, const char *value)
{
    free (*slot);
    *slot = zl_strdup (value);
}

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
    cfg->dedup_window_ms = 24ULL * 3600 * 1000;
    // longer than any deadline producers give their jobs (the library's
    // default is 30 s): the library never resends a job after its deadline
    cfg->resend_window_ms = 10ULL * 60 * 1000;
    cfg->dedup_max_keys = 0; // auto: zl_broker_config_dedup_max_keys
    cfg->lane_defaults = (zl_lane_config_t){.weight = 1,
                                            .lease_ms = 30000,
                                            .max_attempts = 5,
                                            .backoff_base_ms = 1000,
                                            .backoff_cap_ms = 300000,
                                            .jitter = true};
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

static int
s_dur (const char *key, const char *value, uint64_t *out, char *err, size_t errlen)
{
    if (zl_parse_duration_ms (value, out) != 0)
        ERR ("%s: '%s' is not a duration (e.g. 250ms, 30s, 5m)", key, value);
    return 0;
}

static int
s_num (const char *key, const char *value, uint64_t *out, char *err, size_t errlen)
{
    if (zl_parse_size (value, out) != 0)
        ERR ("%s: '%s' is not a number", key, value);
    return 0;
}

static int
s_u32 (const char *key, const char *value, uint32_t *out, char *err, size_t errlen)
{
    uint64_t v;
    if (s_num (key, value, &v, err, errlen) != 0)
        return -1;
    if (v > UINT32_MAX)
        ERR ("%s: %s is too large", key, value);
    *out = (uint32_t)v;
    return 0;
}

static int
s_real (const char *key, const char *value, double *out, char *err, size_t errlen)
{
    char *end;
    double v = strtod (value, &end);
    if (end == value || *end || v < 0)
        ERR ("%s: '%s' is not a non-negative number", key, value);
    *out = v;
    return 0;
}

static int
s_bool (const char *key, const char *value, bool *out, char *err, size_t errlen)
{
    if (!strcmp (value, "1") || !strcmp (value, "true") || !strcmp (value, "yes") ||
        !strcmp (value, "on"))
        *out = true;
    else if (!strcmp (value, "0") || !strcmp (value, "false") || !strcmp (value, "no") ||
             !strcmp (value, "off"))
        *out = false;
    else
        ERR ("%s: '%s' is not a boolean (true/false)", key, value);
    return 0;
}

static const char *const s_lane_keys[] = {
    "weight",  "lease",     "max_attempts",  "backoff_base",         "backoff_cap", "jitter",
    "max_run", "max_depth", "max_in_flight", "tenant_max_in_flight", "rate",        "burst"};
#define N_LANE_KEYS (sizeof s_lane_keys / sizeof s_lane_keys[0])

static int
s_set_lane_key (zl_lane_config_t *l, int key_index, const char *value, char *err, size_t errlen)
{
    const char *key = s_lane_keys[key_index];
    switch (key_index) {
    case 0:
        if (s_u32 (key, value, &l->weight, err, errlen))
            return -1;
        if (l->weight == 0)
            ERR ("weight must be at least 1");
        return 0;
    case 1:
        if (s_dur (key, value, &l->lease_ms, err, errlen))
            return -1;
        if (l->lease_ms == 0 || l->lease_ms > UINT32_MAX)
            ERR ("lease must be between 1ms and 49 days");
        return 0;
    case 2:
        if (s_u32 (key, value, &l->max_attempts, err, errlen))
            return -1;
        if (l->max_attempts == 0 || l->max_attempts > 65535)
            ERR ("max_attempts must be between 1 and 65535");
        return 0;
    case 3: return s_dur (key, value, &l->backoff_base_ms, err, errlen);
    case 4: return s_dur (key, value, &l->backoff_cap_ms, err, errlen);
    case 5: return s_bool (key, value, &l->jitter, err, errlen);
    case 6:
        if (s_dur (key, value, &l->max_run_ms, err, errlen))
            return -1;
        if (l->max_run_ms > UINT32_MAX)
            ERR ("max_run must be at most 49 days");
        return 0;
    case 7: return s_num (key, value, &l->max_depth, err, errlen);
    case 8: return s_u32 (key, value, &l->max_in_flight, err, errlen);
    case 9: return s_u32 (key, value, &l->tenant_max_in_flight, err, errlen);
    case 10: return s_real (key, value, &l->rate, err, errlen);
    default: return s_real (key, value, &l->burst, err, errlen);
    }
}

static int
s_lane_key_index (const char *key)
{
    for (size_t i = 0; i < N_LANE_KEYS; i++)
        if (!strcmp (key, s_lane_keys[i]))
            return (int)i;
    return -1;
}

static int
s_set_lane (zl_lane_config_t *l, const char *key, const char *value, char *err, size_t errlen)
{
    int k = s_lane_key_index (key);
    if (k < 0)
        ERR ("unknown lane key '%s'", key);
    if (s_set_lane_key (l, k, value, err, errlen) != 0)
        return -1;
    l->set_mask |= 1u << k;
    return 0;
}

// A default changes every lane that did not set that key itself.
static int
s_set_lane_default (zl_broker_config_t *cfg, const char *key, const char *value, char *err,
                    size_t errlen)
{
    int k = s_lane_key_index (key);
    if (k < 0)
        ERR ("unknown lane key '%s'", key);
    if (s_set_lane_key (&cfg->lane_defaults, k, value, err, errlen) != 0)
        return -1;
    for (size_t i = 0; i < cfg->n_lanes; i++)
        if (!(cfg->lanes[i].set_mask & (1u << k)))
            s_set_lane_key (&cfg->lanes[i], k, value, err, errlen);
    return 0;
}

static int
s_set_tenant (zl_tenant_config_t *t, const char *key, const char *value, char *err, size_t errlen)
{
    if (!strcmp (key, "weight")) {
        if (s_u32 (key, value, &t->weight, err, errlen))
            return -1;
        if (t->weight == 0)
            ERR ("weight must be at least 1");
        return 0;
    }
    if (!strcmp (key, "max_in_flight"))
        return s_u32 (key, value, &t->max_in_flight, err, errlen);
    if (!strcmp (key, "max_depth"))
        return s_num (key, value, &t->max_depth, err, errlen);
    if (!strcmp (key, "rate"))
        return s_real (key, value, &t->rate, err, errlen);
    if (!strcmp (key, "burst"))
        return s_real (key, value, &t->burst, err, errlen);
    ERR ("unknown tenant key '%s'", key);
}

static int
s_set_broker (zl_broker_config_t *cfg, const char *key, const char *value, char *err, size_t errlen)
{
    if (!strcmp (key, "frontend"))
        s_set_str (&cfg->frontend, value);
    else if (!strcmp (key, "backend"))
        s_set_str (&cfg->backend, value);
    else if (!strcmp (key, "events"))
        s_set_str (&cfg->events, value);
    else if (!strcmp (key, "admin"))
        s_set_str (&cfg->admin, value);
    else if (!strcmp (key, "metrics"))
        s_set_str (&cfg->metrics, value);
    else if (!strcmp (key, "ports_file"))
        s_set_str (&cfg->ports_file, value);
    else if (!strcmp (key, "wire_dump"))
        s_set_str (&cfg->wire_dump, value);
    else if (!strcmp (key, "data"))
        s_set_str (&cfg->data_dir, value);
    else if (!strcmp (key, "durability")) {
        if (!strcmp (value, "fsync"))
            cfg->durability = ZL_DURABILITY_FSYNC;
        else if (!strcmp (value, "none"))
            cfg->durability = ZL_DURABILITY_NONE;
        else
            ERR ("durability: '%s' is not fsync or none", value);
    } else if (!strcmp (key, "scheduler")) {
        if (!strcmp (value, "wfq"))
            cfg->scheduler = ZL_SCHED_WFQ;
        else if (!strcmp (value, "fifo"))
            cfg->scheduler = ZL_SCHED_FIFO;
        else
            ERR ("scheduler: '%s' is not wfq or fifo", value);
    } else if (!strcmp (key, "wfq_quantum_us"))
        return s_num (key, value, &cfg->wfq_quantum_us, err, errlen);
    else if (!strcmp (key, "map_size")) {
        if (s_num (key, value, &cfg->map_size, err, errlen))
            return -1;
        if (cfg->map_size < (1u << 20))
            ERR ("map_size must be at least 1MiB");
    } else if (!strcmp (key, "max_payload"))
        return s_num (key, value, &cfg->max_payload, err, errlen);
    else if (!strcmp (key, "heartbeat"))
        return s_dur (key, value, &cfg->heartbeat_ms, err, errlen);
    else if (!strcmp (key, "liveness"))
        return s_u32 (key, value, &cfg->liveness, err, errlen);
    else if (!strcmp (key, "max_depth"))
        return s_num (key, value, &cfg->max_depth, err, errlen);
    else if (!strcmp (key, "max_tenants"))
        return s_num (key, value, &cfg->max_tenants, err, errlen);
    else if (!strcmp (key, "max_lanes"))
        return s_num (key, value, &cfg->max_lanes, err, errlen);
    else if (!strcmp (key, "producer_window"))
        return s_num (key, value, &cfg->producer_window, err, errlen);
    else if (!strcmp (key, "producer_idle"))
        return s_dur (key, value, &cfg->producer_idle_ms, err, errlen);
    else if (!strcmp (key, "dlq_retention"))
        return s_dur (key, value, &cfg->dlq_retention_ms, err, errlen);
    else if (!strcmp (key, "dlq_alert_interval"))
        return s_dur (key, value, &cfg->dlq_alert_ms, err, errlen);
    else if (!strcmp (key, "dedup_window"))
        return s_dur (key, value, &cfg->dedup_window_ms, err, errlen);
    else if (!strcmp (key, "resend_window"))
        return s_dur (key, value, &cfg->resend_window_ms, err, errlen);
    else if (!strcmp (key, "dedup_max_keys"))
        return s_num (key, value, &cfg->dedup_max_keys, err, errlen);
    else if (!strcmp (key, "curve"))
        return s_bool (key, value, &cfg->curve, err, errlen);
    else if (!strcmp (key, "insecure"))
        return s_bool (key, value, &cfg->insecure, err, errlen);
    else if (!strcmp (key, "cert"))
        s_set_str (&cfg->cert, value);
    else if (!strcmp (key, "clients"))
        s_set_str (&cfg->clients, value);
    else if (!strcmp (key, "default_lane"))
        s_set_str (&cfg->default_lane, value);
    else if (!strcmp (key, "auto_lanes"))
        return s_bool (key, value, &cfg->auto_lanes, err, errlen);
    else
        ERR ("unknown broker key '%s'", key);
    return 0;
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
    free (cfg->default_lane);
    free (cfg->cert);
    free (cfg->clients);
    for (size_t i = 0; i < cfg->n_lanes; i++)
        free (cfg->lanes[i].name);
    free (cfg->lanes);
    for (size_t i = 0; i < cfg->n_tenants; i++)
        free (cfg->tenants[i].name);
    free (cfg->tenants);
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
