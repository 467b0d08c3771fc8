/*  test_workflow: workflows and results through the broker's public API
    (zl_broker_feed) on the in-process harness (tests/support/broker_harness:
    inproc peers, a fake clock). A DAG in one Submit by depends_on_seq, in
    any order; the Submit's refusals: a cycle, an unknown parent (by id, by
    seq, a rejected parent spec), more parents than max_fan_in, a parent
    named twice, a delay with parents; each counted. Then the DAG runs:
    each job's Dispatch carries its parents' results, an Ack's result over
    max_result is refused RESULT_TOO_LARGE and not settled, and a Watch is
    answered by the outcome (at once for an unknown job, after the ack for
    a running one). A lane with publish_done publishes done.<lane>.<tenant>. */
#include "broker.h"
#include "broker_harness.h"
#include "config.h"
#include "log.h"
#include "msg.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GOT 64

// What the harness peers received, as much as the tests read.
typedef struct {
    zlh_sock_t sock;
    zl_msg_kind_t kind;
    uint64_t seq[32], ids[32]; // accepted: seq -> id; rejected: seq; dispatch: ids
    zl_reject_code_t codes[32];
    uint64_t leases[32];
    size_t n;
    char parents[32][128]; // dispatch: "id=result;..." per job
    zl_error_code_t error;
    zl_job_outcome_t outcome; // strings not kept
    char result[64];
    char topic[64];
    uint64_t counter; // admin reply: the counter asked for
} got_t;

static struct {
    char *dir;
    zl_broker_config_t cfg;
    zl_broker_t *broker;
    zlh_t *h;
    got_t got[MAX_GOT];
    size_t n_got;
    const char *want_counter;
} T;

static void
s_record (void *ctx, zlh_sock_t sock, int peer, const char *topic, const zl_msg_t *m)
{
    (void)ctx;
    (void)peer;
    if (T.n_got == MAX_GOT)
        fail_msg ("too many messages");
    got_t *g = &T.got[T.n_got++];
    memset (g, 0, sizeof *g);
    g->sock = sock;
    g->kind = m->kind;
    if (topic)
        snprintf (g->topic, sizeof g->topic, "%s", topic);
    switch (m->kind) {
    case ZL_MSG_ACCEPTED:
        for (size_t i = 0; i < m->u.accepted.n && g->n < 32; i++, g->n++) {
            g->seq[g->n] = m->u.accepted.jobs[i].seq;
            g->ids[g->n] = m->u.accepted.jobs[i].job_id;
        }
        break;
    case ZL_MSG_REJECTED:
        for (size_t i = 0; i < m->u.rejected.n && g->n < 32; i++, g->n++) {
            g->seq[g->n] = m->u.rejected.jobs[i].seq;
            g->codes[g->n] = m->u.rejected.jobs[i].code;
        }
        break;
    case ZL_MSG_DISPATCH:
        for (size_t i = 0; i < m->u.dispatch.n && g->n < 32; i++, g->n++) {
            const zl_job_msg_t *j = &m->u.dispatch.jobs[i];
            g->ids[g->n] = j->job_id;
            g->leases[g->n] = j->lease;
            size_t len = 0;
            for (size_t k = 0; k < j->n_parent_results; k++)
                len +=
                    (size_t)snprintf (g->parents[g->n] + len, sizeof g->parents[0] - len,
                                      "%llu=%.*s;", (unsigned long long)j->parent_results[k].job_id,
                                      (int)j->parent_results[k].result.len,
                                      (const char *)j->parent_results[k].result.data);
        }
        break;
    case ZL_MSG_ERROR:
        g->error = m->u.error.code;
        if (m->u.error.n_items)
            g->error = m->u.error.items[0].code;
        break;
    case ZL_MSG_OUTCOME:
    case ZL_MSG_JOB_DONE:
        g->outcome = m->u.outcome;
        snprintf (g->result, sizeof g->result, "%.*s", (int)m->u.outcome.result.len,
                  (const char *)m->u.outcome.result.data);
        break;
    case ZL_MSG_ADMIN_REPLY:
        for (size_t i = 0; T.want_counter && i < m->u.admin_reply.stats.n_counters; i++)
            if (!strcmp (m->u.admin_reply.stats.counters[i].name, T.want_counter))
                g->counter = m->u.admin_reply.stats.counters[i].value;
        break;
    default: break;
    }
}

// Feed `msg` (one turn) and collect what arrives.
static void
s_feed (zlh_sock_t sock, int peer, const zl_msg_t *msg)
{
    T.n_got = 0;
    assert_int_equal (zlh_feed (T.h, sock, peer, msg), 0);
    zlh_drain (T.h, s_record, NULL);
}

