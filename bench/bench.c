/*  zlane-bench: throughput, latency and memory benchmarks on real processes.

    zlane-bench throughput [--jobs N] [--producers P] [--workers W]
                           [--payload BYTES] [--durability fsync|none]
                           [--priorities 1] [--ordering-keys N]
        starts a broker and W worker processes (no-op handler, ack after the
        "work"), submits N jobs from P producer threads as fast as credit
        allows, and reports jobs/s from the first submit to the last ack.
    zlane-bench memory [--jobs N] [--payload BYTES] [--durability MODE]
        starts a broker with no workers, queues N jobs and reports the
        broker's resident memory per queued job.
    zlane-bench workflow [--children N] [--chains N] [--depth D] [--copies K]
                         [--rounds R] [--workers W] [--durability MODE]
        workflows (issue 15): a wide DAG (one parent, N children, one join
        over them) and N chains of depth D, K copies of each at once, each
        against the same number of independent jobs sent the same way (raw
        Submit frames, the DAG in one Submit by depends_on_seq), R rounds
        each, alternating; prints the time from
        the first Submit to the last ack, the throughput, the broker's CPU
        and its cost per dependency edge (the CPU over the independent run's,
        divided by the edges).
    zlane-bench worker --broker EP [--prefetch N]     (used by throughput)

    Every process it starts is killed at exit, by PID. */
#include "benchbroker.h"
#include "benchproc.h"
#include "clock.h"
#include "codec.h"
#include "wire.h"
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
#include <unistd.h>

// ---------------------------------------------------------------- broker
static zl_benchbroker_t *s_broker; // closed at exit

static void
s_close_broker (void)
{
    zl_benchbroker_destroy (&s_broker);
}

// The broker under test, in the temp dir, with one lane "bench".
static const char *s_broker_arg; // --broker-arg: one more argument for zlane-broker

static zl_benchbroker_t *
s_broker_start (const char *durability)
{
    const char *args[] = {"--lane",      "bench",   "--durability",      durability,
                          "--max-depth", "2000000", "--producer-window", "50000",
                          s_broker_arg,  NULL};
    s_broker = zl_benchbroker_start (zl_benchproc_tmp (), args);
    return s_broker;
}

// ---------------------------------------------------------------- producers
typedef struct {
    const char *endpoint;
    uint64_t jobs;
    size_t payload;
    uint64_t accepted, rejected;
    bool priorities; // jobs at priorities 0-9 in turn (else none given: 5)
    uint32_t keys;   // jobs over this many ordering keys in turn (0: none)
} producer_arg_t;

static void
s_on_result (const zl_producer_result_t *r, void *arg)
{
    producer_arg_t *p = arg;
    if (r->status == ZL_PRODUCER_ACCEPTED)
        p->accepted++;
    else
        p->rejected++;
}

static void *
s_producer (void *arg)
{
    producer_arg_t *p = arg;
    zl_producer_opts_t opts;
    zl_producer_opts_defaults (&opts);
    opts.endpoint = p->endpoint;
    opts.client = "bench";
    opts.deadline_ms = 120000;
    opts.on_result = s_on_result;
    opts.on_result_arg = p;
    zl_producer_t *prod = zl_producer_new (&opts);
    char *payload = malloc (p->payload + 1);
    memset (payload, 'x', p->payload);
    zl_producer_job_t job = {
        .tenant = "t", .lane = "bench", .payload = payload, .payload_len = p->payload};
    enum { BATCH = 256 };
    zl_producer_job_t jobs[BATCH];
    for (int i = 0; i < BATCH; i++) {
        jobs[i] = job;
        jobs[i].has_priority = p->priorities;
        jobs[i].priority = (uint8_t)(i % 10);
    }
    static _Thread_local char keys[BATCH][16];
    uint64_t done = 0;
    while (done < p->jobs) {
        size_t n = p->jobs - done > BATCH ? BATCH : (size_t)(p->jobs - done);
        for (size_t i = 0; p->keys && i < n; i++) { // job k of this producer: key k % keys
            snprintf (keys[i], sizeof keys[i], "k%" PRIu64, (done + i) % p->keys);
            jobs[i].ordering_key = keys[i];
        }
        int rc = zl_producer_submit_batch (prod, jobs, n, NULL);
        if (rc > 0)
            done += (uint64_t)rc;
        else if (rc < 0 && errno != EAGAIN && errno != EINTR)
            break;
        zl_producer_poll (prod, 0);
    }
    zl_producer_wait (prod, 120000);
    zl_producer_destroy (&prod);
    free (payload);
    return NULL;
}

