/*  test_config: the broker's configuration (broker/config.c): defaults, a
    zconfig file with broker keys, lane and tenant defaults, lanes and
    tenants; bad values refused with -1 and a message naming the key;
    zl_broker_config_set with the same keys as the file and the flags; the
    store's location (data or store, never both); and the keys of brokers
    that share a store (leader_lease, advertise). */
#include "config.h"
#include "lane.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// Write `text` to a new temp file; returns its path (caller frees and unlinks).
static char *
s_write_temp (const char *text)
{
    char *path = strdup ("/tmp/zlane-test-config-XXXXXX");
    int fd = mkstemp (path);
    assert_true (fd >= 0);
    size_t len = strlen (text);
    assert_int_equal (write (fd, text, len), (ssize_t)len);
    close (fd);
    return path;
}

static void
s_remove (char *path)
{
    unlink (path);
    free (path);
}

static const zl_lane_config_t *
s_lane (const zl_broker_config_t *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->n_lanes; i++)
        if (!strcmp (cfg->lanes[i].name, name))
            return &cfg->lanes[i];
    return NULL;
}

static const zl_tenant_config_t *
s_tenant (const zl_broker_config_t *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->n_tenants; i++)
        if (!strcmp (cfg->tenants[i].name, name))
            return &cfg->tenants[i];
    return NULL;
}

static void
test_defaults (void **state)
{
    (void)state;
    zl_broker_config_t cfg;
    zl_broker_config_defaults (&cfg);
    assert_string_equal (cfg.frontend, "tcp://127.0.0.1:5570");
    assert_string_equal (cfg.backend, "tcp://127.0.0.1:5571");
    assert_string_equal (cfg.events, "tcp://127.0.0.1:5572");
    assert_string_equal (cfg.admin, "tcp://127.0.0.1:5573");
    assert_int_equal (cfg.durability, ZL_DURABILITY_FSYNC);
    assert_false (cfg.commit_on_loop);            // fsync on LMDB commits on the store's thread
    assert_int_equal (cfg.commit_interval_ms, 5); // a stream's commits 5 ms apart
    assert_int_equal (cfg.scheduler, ZL_SCHED_WFQ);
    assert_int_equal (cfg.heartbeat_ms, 1000);
    assert_int_equal (cfg.liveness, 3);
    assert_int_equal (cfg.dedup_window_ms, 24ULL * 3600 * 1000);
    // the producer library's keys only need to outlive its resends (its
    // default deadline is 30 s)
    assert_int_equal (cfg.resend_window_ms, 10ULL * 60 * 1000);
    assert_int_equal (cfg.dedup_max_keys, 0);
    // 0: as many keys as fill a quarter of the map
    assert_int_equal (zl_broker_config_dedup_max_keys (&cfg), (4ULL << 30) / 4 / ZL_DEDUP_KEY_COST);
    cfg.map_size = 8ULL << 20;
    assert_int_equal (zl_broker_config_dedup_max_keys (&cfg), (8ULL << 20) / 4 / ZL_DEDUP_KEY_COST);
    cfg.dedup_max_keys = 123;
    assert_int_equal (zl_broker_config_dedup_max_keys (&cfg), 123);
    assert_int_equal (cfg.n_lanes, 0);
    assert_int_equal (cfg.n_tenants, 0);
    assert_false (cfg.auto_lanes);
    assert_int_equal (cfg.lane_defaults.weight, 1);
    assert_true (cfg.lane_defaults.lease_ms > 0);
    assert_true (cfg.lane_defaults.max_attempts > 0);
    assert_true (cfg.lane_defaults.backoff_base_ms > 0);
    assert_true (cfg.lane_defaults.backoff_cap_ms >= cfg.lane_defaults.backoff_base_ms);
    assert_true (cfg.lane_defaults.jitter);
    assert_int_equal (cfg.tenant_defaults.weight, 1);
    // lanes and tenants added later start from the defaults
    zl_lane_config_t *l = zl_broker_config_lane (&cfg, "x");
    assert_string_equal (l->name, "x");
    assert_int_equal (l->lease_ms, cfg.lane_defaults.lease_ms);
    assert_ptr_equal (zl_broker_config_lane (&cfg, "x"), l);
    assert_int_equal (cfg.n_lanes, 1);
    zl_tenant_config_t *t = zl_broker_config_tenant (&cfg, "acme");
    assert_string_equal (t->name, "acme");
    assert_int_equal (t->weight, 1);
    assert_ptr_equal (zl_broker_config_tenant (&cfg, "acme"), t);
    zl_broker_config_free (&cfg);
    assert_null (cfg.frontend);
    assert_int_equal (cfg.n_lanes, 0);
}

