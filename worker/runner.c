/*  zlane-worker: run a shell command for every job a zlane broker leases us.
    The command line becomes a zl_worker_opts_t and a zl_exec_t; the
    library does the protocol, exec.c does the child. SIGINT/SIGTERM stop
    the worker gracefully; a second one hurries it up. */
#include "exec.h"
#include "log.h"
#include "wire.h"
#include "zl_alloc.h"
#include "zlane_worker.h"

#include <czmq.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_COMPONENT "runner"

static const char *s_usage =
    "Usage: zlane-worker --lanes LANE[,LANE...] --exec CMD [options]\n"
    "\n"
    "Serve jobs from a zlane broker by running CMD (via /bin/sh -c) once per job.\n"
    "\n"
    "Options:\n"
    "  --config FILE       read these options from the 'worker' section of a zconfig\n"
    "                      file (see deploy/worker.cfg); flags given here win\n"
    "  --broker EP[,EP...] broker backend endpoint (default tcp://127.0.0.1:5571);\n"
    "                      several brokers sharing a store: one at a time, the next\n"
    "                      when it goes silent, the leader when a standby says\n"
    "                      NOT_LEADER (Ready again there)\n"
    "  --curve-server FILE the broker's public certificate: talk CURVE (one for\n"
    "                      every broker of the list: they share a key)\n"
    "  --cert FILE         this worker's secret certificate (NAME_secret from\n"
    "                      zlane-ctl keygen NAME --role worker --lanes LIST); the\n"
    "                      broker refuses a Ready for lanes the key is not bound to\n"
    "  --lanes LIST        comma-separated lanes to serve (required)\n"
    "  --exec CMD          shell command run for each job (required)\n"
    "  --concurrency N     jobs run at once (default 1)\n"
    "  --prefetch N        extra jobs held beyond concurrency (default 0)\n"
    "  --name NAME         worker name in the broker's logs (default <hostname>-<pid>)\n"
    "  --heartbeat DUR     heartbeat interval, stated to the broker (default 1s)\n"
    "  --liveness N        missed heartbeats (the longer of ours and the broker's)\n"
    "                      before reconnecting (default 3)\n"
    "  --no-extend         never extend leases (for tests of lapsed leases)\n"
    "  --ack-early         UNSAFE: ack each job before running it (at-most-once;\n"
    "                      failures and crashes lose jobs). For experiments only.\n"
    "  --kill-grace DUR    SIGTERM -> SIGKILL delay for cancelled jobs, and how long\n"
    "                      running jobs may finish after a stop signal (default 2s)\n"
    "  -v, --verbose       more logging (-v: every job, -vv: protocol trace)\n"
    "  -h, --help          show this help\n"
    "\n"
    "Durations take a unit: 250ms, 2s, 1m (a bare number means milliseconds).\n"
    "\n"
    "The job reaches CMD as:\n"
    "  stdin                 the payload: a regular file holding all of it before CMD\n"
    "                        starts\n"
    "  ZLANE_JOB_ID, ZLANE_ATTEMPT (1 = first), ZLANE_TENANT, ZLANE_LANE,\n"
    "  ZLANE_IDEMPOTENCY_KEY (pass it downstream), ZLANE_LEASE_MS, ZLANE_MAX_RUN_MS,\n"
    "  ZLANE_MAX_ATTEMPTS, ZLANE_ENQUEUED_AT_MS, ZLANE_WORKER, ZLANE_ORDERING_KEY\n"
    "  ZLANE_CHECKPOINT      a file holding the job's last checkpoint (empty: none);\n"
    "                        replace it (write a temp file, rename) to save progress\n"
    "  ZLANE_HEADER_<KEY>    each header; KEY uppercased, other than A-Z 0-9 -> '_'\n"
    "CMD's stdout goes to the worker's stdout; its stderr is captured.\n"
    "\n"
    "Exit status of CMD:\n"
    "  0    done: Ack\n"
    "  65   EX_DATAERR, bad input: PERMANENT failure, dead-lettered at once\n"
    "  75   EX_TEMPFAIL: THROTTLED, retried after the duration on the last stderr\n"
    "       line of the form 'retry-after=<duration>' (e.g. retry-after=5s), else 1s\n"
    "  any other status, or death by a signal: TRANSIENT failure, retried with\n"
    "       backoff until the job's max attempts\n"
    "The error recorded with a failure is the last 1 KiB of stderr plus\n"
    "'exit status N' or 'killed by signal S'.\n"
    "\n"
    "Leases are extended while CMD runs. If the lease is lost (or the job's max\n"
    "run time passes) CMD's process group gets SIGTERM, then SIGKILL after\n"
    "--kill-grace, and the attempt is reported TRANSIENT. The same happens when\n"
    "an operator cancels the job (zlane-ctl cancel): the broker sends Cancel, and\n"
    "the job ends cancelled whatever is reported. If the worker dies, even\n"
    "by SIGKILL, CMD's process group is SIGKILLed by the job's guard process.\n"
    "\n"
    "SIGINT/SIGTERM: stop taking work (unstarted jobs are handed back), let running\n"
    "jobs finish for up to --kill-grace, then cancel them as above, and exit once\n"
    "the broker confirmed every result. A second signal cancels running jobs at once.\n";