// ---------------------------------------------------------------- worker
static void
s_noop (const zl_worker_job_t *job, zl_worker_result_t *result, void *arg)
{
    (void)job;
    (void)arg;
    result->outcome = ZL_WORKER_ACK;
}

static zl_worker_t *s_worker;

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
    const char *endpoint = NULL;
    uint32_t prefetch = 1024;
    for (int i = 0; i < argc; i++) {
        if (!strcmp (argv[i], "--broker") && i + 1 < argc)
            endpoint = argv[++i];
        else if (!strcmp (argv[i], "--prefetch") && i + 1 < argc)
            prefetch = (uint32_t)atoi (argv[++i]);
    }
    if (!endpoint)
        zl_benchproc_die ("worker: --broker EP is required");
    const char *lanes[] = {"bench"};
    zl_worker_opts_t opts;
    zl_worker_opts_defaults (&opts);
    opts.endpoint = endpoint;
    opts.lanes = lanes;
    opts.n_lanes = 1;
    opts.concurrency = 1;
    opts.prefetch = prefetch;
    opts.handler = s_noop;
    s_worker = zl_worker_new (&opts);
    if (!s_worker)
        zl_benchproc_die ("worker: bad options");
    signal (SIGTERM, s_stop_worker);
    signal (SIGINT, s_stop_worker);
    int rc = zl_worker_run (s_worker);
    zl_worker_destroy (&s_worker);
    return rc == 0 ? 0 : 1;
}

// ---------------------------------------------------------------- modes
typedef struct {
    uint64_t jobs;
    int producers, workers;
    size_t payload;
    const char *durability;
    uint32_t prefetch;
    int priorities; // --priorities 1: jobs at priorities 0-9 in turn
    uint32_t keys;  // --ordering-keys N: jobs over N ordering keys in turn
} opts_t;

static void
s_setup (void)
{
    zl_benchproc_init ("zlane-bench", "zlane-bench");
    atexit (s_close_broker);
}