static const char *GOOD = "#   zlane broker test configuration\n"
                          "broker\n"
                          "    frontend = \"tcp://127.0.0.1:6000\"\n"
                          "    backend = \"tcp://127.0.0.1:6001\"\n"
                          "    events = \"ipc:///tmp/zlane-events\"\n"
                          "    admin = \"tcp://127.0.0.1:6003\"\n"
                          "    data = \"/tmp/zlane-data-test\"\n"
                          "    ports_file = \"/tmp/zlane-ports\"\n"
                          "    durability = none\n"
                          "    commit_on_loop = true\n"
                          "    commit_interval = 20ms\n"
                          "    scheduler = fifo\n"
                          "    heartbeat = 250ms\n"
                          "    liveness = 5\n"
                          "    max_payload = 64KiB\n"
                          "    max_depth = 1000\n"
                          "    producer_window = 50\n"
                          "    dedup_window = 1h\n"
                          "    resend_window = 90s\n"
                          "    dedup_max_keys = 5000000\n"
                          "    dlq_alert_interval = 30s\n"
                          "    auto_lanes = true\n"
                          "defaults\n"
                          "    lane\n"
                          "        lease = 10s\n"
                          "        max_attempts = 7\n"
                          "        backoff_base = 200ms\n"
                          "        backoff_cap = 1m\n"
                          "        jitter = false\n"
                          "    tenant\n"
                          "        weight = 3\n"
                          "        max_in_flight = 10\n"
                          "lanes\n"
                          "    email\n"
                          "        weight = 2\n"
                          "        lease = 45s\n"
                          "        max_run = 5m\n"
                          "        max_in_flight = 20\n"
                          "        tenant_max_in_flight = 5\n"
                          "        rate = 10.5\n"
                          "        burst = 20\n"
                          "        max_depth = 100\n"
                          "    reports\n"
                          "        max_attempts = 1\n"
                          "        jitter = on\n"
                          "tenants\n"
                          "    acme\n"
                          "        weight = 4\n"
                          "        max_depth = 500\n"
                          "        rate = 2\n"
                          "        burst = 4\n";

