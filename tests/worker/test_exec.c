/*  test_exec: the exec handler without a broker.
    Jobs are made with zl_worker_job_new and cancelled by hand. Each test
    runs /bin/sh commands and checks the outcome mapping (0 / 65 / 75 /
    other / signal), the environment and stdin the child gets (the whole
    payload as a regular file before it starts), the stderr tail (made
    valid UTF-8), that cancellation kills the child's whole process group,
    and that a worker killed by SIGKILL takes its commands' groups with it
    (the handler runs in a forked child of the test, which the test kills).
    The test process is a child subreaper, so orphaned grandchildren come
    back to it and can be reaped by pid. Waits are bounded polls on pipes,
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
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
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

// Exit 79: NOT_YET, with the same retry-after= as 75 (1 s without one).
static void
test_exit_79_not_yet (void **state)
{
    s_fixture_t *f = *state;
    zl_worker_result_t r;
    s_run ("echo 'order 17 not there yet' >&2; echo retry-after=3s >&2; exit 79", f->job, 1000, &r);
    assert_int_equal (r.outcome, ZL_WORKER_NOT_YET);
    assert_int_equal (r.retry_after_ms, 3000);
    assert_non_null (strstr (r.error, "(exit status 79)"));
    s_run ("exit 79", f->job, 1000, &r);
    assert_int_equal (r.outcome, ZL_WORKER_NOT_YET);
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

/*  A copy of `base` with a `len`-byte payload of a known pattern. */
static zl_worker_job_t *
s_job_of_size (const zl_worker_job_t *base, size_t len)
{
    uint8_t *data = malloc (len ? len : 1);
    for (size_t i = 0; i < len; i++)
        data[i] = (uint8_t)(i * 7 + 3);
    zl_worker_job_t fields = *base;
    fields.payload = data;
    fields.len = len;
    zl_worker_job_t *job = zl_worker_job_new (&fields);
    free (data);
    return job;
}

/*  The payload is on stdin whole before the command starts: stdin is a
    regular file of the payload's size before a byte is read, for an empty
    payload, a small one and ones larger than a pipe holds. */
static void
test_payload_whole_before_start (void **state)
{
    s_fixture_t *f = *state;
    const size_t sizes[] = {0, 11, 64 * 1024 + 1, 1 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        zl_worker_job_t *job = s_job_of_size (f->job, sizes[i]);
        zl_worker_result_t r;
        s_run ("if [ -f /dev/stdin ]; then echo file; else echo other; fi > \"$TEST_DIR/kind\"; "
               "stat -L -c %s /dev/stdin > \"$TEST_DIR/size\"; cat > \"$TEST_DIR/payload\"",
               job, 1000, &r);
        assert_int_equal (r.outcome, ZL_WORKER_ACK);
        char *kind = s_slurp (f->dir, "kind", NULL);
        if (strcmp (kind, "file\n") != 0)
            fail_msg ("%zu-byte payload: stdin is not a regular file (%s)", sizes[i], kind);
        free (kind);
        char *size = s_slurp (f->dir, "size", NULL);
        if (atol (size) != (long)sizes[i])
            fail_msg ("%zu-byte payload: stdin held %ld bytes before the command read it", sizes[i],
                      atol (size));
        free (size);
        size_t len;
        char *payload = s_slurp (f->dir, "payload", &len);
        assert_int_equal (len, sizes[i]);
        if (len)
            assert_memory_equal (payload, job->payload, len);
        free (payload);
        zl_worker_job_destroy (&job);
    }
}

/*  Binary stderr: invalid bytes and NULs become U+FFFD in the error text
    (a NUL used to cut it short). */
static void
test_stderr_made_valid_text (void **state)
{
    s_fixture_t *f = *state;
    zl_worker_result_t r;
    s_run ("printf 'bad \\377 and \\000 nul \\303\\251\\n' >&2; exit 1", f->job, 1000, &r);
    assert_int_equal (r.outcome, ZL_WORKER_TRANSIENT);
    assert_string_equal (r.error, "bad \xEF\xBF\xBD and \xEF\xBF\xBD nul \xC3\xA9 (exit status 1)");
}

/*  A signal sent to the command's whole group (here by the command itself)
    reaches the command; the guard survives it and reports the death. */
static void
test_group_signal_reported (void **state)
{
    s_fixture_t *f = *state;
    zl_worker_result_t r;
    s_run ("echo going >&2; kill -TERM 0", f->job, 1000, &r);
    assert_int_equal (r.outcome, ZL_WORKER_TRANSIENT);
    assert_string_equal (r.error, "going (killed by signal 15)");
}

