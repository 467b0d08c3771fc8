/*  test_batches: batches (issue 15) with the real processes: zlane-broker,
    zlane-worker --exec running a shell handler, zlane-submit and zlane-ctl,
    on loopback ephemeral ports.

    A 1,000-job batch (20 of them fail PERMANENT) submitted in two halves,
    the broker SIGKILLed and restarted after the first half and again while
    the workers are halfway through the jobs: once closed and settled, its
    callback runs exactly once, with jobs=1000, acked=980, dead=20 and the
    20 failed ids (ZLANE_BATCH_*), the batch.<id> event says the same,
    `zlane-ctl batch show` says settled, and a restart after that runs it
    no more. The callback lane has its own worker with one slot, so a
    sentinel job submitted after the restart runs only after any callback
    the broker might have enqueued again: the "no more" is an event, not a
    sleep. Then the refusals: joining an unknown or a closed batch, opening
    an id that exists or is all digits, closing an unknown batch; and a
    batch without a callback, which settles and runs nothing; joining a
    batch that is closed but not settled. */
#define _GNU_SOURCE
#include "zltest.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#define WAIT_MS 60000    // a phase of the big batch (ASan builds are slower)
#define RUN_MS 60000     // one zlane-submit / zlane-ctl run
#define RESTART_MS 15000 // one broker restart
#define N_JOBS 1000
#define N_FAIL 20

typedef struct {
    zlt_broker_t *broker;
    zlt_client_t *admin;
    char *cmd;
    zlt_proc_t *workers[2];
    const char *dir;
} fx_t;

// The handler: fail-* fails PERMANENT; a callback appends its summary to
// callbacks (at its start); a sentinel appends its payload to sentinels.
static char *
s_handler (const char *dir)
{
    char *path = zlt_path (dir, "handler.sh");
    char *script;
    assert_true (asprintf (&script,
                           "p=$(cat)\n"
                           "case \"$p\" in fail*) echo \"failed on purpose\" >&2; exit 65;; esac\n"
                           "if [ -n \"$ZLANE_BATCH_ID\" ]; then\n"
                           "  set -- $ZLANE_BATCH_FAILED\n"
                           "  echo \"callback $ZLANE_BATCH_ID jobs=$ZLANE_BATCH_JOBS "
                           "acked=$ZLANE_BATCH_ACKED dead=$ZLANE_BATCH_DEAD "
                           "cancelled=$ZLANE_BATCH_CANCELLED failed=$# payload=$p\" "
                           ">> '%s/callbacks'\n"
                           "fi\n"
                           "case \"$p\" in sentinel*) echo \"$p\" >> '%s/sentinels';; esac\n",
                           dir, dir) > 0);
    assert_int_equal (zlt_write_file (path, script, strlen (script)), 0);
    free (script);
    char *cmd;
    assert_true (asprintf (&cmd, "sh '%s'", path) > 0);
    free (path);
    return cmd;
}

static zlt_proc_t *
s_worker (fx_t *fx, const char *lanes, const char *name, const char *concurrency)
{
    char out[64], err[64];
    snprintf (out, sizeof out, "%s.out", name);
    snprintf (err, sizeof err, "%s.err", name);
    char *out_path = zlt_path (fx->dir, out), *err_path = zlt_path (fx->dir, err);
    char *bin = zlt_bin ("zlane-worker");
    const char *argv[] = {bin,
                          "--broker",
                          zlt_broker_endpoint (fx->broker, "backend"),
                          "--lanes",
                          lanes,
                          "--exec",
                          fx->cmd,
                          "--name",
                          name,
                          "--concurrency",
                          concurrency,
                          NULL};
    zlt_proc_t *p = zlt_spawn (argv, NULL, out_path, err_path);
    assert_non_null (p);
    free (bin);
    free (out_path);
    free (err_path);
    return p;
}

static void
s_start (fx_t *fx)
{
    memset (fx, 0, sizeof *fx);
    const char *args[] = {"--lane", "a", "--lane", "cb", NULL};
    fx->broker = zlt_broker_start (args);
    assert_non_null (fx->broker);
    fx->dir = zlt_broker_dir (fx->broker);
    fx->admin = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (fx->broker, "admin"));
    assert_non_null (fx->admin);
    fx->cmd = s_handler (fx->dir);
}

static void
s_end (fx_t *fx)
{
    for (int i = 0; i < 2; i++)
        zlt_proc_destroy (&fx->workers[i]);
    zlt_client_destroy (&fx->admin);
    zlt_broker_destroy (&fx->broker);
    free (fx->cmd);
}

