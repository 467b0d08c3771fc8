/*  test_zltest: the harness itself and zlane-testhandler. Exit codes and
    signals come back right, waits time out when they should, a process
    that cannot start is reported, cleanup kills whole process groups, and
    every testhandler option does what the integration tests rely on. */
#define _GNU_SOURCE
#include "zltest.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

static bool
s_alive (pid_t pid)
{
    return kill (pid, 0) == 0 || errno != ESRCH;
}

// A process that is not our child is dead once it is gone or a zombie.
// Returns true if so within `timeout_ms` (checked in 2 ms steps: we cannot
// wait on another parent's child).
static bool
s_dead_soon (pid_t pid, int timeout_ms)
{
    int64_t deadline = zlt_now_ms () + timeout_ms;
    for (;;) {
        char path[64], st = 0;
        snprintf (path, sizeof path, "/proc/%d/stat", (int)pid);
        FILE *f = fopen (path, "r");
        if (!f)
            return true;
        if (fscanf (f, "%*d %*s %c", &st) != 1)
            st = 0;
        fclose (f);
        if (st == 'Z' || st == 'X')
            return true;
        if (zlt_now_ms () >= deadline)
            return false;
        poll (NULL, 0, 2);
    }
}

// ---------------------------------------------------------------- processes
static void
test_exit_codes_and_signals (void **state)
{
    const char *ok[] = {"/bin/sh", "-c", "exit 0", NULL};
    const char *seven[] = {"/bin/sh", "-c", "exit 7", NULL};
    const char *killed[] = {"/bin/sh", "-c", "kill -9 $$", NULL};
    assert_int_equal (zlt_run (ok, NULL, NULL, NULL, 5000), 0);
    assert_int_equal (zlt_run (seven, NULL, NULL, NULL, 5000), 7);
    assert_int_equal (zlt_run (killed, NULL, NULL, NULL, 5000), 128 + SIGKILL);
}

static void
test_stdio_redirection (void **state)
{
    const char *dir = zlt_tmpdir ();
    assert_non_null (dir);
    char *in = zlt_path (dir, "in"), *out = zlt_path (dir, "out"), *err = zlt_path (dir, "err");
    assert_int_equal (zlt_write_file (in, "payload\n", 8), 0);
    const char *argv[] = {"/bin/sh", "-c", "cat; echo oops >&2", NULL};
    assert_int_equal (zlt_run (argv, in, out, err, 5000), 0);
    char *text = zlt_read_file (out, NULL);
    assert_string_equal (text, "payload\n");
    free (text);
    text = zlt_read_file (err, NULL);
    assert_string_equal (text, "oops\n");
    free (text);
    free (in), free (out), free (err);
}

/*  zlt_wait_file_has times out on a file that never comes and wakes for a
    write by another process; job ids parse, sort and are found. */
static void
test_wait_file_and_ids (void **state)
{
    const char *dir = zlt_tmpdir ();
    assert_non_null (dir);
    char *out = zlt_path (dir, "out");
    assert_int_equal (zlt_wait_file_has (out, "ready", 100), -1);
    const char *argv[] = {"/bin/sh", "-c", "sleep 0.1; echo ready", NULL};
    zlt_proc_t *p = zlt_spawn (argv, NULL, out, NULL);
    assert_non_null (p);
    assert_int_equal (zlt_wait_file_has (out, "ready", 5000), 0);
    free (out);

    uint64_t ids[4];
    assert_int_equal (zlt_ids_parse ("30\n10\n20\n", ids, 4, "ids"), 3);
    zlt_ids_sort (ids, 3);
    assert_true (ids[0] == 10 && ids[1] == 20 && ids[2] == 30);
    assert_int_equal (zlt_ids_find (ids, 3, 20), 1);
    assert_int_equal (zlt_ids_find (ids, 3, 25), -1);
}

