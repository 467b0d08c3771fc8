/*  test_ordering: ordering keys (issue 16, item 1) with the real processes:
    zlane-broker, two zlane-workers running zlane-testhandler (which fails
    one run in ten at random, TRANSIENT), on loopback ephemeral ports.

    10,000 jobs over 100 ordering keys from 3 tenants (300 lines: a key is
    its tenant's) are submitted over the documented protocol before any
    worker runs: the broker holds all but the 300 heads. The workers run
    them; the broker is SIGKILLed and restarted a third of the way through.
    The handlers' journal (one O_APPEND line at the start and the end of
    every run) must show, for every line: never two of its jobs running at
    once, and every run in submit order -- the job after the last one done,
    or that last one again (at-least-once: its ack may have died with the
    broker), retried in place when it failed; every job done at least once;
    the key reached the handler (ZLANE_ORDERING_KEY). */
#define _GNU_SOURCE
#include "zltest.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#define N_JOBS 10000
#define N_KEYS 100
#define N_TENANTS 3
#define N_LINES (N_KEYS * N_TENANTS)
#define PER_SUBMIT 500
#define WAIT_MS 300000 // all the jobs, under ASan on a loaded machine
#define RESTART_MS 15000

static const char *const s_tenants[N_TENANTS] = {"t0", "t1", "t2"};

// Submit the jobs: job i goes to tenant i % 3, key (i / 3) % 100, and is
// the n-th of its line; its payload says "t<T>.k<K>.<n>".
static void
s_submit_all (zlt_client_t *c)
{
    static int next_of_line[N_LINES];
    static char payloads[PER_SUBMIT][48], keys[PER_SUBMIT][16];
    zl_job_spec_t specs[PER_SUBMIT];
    uint64_t seq = 0;
    for (int first = 0; first < N_JOBS; first += PER_SUBMIT) {
        for (int k = 0; k < PER_SUBMIT; k++) {
            int i = first + k, t = i % N_TENANTS, key = (i / N_TENANTS) % N_KEYS;
            int n = next_of_line[t * N_KEYS + key]++;
            snprintf (keys[k], sizeof keys[k], "k%d", key);
            int len = snprintf (payloads[k], sizeof payloads[k], "%s.k%d.%d", s_tenants[t], key, n);
            specs[k] = (zl_job_spec_t){.seq = ++seq,
                                       .tenant = s_tenants[t],
                                       .lane = "ord",
                                       .payload = {(const uint8_t *)payloads[k], (size_t)len},
                                       .idempotency_key = "",
                                       .ordering_key = keys[k]};
        }
        zl_msg_t m = {.kind = ZL_MSG_SUBMIT};
        m.u.submit = (zl_submit_t){PER_SUBMIT, specs};
        assert_int_equal (zlt_client_send (c, &m), 0);
        size_t accepted = 0;
        int64_t deadline = zlt_now_ms () + 30000;
        while (accepted < PER_SUBMIT) {
            int64_t left = deadline - zlt_now_ms ();
            if (left <= 0 || zlt_client_recv (c, &m, (int)left) != 0)
                fail_msg ("%zu of %d jobs accepted within 30 s", accepted, PER_SUBMIT);
            if (m.kind == ZL_MSG_REJECTED)
                fail_msg ("job seq %" PRIu64 " rejected: %s", m.u.rejected.jobs[0].seq,
                          m.u.rejected.jobs[0].reason);
            if (m.kind == ZL_MSG_ERROR)
                fail_msg ("broker error: %s", m.u.error.message);
            if (m.kind == ZL_MSG_ACCEPTED)
                accepted += m.u.accepted.n;
        }
    }
}

// What the journal says of one line.
typedef struct {
    int running; // n of the job running now, -1 none
    int done;    // highest n done (exit 0), -1 none
    int runs;
} line_t;

typedef struct {
    line_t lines[N_LINES];
    int done_jobs; // distinct jobs done
    char error[256];
} check_t;

// Read the journal into `ck`; false (with ck->error) at the first breach.
static bool
s_check (const char *text, check_t *ck)
{
    memset (ck, 0, sizeof *ck);
    for (int i = 0; i < N_LINES; i++)
        ck->lines[i].running = ck->lines[i].done = -1;
    const char *p = text;
    while (p && *p) {
        const char *eol = strchr (p, '\n');
        if (!eol)
            break; // a line being written
        char what[8], key[16];
        int t = -1, k = -1, n, attempt, rc = 0;
        int got = sscanf (p, "%7s %15s t%d.k%d.%d %d %d", what, key, &t, &k, &n, &attempt, &rc);
        const char *line = p;
        p = eol + 1;
        bool start = got == 6 && !strcmp (what, "start");
        bool end = got == 7 && !strcmp (what, "end");
        if ((!start && !end) || t < 0 || t >= N_TENANTS || k < 0 || k >= N_KEYS) {
            snprintf (ck->error, sizeof ck->error, "a bad journal line: %.*s", (int)(eol - line),
                      line);
            return false;
        }
        char want_key[16];
        snprintf (want_key, sizeof want_key, "k%d", k);
        if (strcmp (key, want_key)) {
            snprintf (ck->error, sizeof ck->error, "t%d.k%d.%d ran with ordering key '%s'", t, k, n,
                      key);
            return false;
        }
        line_t *l = &ck->lines[t * N_KEYS + k];
        if (start) {
            if (l->running >= 0 && l->running != n) {
                snprintf (ck->error, sizeof ck->error,
                          "t%d.k%d: job %d started while job %d was running", t, k, n, l->running);
                return false;
            }
            if (n != l->done + 1 && n != l->done) {
                snprintf (ck->error, sizeof ck->error,
                          "t%d.k%d: job %d started after job %d was done (out of order)", t, k, n,
                          l->done);
                return false;
            }
            l->running = n;
            l->runs++;
        } else {
            l->running = -1;
            if (rc == 0 && n > l->done) {
                l->done = n;
                ck->done_jobs++;
            }
        }
    }
    return true;
}