// Run a client program with `args` (NULL-terminated; stdin from `in` if
// given); its exit code, stdout and stderr (caller frees) when asked.
static int
s_run (fx_t *fx, const char *prog, const char *const *args, const char *in, char **out, char **err)
{
    return zlt_run_program (fx->dir, prog, args, in, out, err, RUN_MS);
}

// zlane-submit with `more` flags (NULL-terminated) after the broker's.
static int
s_submit (fx_t *fx, const char *const *more, const char *in, char **out, char **err)
{
    const char *args[24] = {"--broker", zlt_broker_endpoint (fx->broker, "frontend"), "--timeout",
                            "30s"};
    size_t n = 4;
    for (size_t i = 0; more[i] && n < 23; i++)
        args[n++] = more[i];
    args[n] = NULL;
    return s_run (fx, "zlane-submit", args, in, out, err);
}

// Write `count` job lines from `first` (every 50th fails) to `path`;
// returns how many fail.
static int
s_lines (const char *path, int first, int count)
{
    FILE *f = fopen (path, "w");
    assert_non_null (f);
    int failing = 0;
    for (int i = first; i < first + count; i++) {
        bool fail = i % (N_JOBS / N_FAIL) == 0;
        failing += fail;
        fprintf (f, "%s-%d\n", fail ? "fail" : "job", i);
    }
    fclose (f);
    return failing;
}

static void
s_restart (fx_t *fx, const char *why)
{
    assert_int_equal (zlt_broker_kill (fx->broker), 0);
    if (zlt_broker_restart (fx->broker, RESTART_MS) != 0)
        fail_msg ("the broker did not restart (%s)", why);
}

static bool
s_has (const char *text, const char *needle)
{
    return text && strstr (text, needle);
}

