/*  test_exec_death: a zlane-worker --exec SIGKILLed between starting a
    job's command and the command reading its payload (issue 11, item 10).
    A real broker, two real workers in turn and zlane-submit with a payload
    of a megabyte, far more than a pipe holds. The command tells the test
    it started (a file), then waits for a line on a FIFO that the test
    writes only when it wants, and only then reads stdin and records what
    it read. The test
    kills worker 1 while its command waits: the command (its shell, its
    group leader and a background process of its group) must die with the
    worker, bounded in time, and never record anything; the broker gives
    the job to worker 2, whose command reads the whole payload. Should the
    first command survive, the test lets it go on and reports how much of
    the payload it would have run with.

    The test is a child subreaper: processes orphaned by the killed worker
    come back to it and are reaped by pid; every process it learns of is
    held by a pidfd and SIGKILLed at the end if still there. */
#define _GNU_SOURCE
#include "zltest.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#define HEARTBEAT "200ms"         // broker and workers: a silent worker is dead after 600 ms
#define PAYLOAD_LEN (1024 * 1024) // the broker's default max payload
#define WAIT_MS 10000             // anything that should happen soon
#define DEATH_MS 5000             // the command's group dies with its worker

// The command: opens its gate (a FIFO, read-write so that the open does
// not block and the test can write to it at once), tells the test it
// started (its pid, its parent's, its process group and its background
// process) and waits for a line at the gate; then reads stdin and records
// it.
static const char s_script[] = "d=\"$1\"; a=\"$ZLANE_ATTEMPT\"; bg=0\n"
                               "if [ \"$a\" = 1 ]; then (read never < \"$d/never\") & bg=$!; fi\n"
                               "read -r _ _ _ _ pgid _ < /proc/$$/stat\n"
                               "exec 3<> \"$d/gate.$a\"\n"
                               "printf '%s\\n%s\\n' \"$ZLANE_RESULT_FILE\" \"$ZLANE_CHECKPOINT\" > "
                               "\"$d/files.$a\"\n"
                               "echo \"$$ $PPID $pgid $bg\" > \"$d/started.$a.tmp\" && mv "
                               "\"$d/started.$a.tmp\" \"$d/started.$a\"\n"
                               "read go <&3\n"
                               "cat > \"$d/seen.$a.tmp\" && mv \"$d/seen.$a.tmp\" \"$d/seen.$a\"\n";

/*  Processes the test learned of, to kill and reap by pid at the end. */
typedef struct {
    pid_t pid[8];
    int pidfd[8];
    size_t n;
} s_procs_t;

static s_procs_t s_procs;

/*  Hold `pid` by a pidfd (it is alive: it waits at a FIFO). Returns the
    pidfd. */
static int
s_hold (pid_t pid)
{
    int fd = (int)syscall (SYS_pidfd_open, pid, 0);
    assert_true (fd >= 0);
    assert_true (s_procs.n < 8);
    s_procs.pid[s_procs.n] = pid;
    s_procs.pidfd[s_procs.n++] = fd;
    return fd;
}

static bool
s_dead (int pidfd, int timeout_ms)
{
    struct pollfd p = {pidfd, POLLIN, 0};
    return poll (&p, 1, timeout_ms) == 1;
}

/*  SIGKILL what is left, then reap it, in the order learned (parents
    first: an orphan comes back to us once its parent is gone). */
static void
s_procs_cleanup (void)
{
    for (size_t i = 0; i < s_procs.n; i++)
        syscall (SYS_pidfd_send_signal, s_procs.pidfd[i], SIGKILL, NULL, 0);
    for (size_t i = 0; i < s_procs.n; i++) {
        s_dead (s_procs.pidfd[i], 5000);
        waitpid (s_procs.pid[i], NULL, 0); // ECHILD: not ours, reaped elsewhere
        close (s_procs.pidfd[i]);
    }
    s_procs.n = 0;
}

static int
s_teardown (void **state)
{
    s_procs_cleanup ();
    return zlt_teardown (state);
}

/*  Start zlane-worker `name` serving lane a with `cmd`, and wait until the
    broker counted `ready_total` Ready messages. */