static zl_worker_t *s_worker;     // for the signal handler
static char *s_config_values[64]; // option values read from --config (owned)
static size_t s_n_config_values;

/*  --config FILE: the "worker" section of a zconfig file, turned into the
    equivalent flags placed before the command line's own (so flags win).
    Keys are the long option names with '_' for '-'; `extend = false` is
    --no-extend. Returns a new argv (caller frees the array only) or NULL
    after printing why. */
static char **
s_config_argv (int argc, char **argv, int *argc_out)
{
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp (argv[i], "--config") && i + 1 < argc)
            path = argv[i + 1];
        else if (!strncmp (argv[i], "--config=", 9))
            path = argv[i] + 9;
    }
    char **out = zl_calloc ((size_t)argc + 64, sizeof (char *));
    int n = 0;
    out[n++] = argv[0];
    if (path) {
        zconfig_t *root = zconfig_load (path);
        if (!root) {
            fprintf (stderr, "zlane-worker: cannot read config file '%s'\n", path);
            free (out);
            return NULL;
        }
        zconfig_t *sec = zconfig_locate (root, "worker");
        for (zconfig_t *k = sec ? zconfig_child (sec) : NULL; k && n < 60; k = zconfig_next (k)) {
            static char flags[64][64];
            const char *name = zconfig_name (k), *value = zconfig_value (k);
            if (!value)
                value = "";
            if (!strcmp (name, "extend")) {
                if (!strcmp (value, "false") || !strcmp (value, "0") || !strcmp (value, "no"))
                    out[n++] = "--no-extend";
                continue;
            }
            snprintf (flags[n], sizeof flags[n], "--%s", name);
            for (char *c = flags[n]; *c; c++)
                if (*c == '_')
                    *c = '-';
            out[n] = flags[n];
            n++;
            out[n++] = s_config_values[s_n_config_values++] = zl_strdup (value);
        }
        zconfig_destroy (&root); // the names and values were copied
    }
    for (int i = 1; i < argc; i++) {
        if (!strcmp (argv[i], "--config")) {
            i++;
            continue;
        }
        if (!strncmp (argv[i], "--config=", 9))
            continue;
        out[n++] = argv[i];
    }
    out[n] = NULL;
    *argc_out = n;
    return out;
}

/*  Free what s_config_argv returned, once nothing uses the option values. */
static void
s_config_free (char **cargv)
{
    for (size_t i = 0; i < s_n_config_values; i++)
        free (s_config_values[i]);
    s_n_config_values = 0;
    free (cargv);
}

static void
s_on_signal (int sig)
{
    (void)sig;
    if (s_worker)
        zl_worker_stop (s_worker); // async-signal-safe
}

/*  The worker's handler: the exec handler, made once the worker (and so its
    resolved name) exists. */