// ---------------------------------------------------------------- the big batch
static void
test_batch_callback_once_across_kills (void **state)
{
    (void)state;
    fx_t fx;
    s_start (&fx);
    char *out = NULL, *err = NULL;
    const char *open[] = {"--tenant", "t", "--lane", "cb", "--open-batch", "big", "summary", NULL};
    assert_int_equal (s_submit (&fx, open, NULL, &out, NULL), 0);
    assert_string_equal (out, "big\n");
    free (out);

    // the first half, with no worker yet; then the broker dies
    char *half1 = zlt_path (fx.dir, "half1"), *half2 = zlt_path (fx.dir, "half2");
    int failing = s_lines (half1, 1, N_JOBS / 2) + s_lines (half2, N_JOBS / 2 + 1, N_JOBS / 2);
    assert_int_equal (failing, N_FAIL);
    const char *join[] = {"--tenant", "t", "--lane", "a", "--batch", "big", "--lines", "-q", NULL};
    assert_int_equal (s_submit (&fx, join, half1, NULL, NULL), 0);
    s_restart (&fx, "after the first half");
    char *show = NULL;
    const char *ctl[] = {
        "--admin", zlt_broker_endpoint (fx.broker, "admin"), "--json", "batch", "show", "big",
        NULL};
    assert_int_equal (s_run (&fx, "zlane-ctl", ctl, NULL, &show, NULL), 0);
    if (!s_has (show, "\"state\":\"open\"") || !s_has (show, "\"jobs\":500,"))
        fail_msg ("after the restart: %s", show);
    free (show);

    // workers, the second half; the broker dies again halfway through
    fx.workers[0] = s_worker (&fx, "a", "w-a", "8");
    fx.workers[1] = s_worker (&fx, "cb", "w-cb", "1");
    assert_int_equal (zlt_wait_counter (fx.admin, "workers_ready", 2, WAIT_MS), 0);
    assert_int_equal (s_submit (&fx, join, half2, NULL, NULL), 0);
    if (zlt_wait_counter (fx.admin, "jobs_acked", N_JOBS / 3, WAIT_MS) != 0)
        fail_msg ("the workers did not get a third of the way");
    s_restart (&fx, "halfway through the jobs");

    // nothing runs the callback before the close
    zlt_client_t *sub = zlt_client_new (ZMQ_SUB, zlt_broker_endpoint (fx.broker, "events"));
    zlt_client_subscribe (sub, "batch.");
    char *callbacks = zlt_path (fx.dir, "callbacks"), *sentinels = zlt_path (fx.dir, "sentinels");
    assert_int_equal (zlt_count_lines (callbacks), 0);
    const char *close[] = {"--close-batch", "big", NULL};
    assert_int_equal (s_submit (&fx, close, NULL, NULL, NULL), 0);
    if (zlt_wait_file_has (callbacks, "callback big", WAIT_MS) != 0) {
        zlt_broker_dump (fx.broker, 3000);
        fail_msg ("the callback did not run");
    }
    char *text = zlt_read_file (callbacks, NULL);
    char want[160];
    snprintf (want, sizeof want,
              "callback big jobs=%d acked=%d dead=%d cancelled=0 failed=%d payload=summary\n",
              N_JOBS, N_JOBS - N_FAIL, N_FAIL, N_FAIL);
    assert_string_equal (text, want);
    free (text);

    // the event says the same (the subscriber joined before the close)
    zl_msg_t ev;
    assert_int_equal (zlt_client_expect (sub, ZL_MSG_BATCH_DONE, &ev, WAIT_MS), 0);
    assert_string_equal (zlt_client_topic (sub), "batch.big");
    assert_int_equal (ev.u.batch_done.jobs, N_JOBS);
    assert_int_equal (ev.u.batch_done.acked, N_JOBS - N_FAIL);
    assert_int_equal (ev.u.batch_done.dead, N_FAIL);
    assert_int_equal (ev.u.batch_done.n_failed, N_FAIL);
    for (size_t i = 1; i < ev.u.batch_done.n_failed; i++)
        assert_true (ev.u.batch_done.failed[i - 1] < ev.u.batch_done.failed[i]);
    zlt_client_destroy (&sub);

    assert_int_equal (s_run (&fx, "zlane-ctl", ctl, NULL, &show, NULL), 0);
    snprintf (want, sizeof want, "\"jobs\":%d,\"acked\":%d,\"dead\":%d,", N_JOBS, N_JOBS - N_FAIL,
              N_FAIL);
    if (!s_has (show, "\"state\":\"settled\"") || !s_has (show, want))
        fail_msg ("batch show after it settled: %s", show);
    free (show);

    // a restart runs it no more: the sentinel, after it in the same lane and
    // on a one-slot worker, runs after any callback enqueued again. (The
    // kill comes once the callback's Ack is on record: before, the callback
    // would run again, as any job whose Ack was not committed.)
    zl_group_stats_t g = {0};
    int64_t until = zlt_now_ms () + WAIT_MS;
    while ((zlt_group (fx.admin, "cb", "", &g) != 0 || g.acked < 1) && zlt_now_ms () < until)
        poll (NULL, 0, 20);
    assert_int_equal (g.acked, 1);
    assert_int_equal (zlt_wait_turn_committed (fx.admin, WAIT_MS), 0);
    s_restart (&fx, "after the callback");
    const char *sentinel[] = {"--tenant", "t", "--lane", "cb", "sentinel-1", NULL};
    assert_int_equal (s_submit (&fx, sentinel, NULL, NULL, NULL), 0);
    assert_int_equal (zlt_wait_file_has (sentinels, "sentinel-1", WAIT_MS), 0);
    assert_int_equal (zlt_count_lines (callbacks), 1);

    // a job may not join it now
    const char *late[] = {"--tenant", "t", "--lane", "a", "--batch", "big", "late", NULL};
    assert_int_equal (s_submit (&fx, late, NULL, NULL, &err), 1);
    if (!s_has (err, "unknown_batch") && !s_has (err, "batch_closed"))
        fail_msg ("a late join: %s", err);
    free (err);
    free (half1);
    free (half2);
    free (callbacks);
    free (sentinels);
    s_end (&fx);
}

