/*  test_circuit_breaker: a lane's circuit breaker (issue 16, item 7) with
    the real processes on loopback ephemeral ports: zlane-broker with lane
    "mail" guarded (3 transient failures in 10 s open it for 1 s, 1 probe),
    a worker for mail whose handler (zlane-testhandler) fails while the
    downstream is "down" (a marker file is missing), and a worker for lane
    "other", which works all along.

    The breaker opens (a breaker.mail event, OPEN, and stats say so); no job
    of mail starts during the cool-down while lane other's jobs run; it
    half-opens, its probe fails and it opens again; the downstream comes
    back, the next probe succeeds, it closes, and every job is acked. */
#define _GNU_SOURCE
#include "zltest.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#define WAIT_MS 30000
#define N_MAIL 20
#define SLACK_MS 150 // a start this near an event's edge is not counted

static zlt_proc_t *
s_worker (zlt_broker_t *b, const char *lane, const char *handler, const char *name)
{
    char *bin = zlt_bin ("zlane-worker"), err[64];
    snprintf (err, sizeof err, "%s.err", name);
    char *err_path = zlt_path (zlt_broker_dir (b), err);
    const char *argv[] = {bin,
                          "--broker",
                          zlt_broker_endpoint (b, "backend"),
                          "--lanes",
                          lane,
                          "--exec",
                          handler,
                          "--name",
                          name,
                          "--concurrency",
                          "1",
                          NULL};
    zlt_proc_t *p = zlt_spawn (argv, NULL, NULL, err_path);
    assert_non_null (p);
    free (bin);
    free (err_path);
    return p;
}

static void
s_submit (zlt_broker_t *b, const char *lane, int n)
{
    char *lines = zlt_path (zlt_broker_dir (b), "lines");
    zlt_write_lines (lines, lane, n);
    const char *args[] = {"--broker", zlt_broker_endpoint (b, "frontend"),
                          "--tenant", "t",
                          "--lane",   lane,
                          "--lines",  "-q",
                          NULL};
    assert_int_equal (
        zlt_run_program (zlt_broker_dir (b), "zlane-submit", args, lines, NULL, NULL, WAIT_MS), 0);
    free (lines);
}

// The next breaker.mail event, which must be in `state`.
static zl_breaker_info_t
s_expect (zlt_client_t *sub, uint32_t state, int64_t *at_ms)
{
    zl_msg_t ev;
    if (zlt_client_expect (sub, ZL_MSG_BREAKER, &ev, WAIT_MS) != 0)
        fail_msg ("no breaker event (waiting for state %u)", state);
    assert_string_equal (zlt_client_topic (sub), "breaker.mail");
    assert_string_equal (ev.u.breaker.lane, "mail");
    if (ev.u.breaker.state != state)
        fail_msg ("breaker event in state %u, expected %u", ev.u.breaker.state, state);
    struct timespec ts;
    clock_gettime (CLOCK_REALTIME, &ts);
    *at_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    return ev.u.breaker;
}

// Starts of mail's jobs (the handler's log: "start JOB ATTEMPT PID WALL_MS")
// with a wall time in [from, to].
static int
s_starts_between (const char *log, int64_t from, int64_t to)
{
    char *text = zlt_read_file (log, NULL);
    int n = 0;
    for (char *line = text; line && *line;) {
        char *eol = strchr (line, '\n');
        unsigned long long job, att, pid;
        long long wall;
        if (sscanf (line, "start %llu %llu %llu %lld", &job, &att, &pid, &wall) == 4 &&
            wall >= from && wall <= to)
            n++;
        line = eol ? eol + 1 : NULL;
    }
    free (text);
    return n;
}