static void
test_wait_times_out_and_destroy_kills (void **state)
{
    const char *argv[] = {"/bin/sleep", "30", NULL};
    zlt_proc_t *p = zlt_spawn (argv, NULL, NULL, NULL);
    assert_non_null (p);
    assert_int_equal (getpgid (zlt_proc_pid (p)), zlt_proc_pid (p)); // its own group
    int64_t t0 = zlt_now_ms ();
    assert_int_equal (zlt_proc_wait (p, 100), -1);
    int64_t took = zlt_now_ms () - t0;
    assert_true (took >= 95 && took < 2000);
    assert_int_equal (zlt_proc_exit_code (p), -1);
    assert_int_equal (zlt_proc_signal (p, SIGTERM), 0);
    assert_int_equal (zlt_proc_wait (p, 5000), 0);
    assert_int_equal (zlt_proc_exit_code (p), 128 + SIGTERM);
    assert_int_equal (zlt_proc_signal (p, SIGTERM), -1); // reaped
    zlt_proc_destroy (&p);
    assert_null (p);
    zlt_proc_destroy (&p); // NULL-safe
}

static void
test_unstartable (void **state)
{
    const char *argv[] = {"/nonexistent/zlane-nothing", NULL};
    assert_null (zlt_spawn (argv, NULL, NULL, NULL));
    assert_int_equal (zlt_run (argv, NULL, NULL, NULL, 1000), -1);
}

static void
test_cleanup_kills_the_group (void **state)
{
    const char *dir = zlt_tmpdir ();
    assert_non_null (dir);
    // the shell's stdout is a pipe of ours: its first line says the shell forked
    int pfd[2];
    assert_int_equal (pipe2 (pfd, O_CLOEXEC), 0);
    char out[64];
    snprintf (out, sizeof out, "/dev/fd/%d", pfd[1]);
    // the shell leaves a grandchild in its group and reports its pid
    const char *argv[] = {"/bin/sh", "-c", "sleep 30 & echo $!; wait", NULL};
    zlt_proc_t *p = zlt_spawn (argv, NULL, out, NULL);
    close (pfd[1]);
    assert_non_null (p);
    pid_t leader = zlt_proc_pid (p);
    struct pollfd in = {pfd[0], POLLIN, 0};
    assert_int_equal (poll (&in, 1, 5000), 1);
    char line[32] = {0};
    assert_true (read (pfd[0], line, sizeof line - 1) > 0);
    close (pfd[0]);
    pid_t grandchild = (pid_t)atol (line);
    assert_true (grandchild > 0 && s_alive (grandchild));
    assert_int_equal (getpgid (grandchild), leader);
    struct stat st;
    assert_int_equal (stat (dir, &st), 0);
    char *kept = strdup (dir);

    zlt_cleanup ();
    assert_int_equal (stat (kept, &st), -1); // the temp dir is gone
    free (kept);
    // the grandchild got SIGKILL with the group; reparented, its new parent
    // reaps it, so it may linger as a zombie for a moment: that is dead too
    assert_true (s_dead_soon (grandchild, 5000));
}

static void
test_bin_dir (void **state)
{
    char *broker = zlt_bin_path ("zlane-broker");
    assert_true (zlt_is_executable (broker));
    free (broker);
}

