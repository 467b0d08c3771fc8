/*  test_exec: the exec handler without a broker.
    Jobs are made with zl_worker_job_new and cancelled by hand. Each test
    runs /bin/sh commands and checks the outcome mapping (0 / 65 / 75 /
    other / signal), the environment and stdin the child gets, the stderr
    tail, and that cancellation kills the child's whole process group. The
    test process is a child subreaper, so orphaned grandchildren come back
    to it and can be reaped by pid. Waits are bounded polls on pipes,
    eventfds and pidfds. */
#define _GNU_SOURCE
#include "exec.h"
#include "clock.h"
#include "zlane_worker.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <ftw.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define S_WAIT_MS 5000

typedef struct {
    char dir[64];         // fresh temp dir, exported as TEST_DIR
    zl_worker_job_t *job; // a job with every field set
} s_fixture_t;

static const zl_header_t s_headers[] = {{"content-type", "text/plain"}, {"x-trace.id", "abc"}};

static int
s_setup (void **state)
{
    s_fixture_t *f = calloc (1, sizeof *f);
    snprintf (f->dir, sizeof f->dir, "/tmp/zlane-test-exec.XXXXXX");
    assert_non_null (mkdtemp (f->dir));
    setenv ("TEST_DIR", f->dir, 1);
    static const char payload[] = "hello\nworld";
    zl_worker_job_t fields = {.job_id = 42,
                              .lease = 0xFEED,
                              .attempt = 3,
                              .tenant = "acme",
                              .lane = "emails",
                              .payload = (const uint8_t *)payload,
                              .len = sizeof payload - 1,
                              .idempotency_key = "k-1",
                              .n_headers = 2,
                              .headers = s_headers,
                              .lease_ms = 30000,
                              .max_run_ms = 60000,
                              .max_attempts = 5,
                              .enqueued_at_ms = 1234};
    f->job = zl_worker_job_new (&fields);
    assert_non_null (f->job);
    *state = f;
    return 0;
}

static int
s_rm (const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove (path);
}

static int
s_teardown (void **state)
{
    s_fixture_t *f = *state;
    zl_worker_job_destroy (&f->job);
    assert_null (f->job);
    nftw (f->dir, s_rm, 8, FTW_DEPTH | FTW_PHYS);
    free (f);
    return 0;
}

/*  Run `command` for `job` synchronously; fills `result`. */
static void
s_run (const char *command, const zl_worker_job_t *job, uint32_t grace_ms,
       zl_worker_result_t *result)
{
    zl_exec_opts_t opts = {.command = command, .worker_name = "w-1", .kill_grace_ms = grace_ms};
    zl_exec_t *exec = zl_exec_new (&opts);
    assert_non_null (exec);
    memset (result, 0xAB, sizeof *result); // the handler must set everything
    zl_exec_handler (job, result, exec);
    zl_exec_destroy (&exec);
    assert_null (exec);
}