static int
s_cmd_throughput (const opts_t *o)
{
    s_setup ();
    zl_benchbroker_t *b = s_broker_start (o->durability);
    const char *backend = zl_benchbroker_endpoint (b, "backend");
    const char *frontend = zl_benchbroker_endpoint (b, "frontend");
    char bin[PATH_MAX + 32], log[PATH_MAX + 32], pf[16];
    snprintf (bin, sizeof bin, "%s/zlane-bench", zl_benchproc_bindir ());
    snprintf (pf, sizeof pf, "%u", o->prefetch);
    for (int w = 0; w < o->workers; w++) {
        snprintf (log, sizeof log, "%s/worker%d.log", zl_benchproc_tmp (), w);
        char *argv[] = {bin, "worker", "--broker", (char *)backend, "--prefetch", pf, NULL};
        zl_benchproc_spawn (argv, log);
    }
    zl_benchbroker_wait (b, "workers_ready", o->workers, 10000);
    producer_arg_t *args = calloc ((size_t)o->producers, sizeof *args);
    pthread_t *threads = calloc ((size_t)o->producers, sizeof *threads);
    double cpu0 = zl_benchproc_cpu_seconds (zl_benchbroker_pid (b));
    double wcpu0 = 0;
    for (int i = 1; i < zl_benchproc_count (); i++)
        wcpu0 += zl_benchproc_cpu_seconds (zl_benchproc_pid (i));
    double pcpu0 = zl_benchproc_cpu_seconds (getpid ());
    int64_t t0 = zl_clock_mono_us ();
    for (int p = 0; p < o->producers; p++) {
        args[p] = (producer_arg_t){
            frontend, o->jobs / (uint64_t)o->producers, o->payload, 0, 0, o->priorities != 0,
            o->keys};
        if (p == 0)
            args[p].jobs += o->jobs % (uint64_t)o->producers;
        pthread_create (&threads[p], NULL, s_producer, &args[p]);
    }
    zl_benchbroker_wait (b, "jobs_acked", (int64_t)o->jobs, 600000);
    int64_t t1 = zl_clock_mono_us ();
    double cpu1 = zl_benchproc_cpu_seconds (zl_benchbroker_pid (b));
    double wcpu1 = 0;
    for (int i = 1; i < zl_benchproc_count (); i++)
        wcpu1 += zl_benchproc_cpu_seconds (zl_benchproc_pid (i));
    double pcpu1 = zl_benchproc_cpu_seconds (getpid ());
    for (int p = 0; p < o->producers; p++)
        pthread_join (threads[p], NULL);
    uint64_t rejected = 0;
    for (int p = 0; p < o->producers; p++)
        rejected += args[p].rejected;
    const zl_stats_t *st = zl_benchbroker_stats (b);
    uint64_t p50 = 0, p99 = 0;
    int64_t commits = 0, commit_avg = 0;
    if (st) {
        for (size_t i = 0; i < st->n_latencies; i++)
            if (!strcmp (st->latencies[i].name, "submit_to_ack")) {
                p50 = st->latencies[i].p50_us;
                p99 = st->latencies[i].p99_us;
            }
        commits = zl_benchbroker_counter_of (st, "store_commits");
        commit_avg = zl_benchbroker_counter_of (st, "store_commit_avg_us");
    }
    double secs = (double)(t1 - t0) / 1e6;
    char keys[48] = "";
    if (o->keys)
        snprintf (keys, sizeof keys, " ordering_keys=%u", o->keys);
    printf ("throughput durability=%s jobs=%" PRIu64 " producers=%d workers=%d payload=%zu%s%s: "
            "%.2f s, %.0f jobs/s, submit->ack p50 %.1f ms p99 %.1f ms, cpu s: broker %.2f "
            "workers %.2f producers %.2f, %" PRId64 " commits (avg %" PRId64
            " us), rejected %" PRIu64 "\n",
            o->durability, o->jobs, o->producers, o->workers, o->payload,
            o->priorities ? " priorities=0-9" : "", keys, secs, (double)o->jobs / secs,
            p50 / 1000.0, p99 / 1000.0, cpu1 - cpu0, wcpu1 - wcpu0, pcpu1 - pcpu0, commits,
            commit_avg, rejected);
    free (args);
    free (threads);
    s_close_broker ();
    return 0;
}

// ---------------------------------------------------------------- workflow
typedef struct {
    zsock_t *sock;
    zl_codec_t *codec;
} raw_producer_t;

static void
s_raw_open (raw_producer_t *rp, const char *endpoint)
{
    rp->sock = zsock_new_dealer (endpoint);
    if (!rp->sock)
        zl_benchproc_die ("workflow: cannot connect the producer");
    rp->codec = zl_codec_new ();
    zl_msg_t hello = {.kind = ZL_MSG_HELLO, .u.hello = {.client = "bench-workflow"}};
    if (zl_wire_send (zsock_resolve (rp->sock), rp->codec, &hello, 0) != 0)
        zl_benchproc_die ("workflow: cannot send Hello");
    zsock_set_rcvtimeo (rp->sock, 10000);
    while (true) { // its credit (cumulative): more than any round sends
        zmq_msg_t f;
        zmq_msg_init (&f);
        if (zmq_msg_recv (&f, zsock_resolve (rp->sock), 0) < 0)
            zl_benchproc_die ("workflow: no Credit after Hello");
        zl_msg_t m;
        bool credit =
            zl_codec_decode (rp->codec, zmq_msg_data (&f), zmq_msg_size (&f), &m) == ZL_DECODE_OK &&
            m.kind == ZL_MSG_CREDIT;
        zmq_msg_close (&f);
        if (credit)
            break;
    }
}

static void
s_raw_close (raw_producer_t *rp)
{
    zsock_destroy (&rp->sock);
    zl_codec_destroy (&rp->codec);
}

