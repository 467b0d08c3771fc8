/*  zlane-bench-latency: submit-to-start latency at a fixed offered rate.

    zlane-bench-latency [--rate R] [--seconds S] [--workers W] [--payload B]
                        [--durability fsync|none] [--prefetch P] [--broker-arg ARG]...
        starts a broker and W worker processes (library workers, no-op
        handler, 4 slots each, prefetch P, default 0: the broker keeps 4 + P
        jobs in flight to each; a slot comes back when the broker has the
        job's Ack, a commit later, so with 0 two workers run out of slots
        at about 5,000 jobs/s with fsync), then one producer submits R jobs
        per second for S seconds on an open-loop schedule: job i is due at
        t0 + i/R and carries that due time (CLOCK_MONOTONIC, shared by the
        processes of one machine). Each handler records now - due when it
        starts, so a producer that falls behind is charged for it (no
        coordinated omission). Prints p50/p90/p99/p99.9/max.
    zlane-bench-latency worker --broker EP --out FILE   (used by the above)

    Every process it starts is killed at exit, by PID. */
#define _GNU_SOURCE
#include "benchbroker.h"
#include "benchproc.h"
#include "clock.h"
#include "zlane_producer.h"
#include "zlane_worker.h"

#include <czmq.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_PROCS 32
#define WORKER_SLOTS 4

// ---------------------------------------------------------------- worker
typedef struct {
    pthread_mutex_t lock;
    int64_t *lat_us;
    size_t n, cap;
} samples_t;

static samples_t s_samples = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0};
static zl_worker_t *s_worker;

static void
s_handler (const zl_worker_job_t *job, zl_worker_result_t *result, void *arg)
{
    (void)result;
    (void)arg;
    int64_t now = zl_clock_mono_us ();
    int64_t due;
    if (job->len < sizeof due)
        return;
    memcpy (&due, job->payload, sizeof due);
    pthread_mutex_lock (&s_samples.lock);
    if (s_samples.n == s_samples.cap) {
        s_samples.cap = s_samples.cap ? 2 * s_samples.cap : 65536;
        s_samples.lat_us = realloc (s_samples.lat_us, s_samples.cap * sizeof (int64_t));
        if (!s_samples.lat_us)
            abort ();
    }
    s_samples.lat_us[s_samples.n++] = now - due;
    pthread_mutex_unlock (&s_samples.lock);
}

static void
s_stop_worker (int sig)
{
    (void)sig;
    if (s_worker)
        zl_worker_stop (s_worker);
}

static int
s_cmd_worker (int argc, char **argv)
{
    const char *endpoint = NULL, *out = NULL;
    uint32_t prefetch = 0;
    for (int i = 0; i + 1 < argc; i++) {
        if (!strcmp (argv[i], "--broker"))
            endpoint = argv[++i];
        else if (!strcmp (argv[i], "--out"))
            out = argv[++i];
        else if (!strcmp (argv[i], "--prefetch"))
            prefetch = (uint32_t)atoi (argv[++i]);
    }
    if (!endpoint || !out)
        zl_benchproc_die ("worker: --broker EP --out FILE");
    const char *lanes[] = {"bench"};
    zl_worker_opts_t opts;
    zl_worker_opts_defaults (&opts);
    opts.endpoint = endpoint;
    opts.lanes = lanes;
    opts.n_lanes = 1;
    opts.concurrency = WORKER_SLOTS;
    opts.prefetch = prefetch;
    opts.drain_ms = 1000;
    opts.handler = s_handler;
    s_worker = zl_worker_new (&opts);
    if (!s_worker)
        zl_benchproc_die ("worker: bad options");
    signal (SIGTERM, s_stop_worker);
    signal (SIGINT, s_stop_worker);
    int rc = zl_worker_run (s_worker);
    zl_worker_destroy (&s_worker);
    FILE *f = fopen (out, "w");
    if (!f)
        return 1;
    for (size_t i = 0; i < s_samples.n; i++)
        fprintf (f, "%" PRId64 "\n", s_samples.lat_us[i]);
    fclose (f);
    return rc == 0 ? 0 : 1;
}

