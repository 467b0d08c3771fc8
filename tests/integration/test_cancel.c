/*  test_cancel: cancellation across real processes (issue 15, item 4).

    1. A real broker and a real zlane-worker --exec (kill grace 1 s). The
       job's command starts a background child and sleeps; both ignore
       SIGTERM, so the group dies only by the SIGKILL after the grace.
       `zlane-ctl cancel ID` while it runs: it says the job was cancelled
       (it was leased), the command's whole process group is gone within
       the grace (checked by pid), the worker's late settlement is refused
       CANCELLED (err_cancelled), nothing is acked or retried. Then the
       broker is SIGKILLed and restarted: the job is still cancelled
       (zlane-ctl cancel says "already cancelled"), and it is not
       redelivered: a job submitted after the restart runs and is acked,
       and the cancelled one never starts again.
    2. The protocol by hand, as another language's worker would see it: a
       raw worker gets Cancel with its lease, its late Ack and Extend get
       Error{CANCELLED}; a Cancel sent by a worker is refused UNKNOWN_KIND;
       a CancelRequest of no ids is refused INVALID; unknown and finished
       ids are answered as such, per id.

    3. A deadline (issue 16): a job submitted with zlane-submit --max-age
       1s to a raw worker that holds it: when the deadline passes the
       worker gets Cancel with its lease, its late Ack is refused, and the
       job is a dead letter with outcome expired (zlane-ctl job show).

    The test is a child subreaper: the command's processes are held by
    pidfds and reaped by pid. */
#define _GNU_SOURCE
#include "zltest.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#define HEARTBEAT "200ms"
#define KILL_GRACE_MS 1000
#define WAIT_MS 10000
#define DEATH_MS (KILL_GRACE_MS + 4000) // the grace, plus scheduling slack on a busy host

// The command: job payload "long" starts a background child and then
// sleeps, both deaf to SIGTERM, after writing "pid pgid bgpid" to
// started.<job>.<attempt>; any other payload records ran.<job> and exits 0.
static const char s_script[] =
    "d=\"$1\"; j=\"$ZLANE_JOB_ID\"; a=\"$ZLANE_ATTEMPT\"\n"
    "p=$(cat)\n"
    "if [ \"$p\" != long ]; then echo ok > \"$d/ran.$j\"; exit 0; fi\n"
    "trap '' TERM\n"
    "sleep 300 & bg=$!\n"
    "read -r _ _ _ _ pgid _ < /proc/$$/stat\n"
    "echo \"$$ $pgid $bg\" > \"$d/started.$j.$a.tmp\" && mv \"$d/started.$j.$a.tmp\" "
    "\"$d/started.$j.$a\"\n"
    "sleep 300\n"
    "echo late > \"$d/finished.$j\"\n";

typedef struct {
    pid_t pid[4];
    int fd[4];
    size_t n;
} s_procs_t;

static s_procs_t s_procs;

static int
s_hold (pid_t pid)
{
    int fd = (int)syscall (SYS_pidfd_open, pid, 0);
    assert_true (fd >= 0);
    assert_true (s_procs.n < 4);
    s_procs.pid[s_procs.n] = pid;
    s_procs.fd[s_procs.n++] = fd;
    return fd;
}

static bool
s_dead_by (int pidfd, int64_t deadline)
{
    int64_t left = deadline - zlt_now_ms ();
    struct pollfd p = {pidfd, POLLIN, 0};
    return poll (&p, 1, left > 0 ? (int)left : 0) == 1;
}

static void
s_procs_cleanup (void)
{
    for (size_t i = 0; i < s_procs.n; i++)
        syscall (SYS_pidfd_send_signal, s_procs.fd[i], SIGKILL, NULL, 0);
    for (size_t i = 0; i < s_procs.n; i++) {
        struct pollfd p = {s_procs.fd[i], POLLIN, 0};
        poll (&p, 1, 5000);
        waitpid (s_procs.pid[i], NULL, WNOHANG);
        close (s_procs.fd[i]);
    }
    s_procs.n = 0;
}

static int
s_teardown (void **state)
{
    s_procs_cleanup ();
    return zlt_teardown (state);
}

/*  Run zlane-ctl against `broker` with `args` (NULL-terminated); returns its
    exit code, its stdout in `*out` (caller frees). */