static zlt_proc_t *
s_worker (zlt_broker_t *broker, zlt_client_t *admin, const char *name, const char *cmd,
          uint64_t ready_total)
{
    char *bin = zlt_bin ("zlane-worker");
    char err_name[32];
    snprintf (err_name, sizeof err_name, "%s.err", name);
    char *err = zlt_path (zlt_broker_dir (broker), err_name);
    const char *argv[] = {bin,           "--broker", zlt_broker_endpoint (broker, "backend"),
                          "--lanes",     "a",        "--exec",
                          cmd,           "--name",   name,
                          "--heartbeat", HEARTBEAT,  "--liveness",
                          "3",           NULL};
    zlt_proc_t *w = zlt_spawn (argv, NULL, NULL, err);
    assert_non_null (w);
    if (zlt_wait_counter (admin, "workers_ready", ready_total, WAIT_MS) != 0) {
        zlt_dump_file ("zlane-worker stderr", err, 3000);
        fail_msg ("%s did not say Ready", name);
    }
    free (err);
    free (bin);
    return w;
}

/*  Wait for started.<attempt> and parse "pid ppid pgid bg" from it. */
static void
s_started (const char *dir, int attempt, long out[4])
{
    char name[32];
    snprintf (name, sizeof name, "started.%d", attempt);
    char *path = zlt_path (dir, name);
    if (zlt_wait_file_has (path, "\n", WAIT_MS) != 0)
        fail_msg ("attempt %d's command never started", attempt);
    char *text = zlt_read_file (path, NULL);
    assert_non_null (text);
    assert_int_equal (sscanf (text, "%ld %ld %ld %ld", &out[0], &out[1], &out[2], &out[3]), 4);
    free (text);
    free (path);
}

/*  Let attempt `attempt`'s command past its gate. Returns false if no one
    waits there (the FIFO has no reader). */
static bool
s_open_gate (const char *dir, int attempt)
{
    char name[32];
    snprintf (name, sizeof name, "gate.%d", attempt);
    char *path = zlt_path (dir, name);
    int fd = open (path, O_WRONLY | O_NONBLOCK);
    free (path);
    if (fd < 0)
        return false;
    ssize_t n = write (fd, "go\n", 3);
    close (fd);
    return n == 3;
}

static void
s_mkfifo (const char *dir, const char *name)
{
    char *path = zlt_path (dir, name);
    assert_int_equal (mkfifo (path, 0600), 0);
    free (path);
}