static void
s_raw_submit (raw_producer_t *rp, zl_job_spec_t *specs, size_t n)
{
    zl_msg_t m = {.kind = ZL_MSG_SUBMIT, .u.submit = {n, specs}};
    if (zl_wire_send (zsock_resolve (rp->sock), rp->codec, &m, 0) != 0)
        zl_benchproc_die ("workflow: cannot send a Submit");
}

typedef enum { SHAPE_WIDE, SHAPE_CHAINS } shape_t;

typedef struct {
    double secs, cpu;
} run_t;

/*  One round of `shape` (dependencies, or the same jobs independent):
    specs sent in Submits of `per_submit` (the wide DAG: one Submit), then
    wait for every ack. */
static run_t
s_workflow_round (zl_benchbroker_t *b, shape_t shape, bool deps, uint64_t n_children,
                  uint64_t chains, uint64_t depth, uint64_t copies)
{
    uint64_t n = shape == SHAPE_WIDE ? n_children + 2 : chains * depth;
    zl_job_spec_t *specs = calloc (n, sizeof *specs);
    uint64_t *seqs = calloc (n, sizeof *seqs); // depends_on_seq storage
    for (uint64_t i = 0; i < n; i++) {
        specs[i] = (zl_job_spec_t){.seq = i + 1,
                                   .tenant = "t",
                                   .lane = "bench",
                                   .payload = {(const uint8_t *)"x", 1},
                                   .idempotency_key = ""};
        seqs[i] = i + 1;
    }
    if (deps && shape == SHAPE_WIDE) {
        // seq 1 the parent, 2..n-1 its children, n the join over them
        for (uint64_t i = 1; i + 1 < n; i++) {
            specs[i].depends_on_seq = &seqs[0];
            specs[i].n_depends_on_seq = 1;
        }
        specs[n - 1].depends_on_seq = &seqs[1];
        specs[n - 1].n_depends_on_seq = n_children;
    } else if (deps) { // chain c: seqs c*depth+1 .. c*depth+depth, each on the one before
        for (uint64_t i = 0; i < n; i++)
            if (i % depth) {
                specs[i].depends_on_seq = &seqs[i - 1];
                specs[i].n_depends_on_seq = 1;
            }
    }
    raw_producer_t rp;
    s_raw_open (&rp, zl_benchbroker_endpoint (b, "frontend"));
    int64_t acked0 = zl_benchbroker_counter (b, "jobs_acked");
    double cpu0 = zl_benchproc_cpu_seconds (zl_benchbroker_pid (b));
    int64_t t0 = zl_clock_mono_us ();
    // chains: whole chains per Submit (about 256 specs); the wide DAG: one
    uint64_t per = shape == SHAPE_WIDE ? n : (256 / depth ? 256 / depth : 1) * depth;
    for (uint64_t k = 0; k < copies; k++) // seqs name specs of their own Submit only
        for (uint64_t at = 0; at < n; at += per)
            s_raw_submit (&rp, specs + at, n - at < per ? n - at : per);
    zl_benchbroker_wait (b, "jobs_acked", acked0 + (int64_t)(n * copies), 600000);
    run_t r = {(double)(zl_clock_mono_us () - t0) / 1e6,
               zl_benchproc_cpu_seconds (zl_benchbroker_pid (b)) - cpu0};
    s_raw_close (&rp);
    free (specs);
    free (seqs);
    return r;
}

static int
s_cmp_run (const void *a, const void *b)
{
    double x = ((const run_t *)a)->secs, y = ((const run_t *)b)->secs;
    return x < y ? -1 : x > y;
}

