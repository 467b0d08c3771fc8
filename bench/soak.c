/*  zlane-bench-soak: the store's size under a long steady load.

    zlane-bench-soak [--seconds S | --jobs N] [--rate R] [--producers P]
                     [--workers W] [--payload B] [--durability fsync|none]
                     [--interval S] [--user-keys | --random-keys] [-- BROKER FLAGS...]
        starts a broker (lane "bench", then BROKER FLAGS) and W worker
        processes (zlane-bench worker: library workers, no-op handler), then
        P producer threads submit R jobs/s in all (0 = as fast as credit
        allows) for S seconds or N jobs, with the keys the producer library
        makes (or, with --user-keys, a key of their own per job, a user's key
        "user-<producer>-<n>"; with --random-keys a user's key of 16 random
        hex digits and a letter, so that no two share a prefix). Every interval it prints the rate,
   the queue, the store's used and file bytes, its idempotency keys and bytes per key, and the
        broker's RSS; at the end, once the queue has drained, a summary:
        store bytes at the end of each quarter of the run, the largest and
        smallest over the second half, and the bytes per key.

    Every process it starts is killed at exit, by PID. */
#define _GNU_SOURCE
#include "benchbroker.h"
#include "benchproc.h"
#include "clock.h"
#include "rng.h"
#include "zlane_producer.h"

#include <czmq.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_WORKERS 16
#define MAX_PRODUCERS 16
#define MAX_BROKER_ARGS 48
#define BATCH 256

typedef struct {
    const char *endpoint;
    double rate;       // jobs/s of this thread, 0 = flat out
    uint64_t max_jobs; // 0 = until stopped
    size_t payload;
    bool user_keys;
    bool random_keys;
    int index;
    atomic_uint_fast64_t accepted, rejected, timed_out;
} producer_arg_t;

static atomic_bool s_stop;

static void
s_on_result (const zl_producer_result_t *r, void *arg)
{
    producer_arg_t *p = arg;
    if (r->status == ZL_PRODUCER_ACCEPTED)
        atomic_fetch_add (&p->accepted, 1);
    else if (r->status == ZL_PRODUCER_REJECTED)
        atomic_fetch_add (&p->rejected, 1);
    else
        atomic_fetch_add (&p->timed_out, 1);
}

static void *
s_producer (void *arg)
{
    producer_arg_t *p = arg;
    zl_producer_opts_t opts;
    zl_producer_opts_defaults (&opts);
    opts.endpoint = p->endpoint;
    opts.client = "soak";
    opts.on_result = s_on_result;
    opts.on_result_arg = p;
    zl_producer_t *prod = zl_producer_new (&opts);
    char *payload = malloc (p->payload + 1);
    memset (payload, 'x', p->payload);
    zl_producer_job_t jobs[BATCH];
    static __thread char keys[BATCH][48];
    for (int i = 0; i < BATCH; i++)
        jobs[i] = (zl_producer_job_t){
            .tenant = "t", .lane = "bench", .payload = payload, .payload_len = p->payload};
    uint64_t done = 0;
    zl_rng_t rng;
    zl_rng_seed (&rng, 0);
    int64_t t0 = zl_clock_mono_us ();
    while (!atomic_load (&s_stop) && (!p->max_jobs || done < p->max_jobs)) {
        uint64_t want = BATCH;
        if (p->rate > 0) {
            double due = (double)(zl_clock_mono_us () - t0) / 1e6 * p->rate;
            want = due > (double)done ? (uint64_t)due - done : 0;
            if (want == 0) {
                zl_producer_poll (prod, 1);
                continue;
            }
            if (want > BATCH)
                want = BATCH;
        }
        if (p->max_jobs && want > p->max_jobs - done)
            want = p->max_jobs - done;
        if (p->user_keys)
            for (uint64_t i = 0; i < want; i++) {
                if (p->random_keys)
                    snprintf (keys[i], sizeof keys[i], "%016" PRIx64 "k", zl_rng_next (&rng));
                else
                    snprintf (keys[i], sizeof keys[i], "user-%d-%" PRIu64, p->index, done + i);
                jobs[i].idempotency_key = keys[i];
            }
        int rc = zl_producer_submit_batch (prod, jobs, (size_t)want, NULL);
        if (rc > 0)
            done += (uint64_t)rc;
        else if (rc < 0 && errno != EAGAIN && errno != EINTR && errno != ETIMEDOUT)
            break;
        zl_producer_poll (prod, 0);
    }
    zl_producer_wait (prod, 120000);
    zl_producer_destroy (&prod);
    free (payload);
    return NULL;
}