static got_t *
s_find (zl_msg_kind_t kind)
{
    for (size_t i = 0; i < T.n_got; i++)
        if (T.got[i].kind == kind)
            return &T.got[i];
    return NULL;
}

static int
s_setup (void **state)
{
    (void)state;
    zl_log_set_level (ZL_LOG_ERROR);
    T.dir = zlh_tmpdir ("test-workflow");
    assert_non_null (T.dir);
    zl_broker_config_defaults (&T.cfg);
    zlh_config_inproc (&T.cfg, T.dir);
    T.cfg.durability = ZL_DURABILITY_NONE;
    T.cfg.max_fan_in = 3;
    T.cfg.max_result = 8;
    zl_broker_config_lane (&T.cfg, "a");
    zl_broker_config_lane (&T.cfg, "loud")->publish_done = true;
    char err[512];
    T.broker = zl_broker_new (&T.cfg, err, sizeof err);
    if (!T.broker)
        fail_msg ("zl_broker_new: %s", err);
    T.h = zlh_new (T.broker);
    assert_non_null (T.h);
    zl_msg_t hello = {.kind = ZL_MSG_HELLO, .u.hello = {.client = "p0"}};
    s_feed (ZLH_FRONTEND, 0, &hello);
    assert_non_null (s_find (ZL_MSG_CREDIT));
    return 0;
}

static int
s_teardown (void **state)
{
    (void)state;
    zlh_destroy (&T.h);
    zl_broker_destroy (&T.broker);
    zl_broker_config_free (&T.cfg);
    zlh_rmdir (T.dir);
    free (T.dir);
    return 0;
}

static zl_job_spec_t
s_spec (uint64_t seq)
{
    return (zl_job_spec_t){.seq = seq,
                           .tenant = "t",
                           .lane = "a",
                           .payload = {(const uint8_t *)"x", 1},
                           .idempotency_key = ""};
}

static uint64_t
s_counter (const char *name)
{
    T.want_counter = name;
    zl_msg_t req = {.kind = ZL_MSG_ADMIN_REQUEST};
    req.u.admin_request = (zl_admin_request_t){.op = ZL_ADMIN_STATS, .lane = ""};
    req.u.admin_request.filter.lane = req.u.admin_request.filter.tenant = "";
    s_feed (ZLH_ADMIN, 0, &req);
    got_t *g = s_find (ZL_MSG_ADMIN_REPLY);
    assert_non_null (g);
    T.want_counter = NULL;
    return g->counter;
}

// The code the Submit's reply gave `seq`: 0 accepted (its id in *id).
static zl_reject_code_t
s_verdict (uint64_t seq, uint64_t *id)
{
    for (size_t i = 0; i < T.n_got; i++)
        for (size_t k = 0; k < T.got[i].n; k++)
            if (T.got[i].seq[k] == seq) {
                if (T.got[i].kind == ZL_MSG_ACCEPTED) {
                    if (id)
                        *id = T.got[i].ids[k];
                    return 0;
                }
                if (T.got[i].kind == ZL_MSG_REJECTED)
                    return T.got[i].codes[k];
            }
    fail_msg ("no answer for seq %llu", (unsigned long long)seq);
    return 0;
}

static void
s_submit (zl_job_spec_t *specs, size_t n)
{
    zl_msg_t m = {.kind = ZL_MSG_SUBMIT, .u.submit = {n, specs}};
    s_feed (ZLH_FRONTEND, 0, &m);
}