static int
s_cmd_workflow (int argc, char **argv)
{
    uint64_t children = 10000, chains = 1000, depth = 10, copies = 5;
    int rounds = 3, workers = 2;
    const char *durability = "fsync";
    for (int i = 0; i + 1 < argc; i += 2) {
        if (!strcmp (argv[i], "--children"))
            children = strtoull (argv[i + 1], NULL, 10);
        else if (!strcmp (argv[i], "--chains"))
            chains = strtoull (argv[i + 1], NULL, 10);
        else if (!strcmp (argv[i], "--depth"))
            depth = strtoull (argv[i + 1], NULL, 10);
        else if (!strcmp (argv[i], "--copies"))
            copies = strtoull (argv[i + 1], NULL, 10);
        else if (!strcmp (argv[i], "--rounds"))
            rounds = atoi (argv[i + 1]);
        else if (!strcmp (argv[i], "--workers"))
            workers = atoi (argv[i + 1]);
        else if (!strcmp (argv[i], "--durability"))
            durability = argv[i + 1];
        else
            zl_benchproc_die ("workflow: unknown option");
    }
    if (!children || !chains || depth < 2 || rounds < 1 || workers < 1)
        zl_benchproc_die ("workflow: bad numbers");
    s_setup ();
    char fan_in[32];
    snprintf (fan_in, sizeof fan_in, "%" PRIu64, children);
    const char *args[] = {"--lane",
                          "bench",
                          "--durability",
                          durability,
                          "--max-depth",
                          "2000000",
                          "--producer-window",
                          "1000000",
                          "--max-fan-in",
                          fan_in,
                          NULL};
    s_broker = zl_benchbroker_start (zl_benchproc_tmp (), args);
    zl_benchbroker_t *b = s_broker;
    char bin[PATH_MAX + 32], log[PATH_MAX + 32];
    snprintf (bin, sizeof bin, "%s/zlane-bench", zl_benchproc_bindir ());
    for (int w = 0; w < workers; w++) {
        snprintf (log, sizeof log, "%s/worker%d.log", zl_benchproc_tmp (), w);
        char *wargv[] = {
            bin,          "worker", "--broker", (char *)zl_benchbroker_endpoint (b, "backend"),
            "--prefetch", "1024",   NULL};
        zl_benchproc_spawn (wargv, log);
    }
    zl_benchbroker_wait (b, "workers_ready", workers, 10000);
    // a warm-up round of independent jobs (page cache, allocator)
    s_workflow_round (b, SHAPE_CHAINS, false, children, chains, depth, copies);
    static const char *const names[] = {"wide", "chains"};
    for (int shape = SHAPE_WIDE; shape <= SHAPE_CHAINS; shape++) {
        uint64_t n = (shape == SHAPE_WIDE ? children + 2 : chains * depth) * copies;
        uint64_t edges = (shape == SHAPE_WIDE ? 2 * children : chains * (depth - 1)) * copies;
        run_t *ind = calloc ((size_t)rounds, sizeof *ind),
              *dag = calloc ((size_t)rounds, sizeof *dag);
        for (int r = 0; r < rounds; r++) { // alternating, so drift hits both
            ind[r] = s_workflow_round (b, (shape_t)shape, false, children, chains, depth, copies);
            dag[r] = s_workflow_round (b, (shape_t)shape, true, children, chains, depth, copies);
        }
        qsort (ind, (size_t)rounds, sizeof *ind, s_cmp_run);
        qsort (dag, (size_t)rounds, sizeof *dag, s_cmp_run);
        run_t mi = ind[rounds / 2], md = dag[rounds / 2]; // medians
        double per_edge_us = (md.cpu - mi.cpu) / (double)edges * 1e6;
        if (shape == SHAPE_WIDE)
            printf ("workflow wide: %" PRIu64 " x (1 parent, %" PRIu64 " children, 1 join)", copies,
                    children);
        else
            printf ("workflow chains: %" PRIu64 " x %" PRIu64 " chains of depth %" PRIu64, copies,
                    chains, depth);
        printf (" = %" PRIu64 " jobs, %" PRIu64 " edges, durability=%s workers=%d (median of %d):\n"
                "  independent: %.3f s, %.0f jobs/s, broker cpu %.3f s\n"
                "  %-11s: %.3f s, %.0f jobs/s, broker cpu %.3f s\n"
                "  dependency edge: %.2f us of broker cpu each; throughput %.2fx of independent "
                "(time %.2fx)\n",
                n, edges, durability, workers, rounds, mi.secs, (double)n / mi.secs, mi.cpu,
                names[shape], md.secs, (double)n / md.secs, md.cpu, per_edge_us, mi.secs / md.secs,
                md.secs / mi.secs);
        free (ind);
        free (dag);
    }
    s_close_broker ();
    return 0;
}