static char *
s_slurp (const char *dir, const char *name, size_t *len_p)
{
    char path[128];
    snprintf (path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen (path, "rb");
    assert_non_null (fp);
    char *buf = calloc (1, 1 << 21);
    size_t len = fread (buf, 1, (1 << 21) - 1, fp);
    fclose (fp);
    if (len_p)
        *len_p = len;
    return buf;
}

static bool
s_has_line (const char *text, const char *line)
{
    size_t n = strlen (line);
    for (const char *s = text; s && *s; s = strchr (s, '\n'), s = s ? s + 1 : NULL)
        if (strncmp (s, line, n) == 0 && (s[n] == '\n' || s[n] == '\0'))
            return true;
    return false;
}

// ---------------------------------------------------------------- outcomes

static void
test_exit_0_env_and_stdin (void **state)
{
    s_fixture_t *f = *state;
    setenv ("ZLANE_HEADER_STALE", "from the worker's own environment", 1);
    setenv ("ZLANE_JOB_ID", "stale", 1);
    zl_worker_result_t r;
    s_run ("cat > \"$TEST_DIR/payload\" && env > \"$TEST_DIR/env\"", f->job, 1000, &r);
    unsetenv ("ZLANE_HEADER_STALE");
    unsetenv ("ZLANE_JOB_ID");
    assert_int_equal (r.outcome, ZL_WORKER_ACK);
    assert_string_equal (r.error, "");

    size_t len;
    char *payload = s_slurp (f->dir, "payload", &len);
    assert_int_equal (len, f->job->len);
    assert_memory_equal (payload, f->job->payload, len);
    free (payload);

    char *env = s_slurp (f->dir, "env", NULL);
    const char *expected[] = {"ZLANE_JOB_ID=42",
                              "ZLANE_ATTEMPT=3",
                              "ZLANE_TENANT=acme",
                              "ZLANE_LANE=emails",
                              "ZLANE_IDEMPOTENCY_KEY=k-1",
                              "ZLANE_LEASE_MS=30000",
                              "ZLANE_MAX_RUN_MS=60000",
                              "ZLANE_MAX_ATTEMPTS=5",
                              "ZLANE_ENQUEUED_AT_MS=1234",
                              "ZLANE_WORKER=w-1",
                              "ZLANE_HEADER_CONTENT_TYPE=text/plain",
                              "ZLANE_HEADER_X_TRACE_ID=abc"};
    for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++)
        if (!s_has_line (env, expected[i]))
            fail_msg ("missing %s in the child's environment:\n%s", expected[i], env);
    assert_null (strstr (env, "ZLANE_HEADER_STALE"));
    assert_null (strstr (env, "ZLANE_JOB_ID=stale"));
    assert_non_null (strstr (env, "TEST_DIR=")); // the rest is inherited
    free (env);
}

static void
test_exit_65_permanent (void **state)
{
    s_fixture_t *f = *state;
    zl_worker_result_t r;
    s_run ("echo 'bad input: no such customer' >&2; exit 65", f->job, 1000, &r);
    assert_int_equal (r.outcome, ZL_WORKER_PERMANENT);
    assert_string_equal (r.error, "bad input: no such customer (exit status 65)");
}

static void
test_exit_75_retry_after (void **state)
{
    s_fixture_t *f = *state;
    zl_worker_result_t r;
    // The last retry-after= line wins, wherever later output goes.
    s_run ("echo retry-after=250ms >&2; echo '  retry-after=5s' >&2; echo busy >&2; exit 75",
           f->job, 1000, &r);
    assert_int_equal (r.outcome, ZL_WORKER_THROTTLED);
    assert_int_equal (r.retry_after_ms, 5000);
    assert_non_null (strstr (r.error, "busy (exit status 75)"));

    // A final line without a newline counts too.
    s_run ("printf 'retry-after=2m' >&2; exit 75", f->job, 1000, &r);
    assert_int_equal (r.outcome, ZL_WORKER_THROTTLED);
    assert_int_equal (r.retry_after_ms, 120000);
}

static void
test_exit_75_default (void **state)
{
    s_fixture_t *f = *state;
    zl_worker_result_t r;
    s_run ("echo 'retry-after=soon' >&2; exit 75", f->job, 1000, &r); // not a duration
    assert_int_equal (r.outcome, ZL_WORKER_THROTTLED);
    assert_int_equal (r.retry_after_ms, ZL_EXEC_RETRY_AFTER_DEFAULT_MS);
}

static void
test_exit_other_transient (void **state)
{
    s_fixture_t *f = *state;
    zl_worker_result_t r;
    s_run ("exit 3", f->job, 1000, &r);
    assert_int_equal (r.outcome, ZL_WORKER_TRANSIENT);
    assert_string_equal (r.error, "exit status 3");
}

static void
test_signal_transient (void **state)
{
    s_fixture_t *f = *state;
    zl_worker_result_t r;
    s_run ("echo dying >&2; kill -9 $$", f->job, 1000, &r);
    assert_int_equal (r.outcome, ZL_WORKER_TRANSIENT);
    assert_string_equal (r.error, "dying (killed by signal 9)");
}

