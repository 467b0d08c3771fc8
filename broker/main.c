/*  zlane-broker: command line, config file, signals; then the loop. */
#include "broker.h"
#include "config.h"
#include "log.h"

#include <czmq.h>
#include <getopt.h>
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

static void
s_usage (FILE *out)
{
    fprintf (out, "Usage: zlane-broker [OPTIONS]\n"
                  "\n"
                  "The zlane job broker: accepts jobs from producers, leases them to workers,\n"
                  "retries failures with backoff and parks poison jobs in a dead-letter queue.\n"
                  "\n"
                  "Options (each also settable in the config file; flags win):\n"
                  "  -c, --config FILE        zconfig file (see deploy/broker.cfg)\n"
                  "      --frontend EP        producer endpoint        [tcp://127.0.0.1:5570]\n"
                  "      --backend EP         worker endpoint          [tcp://127.0.0.1:5571]\n"
                  "      --events EP          DLQ events PUB endpoint  [tcp://127.0.0.1:5572]\n"
                  "      --admin EP           admin endpoint           [tcp://127.0.0.1:5573]\n"
                  "      --metrics EP         Prometheus page, GET /metrics (plain HTTP) [none]\n"
                  "      --ports-file FILE    write the bound endpoints here (for port 0 / '*')\n"
                  "      --data DIR           data directory           [./zlane-data]\n"
                  "      --durability MODE    fsync | none             [fsync]\n"
                  "      --map-size SIZE      the store's size limit   [4GiB]\n"
                  "      --scheduler S        wfq | fifo               [wfq]\n"
                  "      --wfq-quantum-us N   wfq: tenants within N us of worker time / weight\n"
                  "                           of each other go in arrival order, 0 = exact [1000]\n"
                  "      --lane NAME[:WEIGHT] declare a lane (repeatable)\n"
                  "      --auto-lanes         create undeclared lanes on first use\n"
                  "      --default-lane NAME  jobs for undeclared lanes go to this lane\n"
                  "      --max-payload SIZE   largest payload accepted [1MiB]\n"
                  "      --max-depth N        most jobs queued in all  [10000000]\n"
                  "      --producer-window N  most credit one producer holds [20000]\n"
                  "      --heartbeat DUR      heartbeat interval       [1s]\n"
                  "      --liveness N         missed heartbeats before a worker is dead [3]\n"
                  "      --lease DUR          default lease            [30s]\n"
                  "      --max-attempts N     default attempts before the DLQ [5]\n"
                  "      --backoff-base DUR   retry backoff base       [1s]\n"
                  "      --backoff-cap DUR    retry backoff cap        [5m]\n"
                  "      --no-jitter          retry at the backoff bound (experiments only)\n"
                  "      --max-run DUR        default max run time, 0 = none [0]\n"
                  "      --dlq-alert DUR      alert.dlq event interval [10s]\n"
                  "      --dlq-retention DUR  purge dead letters older than this, 0 = keep [0]\n"
                  "      --dedup-window DUR   idempotency key window   [24h]\n"
                  "      --resend-window DUR  window of keys a client library made for its\n"
                  "                           own resends (longer than job deadlines) [10m]\n"
                  "      --dedup-max-keys N   most idempotency keys kept, 0 = a quarter of\n"
                  "                           map_size at 140 bytes a key [0]\n"
                  "      --curve              CURVE encryption + authentication on every socket\n"
                  "      --cert FILE          the broker's secret certificate (zlane-ctl keygen)\n"
                  "      --clients DIR        public certificates of the clients allowed in; each\n"
                  "                           carries role, tenants and lanes (zlane-ctl keygen)\n"
                  "      --insecure           allow non-loopback endpoints without CURVE (warns)\n"
                  "      --set KEY=VALUE      any config key, e.g. lanes/chat/rate=50\n"
                  "  -v, --verbose            debug logging (twice: protocol trace)\n"
                  "  -h, --help               this help\n"
                  "\n"
                  "Durations take ms, s, m, h suffixes; sizes take KiB, MiB, GiB.\n");
}

