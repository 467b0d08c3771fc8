/*  test_e2e: the real processes end to end. A broker, two zlane-worker
    processes running zlane-testhandler, and zlane-submit feeding 500 jobs
    across two tenants and two lanes: every job id printed is run exactly
    once and nothing else is run. Plus zlane-submit's failures: a dead
    endpoint, and an undeclared lane with the broker's reason. */
#define _GNU_SOURCE
#include "zltest.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#define N_JOBS 500
#define SUBMIT_MS 30000 // each zlane-submit run
#define DRAIN_MS 60000  // all jobs acked

// ---------------------------------------------------------------- helpers
// An endpoint on 127.0.0.1 where nothing listens (a port just released).
static void
s_dead_endpoint (char *out, size_t size)
{
    int fd = socket (AF_INET, SOCK_STREAM, 0);
    assert_true (fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    sa.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    assert_int_equal (bind (fd, (struct sockaddr *)&sa, sizeof sa), 0);
    socklen_t len = sizeof sa;
    assert_int_equal (getsockname (fd, (struct sockaddr *)&sa, &len), 0);
    close (fd);
    snprintf (out, size, "tcp://127.0.0.1:%u", ntohs (sa.sin_port));
}

// ---------------------------------------------------------------- tests
/*  500 jobs, 2 tenants x 2 lanes, 2 workers x 4 handlers: each job id that
    zlane-submit printed is recorded once by a handler, on attempt 1. */
static void
test_e2e_every_job_runs_once (void **state)
{
    int64_t t0 = zlt_now_ms ();
    zlt_broker_t *broker = zlt_broker_start (NULL);
    assert_non_null (broker);
    const char *dir = zlt_broker_dir (broker);
    zlt_client_t *admin = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (broker, "admin"));
    assert_non_null (admin);
    char *worker_bin = zlt_bin ("zlane-worker");
    char *submit_bin = zlt_bin ("zlane-submit");
    char *handler_bin = zlt_bin ("zlane-testhandler");
    char *record = zlt_path (dir, "record");
    char *cmd;
    assert_true (asprintf (&cmd, "'%s' --record '%s'", handler_bin, record) > 0);

    enum { WORKERS = 2 };
    zlt_proc_t *workers[WORKERS];
    char *worker_err[WORKERS];
    for (int w = 0; w < WORKERS; w++) {
        char name[32], out_name[48], err_name[48];
        snprintf (name, sizeof name, "worker%d", w + 1);
        snprintf (out_name, sizeof out_name, "%s.out", name);
        snprintf (err_name, sizeof err_name, "%s.err", name);
        char *out = zlt_path (dir, out_name);
        worker_err[w] = zlt_path (dir, err_name);
        const char *argv[] = {worker_bin,
                              "--broker",
                              zlt_broker_endpoint (broker, "backend"),
                              "--lanes",
                              "a,b",
                              "--exec",
                              cmd,
                              "--concurrency",
                              "4",
                              "--name",
                              name,
                              NULL};
        workers[w] = zlt_spawn (argv, NULL, out, worker_err[w]);
        assert_non_null (workers[w]);
        free (out);
    }
    if (zlt_wait_counter (admin, "workers_ready", WORKERS, 10000) != 0) {
        for (int w = 0; w < WORKERS; w++)
            zlt_dump_file ("zlane-worker stderr", worker_err[w], 2000);
        fail_msg ("the workers did not say Ready");
    }

    // 4 zlane-submit --lines at once: tenant x lane, N_JOBS / 4 lines each
    static const char *const tenants[] = {"acme", "globex"}, *const lanes[] = {"a", "b"};
    enum { RUNS = 4, PER_RUN = N_JOBS / RUNS };
    zlt_proc_t *submits[RUNS];
    char *outs[RUNS], *errs[RUNS];
    for (int r = 0; r < RUNS; r++) {
        const char *tenant = tenants[r / 2], *lane = lanes[r % 2];
        char name[64], out_name[80], err_name[80];
        snprintf (name, sizeof name, "submit-%s-%s", tenant, lane);
        snprintf (out_name, sizeof out_name, "%s.out", name);
        snprintf (err_name, sizeof err_name, "%s.err", name);
        char *in = zlt_path (dir, name);
        FILE *f = fopen (in, "w");
        assert_non_null (f);
        for (int i = 0; i < PER_RUN; i++)
            fprintf (f, "%s/%s job %d\n", tenant, lane, i);
        assert_int_equal (fclose (f), 0);
        outs[r] = zlt_path (dir, out_name);
        errs[r] = zlt_path (dir, err_name);
        const char *argv[] = {submit_bin, "--broker",  zlt_broker_endpoint (broker, "frontend"),
                              "--tenant", tenant,      "--lane",
                              lane,       "--lines",   "--file",
                              in,         "--timeout", "20s",
                              NULL};
        submits[r] = zlt_spawn (argv, NULL, outs[r], errs[r]);
        assert_non_null (submits[r]);
        free (in);
    }
    uint64_t ids[N_JOBS + 1];
    size_t n_ids = 0;
    for (int r = 0; r < RUNS; r++) {
        if (zlt_proc_wait (submits[r], SUBMIT_MS) != 0 || zlt_proc_exit_code (submits[r]) != 0) {
            zlt_dump_file ("zlane-submit stderr", errs[r], 2000);
            fail_msg ("zlane-submit run %d: exit code %d", r, zlt_proc_exit_code (submits[r]));
        }
        char *text = zlt_read_file (outs[r], NULL);
        assert_non_null (text);
        size_t n = zlt_ids_parse (text, ids + n_ids, N_JOBS + 1 - n_ids, outs[r]);
        free (text);
        assert_int_equal (n, PER_RUN);
        n_ids += n;
        zlt_proc_destroy (&submits[r]);
    }
    assert_int_equal (n_ids, N_JOBS);
    zlt_ids_sort (ids, n_ids);
    for (size_t i = 1; i < n_ids; i++)
        if (ids[i] == ids[i - 1])
            fail_msg ("job id %" PRIu64 " was printed twice", ids[i]);
    int64_t t_submitted = zlt_now_ms ();

    if (zlt_wait_counter (admin, "jobs_acked", N_JOBS, DRAIN_MS) != 0) {
        for (int w = 0; w < WORKERS; w++)
            zlt_dump_file ("zlane-worker stderr", worker_err[w], 2000);
        zlt_broker_dump (broker, 2000);
        fail_msg ("not all %d jobs were acked", N_JOBS);
    }
    int64_t t_acked = zlt_now_ms ();

    // every recorded line is a printed id, on attempt 1, and each id is there once
    char *text = zlt_read_file (record, NULL);
    assert_non_null (text);
    unsigned runs[N_JOBS] = {0};
    size_t lines = 0;
    char *save = NULL;
    for (char *line = strtok_r (text, "\n", &save); line; line = strtok_r (NULL, "\n", &save)) {
        uint64_t id;
        unsigned attempt;
        long pid;
        if (sscanf (line, "%" SCNu64 " %u %ld", &id, &attempt, &pid) != 3)
            fail_msg ("record line %zu is malformed: '%s'", lines + 1, line);
        long at = zlt_ids_find (ids, n_ids, id);
        if (at < 0)
            fail_msg ("a handler ran job %" PRIu64 ", which zlane-submit never printed", id);
        if (++runs[at] > 1)
            fail_msg ("job %" PRIu64 " ran %u times", id, runs[at]);
        assert_int_equal (attempt, 1);
        assert_true (pid > 0);
        lines++;
    }
    free (text);
    for (size_t i = 0; i < n_ids; i++)
        if (runs[i] != 1)
            fail_msg ("job %" PRIu64 " never ran", ids[i]);
    assert_int_equal (lines, N_JOBS);

    // the broker saw the same: one dispatch and one ack per job, no failures
    assert_int_equal (zlt_counter (admin, "jobs_accepted"), N_JOBS);
    assert_int_equal (zlt_counter (admin, "jobs_dispatched"), N_JOBS);
    assert_int_equal (zlt_counter (admin, "jobs_acked"), N_JOBS);
    assert_int_equal (zlt_counter (admin, "jobs_nacked"), 0);
    assert_int_equal (zlt_counter (admin, "jobs_dead_lettered"), 0);
    assert_int_equal (zlt_counter (admin, "workers_dead"), 0);
    for (int r = 0; r < RUNS; r++) {
        zl_group_stats_t g;
        assert_int_equal (zlt_group (admin, lanes[r % 2], tenants[r / 2], &g), 0);
        assert_int_equal (g.acked, PER_RUN);
        assert_int_equal (g.ready + g.in_flight + g.delayed + g.dlq, 0);
    }
    for (int w = 0; w < WORKERS; w++) {
        assert_int_equal (zlt_proc_exit_code (workers[w]), -1); // still serving
        zlt_proc_destroy (&workers[w]);
        free (worker_err[w]);
    }
    fprintf (stderr,
             "e2e: %d jobs: submitted in %" PRId64 " ms, all acked %" PRId64 " ms later (%" PRId64
             " ms in all)\n",
             N_JOBS, t_submitted - t0, t_acked - t_submitted, zlt_now_ms () - t0);
    for (int r = 0; r < RUNS; r++) {
        free (outs[r]);
        free (errs[r]);
    }
    free (cmd);
    free (record);
    free (handler_bin);
    free (submit_bin);
    free (worker_bin);
}