static int
s_ctl (zlt_broker_t *broker, const char *const args[], char **out)
{
    char *bin = zlt_bin ("zlane-ctl");
    static int calls; // zlt_run appends: a file per run
    char name[32];
    snprintf (name, sizeof name, "ctl.%d.out", ++calls);
    char *out_path = zlt_path (zlt_broker_dir (broker), name);
    snprintf (name, sizeof name, "ctl.%d.err", calls);
    char *err_path = zlt_path (zlt_broker_dir (broker), name);
    const char *argv[16] = {bin, "--admin", zlt_broker_endpoint (broker, "admin")};
    size_t n = 3;
    for (size_t i = 0; args[i] && n < 15; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    int rc = zlt_run (argv, NULL, out_path, err_path, WAIT_MS);
    *out = zlt_read_file (out_path, NULL);
    assert_non_null (*out);
    if (rc != 0)
        zlt_dump_file ("zlane-ctl stderr", err_path, 2000);
    free (out_path);
    free (err_path);
    free (bin);
    return rc;
}

static uint64_t
s_submit (zlt_broker_t *broker, const char *payload)
{
    char *bin = zlt_bin ("zlane-submit");
    static int calls; // zlt_run appends: a file per run
    char name[32];
    snprintf (name, sizeof name, "submit.%d.out", ++calls);
    char *out = zlt_path (zlt_broker_dir (broker), name);
    snprintf (name, sizeof name, "submit.%d.err", calls);
    char *err = zlt_path (zlt_broker_dir (broker), name);
    const char *argv[] = {bin,        "--broker", zlt_broker_endpoint (broker, "frontend"),
                          "--tenant", "acme",     "--lane",
                          "a",        payload,    NULL};
    if (zlt_run (argv, NULL, out, err, WAIT_MS) != 0) {
        zlt_dump_file ("zlane-submit stderr", err, 2000);
        fail_msg ("zlane-submit failed");
    }
    char *text = zlt_read_file (out, NULL);
    uint64_t id = 0;
    assert_int_equal (zlt_ids_parse (text, &id, 1, "zlane-submit output"), 1);
    free (text);
    free (out);
    free (err);
    free (bin);
    return id;
}

static void
test_exec_job_cancelled_mid_run (void **state)
{
    (void)state;
    const char *args[] = {"--lane", "a", "--heartbeat", HEARTBEAT, "--liveness", "3", NULL};
    zlt_broker_t *broker = zlt_broker_start (args);
    assert_non_null (broker);
    const char *dir = zlt_broker_dir (broker);
    zlt_client_t *admin = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (broker, "admin"));
    assert_non_null (admin);
    char *script = zlt_path (dir, "cmd.sh");
    assert_int_equal (zlt_write_file (script, s_script, sizeof s_script - 1), 0);
    char *cmd;
    // exec: the script's shell is the command itself (the guard's child)
    assert_true (asprintf (&cmd, "exec sh '%s' '%s'", script, dir) > 0);

    char *wbin = zlt_bin ("zlane-worker");
    char *werr = zlt_path (dir, "worker.err");
    const char *wargv[] = {wbin,          "--broker", zlt_broker_endpoint (broker, "backend"),
                           "--lanes",     "a",        "--exec",
                           cmd,           "--name",   "worker-1",
                           "--heartbeat", HEARTBEAT,  "--kill-grace",
                           "1s",          "-v",       NULL};
    zlt_proc_t *worker = zlt_spawn (wargv, NULL, NULL, werr);
    assert_non_null (worker);
    if (zlt_wait_counter (admin, "workers_ready", 1, WAIT_MS) != 0) {
        zlt_dump_file ("zlane-worker stderr", werr, 3000);
        fail_msg ("the worker did not say Ready");
    }

    // The job runs: its command and its child wait, deaf to SIGTERM.
    uint64_t id = s_submit (broker, "long");
    char name[64];
    snprintf (name, sizeof name, "started.%" PRIu64 ".1", id);
    char *started = zlt_path (dir, name);
    if (zlt_wait_file_has (started, "\n", WAIT_MS) != 0) {
        zlt_dump_file ("zlane-worker stderr", werr, 3000);
        fail_msg ("the job's command never started");
    }
    char *text = zlt_read_file (started, NULL);
    long sh_pid, pgid, bg;
    assert_int_equal (sscanf (text, "%ld %ld %ld", &sh_pid, &pgid, &bg), 3);
    free (text);
    assert_true (sh_pid > 0 && pgid > 0 && bg > 0);
    assert_int_not_equal (pgid, getpgrp ());                   // a group of its own (the guard's)
    int group_fd = pgid != sh_pid ? s_hold ((pid_t)pgid) : -1; // the guard, if not the shell
    int sh_fd = s_hold ((pid_t)sh_pid);
    int bg_fd = s_hold ((pid_t)bg);

    // zlane-ctl cancel: recorded at once, the worker told.
    char id_text[32];
    snprintf (id_text, sizeof id_text, "%" PRIu64, id);
    const char *cancel_args[] = {"cancel", id_text, NULL};
    char *out = NULL;
    int64_t t_cancel = zlt_now_ms ();
    assert_int_equal (s_ctl (broker, cancel_args, &out), 0);
    fprintf (stderr, "  zlane-ctl: %s", out);
    char want[96];
    snprintf (want, sizeof want, "%" PRIu64 " cancelled (it was leased", id);
    if (!strstr (out, want))
        fail_msg ("zlane-ctl cancel said '%s', not '%s...'", out, want);
    free (out);

    // Its process group is gone within the grace (TERM ignored: KILL after it).
    int64_t deadline = t_cancel + DEATH_MS;
    bool died = s_dead_by (sh_fd, deadline) && s_dead_by (bg_fd, deadline) &&
                (group_fd < 0 || s_dead_by (group_fd, deadline));
    if (!died) {
        zlt_dump_file ("zlane-worker stderr", werr, 3000);
        fail_msg ("the command's group outlived the cancel by %d ms", DEATH_MS);
    }
    int64_t took = zlt_now_ms () - t_cancel;
    fprintf (stderr, "  the command's group died %" PRId64 " ms after the cancel (grace %d ms)\n",
             took, KILL_GRACE_MS);
    if (took < KILL_GRACE_MS / 2) { // it must wait out (most of) the grace for TERM
        zlt_dump_file ("zlane-worker stderr", werr, 3000);
        fail_msg ("the group died %" PRId64 " ms after the cancel, before the grace", took);
    }
    s_procs_cleanup ();
    // Nothing of the group is left: the processes we did not hold (the
    // script's foreground sleep) come back to us, dead, to be reaped; poll
    // for the group to empty, bounded by the same deadline.
    bool empty = false;
    while (!empty) {
        while (waitpid (-(pid_t)pgid, NULL, WNOHANG) > 0)
            ;
        errno = 0;
        empty = kill (-(pid_t)pgid, 0) == -1 && errno == ESRCH;
        if (!empty && zlt_now_ms () > deadline)
            fail_msg ("a process of group %ld is still there after %d ms", pgid, DEATH_MS);
        if (!empty)
            poll (NULL, 0, 10);
    }
    snprintf (name, sizeof name, "finished.%" PRIu64, id);
    char *finished = zlt_path (dir, name);
    assert_int_not_equal (access (finished, F_OK), 0);

    // The worker's late settlement (the killed command's Nack) is refused.
    if (zlt_wait_counter (admin, "err_cancelled", 1, WAIT_MS) != 0) {
        zlt_dump_file ("zlane-worker stderr", werr, 3000);
        fail_msg ("the late settlement was not refused CANCELLED");
    }
    assert_int_equal (zlt_counter (admin, "jobs_cancelled"), 1);
    assert_int_equal (zlt_counter (admin, "cancels_sent"), 1);
    assert_int_equal (zlt_counter (admin, "jobs_acked"), 0);
    assert_int_equal (zlt_counter (admin, "jobs_nacked"), 0);
    assert_int_equal (zlt_counter (admin, "jobs_dispatched"), 1);
    zl_group_stats_t g;
    assert_int_equal (zlt_group (admin, "a", NULL, &g), 0);
    assert_int_equal (g.ready + g.delayed + g.in_flight + g.dlq, 0);
    char *werr_text = zlt_read_file (werr, NULL);
    assert_non_null (strstr (werr_text, "cancelled by the broker"));
    free (werr_text);

    // Asked again: already cancelled.
    assert_int_equal (s_ctl (broker, cancel_args, &out), 0);
    snprintf (want, sizeof want, "%" PRIu64 " already cancelled at ", id);
    assert_non_null (strstr (out, want));
    assert_non_null (strstr (out, "(it was leased)"));
    free (out);

    // SIGKILL the broker and restart it: still cancelled, never redelivered.
    assert_int_equal (zlt_broker_kill (broker), 0);
    assert_int_equal (zlt_broker_restart (broker, WAIT_MS), 0);
    zlt_client_destroy (&admin);
    admin = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (broker, "admin"));
    assert_non_null (admin);
    if (zlt_wait_counter (admin, "workers_ready", 1, WAIT_MS) != 0) {
        zlt_dump_file ("zlane-worker stderr", werr, 3000);
        fail_msg ("the worker did not come back to the restarted broker");
    }
    const char *json_args[] = {"--json", "cancel", id_text, NULL};
    assert_int_equal (s_ctl (broker, json_args, &out), 0);
    fprintf (stderr, "  after the restart: %s", out);
    assert_non_null (strstr (out, "\"outcome\":\"already_cancelled\""));
    assert_non_null (strstr (out, "\"state\":\"leased\""));
    free (out);
    // A job submitted now runs at once: the cancelled one (older, so first
    // in FIFO order were it ready) did not come back.
    uint64_t id2 = s_submit (broker, "quick");
    assert_true (id2 > id);
    if (zlt_wait_counter (admin, "jobs_acked", 1, WAIT_MS) != 0) {
        zlt_dump_file ("zlane-worker stderr", werr, 3000);
        fail_msg ("the job submitted after the restart did not run");
    }
    snprintf (name, sizeof name, "ran.%" PRIu64, id2);
    char *ran = zlt_path (dir, name);
    assert_int_equal (access (ran, F_OK), 0);
    snprintf (name, sizeof name, "started.%" PRIu64 ".2", id);
    char *again = zlt_path (dir, name);
    assert_int_not_equal (access (again, F_OK), 0);
    assert_int_equal (zlt_counter (admin, "jobs_dispatched"), 1); // only the new job
    assert_int_equal (zlt_group (admin, "a", NULL, &g), 0);
    assert_int_equal (g.ready + g.delayed + g.in_flight + g.dlq, 0);
    assert_int_equal (zlt_counter (admin, "jobs_cancelled_kept"), 1);

    free (again);
    free (ran);
    free (finished);
    free (started);
    free (werr);
    free (wbin);
    free (cmd);
    free (script);
}