static int
s_cmd_memory (const opts_t *o)
{
    s_setup ();
    zl_benchbroker_t *b = s_broker_start (o->durability);
    uint64_t rss0, anon0, file0, rss1, anon1, file1;
    zl_benchbroker_stats (b); // the broker is up and answering before the baseline
    rss0 = zl_benchproc_rss (zl_benchbroker_pid (b), &anon0, &file0);
    producer_arg_t arg = {zl_benchbroker_endpoint (b, "frontend"), o->jobs, o->payload, 0, 0};
    int64_t t0 = zl_clock_mono_us ();
    s_producer (&arg);
    zl_benchbroker_wait (b, "jobs_accepted", (int64_t)o->jobs, 600000);
    double secs = (double)(zl_clock_mono_us () - t0) / 1e6;
    rss1 = zl_benchproc_rss (zl_benchbroker_pid (b), &anon1, &file1);
    printf ("memory durability=%s jobs=%" PRIu64 " payload=%zu: queued in %.2f s (%.0f jobs/s); "
            "broker RSS %.1f MiB -> %.1f MiB = %.0f bytes/job (anon %.0f, file %.0f)\n",
            o->durability, o->jobs, o->payload, secs, (double)o->jobs / secs, rss0 / 1048576.0,
            rss1 / 1048576.0, (double)(rss1 - rss0) / (double)o->jobs,
            (double)(anon1 - anon0) / (double)o->jobs, (double)(file1 - file0) / (double)o->jobs);
    s_close_broker ();
    return 0;
}

int
main (int argc, char **argv)
{
    zsys_handler_set (NULL);
    if (argc < 2 || !strcmp (argv[1], "--help") || !strcmp (argv[1], "-h")) {
        printf ("usage: zlane-bench throughput|memory [--jobs N] [--producers P] [--workers W]\n"
                "                   [--payload BYTES] [--durability fsync|none] [--prefetch N]\n"
                "                   [--broker-arg ARG] (one more argument for zlane-broker)\n"
                "       zlane-bench workflow [--children N] [--chains N] [--depth D] "
                "[--rounds R]\n"
                "                   [--workers W] [--durability fsync|none]\n");
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp (argv[1], "worker"))
        return s_cmd_worker (argc - 2, argv + 2);
    if (!strcmp (argv[1], "workflow"))
        return s_cmd_workflow (argc - 2, argv + 2);
    opts_t o = {100000, 1, 2, 100, "fsync", 1024, 0};
    for (int i = 2; i < argc; i++) {
        if (i + 1 >= argc)
            zl_benchproc_die ("every option takes a value");
        if (!strcmp (argv[i], "--jobs"))
            o.jobs = strtoull (argv[++i], NULL, 10);
        else if (!strcmp (argv[i], "--producers"))
            o.producers = atoi (argv[++i]);
        else if (!strcmp (argv[i], "--workers"))
            o.workers = atoi (argv[++i]);
        else if (!strcmp (argv[i], "--payload"))
            o.payload = (size_t)atoi (argv[++i]);
        else if (!strcmp (argv[i], "--durability"))
            o.durability = argv[++i];
        else if (!strcmp (argv[i], "--prefetch"))
            o.prefetch = (uint32_t)atoi (argv[++i]);
        else if (!strcmp (argv[i], "--priorities"))
            o.priorities = atoi (argv[++i]);
        else if (!strcmp (argv[i], "--ordering-keys"))
            o.keys = (uint32_t)strtoul (argv[++i], NULL, 10);
        else if (!strcmp (argv[i], "--broker-arg"))
            s_broker_arg = argv[++i];
        else
            zl_benchproc_die ("unknown option");
    }
    if (o.jobs == 0 || o.producers < 1 || o.workers < 0)
        zl_benchproc_die ("bad numbers");
    if (!strcmp (argv[1], "throughput"))
        return s_cmd_throughput (&o);
    if (!strcmp (argv[1], "memory"))
        return s_cmd_memory (&o);
    zl_benchproc_die ("unknown mode (throughput, memory, worker)");
    return 2;
}