// ---------------------------------------------------------------- broker + clients
static void
test_broker_start_and_stats (void **state)
{
    zlt_broker_t *b = zlt_broker_start (NULL);
    assert_non_null (b);
    const char *which[] = {"frontend", "backend", "events", "admin"};
    for (int i = 0; i < 4; i++)
        assert_true (strncmp (zlt_broker_endpoint (b, which[i]), "tcp://127.0.0.1:", 16) == 0);
    assert_null (zlt_broker_endpoint (b, "nope"));
    zlt_client_t *admin = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (b, "admin"));
    assert_non_null (admin);
    zl_stats_t st;
    assert_int_equal (zlt_stats (admin, &st, 5000), 0);
    uint64_t v = 1;
    assert_int_equal (zlt_stats_counter (&st, "jobs_acked", &v), 0);
    assert_int_equal (v, 0);
    assert_int_equal (zlt_stats_counter (&st, "no_such_counter", &v), -1);
    zl_group_stats_t g;
    assert_int_equal (zlt_group (admin, "a", NULL, &g), 0);
    assert_int_equal (zlt_group (admin, "zzz", NULL, &g), -1);
    // a counter that never gets there: bounded, and reports
    int64_t t0 = zlt_now_ms ();
    assert_int_equal (zlt_wait_counter (admin, "jobs_acked", 1, 200), -1);
    assert_true (zlt_now_ms () - t0 < 2000);
    // a counter that is there already
    assert_int_equal (zlt_wait_counter (admin, "admin_requests", 1, 1000), 0);
    assert_int_equal (zlt_broker_stop (b, 10000), 0);   // SIGTERM: clean exit
    assert_int_equal (zlt_stats (admin, &st, 100), -1); // nobody answers now
}

/*  Kill and restart: the new process serves the same four endpoints from
    the same data (a job accepted before the kill is ready after it), an
    admin client connected before the kill is answered by the new broker,
    and a restart while the old broker still holds the ports gives up at
    its deadline rather than hanging. */