int
main (int argc, char **argv)
{
    zl_log_set_program ("zlane-broker");
    zl_broker_config_t cfg;
    zl_broker_config_defaults (&cfg);
    char err[512];

    enum {
        O_FRONTEND = 256,
        O_BACKEND,
        O_EVENTS,
        O_ADMIN,
        O_METRICS,
        O_PORTS,
        O_DATA,
        O_DUR,
        O_MAP,
        O_SCHED,
        O_QUANTUM,
        O_LANE,
        O_AUTO,
        O_DEFLANE,
        O_MAXPAY,
        O_DEPTH,
        O_WINDOW,
        O_HB,
        O_LIVE,
        O_LEASE,
        O_ATTEMPTS,
        O_BBASE,
        O_BCAP,
        O_NOJIT,
        O_MAXRUN,
        O_ALERT,
        O_DEDUP,
        O_RESEND,
        O_MAXKEYS,
        O_DLQ_RETENTION,
        O_SET,
        O_CURVE,
        O_CERT,
        O_CLIENTS,
        O_INSECURE
    };
    static const struct option opts[] = {{"config", required_argument, 0, 'c'},
                                         {"frontend", required_argument, 0, O_FRONTEND},
                                         {"backend", required_argument, 0, O_BACKEND},
                                         {"events", required_argument, 0, O_EVENTS},
                                         {"admin", required_argument, 0, O_ADMIN},
                                         {"metrics", required_argument, 0, O_METRICS},
                                         {"ports-file", required_argument, 0, O_PORTS},
                                         {"data", required_argument, 0, O_DATA},
                                         {"durability", required_argument, 0, O_DUR},
                                         {"map-size", required_argument, 0, O_MAP},
                                         {"scheduler", required_argument, 0, O_SCHED},
                                         {"wfq-quantum-us", required_argument, 0, O_QUANTUM},
                                         {"lane", required_argument, 0, O_LANE},
                                         {"auto-lanes", no_argument, 0, O_AUTO},
                                         {"default-lane", required_argument, 0, O_DEFLANE},
                                         {"max-payload", required_argument, 0, O_MAXPAY},
                                         {"max-depth", required_argument, 0, O_DEPTH},
                                         {"producer-window", required_argument, 0, O_WINDOW},
                                         {"heartbeat", required_argument, 0, O_HB},
                                         {"liveness", required_argument, 0, O_LIVE},
                                         {"lease", required_argument, 0, O_LEASE},
                                         {"max-attempts", required_argument, 0, O_ATTEMPTS},
                                         {"backoff-base", required_argument, 0, O_BBASE},
                                         {"backoff-cap", required_argument, 0, O_BCAP},
                                         {"no-jitter", no_argument, 0, O_NOJIT},
                                         {"max-run", required_argument, 0, O_MAXRUN},
                                         {"dlq-alert", required_argument, 0, O_ALERT},
                                         {"dedup-window", required_argument, 0, O_DEDUP},
                                         {"resend-window", required_argument, 0, O_RESEND},
                                         {"dedup-max-keys", required_argument, 0, O_MAXKEYS},
                                         {"dlq-retention", required_argument, 0, O_DLQ_RETENTION},
                                         {"set", required_argument, 0, O_SET},
                                         {"curve", no_argument, 0, O_CURVE},
                                         {"cert", required_argument, 0, O_CERT},
                                         {"clients", required_argument, 0, O_CLIENTS},
                                         {"insecure", no_argument, 0, O_INSECURE},
                                         {"verbose", no_argument, 0, 'v'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};

    // the config file first, so that flags override it
    for (int i = 1; i < argc; i++) {
        const char *path = NULL;
        if ((!strcmp (argv[i], "-c") || !strcmp (argv[i], "--config")) && i + 1 < argc)
            path = argv[i + 1];
        else if (!strncmp (argv[i], "--config=", 9))
            path = argv[i] + 9;
        if (path && zl_broker_config_load (&cfg, path, err, sizeof err) != 0) {
            fprintf (stderr, "zlane-broker: %s\n", err);
            {
                zl_broker_config_free (&cfg);
                return 2;
            }
        }
    }
    int verbose = 0, c;
    while ((c = getopt_long (argc, argv, "c:vh", opts, NULL)) != -1) {
        const char *key = NULL;
        char lane_key[300];
        switch (c) {
        case 'c': break;
        case 'v': verbose++; break;
        case 'h':
            s_usage (stdout);
            zl_broker_config_free (&cfg);
            return 0;
        case O_FRONTEND: key = "frontend"; break;
        case O_BACKEND: key = "backend"; break;
        case O_EVENTS: key = "events"; break;
        case O_ADMIN: key = "admin"; break;
        case O_METRICS: key = "metrics"; break;
        case O_PORTS: key = "ports_file"; break;
        case O_DATA: key = "data"; break;
        case O_DUR: key = "durability"; break;
        case O_MAP: key = "map_size"; break;
        case O_SCHED: key = "scheduler"; break;
        case O_QUANTUM: key = "wfq_quantum_us"; break;
        case O_AUTO:
            key = "auto_lanes";
            optarg = "true";
            break;
        case O_DEFLANE: key = "default_lane"; break;
        case O_MAXPAY: key = "max_payload"; break;
        case O_DEPTH: key = "max_depth"; break;
        case O_WINDOW: key = "producer_window"; break;
        case O_HB: key = "heartbeat"; break;
        case O_LIVE: key = "liveness"; break;
        case O_ALERT: key = "dlq_alert_interval"; break;
        case O_DEDUP: key = "dedup_window"; break;
        case O_RESEND: key = "resend_window"; break;
        case O_MAXKEYS: key = "dedup_max_keys"; break;
        case O_DLQ_RETENTION: key = "dlq_retention"; break;
        case O_CURVE:
            key = "curve";
            optarg = "true";
            break;
        case O_CERT: key = "cert"; break;
        case O_CLIENTS: key = "clients"; break;
        case O_INSECURE:
            key = "insecure";
            optarg = "true";
            break;
        case O_LEASE: key = "defaults/lane/lease"; break;
        case O_ATTEMPTS: key = "defaults/lane/max_attempts"; break;
        case O_BBASE: key = "defaults/lane/backoff_base"; break;
        case O_BCAP: key = "defaults/lane/backoff_cap"; break;
        case O_NOJIT:
            key = "defaults/lane/jitter";
            optarg = "false";
            break;
        case O_MAXRUN: key = "defaults/lane/max_run"; break;
        case O_LANE: {
            char name[200];
            snprintf (name, sizeof name, "%s", optarg);
            char *colon = strchr (name, ':');
            const char *weight = "1";
            if (colon) {
                *colon = '\0';
                weight = colon + 1;
            }
            if (!name[0]) {
                fprintf (stderr, "zlane-broker: --lane needs a name\n");
                {
                    zl_broker_config_free (&cfg);
                    return 2;
                }
            }
            snprintf (lane_key, sizeof lane_key, "lanes/%s/weight", name);
            key = lane_key;
            optarg = (char *)weight;
            break;
        }
        case O_SET: {
            char *eq = strchr (optarg, '=');
            if (!eq) {
                fprintf (stderr, "zlane-broker: --set wants KEY=VALUE, got '%s'\n", optarg);
                {
                    zl_broker_config_free (&cfg);
                    return 2;
                }
            }
            *eq = '\0';
            key = optarg;
            optarg = eq + 1;
            break;
        }
        default:
            s_usage (stderr);
            {
                zl_broker_config_free (&cfg);
                return 2;
            }
        }
        if (key && zl_broker_config_set (&cfg, key, optarg, err, sizeof err) != 0) {
            fprintf (stderr, "zlane-broker: %s\n", err);
            {
                zl_broker_config_free (&cfg);
                return 2;
            }
        }
    }
    if (optind < argc) {
        fprintf (stderr, "zlane-broker: unexpected argument '%s' (see --help)\n", argv[optind]);
        {
            zl_broker_config_free (&cfg);
            return 2;
        }
    }
    zl_log_set_level (verbose >= 2 ? ZL_LOG_TRACE : verbose ? ZL_LOG_DEBUG : ZL_LOG_INFO);
    if (cfg.n_lanes == 0 && !cfg.auto_lanes) {
        fprintf (stderr, "zlane-broker: no lanes declared: use --lane NAME, a lanes section "
                         "in the config file, or --auto-lanes\n");
        {
            zl_broker_config_free (&cfg);
            return 2;
        }
    }

    if (cfg.default_lane) {
        bool declared = false;
        for (size_t i = 0; i < cfg.n_lanes; i++)
            declared |= !strcmp (cfg.lanes[i].name, cfg.default_lane);
        if (!declared && !cfg.auto_lanes) {
            fprintf (stderr, "zlane-broker: default lane '%s' is not declared\n", cfg.default_lane);
            {
                zl_broker_config_free (&cfg);
                return 2;
            }
        }
    }
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
