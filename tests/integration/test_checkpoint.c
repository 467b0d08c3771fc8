/*  test_checkpoint: progress checkpoints (issue 16, item 6) with the real
    processes: zlane-broker and zlane-worker --exec running a shell handler
    that does 10 steps, saving its step in $ZLANE_CHECKPOINT after each, on
    loopback ephemeral ports.

    - The handler kills itself (SIGKILL) after step 5 of attempt 1: the
      worker reads the checkpoint it left, sends it before the Nack, and
      attempt 2 starts at step 6 (the journal of steps says 1-5 on attempt
      1, 6-10 on attempt 2, nothing twice).
    - The whole worker is SIGKILLed while attempt 1 sleeps after step 5
      (once the broker counted the checkpoint saved): a new worker gets the
      job, after the broker declared the first dead, and resumes at step 6.
    - A raw worker sends an Extend whose checkpoint is over max_checkpoint:
      Error CHECKPOINT_TOO_LARGE, counted, and the job still settles. */
#define _GNU_SOURCE
#include "zltest.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#define WAIT_MS 30000
#define RUN_MS 30000

// The handler: steps from the checkpoint's + 1 to 10, each appended to
// steps as "<attempt> <step>"; after step 5 of attempt 1 it does `crash`.
// It saves its step as the checkpoint after each step, or, with
// `only_5th_on_first`, on attempt 1 only after step 5: the broker's
// checkpoints_saved then tells that step 5 is the one it stored (the worker
// reads the file every 50 ms, so steps 1-5 may be saved any number of times).
static char *
s_handler (const char *dir, const char *crash, bool only_5th_on_first)
{
    char *path = zlt_path (dir, "handler.sh"), *script;
    assert_true (
        asprintf (&script,
                  "i=$(cat \"$ZLANE_CHECKPOINT\"); i=${i:-0}\n"
                  "while [ \"$i\" -lt 10 ]; do\n"
                  "  i=$((i + 1))\n"
                  "  echo \"$ZLANE_ATTEMPT $i\" >> '%s/steps'\n"
                  "  if [ %d = 0 ] || [ \"$ZLANE_ATTEMPT\" != 1 ] || [ \"$i\" = 5 ]; then\n"
                  "    printf '%%s' \"$i\" > \"$ZLANE_CHECKPOINT.new\"\n"
                  "    mv \"$ZLANE_CHECKPOINT.new\" \"$ZLANE_CHECKPOINT\"\n"
                  "  fi\n"
                  "  if [ \"$ZLANE_ATTEMPT\" = 1 ] && [ \"$i\" = 5 ]; then %s; fi\n"
                  "done\n",
                  dir, only_5th_on_first ? 1 : 0, crash) > 0);
    assert_int_equal (zlt_write_file (path, script, strlen (script)), 0);
    free (script);
    char *cmd;
    assert_true (asprintf (&cmd, "sh '%s'", path) > 0);
    free (path);
    return cmd;
}

static zlt_proc_t *
s_worker (zlt_broker_t *b, const char *cmd, const char *name)
{
    char *bin = zlt_bin ("zlane-worker"), err[64];
    snprintf (err, sizeof err, "%s.err", name);
    char *err_path = zlt_path (zlt_broker_dir (b), err);
    const char *argv[] = {bin,           "--broker", zlt_broker_endpoint (b, "backend"),
                          "--lanes",     "a",        "--exec",
                          cmd,           "--name",   name,
                          "--heartbeat", "200ms",    NULL};
    zlt_proc_t *p = zlt_spawn (argv, NULL, NULL, err_path);
    assert_non_null (p);
    free (bin);
    free (err_path);
    return p;
}

static void
s_submit_one (zlt_broker_t *b)
{
    const char *args[] = {
        "--broker", zlt_broker_endpoint (b, "frontend"), "--tenant", "t", "--lane", "a", "long-job",
        NULL};
    assert_int_equal (
        zlt_run_program (zlt_broker_dir (b), "zlane-submit", args, NULL, NULL, NULL, RUN_MS), 0);
}

static const char s_resumed[] = "1 1\n1 2\n1 3\n1 4\n1 5\n2 6\n2 7\n2 8\n2 9\n2 10\n";

static zlt_broker_t *
s_broker (void)
{
    const char *args[] = {"--lane", "a",           "--backoff-base", "10ms",       "--backoff-cap",
                          "20ms",   "--heartbeat", "200ms",          "--liveness", "3",
                          NULL};
    zlt_broker_t *b = zlt_broker_start (args);
    assert_non_null (b);
    return b;
}

// The handler dies after step 5; attempt 2 resumes at step 6.
static void
test_handler_crash_resumes_from_checkpoint (void **state)
{
    (void)state;
    zlt_broker_t *b = s_broker ();
    const char *dir = zlt_broker_dir (b);
    zlt_client_t *admin = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (b, "admin"));
    char *cmd = s_handler (dir, "kill -9 $$", false);
    zlt_proc_t *w = s_worker (b, cmd, "w1");
    assert_int_equal (zlt_wait_counter (admin, "workers_ready", 1, WAIT_MS), 0);
    s_submit_one (b);
    if (zlt_wait_counter (admin, "jobs_acked", 1, WAIT_MS) != 0) {
        zlt_broker_dump (b, 3000);
        fail_msg ("the job was not acked");
    }
    char *steps_path = zlt_path (dir, "steps"), *steps = zlt_read_file (steps_path, NULL);
    assert_string_equal (steps, s_resumed);
    assert_true (zlt_counter (admin, "checkpoints_saved") >= 1);
    free (steps);
    free (steps_path);
    free (cmd);
    zlt_proc_destroy (&w);
    zlt_client_destroy (&admin);
    zlt_broker_destroy (&b);
}

