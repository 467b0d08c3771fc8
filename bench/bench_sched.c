/*  zlane-bench-sched: what fairness costs per dispatch, with many tenants.

    zlane-bench-sched [--tenants N] [--seconds S] [--rounds R]
        drives the scheduler in-process (broker/scheduler.c, no sockets, no
        clock in the loop): N tenants backlogged in one lane against one
        tenant, under wfq and fifo, and reports dispatch cycles per CPU second
        (pop + charge + the job back to its flow) for each, and the ratio.
        Scenarios: every job charged at once; 64 jobs in flight, charged
        when they end (the broker's case: estimate at pop, correction at
        ack); N tenants parked at their concurrency cap beside one free one.
    zlane-bench-sched --full [--live] [--tenants N] [--jobs J] [--workers W]
        the same question through the real broker: a broker (durability
        none), W worker threads (the zlane_worker library, no-op handler)
        and the producer library submitting J jobs spread over 1 tenant,
        then over N tenants. By default every job is accepted before the
        workers start (N tenants backlogged), and it reports jobs/s from
        the workers' start to the last job run (seen by the handlers, not by
        polling broker stats): the dispatch rate. --live starts the workers
        first and times from the first submit.

    Every process it starts is killed at exit, by PID. */
#include "benchbroker.h"
#include "benchproc.h"
#include "clock.h"
#include "codec.h"
#include "config.h"
#include "job.h"
#include "log.h"
#include "lane.h"
#include "scheduler.h"
#include "wire.h"
#include "zlane_producer.h"
#include "zlane_worker.h"

#include <czmq.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NOW_MS (INT64_MAX / 4) // no limits configured: the time does not matter
#define IN_FLIGHT 64
#define CHUNK 4096 // cycles between clock reads

typedef enum { SCEN_AT_ONCE, SCEN_IN_FLIGHT, SCEN_PARKED } scenario_t;

static const char *const s_scen_names[] = {"charged at once", "64 in flight, charged at end",
                                           "parked at cap + 1 free"};

// ---------------------------------------------------------------- in-process
typedef struct {
    zl_broker_config_t cfg;
    zl_lanes_t *lanes;
    zl_sched_t *sched;
    zl_lane_t *lane;
    zl_job_t *pool;
    size_t n_tenants;
    uint64_t seq;
} world_t;

// A lane with `n` tenants, `per` jobs each (and, for SCEN_PARKED, the `n`
// tenants each capped at 1 with one job running, plus one free tenant).
static world_t *
s_world (zl_sched_policy_t policy, uint64_t quantum, size_t n, size_t per, scenario_t scen)
{
    world_t *w = calloc (1, sizeof *w);
    zl_broker_config_defaults (&w->cfg);
    zl_broker_config_lane (&w->cfg, "bench");
    w->lanes = zl_lanes_new (&w->cfg);
    w->sched = zl_sched_new (policy);
    zl_sched_set_quantum (w->sched, quantum);
    w->lane = zl_lanes_lookup (w->lanes, "bench");
    size_t n_flows = scen == SCEN_PARKED ? n + 1 : n;
    w->n_tenants = n_flows;
    w->pool = calloc (n_flows * per, sizeof (zl_job_t));
    for (size_t i = 0; i < n_flows * per; i++)
        w->pool[i].timer_idx = UINT32_MAX; // no timer (as jobs.c makes them)
    zl_flow_t **flows = calloc (n_flows, sizeof *flows);
    char name[32];
    for (size_t t = 0; t < n_flows; t++) {
        snprintf (name, sizeof name, "t%zu", t);
        zl_tenant_t *tenant = zl_lanes_tenant (w->lanes, name);
        if (scen == SCEN_PARKED && t < n)
            tenant->cfg.max_in_flight = 1;
        flows[t] = zl_sched_flow (w->sched, w->lane, tenant);
    }
    // arrivals interleaved across tenants, as a busy lane sees them
    for (size_t k = 0; k < per; k++)
        for (size_t t = 0; t < n_flows; t++) {
            zl_job_t *job = &w->pool[t * per + k];
            job->id = t * per + k + 1;
            job->flow = flows[t];
            job->state = ZL_JOB_READY;
            job->seq = ++w->seq;
            zl_sched_push (w->sched, job);
        }
    if (scen == SCEN_PARKED) {
        // every capped tenant starts one job and parks the rest
        size_t running = 0;
        while (running < n) {
            zl_job_t *job = zl_sched_pop (w->sched, w->lane, NOW_MS);
            job->flow->in_flight++;
            job->flow->tenant->in_flight++;
            if (job->flow->tenant->cfg.max_in_flight)
                running++;
            else { // the free one's: straight back
                job->flow->in_flight--;
                job->flow->tenant->in_flight--;
                zl_sched_charge (w->sched, job, 1000);
                job->seq = ++w->seq;
                zl_sched_push (w->sched, job);
            }
        }
        // one more pop parks whatever capped flow is still in the heap
        for (size_t k = 0; k < n + 1; k++) {
            zl_job_t *job = zl_sched_pop (w->sched, w->lane, NOW_MS);
            zl_sched_charge (w->sched, job, 1000);
            job->seq = ++w->seq;
            zl_sched_push (w->sched, job);
        }
    }
    free (flows);
    return w;
}