/*  Nothing listens: zlane-submit gives up after --timeout, non-zero, and
    says which endpoint it could not reach. */
static void
test_submit_dead_endpoint (void **state)
{
    const char *dir = zlt_tmpdir ();
    assert_non_null (dir);
    char endpoint[64];
    s_dead_endpoint (endpoint, sizeof endpoint);
    char *bin = zlt_bin ("zlane-submit");
    char *out = zlt_path (dir, "out"), *err = zlt_path (dir, "err");
    const char *argv[] = {bin, "--broker",  endpoint, "--tenant", "t", "--lane",
                          "a", "--timeout", "1s",     "payload",  NULL};
    int64_t t0 = zlt_now_ms ();
    int code = zlt_run (argv, NULL, out, err, 15000);
    int64_t took = zlt_now_ms () - t0;
    char *said = zlt_read_file (err, NULL);
    assert_non_null (said);
    if (code <= 0 || !strstr (said, endpoint)) {
        zlt_dump_file ("zlane-submit stderr", err, 2000);
        fail_msg ("zlane-submit to a dead endpoint: exit %d, and stderr %s %s", code,
                  strstr (said, endpoint) ? "names" : "does not name", endpoint);
    }
    assert_true (took >= 900); // it did wait for its --timeout
    fprintf (stderr, "dead endpoint: exit %d after %" PRId64 " ms\n", code, took);
    free (said);
    free (out);
    free (err);
    free (bin);
}