// The worker dies (SIGKILL) while attempt 1 sleeps after step 5: the
// checkpoint the broker stored brings attempt 2, on a new worker, to step 6.
static void
test_worker_killed_resumes_from_checkpoint (void **state)
{
    (void)state;
    zlt_broker_t *b = s_broker ();
    const char *dir = zlt_broker_dir (b);
    zlt_client_t *admin = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (b, "admin"));
    char *at5 = zlt_path (dir, "at5"), crash[PATH_MAX + 32];
    snprintf (crash, sizeof crash, "touch '%s'; sleep 60", at5);
    char *cmd = s_handler (dir, crash, true);
    zlt_proc_t *w1 = s_worker (b, cmd, "w1");
    assert_int_equal (zlt_wait_counter (admin, "workers_ready", 1, WAIT_MS), 0);
    s_submit_one (b);
    assert_int_equal (zlt_wait_file_has (at5, "", WAIT_MS), 0);
    // the broker stored step 5, the only checkpoint attempt 1 writes (an
    // Extend, within the worker's 50 ms period)
    assert_int_equal (zlt_wait_counter (admin, "checkpoints_saved", 1, WAIT_MS), 0);
    zlt_proc_destroy (&w1); // SIGKILL to its process group: the worker and the handler
    zlt_proc_t *w2 = s_worker (b, cmd, "w2");
    if (zlt_wait_counter (admin, "jobs_acked", 1, WAIT_MS) != 0) {
        zlt_broker_dump (b, 3000);
        fail_msg ("the job was not acked on the second worker");
    }
    char *steps_path = zlt_path (dir, "steps"), *steps = zlt_read_file (steps_path, NULL);
    assert_string_equal (steps, s_resumed);
    free (steps);
    free (steps_path);
    free (at5);
    free (cmd);
    zlt_proc_destroy (&w2);
    zlt_client_destroy (&admin);
    zlt_broker_destroy (&b);
}

// A checkpoint over max_checkpoint is refused, counted, and changes nothing.
static void
test_oversize_checkpoint_is_refused (void **state)
{
    (void)state;
    const char *args[] = {"--lane", "a", "--max-checkpoint", "16", "--liveness", "60", NULL};
    zlt_broker_t *b = zlt_broker_start (args);
    assert_non_null (b);
    zlt_client_t *admin = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (b, "admin"));
    zlt_client_t *w = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (b, "backend"));
    const char *lanes[] = {"a"};
    zl_msg_t m = {.kind = ZL_MSG_READY};
    m.u.ready = (zl_ready_t){"raw-worker", 1, lanes, 1, 0};
    assert_int_equal (zlt_client_send (w, &m), 0);
    assert_int_equal (zlt_wait_counter (admin, "workers_ready", 1, WAIT_MS), 0);
    s_submit_one (b);
    assert_int_equal (zlt_client_expect (w, ZL_MSG_DISPATCH, &m, WAIT_MS), 0);
    uint64_t id = m.u.dispatch.jobs[0].job_id, lease = m.u.dispatch.jobs[0].lease;
    assert_int_equal (m.u.dispatch.jobs[0].checkpoint.len, 0); // none yet
    zl_extend_item_t ext = {id, lease, 30000, {(const uint8_t *)"seventeen bytes!!", 17}};
    m = (zl_msg_t){.kind = ZL_MSG_EXTEND};
    m.u.extend = (zl_extend_t){1, &ext};
    assert_int_equal (zlt_client_send (w, &m), 0);
    assert_int_equal (zlt_client_expect (w, ZL_MSG_ERROR, &m, WAIT_MS), 0);
    assert_int_equal (m.u.error.code, ZL_ERR_CHECKPOINT_TOO_LARGE);
    assert_non_null (strstr (m.u.error.message, "max_checkpoint"));
    assert_int_equal (zlt_counter (admin, "err_checkpoint_too_large"), 1);
    assert_int_equal (zlt_counter (admin, "checkpoints_saved"), 0);
    // 16 bytes is allowed; the job still settles with its lease
    ext.checkpoint.len = 16;
    m = (zl_msg_t){.kind = ZL_MSG_EXTEND};
    m.u.extend = (zl_extend_t){1, &ext};
    assert_int_equal (zlt_client_send (w, &m), 0);
    assert_int_equal (zlt_wait_counter (admin, "checkpoints_saved", 1, WAIT_MS), 0);
    zl_ack_item_t ack = {id, lease, 10};
    m = (zl_msg_t){.kind = ZL_MSG_ACK};
    m.u.ack = (zl_ack_t){1, &ack};
    assert_int_equal (zlt_client_send (w, &m), 0);
    assert_int_equal (zlt_wait_counter (admin, "jobs_acked", 1, WAIT_MS), 0);
    zlt_client_destroy (&w);
    zlt_client_destroy (&admin);
    zlt_broker_destroy (&b);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test (test_handler_crash_resumes_from_checkpoint),
        cmocka_unit_test (test_worker_killed_resumes_from_checkpoint),
        cmocka_unit_test (test_oversize_checkpoint_is_refused),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