static void
test_load_file (void **state)
{
    (void)state;
    char *path = s_write_temp (GOOD);
    zl_broker_config_t cfg;
    zl_broker_config_defaults (&cfg);
    char err[512] = "";
    int rc = zl_broker_config_load (&cfg, path, err, sizeof err);
    if (rc != 0)
        fail_msg ("load failed: %s", err);
    assert_string_equal (cfg.frontend, "tcp://127.0.0.1:6000");
    assert_string_equal (cfg.backend, "tcp://127.0.0.1:6001");
    assert_string_equal (cfg.events, "ipc:///tmp/zlane-events");
    assert_string_equal (cfg.admin, "tcp://127.0.0.1:6003");
    assert_string_equal (cfg.data_dir, "/tmp/zlane-data-test");
    assert_string_equal (cfg.ports_file, "/tmp/zlane-ports");
    assert_int_equal (cfg.durability, ZL_DURABILITY_NONE);
    assert_true (cfg.commit_on_loop);
    assert_int_equal (cfg.commit_interval_ms, 20);
    assert_int_equal (cfg.scheduler, ZL_SCHED_FIFO);
    assert_int_equal (cfg.heartbeat_ms, 250);
    assert_int_equal (cfg.liveness, 5);
    assert_int_equal (cfg.max_payload, 65536);
    assert_int_equal (cfg.max_depth, 1000);
    assert_int_equal (cfg.producer_window, 50);
    assert_int_equal (cfg.dedup_window_ms, 3600000);
    assert_int_equal (cfg.resend_window_ms, 90000);
    assert_int_equal (cfg.dedup_max_keys, 5000000);
    assert_int_equal (zl_broker_config_dedup_max_keys (&cfg), 5000000);
    assert_int_equal (cfg.dlq_alert_ms, 30000);
    assert_true (cfg.auto_lanes);
    // defaults
    assert_int_equal (cfg.lane_defaults.lease_ms, 10000);
    assert_int_equal (cfg.lane_defaults.max_attempts, 7);
    assert_int_equal (cfg.lane_defaults.backoff_base_ms, 200);
    assert_int_equal (cfg.lane_defaults.backoff_cap_ms, 60000);
    assert_false (cfg.lane_defaults.jitter);
    assert_int_equal (cfg.tenant_defaults.weight, 3);
    assert_int_equal (cfg.tenant_defaults.max_in_flight, 10);
    // lanes: their own keys over the file's defaults
    assert_int_equal (cfg.n_lanes, 2);
    const zl_lane_config_t *email = s_lane (&cfg, "email");
    assert_non_null (email);
    assert_int_equal (email->weight, 2);
    assert_int_equal (email->lease_ms, 45000);
    assert_int_equal (email->max_run_ms, 300000);
    assert_int_equal (email->max_in_flight, 20);
    assert_int_equal (email->tenant_max_in_flight, 5);
    assert_true (email->rate > 10.49 && email->rate < 10.51);
    assert_true (email->burst > 19.99 && email->burst < 20.01);
    assert_int_equal (email->max_depth, 100);
    assert_int_equal (email->max_attempts, 7);      // from defaults/lane
    assert_int_equal (email->backoff_base_ms, 200); // from defaults/lane
    assert_false (email->jitter);
    const zl_lane_config_t *reports = s_lane (&cfg, "reports");
    assert_non_null (reports);
    assert_int_equal (reports->max_attempts, 1);
    assert_int_equal (reports->lease_ms, 10000);
    assert_int_equal (reports->weight, 1);
    assert_true (reports->jitter);
    // tenants
    assert_int_equal (cfg.n_tenants, 1);
    const zl_tenant_config_t *acme = s_tenant (&cfg, "acme");
    assert_non_null (acme);
    assert_int_equal (acme->weight, 4);
    assert_int_equal (acme->max_depth, 500);
    assert_int_equal (acme->max_in_flight, 10); // from defaults/tenant
    assert_true (acme->rate > 1.99 && acme->rate < 2.01);

    // the runtime registries built from it
    zl_lanes_t *lanes = zl_lanes_new (&cfg);
    assert_int_equal (zl_lanes_count (lanes), 2);
    zl_lane_t *lane = zl_lanes_lookup (lanes, "email");
    assert_non_null (lane);
    assert_int_equal (lane->cfg.weight, 2);
    assert_int_equal (lane->cfg.lease_ms, 45000);
    assert_string_equal (lane->cfg.name, "email");
    zl_tenant_t *t = zl_lanes_tenant (lanes, "acme");
    assert_int_equal (t->cfg.weight, 4);
    zl_tenant_t *other = zl_lanes_tenant (lanes, "newcomer");
    assert_int_equal (other->cfg.weight, 3);
    assert_int_equal (other->cfg.max_in_flight, 10);
    assert_ptr_equal (zl_lanes_tenant (lanes, "newcomer"), other);
    assert_int_equal (zl_lanes_tenant_count (lanes), 2);
    // auto_lanes: an undeclared lane appears with the defaults
    zl_lane_t *auto_lane = zl_lanes_lookup (lanes, "adhoc");
    assert_non_null (auto_lane);
    assert_int_equal (auto_lane->cfg.lease_ms, 10000);
    assert_int_equal (zl_lanes_count (lanes), 3);
    assert_null (zl_lanes_lookup (lanes, ""));
    zl_lanes_destroy (&lanes);
    assert_null (lanes);
    zl_broker_config_free (&cfg);
    s_remove (path);
}