// ---------------------------------------------------------------- by hand
static void
test_deadline_stops_a_running_job (void **state)
{
    (void)state;
    // (the raw worker below sends no heartbeats: the broker must not call
    // it dead while the test runs, however slow the machine)
    const char *args[] = {"--lane", "a", "--lane", "b", "--liveness", "60", NULL};
    zlt_broker_t *broker = zlt_broker_start (args);
    assert_non_null (broker);
    zlt_client_t *admin = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (broker, "admin"));
    zlt_client_t *worker = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (broker, "backend"));
    const char *lanes[] = {"a"};
    zl_msg_t ready = {.kind = ZL_MSG_READY,
                      .u.ready = {.name = "raw", .n_lanes = 1, .lanes = lanes, .capacity = 2}};
    assert_int_equal (zlt_client_send (worker, &ready), 0);
    assert_int_equal (zlt_wait_counter (admin, "workers_ready", 1, WAIT_MS), 0);

    char *bin = zlt_bin ("zlane-submit");
    char *out = zlt_path (zlt_broker_dir (broker), "deadline.out");
    char *err = zlt_path (zlt_broker_dir (broker), "deadline.err");
    const char *argv[] = {bin,        "--broker",  zlt_broker_endpoint (broker, "frontend"),
                          "--tenant", "acme",      "--lane",
                          "a",        "--max-age", "1s",
                          "slow",     NULL};
    assert_int_equal (zlt_run (argv, NULL, out, err, WAIT_MS), 0);
    char *text = zlt_read_file (out, NULL);
    uint64_t id = 0;
    assert_int_equal (zlt_ids_parse (text, &id, 1, "zlane-submit output"), 1);
    free (text);
    zl_msg_t m;
    assert_int_equal (zlt_client_expect (worker, ZL_MSG_DISPATCH, &m, WAIT_MS), 0);
    assert_int_equal (m.u.dispatch.jobs[0].job_id, id);
    uint64_t lease = m.u.dispatch.jobs[0].lease;
    // the worker holds it (the lease is 30 s): the deadline stops it
    assert_int_equal (zlt_client_expect (worker, ZL_MSG_CANCEL, &m, WAIT_MS), 0);
    assert_int_equal (m.u.cancel.items[0].job_id, id);
    assert_int_equal (m.u.cancel.items[0].lease, lease);
    assert_int_equal (zlt_counter (admin, "jobs_expired"), 1);
    zl_ack_item_t ack = {id, lease, 10};
    zl_msg_t am = {.kind = ZL_MSG_ACK, .u.ack = {1, &ack}};
    assert_int_equal (zlt_client_send (worker, &am), 0);
    assert_int_equal (zlt_client_expect (worker, ZL_MSG_ERROR, &m, WAIT_MS), 0);
    assert_int_equal (zlt_counter (admin, "jobs_acked"), 0);
    char ids[32];
    snprintf (ids, sizeof ids, "%" PRIu64, id);
    const char *show[] = {"--json", "job", "show", ids, NULL};
    char *json = NULL;
    assert_int_equal (s_ctl (broker, show, &json), 0);
    if (!strstr (json, "\"state\":\"dead\"") || !strstr (json, "\"outcome\":\"expired\"") ||
        !strstr (json, "deadline passed"))
        fail_msg ("job show after the deadline: %s", json);
    free (json);
    free (out);
    free (err);
    free (bin);
    zlt_client_destroy (&worker);
    zlt_client_destroy (&admin);
    zlt_broker_destroy (&broker);
}

