/*  zlane-bench-store-recover: how long a broker taking over a store needs
    to read it back, through store.h: fill a store with N jobs (100-byte
    payloads, each with a key a client library made, like a producer's
    resends would; every tenth with a state, as a retried job has), close
    it, open it again and time
      - open: connecting and checking (LMDB: mapping the file);
      - lead: zl_store_elect (PostgreSQL: the lease, then the whole image
        read through a binary cursor; LMDB: nothing);
      - recover: zl_store_recover, every job decoded in id order.
    Prints one line per phase, in seconds. The broker's own recovery adds
    the scheduler's work to `recover` (its log says the total).

    zlane-bench-store-recover --store LOCATION [--jobs N] [--fill-only | --read-only]
    (LOCATION: a directory for LMDB, or a PostgreSQL location; the store
    must be empty unless --read-only) */
#include "arena.h"
#include "clock.h"
#include "job.h"
#include "log.h"
#include "store.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PER_COMMIT 10000
#define MAP (8ull << 30)

static void
s_die (const char *what, const char *err)
{
    fprintf (stderr, "zlane-bench-store-recover: %s: %s\n", what, err);
    exit (1);
}

static zl_store_t *
s_open_lead (const char *loc, double *open_s, double *lead_s)
{
    char err[512] = "";
    int64_t t0 = zl_clock_mono_us ();
    zl_store_t *store = zl_store_open (loc, ZL_DURABILITY_FSYNC, MAP, err, sizeof err);
    if (!store)
        s_die ("open", err);
    int64_t t1 = zl_clock_mono_us ();
    zl_store_lead_t lead;
    zl_store_candidate_t who = {.name = "bench", .lease_ms = 5000};
    zl_store_set_candidate (store, &who);
    int64_t end = zl_clock_mono_ms () + 10000;
    while (zl_store_elect (store, zl_clock_mono_ms (), &lead) != ZL_ROLE_LEADER)
        if (zl_clock_mono_ms () > end)
            s_die ("elect", "this bench could not take the lead in 10 s");
    int64_t t2 = zl_clock_mono_us ();
    *open_s = (double)(t1 - t0) / 1e6;
    *lead_s = (double)(t2 - t1) / 1e6;
    return store;
}

static void
s_count (void *ctx, uint64_t id, const zl_job_rec_t *job, const zl_state_rec_t *state)
{
    (void)id;
    (void)state;
    *(uint64_t *)ctx += job->payload.len;
}

int
main (int argc, char **argv)
{
    const char *loc = NULL;
    uint64_t jobs = 1000000;
    bool fill = true, read = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp (argv[i], "--store") && i + 1 < argc)
            loc = argv[++i];
        else if (!strcmp (argv[i], "--jobs") && i + 1 < argc)
            jobs = strtoull (argv[++i], NULL, 10);
        else if (!strcmp (argv[i], "--fill-only"))
            read = false;
        else if (!strcmp (argv[i], "--read-only"))
            fill = false;
        else {
            fprintf (stderr, "usage: zlane-bench-store-recover --store LOCATION [--jobs N] "
                             "[--fill-only | --read-only]\n");
            return 2;
        }
    }
    if (!loc)
        s_die ("usage", "--store LOCATION is required");
    zl_log_set_level (ZL_LOG_WARN);
    double open_s, lead_s;
    if (fill) {
        zl_store_t *store = s_open_lead (loc, &open_s, &lead_s);
        uint8_t payload[100];
        memset (payload, 'x', sizeof payload);
        int64_t t0 = zl_clock_mono_us ();
        for (uint64_t id = 1; id <= jobs; id++) {
            if ((id - 1) % PER_COMMIT == 0 && zl_store_begin (store) != ZL_STORE_OK)
                s_die ("fill", "begin failed");
            char key[48];
            snprintf (key, sizeof key, "bench-producer-%" PRIu64, id);
            zl_job_rec_t rec = {.tenant = "tenant-1",
                                .lane = "bench",
                                .payload = {payload, sizeof payload},
                                .idempotency_key = key,
                                .max_attempts = 5,
                                .lease_ms = 30000,
                                .enqueued_at_ms = zl_clock_wall_ms ()};
            zl_idem_rec_t idem = {id, rec.enqueued_at_ms, true};
            if (zl_store_put_job (store, id, &rec) != ZL_STORE_OK ||
                zl_store_put_idem (store, rec.tenant, key, &idem) != ZL_STORE_OK)
                s_die ("fill", "a write failed");
            if (id % 10 == 0) {
                zl_state_rec_t st = {.state = ZL_JOB_READY, .attempt = 1, .ready_seq = id};
                if (zl_store_put_state (store, id, &st) != ZL_STORE_OK)
                    s_die ("fill", "a write failed");
            }
            if (id % PER_COMMIT == 0 || id == jobs) {
                if (id == jobs)
                    zl_store_set_next_id (store, jobs + 1);
                if (zl_store_commit (store) != ZL_STORE_OK)
                    s_die ("fill", "a commit failed");
            }
        }
        printf ("fill: %" PRIu64 " jobs in %.2f s (%s)\n", jobs,
                (double)(zl_clock_mono_us () - t0) / 1e6, zl_store_backend_name (store));
        zl_store_close (&store);
    }
    if (read) {
        zl_store_t *store = s_open_lead (loc, &open_s, &lead_s);
        char err[512] = "";
        uint64_t next_id = 0, bytes = 0;
        int64_t t0 = zl_clock_mono_us ();
        if (zl_store_begin (store) != ZL_STORE_OK ||
            zl_store_recover (store, s_count, &bytes, &next_id, err, sizeof err) != 0)
            s_die ("recover", err);
        double rec_s = (double)(zl_clock_mono_us () - t0) / 1e6;
        zl_store_stats_t st;
        zl_store_stats (store, &st);
        printf ("backend %s: %" PRIu64 " jobs, %" PRIu64 " keys: open %.3f s, lead %.3f s, "
                "recover %.3f s, total %.3f s\n",
                zl_store_backend_name (store), st.jobs, st.idem_keys, open_s, lead_s, rec_s,
                open_s + lead_s + rec_s);
        zl_store_close (&store);
    }
    return 0;
}