// ---------------------------------------------------------------- samples
typedef struct {
    double t;
    int64_t accepted, acked, depth, used, file, keys, evicted, expired, full, dups;
    uint64_t rss, anon;
} sample_t;

static int64_t
s_counter (const zl_stats_t *st, const char *name)
{
    return st ? zl_benchbroker_counter_of (st, name) : -1;
}

static sample_t
s_sample (zl_benchbroker_t *b, double t)
{
    sample_t s = {.t = t};
    const zl_stats_t *st = zl_benchbroker_stats (b);
    s.accepted = s_counter (st, "jobs_accepted");
    s.acked = s_counter (st, "jobs_acked");
    s.used = s_counter (st, "store_used_bytes");
    s.file = s_counter (st, "store_file_bytes");
    s.keys = s_counter (st, "store_idem_keys");
    s.evicted = s_counter (st, "dedup_evicted");
    s.expired = s_counter (st, "dedup_expired");
    s.full = s_counter (st, "err_store_full");
    s.dups = s_counter (st, "jobs_duplicate");
    for (size_t i = 0; st && i < st->n_lanes; i++)
        s.depth += (int64_t)(st->lanes[i].ready + st->lanes[i].in_flight + st->lanes[i].delayed);
    s.rss = zl_benchproc_rss (zl_benchbroker_pid (b), &s.anon, NULL);
    return s;
}

static void
s_print (const sample_t *s, const sample_t *prev)
{
    double dt = s->t - prev->t;
    double rate = dt > 0 ? (double)(s->accepted - prev->accepted) / dt : 0;
    printf (
        "t=%6.0fs accepted %10" PRId64 " (%7.0f/s) acked %10" PRId64 " depth %7" PRId64
        " | store used %8.2f MiB file %8.2f MiB keys %9" PRId64 " (%5.1f B/key) expired %10" PRId64
        " evicted %9" PRId64 " store_full %" PRId64 " | rss %.1f MiB (anon %.1f)\n",
        s->t, s->accepted, rate, s->acked, s->depth, (double)s->used / 1048576.0,
        (double)s->file / 1048576.0, s->keys, s->keys > 0 ? (double)s->used / (double)s->keys : 0.0,
        s->expired, s->evicted, s->full, (double)s->rss / 1048576.0, (double)s->anon / 1048576.0);
    fflush (stdout);
}

static void
s_usage (void)
{
    printf ("usage: zlane-bench-soak [--seconds S | --jobs N] [--rate R] [--producers P]\n"
            "                        [--workers W] [--payload B] [--durability fsync|none]\n"
            "                        [--interval S] [--user-keys | --random-keys]\n"
            "                        [-- BROKER FLAGS...]\n");
}