static void
test_worker_killed_before_its_command_reads (void **state)
{
    (void)state;
    const char *args[] = {"--lane", "a", "--heartbeat", HEARTBEAT, "--liveness", "3", NULL};
    zlt_broker_t *broker = zlt_broker_start (args);
    assert_non_null (broker);
    const char *dir = zlt_broker_dir (broker);
    zlt_client_t *admin = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (broker, "admin"));
    assert_non_null (admin);

    uint8_t *payload = malloc (PAYLOAD_LEN);
    for (size_t i = 0; i < PAYLOAD_LEN; i++)
        payload[i] = (uint8_t)(i * 131 + (i >> 12)); // every byte value, no period of 2^k
    char *payload_path = zlt_path (dir, "payload");
    assert_int_equal (zlt_write_file (payload_path, payload, PAYLOAD_LEN), 0);
    char *script = zlt_path (dir, "cmd.sh");
    assert_int_equal (zlt_write_file (script, s_script, sizeof s_script - 1), 0);
    s_mkfifo (dir, "gate.1");
    s_mkfifo (dir, "gate.2");
    s_mkfifo (dir, "never");
    char *cmd;
    assert_true (asprintf (&cmd, "sh '%s' '%s'", script, dir) > 0);

    zlt_proc_t *w1 = s_worker (broker, admin, "worker-1", cmd, 1);
    char *submit = zlt_bin ("zlane-submit");
    char *submit_out = zlt_path (dir, "submit.out"), *submit_err = zlt_path (dir, "submit.err");
    const char *submit_argv[] = {submit,     "--broker", zlt_broker_endpoint (broker, "frontend"),
                                 "--tenant", "acme",     "--lane",
                                 "a",        "--file",   payload_path,
                                 NULL};
    if (zlt_run (submit_argv, NULL, submit_out, submit_err, WAIT_MS) != 0) {
        zlt_dump_file ("zlane-submit stderr", submit_err, 2000);
        fail_msg ("zlane-submit failed");
    }

    // Attempt 1 started and waits at its gate, its payload unread.
    long first[4];
    s_started (dir, 1, first);
    pid_t sh_pid = (pid_t)first[0], parent = (pid_t)first[1], group = (pid_t)first[2];
    pid_t bg = (pid_t)first[3];
    assert_true (sh_pid > 0 && parent > 0 && group > 0 && bg > 0);
    // Parents first: the group's leader, the outer shell (sh -c) if the
    // script's shell is not it, the script's shell, its background process.
    int group_fd = group != sh_pid ? s_hold (group) : -1;
    int parent_fd = parent != group && parent != zlt_proc_pid (w1) ? s_hold (parent) : -1;
    int sh_fd = s_hold (sh_pid);
    int bg_fd = s_hold (bg);

    // SIGKILL worker 1 alone (not its process group).
    assert_int_equal (kill (zlt_proc_pid (w1), SIGKILL), 0);
    assert_int_equal (zlt_proc_wait (w1, WAIT_MS), 0);
    int64_t t_kill = zlt_now_ms ();
    bool died = s_dead (sh_fd, DEATH_MS) && s_dead (bg_fd, DEATH_MS) &&
                (group_fd < 0 || s_dead (group_fd, DEATH_MS)) &&
                (parent_fd < 0 || s_dead (parent_fd, DEATH_MS));
    if (!died) {
        // The bug: let it go on and see what it runs with.
        bool waiting = s_open_gate (dir, 1);
        char *seen_path = zlt_path (dir, "seen.1");
        long seen = -1;
        if (waiting && zlt_wait_file_has (seen_path, "", WAIT_MS) == 0) {
            struct stat st;
            seen = stat (seen_path, &st) == 0 ? (long)st.st_size : -1;
        }
        free (seen_path);
        fail_msg ("the command outlived its SIGKILLed worker by %d ms; let go, it ran with %ld "
                  "of the payload's %d bytes",
                  DEATH_MS, seen, PAYLOAD_LEN);
    }
    fprintf (stderr, "  the command's group died %" PRId64 " ms after its worker\n",
             zlt_now_ms () - t_kill);
    s_procs_cleanup (); // reaped
    // A child the script had not reaped yet (the mv that told us it
    // started may still be a zombie when its shell is killed) came back
    // to us, unknown by pid: reap what of the group is ours.
    while (waitpid (-group, NULL, WNOHANG) > 0)
        ;
    errno = 0;
    assert_int_equal (kill (-group, 0), -1); // no process of the group is left
    assert_int_equal (errno, ESRCH);
    // The files the worker made for attempt 1 went with it (its guard
    // removed them): a SIGKILLed worker leaves nothing in $TMPDIR.
    char *files1 = zlt_path (dir, "files.1");
    char *names = zlt_read_file (files1, NULL);
    assert_non_null (names);
    char *result_file = strtok (names, "\n"), *ckpt_file = strtok (NULL, "\n");
    assert_non_null (result_file);
    assert_non_null (ckpt_file);
    if (access (result_file, F_OK) == 0 || access (ckpt_file, F_OK) == 0)
        fail_msg ("the killed worker's job files are still there: %s, %s", result_file, ckpt_file);
    free (names);
    free (files1);
    char *seen1 = zlt_path (dir, "seen.1");
    assert_int_not_equal (access (seen1, F_OK), 0); // it never went on
    assert_false (s_open_gate (dir, 1));            // nobody waits at its gate
    free (seen1);

    // Worker 2 gets the job back and its command reads all of the payload.
    zlt_proc_t *w2 = s_worker (broker, admin, "worker-2", cmd, 2);
    (void)w2; // the harness stops it
    long second[4];
    s_started (dir, 2, second);
    assert_true (s_open_gate (dir, 2));
    char *seen2 = zlt_path (dir, "seen.2");
    if (zlt_wait_file_has (seen2, "", WAIT_MS) != 0)
        fail_msg ("attempt 2 never recorded its stdin");
    size_t len;
    char *got = zlt_read_file (seen2, &len);
    assert_non_null (got);
    assert_int_equal (len, PAYLOAD_LEN);
    assert_memory_equal (got, payload, PAYLOAD_LEN);
    if (zlt_wait_counter (admin, "jobs_acked", 1, WAIT_MS) != 0)
        fail_msg ("attempt 2 was not acked");
    assert_int_equal (zlt_counter (admin, "jobs_acked"), 1);
    char *seen1_again = zlt_path (dir, "seen.1");
    assert_int_not_equal (access (seen1_again, F_OK), 0);

    free (seen1_again);
    free (got);
    free (seen2);
    free (submit_out);
    free (submit_err);
    free (submit);
    free (cmd);
    free (script);
    free (payload_path);
    free (payload);
}

int
main (void)
{
    // The killed worker's orphans come back to us, to be reaped by pid.
    prctl (PR_SET_CHILD_SUBREAPER, 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown (test_worker_killed_before_its_command_reads, s_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