typedef struct {
    zl_exec_t *exec;
} s_context_t;

static void
s_handle (const zl_worker_job_t *job, zl_worker_result_t *result, void *arg)
{
    zl_exec_handler (job, result, ((s_context_t *)arg)->exec);
}

static int
s_bad (const char *flag, const char *value)
{
    fprintf (stderr, "zlane-worker: invalid %s '%s' (see --help)\n", flag, value);
    return -1;
}

static int
s_parse_count (const char *flag, const char *text, uint64_t min, uint64_t max, uint32_t *out)
{
    uint64_t v;
    if (zl_parse_u64 (text, &v) != 0 || v < min || v > max)
        return s_bad (flag, text);
    *out = (uint32_t)v;
    return 0;
}

static int
s_parse_duration (const char *flag, const char *text, uint32_t *out)
{
    uint64_t ms;
    if (zl_parse_duration_ms (text, &ms) != 0 || ms > UINT32_MAX)
        return s_bad (flag, text);
    *out = (uint32_t)ms;
    return 0;
}

/*  Split "a,b,,c" into lanes (empty items skipped). Returns the count;
    `*lanes_p` and the strings are owned by the caller. */
static size_t
s_split_lanes (const char *text, char ***lanes_p)
{
    char **lanes = NULL;
    size_t n = 0;
    const char *s = text;
    while (*s) {
        size_t len = strcspn (s, ",");
        if (len) {
            lanes = zl_realloc (lanes, (n + 1) * sizeof (char *));
            lanes[n++] = zl_strndup (s, len);
        }
        s += len;
        if (*s == ',')
            s++;
    }
    *lanes_p = lanes;
    return n;
}