static void
test_stderr_tail (void **state)
{
    s_fixture_t *f = *state;
    zl_worker_result_t r;
    s_run ("head -c 5000 /dev/zero | tr '\\0' x >&2; echo >&2; echo 'THE END' >&2; "
           "printf '\\n\\n  ' >&2; exit 1",
           f->job, 1000, &r);
    assert_int_equal (r.outcome, ZL_WORKER_TRANSIENT);
    size_t len = strlen (r.error);
    assert_true (len <= ZL_WORKER_ERROR_MAX - 1);
    assert_true (len >= ZL_WORKER_ERROR_MAX - 40); // as much tail as fits
    const char *end = "xxx\nTHE END (exit status 1)";
    assert_string_equal (r.error + len - strlen (end), end);
}

static void
test_big_payload_and_epipe (void **state)
{
    s_fixture_t *f = *state;
    size_t big = 1 << 20;
    uint8_t *data = malloc (big);
    for (size_t i = 0; i < big; i++)
        data[i] = (uint8_t)i;
    zl_worker_job_t fields = *f->job;
    fields.payload = data;
    fields.len = big;
    zl_worker_job_t *job = zl_worker_job_new (&fields);
    free (data);

    zl_worker_result_t r;
    s_run ("wc -c < /dev/stdin > \"$TEST_DIR/count\"", job, 1000, &r);
    assert_int_equal (r.outcome, ZL_WORKER_ACK);
    char *count = s_slurp (f->dir, "count", NULL);
    assert_int_equal (atol (count), (long)big);
    free (count);

    // A child that never reads its stdin: EPIPE, not a dead worker.
    s_run ("exit 0", job, 1000, &r);
    assert_int_equal (r.outcome, ZL_WORKER_ACK);
    zl_worker_job_destroy (&job);
}

// ---------------------------------------------------------------- cancellation

typedef struct {
    const char *command;
    const zl_worker_job_t *job;
    uint32_t grace_ms;
    zl_worker_result_t result;
    int done_fd; // eventfd written when the handler returned
} s_async_t;

static void *
s_async_thread (void *arg)
{
    s_async_t *a = arg;
    s_run (a->command, a->job, a->grace_ms, &a->result);
    uint64_t one = 1;
    ssize_t rc = write (a->done_fd, &one, sizeof one);
    (void)rc;
    return NULL;
}

/*  Read one line from `fd` within S_WAIT_MS; returns the number on it. */
static long
s_read_pid (int fd)
{
    char buf[64] = "";
    size_t n = 0;
    int64_t deadline = zl_clock_mono_ms () + S_WAIT_MS;
    while (!memchr (buf, '\n', n)) {
        struct pollfd p = {fd, POLLIN, 0};
        int left = (int)(deadline - zl_clock_mono_ms ());
        assert_true (left > 0 && poll (&p, 1, left) == 1);
        ssize_t got = read (fd, buf + n, sizeof buf - 1 - n);
        assert_true (got > 0);
        n += (size_t)got;
    }
    return atol (buf);
}

/*  Wait (bounded, by pidfd) until `pid` (our child now, as subreaper) is
    dead, and reap it. */
static void
s_reap (pid_t pid)
{
    int pidfd = (int)syscall (SYS_pidfd_open, pid, 0);
    if (pidfd >= 0) {
        struct pollfd p = {pidfd, POLLIN, 0};
        int ready = poll (&p, 1, S_WAIT_MS);
        close (pidfd);
        if (ready != 1)
            kill (pid, SIGKILL); // clean up before failing
        assert_int_equal (ready, 1);
    }
    int status;
    assert_int_equal (waitpid (pid, &status, 0), pid);
    assert_true (WIFSIGNALED (status));
}

/*  Start `command` in a thread, wait for the pid it writes on $SYNC_FD,
    cancel the job for `why`, and wait for the handler to return. Returns
    the background pid; `a->result` holds the outcome. */