static void
test_undeclared_lane_without_auto_lanes (void **state)
{
    (void)state;
    zl_broker_config_t cfg;
    zl_broker_config_defaults (&cfg);
    zl_broker_config_lane (&cfg, "only");
    zl_lanes_t *lanes = zl_lanes_new (&cfg);
    assert_non_null (zl_lanes_lookup (lanes, "only"));
    assert_null (zl_lanes_lookup (lanes, "other"));
    assert_int_equal (zl_lanes_count (lanes), 1);
    zl_lanes_destroy (&lanes);
    zl_broker_config_free (&cfg);
}

typedef struct {
    const char *text;
    const char *must_name; // the message must contain this
} bad_case_t;

static void
test_bad_values_name_the_key (void **state)
{
    (void)state;
    const bad_case_t cases[] = {
        {"broker\n    heartbeat = soon\n", "heartbeat"},
        {"broker\n    liveness = 5000000000\n", "liveness"},
        {"broker\n    liveness = -1\n", "liveness"},
        {"broker\n    liveness = 0\n", "liveness"},
        {"broker\n    heartbeat = 0ms\n", "heartbeat"},
        {"broker\n    heartbeat = 2h\n", "heartbeat"},
        {"broker\n    commit_interval = 2s\n", "commit_interval"},
        {"broker\n    durability = maybe\n", "durability"},
        {"broker\n    scheduler = random\n", "scheduler"},
        {"broker\n    auto_lanes = perhaps\n", "auto_lanes"},
        {"broker\n    max_payload = huge\n", "max_payload"},
        {"broker\n    dedup_window = 10 fortnights\n", "dedup_window"},
        {"broker\n    resend_window = later\n", "resend_window"},
        {"broker\n    dedup_max_keys = many\n", "dedup_max_keys"},
        {"broker\n    no_such_key = 1\n", "no_such_key"},
        {"defaults\n    lane\n        jitter = maybe\n", "jitter"},
        {"defaults\n    lane\n        backoff_base = x\n", "backoff_base"},
        {"defaults\n    tenant\n        weight = 0\n", "weight"},
        {"lanes\n    email\n        weight = 0\n", "weight"},
        {"lanes\n    email\n        weight = heavy\n", "weight"},
        {"lanes\n    email\n        lease = -5s\n", "lease"},
        {"lanes\n    email\n        max_attempts = 1.5.2\n", "max_attempts"},
        {"lanes\n    email\n        rate = -1\n", "rate"},
        {"lanes\n    email\n        rate = fast\n", "rate"},
        {"lanes\n    email\n        burst = 1x\n", "burst"},
        {"lanes\n    email\n        bogus = 1\n", "bogus"},
        {"tenants\n    acme\n        weight = 0\n", "weight"},
        {"tenants\n    acme\n        max_depth = lots\n", "max_depth"},
        {"tenants\n    acme\n        colour = blue\n", "colour"},
        // a key with no value at all
        {"broker\n    heartbeat\n", "heartbeat"},
        {"broker\n    durability\n", "durability"},
        {"broker\n    auto_lanes\n", "auto_lanes"},
        {"lanes\n    email\n        rate\n", "rate"},
        {"lanes\n    email\n        jitter\n", "jitter"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *path = s_write_temp (cases[i].text);
        zl_broker_config_t cfg;
        zl_broker_config_defaults (&cfg);
        char err[512] = "";
        int rc = zl_broker_config_load (&cfg, path, err, sizeof err);
        if (rc != -1)
            fail_msg ("case %zu accepted: %s", i, cases[i].text);
        if (!strstr (err, cases[i].must_name))
            fail_msg ("case %zu: message '%s' does not name '%s'", i, err, cases[i].must_name);
        if (!strstr (err, path))
            fail_msg ("case %zu: message '%s' does not name the file", i, err);
        zl_broker_config_free (&cfg);
        s_remove (path);
    }
}

static void
test_missing_file (void **state)
{
    (void)state;
    zl_broker_config_t cfg;
    zl_broker_config_defaults (&cfg);
    char err[512] = "";
    assert_int_equal (zl_broker_config_load (&cfg, "/nonexistent/zlane.cfg", err, sizeof err), -1);
    assert_non_null (strstr (err, "/nonexistent/zlane.cfg"));
    // the config is left usable
    assert_string_equal (cfg.frontend, "tcp://127.0.0.1:5570");
    zl_broker_config_free (&cfg);
}

static void
test_empty_file_keeps_defaults (void **state)
{
    (void)state;
    char *path = s_write_temp ("# nothing here\n");
    zl_broker_config_t cfg;
    zl_broker_config_defaults (&cfg);
    char err[512] = "";
    assert_int_equal (zl_broker_config_load (&cfg, path, err, sizeof err), 0);
    assert_string_equal (cfg.frontend, "tcp://127.0.0.1:5570");
    assert_int_equal (cfg.n_lanes, 0);
    zl_broker_config_free (&cfg);
    s_remove (path);
}

static void
test_set_keys (void **state)
{
    (void)state;
    zl_broker_config_t cfg;
    zl_broker_config_defaults (&cfg);
    char err[512] = "";
#define SET_OK(k, v)                                                                               \
    do {                                                                                           \
        if (zl_broker_config_set (&cfg, k, v, err, sizeof err) != 0)                               \
            fail_msg ("set %s=%s failed: %s", k, v, err);                                          \
    } while (0)
#define SET_BAD(k, v, name)                                                                        \
    do {                                                                                           \
        err[0] = '\0';                                                                             \
        if (zl_broker_config_set (&cfg, k, v, err, sizeof err) != -1)                              \
            fail_msg ("set %s=%s accepted", k, v);                                                 \
        if (!strstr (err, name))                                                                   \
            fail_msg ("set %s=%s: message '%s' does not name '%s'", k, v, err, name);              \
    } while (0)
    SET_OK ("heartbeat", "2s");
    assert_int_equal (cfg.heartbeat_ms, 2000);
    SET_OK ("frontend", "tcp://127.0.0.1:7000");
    assert_string_equal (cfg.frontend, "tcp://127.0.0.1:7000");
    SET_OK ("scheduler", "fifo");
    assert_int_equal (cfg.scheduler, ZL_SCHED_FIFO);
    SET_OK ("scheduler", "wfq");
    assert_int_equal (cfg.scheduler, ZL_SCHED_WFQ);
    SET_OK ("auto_lanes", "yes");
    assert_true (cfg.auto_lanes);
    // the file's section name works as a prefix too
    SET_OK ("broker/liveness", "7");
    assert_int_equal (cfg.liveness, 7);
    SET_OK ("defaults/lane/lease", "3s");
    assert_int_equal (cfg.lane_defaults.lease_ms, 3000);
    SET_OK ("defaults/tenant/weight", "2");
    assert_int_equal (cfg.tenant_defaults.weight, 2);
    SET_OK ("lanes/x/weight", "5");
    const zl_lane_config_t *x = s_lane (&cfg, "x");
    assert_non_null (x);
    assert_int_equal (x->weight, 5);
    assert_int_equal (x->lease_ms, 3000); // created from the defaults of the moment
    SET_OK ("lanes/x/max_run", "90s");
    assert_int_equal (s_lane (&cfg, "x")->max_run_ms, 90000);
    SET_OK ("lanes/x/jitter", "off");
    assert_false (s_lane (&cfg, "x")->jitter);
    SET_OK ("tenants/acme/weight", "9");
    assert_int_equal (s_tenant (&cfg, "acme")->weight, 9);
    SET_OK ("tenants/acme/max_in_flight", "12");
    assert_int_equal (s_tenant (&cfg, "acme")->max_in_flight, 12);
    assert_int_equal (cfg.n_lanes, 1);
    assert_int_equal (cfg.n_tenants, 1);

    SET_BAD ("heartbeat", "later", "heartbeat");
    assert_int_equal (cfg.heartbeat_ms, 2000); // unchanged
    SET_BAD ("lanes/x/weight", "0", "weight");
    SET_BAD ("lanes/x/lease", "forever", "lease");
    SET_BAD ("lanes/x/nope", "1", "nope");
    SET_BAD ("tenants/acme/weight", "-3", "weight");
    SET_BAD ("nosuch", "1", "nosuch");
    SET_BAD ("lanes/x", "1", "lanes/x");
    SET_BAD ("nosuch/x/y", "1", "nosuch");
    SET_BAD ("defaults/other/lease", "1s", "defaults");
    zl_broker_config_free (&cfg);
#undef SET_OK
#undef SET_BAD
}

// The store: `data` (a directory: the LMDB store) or `store` (a directory
// or a database), not both; zl_broker_config_store says where it is.
static void
test_store_location (void **state)
{
    (void)state;
    zl_broker_config_t cfg;
    zl_broker_config_defaults (&cfg);
    char err[512] = "";
    assert_null (cfg.store);
    assert_string_equal (zl_broker_config_store (&cfg, err, sizeof err), "./zlane-data");
    // store alone: a database, or a directory
    assert_int_equal (
        zl_broker_config_set (&cfg, "store", "postgresql://zlane:pw@db1/zlane", err, sizeof err),
        0);
    assert_string_equal (zl_broker_config_store (&cfg, err, sizeof err),
                         "postgresql://zlane:pw@db1/zlane");
    assert_int_equal (zl_broker_config_set (&cfg, "broker/store", "/srv/zlane", err, sizeof err),
                      0);
    assert_string_equal (zl_broker_config_store (&cfg, err, sizeof err), "/srv/zlane");
    assert_int_equal (
        zl_broker_config_set (&cfg, "store", "host=db1 password=pw dbname=zlane", err, sizeof err),
        0);
    // and data too: refused, naming both, the password hidden
    assert_int_equal (zl_broker_config_set (&cfg, "data", "/var/lib/zlane", err, sizeof err), 0);
    err[0] = '\0';
    assert_null (zl_broker_config_store (&cfg, err, sizeof err));
    assert_non_null (strstr (err, "both data (/var/lib/zlane) and store"));
    assert_non_null (strstr (err, "password=***"));
    assert_null (strstr (err, "pw "));
    zl_broker_config_free (&cfg);

    // data given alone, even as the default's value, is the LMDB store
    zl_broker_config_defaults (&cfg);
    assert_int_equal (zl_broker_config_set (&cfg, "data", "./zlane-data", err, sizeof err), 0);
    assert_string_equal (zl_broker_config_store (&cfg, err, sizeof err), "./zlane-data");
    // data takes a directory, never a database; store no other URI
    static const struct {
        const char *key, *value, *must_say;
    } bad[] = {
        {"data", "postgresql://db1/zlane", "not a directory"},
        {"data", "host=db1 dbname=zlane", "not a directory"},
        {"data", "", "give a directory"},
        {"store", "mysql://db1/zlane", "neither a directory"},
        {"store", "", "give a directory or a postgresql:// URI"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        if (zl_broker_config_set (&cfg, bad[i].key, bad[i].value, err, sizeof err) != -1)
            fail_msg ("%s = '%s' accepted", bad[i].key, bad[i].value);
        if (!strstr (err, bad[i].key) || !strstr (err, bad[i].must_say))
            fail_msg ("%s = '%s': message '%s'", bad[i].key, bad[i].value, err);
    }
    assert_string_equal (cfg.data_dir, "./zlane-data"); // unchanged
    assert_null (cfg.store);
    zl_broker_config_free (&cfg);

    // both in a file: the same refusal once the file is read
    char *path = s_write_temp ("broker\n"
                               "    data = /tmp/zlane-data-test\n"
                               "    store = \"postgresql://db1/zlane\"\n");
    zl_broker_config_defaults (&cfg);
    if (zl_broker_config_load (&cfg, path, err, sizeof err) != 0)
        fail_msg ("load failed: %s", err);
    assert_string_equal (cfg.store, "postgresql://db1/zlane");
    assert_null (zl_broker_config_store (&cfg, err, sizeof err));
    assert_non_null (strstr (err, "both data"));
    zl_broker_config_free (&cfg);
    s_remove (path);
}

// Brokers sharing a store: the leader's lease (a duration, 100 ms to 5 min,
// 2 s by default) and the host clients are told to reach this broker at
// (none by default: the bind address or the host name).
static void
test_leadership_keys (void **state)
{
    (void)state;
    zl_broker_config_t cfg;
    zl_broker_config_defaults (&cfg);
    assert_int_equal (cfg.leader_lease_ms, 2000);
    assert_null (cfg.advertise);
    char err[512] = "";
    assert_int_equal (zl_broker_config_set (&cfg, "leader_lease", "750ms", err, sizeof err), 0);
    assert_int_equal (cfg.leader_lease_ms, 750);
    assert_int_equal (zl_broker_config_set (&cfg, "broker/leader_lease", "5m", err, sizeof err), 0);
    assert_int_equal (cfg.leader_lease_ms, 300000);
    assert_int_equal (zl_broker_config_set (&cfg, "leader_lease", "100ms", err, sizeof err), 0);
    assert_int_equal (cfg.leader_lease_ms, 100);
    static const char *const bad_lease[] = {"99ms", "301s", "0", "soon", ""};
    for (size_t i = 0; i < sizeof bad_lease / sizeof bad_lease[0]; i++) {
        err[0] = '\0';
        if (zl_broker_config_set (&cfg, "leader_lease", bad_lease[i], err, sizeof err) != -1)
            fail_msg ("leader_lease = '%s' accepted", bad_lease[i]);
        if (!strstr (err, "leader_lease"))
            fail_msg ("leader_lease = '%s': message '%s'", bad_lease[i], err);
    }
    assert_int_equal (cfg.leader_lease_ms, 100); // unchanged by the refusals

    static const char *const good_host[] = {"broker-a.example.net", "10.0.0.5", "localhost",
                                            "fe80::1", "[2001:db8::5]"};
    for (size_t i = 0; i < sizeof good_host / sizeof good_host[0]; i++) {
        if (zl_broker_config_set (&cfg, "advertise", good_host[i], err, sizeof err) != 0)
            fail_msg ("advertise = '%s' refused: %s", good_host[i], err);
        assert_string_equal (cfg.advertise, good_host[i]);
    }
    static const char *const bad_host[] = {
        "",     "tcp://a:5570", "a:5570", "*",   "0.0.0.0", "::",         "[::]",    "a b",
        "[::1", "::1]",         "[a]",    "x/y", "u@h",     "[::1]:5570", "[[::1]]", "a\tb"};
    for (size_t i = 0; i < sizeof bad_host / sizeof bad_host[0]; i++) {
        err[0] = '\0';
        if (zl_broker_config_set (&cfg, "advertise", bad_host[i], err, sizeof err) != -1)
            fail_msg ("advertise = '%s' accepted", bad_host[i]);
        if (!strstr (err, "advertise") || !strstr (err, "not a host name or address"))
            fail_msg ("advertise = '%s': message '%s'", bad_host[i], err);
    }
    assert_string_equal (cfg.advertise, "[2001:db8::5]"); // unchanged
    zl_broker_config_free (&cfg);

    // in a file, as everything else
    char *path = s_write_temp ("broker\n"
                               "    leader_lease = 3s\n"
                               "    advertise = zlane-1.internal\n");
    zl_broker_config_defaults (&cfg);
    if (zl_broker_config_load (&cfg, path, err, sizeof err) != 0)
        fail_msg ("load failed: %s", err);
    assert_int_equal (cfg.leader_lease_ms, 3000);
    assert_string_equal (cfg.advertise, "zlane-1.internal");
    zl_broker_config_free (&cfg);
    s_remove (path);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test (test_defaults),
        cmocka_unit_test (test_load_file),
        cmocka_unit_test (test_undeclared_lane_without_auto_lanes),
        cmocka_unit_test (test_bad_values_name_the_key),
        cmocka_unit_test (test_missing_file),
        cmocka_unit_test (test_empty_file_keeps_defaults),
        cmocka_unit_test (test_set_keys),
        cmocka_unit_test (test_store_location),
        cmocka_unit_test (test_leadership_keys),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