int
main (int argc, char **argv)
{
    zsys_handler_set (NULL);
    double seconds = 0, rate = 0, interval = 10;
    uint64_t jobs = 0;
    int producers = 1, workers = 2;
    size_t payload = 100;
    bool user_keys = false, random_keys = false;
    const char *durability = "fsync";
    const char *bargs[MAX_BROKER_ARGS + 8];
    int nb = 0;
    bargs[nb++] = "--lane";
    bargs[nb++] = "bench";
    bargs[nb++] = "--durability";
    int dur_at = nb;
    bargs[nb++] = durability;
    for (int i = 1; i < argc; i++) {
        if (!strcmp (argv[i], "--help") || !strcmp (argv[i], "-h")) {
            s_usage ();
            return 0;
        }
        if (!strcmp (argv[i], "--")) {
            for (i++; i < argc && nb < MAX_BROKER_ARGS; i++)
                bargs[nb++] = argv[i];
            break;
        }
        if (!strcmp (argv[i], "--user-keys") || !strcmp (argv[i], "--random-keys")) {
            user_keys = true;
            random_keys = !strcmp (argv[i], "--random-keys");
            continue;
        }
        if (i + 1 >= argc)
            zl_benchproc_die ("every option but --user-keys and --random-keys takes a value");
        if (!strcmp (argv[i], "--seconds"))
            seconds = atof (argv[++i]);
        else if (!strcmp (argv[i], "--jobs"))
            jobs = strtoull (argv[++i], NULL, 10);
        else if (!strcmp (argv[i], "--rate"))
            rate = atof (argv[++i]);
        else if (!strcmp (argv[i], "--producers"))
            producers = atoi (argv[++i]);
        else if (!strcmp (argv[i], "--workers"))
            workers = atoi (argv[++i]);
        else if (!strcmp (argv[i], "--payload"))
            payload = (size_t)atoi (argv[++i]);
        else if (!strcmp (argv[i], "--durability"))
            durability = argv[++i];
        else if (!strcmp (argv[i], "--interval"))
            interval = atof (argv[++i]);
        else
            zl_benchproc_die ("unknown option (see --help)");
    }
    if ((seconds <= 0) == (jobs == 0))
        zl_benchproc_die ("give one of --seconds and --jobs");
    if (producers < 1 || producers > MAX_PRODUCERS || workers < 1 || workers > MAX_WORKERS ||
        interval <= 0 || rate < 0)
        zl_benchproc_die ("bad numbers");
    bargs[dur_at] = durability;
    bargs[nb] = NULL;

    zl_benchproc_init ("zlane-bench-soak", "zlane-soak");
    zl_benchbroker_t *b = zl_benchbroker_start (zl_benchproc_tmp (), bargs);
    const char *backend = zl_benchbroker_endpoint (b, "backend");
    char bin[PATH_MAX + 32], log[PATH_MAX + 32];
    snprintf (bin, sizeof bin, "%s/zlane-bench", zl_benchproc_bindir ());
    for (int w = 0; w < workers; w++) {
        snprintf (log, sizeof log, "%s/worker%d.log", zl_benchproc_tmp (), w);
        char *wargv[] = {bin, "worker", "--broker", (char *)backend, "--prefetch", "1024", NULL};
        zl_benchproc_spawn (wargv, log);
    }
    zl_benchbroker_wait (b, "workers_ready", workers, 10000);

    printf ("soak: seconds %.0f jobs %" PRIu64 " rate %.0f/s (0 = full speed), %d producer(s) x %d "
            "worker(s), payload %zu, durability %s, %s keys; broker flags:",
            seconds, jobs, rate, producers, workers, payload, durability,
            random_keys ? "users' random"
            : user_keys ? "users'"
                        : "the library's");
    for (int i = 0; i < nb; i++)
        printf (" %s", bargs[i]);
    printf ("\n");
    sample_t first = s_sample (b, 0);
    s_print (&first, &first);

    producer_arg_t *args = calloc ((size_t)producers, sizeof *args);
    pthread_t threads[MAX_PRODUCERS];
    for (int p = 0; p < producers; p++) {
        args[p].endpoint = zl_benchbroker_endpoint (b, "frontend");
        args[p].rate = rate / producers;
        args[p].max_jobs =
            jobs ? jobs / (uint64_t)producers + (p == 0 ? jobs % (uint64_t)producers : 0) : 0;
        args[p].payload = payload;
        args[p].user_keys = user_keys;
        args[p].random_keys = random_keys;
        args[p].index = p;
        pthread_create (&threads[p], NULL, s_producer, &args[p]);
    }

    size_t cap = 1024, n = 0;
    sample_t *samples = malloc (cap * sizeof *samples);
    samples[n++] = first;
    int64_t t0 = zl_clock_mono_us ();
    double cpu0 = zl_benchproc_cpu_seconds (zl_benchbroker_pid (b));
    double next = interval;
    for (;;) {
        double t = (double)(zl_clock_mono_us () - t0) / 1e6;
        bool done = seconds > 0 ? t >= seconds : false;
        if (jobs) {
            uint64_t got = 0;
            for (int p = 0; p < producers; p++)
                got += atomic_load (&args[p].accepted) + atomic_load (&args[p].rejected) +
                       atomic_load (&args[p].timed_out);
            done = got >= jobs;
        }
        if (done)
            break;
        if (t < next) {
            double left = next - t;
            usleep ((useconds_t)((left > 0.2 ? 0.2 : left) * 1e6));
            continue;
        }
        next += interval;
        if (n == cap)
            samples = realloc (samples, (cap *= 2) * sizeof *samples);
        samples[n] = s_sample (b, t);
        s_print (&samples[n], &samples[n - 1]);
        n++;
    }
    atomic_store (&s_stop, true);
    for (int p = 0; p < producers; p++)
        pthread_join (threads[p], NULL);
    double t_sent = (double)(zl_clock_mono_us () - t0) / 1e6;
    double cpu1 = zl_benchproc_cpu_seconds (zl_benchbroker_pid (b));
    uint64_t accepted = 0, rejected = 0, timed_out = 0;
    for (int p = 0; p < producers; p++) {
        accepted += atomic_load (&args[p].accepted);
        rejected += atomic_load (&args[p].rejected);
        timed_out += atomic_load (&args[p].timed_out);
    }
    // drained: every accepted job acked (duplicates were never queued)
    sample_t s = s_sample (b, t_sent);
    zl_benchbroker_wait (b, "jobs_acked", s.accepted, 120000);
    if (n == cap)
        samples = realloc (samples, (cap *= 2) * sizeof *samples);
    samples[n] = s_sample (b, (double)(zl_clock_mono_us () - t0) / 1e6);
    printf ("drained:\n");
    s_print (&samples[n], &samples[n - 1]);
    n++;

    const sample_t *last = &samples[n - 1];
    int64_t hmin = INT64_MAX, hmax = 0, fmax = 0, kmax = 0;
    for (size_t i = 0; i < n; i++) {
        if (samples[i].t >= t_sent / 2 && i > 0) {
            if (samples[i].used < hmin)
                hmin = samples[i].used;
            if (samples[i].used > hmax)
                hmax = samples[i].used;
        }
        if (samples[i].file > fmax)
            fmax = samples[i].file;
        if (samples[i].keys > kmax)
            kmax = samples[i].keys;
    }
    printf ("summary: %" PRIu64 " jobs accepted (%" PRIu64 " rejected, %" PRIu64
            " timed out) in %.0f s = %.0f jobs/s%s; broker cpu %.0f%%\n",
            accepted, rejected, timed_out, t_sent, (double)accepted / t_sent,
            rate > 0 ? " (steady rate asked)" : " (full speed)", 100.0 * (cpu1 - cpu0) / t_sent);
    printf ("summary: store used at the quarters:");
    for (int q = 1; q <= 4; q++) {
        double tq = t_sent * q / 4;
        const sample_t *best = &samples[0];
        for (size_t i = 0; i < n; i++)
            if (samples[i].t <= tq + interval / 2)
                best = &samples[i];
        printf (" %.2f", (double)best->used / 1048576.0);
    }
    printf (" MiB; over the second half min %.2f max %.2f MiB; file max %.2f MiB, at the end "
            "%.2f MiB\n",
            hmin == INT64_MAX ? 0.0 : (double)hmin / 1048576.0, (double)hmax / 1048576.0,
            (double)fmax / 1048576.0, (double)last->file / 1048576.0);
    printf ("summary: keys max %" PRId64 ", at the end %" PRId64 "; store used at the end %" PRId64
            " bytes, %" PRId64 " at the start: %.1f bytes per key; expired %" PRId64
            ", evicted %" PRId64 ", err_store_full %" PRId64 ", duplicates %" PRId64 "\n",
            kmax, last->keys, last->used, first.used,
            last->keys > 0 ? (double)(last->used - first.used) / (double)last->keys : 0.0,
            last->expired, last->evicted, last->full, last->dups);
    free (samples);
    free (args);
    zl_benchbroker_destroy (&b);
    return 0;
}