static void
test_breaker_trips_and_recovers (void **state)
{
    (void)state;
    const char *args[] = {"--lane",
                          "mail",
                          "--lane",
                          "other",
                          "--backoff-base",
                          "10ms",
                          "--backoff-cap",
                          "20ms",
                          "--max-attempts",
                          "100",
                          "--set",
                          "lanes/mail/breaker_failures=3",
                          "--set",
                          "lanes/mail/breaker_window=10s",
                          "--set",
                          "lanes/mail/breaker_cooldown=1s",
                          "--set",
                          "lanes/mail/breaker_probes=1",
                          NULL};
    zlt_broker_t *b = zlt_broker_start (args);
    assert_non_null (b);
    const char *dir = zlt_broker_dir (b);
    zlt_client_t *admin = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (b, "admin"));
    zlt_client_t *sub = zlt_client_new (ZMQ_SUB, zlt_broker_endpoint (b, "events"));
    zlt_client_subscribe (sub, "breaker.");
    char *up = zlt_path (dir, "up"), *log = zlt_path (dir, "mail.log");
    char *th = zlt_bin ("zlane-testhandler"), *failing, *working;
    assert_true (asprintf (&failing, "'%s' --ok-if-exists '%s' --exit 1 --log '%s'", th, up, log) >
                 0);
    assert_true (asprintf (&working, "'%s'", th) > 0);
    zlt_proc_t *wm = s_worker (b, "mail", failing, "w-mail");
    zlt_proc_t *wo = s_worker (b, "other", working, "w-other");
    assert_int_equal (zlt_wait_counter (admin, "workers_ready", 2, WAIT_MS), 0);
    s_submit (b, "mail", N_MAIL);

    int64_t opened_at, half_at;
    zl_breaker_info_t e = s_expect (sub, 1, &opened_at); // OPEN after 3 transient failures
    assert_true (e.failures >= 3);
    assert_int_equal (e.opened, 1);
    // the open span by the broker's clock (the event says when it ends; the
    // test may read it late): [until - cool-down, until]
    int64_t until = (int64_t)e.until_ms;
    assert_true (until <= opened_at + 1000 + SLACK_MS); // (read after the open)
    zl_stats_t st;
    assert_int_equal (zlt_stats (admin, &st, WAIT_MS), 0);
    assert_int_equal (st.n_breakers, 1);
    assert_string_equal (st.breakers[0].lane, "mail");
    assert_true (st.breakers[0].state == 1 || st.breakers[0].state == 2);
    // the other lane runs while mail's breaker is open
    uint64_t acked_before = zlt_counter (admin, "jobs_acked");
    s_submit (b, "other", 5);
    assert_int_equal (zlt_wait_counter (admin, "jobs_acked", acked_before + 5, WAIT_MS), 0);

    e = s_expect (sub, 2, &half_at); // HALF_OPEN after the cool-down
    // no job of mail started while it was open, and it stayed open its 1 s
    assert_int_equal (s_starts_between (log, until - 1000 + SLACK_MS, until - SLACK_MS), 0);
    assert_true (half_at >= until - SLACK_MS);
    e = s_expect (sub, 1, &opened_at); // its probe failed: open again
    assert_int_equal (e.opened, 2);

    // the downstream comes back: the next probe succeeds and it closes
    assert_int_equal (zlt_write_file (up, "", 0), 0);
    s_expect (sub, 2, &half_at);
    s_expect (sub, 0, &half_at);
    if (zlt_wait_counter (admin, "jobs_acked", acked_before + 5 + N_MAIL, WAIT_MS) != 0) {
        zlt_broker_dump (b, 3000);
        fail_msg ("not every job of mail was acked after the breaker closed");
    }
    assert_int_equal (zlt_stats (admin, &st, WAIT_MS), 0);
    assert_int_equal (st.breakers[0].state, 0);
    assert_int_equal (st.breakers[0].opened, 2);
    zl_group_stats_t g;
    assert_int_equal (zlt_group (admin, "mail", "", &g), 0);
    assert_int_equal (g.dlq, 0);
    free (failing);
    free (working);
    free (th);
    free (up);
    free (log);
    zlt_proc_destroy (&wm);
    zlt_proc_destroy (&wo);
    zlt_client_destroy (&sub);
    zlt_client_destroy (&admin);
    zlt_broker_destroy (&b);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test (test_breaker_trips_and_recovers),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