static zl_msg_t
s_cancel_request (uint64_t request_id, const uint64_t *ids, size_t n)
{
    zl_msg_t m = {.kind = ZL_MSG_ADMIN_REQUEST};
    m.u.admin_request = (zl_admin_request_t){.request_id = request_id,
                                             .op = ZL_ADMIN_CANCEL,
                                             .filter = {.lane = "", .tenant = ""},
                                             .lane = "",
                                             .n_ids = n,
                                             .ids = ids};
    return m;
}

static void
test_protocol_by_hand (void **state)
{
    (void)state;
    // (the raw worker below sends no heartbeats: the broker must not call
    // it dead while the test runs, however slow the machine)
    const char *args[] = {"--lane", "a", "--lane", "b", "--liveness", "60", NULL};
    zlt_broker_t *broker = zlt_broker_start (args);
    assert_non_null (broker);
    zlt_client_t *admin = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (broker, "admin"));
    zlt_client_t *worker = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (broker, "backend"));
    assert_non_null (admin);
    assert_non_null (worker);
    const char *lanes[] = {"a"};
    zl_msg_t ready = {.kind = ZL_MSG_READY,
                      .u.ready = {.name = "raw", .n_lanes = 1, .lanes = lanes, .capacity = 2}};
    assert_int_equal (zlt_client_send (worker, &ready), 0);
    assert_int_equal (zlt_wait_counter (admin, "workers_ready", 1, WAIT_MS), 0);

    uint64_t id = s_submit (broker, "one");
    zl_msg_t m;
    assert_int_equal (zlt_client_expect (worker, ZL_MSG_DISPATCH, &m, WAIT_MS), 0);
    assert_int_equal (m.kind, ZL_MSG_DISPATCH);
    assert_int_equal (m.u.dispatch.n, 1);
    assert_int_equal (m.u.dispatch.jobs[0].job_id, id);
    uint64_t lease = m.u.dispatch.jobs[0].lease;

    // cancel it, with an unknown id and id 0 in the same request
    uint64_t ids[] = {id, id + 1000, 0};
    zl_msg_t req = s_cancel_request (7, ids, 3);
    assert_int_equal (zlt_client_send (admin, &req), 0);
    assert_int_equal (zlt_client_expect (admin, ZL_MSG_ADMIN_REPLY, &m, WAIT_MS), 0);
    const zl_admin_reply_t *r = &m.u.admin_reply;
    assert_true (r->ok);
    assert_int_equal (r->request_id, 7);
    assert_int_equal (r->result, ZL_ADMIN_RESULT_CANCEL);
    assert_int_equal (r->count, 1);
    assert_int_equal (r->n_cancel_items, 3);
    assert_int_equal (r->cancel_items[0].job_id, id);
    assert_int_equal (r->cancel_items[0].outcome, ZL_CANCEL_CANCELLED);
    assert_string_equal (r->cancel_items[0].state, "leased");
    assert_true (r->cancel_items[0].cancelled_at_ms > 0);
    assert_int_equal (r->cancel_items[1].outcome, ZL_CANCEL_UNKNOWN);
    assert_int_equal (r->cancel_items[2].outcome, ZL_CANCEL_UNKNOWN);

    // the worker is told, with its lease
    assert_int_equal (zlt_client_expect (worker, ZL_MSG_CANCEL, &m, WAIT_MS), 0);
    assert_int_equal (m.kind, ZL_MSG_CANCEL);
    assert_int_equal (m.u.cancel.n, 1);
    assert_int_equal (m.u.cancel.items[0].job_id, id);
    assert_int_equal (m.u.cancel.items[0].lease, lease);

    // its late Ack and Extend change nothing
    zl_ack_item_t ack = {id, lease, 10};
    zl_msg_t am = {.kind = ZL_MSG_ACK, .u.ack = {1, &ack}};
    assert_int_equal (zlt_client_send (worker, &am), 0);
    assert_int_equal (zlt_client_expect (worker, ZL_MSG_ERROR, &m, WAIT_MS), 0);
    assert_int_equal (m.kind, ZL_MSG_ERROR);
    assert_int_equal (m.u.error.code, ZL_ERR_CANCELLED);
    assert_int_equal (m.u.error.n_items, 1);
    assert_int_equal (m.u.error.items[0].code, ZL_ERR_CANCELLED);
    assert_int_equal (m.u.error.items[0].lease, lease);
    zl_extend_item_t ext = {id, lease, 5000};
    zl_msg_t em = {.kind = ZL_MSG_EXTEND, .u.extend = {1, &ext}};
    assert_int_equal (zlt_client_send (worker, &em), 0);
    assert_int_equal (zlt_client_expect (worker, ZL_MSG_ERROR, &m, WAIT_MS), 0);
    assert_int_equal (m.u.error.code, ZL_ERR_CANCELLED);
    assert_int_equal (zlt_counter (admin, "err_cancelled"), 2);
    assert_int_equal (zlt_counter (admin, "jobs_acked"), 0);

    // a worker may not send Cancel
    zl_lease_ref_t ref = {id, lease};
    zl_msg_t cm = {.kind = ZL_MSG_CANCEL, .u.cancel = {1, &ref}};
    uint64_t unknown_kind = zlt_counter (admin, "err_unknown_kind");
    assert_int_equal (zlt_client_send (worker, &cm), 0);
    assert_int_equal (zlt_client_expect (worker, ZL_MSG_ERROR, &m, WAIT_MS), 0);
    assert_int_equal (m.u.error.code, ZL_ERR_UNKNOWN_KIND);
    assert_non_null (strstr (m.u.error.message, "cancel"));
    assert_int_equal (zlt_counter (admin, "err_unknown_kind"), unknown_kind + 1);

    // a cancel of no ids is malformed
    uint64_t invalid = zlt_counter (admin, "err_invalid");
    req = s_cancel_request (8, NULL, 0);
    assert_int_equal (zlt_client_send (admin, &req), 0);
    assert_int_equal (zlt_client_expect (admin, ZL_MSG_ADMIN_REPLY, &m, WAIT_MS), 0);
    assert_int_equal (m.kind, ZL_MSG_ERROR);
    assert_int_equal (m.u.error.code, ZL_ERR_INVALID);
    assert_non_null (strstr (m.u.error.message, "ids"));
    assert_int_equal (zlt_counter (admin, "err_invalid"), invalid + 1);

    // a finished job (acked) says so; the cancelled one says "already"
    uint64_t id2 = s_submit (broker, "two");
    assert_int_equal (zlt_client_expect (worker, ZL_MSG_DISPATCH, &m, WAIT_MS), 0);
    assert_int_equal (m.u.dispatch.jobs[0].job_id, id2);
    ack = (zl_ack_item_t){id2, m.u.dispatch.jobs[0].lease, 10};
    assert_int_equal (zlt_client_send (worker, &am), 0);
    assert_int_equal (zlt_client_expect (worker, ZL_MSG_SETTLED, &m, WAIT_MS), 0);
    assert_int_equal (m.kind, ZL_MSG_SETTLED);
    uint64_t ids2[] = {id2, id};
    req = s_cancel_request (9, ids2, 2);
    assert_int_equal (zlt_client_send (admin, &req), 0);
    assert_int_equal (zlt_client_expect (admin, ZL_MSG_ADMIN_REPLY, &m, WAIT_MS), 0);
    assert_int_equal (m.kind, ZL_MSG_ADMIN_REPLY);
    r = &m.u.admin_reply;
    assert_int_equal (r->count, 0);
    assert_int_equal (r->cancel_items[0].outcome, ZL_CANCEL_FINISHED);
    assert_int_equal (r->cancel_items[1].outcome, ZL_CANCEL_ALREADY_CANCELLED);
    assert_string_equal (r->cancel_items[1].state, "leased");
}

int
main (void)
{
    prctl (PR_SET_CHILD_SUBREAPER, 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown (test_exec_job_cancelled_mid_run, s_teardown),
        cmocka_unit_test_teardown (test_protocol_by_hand, s_teardown),
        cmocka_unit_test_teardown (test_deadline_stops_a_running_job, s_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
