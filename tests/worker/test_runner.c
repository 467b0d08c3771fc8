/*  test_runner: the zlane-worker executable against a fake broker.
    The runner is spawned with --exec 'read -r line; eval "$line"', so each
    job's payload is the shell line it runs. The test reads the runner's
    stdout (where job output goes) from a pipe to know when a job runs, and
    waits for the runner's exit through a pidfd; every wait is bounded and
    the runner is killed by pid if a test fails. */
#define _GNU_SOURCE
#include "clock.h"
#include "codec.h"
#include "wire.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <czmq.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#define S_WAIT_MS 5000

extern char **environ;

typedef struct {
    zsock_t *router;
    char endpoint[128];
    zl_codec_t *codec;
    zl_peer_t peer;
    zl_msg_t msg;
    pid_t pid;      // the runner, -1 when none
    int pidfd;      // readable once it exited
    int out_fd;     // the runner's stdout
    char out[4096]; // what it printed so far
    size_t out_n;
} s_fixture_t;

static char *
s_runner_path (void)
{
    static char path[4096];
    const char *dir = getenv ("ZLANE_BIN_DIR");
    if (dir)
        snprintf (path, sizeof path, "%s/zlane-worker", dir);
    else {
        // Next to this test executable (both land in the build's bin/).
        char self[4096];
        ssize_t n = readlink ("/proc/self/exe", self, sizeof self - 1);
        assert_true (n > 0);
        self[n] = '\0';
        snprintf (path, sizeof path, "%s/zlane-worker", dirname (self));
    }
    return path;
}

static int
s_setup (void **state)
{
    s_fixture_t *f = calloc (1, sizeof *f);
    f->router = zsock_new (ZMQ_ROUTER);
    zsock_set_linger (f->router, 0);
    assert_true (zsock_bind (f->router, "tcp://127.0.0.1:*") >= 0);
    char *last = zsock_last_endpoint (f->router);
    snprintf (f->endpoint, sizeof f->endpoint, "%s", last);
    zstr_free (&last);
    f->codec = zl_codec_new ();
    f->pid = -1;
    f->pidfd = f->out_fd = -1;
    *state = f;
    return 0;
}