static void
test_broker_kill_and_restart (void **state)
{
    const char *args[] = {"--lane", "a", "--durability", "fsync", NULL};
    zlt_broker_t *b = zlt_broker_start (args);
    assert_non_null (b);
    const char *which[] = {"frontend", "backend", "events", "admin"};
    char before[4][256];
    for (int i = 0; i < 4; i++)
        snprintf (before[i], sizeof before[i], "%s", zlt_broker_endpoint (b, which[i]));
    zlt_client_t *producer = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (b, "frontend"));
    zlt_client_t *admin = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (b, "admin"));
    assert_non_null (producer);
    assert_non_null (admin);
    assert_true (zlt_client_hello (producer, "zltest", 5000) > 0);
    zl_job_spec_t spec = {.seq = 1, .tenant = "t1", .lane = "a", .idempotency_key = "k1"};
    spec.payload = (zl_bytes_t){(const uint8_t *)"x", 1};
    zl_msg_t m = {.kind = ZL_MSG_SUBMIT};
    m.u.submit = (zl_submit_t){1, &spec};
    assert_int_equal (zlt_client_send (producer, &m), 0);
    assert_int_equal (zlt_client_expect (producer, ZL_MSG_ACCEPTED, &m, 5000), 0);
    assert_int_equal (m.kind, ZL_MSG_ACCEPTED);

    pid_t old_pid = zlt_proc_pid (zlt_broker_proc (b));
    assert_int_equal (zlt_broker_kill (b), 0);
    assert_int_equal (zlt_proc_exit_code (zlt_broker_proc (b)), 128 + SIGKILL);
    assert_int_equal (zlt_broker_kill (b), -1); // nothing runs now
    assert_int_equal (zlt_broker_restart (b, 10000), 0);
    assert_true (zlt_proc_pid (zlt_broker_proc (b)) != old_pid);
    assert_int_equal (zlt_proc_exit_code (zlt_broker_proc (b)), -1);
    for (int i = 0; i < 4; i++)
        assert_string_equal (zlt_broker_endpoint (b, which[i]), before[i]);
    zl_group_stats_t g;
    assert_int_equal (zlt_group (admin, "a", "t1", &g), 0); // the old client, reconnected
    assert_int_equal (g.ready, 1);

    // a restart while another socket holds the frontend port: retried until
    // its deadline, reported; once the port is free the restart succeeds
    assert_int_equal (zlt_broker_kill (b), 0);
    int port = atoi (strrchr (before[0], ':') + 1);
    int fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true (fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons ((uint16_t)port)};
    sa.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    int one = 1;
    setsockopt (fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    assert_int_equal (bind (fd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal (listen (fd, 1), 0);
    int64_t t0 = zlt_now_ms ();
    assert_int_equal (zlt_broker_restart (b, 500), -1);
    int64_t took = zlt_now_ms () - t0;
    assert_true (took >= 400 && took < 5000);
    close (fd);
    assert_int_equal (zlt_broker_restart (b, 10000), 0);
    assert_int_equal (zlt_group (admin, "a", "t1", &g), 0);
    assert_int_equal (g.ready, 1);
}

static void
test_broker_that_cannot_start (void **state)
{
    const char *args[] = {"--no-such-flag", NULL};
    int64_t t0 = zlt_now_ms ();
    assert_null (zlt_broker_start (args));
    assert_true (zlt_now_ms () - t0 < 5000); // noticed the exit, did not sit out the deadline
}

/*  The SUB client: a job nacked PERMANENT goes to the DLQ; the periodic
    alert.dlq event (and, unless the subscription was still joining, the
    dlq.<lane>.<tenant> DeadLetter) arrive with their topics. */
static void
test_sub_client_events (void **state)
{
    const char *args[] = {"--lane", "a", "--dlq-alert", "50ms", "--liveness", "60", NULL};
    zlt_broker_t *b = zlt_broker_start (args);
    assert_non_null (b);
    zlt_client_t *sub = zlt_client_new (ZMQ_SUB, zlt_broker_endpoint (b, "events"));
    zlt_client_t *producer = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (b, "frontend"));
    zlt_client_t *worker = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (b, "backend"));
    assert_non_null (sub);
    assert_non_null (producer);
    assert_non_null (worker);
    zlt_client_subscribe (sub, "");

    const char *lanes[] = {"a"};
    zl_msg_t m = {.kind = ZL_MSG_READY};
    m.u.ready = (zl_ready_t){"sub-test", 1, lanes, 1};
    assert_int_equal (zlt_client_send (worker, &m), 0);
    assert_true (zlt_client_hello (producer, "zltest", 5000) > 0);
    zl_job_spec_t spec = {.seq = 1, .tenant = "t1", .lane = "a", .idempotency_key = ""};
    spec.payload = (zl_bytes_t){(const uint8_t *)"x", 1};
    m = (zl_msg_t){.kind = ZL_MSG_SUBMIT};
    m.u.submit = (zl_submit_t){1, &spec};
    assert_int_equal (zlt_client_send (producer, &m), 0);
    assert_int_equal (zlt_client_expect (worker, ZL_MSG_DISPATCH, &m, 5000), 0);
    assert_int_equal (m.kind, ZL_MSG_DISPATCH);
    uint64_t id = m.u.dispatch.jobs[0].job_id;
    zl_nack_item_t nack = {id, m.u.dispatch.jobs[0].lease, ZL_FAIL_PERMANENT, "bad input", 0, 1};
    m = (zl_msg_t){.kind = ZL_MSG_NACK};
    m.u.nack = (zl_nack_t){1, &nack};
    assert_int_equal (zlt_client_send (worker, &m), 0);
    assert_int_equal (zlt_client_expect (worker, ZL_MSG_SETTLED, &m, 5000), 0);
    assert_int_equal (m.kind, ZL_MSG_SETTLED);

    bool alert = false;
    int64_t deadline = zlt_now_ms () + 5000;
    while (!alert) {
        int64_t left = deadline - zlt_now_ms ();
        assert_true (left > 0);
        assert_int_equal (zlt_client_recv (sub, &m, (int)left), 0);
        if (m.kind == ZL_MSG_DEAD_LETTER) {
            assert_string_equal (zlt_client_topic (sub), "dlq.a.t1");
            assert_true (m.u.dead_letter.job_id == id);
        } else {
            assert_int_equal (m.kind, ZL_MSG_DLQ_ALERT);
            assert_string_equal (zlt_client_topic (sub), "alert.dlq");
            assert_int_equal (m.u.dlq_alert.depth, 1);
            alert = true;
        }
    }
}