static bool
s_all_done (const char *text, const void *arg)
{
    check_t *ck = (check_t *)arg;
    return !s_check (text, ck) || ck->done_jobs == N_JOBS;
}

static zlt_proc_t *
s_worker (const char *dir, zlt_broker_t *b, const char *name, const char *journal)
{
    char *bin = zlt_bin ("zlane-worker"), *handler = zlt_bin ("zlane-testhandler");
    char *cmd, err[64];
    assert_true (asprintf (&cmd, "'%s' --journal '%s' --fail-percent 10", handler, journal) > 0);
    snprintf (err, sizeof err, "%s.err", name);
    char *err_path = zlt_path (dir, err);
    const char *argv[] = {bin,
                          "--broker",
                          zlt_broker_endpoint (b, "backend"),
                          "--lanes",
                          "ord",
                          "--exec",
                          cmd,
                          "--name",
                          name,
                          "--concurrency",
                          "8",
                          NULL};
    zlt_proc_t *p = zlt_spawn (argv, NULL, NULL, err_path);
    assert_non_null (p);
    free (bin);
    free (handler);
    free (cmd);
    free (err_path);
    return p;
}

static void
test_ten_thousand_jobs_in_order_per_key (void **state)
{
    (void)state;
    const char *args[] = {"--lane", "ord",           "--max-attempts", "40",    "--backoff-base",
                          "5ms",    "--backoff-cap", "40ms",           "--set", "max_depth=100000",
                          NULL};
    zlt_broker_t *b = zlt_broker_start (args);
    assert_non_null (b);
    const char *dir = zlt_broker_dir (b);
    zlt_client_t *admin = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (b, "admin"));
    zlt_client_t *prod = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (b, "frontend"));
    assert_non_null (admin);
    assert_non_null (prod);
    zlt_client_hello (prod, "test-ordering", 10000);
    s_submit_all (prod);
    // nothing runs yet: one head per line, the rest held
    assert_int_equal (zlt_counter (admin, "ordering_keys"), N_LINES);
    assert_int_equal (zlt_counter (admin, "jobs_ordering_held"), N_JOBS - N_LINES);
    zl_group_stats_t g;
    assert_int_equal (zlt_group (admin, "ord", "", &g), 0);
    assert_int_equal (g.ready, N_LINES);

    char *journal = zlt_path (dir, "journal");
    zlt_proc_t *w1 = s_worker (dir, b, "w1", journal), *w2 = s_worker (dir, b, "w2", journal);
    if (zlt_wait_counter (admin, "jobs_acked", N_JOBS / 3, WAIT_MS) != 0)
        fail_msg ("the workers did not get a third of the way");
    assert_int_equal (zlt_broker_kill (b), 0);
    if (zlt_broker_restart (b, RESTART_MS) != 0)
        fail_msg ("the broker did not restart");

    static check_t ck;
    if (zlt_wait_file (journal, s_all_done, &ck, WAIT_MS) != 0 && !ck.error[0]) {
        zlt_broker_dump (b, 3000);
        fail_msg ("%d of %d jobs done", ck.done_jobs, N_JOBS);
    }
    char *text = zlt_read_file (journal, NULL);
    if (!s_check (text, &ck))
        fail_msg ("%s", ck.error);
    assert_int_equal (ck.done_jobs, N_JOBS);
    static int per_line[N_LINES];
    for (int i = 0; i < N_JOBS; i++)
        per_line[(i % N_TENANTS) * N_KEYS + (i / N_TENANTS) % N_KEYS]++;
    int runs = 0;
    for (int i = 0; i < N_LINES; i++) {
        assert_int_equal (ck.lines[i].done, per_line[i] - 1); // its last job done
        runs += ck.lines[i].runs;
    }
    // the random failures were retried (about one run in ten failed)
    assert_true (runs > N_JOBS + N_JOBS / 50);
    // and nothing is left: no job held, none dead
    assert_int_equal (zlt_counter (admin, "jobs_ordering_held"), 0);
    assert_int_equal (zlt_group (admin, "ord", "", &g), 0);
    assert_int_equal (g.dlq, 0);
    print_message ("%d jobs over %d lines: %d runs, in order\n", N_JOBS, N_LINES, runs);
    free (text);
    free (journal);
    zlt_proc_destroy (&w1);
    zlt_proc_destroy (&w2);
    zlt_client_destroy (&prod);
    zlt_client_destroy (&admin);
    zlt_broker_destroy (&b);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test (test_ten_thousand_jobs_in_order_per_key),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