int
main (int argc, char **argv)
{
    zl_log_set_program ("zlane-worker");
    zsys_handler_set (NULL); // our handler, not czmq's, owns SIGINT/SIGTERM

    zl_worker_opts_t opts;
    zl_worker_opts_defaults (&opts);
    zl_exec_opts_t exec_opts = {.kill_grace_ms = 2000};
    const char *lanes_text = NULL, *curve_server = NULL, *cert = NULL;
    int verbose = 0;

    enum {
        OPT_BROKER = 256,
        OPT_LANES,
        OPT_EXEC,
        OPT_CONCURRENCY,
        OPT_PREFETCH,
        OPT_NAME,
        OPT_HEARTBEAT,
        OPT_LIVENESS,
        OPT_NO_EXTEND,
        OPT_ACK_EARLY,
        OPT_KILL_GRACE,
        OPT_CURVE_SERVER,
        OPT_CERT
    };
    static const struct option longopts[] = {
        {"broker", required_argument, NULL, OPT_BROKER},
        {"lanes", required_argument, NULL, OPT_LANES},
        {"exec", required_argument, NULL, OPT_EXEC},
        {"concurrency", required_argument, NULL, OPT_CONCURRENCY},
        {"prefetch", required_argument, NULL, OPT_PREFETCH},
        {"name", required_argument, NULL, OPT_NAME},
        {"heartbeat", required_argument, NULL, OPT_HEARTBEAT},
        {"liveness", required_argument, NULL, OPT_LIVENESS},
        {"no-extend", no_argument, NULL, OPT_NO_EXTEND},
        {"ack-early", no_argument, NULL, OPT_ACK_EARLY},
        {"kill-grace", required_argument, NULL, OPT_KILL_GRACE},
        {"curve-server", required_argument, NULL, OPT_CURVE_SERVER},
        {"cert", required_argument, NULL, OPT_CERT},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    int c, bad = 0;
    char **cargv = s_config_argv (argc, argv, &argc);
    if (!cargv)
        return 2;
    argv = cargv;
    while (!bad && (c = getopt_long (argc, argv, "vh", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_BROKER: opts.endpoint = optarg; break;
        case OPT_CURVE_SERVER: curve_server = optarg; break;
        case OPT_CERT: cert = optarg; break;
        case OPT_LANES: lanes_text = optarg; break;
        case OPT_EXEC: exec_opts.command = optarg; break;
        case OPT_CONCURRENCY:
            bad = s_parse_count ("--concurrency", optarg, 1, 4096, &opts.concurrency);
            break;
        case OPT_PREFETCH:
            bad = s_parse_count ("--prefetch", optarg, 0, 100000, &opts.prefetch);
            break;
        case OPT_NAME: opts.name = optarg; break;
        case OPT_HEARTBEAT:
            bad = s_parse_duration ("--heartbeat", optarg, &opts.heartbeat_ms);
            if (!bad && opts.heartbeat_ms == 0)
                bad = s_bad ("--heartbeat", optarg);
            break;
        case OPT_LIVENESS:
            bad = s_parse_count ("--liveness", optarg, 1, 1000, &opts.liveness);
            break;
        case OPT_NO_EXTEND: opts.extend = false; break;
        case OPT_ACK_EARLY: opts.ack_early = true; break;
        case OPT_KILL_GRACE:
            bad = s_parse_duration ("--kill-grace", optarg, &exec_opts.kill_grace_ms);
            break;
        case 'v': verbose++; break;
        case 'h':
            fputs (s_usage, stdout);
            s_config_free (cargv);
            return 0;
        default: bad = -1;
        }
    }
    if (!bad && optind < argc) {
        fprintf (stderr, "zlane-worker: unexpected argument '%s' (see --help)\n", argv[optind]);
        bad = -1;
    }
    if (!bad && (!lanes_text || !exec_opts.command || !*exec_opts.command)) {
        fprintf (stderr, "zlane-worker: --lanes and --exec are required (see --help)\n");
        bad = -1;
    }
    char err[512];
    if (!bad && zl_curve_load (&opts.curve, curve_server, cert, err, sizeof err) != 0) {
        fprintf (stderr, "zlane-worker: %s (--curve-server FILE --cert FILE)\n", err);
        bad = -1;
    }
    char **lanes = NULL;
    size_t n_lanes = bad ? 0 : s_split_lanes (lanes_text, &lanes);
    if (!bad && n_lanes == 0)
        bad = s_bad ("--lanes", lanes_text);
    if (bad) {
        for (size_t i = 0; i < n_lanes; i++)
            free (lanes[i]);
        free (lanes);
        s_config_free (cargv);
        return 2;
    }
    zl_log_set_level (verbose >= 2 ? ZL_LOG_TRACE : verbose == 1 ? ZL_LOG_DEBUG : ZL_LOG_INFO);

    s_context_t context = {NULL};
    opts.lanes = (const char *const *)lanes;
    opts.n_lanes = n_lanes;
    opts.drain_ms = exec_opts.kill_grace_ms;
    opts.handler = s_handle;
    opts.handler_arg = &context;
    if (opts.ack_early)
        zl_warn (S_COMPONENT, "--ack-early: jobs are acked before they run; failures lose them");

    int rc = 1;
    zl_worker_t *worker = zl_worker_new (&opts);
    memset (&opts.curve, 0, sizeof opts.curve); // the worker has its copy
    if (worker) {
        exec_opts.worker_name = zl_worker_name (worker);
        context.exec = zl_exec_new (&exec_opts);
    }
    if (worker && context.exec) {
        s_worker = worker;
        struct sigaction sa = {.sa_handler = s_on_signal};
        sigemptyset (&sa.sa_mask);
        sigaction (SIGINT, &sa, NULL);
        sigaction (SIGTERM, &sa, NULL);
        rc = zl_worker_run (worker) == 0 ? 0 : 1;
        // Back to the default before the worker goes away.
        sa.sa_handler = SIG_DFL;
        sigaction (SIGINT, &sa, NULL);
        sigaction (SIGTERM, &sa, NULL);
        s_worker = NULL;
    }
    zl_exec_destroy (&context.exec);
    zl_worker_destroy (&worker);
    for (size_t i = 0; i < n_lanes; i++)
        free (lanes[i]);
    free (lanes);
    s_config_free (cargv);
    return rc;
}