// ---------------------------------------------------------------- testhandler
typedef struct {
    const char *dir;
    char *bin;
    char *in, *out, *err, *record;
} th_t;

static void
s_th_init (th_t *th, const char *payload)
{
    th->dir = zlt_tmpdir ();
    assert_non_null (th->dir);
    th->bin = zlt_bin_path ("zlane-testhandler");
    assert_true (zlt_is_executable (th->bin));
    th->in = zlt_path (th->dir, "in");
    th->out = zlt_path (th->dir, "out");
    th->err = zlt_path (th->dir, "err");
    th->record = zlt_path (th->dir, "record");
    assert_int_equal (zlt_write_file (th->in, payload, strlen (payload)), 0);
}

static void
s_th_free (th_t *th)
{
    free (th->bin), free (th->in), free (th->out), free (th->err), free (th->record);
}

// Run the handler as attempt `attempt` of job 42 with extra options.
static int
s_th_run (th_t *th, int attempt, const char *const opts[])
{
    char job_env[64], attempt_env[64];
    snprintf (job_env, sizeof job_env, "ZLANE_JOB_ID=%d", 42);
    snprintf (attempt_env, sizeof attempt_env, "ZLANE_ATTEMPT=%d", attempt);
    const char *argv[32] = {"/usr/bin/env", job_env, attempt_env, th->bin};
    size_t n = 4;
    for (size_t i = 0; opts[i]; i++)
        argv[n++] = opts[i];
    argv[n] = NULL;
    unlink (th->err);
    return zlt_run (argv, th->in, th->out, th->err, 10000);
}

static void
s_assert_err_has (th_t *th, const char *text)
{
    char *err = zlt_read_file (th->err, NULL);
    assert_non_null (err);
    if (!strstr (err, text))
        fail_msg ("stderr lacks '%s': %s", text, err);
    free (err);
}

static void
test_handler_outcomes (void **state)
{
    th_t th;
    s_th_init (&th, "a fine payload with POISON and BAD inside");
    assert_int_equal (s_th_run (&th, 1, (const char *[]){NULL}), 0);
    assert_int_equal (s_th_run (&th, 1, (const char *[]){"--exit", "9", NULL}), 9);
    assert_int_equal (s_th_run (&th, 1, (const char *[]){"--poison", "POISON", NULL}), 1);
    s_assert_err_has (&th, "POISON");
    assert_int_equal (s_th_run (&th, 1, (const char *[]){"--poison", "absent", NULL}), 0);
    assert_int_equal (s_th_run (&th, 1, (const char *[]){"--permanent-if", "BAD", NULL}), 65);
    assert_int_equal (s_th_run (&th, 1, (const char *[]){"--permanent-if", "GOOD", NULL}), 0);
    assert_int_equal (s_th_run (&th, 1, (const char *[]){"--throttle-ms", "250", NULL}), 75);
    s_assert_err_has (&th, "retry-after=250ms");
    assert_int_equal (s_th_run (&th, 2, (const char *[]){"--throttle-ms", "250", NULL}), 0);
    const char *until3[] = {"--fail-until-attempt", "3", NULL};
    assert_int_equal (s_th_run (&th, 1, until3), 1);
    assert_int_equal (s_th_run (&th, 2, until3), 1);
    assert_int_equal (s_th_run (&th, 3, until3), 0);
    assert_int_equal (s_th_run (&th, 1, (const char *[]){"--echo-env", NULL}), 0);
    s_assert_err_has (&th, "ZLANE_JOB_ID=42");
    assert_int_equal (s_th_run (&th, 1, (const char *[]){"--bogus", NULL}), 2);
    int64_t t0 = zlt_now_ms ();
    assert_int_equal (s_th_run (&th, 1, (const char *[]){"--sleep", "150", NULL}), 0);
    assert_true (zlt_now_ms () - t0 >= 150);
    s_th_free (&th);
}