// ---------------------------------------------------------------- main run

int
main (int argc, char **argv)
{
    zsys_handler_set (NULL);
    if (argc >= 2 && !strcmp (argv[1], "worker"))
        return s_cmd_worker (argc - 2, argv + 2);
    double rate = 1000, seconds = 5;
    int workers = 2, prefetch = 0;
    size_t payload = 100;
    const char *durability = "fsync";
    const char *bargs[16] = {"--lane", "bench", "--durability", NULL};
    size_t n_bargs = 4; // bargs[3] is the durability
    for (int i = 1; i < argc; i++) {
        if (!strcmp (argv[i], "--help") || !strcmp (argv[i], "-h")) {
            printf ("usage: zlane-bench-latency [--rate R] [--seconds S] [--workers W]\n"
                    "                           [--payload BYTES] [--durability fsync|none]\n"
                    "                           [--prefetch P] [--broker-arg ARG]...\n"
                    "  --broker-arg: one more argument for zlane-broker (e.g. --commit-on-loop)\n");
            return 0;
        }
        if (i + 1 >= argc)
            zl_benchproc_die ("every option takes a value");
        if (!strcmp (argv[i], "--rate"))
            rate = atof (argv[++i]);
        else if (!strcmp (argv[i], "--seconds"))
            seconds = atof (argv[++i]);
        else if (!strcmp (argv[i], "--workers"))
            workers = atoi (argv[++i]);
        else if (!strcmp (argv[i], "--payload"))
            payload = (size_t)atoi (argv[++i]);
        else if (!strcmp (argv[i], "--durability"))
            durability = argv[++i];
        else if (!strcmp (argv[i], "--prefetch"))
            prefetch = atoi (argv[++i]);
        else if (!strcmp (argv[i], "--broker-arg") && n_bargs + 2 < sizeof bargs / sizeof *bargs)
            bargs[n_bargs++] = argv[++i];
        else
            zl_benchproc_die ("unknown option");
    }
    if (rate <= 0 || seconds <= 0 || workers < 1 || workers > MAX_PROCS - 2 || prefetch < 0 ||
        prefetch > 100000)
        zl_benchproc_die ("bad numbers");
    if (payload < sizeof (int64_t))
        payload = sizeof (int64_t);
    uint64_t jobs = (uint64_t)(rate * seconds);

    zl_benchproc_init ("zlane-bench-latency", "zlane-latency");

    // the broker, on ephemeral loopback ports
    bargs[3] = durability;
    bargs[n_bargs] = NULL;
    zl_benchbroker_t *broker = zl_benchbroker_start (zl_benchproc_tmp (), bargs);
    const char *frontend = zl_benchbroker_endpoint (broker, "frontend");
    const char *backend = zl_benchbroker_endpoint (broker, "backend");
    char bin[PATH_MAX + 32], log[PATH_MAX + 32];

    // the workers
    snprintf (bin, sizeof bin, "%s/zlane-bench-latency", zl_benchproc_bindir ());
    pid_t wpids[MAX_PROCS];
    char outs[MAX_PROCS][PATH_MAX + 32];
    for (int w = 0; w < workers; w++) {
        snprintf (outs[w], sizeof outs[w], "%s/lat%d", zl_benchproc_tmp (), w);
        snprintf (log, sizeof log, "%s/worker%d.log", zl_benchproc_tmp (), w);
        char pf[16];
        snprintf (pf, sizeof pf, "%d", prefetch);
        char *wargv[] = {bin,          "worker", "--broker", (char *)backend, "--out", outs[w],
                         "--prefetch", pf,       NULL};
        wpids[w] = zl_benchproc_spawn (wargv, log);
    }
    zl_benchbroker_wait (broker, "workers_ready", workers, 10000);

    // one producer, open loop
    zl_producer_opts_t opts;
    zl_producer_opts_defaults (&opts);
    opts.endpoint = frontend;
    opts.client = "latency";
    opts.deadline_ms = 60000;
    zl_producer_t *prod = zl_producer_new (&opts);
    char *buf = calloc (1, payload);
    zl_producer_job_t job = {
        .tenant = "t", .lane = "bench", .payload = buf, .payload_len = payload};
    int64_t t0 = zl_clock_mono_us () + 100000; // 100 ms to connect
    uint64_t late = 0;
    // how late each send was: the producer's own wake-up, part of every
    // figure (the peers' benches pace alike)
    int64_t *send_late = calloc (jobs ? jobs : 1, sizeof *send_late);
    if (!send_late)
        zl_benchproc_die ("out of memory");
    for (uint64_t i = 0; i < jobs; i++) {
        int64_t due = t0 + (int64_t)((double)i * 1e6 / rate);
        // the replies that came are taken, then a sleep until the job is due
        // (as the beanstalkd and RabbitMQ benches pace: one wake-up a job)
        zl_producer_poll (prod, 0);
        int64_t wait_ms = (due - zl_clock_mono_us ()) / 1000 - 1;
        if (wait_ms > 0)
            zl_producer_poll (prod, (int)wait_ms);
        zl_benchproc_sleep_until (due);
        send_late[i] = zl_clock_mono_us () - due;
        if (send_late[i] > 1000)
            late++;
        memcpy (buf, &due, sizeof due);
        if (zl_producer_submit (prod, &job, NULL) != 0)
            zl_benchproc_die ("submit failed");
        zl_producer_flush (prod);
    }
    int64_t t_sent = zl_clock_mono_us ();
    if (zl_producer_wait (prod, 60000) != 0)
        zl_benchproc_die ("the broker did not accept every job");
    zl_producer_destroy (&prod);
    free (buf);
    zl_benchbroker_wait (broker, "jobs_acked", (int64_t)jobs, 60000);
    // the store's share, for the breakdown in bench/RESULTS.md
    fprintf (stderr,
             "broker: store commits %lld us on average, %lld us at most; %lld of the jobs left "
             "before their commit\n",
             (long long)zl_benchbroker_counter (broker, "store_commit_avg_us"),
             (long long)zl_benchbroker_counter (broker, "store_commit_max_us"),
             (long long)zl_benchbroker_counter (broker, "jobs_dispatched_before_commit"));

    // stop the workers: each writes its samples
    size_t n = 0, cap = jobs + 16;
    int64_t *lat = malloc (cap * sizeof *lat);
    for (int w = 0; w < workers; w++)
        kill (wpids[w], SIGTERM);
    for (int w = 0; w < workers; w++) {
        waitpid (wpids[w], NULL, 0);
        FILE *f = fopen (outs[w], "r");
        if (!f)
            zl_benchproc_die ("a worker wrote no samples");
        long long v;
        while (n < cap && fscanf (f, "%lld", &v) == 1)
            lat[n++] = v;
        fclose (f);
    }
    zl_benchproc_sort_i64 (lat, n);
    zl_benchproc_sort_i64 (send_late, jobs);
    fprintf (stderr, "producer: sends p50 %.3f ms, p90 %.3f ms after their due time\n",
             zl_benchproc_pct_ms (send_late, jobs, 50), zl_benchproc_pct_ms (send_late, jobs, 90));
    free (send_late);
    double offered_s = (double)(t_sent - t0) / 1e6;
    printf ("latency durability=%s rate=%.0f/s jobs=%" PRIu64
            " workers=%d prefetch=%d payload=%zu: "
            "submit->start p50 %.3f ms p90 %.3f ms p99 %.3f ms p99.9 %.3f ms max %.3f ms "
            "(%zu samples, sent in %.2f s, %" PRIu64 " sends >1 ms late)\n",
            durability, rate, jobs, workers, prefetch, payload, zl_benchproc_pct_ms (lat, n, 50),
            zl_benchproc_pct_ms (lat, n, 90), zl_benchproc_pct_ms (lat, n, 99),
            zl_benchproc_pct_ms (lat, n, 99.9), n ? (double)lat[n - 1] / 1000.0 : 0.0, n, offered_s,
            late);
    free (lat);
    zl_benchbroker_destroy (&broker);
    return n == jobs ? 0 : 1;
}