/*  Spawn the runner with `argv` (after the program name), stdout on a pipe. */
static void
s_spawn (s_fixture_t *f, const char *const *args)
{
    const char *argv[32] = {s_runner_path ()};
    size_t n = 1;
    for (; args[n - 1]; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    int out[2];
    assert_int_equal (pipe2 (out, O_CLOEXEC), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init (&fa);
    posix_spawn_file_actions_adddup2 (&fa, out[1], STDOUT_FILENO);
    assert_int_equal (posix_spawn (&f->pid, argv[0], &fa, NULL, (char *const *)argv, environ), 0);
    posix_spawn_file_actions_destroy (&fa);
    close (out[1]);
    f->out_fd = out[0];
    f->pidfd = (int)syscall (SYS_pidfd_open, f->pid, 0);
    assert_true (f->pidfd >= 0);
}

/*  Wait up to `timeout_ms` for the runner to exit; returns its exit code
    (128 + signal if killed), or -1 on timeout. */
static int
s_wait_exit (s_fixture_t *f, int timeout_ms)
{
    struct pollfd p = {f->pidfd, POLLIN, 0};
    if (poll (&p, 1, timeout_ms) != 1)
        return -1;
    int status;
    assert_int_equal (waitpid (f->pid, &status, 0), f->pid);
    f->pid = -1;
    return WIFEXITED (status) ? WEXITSTATUS (status) : 128 + WTERMSIG (status);
}

static int
s_teardown (void **state)
{
    s_fixture_t *f = *state;
    if (f->pid > 0) {
        kill (f->pid, SIGTERM);
        kill (f->pid, SIGTERM); // the second one cancels running jobs
        if (s_wait_exit (f, S_WAIT_MS) < 0) {
            kill (f->pid, SIGKILL);
            waitpid (f->pid, NULL, 0);
        }
    }
    if (f->pidfd >= 0)
        close (f->pidfd);
    if (f->out_fd >= 0)
        close (f->out_fd);
    zsock_destroy (&f->router);
    zl_codec_destroy (&f->codec);
    free (f);
    return 0;
}

/*  Wait until the runner's stdout contains `text`. */
static void
s_expect_output (s_fixture_t *f, const char *text)
{
    int64_t deadline = zl_clock_mono_ms () + S_WAIT_MS;
    while (!memmem (f->out, f->out_n, text, strlen (text))) {
        struct pollfd p = {f->out_fd, POLLIN, 0};
        int left = (int)(deadline - zl_clock_mono_ms ());
        if (left <= 0 || poll (&p, 1, left) != 1)
            fail_msg ("runner never printed '%s' (got '%.*s')", text, (int)f->out_n, f->out);
        ssize_t n = read (f->out_fd, f->out + f->out_n, sizeof f->out - 1 - f->out_n);
        assert_true (n > 0);
        f->out_n += (size_t)n;
    }
}

/*  Wait for a message of `kind` from the runner, skipping others. */
static void
s_expect (s_fixture_t *f, zl_msg_kind_t kind)
{
    void *sock = zsock_resolve (f->router);
    int64_t deadline = zl_clock_mono_ms () + S_WAIT_MS;
    for (;;) {
        zmq_pollitem_t it = {sock, 0, ZMQ_POLLIN, 0};
        int left = (int)(deadline - zl_clock_mono_ms ());
        if (left <= 0 || zmq_poll (&it, 1, left) != 1)
            fail_msg ("no %s from the runner", zl_msg_kind_name (kind));
        zmq_msg_t id, body;
        zmq_msg_init (&id);
        zmq_msg_init (&body);
        assert_true (zmq_msg_recv (&id, sock, 0) >= 0);
        assert_true (zmq_msg_recv (&body, sock, 0) >= 0);
        f->peer.len = (uint8_t)zmq_msg_size (&id);
        memcpy (f->peer.data, zmq_msg_data (&id), f->peer.len);
        zl_decode_rc_t rc =
            zl_codec_decode (f->codec, zmq_msg_data (&body), zmq_msg_size (&body), &f->msg);
        zmq_msg_close (&id);
        zmq_msg_close (&body);
        assert_int_equal (rc, ZL_DECODE_OK);
        if (f->msg.kind == kind)
            return;
    }
}

static void
s_send (s_fixture_t *f, const zl_msg_t *msg)
{
    assert_int_equal (zl_wire_send_to (zsock_resolve (f->router), &f->peer, f->codec, msg), 0);
}

static void
s_dispatch (s_fixture_t *f, uint64_t job_id, const char *line)
{
    zl_header_t h = {"trace-id", "t-1"};
    zl_job_msg_t job = {.job_id = job_id,
                        .lease = 1000 + job_id,
                        .attempt = 1,
                        .tenant = "acme",
                        .lane = "emails",
                        .payload = {(const uint8_t *)line, strlen (line)},
                        .idempotency_key = "key",
                        .n_headers = 1,
                        .headers = &h,
                        .lease_ms = 30000,
                        .max_attempts = 3};
    zl_msg_t m = {.kind = ZL_MSG_DISPATCH, .u.dispatch = {1, &job}};
    s_send (f, &m);
}

static void
s_settle (s_fixture_t *f, uint64_t job_id)
{
    zl_lease_ref_t ref = {job_id, 1000 + job_id};
    zl_msg_t m = {.kind = ZL_MSG_SETTLED, .u.settled = {1, &ref}};
    s_send (f, &m);
}

static void
s_start_runner (s_fixture_t *f, const char *kill_grace)
{
    const char *args[] = {"--broker",
                          f->endpoint,
                          "--lanes",
                          "emails,reports",
                          "--exec",
                          "read -r line; eval \"$line\"",
                          "--name",
                          "rt",
                          "--heartbeat",
                          "200ms",
                          "--kill-grace",
                          kill_grace,
                          NULL};
    s_spawn (f, args);
    s_expect (f, ZL_MSG_READY);
    assert_string_equal (f->msg.u.ready.name, "rt");
    assert_int_equal (f->msg.u.ready.n_lanes, 2);
    assert_string_equal (f->msg.u.ready.lanes[1], "reports");
    assert_int_equal (f->msg.u.ready.capacity, 1);
}

// ---------------------------------------------------------------- tests

static void
test_help_and_usage (void **state)
{
    s_fixture_t *f = *state;
    const char *help[] = {"--help", NULL};
    s_spawn (f, help);
    assert_int_equal (s_wait_exit (f, S_WAIT_MS), 0);
    s_expect_output (f, "EX_TEMPFAIL");
    const char *flags[] = {"--broker",     "--lanes",      "--exec",       "--concurrency",
                           "--prefetch",   "--name",       "--heartbeat",  "--liveness",
                           "--no-extend",  "--ack-early",  "--kill-grace", "--verbose",
                           "retry-after=", "ZLANE_HEADER_"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        s_expect_output (f, flags[i]);
    close (f->out_fd);
    close (f->pidfd);
    f->out_fd = f->pidfd = -1;
    f->out_n = 0;

    const char *bad[] = {"--lanes", "a", "--exec", "true", "--concurrency", "zero", NULL};
    s_spawn (f, bad);
    assert_int_equal (s_wait_exit (f, S_WAIT_MS), 2);
}

/*  Exit codes become Ack / PERMANENT / THROTTLED / TRANSIENT; the job's
    environment reaches the command; stdout is the runner's. */
static void
test_outcomes (void **state)
{
    s_fixture_t *f = *state;
    s_start_runner (f, "2s");

    s_dispatch (f, 1,
                "echo \"job=$ZLANE_JOB_ID trace=$ZLANE_HEADER_TRACE_ID worker=$ZLANE_WORKER\"");
    s_expect (f, ZL_MSG_ACK);
    assert_int_equal (f->msg.u.ack.items[0].job_id, 1);
    assert_int_equal (f->msg.u.ack.items[0].lease, 1001);
    s_settle (f, 1);
    s_expect_output (f, "job=1 trace=t-1 worker=rt");

    s_dispatch (f, 2, "echo 'no such customer' >&2; exit 65");
    s_expect (f, ZL_MSG_NACK);
    assert_int_equal (f->msg.u.nack.items[0].cls, ZL_FAIL_PERMANENT);
    assert_string_equal (f->msg.u.nack.items[0].error, "no such customer (exit status 65)");
    s_settle (f, 2);

    s_dispatch (f, 3, "echo retry-after=3s >&2; exit 75");
    s_expect (f, ZL_MSG_NACK);
    assert_int_equal (f->msg.u.nack.items[0].cls, ZL_FAIL_THROTTLED);
    assert_int_equal (f->msg.u.nack.items[0].retry_after_ms, 3000);
    s_settle (f, 3);

    s_dispatch (f, 4, "exit 9");
    s_expect (f, ZL_MSG_NACK);
    assert_int_equal (f->msg.u.nack.items[0].cls, ZL_FAIL_TRANSIENT);
    assert_string_equal (f->msg.u.nack.items[0].error, "exit status 9");
    s_settle (f, 4);

    assert_int_equal (kill (f->pid, SIGTERM), 0);
    assert_int_equal (s_wait_exit (f, S_WAIT_MS), 0);
}

/*  SIGTERM lets a running job finish and be settled before the exit. */
static void
test_sigterm_drains (void **state)
{
    s_fixture_t *f = *state;
    s_start_runner (f, "5s");
    s_dispatch (f, 5, "echo started; sleep 0.3; echo finished");
    s_expect_output (f, "started");
    assert_int_equal (kill (f->pid, SIGTERM), 0);
    s_expect (f, ZL_MSG_ACK);
    assert_int_equal (f->msg.u.ack.items[0].job_id, 5);
    s_expect_output (f, "finished");
    s_settle (f, 5);
    assert_int_equal (s_wait_exit (f, S_WAIT_MS), 0);
}

/*  A job still running when the grace runs out is killed and reported. */
static void
test_sigterm_kills_after_grace (void **state)
{
    s_fixture_t *f = *state;
    s_start_runner (f, "300ms");
    s_dispatch (f, 6, "echo started; exec sleep 30");
    s_expect_output (f, "started");
    int64_t t0 = zl_clock_mono_ms ();
    assert_int_equal (kill (f->pid, SIGTERM), 0);
    s_expect (f, ZL_MSG_NACK);
    assert_true (zl_clock_mono_ms () - t0 >= 300);
    assert_int_equal (f->msg.u.nack.items[0].job_id, 6);
    assert_int_equal (f->msg.u.nack.items[0].cls, ZL_FAIL_TRANSIENT);
    assert_string_equal (f->msg.u.nack.items[0].error,
                         "worker shutting down (killed by signal 15)");
    s_settle (f, 6);
    assert_int_equal (s_wait_exit (f, S_WAIT_MS), 0);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown (test_help_and_usage, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_outcomes, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_sigterm_drains, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_sigterm_kills_after_grace, s_setup, s_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
