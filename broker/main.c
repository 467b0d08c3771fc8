/*  zlane-broker: command line, config file, signals; then the loop. */
#include "broker.h"
#include "config.h"
#include "log.h"

#include <czmq.h>
#include <getopt.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile int s_stop = 0;

static void
s_on_signal (int sig)
{
    (void)sig;
    s_stop = 1;
}

/*  How far reading the command line got: on, or stop with exit 0 (--help)
    or 2 (a bad flag, value or config file). */
typedef enum { S_GO = 0, S_DONE, S_BAD } s_step_t;

typedef struct {
    zl_broker_config_t *cfg;
    int verbose; // -v given this many times
} s_cli_t;

/*  The work of a flag that does more than set one config key. `value` is
    its argument (NULL for a flag that takes none). Returns S_GO, S_DONE, or
    S_BAD with the reason in `err`. */
typedef s_step_t (s_flag_fn) (s_cli_t *cli, char *value, char *err, size_t errlen);

/*  A flag: its names, what it does (set `key` to its argument, or to
    `fixed` if it takes none; or call `fn`) and its line in --help. */
typedef struct {
    char short_name;   // 0: long only
    const char *name;  // long name, after "--"
    const char *arg;   // its argument's name in --help; NULL: the flag takes none
    const char *key;   // the config key it sets (zl_broker_config_set) ...
    const char *fixed; // ... to this, for a flag without an argument
    s_flag_fn *fn;     // or, with no key, this does the work
    const char *help;  // a '\n' continues it on the next line, under its start
} s_flag_t;

static s_step_t s_flag_config (s_cli_t *cli, char *value, char *err, size_t errlen);
static s_step_t s_flag_lane (s_cli_t *cli, char *value, char *err, size_t errlen);
static s_step_t s_flag_set (s_cli_t *cli, char *value, char *err, size_t errlen);
static s_step_t s_flag_verbose (s_cli_t *cli, char *value, char *err, size_t errlen);
static s_step_t s_flag_help (s_cli_t *cli, char *value, char *err, size_t errlen);

// clang-format off
#define KEY(name, arg, key, help) {0, name, arg, key, NULL, NULL, help}
#define SWITCH(name, key, fixed, help) {0, name, NULL, key, fixed, NULL, help}
#define FN(short_name, name, arg, fn, help) {short_name, name, arg, NULL, NULL, fn, help}
// clang-format on