static void
s_world_destroy (world_t **w_p)
{
    world_t *w = *w_p;
    zl_sched_destroy (&w->sched);
    zl_lanes_destroy (&w->lanes);
    zl_broker_config_free (&w->cfg);
    free (w->pool);
    free (w);
    *w_p = NULL;
}

// A job's worker time: a few tenants' jobs cost more, so WFQ keys vary.
static inline uint64_t
s_cost (const zl_job_t *job)
{
    return 1000 + (job->flow->tenant->index % 7) * 150;
}

// This thread's CPU time in us: the rate is per CPU second, so other load
// on the machine (which takes the CPU away) does not count against it.
static int64_t
s_cpu_us (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

// Run dispatch cycles for about `seconds` of CPU; returns cycles per CPU second.
static double
s_run (world_t *w, scenario_t scen, double seconds)
{
    zl_job_t *ring[IN_FLIGHT] = {0};
    size_t head = 0;
    uint64_t cycles = 0;
    int64_t t0 = s_cpu_us (), t1 = t0;
    int64_t budget = (int64_t)(seconds * 1e6);
    while (t1 - t0 < budget) {
        for (int k = 0; k < CHUNK; k++) {
            zl_job_t *job = zl_sched_pop (w->sched, w->lane, NOW_MS);
            if (!job) {
                fprintf (stderr, "zlane-bench-sched: the lane ran dry\n");
                exit (1);
            }
            if (scen == SCEN_IN_FLIGHT) {
                // lease it; the oldest in flight ends and is charged now
                job->flow->in_flight++;
                job->flow->tenant->in_flight++;
                zl_job_t *done = ring[head];
                ring[head] = job;
                head = (head + 1) % IN_FLIGHT;
                if (!done)
                    continue;
                job = done;
                job->flow->in_flight--;
                job->flow->tenant->in_flight--;
                zl_sched_charge (w->sched, job, s_cost (job));
                zl_sched_released (w->sched, job->flow);
            } else
                zl_sched_charge (w->sched, job, s_cost (job));
            job->seq = ++w->seq; // ready again: to the back of its flow
            zl_sched_push (w->sched, job);
        }
        cycles += CHUNK;
        t1 = s_cpu_us ();
    }
    return (double)cycles / ((double)(t1 - t0) / 1e6);
}

// Best of `rounds` fresh runs.
static double
s_measure (zl_sched_policy_t policy, uint64_t quantum, size_t tenants, scenario_t scen,
           double seconds, int rounds)
{
    double best = 0;
    for (int r = 0; r < rounds; r++) {
        // enough jobs per tenant that the lane never runs dry with 64 in flight
        size_t per =
            scen == SCEN_AT_ONCE ? 2 : 2 + (2 * IN_FLIGHT + tenants) / (tenants ? tenants : 1);
        world_t *w = s_world (policy, quantum, tenants, per, scen);
        s_run (w, scen, seconds / 5); // warm the caches
        double rate = s_run (w, scen, seconds);
        best = rate > best ? rate : best;
        s_world_destroy (&w);
    }
    return best;
}

static int
s_cmd_inprocess (size_t tenants, double seconds, int rounds)
{
    printf ("zlane-bench-sched: the scheduler alone, in-process: dispatch cycles (pop + charge +\n"
            "back to its flow) per CPU second, best of %d runs of %.1f s, %zu tenants vs 1.\n"
            "What the scheduler's part of a dispatch costs; the dispatch rate target (within\n"
            "20 %% of one tenant's) is the broker's, measured by --full.\n\n",
            rounds, seconds, tenants);
    printf ("%-22s %-30s %14s %14s %8s %10s\n", "policy", "scenario", "1 tenant/s",
            "many tenants/s", "ratio", "ns/cycle");
    static const struct {
        const char *label;
        zl_sched_policy_t policy;
        uint64_t quantum;
    } rows[] = {{"wfq (quantum 1000 us)", ZL_SCHED_WFQ, 1000},
                {"wfq (quantum 0, exact)", ZL_SCHED_WFQ, 0},
                {"fifo", ZL_SCHED_FIFO, 1000}};
    for (size_t p = 0; p < sizeof rows / sizeof rows[0]; p++)
        for (int s = 0; s < 3; s++) {
            scenario_t scen = (scenario_t)s;
            // the baseline: one tenant (for PARKED: no parked ones beside it)
            double one = s_measure (rows[p].policy, rows[p].quantum, scen == SCEN_PARKED ? 0 : 1,
                                    scen, seconds, rounds);
            double many =
                s_measure (rows[p].policy, rows[p].quantum, tenants, scen, seconds, rounds);
            printf ("%-22s %-30s %14.0f %14.0f %8.2f %5.0f/%-4.0f\n", rows[p].label,
                    s_scen_names[s], one, many, many / one, 1e9 / one, 1e9 / many);
        }
    return 0;
}

// ---------------------------------------------------------------- full path

// The full path's workers: zlane_worker threads in this process with a
// no-op handler that counts, so the end of a run is seen without asking
// the broker for stats (with 10,000 tenants a stats reply holds 20,000
// groups: polling it would be the benchmark).
static atomic_uint_fast64_t s_handled;

static void
s_noop (const zl_worker_job_t *job, zl_worker_result_t *result, void *arg)
{
    (void)job;
    (void)arg;
    result->outcome = ZL_WORKER_ACK;
    atomic_fetch_add_explicit (&s_handled, 1, memory_order_relaxed);
}

static void *
s_worker_thread (void *arg)
{
    zl_worker_run ((zl_worker_t *)arg);
    return NULL;
}

// Workers: start `n` zlane_worker threads on the backend.
static void
s_workers_start (zl_benchbroker_t *b, int n, zl_worker_t **w, pthread_t *threads)
{
    static const char *const lanes[] = {"bench"};
    for (int i = 0; i < n; i++) {
        zl_worker_opts_t wo;
        zl_worker_opts_defaults (&wo);
        wo.endpoint = zl_benchbroker_endpoint (b, "backend");
        wo.lanes = lanes;
        wo.n_lanes = 1;
        wo.concurrency = 1;
        wo.prefetch = 256;
        wo.handler = s_noop;
        w[i] = zl_worker_new (&wo);
        if (!w[i])
            zl_benchproc_die ("cannot make a worker");
        pthread_create (&threads[i], NULL, s_worker_thread, w[i]);
    }
}

// Submit `jobs` jobs round-robin over `tenants` tenants, as fast as credit
// allows.
static void
s_submit_all (zl_producer_t *prod, size_t tenants, uint64_t jobs)
{
    char (*names)[24] = calloc (tenants, sizeof *names);
    for (size_t t = 0; t < tenants; t++)
        snprintf (names[t], sizeof names[t], "t%05zu", t);
    enum { BATCH = 256 };
    zl_producer_job_t batch[BATCH];
    uint64_t done = 0;
    while (done < jobs) {
        size_t n = jobs - done > BATCH ? BATCH : (size_t)(jobs - done);
        for (size_t i = 0; i < n; i++)
            batch[i] = (zl_producer_job_t){.tenant = names[(done + i) % tenants],
                                           .lane = "bench",
                                           .payload = "x",
                                           .payload_len = 1};
        int rc = zl_producer_submit_batch (prod, batch, n, NULL);
        if (rc > 0)
            done += (uint64_t)rc;
        else if (rc < 0 && errno != EAGAIN && errno != EINTR)
            zl_benchproc_die ("submit failed");
        zl_producer_poll (prod, rc > 0 ? 0 : 1);
    }
    free (names);
}

// One full run: J jobs over `tenants` tenants; returns jobs/s. Backlogged
// (live false): every job is submitted and accepted first, then the workers
// start, and the clock runs from their start to the last job run: the
// dispatch rate with the whole backlog waiting. Live: the workers run while
// the producer submits, and the clock runs from the first submit.
static double
s_full_run (const char *scheduler, const char *quantum, size_t tenants, uint64_t jobs, int workers,
            bool live)
{
    char dir[PATH_MAX + 32];
    static int run;
    snprintf (dir, sizeof dir, "%s/run%d", zl_benchproc_tmp (), run++);
    if (mkdir (dir, 0755) != 0)
        zl_benchproc_die ("cannot make a run dir");
    const char *args[] = {"--lane",      "bench",   "--durability",      "none",
                          "--max-depth", "2000000", "--producer-window", "50000",
                          "--scheduler", scheduler, "--wfq-quantum-us",  quantum,
                          NULL};
    zl_benchbroker_t *b = zl_benchbroker_start (dir, args);
    atomic_store (&s_handled, 0);
    zl_worker_t *w[32];
    pthread_t threads[32];
    zl_producer_opts_t opts;
    zl_producer_opts_defaults (&opts);
    opts.endpoint = zl_benchbroker_endpoint (b, "frontend");
    opts.client = "bench-sched";
    opts.deadline_ms = 120000;
    opts.nonblock = true;
    zl_producer_t *prod = zl_producer_new (&opts);
    int64_t t0;
    if (live) {
        s_workers_start (b, workers, w, threads);
        zl_benchbroker_wait (b, "workers_ready", workers, 10000);
        t0 = zl_clock_mono_us ();
        s_submit_all (prod, tenants, jobs);
    } else {
        s_submit_all (prod, tenants, jobs);
        if (zl_producer_wait (prod, 120000) != 0)
            zl_benchproc_die ("the jobs were not all accepted within 120 s");
        t0 = zl_clock_mono_us ();
        s_workers_start (b, workers, w, threads);
    }
    int64_t deadline = zl_clock_mono_ms () + 600000;
    while (atomic_load (&s_handled) < jobs) {
        zl_producer_poll (prod, 1);
        if (zl_clock_mono_ms () > deadline)
            zl_benchproc_die ("the jobs did not all run within 10 minutes");
    }
    int64_t t1 = zl_clock_mono_us ();
    zl_producer_wait (prod, 120000);
    zl_benchbroker_wait (b, "jobs_acked", (int64_t)jobs, 60000); // untimed: the broker agrees
    for (int i = 0; i < workers; i++)
        zl_worker_stop (w[i]);
    for (int i = 0; i < workers; i++) {
        pthread_join (threads[i], NULL);
        zl_worker_destroy (&w[i]);
    }
    zl_producer_destroy (&prod);
    zl_benchbroker_destroy (&b);
    zl_benchproc_stop_all (5000); // SIGTERM: a perf-wrapped broker writes its data
    return (double)jobs / ((double)(t1 - t0) / 1e6);
}

static int
s_cmd_full (size_t tenants, uint64_t jobs, int workers, int rounds, bool live)
{
    zl_log_set_level (ZL_LOG_WARN); // the worker library's connect/stop lines
    zl_benchproc_init ("zlane-bench-sched", "zlane-bench-sched");
    printf ("zlane-bench-sched --full%s: %" PRIu64 " jobs through a real broker (durability none), "
            "%d worker threads, best of %d\n%s\n\n",
            live ? " --live" : "", jobs, workers, rounds,
            live ? "jobs/s from the first submit to the last job run, workers running throughout"
                 : "dispatch rate: every job accepted first, then jobs/s from the workers' start "
                   "to the last job run");
    printf ("%-22s %14s %14s %8s\n", "policy", "1 tenant/s", "many tenants/s", "ratio");
    static const struct {
        const char *label, *scheduler, *quantum;
    } rows[] = {{"wfq (quantum 1000 us)", "wfq", "1000"},
                {"wfq (quantum 0, exact)", "wfq", "0"},
                {"fifo", "fifo", "1000"}};
    for (size_t p = 0; p < sizeof rows / sizeof rows[0]; p++) {
        double one = 0, many = 0;
        for (int r = 0; r < rounds; r++) { // alternate, so drift hits both alike
            double a = s_full_run (rows[p].scheduler, rows[p].quantum, 1, jobs, workers, live);
            double m =
                s_full_run (rows[p].scheduler, rows[p].quantum, tenants, jobs, workers, live);
            one = a > one ? a : one;
            many = m > many ? m : many;
        }
        printf ("%-22s %14.0f %14.0f %8.2f   (%zu tenants)%s\n", rows[p].label, one, many,
                many / one, tenants, p == 0 && many / one < 0.8 ? "  (target missed)" : "");
    }
    return 0;
}

// ---------------------------------------------------------------- main
static void
s_usage (FILE *out)
{
    fprintf (out,
             "usage: zlane-bench-sched [--tenants N] [--seconds S] [--rounds R]\n"
             "       zlane-bench-sched --full [--live] [--tenants N] [--jobs J] [--workers W] "
             "[--rounds R]\n"
             "In-process: the scheduler's dispatch cycles/s with N tenants (default 10000) vs 1.\n"
             "--full: dispatch rate through a real broker with N tenants backlogged vs 1;\n"
             "        --live: workers run while the producer submits.\n");
}

int
main (int argc, char **argv)
{
    size_t tenants = 10000;
    double seconds = 1.0;
    int rounds = 3, workers = 2;
    uint64_t jobs = 400000;
    bool full = false, live = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp (a, "--full"))
            full = true;
        else if (!strcmp (a, "--live"))
            live = true;
        else if (!strcmp (a, "--tenants") && v)
            tenants = strtoull (argv[++i], NULL, 10);
        else if (!strcmp (a, "--seconds") && v)
            seconds = atof (argv[++i]);
        else if (!strcmp (a, "--rounds") && v)
            rounds = atoi (argv[++i]);
        else if (!strcmp (a, "--jobs") && v)
            jobs = strtoull (argv[++i], NULL, 10);
        else if (!strcmp (a, "--workers") && v)
            workers = atoi (argv[++i]);
        else if (!strcmp (a, "-h") || !strcmp (a, "--help")) {
            s_usage (stdout);
            return 0;
        } else {
            s_usage (stderr);
            return 2;
        }
    }
    if (tenants < 1 || seconds <= 0 || rounds < 1 || workers < 1 || workers > 32 || jobs < 1) {
        s_usage (stderr);
        return 2;
    }
    if (!full)
        return s_cmd_inprocess (tenants, seconds, rounds);
    return s_cmd_full (tenants, jobs, workers, rounds, live);
}