static void
test_handler_records (void **state)
{
    th_t th;
    s_th_init (&th, "x");
    const char *opts[] = {"--record", th.record, "--exit", "1", NULL};
    assert_int_equal (s_th_run (&th, 1, opts), 1); // recorded even when it fails
    assert_int_equal (s_th_run (&th, 2, opts), 1);
    char *text = zlt_read_file (th.record, NULL);
    assert_non_null (text);
    unsigned long id1, id2;
    unsigned a1, a2;
    long pid1, pid2;
    assert_int_equal (sscanf (text, "%lu %u %ld\n%lu %u %ld\n", &id1, &a1, &pid1, &id2, &a2, &pid2),
                      6);
    assert_int_equal (id1, 42);
    assert_int_equal (a1, 1);
    assert_int_equal (id2, 42);
    assert_int_equal (a2, 2);
    assert_true (pid1 > 0 && pid2 > 0);
    free (text);
    s_th_free (&th);
}

/*  --record-payload: the payload after the pid, its unprintable bytes as
    '?'; zlt_payloads sorts the executions into a printed id's own line, an
    input line under an unprinted id (a Submit never answered), another
    line under a printed id (an id given twice), and the rest. */
static void
test_record_payload_and_zlt_payloads (void **state)
{
    th_t th;
    s_th_init (&th, "tenant1 5\n\x01");
    const char *opts[] = {"--record", th.record, "--record-payload", NULL};
    assert_int_equal (s_th_run (&th, 1, opts), 0);
    char *text = zlt_read_file (th.record, NULL);
    assert_non_null (text);
    unsigned long id;
    unsigned a;
    long pid;
    int at = 0;
    assert_int_equal (sscanf (text, "%lu %u %ld %n", &id, &a, &pid, &at), 3);
    assert_string_equal (text + at, "tenant1 5??\n");
    free (text);

    const char record[] = "1 1 100 tenant1 0\n"     // unanswered
                          "2 2 100 tenant2 9999\n"  // unanswered
                          "3 1 100 tenant1 10000\n" // foreign: past the input
                          "4 1 100 other 1\n"       // foreign: not an input's prefix
                          "5 1 100\n"               // foreign: no payload
                          "6 1 100 tenant1 x\n"     // foreign: not a line number
                          "7 1 100 tenant1 7\n"     // printed for this line
                          "7 2 100 tenant1 7\n"     // and again
                          "8 1 100 tenant1 3\n"     // mismatched: 8 is tenant2's line 3
                          "7 1 100 tenant2 7\n";    // mismatched
    assert_int_equal (zlt_write_file (th.record, record, strlen (record)), 0);
    enum { LINES = 10000 };
    uint64_t *ids = calloc (2 * LINES, sizeof *ids);
    assert_non_null (ids);
    ids[7] = 7;
    ids[LINES + 3] = 8;
    const char *const prefixes[] = {"tenant1", "tenant2"};
    zlt_payloads_t p;
    zlt_payloads (th.record, ids, prefixes, 2, LINES, &p);
    assert_int_equal (p.unanswered, 2);
    assert_int_equal (p.foreign, 4);
    assert_int_equal (p.first_foreign, 3);
    assert_int_equal (p.mismatched, 2);
    assert_int_equal (p.first_mismatched, 8);
    free (ids);
    s_th_free (&th);
}

/*  --log: a start line, then an end line with the exit code, both stamped
    with wall-clock ms in order; --sleep-attempt: the sleep applies to that
    attempt only; --ok-if-exists: the file's existence beats every rule. */