/*  Every flag, in --help order. */
static const s_flag_t s_flags[] = {
    FN ('c', "config", "FILE", s_flag_config, "zconfig file (see deploy/broker.cfg)"),
    KEY ("frontend", "EP", "frontend", "producer endpoint        [tcp://127.0.0.1:5570]"),
    KEY ("backend", "EP", "backend", "worker endpoint          [tcp://127.0.0.1:5571]"),
    KEY ("events", "EP", "events", "DLQ events PUB endpoint  [tcp://127.0.0.1:5572]"),
    KEY ("admin", "EP", "admin", "admin endpoint           [tcp://127.0.0.1:5573]"),
    KEY ("metrics", "EP", "metrics", "Prometheus page, GET /metrics (plain HTTP) [none]"),
    KEY ("ports-file", "FILE", "ports_file", "write the bound endpoints here (for port 0 / '*')"),
    KEY ("data", "DIR", "data", "data directory           [./zlane-data]"),
    KEY ("store", "LOC", "store",
         "the store, instead of --data: a directory (LMDB)\n"
         "or postgresql://... (brokers sharing it: one leads) [--data]"),
    KEY ("durability", "MODE", "durability", "fsync | none             [fsync]"),
    SWITCH ("dispatch-after-commit", "dispatch_after_commit", "true",
            "no job starts before its lease is committed"),
    SWITCH ("commit-on-loop", "commit_on_loop", "true",
            "fsync on LMDB: commit on the loop's thread, not\n"
            "the store's own (every turn waits for its flushes)"),
    KEY ("commit-interval", "DUR", "commit_interval",
         "fsync on LMDB: under a steady stream, commits at\n"
         "most this often; a lone job's at once      [5ms]"),
    KEY ("map-size", "SIZE", "map_size", "the store's size limit   [4GiB]"),
    KEY ("scheduler", "S", "scheduler", "wfq | fifo               [wfq]"),
    KEY ("wfq-quantum-us", "N", "wfq_quantum_us",
         "wfq: tenants within N us of worker time / weight\n"
         "of each other go in arrival order, 0 = exact [1000]"),
    FN (0, "lane", "NAME[:WEIGHT]", s_flag_lane, "declare a lane (repeatable)"),
    SWITCH ("auto-lanes", "auto_lanes", "true", "create undeclared lanes on first use"),
    KEY ("default-lane", "NAME", "default_lane", "jobs for undeclared lanes go to this lane"),
    KEY ("max-payload", "SIZE", "max_payload", "largest payload accepted [1MiB]"),
    KEY ("max-depth", "N", "max_depth", "most jobs queued in all  [10000000]"),
    KEY ("producer-window", "N", "producer_window", "most credit one producer holds [20000]"),
    KEY ("heartbeat", "DUR", "heartbeat", "heartbeat interval       [1s]"),
    KEY ("liveness", "N", "liveness", "missed heartbeats before a worker is dead [3]"),
    KEY ("lease", "DUR", "defaults/lane/lease", "default lease            [30s]"),
    KEY ("max-attempts", "N", "defaults/lane/max_attempts", "default attempts before the DLQ [5]"),
    KEY ("backoff-base", "DUR", "defaults/lane/backoff_base", "retry backoff base       [1s]"),
    KEY ("backoff-cap", "DUR", "defaults/lane/backoff_cap", "retry backoff cap        [5m]"),
    SWITCH ("no-jitter", "defaults/lane/jitter", "false",
            "retry at the backoff bound (experiments only)"),
    KEY ("max-run", "DUR", "defaults/lane/max_run", "default max run time, 0 = none [0]"),
    KEY ("dlq-alert", "DUR", "dlq_alert_interval", "alert.dlq event interval [10s]"),
    KEY ("dlq-retention", "DUR", "dlq_retention",
         "purge dead letters older than this, 0 = keep [0]"),
    KEY ("dedup-window", "DUR", "dedup_window", "idempotency key window   [24h]"),
    KEY ("max-result", "SIZE", "max_result", "largest job result an Ack may carry [64KiB]"),
    KEY ("max-checkpoint", "SIZE", "max_checkpoint",
         "largest progress checkpoint an Extend may carry [64KiB]"),
    KEY ("result-retention", "DUR", "result_retention",
         "kept outcomes (results, cancelled jobs) are\n"
         "forgotten after this [24h]"),
    KEY ("max-fan-in", "N", "max_fan_in", "most parents one job may depend on [1000]"),
    KEY ("resend-window", "DUR", "resend_window",
         "window of keys a client library made for its\n"
         "own resends (longer than job deadlines) [10m]"),
    KEY ("dedup-max-keys", "N", "dedup_max_keys",
         "most idempotency keys kept, 0 = a quarter of\n"
         "map_size at 140 bytes a key [0]"),
    SWITCH ("curve", "curve", "true", "CURVE encryption + authentication on every socket"),
    KEY ("cert", "FILE", "cert", "the broker's secret certificate (zlane-ctl keygen)"),
    KEY ("clients", "DIR", "clients",
         "public certificates of the clients allowed in; each\n"
         "carries role, tenants and lanes (zlane-ctl keygen)"),
    SWITCH ("insecure", "insecure", "true", "allow non-loopback endpoints without CURVE (warns)"),
    KEY ("leader-lease", "DUR", "leader_lease",
         "brokers sharing a store: the leader's lease; a\n"
         "standby takes over once it lapses [2s]"),
    KEY ("advertise", "HOST", "advertise",
         "the host clients reach this broker at, named in a\n"
         "standby's NOT_LEADER [the bind address, or the host name]"),
    FN (0, "set", "KEY=VALUE", s_flag_set, "any config key, e.g. lanes/chat/rate=50"),
    FN ('v', "verbose", NULL, s_flag_verbose, "debug logging (twice: protocol trace)"),
    FN ('h', "help", NULL, s_flag_help, "this help"),
};
#undef KEY
#undef SWITCH
#undef FN
#define S_N_FLAGS (sizeof s_flags / sizeof s_flags[0])
#define S_LONG_ONLY 256 // getopt_long's value for s_flags[i] without a short name: S_LONG_ONLY + i
#define S_HELP_WIDTH 20 // --help: "  -c, " then "--name ARG" padded to this, a space, the text

