/*  store_copy: `zlane-ctl store copy --from DIR --to LOCATION`, the move of
    a stopped broker's LMDB store into another store (a PostgreSQL database),
    through store.h on both sides, then verified.

    Offline: the source's lock (one broker per data directory) refuses a
    directory a broker still runs on, and the destination must be empty and
    led by no broker (this tool takes its lease for the copy and gives it up
    at the end). Every job is copied with its job record and its state
    (history, DLQ place, due time), in transactions of --batch jobs, and the
    id counter with them. The idempotency keys of the jobs copied are
    recorded again (as users' keys, seen when the job was enqueued); the keys
    of jobs already finished are not copied, because the LMDB store keeps
    only their digests. Then the destination is opened afresh and read back:
    the number of jobs, of states, the sum of the ids and of the payload
    bytes must equal the source's, or the tool exits 1. */
#include "store_copy.h"

#include "arena.h"
#include "clock.h"
#include "log.h"
#include "store.h"

#include <czmq.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAP_SIZE (4ull << 30) // the source's map at least (the broker's default)
#define LEAD_WAIT_MS 10000    // the destination's lease, taken within this

typedef struct {
    uint64_t jobs, states, id_sum, payload_bytes;
} s_tally_t;

typedef struct {
    zl_store_t *to;
    size_t batch, in_batch;
    s_tally_t tally;
    int failed;
} s_copy_t;

static void
s_count (s_tally_t *t, uint64_t id, const zl_job_rec_t *job, const zl_state_rec_t *state)
{
    t->jobs++;
    t->states += state != NULL;
    t->id_sum += id;
    t->payload_bytes += job->payload.len;
}

static void
s_copy_job (void *ctx, uint64_t id, const zl_job_rec_t *job, const zl_state_rec_t *state)
{
    s_copy_t *c = ctx;
    if (c->failed)
        return;
    if (!c->in_batch && zl_store_begin (c->to) != ZL_STORE_OK) {
        c->failed = 1;
        return;
    }
    zl_store_rc_t rc = zl_store_put_job (c->to, id, job);
    if (rc == ZL_STORE_OK && state)
        rc = zl_store_put_state (c->to, id, state);
    if (rc == ZL_STORE_OK && job->idempotency_key[0]) {
        zl_idem_rec_t idem = {id, job->enqueued_at_ms, false};
        rc = zl_store_put_idem (c->to, job->tenant, job->idempotency_key, &idem);
    }
    if (rc != ZL_STORE_OK) {
        c->failed = 1;
        return;
    }
    s_count (&c->tally, id, job, state);
    if (++c->in_batch >= c->batch) {
        c->in_batch = 0;
        if (zl_store_commit (c->to) != ZL_STORE_OK)
            c->failed = 1;
    }
}

static void
s_tally_job (void *ctx, uint64_t id, const zl_job_rec_t *job, const zl_state_rec_t *state)
{
    s_count (ctx, id, job, state);
}

// Open `loc` and lead it (the tool's own lease, for LMDB its lock). NULL
// with a message printed.
static zl_store_t *
s_open_leading (const char *loc, const char *what)
{
    char err[512] = "", safe[512];
    zl_store_location_safe (loc, safe, sizeof safe);
    zl_store_t *store = zl_store_open (loc, ZL_DURABILITY_FSYNC, MAP_SIZE, err, sizeof err);
    if (!store) {
        fprintf (stderr, "zlane-ctl store copy: %s: %s\n", what, err);
        return NULL;
    }
    zl_store_candidate_t who = {.name = "zlane-ctl store copy", .lease_ms = 5000};
    zl_store_set_candidate (store, &who);
    int64_t end = zl_clock_mono_ms () + LEAD_WAIT_MS;
    zl_store_lead_t lead;
    zl_store_role_t role;
    while ((role = zl_store_elect (store, zl_clock_mono_ms (), &lead)) == ZL_ROLE_UNREACHABLE &&
           zl_clock_mono_ms () < end) {
        int64_t wait = zl_store_elect_due (store) - zl_clock_mono_ms ();
        if (wait > 0)
            zclock_sleep ((int)(wait < 500 ? wait : 500)); // the store's own retry pace
    }
    if (role != ZL_ROLE_LEADER) {
        fprintf (stderr, "zlane-ctl store copy: %s %s: %s\n", what, safe,
                 role == ZL_ROLE_STANDBY
                     ? "a broker leads this store (it is in use): stop every broker on it first"
                     : "the database does not answer");
        zl_store_close (&store);
    }
    return store;
}