/*  The command cannot start (an environment string over the kernel's
    128 KiB limit: execve fails with E2BIG): TRANSIENT, with the reason. */
static void
test_start_failure_reported (void **state)
{
    s_fixture_t *f = *state;
    enum { BIG = 200 * 1024 };
    char *value = malloc (BIG + 1);
    memset (value, 'v', BIG);
    value[BIG] = '\0';
    zl_header_t header = {"huge", value};
    zl_worker_job_t fields = *f->job;
    fields.n_headers = 1;
    fields.headers = &header;
    zl_worker_job_t *job = zl_worker_job_new (&fields);
    free (value);
    zl_worker_result_t r;
    s_run ("touch \"$TEST_DIR/ran\"", job, 1000, &r);
    zl_worker_job_destroy (&job);
    assert_int_equal (r.outcome, ZL_WORKER_TRANSIENT);
    assert_string_equal (r.error, "cannot start /bin/sh: Argument list too long");
    char path[128];
    snprintf (path, sizeof path, "%s/ran", f->dir);
    assert_int_not_equal (access (path, F_OK), 0);
}

/*  With SIGCHLD ignored in the worker (its children reaped by the kernel),
    the command's status still arrives: the guard reports it. */
static void
test_sigchld_ignored (void **state)
{
    s_fixture_t *f = *state;
    struct sigaction ign = {.sa_handler = SIG_IGN}, old;
    sigemptyset (&ign.sa_mask);
    assert_int_equal (sigaction (SIGCHLD, &ign, &old), 0);
    zl_worker_result_t r;
    s_run ("echo nope >&2; exit 3", f->job, 1000, &r);
    sigaction (SIGCHLD, &old, NULL);
    assert_int_equal (r.outcome, ZL_WORKER_TRANSIENT);
    assert_string_equal (r.error, "nope (exit status 3)");
}

/*  A worker whose stdin and stderr are closed: the payload file and the
    stderr pipe may then get descriptors 0 and 2 themselves; the command
    still gets them as its stdin and stderr. */