static void
s_usage (FILE *out)
{
    fprintf (out, "Usage: zlane-broker [OPTIONS]\n"
                  "\n"
                  "The zlane job broker: accepts jobs from producers, leases them to workers,\n"
                  "retries failures with backoff and parks poison jobs in a dead-letter queue.\n"
                  "\n"
                  "Options (each also settable in the config file; flags win):\n");
    for (size_t i = 0; i < S_N_FLAGS; i++) {
        const s_flag_t *f = &s_flags[i];
        char short_part[5] = "", long_part[64];
        if (f->short_name)
            snprintf (short_part, sizeof short_part, "-%c, ", f->short_name);
        snprintf (long_part, sizeof long_part, "--%s%s%s", f->name, f->arg ? " " : "",
                  f->arg ? f->arg : "");
        fprintf (out, "  %-4s%-*s ", short_part, S_HELP_WIDTH, long_part);
        for (const char *c = f->help; *c; c++)
            if (*c == '\n')
                fprintf (out, "\n%*s", 2 + 4 + S_HELP_WIDTH + 1, "");
            else
                fputc (*c, out);
        fputc ('\n', out);
    }
    fprintf (out, "\n"
                  "Durations take ms, s, m, h suffixes; sizes take KiB, MiB, GiB.\n");
}

static s_step_t
s_set (s_cli_t *cli, const char *key, const char *value, char *err, size_t errlen)
{
    return zl_broker_config_set (cli->cfg, key, value, err, errlen) == 0 ? S_GO : S_BAD;
}

// The config files were read before the flags (s_read_config_files).
static s_step_t
s_flag_config (s_cli_t *cli, char *value, char *err, size_t errlen)
{
    return S_GO;
}

// NAME[:WEIGHT]: lanes/NAME/weight, 1 without a weight.
static s_step_t
s_flag_lane (s_cli_t *cli, char *value, char *err, size_t errlen)
{
    char name[200];
    snprintf (name, sizeof name, "%s", value);
    char *colon = strchr (name, ':');
    const char *weight = "1";
    if (colon) {
        *colon = '\0';
        weight = colon + 1;
    }
    if (!name[0]) {
        snprintf (err, errlen, "--lane needs a name");
        return S_BAD;
    }
    char key[300];
    snprintf (key, sizeof key, "lanes/%s/weight", name);
    return s_set (cli, key, weight, err, errlen);
}

// KEY=VALUE, any key zl_broker_config_set takes.
static s_step_t
s_flag_set (s_cli_t *cli, char *value, char *err, size_t errlen)
{
    char *eq = strchr (value, '=');
    if (!eq) {
        snprintf (err, errlen, "--set wants KEY=VALUE, got '%s'", value);
        return S_BAD;
    }
    *eq = '\0'; // cuts the argument in argv in two
    return s_set (cli, value, eq + 1, err, errlen);
}

static s_step_t
s_flag_verbose (s_cli_t *cli, char *value, char *err, size_t errlen)
{
    cli->verbose++;
    return S_GO;
}

static s_step_t
s_flag_help (s_cli_t *cli, char *value, char *err, size_t errlen)
{
    s_usage (stdout);
    return S_DONE;
}

/*  Read the config files that -c/--config name, in order, so that the flags
    override them. */
static s_step_t
s_read_config_files (zl_broker_config_t *cfg, int argc, char **argv, char *err, size_t errlen)
{
    for (int i = 1; i < argc; i++) {
        const char *path = NULL;
        if ((!strcmp (argv[i], "-c") || !strcmp (argv[i], "--config")) && i + 1 < argc)
            path = argv[i + 1];
        else if (!strncmp (argv[i], "--config=", 9))
            path = argv[i] + 9;
        if (path && zl_broker_config_load (cfg, path, err, errlen) != 0)
            return S_BAD;
    }
    return S_GO;
}

/*  Carry out the flags in order. A flag getopt refuses (it says why) prints
    the usage and returns S_BAD with `err` empty. */
static s_step_t
s_read_flags (s_cli_t *cli, int argc, char **argv, char *err, size_t errlen)
{
    struct option opts[S_N_FLAGS + 1];
    char shorts[2 * S_N_FLAGS + 1];
    size_t n_shorts = 0;
    for (size_t i = 0; i < S_N_FLAGS; i++) {
        const s_flag_t *f = &s_flags[i];
        int val = f->short_name ? f->short_name : S_LONG_ONLY + (int)i;
        opts[i] = (struct option){f->name, f->arg ? required_argument : no_argument, NULL, val};
        if (f->short_name) {
            shorts[n_shorts++] = f->short_name;
            if (f->arg)
                shorts[n_shorts++] = ':';
        }
    }
    opts[S_N_FLAGS] = (struct option){0};
    shorts[n_shorts] = '\0';

    int c;
    while ((c = getopt_long (argc, argv, shorts, opts, NULL)) != -1) {
        const s_flag_t *f = NULL;
        if (c >= S_LONG_ONLY && c < S_LONG_ONLY + (int)S_N_FLAGS)
            f = &s_flags[c - S_LONG_ONLY];
        for (size_t i = 0; !f && i < S_N_FLAGS; i++)
            if (s_flags[i].short_name && s_flags[i].short_name == c)
                f = &s_flags[i];
        if (!f) { // '?'
            s_usage (stderr);
            err[0] = '\0';
            return S_BAD;
        }
        s_step_t step = f->fn ? f->fn (cli, optarg, err, errlen)
                              : s_set (cli, f->key, f->arg ? optarg : f->fixed, err, errlen);
        if (step != S_GO)
            return step;
    }
    if (optind < argc) {
        snprintf (err, errlen, "unexpected argument '%s' (see --help)", argv[optind]);
        return S_BAD;
    }
    return S_GO;
}