static int
s_usage (void)
{
    fprintf (stderr, "Usage: zlane-ctl store copy --from DIR --to LOCATION [--batch N]\n"
                     "  copies a stopped broker's LMDB store (DIR) into an empty store at\n"
                     "  LOCATION (postgresql://... or a libpq connection string), then\n"
                     "  verifies the counts\n");
    return 2;
}

int
zl_ctl_store_copy (int argc, char **argv)
{
    if (argc < 1 || strcmp (argv[0], "copy") != 0)
        return s_usage ();
    const char *from = NULL, *to = NULL;
    size_t batch = 10000;
    for (int i = 1; i < argc; i++) {
        if (!strcmp (argv[i], "--from") && i + 1 < argc)
            from = argv[++i];
        else if (!strcmp (argv[i], "--to") && i + 1 < argc)
            to = argv[++i];
        else if (!strcmp (argv[i], "--batch") && i + 1 < argc && atol (argv[i + 1]) > 0)
            batch = (size_t)atol (argv[++i]);
        else
            return s_usage ();
    }
    if (!from || !to)
        return s_usage ();
    struct stat sb;
    if (zl_store_location_kind (from) != ZL_STORE_KIND_LMDB || stat (from, &sb) != 0 ||
        !S_ISDIR (sb.st_mode)) {
        fprintf (stderr, "zlane-ctl store copy: --from %s is not a data directory\n", from);
        return 2;
    }
    zl_log_set_level (ZL_LOG_WARN);
    int64_t t0 = zl_clock_mono_ms ();
    zl_store_t *src = s_open_leading (from, "--from");
    if (!src)
        return 1;
    zl_store_t *dst = s_open_leading (to, "--to");
    if (!dst) {
        zl_store_close (&src);
        return 1;
    }
    zl_store_stats_t st;
    zl_store_stats (dst, &st);
    if (st.jobs || st.idem_keys) {
        fprintf (stderr,
                 "zlane-ctl store copy: --to holds %" PRIu64 " job(s) and %" PRIu64
                 " key(s) already: it must be empty\n",
                 st.jobs, st.idem_keys);
        zl_store_close (&dst);
        zl_store_close (&src);
        return 1;
    }
    s_copy_t c = {.to = dst, .batch = batch};
    uint64_t next_id = 1;
    char err[512] = "";
    int rc = zl_store_begin (src) == ZL_STORE_OK
                 ? zl_store_recover (src, s_copy_job, &c, &next_id, err, sizeof err)
                 : -1;
    zl_store_close (&src); // read only: nothing of it is committed
    if (rc == 0 && !c.failed) {
        if (!c.in_batch && zl_store_begin (dst) != ZL_STORE_OK)
            c.failed = 1;
        else if (zl_store_set_next_id (dst, next_id) != ZL_STORE_OK ||
                 zl_store_commit (dst) != ZL_STORE_OK)
            c.failed = 1;
    }
    zl_store_close (&dst);
    if (rc != 0 || c.failed) {
        fprintf (stderr,
                 "zlane-ctl store copy: the copy failed%s%s; the destination may hold "
                 "part of it: empty it before trying again\n",
                 err[0] ? ": " : "", err);
        return 1;
    }
    // read the destination back, afresh
    s_tally_t back = {0};
    dst = s_open_leading (to, "--to (verifying)");
    uint64_t back_next = 0;
    rc = dst && zl_store_begin (dst) == ZL_STORE_OK
             ? zl_store_recover (dst, s_tally_job, &back, &back_next, err, sizeof err)
             : -1;
    zl_store_close (&dst);
    bool same = rc == 0 && back.jobs == c.tally.jobs && back.states == c.tally.states &&
                back.id_sum == c.tally.id_sum && back.payload_bytes == c.tally.payload_bytes &&
                back_next >= next_id;
    printf ("copied %" PRIu64 " job(s) (%" PRIu64 " with a state, %" PRIu64
            " payload bytes), next id %" PRIu64 ", in %.1f s\n",
            c.tally.jobs, c.tally.states, c.tally.payload_bytes, next_id,
            (double)(zl_clock_mono_ms () - t0) / 1000.0);
    printf ("verified: %s (read back %" PRIu64 " job(s), %" PRIu64 " with a state, %" PRIu64
            " payload bytes, next id %" PRIu64 ")\n",
            same ? "the counts match" : "MISMATCH", back.jobs, back.states, back.payload_bytes,
            back_next);
    return same ? 0 : 1;
}