static void
test_handler_log_and_conditions (void **state)
{
    th_t th;
    s_th_init (&th, "POISON");
    char *log = zlt_path (th.dir, "log"), *marker = zlt_path (th.dir, "marker");
    const char *opts[] = {"--log",           log,    "--sleep",  "5000",
                          "--sleep-attempt", "2",    "--poison", "POISON",
                          "--ok-if-exists",  marker, NULL};
    int64_t t0 = zlt_now_ms ();
    assert_int_equal (s_th_run (&th, 1, opts), 1); // poison, and no 5 s sleep on attempt 1
    assert_true (zlt_now_ms () - t0 < 4000);
    assert_int_equal (zlt_write_file (marker, "", 0), 0);
    assert_int_equal (s_th_run (&th, 3, opts), 0); // the marker wins over --poison
    char *text = zlt_read_file (log, NULL);
    assert_non_null (text);
    unsigned long id[4];
    unsigned att[4];
    long pid[4];
    long long ms[4];
    int rc[2];
    char *save = NULL, *line;
    line = strtok_r (text, "\n", &save);
    assert_non_null (line);
    assert_int_equal (sscanf (line, "start %lu %u %ld %lld", &id[0], &att[0], &pid[0], &ms[0]), 4);
    line = strtok_r (NULL, "\n", &save);
    assert_non_null (line);
    assert_int_equal (
        sscanf (line, "end %lu %u %ld %lld %d", &id[1], &att[1], &pid[1], &ms[1], &rc[0]), 5);
    line = strtok_r (NULL, "\n", &save);
    assert_non_null (line);
    assert_int_equal (sscanf (line, "start %lu %u %ld %lld", &id[2], &att[2], &pid[2], &ms[2]), 4);
    line = strtok_r (NULL, "\n", &save);
    assert_non_null (line);
    assert_int_equal (
        sscanf (line, "end %lu %u %ld %lld %d", &id[3], &att[3], &pid[3], &ms[3], &rc[1]), 5);
    assert_null (strtok_r (NULL, "\n", &save));
    for (int i = 0; i < 4; i++)
        assert_int_equal (id[i], 42);
    assert_int_equal (att[0], 1);
    assert_int_equal (att[1], 1);
    assert_int_equal (att[2], 3);
    assert_int_equal (att[3], 3);
    assert_int_equal (pid[0], pid[1]);
    assert_int_equal (pid[2], pid[3]);
    assert_int_equal (rc[0], 1);
    assert_int_equal (rc[1], 0);
    assert_true (ms[0] <= ms[1] && ms[1] <= ms[2] && ms[2] <= ms[3]);
    assert_true (ms[0] > 1600000000000LL); // wall clock, not monotonic
    free (text);

    // the sleep does happen on its attempt
    const char *sleepy[] = {"--sleep", "150", "--sleep-attempt", "2", NULL};
    t0 = zlt_now_ms ();
    assert_int_equal (s_th_run (&th, 2, sleepy), 0);
    assert_true (zlt_now_ms () - t0 >= 150);
    free (log), free (marker);
    s_th_free (&th);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown (test_exit_codes_and_signals, zlt_teardown),
        cmocka_unit_test_teardown (test_stdio_redirection, zlt_teardown),
        cmocka_unit_test_teardown (test_wait_file_and_ids, zlt_teardown),
        cmocka_unit_test_teardown (test_wait_times_out_and_destroy_kills, zlt_teardown),
        cmocka_unit_test_teardown (test_unstartable, zlt_teardown),
        cmocka_unit_test_teardown (test_cleanup_kills_the_group, zlt_teardown),
        cmocka_unit_test_teardown (test_bin_dir, zlt_teardown),
        cmocka_unit_test_teardown (test_broker_start_and_stats, zlt_teardown),
        cmocka_unit_test_teardown (test_broker_kill_and_restart, zlt_teardown),
        cmocka_unit_test_teardown (test_broker_that_cannot_start, zlt_teardown),
        cmocka_unit_test_teardown (test_sub_client_events, zlt_teardown),
        cmocka_unit_test_teardown (test_handler_outcomes, zlt_teardown),
        cmocka_unit_test_teardown (test_handler_records, zlt_teardown),
        cmocka_unit_test_teardown (test_record_payload_and_zlt_payloads, zlt_teardown),
        cmocka_unit_test_teardown (test_handler_log_and_conditions, zlt_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