/*  What the flags and files must say together: one store, some lane, and a
    default lane that exists. */
static s_step_t
s_check (const zl_broker_config_t *cfg, char *err, size_t errlen)
{
    if (!zl_broker_config_store (cfg, err, errlen))
        return S_BAD;
    if (cfg->n_lanes == 0 && !cfg->auto_lanes) {
        snprintf (err, errlen,
                  "no lanes declared: use --lane NAME, a lanes section in the config "
                  "file, or --auto-lanes");
        return S_BAD;
    }
    if (cfg->default_lane) {
        bool declared = false;
        for (size_t i = 0; i < cfg->n_lanes; i++)
            declared |= !strcmp (cfg->lanes[i].name, cfg->default_lane);
        if (!declared && !cfg->auto_lanes) {
            snprintf (err, errlen, "default lane '%s' is not declared", cfg->default_lane);
            return S_BAD;
        }
    }
    return S_GO;
}

int
main (int argc, char **argv)
{
    zl_log_set_program ("zlane-broker");
#ifdef __GLIBC__
    //  Blocks of 4 MiB and more (a large batch's overlay, a queue's array
    //  as it grows) come from mmap and go back to the system when freed.
    //  glibc's default raises the threshold after each such free, up to
    //  32 MiB, so that the next large blocks come from the heap, where the
    //  job records allocated around them pin the space once freed: with the
    //  commit thread's batches that cost about 20 bytes of RSS per queued
    //  job (bench/RESULTS.md). Not lower: LMDB allocates 3 MiB for each
    //  nested transaction (a Submit's), which must stay on the heap, and
    //  the heap must not give it back to the system at each free (glibc's
    //  trim threshold, which a fixed mmap threshold leaves at 128 KiB: a
    //  brk up and down each Submit, 30 % of the loop's time at low load).
    mallopt (M_MMAP_THRESHOLD, 4 << 20);
    mallopt (M_TRIM_THRESHOLD, 8 << 20);
#endif
    zl_broker_config_t cfg;
    zl_broker_config_defaults (&cfg);
    s_cli_t cli = {.cfg = &cfg};
    char err[512] = "";

    s_step_t step = s_read_config_files (&cfg, argc, argv, err, sizeof err);
    if (step == S_GO)
        step = s_read_flags (&cli, argc, argv, err, sizeof err);
    if (step == S_GO)
        step = s_check (&cfg, err, sizeof err);
    if (step != S_GO) {
        if (step == S_BAD && err[0])
            fprintf (stderr, "zlane-broker: %s\n", err);
        zl_broker_config_free (&cfg);
        return step == S_DONE ? 0 : 2;
    }
    zl_log_set_level (cli.verbose >= 2 ? ZL_LOG_TRACE : cli.verbose ? ZL_LOG_DEBUG : ZL_LOG_INFO);

    zsys_handler_set (NULL); // our own signal handling, not czmq's
    zsys_init ();
    struct sigaction sa;
    memset (&sa, 0, sizeof sa);
    sa.sa_handler = s_on_signal;
    sigaction (SIGINT, &sa, NULL);
    sigaction (SIGTERM, &sa, NULL);
    signal (SIGPIPE, SIG_IGN);

    zl_broker_t *broker = zl_broker_new (&cfg, err, sizeof err);
    if (!broker) {
        fprintf (stderr, "zlane-broker: %s\n", err);
        zl_broker_config_free (&cfg);
        return 1;
    }
    int rc = zl_broker_run (broker, &s_stop);
    zl_info ("broker", rc == 0 ? "stopping" : "stopping after a store failure");
    zl_broker_destroy (&broker);
    zl_broker_config_free (&cfg);
    zsys_shutdown ();
    return rc == 0 ? 0 : 1;
}