static void
test_worker_stdio_closed (void **state)
{
    s_fixture_t *f = *state;
    int saved_in = dup (STDIN_FILENO), saved_err = dup (STDERR_FILENO);
    assert_true (saved_in > 2 && saved_err > 2);
    close (STDIN_FILENO);
    close (STDERR_FILENO);
    zl_worker_result_t r;
    s_run ("cat > \"$TEST_DIR/payload\"; echo oops >&2; exit 1", f->job, 1000, &r);
    dup2 (saved_in, STDIN_FILENO);
    dup2 (saved_err, STDERR_FILENO);
    close (saved_in);
    close (saved_err);
    assert_int_equal (r.outcome, ZL_WORKER_TRANSIENT);
    assert_string_equal (r.error, "oops (exit status 1)");
    size_t len;
    char *payload = s_slurp (f->dir, "payload", &len);
    assert_int_equal (len, f->job->len);
    assert_memory_equal (payload, f->job->payload, len);
    free (payload);
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

// ---------------------------------------------------------------- the worker dies

static int
s_pidfd (pid_t pid)
{
    int fd = (int)syscall (SYS_pidfd_open, pid, 0);
    assert_true (fd >= 0);
    return fd;
}

/*  Wait up to `timeout_ms` until every process of `pidfds` has exited. */
static bool
s_all_dead (const int *pidfds, size_t n, int timeout_ms)
{
    int64_t deadline = zl_clock_mono_ms () + timeout_ms;
    for (size_t i = 0; i < n; i++) {
        struct pollfd p = {pidfds[i], POLLIN, 0};
        int left = (int)(deadline - zl_clock_mono_ms ());
        if (poll (&p, 1, left > 0 ? left : 0) != 1)
            return false;
    }
    return true;
}

/*  SIGKILL every process of `pidfds` still alive, then reap each that is
    our child now (parents first: a process comes back to us, the
    subreaper, once its parent is gone). */
static void
s_kill_and_reap (const pid_t *pids, const int *pidfds, size_t n)
{
    for (size_t i = 0; i < n; i++)
        syscall (SYS_pidfd_send_signal, pidfds[i], SIGKILL, NULL, 0);
    for (size_t i = 0; i < n; i++) {
        struct pollfd p = {pidfds[i], POLLIN, 0};
        poll (&p, 1, S_WAIT_MS);
        waitpid (pids[i], NULL, 0); // ECHILD: someone else's child, reaped there
        close (pidfds[i]);
    }
}

/*  A pipe for the command to wait on with `read go <&"$GATE_FD"`: the read
    end is inherited (dash takes one-digit descriptors only), the write end
    stays the test's; a line written to it lets the command go on. */
static void
s_gate (int gate[2])
{
    assert_int_equal (pipe2 (gate, O_CLOEXEC), 0);
    assert_true (gate[0] < 10);
    assert_int_equal (fcntl (gate[0], F_SETFD, 0), 0);
    char text[16];
    snprintf (text, sizeof text, "%d", gate[0]);
    setenv ("GATE_FD", text, 1);
}

/*  A pipe whose write end the command inherits as SYNC_FD, to tell the
    test its pids. */
static void
s_sync (int sync[2])
{
    assert_int_equal (pipe (sync), 0);
    assert_true (sync[1] < 10);
    char text[16];
    snprintf (text, sizeof text, "%d", sync[1]);
    setenv ("SYNC_FD", text, 1);
}

/*  Read `n` numbers from one line on `fd` within S_WAIT_MS. Returns false
    on timeout or EOF. */
static bool
s_try_read_numbers (int fd, long *out, size_t n)
{
    char buf[128] = "";
    size_t got = 0;
    int64_t deadline = zl_clock_mono_ms () + S_WAIT_MS;
    while (!memchr (buf, '\n', got)) {
        struct pollfd p = {fd, POLLIN, 0};
        int left = (int)(deadline - zl_clock_mono_ms ());
        if (left <= 0 || poll (&p, 1, left) != 1)
            return false;
        ssize_t k = read (fd, buf + got, sizeof buf - 1 - got);
        if (k <= 0)
            return false;
        got += (size_t)k;
    }
    char *s = buf;
    for (size_t i = 0; i < n; i++)
        out[i] = strtol (s, &s, 10);
    return true;
}

/*  The handler runs in a forked child of the test (the "worker") on a job
    larger than a pipe holds; its command waits on a pipe before it reads
    stdin, with a background process in its group. The worker is SIGKILLed
    while the command waits: the command's guard, shell and background
    process must all die, and the command must never read its stdin. If it
    survives, the test lets it go on, to show what it would have read. */
static void
test_worker_killed_kills_group (void **state)
{
    s_fixture_t *f = *state;
    zl_worker_job_t *job = s_job_of_size (f->job, 1 << 20);
    char never[128];
    snprintf (never, sizeof never, "%s/never", f->dir);
    assert_int_equal (mkfifo (never, 0600), 0);
    int sync[2], gate[2];
    s_sync (sync);
    s_gate (gate);
    pid_t worker = fork ();
    assert_true (worker >= 0);
    if (worker == 0) {
        close (sync[0]);
        zl_worker_result_t r;
        s_run ("(read never < \"$TEST_DIR/never\") & echo \"$$ $PPID $!\" >&\"$SYNC_FD\"; "
               "read go <&\"$GATE_FD\"; cat > \"$TEST_DIR/seen\"",
               job, 1000, &r);
        _exit (0);
    }
    close (sync[1]);
    close (gate[0]);
    unsetenv ("SYNC_FD");
    unsetenv ("GATE_FD");
    long n[3]; // the shell, its parent (the guard), the background process
    bool started = s_try_read_numbers (sync[0], n, 3);
    close (sync[0]);
    if (!started) {
        kill (worker, SIGKILL);
        waitpid (worker, NULL, 0);
        close (gate[1]);
        zl_worker_job_destroy (&job);
        fail_msg ("the command did not start");
    }
    pid_t pids[3] = {(pid_t)n[1], (pid_t)n[0], (pid_t)n[2]}; // parents first
    size_t first = pids[0] == worker ? 1 : 0;                // no guard: the old design
    int pidfds[3] = {-1, -1, -1};
    for (size_t i = first; i < 3; i++)
        pidfds[i] = s_pidfd (pids[i]);

    assert_int_equal (kill (worker, SIGKILL), 0);
    int status;
    assert_int_equal (waitpid (worker, &status, 0), worker);
    bool dead = s_all_dead (pidfds + first, 3 - first, S_WAIT_MS);
    if (!dead) {
        // Let the survivor go on, and see what it makes of its stdin.
        ssize_t rc = write (gate[1], "go\n", 3);
        (void)rc;
        struct pollfd p = {pidfds[1], POLLIN, 0};
        poll (&p, 1, S_WAIT_MS); // the shell exits once cat is done
        char path[160];
        snprintf (path, sizeof path, "%s/seen", f->dir);
        struct stat st;
        long seen = stat (path, &st) == 0 ? (long)st.st_size : -1;
        s_kill_and_reap (pids + first, pidfds + first, 3 - first);
        close (gate[1]);
        zl_worker_job_destroy (&job);
        fail_msg ("the command outlived its SIGKILLed worker%s; let go, it read %ld of the "
                  "payload's %d bytes",
                  first ? " (it had no guard)" : "", seen, 1 << 20);
    }
    s_kill_and_reap (pids + first, pidfds + first, 3 - first);
    close (gate[1]);
    assert_int_equal (kill (-pids[0], 0), -1); // the group is gone
    assert_int_equal (errno, ESRCH);
    char path[160];
    snprintf (path, sizeof path, "%s/seen", f->dir);
    assert_int_not_equal (access (path, F_OK), 0); // it never went on
    zl_worker_job_destroy (&job);
}

/*  A guard killed from outside takes the command's shell with it (the
    shell's parent-death signal), and the job fails TRANSIENT with the
    status unknown. */
static void
test_guard_killed (void **state)
{
    s_fixture_t *f = *state;
    char never[128];
    snprintf (never, sizeof never, "%s/never", f->dir);
    assert_int_equal (mkfifo (never, 0600), 0);
    s_async_t a = {.command = "echo $$ >&\"$SYNC_FD\"; [ \"$PPID\" != \"$TEST_PID\" ] || exit 99; "
                              "kill -KILL $PPID; read x < \"$TEST_DIR/never\"",
                   .job = f->job,
                   .grace_ms = 1000};
    int sync[2];
    assert_int_equal (pipe (sync), 0);
    char fd_text[16];
    snprintf (fd_text, sizeof fd_text, "%d", sync[1]);
    setenv ("SYNC_FD", fd_text, 1);
    char pid_text[16];
    snprintf (pid_text, sizeof pid_text, "%d", (int)getpid ());
    setenv ("TEST_PID", pid_text, 1); // no guard: the shell's parent would be us
    a.done_fd = eventfd (0, EFD_CLOEXEC);
    pthread_t thread;
    assert_int_equal (pthread_create (&thread, NULL, s_async_thread, &a), 0);
    pid_t sh = (pid_t)s_read_pid (sync[0]);
    int sh_fd = s_pidfd (sh);
    struct pollfd p = {a.done_fd, POLLIN, 0};
    bool done = poll (&p, 1, S_WAIT_MS) == 1;
    if (!done)
        syscall (SYS_pidfd_send_signal, sh_fd, SIGKILL, NULL, 0); // let the handler return
    pthread_join (thread, NULL);
    close (a.done_fd);
    close (sync[0]);
    close (sync[1]);
    unsetenv ("SYNC_FD");
    unsetenv ("TEST_PID");
    assert_true (s_all_dead (&sh_fd, 1, S_WAIT_MS));
    waitpid (sh, NULL, 0); // ours now (subreaper)
    close (sh_fd);
    assert_true (done);
    assert_int_equal (a.result.outcome, ZL_WORKER_TRANSIENT);
    assert_string_equal (a.result.error, "exit status unknown");
}

typedef struct {
    const char *command;
    const zl_worker_job_t *job;
    zl_worker_result_t result;
} s_bg_run_t;

static void *
s_bg_thread (void *arg)
{
    s_bg_run_t *b = arg;
    s_run (b->command, b->job, 1000, &b->result);
    return NULL;
}

/*  A file's identity, to tell descriptors apart across processes. */
typedef struct {
    dev_t dev;
    ino_t ino;
} s_file_id_t;

/*  Collect the pipes and regular files (memfds included) open in process
    `pid` (0: ours) into `ids` (at most `cap`); for ours, only those open
    with close-on-exec (cloexec 1) or without (cloexec 0), -1: all. Returns
    how many. A pipe is one file for both its ends. */
static size_t
s_open_files (pid_t pid, int cloexec, s_file_id_t *ids, size_t cap)
{
    char dir[64];
    snprintf (dir, sizeof dir, pid ? "/proc/%d/fd" : "/proc/self/fd", (int)pid);
    DIR *d = opendir (dir);
    assert_non_null (d);
    int skip = dirfd (d);
    size_t n = 0;
    for (struct dirent *e; (e = readdir (d));) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        int fd = atoi (e->d_name);
        if (!pid && fd == skip)
            continue;
        if (!pid && cloexec >= 0) {
            int flags = fcntl (fd, F_GETFD);
            if (flags < 0 || !!(flags & FD_CLOEXEC) != cloexec)
                continue;
        }
        char path[128];
        snprintf (path, sizeof path, "%s/%d", dir, fd);
        struct stat st;
        if (stat (path, &st) != 0 || !(S_ISFIFO (st.st_mode) || S_ISREG (st.st_mode)))
            continue;
        assert_true (n < cap);
        ids[n++] = (s_file_id_t){st.st_dev, st.st_ino};
    }
    closedir (d);
    return n;
}

