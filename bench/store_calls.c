/*  zlane-bench-store-calls: what a job costs in store calls, through
    store.h, in one process: per job has_room, a nested batch with put_job,
    put_state and get_job (a dispatch), del_job (an ack); a commit per 1000
    jobs; then the bare call path (zl_store_in_batch and a get_state that
    misses). Prints the best of R rounds, in ns. For comparing builds (the
    cost of the store's seam, bench/RESULTS.md), not a throughput figure.

    zlane-bench-store-calls [--rounds R] [--store LOCATION]
    (default: an LMDB store in a fresh temp directory, durability none) */
#define _GNU_SOURCE // mkdtemp
#include "log.h"
#include "store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BATCHES 200
#define PER_BATCH 1000
#define BARE_CALLS 1000000

static double
s_now (void)
{
    struct timespec t;
    clock_gettime (CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int
main (int argc, char **argv)
{
    int rounds = 7;
    const char *where = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp (argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi (argv[++i]);
        else if (!strcmp (argv[i], "--store") && i + 1 < argc)
            where = argv[++i];
        else {
            fprintf (stderr, "usage: zlane-bench-store-calls [--rounds R] [--store LOCATION]\n");
            return 2;
        }
    }
    zl_log_set_level (ZL_LOG_ERROR);
    char dir[] = "/tmp/zlane-bench-store-calls-XXXXXX";
    if (!where) {
        if (!mkdtemp (dir)) {
            perror ("mkdtemp");
            return 1;
        }
        where = dir;
    }
    char err[512];
    zl_store_t *store = zl_store_open (where, ZL_DURABILITY_NONE, 1ull << 30, err, sizeof err);
    if (!store) {
        fprintf (stderr, "zlane-bench-store-calls: %s\n", err);
        return 1;
    }
    zl_arena_t *arena = zl_arena_new (1 << 20);
    static uint8_t payload[100];
    zl_job_rec_t job = {.tenant = "acme",
                        .lane = "bench",
                        .payload = {payload, sizeof payload},
                        .idempotency_key = "",
                        .max_attempts = 5,
                        .lease_ms = 30000};
    zl_state_rec_t leased = {.state = 3 /* leased */, .attempt = 1, .leased_to = "w1"};
    uint64_t id = 1;
    double best_job = 1e9, best_bare = 1e9;
    for (int r = 0; r < rounds; r++) {
        double t0 = s_now ();
        for (int b = 0; b < BATCHES; b++, id += PER_BATCH) {
            zl_store_begin (store);
            for (uint64_t j = id; j < id + PER_BATCH; j++) {
                zl_store_has_room (store, 400);
                zl_store_sub_begin (store);
                zl_store_put_job (store, j, &job);
                zl_store_sub_commit (store);
            }
            for (uint64_t j = id; j < id + PER_BATCH; j++) {
                zl_job_rec_t got;
                zl_store_put_state (store, j, &leased);
                zl_store_get_job (store, j, ZL_PRIORITY_DEFAULT, arena, &got);
                zl_arena_reset (arena);
            }
            for (uint64_t j = id; j < id + PER_BATCH; j++)
                zl_store_del_job (store, j, ZL_PRIORITY_DEFAULT);
            if (zl_store_commit (store) != ZL_STORE_OK) {
                fprintf (stderr, "zlane-bench-store-calls: a commit failed\n");
                return 1;
            }
        }
        double per_job = (s_now () - t0) / (BATCHES * PER_BATCH);
        best_job = per_job < best_job ? per_job : best_job;
        t0 = s_now ();
        zl_store_begin (store);
        for (int i = 0; i < BARE_CALLS; i++) {
            zl_state_rec_t st;
            if (zl_store_in_batch (store))
                zl_store_get_state (store, 0, arena, &st);
        }
        zl_store_commit (store);
        double per_call = (s_now () - t0) / BARE_CALLS;
        best_bare = per_call < best_bare ? per_call : best_bare;
    }
    printf ("store calls, best of %d: %.1f ns a job (7 calls, a commit per %d jobs); %.1f ns for "
            "in_batch + a get_state that misses\n",
            rounds, best_job * 1e9, PER_BATCH, best_bare * 1e9);
    zl_arena_destroy (&arena);
    zl_store_close (&store);
    if (where == dir) {
        char path[sizeof dir + 16];
        for (const char *f = "data.mdb\0lock.mdb\0zlane.lock\0"; *f; f += strlen (f) + 1) {
            snprintf (path, sizeof path, "%s/%s", dir, f);
            remove (path);
        }
        remove (dir);
    }
    return 0;
}