static pid_t
s_run_and_cancel (s_async_t *a, zl_worker_cancel_t why, int64_t *cancel_to_done_ms)
{
    int sync[2];
    assert_int_equal (pipe (sync), 0); // inherited by the child on purpose
    char fd_text[16];
    snprintf (fd_text, sizeof fd_text, "%d", sync[1]);
    setenv ("SYNC_FD", fd_text, 1);
    a->done_fd = eventfd (0, EFD_CLOEXEC);
    pthread_t thread;
    assert_int_equal (pthread_create (&thread, NULL, s_async_thread, a), 0);

    pid_t bg = (pid_t)s_read_pid (sync[0]);
    assert_true (bg > 0);
    int64_t t0 = zl_clock_mono_ms ();
    zl_worker_job_cancel (a->job, why);
    struct pollfd p = {a->done_fd, POLLIN, 0};
    assert_int_equal (poll (&p, 1, S_WAIT_MS), 1);
    *cancel_to_done_ms = zl_clock_mono_ms () - t0;
    pthread_join (thread, NULL);
    close (a->done_fd);
    close (sync[0]);
    close (sync[1]);
    unsetenv ("SYNC_FD");
    return bg;
}

static void
test_cancel_kills_group (void **state)
{
    s_fixture_t *f = *state;
    s_async_t a = {
        .command = "sleep 30 & echo $! >&\"$SYNC_FD\"; wait", .job = f->job, .grace_ms = 5000};
    int64_t took;
    pid_t bg = s_run_and_cancel (&a, ZL_WORKER_LEASE_LOST, &took);
    assert_true (took < 4000); // SIGTERM did it, no need for the grace
    assert_int_equal (a.result.outcome, ZL_WORKER_TRANSIENT);
    assert_string_equal (a.result.error, "lease lost (killed by signal 15)");
    s_reap (bg); // the background sleep died with its group
}

static void
test_cancel_escalates_to_sigkill (void **state)
{
    s_fixture_t *f = *state;
    s_async_t a = {.command = "trap '' TERM; sleep 30 & echo $! >&\"$SYNC_FD\"; wait",
                   .job = f->job,
                   .grace_ms = 200};
    int64_t took;
    pid_t bg = s_run_and_cancel (&a, ZL_WORKER_MAX_RUN, &took);
    assert_true (took >= 200); // SIGTERM was ignored for the whole grace
    assert_int_equal (a.result.outcome, ZL_WORKER_TRANSIENT);
    assert_string_equal (a.result.error, "max run time exceeded (killed by signal 9)");
    s_reap (bg);
}

static void
test_cancelled_before_start (void **state)
{
    s_fixture_t *f = *state;
    zl_worker_job_cancel (f->job, ZL_WORKER_LEASE_LOST);
    zl_worker_job_cancel (f->job, ZL_WORKER_MAX_RUN); // the first reason sticks
    assert_true (zl_worker_job_cancelled (f->job));
    assert_int_equal (zl_worker_job_cancel_reason (f->job), ZL_WORKER_LEASE_LOST);
    zl_worker_result_t r;
    s_run ("touch \"$TEST_DIR/ran\"", f->job, 1000, &r);
    assert_int_equal (r.outcome, ZL_WORKER_TRANSIENT);
    assert_string_equal (r.error, "lease lost (not started)");
    char path[128];
    snprintf (path, sizeof path, "%s/ran", f->dir);
    assert_int_not_equal (access (path, F_OK), 0);
}

static void
test_no_command (void **state)
{
    (void)state;
    zl_exec_opts_t opts = {.command = ""};
    assert_null (zl_exec_new (&opts));
}

int
main (void)
{
    // Orphaned grandchildren come back to us, so tests can reap them by pid.
    prctl (PR_SET_CHILD_SUBREAPER, 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown (test_exit_0_env_and_stdin, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_exit_65_permanent, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_exit_75_retry_after, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_exit_75_default, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_exit_other_transient, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_signal_transient, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_stderr_tail, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_big_payload_and_epipe, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_cancel_kills_group, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_cancel_escalates_to_sigkill, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_cancelled_before_start, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_no_command, s_setup, s_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