static bool
s_has_file (const s_file_id_t *ids, size_t n, s_file_id_t id)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i].dev == id.dev && ids[i].ino == id.ino)
            return true;
    return false;
}

static s_file_id_t
s_file_of (int fd)
{
    struct stat st;
    assert_int_equal (fstat (fd, &st), 0);
    return (s_file_id_t){st.st_dev, st.st_ino};
}

/*  While job A runs, job B's guard (and B's command) holds none of the
    worker's close-on-exec files, job A's lifeline among them: the guard
    is exec'd, and the exec closed them. B's command still gets what the
    worker holds without close-on-exec, as posix_spawn gave. */
static void
test_guard_holds_only_its_own (void **state)
{
    s_fixture_t *f = *state;
    int sync[2], gate[2], secret[2], shared[2];
    s_sync (sync); // first: their numbers must stay below 10 (dash)
    s_gate (gate);
    assert_int_equal (pipe2 (secret, O_CLOEXEC), 0); // the worker's own
    assert_int_equal (pipe (shared), 0);             // meant to be inherited
    close (secret[0]);
    close (shared[0]);

    s_bg_run_t a = {.command = "echo \"$$ $PPID\" >&\"$SYNC_FD\"; read go <&\"$GATE_FD\"",
                    .job = f->job};
    s_bg_run_t b = a;
    pthread_t thread_a, thread_b;
    assert_int_equal (pthread_create (&thread_a, NULL, s_bg_thread, &a), 0);
    long pids_a[2];
    bool a_started = s_try_read_numbers (sync[0], pids_a, 2);

    // Job A's lifeline and the rest are open here now, close-on-exec: the
    // worker's own files are those with no end open without close-on-exec.
    enum { CAP = 256 };
    s_file_id_t own[CAP], passed[CAP], held[CAP], cmd[CAP];
    size_t n_own = s_open_files (0, 1, own, CAP), n_passed = s_open_files (0, 0, passed, CAP);
    for (size_t i = 0; i < n_own;)
        if (s_has_file (passed, n_passed, own[i]))
            own[i] = own[--n_own];
        else
            i++;
    size_t n_guard = 0, n_cmd = 0;
    long pids_b[2] = {0, 0}; // B's shell and its parent, the guard
    bool b_started = false;
    if (a_started) {
        assert_int_equal (pthread_create (&thread_b, NULL, s_bg_thread, &b), 0);
        b_started = s_try_read_numbers (sync[0], pids_b, 2);
        if (b_started) {
            n_guard = s_open_files ((pid_t)pids_b[1], -1, held, CAP);
            n_cmd = s_open_files ((pid_t)pids_b[0], -1, cmd, CAP);
        }
    }
    ssize_t rc = write (gate[1], "go\ngo\n", 6); // one line each: let them end
    (void)rc;
    pthread_join (thread_a, NULL);
    if (a_started)
        pthread_join (thread_b, NULL);
    unsetenv ("GATE_FD");
    unsetenv ("SYNC_FD");
    assert_true (a_started && b_started);
    assert_int_equal (a.result.outcome, ZL_WORKER_ACK);
    assert_int_equal (b.result.outcome, ZL_WORKER_ACK);

    size_t leaked = 0;
    for (size_t i = 0; i < n_guard; i++)
        leaked += s_has_file (own, n_own, held[i]);
    if (leaked)
        fail_msg ("job B's guard (pid %ld) holds %zu of the worker's close-on-exec files",
                  pids_b[1], leaked);
    for (size_t i = 0; i < n_cmd; i++)
        assert_false (s_has_file (own, n_own, cmd[i]));
    assert_true (s_has_file (own, n_own, s_file_of (secret[1]))); // the check sees ours
    assert_true (s_has_file (cmd, n_cmd, s_file_of (shared[1]))); // inherited
    int fds[] = {sync[0], sync[1], gate[0], gate[1], secret[1], shared[1]};
    for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
        close (fds[i]);
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
        cmocka_unit_test_setup_teardown (test_exit_79_not_yet, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_exit_other_transient, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_signal_transient, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_stderr_tail, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_big_payload_and_epipe, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_payload_whole_before_start, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_stderr_made_valid_text, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_group_signal_reported, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_start_failure_reported, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_sigchld_ignored, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_worker_stdio_closed, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_cancel_kills_group, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_cancel_escalates_to_sigkill, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_worker_killed_kills_group, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_guard_holds_only_its_own, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_guard_killed, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_cancelled_before_start, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_no_command, s_setup, s_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