// ---------------------------------------------------------------- admission
static void
test_submit_refusals (void **state)
{
    (void)state;
    zl_job_spec_t s[16];
    memset (s, 0, sizeof s);
    // a cycle 10 -> 11 -> 10, 12 below it; 13 alone is fine
    uint64_t d10[] = {11}, d11[] = {10}, d12[] = {11};
    s[0] = s_spec (10), s[0].depends_on_seq = d10, s[0].n_depends_on_seq = 1;
    s[1] = s_spec (11), s[1].depends_on_seq = d11, s[1].n_depends_on_seq = 1;
    s[2] = s_spec (12), s[2].depends_on_seq = d12, s[2].n_depends_on_seq = 1;
    s[3] = s_spec (13);
    // a self-loop
    uint64_t d14[] = {14};
    s[4] = s_spec (14), s[4].depends_on_seq = d14, s[4].n_depends_on_seq = 1;
    // unknown parents: an id, a seq, a rejected spec's seq
    uint64_t d15[] = {999999}, d16[] = {77}, d18[] = {17};
    s[5] = s_spec (15), s[5].depends_on = d15, s[5].n_depends_on = 1;
    s[6] = s_spec (16), s[6].depends_on_seq = d16, s[6].n_depends_on_seq = 1;
    s[7] = s_spec (17), s[7].tenant = ""; // invalid
    s[8] = s_spec (18), s[8].depends_on_seq = d18, s[8].n_depends_on_seq = 1;
    // more than max_fan_in (3)
    uint64_t d19[] = {13, 13, 13, 13};
    s[9] = s_spec (19), s[9].depends_on_seq = d19, s[9].n_depends_on_seq = 4;
    // a parent named twice, a delay with parents
    uint64_t d20[] = {13, 13}, d21[] = {13};
    s[10] = s_spec (20), s[10].depends_on_seq = d20, s[10].n_depends_on_seq = 2;
    s[11] = s_spec (21), s[11].depends_on_seq = d21, s[11].n_depends_on_seq = 1;
    s[11].delay_ms = 100;
    // another tenant's job as a parent (its result would leak)
    uint64_t d22[] = {13};
    s[12] = s_spec (22), s[12].tenant = "t2", s[12].depends_on_seq = d22;
    s[12].n_depends_on_seq = 1;
    s_submit (s, 13);
    assert_int_equal (s_verdict (10, NULL), ZL_REJECT_CYCLE);
    assert_int_equal (s_verdict (11, NULL), ZL_REJECT_CYCLE);
    assert_int_equal (s_verdict (12, NULL), ZL_REJECT_CYCLE);
    assert_int_equal (s_verdict (13, NULL), 0);
    assert_int_equal (s_verdict (14, NULL), ZL_REJECT_CYCLE);
    assert_int_equal (s_verdict (15, NULL), ZL_REJECT_UNKNOWN_PARENT);
    assert_int_equal (s_verdict (16, NULL), ZL_REJECT_UNKNOWN_PARENT);
    assert_int_equal (s_verdict (17, NULL), ZL_REJECT_INVALID);
    assert_int_equal (s_verdict (18, NULL), ZL_REJECT_UNKNOWN_PARENT);
    assert_int_equal (s_verdict (19, NULL), ZL_REJECT_FAN_IN);
    assert_int_equal (s_verdict (20, NULL), ZL_REJECT_INVALID);
    assert_int_equal (s_verdict (21, NULL), ZL_REJECT_INVALID);
    assert_int_equal (s_verdict (22, NULL), ZL_REJECT_UNKNOWN_PARENT);
    assert_int_equal (s_counter ("err_cycle"), 4);
    assert_int_equal (s_counter ("err_unknown_parent"), 4);
    assert_int_equal (s_counter ("err_fan_in"), 1);
    assert_int_equal (s_counter ("jobs_accepted"), 1);
}

// ---------------------------------------------------------------- a DAG runs
static void
s_ready_worker (void)
{
    const char *lanes[] = {"a"};
    zl_msg_t m = {.kind = ZL_MSG_READY,
                  .u.ready = {.name = "w0", .n_lanes = 1, .lanes = lanes, .capacity = 8}};
    s_feed (ZLH_BACKEND, 0, &m);
}

static void
s_ack (uint64_t id, uint64_t lease, const char *result)
{
    zl_ack_item_t it = {.job_id = id,
                        .lease = lease,
                        .result = {(const uint8_t *)result, result ? strlen (result) : 0}};
    zl_msg_t m = {.kind = ZL_MSG_ACK, .u.ack = {1, &it}};
    s_feed (ZLH_BACKEND, 0, &m);
}

// The dispatched job `id` in what arrived: its lease and parents' results.
static uint64_t
s_dispatched (uint64_t id, const char **parents)
{
    for (size_t i = 0; i < T.n_got; i++)
        for (size_t k = 0; T.got[i].kind == ZL_MSG_DISPATCH && k < T.got[i].n; k++)
            if (T.got[i].ids[k] == id) {
                if (parents)
                    *parents = T.got[i].parents[k];
                return T.got[i].leases[k];
            }
    return 0;
}

