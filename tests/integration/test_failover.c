/*  test_failover: the clients given a list of broker endpoints, with real
    brokers. (1) The first endpoint of every list is a closed port on
    127.0.0.1: zlane-submit, zlane-worker and zlane-ctl work through the
    second, a live broker. (2) Two broker processes, one after the other, on
    one LMDB data directory: A serves with B's ports reserved; producer and
    workers are given "A,B"; A is SIGKILLed mid-stream and B started on the
    same data and B's ports; the clients move to B. Every job the producer
    was told Accepted runs at least once, nothing nobody submitted runs, and
    the duplicates are printed. (NOT_LEADER has no test here: no broker
    sends it yet, and a fake standby would test only itself.) */
#define _GNU_SOURCE
#include "zltest.h"

#include <errno.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#define FAILOVER_JOBS 4000
#define SUBMIT_MS 180000 // the producer's phase, the failover included (ASan: slower)
#define DRAIN_MS 120000  // every printed id executed, after the producer
#define SETTLE_MS 30000  // B's gauges reach zero
#define POLL_MS 10       // how often files are looked at while waiting

// ---------------------------------------------------------------- helpers
// Fill `ports` with `n` distinct TCP ports that were free on 127.0.0.1 a
// moment ago: bound together (so they differ), read back, then closed.
// Nothing listens on them afterwards until someone binds them.
static void
s_free_ports (int *ports, int n)
{
    int fds[8];
    assert_true (n <= 8);
    for (int i = 0; i < n; i++) {
        fds[i] = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_true (fds[i] >= 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
        a.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
        assert_int_equal (bind (fds[i], (struct sockaddr *)&a, sizeof a), 0);
        socklen_t len = sizeof a;
        assert_int_equal (getsockname (fds[i], (struct sockaddr *)&a, &len), 0);
        ports[i] = ntohs (a.sin_port);
    }
    for (int i = 0; i < n; i++)
        close (fds[i]);
}

// Return "<first>,<second>" (caller frees).
static char *
s_list (const char *first, const char *second)
{
    char *list;
    assert_true (asprintf (&list, "%s,%s", first, second) > 0);
    return list;
}

// Run zlane-ctl `--admin admin --json stats`; returns its exit code and
// leaves its stdout in `out`.
static int
s_ctl_stats (const char *admin, const char *out, const char *err)
{
    char *bin = zlt_bin ("zlane-ctl");
    const char *argv[] = {bin, "--admin", admin, "--timeout", "10s", "--json", "stats", NULL};
    unlink (out); // the harness appends
    unlink (err);
    int code = zlt_run (argv, NULL, out, err, 30000);
    free (bin);
    return code;
}

// ---------------------------------------------------------------- 1. a dead first endpoint
/*  Every client is given "<closed port>,<live broker>": 200 jobs submitted
    through zlane-submit are all accepted and run by a zlane-worker, and
    zlane-ctl stats answers, all through the second endpoint. */
static void
test_dead_first_endpoint (void **state)
{
    (void)state;
    const char *args[] = {"--lane", "a", "--heartbeat", "200ms", NULL};
    zlt_broker_t *broker = zlt_broker_start (args);
    assert_non_null (broker);
    const char *dir = zlt_broker_dir (broker);
    int dead[3];
    s_free_ports (dead, 3);
    char closed[3][64];
    for (int i = 0; i < 3; i++)
        snprintf (closed[i], sizeof closed[i], "tcp://127.0.0.1:%d", dead[i]);
    char *frontends = s_list (closed[0], zlt_broker_endpoint (broker, "frontend"));
    char *backends = s_list (closed[1], zlt_broker_endpoint (broker, "backend"));
    char *admins = s_list (closed[2], zlt_broker_endpoint (broker, "admin"));

    // zlane-ctl first: nothing else has touched the broker yet
    char *ctl_out = zlt_path (dir, "ctl.out"), *ctl_err = zlt_path (dir, "ctl.err");
    int64_t t = zlt_now_ms ();
    int code = s_ctl_stats (admins, ctl_out, ctl_err);
    int64_t ctl_ms = zlt_now_ms () - t;
    if (code != 0) {
        zlt_dump_file ("zlane-ctl stderr", ctl_err, 2000);
        fail_msg ("zlane-ctl stats over '%s' exited %d", admins, code);
    }
    char *text = zlt_read_file (ctl_out, NULL);
    assert_non_null (text);
    assert_non_null (strstr (text, "\"groups\":["));
    // an LMDB broker leads, at epoch 0, its store reachable
    assert_non_null (strstr (text, "\"role\":\"leader\",\"epoch\":0,\"store_reachable\":true"));
    free (text);
    // and says so in words, with its commit latency
    char *ctl_bin = zlt_bin ("zlane-ctl");
    const char *words[] = {ctl_bin, "--admin", admins, "--timeout", "10s", "stats", NULL};
    unlink (ctl_out);
    assert_int_equal (zlt_run (words, NULL, ctl_out, ctl_err, 30000), 0);
    text = zlt_read_file (ctl_out, NULL);
    assert_non_null (text);
    if (!strstr (text, "role leader, epoch 0; store lmdb, database reachable") ||
        !strstr (text, "\ncommits "))
        fail_msg ("zlane-ctl stats said:\n%s", text);
    free (text);
    free (ctl_bin);

    char *record = zlt_path (dir, "record");
    char *worker_err;
    zlt_proc_t *worker = zlt_worker_spawn (dir, "worker1", backends, record, &worker_err);

    enum { JOBS = 200 };
    char *in = zlt_path (dir, "submit.in"), *out = zlt_path (dir, "submit.out");
    char *err = zlt_path (dir, "submit.err");
    zlt_write_lines (in, "job", JOBS);
    char *submit = zlt_bin ("zlane-submit");
    const char *argv[] = {submit,    "--broker", frontends, "--tenant",  "t",   "--lane", "a",
                          "--lines", "--file",   in,        "--timeout", "30s", "-v",     NULL};
    t = zlt_now_ms ();
    code = zlt_run (argv, NULL, out, err, 60000);
    int64_t submit_ms = zlt_now_ms () - t;
    if (code != 0) {
        zlt_dump_file ("zlane-submit stderr", err, 3000);
        zlt_broker_dump (broker, 2000);
        fail_msg ("zlane-submit over '%s' exited %d", frontends, code);
    }
    text = zlt_read_file (out, NULL);
    assert_non_null (text);
    uint64_t ids[JOBS + 1];
    assert_int_equal (zlt_ids_parse (text, ids, JOBS + 1, "zlane-submit output"), JOBS);
    free (text);

    t = zlt_now_ms ();
    size_t want = JOBS;
    zlt_wait_file (record, zlt_has_lines, &want, 30000); // woken by each write
    int64_t run_ms = zlt_now_ms () - t;
    if (zlt_count_lines (record) < JOBS) {
        zlt_dump_file ("zlane-worker stderr", worker_err, 3000);
        fail_msg ("the worker ran %zu of %d jobs", zlt_count_lines (record), JOBS);
    }
    size_t worker_moves = zlt_count_in_file (worker_err, "; trying ");
    fprintf (stderr,
             "dead first endpoint: zlane-ctl answered in %" PRId64 " ms, %d jobs accepted in "
             "%" PRId64 " ms, all run %" PRId64 " ms later; the worker moved %zu times\n",
             ctl_ms, JOBS, submit_ms, run_ms, worker_moves);
    assert_true (worker_moves >= 1); // it did start on the closed port

    zlt_proc_signal (worker, SIGTERM);
    assert_int_equal (zlt_proc_wait (worker, 15000), 0);
    zlt_proc_destroy (&worker);
    assert_int_equal (zlt_broker_stop (broker, 10000), 0);
    zlt_assert_no_sanitizer_report ("zlane-worker stderr", worker_err);
    zlt_assert_no_sanitizer_report ("zlane-submit stderr", err);
    zlt_assert_no_sanitizer_report ("zlane-ctl stderr", ctl_err);
    char *broker_err = zlt_path (dir, "broker.err");
    zlt_assert_no_sanitizer_report ("zlane-broker stderr", broker_err);
    free (broker_err);
    free (submit);
    free (in);
    free (out);
    free (err);
    free (record);
    free (worker_err);
    free (ctl_out);
    free (ctl_err);
    free (frontends);
    free (backends);
    free (admins);
}

// ---------------------------------------------------------------- 2. failover
/*  Broker A serves lane a from data dir D while B's four ports are only
    reserved. One zlane-submit (4,000 jobs) and two zlane-workers are given
    "A,B". When a third of the ids are printed, A is SIGKILLed and B started
    on D and its reserved ports. The producer must finish with every job
    accepted; every printed id must run at least once, no id nobody printed
    may run, and B must end idle. */
static void
test_failover_to_second_broker (void **state)
{
    (void)state;
    int64_t t0 = zlt_now_ms ();
    const char *args_a[] = {"--lane", "a", "--heartbeat", "200ms", "--durability", "fsync", NULL};
    zlt_broker_t *a = zlt_broker_start (args_a);
    assert_non_null (a);
    const char *dir = zlt_broker_dir (a);
    char *data = zlt_path (dir, "data");

    int ports[4];
    s_free_ports (ports, 4);
    char b_ep[4][64];
    for (int i = 0; i < 4; i++)
        snprintf (b_ep[i], sizeof b_ep[i], "tcp://127.0.0.1:%d", ports[i]);
    char *frontends = s_list (zlt_broker_endpoint (a, "frontend"), b_ep[0]);
    char *backends = s_list (zlt_broker_endpoint (a, "backend"), b_ep[1]);

    zlt_client_t *admin_a = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (a, "admin"));
    assert_non_null (admin_a);
    char *record = zlt_path (dir, "record");
    enum { WORKERS = 2 };
    zlt_proc_t *workers[WORKERS];
    char *worker_err[WORKERS];
    for (int w = 0; w < WORKERS; w++) {
        char name[32];
        snprintf (name, sizeof name, "worker%d", w + 1);
        workers[w] = zlt_worker_spawn (dir, name, backends, record, &worker_err[w]);
    }
    if (zlt_wait_counter (admin_a, "workers_ready", WORKERS, 10000) != 0) {
        for (int w = 0; w < WORKERS; w++)
            zlt_dump_file ("zlane-worker stderr", worker_err[w], 2000);
        fail_msg ("the workers did not say Ready to A");
    }
    zlt_client_destroy (&admin_a);

    // the producer reads its lines from a FIFO the test feeds in three
    // parts: the kill lands while A is taking the second
    char *in = zlt_path (dir, "submit.fifo"), *out = zlt_path (dir, "submit.out");
    char *err = zlt_path (dir, "submit.err");
    assert_int_equal (mkfifo (in, 0600), 0);
    int feed = open (in, O_RDWR | O_CLOEXEC | O_NONBLOCK); // EOF once closed
    assert_true (feed >= 0);
    assert_true (fcntl (feed, F_SETPIPE_SZ, 4096) >= 4096);
    char *submit_bin = zlt_bin ("zlane-submit");
    const char *argv[] = {submit_bin,  "--broker", frontends, "--tenant", "t",
                          "--lane",    "a",        "--lines", "--file",   in,
                          "--timeout", "120s",     "--json",  "-v",       NULL};
    zlt_proc_t *submit = zlt_spawn (argv, NULL, out, err);
    assert_non_null (submit);
    const int parts[3] = {FAILOVER_JOBS * 3 / 8, FAILOVER_JOBS * 3 / 8,
                          FAILOVER_JOBS - 2 * (FAILOVER_JOBS * 3 / 8)};
    int fed = 0;
    int64_t deadline = t0 + SUBMIT_MS;
    zlt_fifo_feed (feed, &fed, parts[0], deadline);
    zlt_wait_printed (out, (size_t)parts[0] / 2, submit, err, deadline);
    // mid-stream: the producer has read all but a page of the second part
    zlt_fifo_feed (feed, &fed, parts[1], deadline);
    size_t printed_at_kill = zlt_count_lines (out);
    size_t executed_at_kill = zlt_count_lines (record);
    int64_t t_kill = zlt_now_ms ();
    assert_int_equal (zlt_broker_kill (a), 0);
    assert_int_equal (zlt_proc_exit_code (zlt_broker_proc (a)), 128 + SIGKILL);
    const char *args_b[] = {"--lane",   "a",          "--heartbeat", "200ms",     "--durability",
                            "fsync",    "--frontend", b_ep[0],       "--backend", b_ep[1],
                            "--events", b_ep[2],      "--admin",     b_ep[3],     "--data",
                            data,       NULL};
    zlt_broker_t *b = zlt_broker_start (args_b);
    if (!b)
        fail_msg ("broker B did not start on %s and the reserved ports", data);
    int64_t b_up_ms = zlt_now_ms () - t_kill;
    assert_string_equal (zlt_broker_endpoint (b, "frontend"), b_ep[0]);
    zlt_fifo_feed (feed, &fed, parts[2], deadline); // read once B serves
    close (feed);

    // the first id printed after the kill: the producer is served by B
    int64_t first_after_ms = -1;
    while (zlt_proc_wait (submit, 0) != 0) {
        size_t printed = zlt_count_lines (out);
        if (first_after_ms < 0 && printed > printed_at_kill)
            first_after_ms = zlt_now_ms () - t_kill;
        if (zlt_now_ms () >= deadline) {
            zlt_dump_file ("zlane-submit stderr", err, 3000);
            zlt_broker_dump (b, 3000);
            fail_msg ("zlane-submit did not finish within %d ms (%zu ids printed)", SUBMIT_MS,
                      printed);
        }
        poll (NULL, 0, POLL_MS);
    }
    if (first_after_ms < 0)
        first_after_ms = zlt_now_ms () - t_kill;
    int64_t t_submitted = zlt_now_ms ();
    int code = zlt_proc_exit_code (submit);
    if (code != 0) {
        zlt_dump_file ("zlane-submit stderr", err, 3000);
        zlt_broker_dump (b, 3000);
        fail_msg ("zlane-submit exited %d", code);
    }

    uint64_t *ids = malloc ((FAILOVER_JOBS + 1) * sizeof *ids);
    size_t duplicates_said = 0;
    char *text = zlt_read_file (out, NULL);
    assert_non_null (text);
    size_t n_ids = zlt_ids_parse_json (text, ids, FAILOVER_JOBS + 1, out, &duplicates_said);
    free (text);
    assert_int_equal (n_ids, FAILOVER_JOBS);
    uint64_t *by_line = malloc (n_ids * sizeof *by_line); // by_line[i]: "job i"
    assert_non_null (by_line);
    memcpy (by_line, ids, n_ids * sizeof *ids);
    zlt_ids_sort (ids, n_ids);
    for (size_t i = 1; i < n_ids; i++)
        if (ids[i] == ids[i - 1])
            fail_msg ("job id %" PRIu64 " was printed for two different lines", ids[i]);

    // the workers followed: both said Ready to B
    zlt_client_t *admin_b = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (b, "admin"));
    assert_non_null (admin_b);
    if (zlt_wait_counter (admin_b, "workers_ready", WORKERS, 30000) != 0) {
        for (int w = 0; w < WORKERS; w++)
            zlt_dump_file ("zlane-worker stderr", worker_err[w], 2000);
        fail_msg ("the workers did not say Ready to B");
    }

    // drain: every printed id run at least once; then B holds nothing
    unsigned *runs = calloc (n_ids, sizeof *runs);
    // (looked at every 50 ms, as test_crash does: a tally per write of 4,000
    // would take the CPU the workers need)
    zlt_tally_t t;
    deadline = zlt_now_ms () + DRAIN_MS;
    while (zlt_tally (record, ids, n_ids, runs, &t), t.lost && zlt_now_ms () < deadline)
        poll (NULL, 0, 50);
    int64_t t_drained = zlt_now_ms ();
    bool idle = false;
    int64_t settle = zlt_now_ms () + SETTLE_MS;
    zl_group_stats_t g = {0};
    while (t.lost == 0 && !idle && zlt_now_ms () < settle) {
        idle = zlt_group (admin_b, "a", NULL, &g) == 0 && g.ready + g.delayed + g.in_flight == 0;
        if (!idle)
            poll (NULL, 0, 20);
    }
    zlt_tally (record, ids, n_ids, runs, &t);
    // each printed id runs its own line; an unprinted id may run only as a
    // Submit never answered and sent again (early dispatch: it left before
    // the commit the kill undid)
    const char *const prefix[] = {"job"};
    zlt_payloads_t pl;
    zlt_payloads (record, by_line, prefix, 1, FAILOVER_JOBS, &pl);
    size_t unanswered = pl.unanswered, foreign = pl.foreign;

    size_t producer_moves = zlt_count_in_file (err, "leaving broker at ");
    size_t resent = 0;
    char *log = zlt_read_file (err, NULL);
    for (const char *p = log; p && (p = strstr (p, "; resending ")); p++)
        resent += strtoul (p + strlen ("; resending "), NULL, 10);
    free (log);
    size_t worker_moves = 0;
    for (int w = 0; w < WORKERS; w++)
        worker_moves += zlt_count_in_file (worker_err[w], "; trying ");
    fprintf (stderr,
             "failover: lost = %zu, duplicate executions = %zu, jobs = %d accepted (%zu said "
             "duplicate: the keys are generated, so none should)\n"
             "failover: %zu executions, %zu of jobs nobody submitted, %zu of Submits never "
             "answered (sent to a worker before the commit the kill undid)\n"
             "failover: A killed at %zu ids printed and %zu executions; B listening %" PRId64
             " ms after the kill; first id printed after the kill at %" PRId64 " ms\n"
             "failover: the producer left a broker %zu times and resent %zu unanswered jobs; "
             "the workers moved %zu times\n"
             "failover: submitted in %" PRId64 " ms, drained %" PRId64 " ms later\n",
             t.lost, t.duplicates, FAILOVER_JOBS, duplicates_said, t.lines, foreign, unanswered,
             printed_at_kill, executed_at_kill, b_up_ms, first_after_ms, producer_moves, resent,
             worker_moves, t_submitted - t0, t_drained - t_submitted);
    if (t.lost || foreign || pl.mismatched || unanswered > resent || !idle) {
        for (size_t i = 0; i < n_ids && t.lost; i++)
            if (!runs[i]) {
                fprintf (stderr, "failover: job %" PRIu64 " never ran\n", ids[i]);
                break;
            }
        for (int w = 0; w < WORKERS; w++)
            zlt_dump_file ("zlane-worker stderr", worker_err[w], 2000);
        zlt_dump_file ("zlane-submit stderr", err, 2000);
        zlt_broker_dump (b, 3000);
    }
    assert_int_equal (t.lost, 0);
    zlt_payloads_assert (&pl, resent);
    assert_true (idle);
    assert_true (producer_moves >= 1);

    for (int w = 0; w < WORKERS; w++) {
        zlt_proc_signal (workers[w], SIGTERM);
        assert_int_equal (zlt_proc_wait (workers[w], 15000), 0);
        zlt_proc_destroy (&workers[w]);
        zlt_assert_no_sanitizer_report ("zlane-worker stderr", worker_err[w]);
        free (worker_err[w]);
    }
    zlt_proc_destroy (&submit);
    zlt_client_destroy (&admin_b);
    assert_int_equal (zlt_broker_stop (b, 10000), 0);
    zlt_assert_no_sanitizer_report ("zlane-submit stderr", err);
    char *broker_err = zlt_path (zlt_broker_dir (b), "broker.err");
    zlt_assert_no_sanitizer_report ("zlane-broker B stderr", broker_err);
    free (broker_err);
    free (runs);
    free (ids);
    free (by_line);
    free (submit_bin);
    free (in);
    free (out);
    free (err);
    free (record);
    free (frontends);
    free (backends);
    free (data);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown (test_dead_first_endpoint, zlt_teardown),
        cmocka_unit_test_teardown (test_failover_to_second_broker, zlt_teardown),
    };
    if (getenv ("ZLT_FILTER")) // run one: ZLT_FILTER='test_failover*'
        cmocka_set_test_filter (getenv ("ZLT_FILTER"));
    return cmocka_run_group_tests (tests, NULL, NULL);
}