// ---------------------------------------------------------------- refusals
static void
test_batch_refusals_and_no_callback (void **state)
{
    (void)state;
    fx_t fx;
    s_start (&fx);
    fx.workers[0] = s_worker (&fx, "a,cb", "w", "2");
    assert_int_equal (zlt_wait_counter (fx.admin, "workers_ready", 1, WAIT_MS), 0);
    char *out = NULL, *err = NULL;

    const char *unknown[] = {"--tenant", "t", "--lane", "a", "--batch", "nope", "x", NULL};
    assert_int_equal (s_submit (&fx, unknown, NULL, NULL, &err), 1);
    assert_true (s_has (err, "unknown_batch"));
    free (err);

    const char *digits[] = {"--tenant", "t", "--lane", "cb", "--open-batch", "123", "x", NULL};
    assert_int_equal (s_submit (&fx, digits, NULL, NULL, &err), 1);
    assert_true (s_has (err, "invalid") && s_has (err, "not all digits"));
    free (err);

    // a broker-named batch without a callback: three jobs, closed, settled
    const char *open[] = {"--tenant",      "t",          "--lane", "cb", "--open-batch", "-",
                          "--no-callback", "never runs", NULL};
    assert_int_equal (s_submit (&fx, open, NULL, &out, NULL), 0);
    char id[64];
    snprintf (id, sizeof id, "%s", out);
    id[strcspn (id, "\n")] = '\0';
    free (out);
    assert_true (strtoull (id, NULL, 10) > 0); // named after its job id

    const char *again[] = {"--tenant", "t", "--lane", "cb", "--open-batch", id, "x", NULL};
    assert_int_equal (s_submit (&fx, again, NULL, NULL, &err), 1);
    assert_true (s_has (err, "invalid")); // all digits: the broker's
    free (err);

    const char *named[] = {"--tenant", "t", "--lane", "cb", "--open-batch", "mine", "cb", NULL};
    assert_int_equal (s_submit (&fx, named, NULL, NULL, NULL), 0);
    assert_int_equal (s_submit (&fx, named, NULL, NULL, &err), 1);
    assert_true (s_has (err, "batch_exists"));
    free (err);
    const char *other[] = {"--tenant", "u", "--lane", "a", "--batch", "mine", "x", NULL};
    assert_int_equal (s_submit (&fx, other, NULL, NULL, &err), 1);
    assert_true (s_has (err, "unknown_batch") && s_has (err, "not tenant 'u'"));
    free (err);

    char *lines = zlt_path (fx.dir, "three");
    assert_int_equal (zlt_write_file (lines, "j1\nj2\nj3\n", 9), 0);
    const char *join[] = {"--tenant", "t",  "--lane",        "a", "--batch", id,
                          "--lines",  "-q", "--close-batch", id,  NULL};
    assert_int_equal (s_submit (&fx, join, lines, NULL, NULL), 0);
    // a closed batch that cannot settle yet (its job waits a minute)
    const char *slow[] = {"--tenant", "t",    "--lane",        "a",    "--batch", "mine", "--delay",
                          "60s",      "slow", "--close-batch", "mine", NULL};
    assert_int_equal (s_submit (&fx, slow, NULL, NULL, NULL), 0);
    const char *closed[] = {"--tenant", "t", "--lane", "a", "--batch", "mine", "late", NULL};
    assert_int_equal (s_submit (&fx, closed, NULL, NULL, &err), 1);
    if (!s_has (err, "batch_closed"))
        fail_msg ("joining a closed batch: %s", err);
    free (err);
    const char *close_unknown[] = {"--close-batch", "nope", NULL};
    uint64_t unknown_before = zlt_counter (fx.admin, "err_unknown_batch");
    assert_int_equal (s_submit (&fx, close_unknown, NULL, NULL, &err), 1);
    assert_true (s_has (err, "no such batch"));
    assert_int_equal (zlt_counter (fx.admin, "err_unknown_batch"), unknown_before + 1); // counted
    free (err);

    // it settles with nothing to run: batch show says so, and no callback ran
    if (zlt_wait_counter (fx.admin, "batches_settled", 1, WAIT_MS) != 0)
        fail_msg ("the batch without a callback did not settle");
    const char *ctl[] = {
        "--admin", zlt_broker_endpoint (fx.broker, "admin"), "--json", "batch", "show", id, NULL};
    char *show = NULL;
    assert_int_equal (s_run (&fx, "zlane-ctl", ctl, NULL, &show, NULL), 0);
    if (!s_has (show, "\"state\":\"settled\"") || !s_has (show, "\"callback\":false") ||
        !s_has (show, "\"jobs\":3,\"acked\":3,"))
        fail_msg ("batch show: %s", show);
    free (show);
    char *callbacks = zlt_path (fx.dir, "callbacks");
    assert_int_equal (zlt_count_lines (callbacks), 0);
    const char *ctl_unknown[] = {
        "--admin", zlt_broker_endpoint (fx.broker, "admin"), "batch", "show", "nope", NULL};
    assert_int_equal (s_run (&fx, "zlane-ctl", ctl_unknown, NULL, &show, NULL), 1);
    assert_true (s_has (show, "unknown"));
    free (show);
    free (callbacks);
    free (lines);
    s_end (&fx);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test (test_batch_callback_once_across_kills),
        cmocka_unit_test (test_batch_refusals_and_no_callback),
    };
    return cmocka_run_group_tests_name ("batches", tests, NULL, NULL);
}