// A diamond sent children first (A -> B, C -> D by seq) runs in order, each
// job handed its parents' results; a Watch is answered at once for an
// unknown job and after the ack for a running one; an oversized result is
// refused and the job stays leased.
static void
test_diamond_in_one_submit (void **state)
{
    (void)state;
    zl_job_spec_t s[4];
    uint64_t dd[] = {2, 3}, db[] = {1}, dc[] = {1};
    s[0] = s_spec (4), s[0].depends_on_seq = dd, s[0].n_depends_on_seq = 2;
    s[1] = s_spec (3), s[1].depends_on_seq = dc, s[1].n_depends_on_seq = 1;
    s[2] = s_spec (2), s[2].depends_on_seq = db, s[2].n_depends_on_seq = 1;
    s[3] = s_spec (1);
    s_submit (s, 4);
    uint64_t a, b, c, d;
    assert_int_equal (s_verdict (1, &a), 0);
    assert_int_equal (s_verdict (2, &b), 0);
    assert_int_equal (s_verdict (3, &c), 0);
    assert_int_equal (s_verdict (4, &d), 0);
    assert_true (a < b && a < c && b < d && c < d); // ids in a parents-first order

    uint64_t watch_ids[] = {a, 424242};
    zl_msg_t w = {.kind = ZL_MSG_WATCH, .u.watch = {2, watch_ids}};
    s_feed (ZLH_FRONTEND, 1, &w);
    got_t *o = s_find (ZL_MSG_OUTCOME);
    assert_non_null (o);
    assert_int_equal (o->outcome.job_id, 424242);
    assert_false (o->outcome.found);

    s_ready_worker (); // only A is ready
    const char *parents;
    uint64_t la = s_dispatched (a, &parents);
    assert_true (la != 0);
    assert_string_equal (parents, "");
    assert_int_equal (s_dispatched (b, NULL), 0);
    // over max_result (8): refused, not settled
    s_ack (a, la, "123456789");
    got_t *e = s_find (ZL_MSG_ERROR);
    assert_non_null (e);
    assert_int_equal (e->error, ZL_ERR_RESULT_TOO_LARGE);
    assert_null (s_find (ZL_MSG_SETTLED));
    assert_int_equal (s_counter ("err_result_too_large"), 1);
    // within it: settled, the watcher told, B and C dispatched with A's result
    s_ack (a, la, "ra");
    assert_non_null (s_find (ZL_MSG_SETTLED));
    o = s_find (ZL_MSG_OUTCOME);
    assert_non_null (o);
    assert_int_equal (o->outcome.job_id, a);
    assert_true (o->outcome.found && o->outcome.final);
    assert_int_equal (o->outcome.outcome, ZL_OUTCOME_ACKED);
    assert_string_equal (o->result, "ra");
    char want[128];
    snprintf (want, sizeof want, "%llu=ra;", (unsigned long long)a);
    uint64_t lb = s_dispatched (b, &parents);
    assert_string_equal (parents, want);
    uint64_t lc = s_dispatched (c, &parents);
    assert_string_equal (parents, want);
    assert_int_equal (s_dispatched (d, NULL), 0);
    s_ack (b, lb, "rb");
    assert_int_equal (s_dispatched (d, NULL), 0);
    s_ack (c, lc, "rc");
    snprintf (want, sizeof want, "%llu=rb;%llu=rc;", (unsigned long long)b, (unsigned long long)c);
    assert_true (s_dispatched (d, &parents) != 0);
    assert_string_equal (parents, want);
    // a Watch on a finished job is answered at once
    uint64_t again[] = {b};
    w.u.watch = (zl_watch_t){1, again};
    s_feed (ZLH_FRONTEND, 1, &w);
    o = s_find (ZL_MSG_OUTCOME);
    assert_non_null (o);
    assert_string_equal (o->result, "rb");
    // and an empty Watch is refused
    w.u.watch = (zl_watch_t){0, NULL};
    s_feed (ZLH_FRONTEND, 1, &w);
    assert_non_null (s_find (ZL_MSG_ERROR));
}

// ---------------------------------------------------------------- done events
/*  A lane with publish_done publishes each outcome as done.<lane>.<tenant>;
    the other lanes stay quiet. */
static void
test_done_events (void **state)
{
    (void)state;
    zl_job_spec_t s[2] = {s_spec (1), s_spec (2)};
    s[1].lane = "loud";
    s_submit (s, 2);
    uint64_t quiet, loud;
    assert_int_equal (s_verdict (1, &quiet), 0);
    assert_int_equal (s_verdict (2, &loud), 0);
    const char *lanes[] = {"a", "loud"};
    zl_msg_t m = {.kind = ZL_MSG_READY,
                  .u.ready = {.name = "w0", .n_lanes = 2, .lanes = lanes, .capacity = 8}};
    s_feed (ZLH_BACKEND, 0, &m);
    uint64_t lq = s_dispatched (quiet, NULL), ll = s_dispatched (loud, NULL);
    assert_true (lq && ll);
    s_ack (quiet, lq, NULL);
    assert_null (s_find (ZL_MSG_JOB_DONE));
    s_ack (loud, ll, "LOUD");
    got_t *e = s_find (ZL_MSG_JOB_DONE);
    assert_non_null (e);
    assert_string_equal (e->topic, "done.loud.t");
    assert_int_equal (e->outcome.job_id, loud);
    assert_int_equal (e->outcome.outcome, ZL_OUTCOME_ACKED);
    assert_string_equal (e->result, "LOUD");
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown (test_submit_refusals, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_diamond_in_one_submit, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_done_events, s_setup, s_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
