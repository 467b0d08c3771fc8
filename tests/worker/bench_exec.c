/*  bench_exec: the cost per job of the exec handler, without a broker.
    Runs N jobs through zl_exec_handler from T threads and prints jobs/s
    and microseconds per job, of wall time and of CPU time (this process
    and its children: the guards and the commands). Not a test (no assertions beyond the
    outcome): run it by hand to compare designs.

        bench_exec [-n JOBS] [-t THREADS] [-p PAYLOAD_BYTES] [-m RSS_MIB] [-c CMD]

    -m touches that many MiB of heap first, so the worker process is as
    big as a real one holding jobs (a fork copies page tables). */
#define _GNU_SOURCE
#include "clock.h"
#include "exec.h"
#include "zlane_worker.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

typedef struct {
    zl_exec_t *exec;
    zl_worker_job_t *job;
    atomic_long next;
    long n;
    atomic_long failed;
} s_bench_t;

/*  CPU time (user + system) of this process and its reaped children, in us. */
static double
s_cpu_us (void)
{
    struct rusage self, children;
    getrusage (RUSAGE_SELF, &self);
    getrusage (RUSAGE_CHILDREN, &children);
    const struct timeval *t[4] = {&self.ru_utime, &self.ru_stime, &children.ru_utime,
                                  &children.ru_stime};
    double us = 0;
    for (int i = 0; i < 4; i++)
        us += (double)t[i]->tv_sec * 1e6 + (double)t[i]->tv_usec;
    return us;
}

static void *
s_thread (void *arg)
{
    s_bench_t *b = arg;
    zl_worker_result_t r;
    while (atomic_fetch_add (&b->next, 1) < b->n) {
        memset (&r, 0, sizeof r);
        zl_exec_handler (b->job, &r, b->exec);
        if (r.outcome != ZL_WORKER_ACK)
            atomic_fetch_add (&b->failed, 1);
    }
    return NULL;
}

int
main (int argc, char **argv)
{
    long n = 2000, threads = 1, payload = 64, rss_mib = 0;
    const char *cmd = "cat >/dev/null";
    int opt;
    while ((opt = getopt (argc, argv, "n:t:p:m:c:")) != -1) {
        switch (opt) {
        case 'n': n = atol (optarg); break;
        case 't': threads = atol (optarg); break;
        case 'p': payload = atol (optarg); break;
        case 'm': rss_mib = atol (optarg); break;
        case 'c': cmd = optarg; break;
        default:
            fprintf (stderr,
                     "usage: bench_exec [-n JOBS] [-t THREADS] [-p BYTES] [-m MIB] [-c CMD]\n");
            return 2;
        }
    }
    if (threads < 1 || threads > 64 || n < 1 || payload < 0) {
        fprintf (stderr, "bench_exec: bad arguments\n");
        return 2;
    }
    char *ballast = NULL;
    if (rss_mib > 0) {
        ballast = malloc ((size_t)rss_mib << 20);
        memset (ballast, 1, (size_t)rss_mib << 20); // touched: mapped, in the page tables
    }
    uint8_t *data = malloc ((size_t)payload + 1);
    memset (data, 'x', (size_t)payload);
    zl_worker_job_t fields = {.job_id = 1,
                              .lease = 1,
                              .attempt = 1,
                              .tenant = "t",
                              .lane = "l",
                              .payload = data,
                              .len = (size_t)payload,
                              .idempotency_key = "k",
                              .lease_ms = 30000,
                              .max_attempts = 1};
    s_bench_t b = {.job = zl_worker_job_new (&fields), .n = n};
    zl_exec_opts_t opts = {.command = cmd, .worker_name = "bench", .kill_grace_ms = 1000};
    b.exec = zl_exec_new (&opts);
    atomic_init (&b.next, 0);
    atomic_init (&b.failed, 0);

    pthread_t tid[64];
    double cpu0 = s_cpu_us ();
    int64_t t0 = zl_clock_mono_us ();
    for (long i = 0; i < threads; i++)
        pthread_create (&tid[i], NULL, s_thread, &b);
    for (long i = 0; i < threads; i++)
        pthread_join (tid[i], NULL);
    int64_t us = zl_clock_mono_us () - t0;
    double cpu = s_cpu_us () - cpu0;

    printf ("%ld jobs, %ld threads, %ld-byte payload, %ld MiB ballast, '%s': %.0f jobs/s, "
            "%.1f us/job (wall), %.1f us/job (cpu, children included), %ld failed\n",
            n, threads, payload, rss_mib, cmd, n * 1e6 / (double)us, (double)us / (double)n,
            cpu / (double)n, (long)atomic_load (&b.failed));
    zl_exec_destroy (&b.exec);
    zl_worker_job_destroy (&b.job);
    free (data);
    free (ballast);
    return atomic_load (&b.failed) ? 1 : 0;
}