/*  An undeclared lane: zlane-submit fails and passes on the broker's own
    reason (fetched here from the broker with a raw Submit). */
static void
test_submit_unknown_lane (void **state)
{
    zlt_broker_t *broker = zlt_broker_start (NULL);
    assert_non_null (broker);
    const char *dir = zlt_broker_dir (broker);

    zlt_client_t *raw = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (broker, "frontend"));
    assert_non_null (raw);
    assert_true (zlt_client_hello (raw, "e2e", 5000) > 0);
    zl_job_spec_t spec = {.seq = 1, .tenant = "t", .lane = "nolane", .idempotency_key = ""};
    spec.payload = (zl_bytes_t){(const uint8_t *)"payload", 7};
    zl_msg_t m = {.kind = ZL_MSG_SUBMIT};
    m.u.submit = (zl_submit_t){1, &spec};
    assert_int_equal (zlt_client_send (raw, &m), 0);
    assert_int_equal (zlt_client_expect (raw, ZL_MSG_REJECTED, &m, 5000), 0);
    assert_int_equal (m.kind, ZL_MSG_REJECTED);
    assert_int_equal (m.u.rejected.jobs[0].code, ZL_REJECT_UNKNOWN_LANE);
    char *reason = strdup (m.u.rejected.jobs[0].reason);

    char *bin = zlt_bin ("zlane-submit");
    char *out = zlt_path (dir, "out"), *err = zlt_path (dir, "err");
    const char *argv[] = {bin,        "--broker",  zlt_broker_endpoint (broker, "frontend"),
                          "--tenant", "t",         "--lane",
                          "nolane",   "--timeout", "5s",
                          "payload",  NULL};
    int code = zlt_run (argv, NULL, out, err, 15000);
    char *said = zlt_read_file (err, NULL);
    assert_non_null (said);
    if (code <= 0 || !strstr (said, reason)) {
        zlt_dump_file ("zlane-submit stderr", err, 2000);
        fail_msg ("zlane-submit to an undeclared lane: exit %d; stderr should hold \"%s\"", code,
                  reason);
    }
    char *printed = zlt_read_file (out, NULL);
    assert_non_null (printed);
    assert_string_equal (printed, "\n"); // a rejected job prints an empty line
    zlt_client_t *admin = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (broker, "admin"));
    assert_non_null (admin);
    assert_int_equal (zlt_counter (admin, "err_unknown_lane"), 2); // the raw one and the CLI's
    fprintf (stderr, "unknown lane: exit %d\n", code);
    free (printed);
    free (said);
    free (reason);
    free (out);
    free (err);
    free (bin);
}

/*  zlane-submit --lines reading a FIFO that pauses: every job accepted so far
    is printed while the input waits, not held in stdout's buffer until more
    input or the end (a reader of its output follows the jobs as they go). */
static void
test_submit_prints_while_input_waits (void **state)
{
    (void)state;
    zlt_broker_t *broker = zlt_broker_start (NULL);
    assert_non_null (broker);
    const char *dir = zlt_broker_dir (broker);
    char *in = zlt_path (dir, "submit.fifo"), *out = zlt_path (dir, "submit.out"),
         *err = zlt_path (dir, "submit.err");
    assert_int_equal (mkfifo (in, 0600), 0);
    int feed = open (in, O_RDWR | O_CLOEXEC | O_NONBLOCK); // EOF once closed
    assert_true (feed >= 0);
    char *bin = zlt_bin ("zlane-submit");
    const char *argv[] = {bin,        "--broker", zlt_broker_endpoint (broker, "frontend"),
                          "--tenant", "t",        "--lane",
                          "a",        "--lines",  "--file",
                          in,         "--json",   NULL};
    zlt_proc_t *submit = zlt_spawn (argv, NULL, out, err);
    assert_non_null (submit);
    int64_t deadline = zlt_now_ms () + SUBMIT_MS;
    int fed = 0;
    for (int round = 1; round <= 3; round++) { // 10 jobs, a pause, 10 more, ...
        zlt_fifo_feed (feed, &fed, 10, deadline);
        zlt_wait_printed (out, (size_t)fed, submit, err, deadline);
    }
    close (feed);
    assert_int_equal (zlt_proc_wait (submit, SUBMIT_MS), 0);
    assert_int_equal (zlt_proc_exit_code (submit), 0);
    assert_int_equal (zlt_count_lines (out), (size_t)fed);
    fprintf (stderr, "submit with a paused input: %d jobs printed as they were accepted\n", fed);
    zlt_proc_destroy (&submit);
    free (bin);
    free (in);
    free (out);
    free (err);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown (test_e2e_every_job_runs_once, zlt_teardown),
        cmocka_unit_test_teardown (test_submit_dead_endpoint, zlt_teardown),
        cmocka_unit_test_teardown (test_submit_unknown_lane, zlt_teardown),
        cmocka_unit_test_teardown (test_submit_prints_while_input_waits, zlt_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
