/*  test_workflows: results and workflows (issue 15) with the real
    processes: zlane-broker, zlane-worker --exec running a shell handler,
    zlane-submit and zlane-ctl, on loopback ephemeral ports. The handler
    writes "res-<payload>" to $ZLANE_RESULT_FILE and, for a job with
    parents, prints the file $ZLANE_PARENT_RESULTS names (to the worker's
    stdout) and copies it to parents-<payload> in the test's directory.
    A diamond DAG in one Submit (A -> B, C -> D): D prints B's and C's
    results. zlane-submit --wait prints the result, and exits 4 for a dead
    letter with its error. A result over max_result is refused and the job
    dead-lettered ("result too large"). Outcomes, and a job waiting for a
    parent, survive a SIGKILL and restart of the broker. A short
    result_retention forgets an outcome. The restart runs on the PostgreSQL
    store too (with the harness). Every wait is bounded and on an
    event (a file's contents, a counter, a process's exit). */
#define _GNU_SOURCE
#include "zltest.h"
#include "zlane_producer.h"
#ifdef ZLT_PG
#include "pg_harness.h"
#endif

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

#define WAIT_MS 20000

// The handler, as a script in the broker's directory.
static char *
s_handler (const char *dir)
{
    char *path = zlt_path (dir, "handler.sh");
    char *script;
    assert_true (
        asprintf (&script,
                  "p=$(cat)\n"
                  "case \"$p\" in\n"
                  "  fail*) echo \"failed on purpose: $p\" >&2; exit 65;;\n"
                  "  big*) head -c 100 /dev/zero | tr '\\0' x > \"$ZLANE_RESULT_FILE\"; exit 0;;\n"
                  "esac\n"
                  "if [ -n \"$ZLANE_PARENT_RESULTS\" ]; then\n"
                  "  echo \"$p got $ZLANE_PARENT_COUNT parent results:\"\n"
                  "  cat \"$ZLANE_PARENT_RESULTS\"\n"
                  "  cp \"$ZLANE_PARENT_RESULTS\" '%s/parents-'\"$p\".tmp\n"
                  "  mv '%s/parents-'\"$p\".tmp '%s/parents-'\"$p\"\n"
                  "fi\n"
                  "printf 'res-%%s' \"$p\" > \"$ZLANE_RESULT_FILE\"\n",
                  dir, dir, dir) > 0);
    assert_int_equal (zlt_write_file (path, script, strlen (script)), 0);
    free (script);
    char *cmd;
    assert_true (asprintf (&cmd, "sh '%s'", path) > 0);
    free (path);
    return cmd;
}

typedef struct {
    zlt_broker_t *broker;
    zlt_client_t *admin;
    char *cmd;
    zlt_proc_t *worker;
    char *worker_out, *worker_err;
} fx_t;

static zlt_proc_t *
s_worker (fx_t *fx, const char *lanes, const char *name)
{
    const char *dir = zlt_broker_dir (fx->broker);
    char file[64];
    snprintf (file, sizeof file, "%s.out", name);
    free (fx->worker_out);
    fx->worker_out = zlt_path (dir, file);
    snprintf (file, sizeof file, "%s.err", name);
    free (fx->worker_err);
    fx->worker_err = zlt_path (dir, file);
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
                          "2",
                          NULL};
    zlt_proc_t *p = zlt_spawn (argv, NULL, fx->worker_out, fx->worker_err);
    assert_non_null (p);
    free (bin);
    return p;
}

static void
s_start (fx_t *fx, const char *const args[], const char *lanes)
{
    memset (fx, 0, sizeof *fx);
    fx->broker = zlt_broker_start (args);
    assert_non_null (fx->broker);
    fx->admin = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (fx->broker, "admin"));
    assert_non_null (fx->admin);
    fx->cmd = s_handler (zlt_broker_dir (fx->broker));
    if (lanes) {
        fx->worker = s_worker (fx, lanes, "worker1");
        if (zlt_wait_counter (fx->admin, "workers_ready", 1, 10000) != 0) {
            zlt_dump_file ("zlane-worker stderr", fx->worker_err, 2000);
            fail_msg ("the worker did not say Ready");
        }
    }
}

static void
s_end (fx_t *fx)
{
    zlt_proc_destroy (&fx->worker);
    zlt_client_destroy (&fx->admin);
    zlt_broker_destroy (&fx->broker);
    free (fx->cmd);
    free (fx->worker_out);
    free (fx->worker_err);
}

// Run a client program (argv after the binary); returns its exit code,
// stdout in *out (caller frees), stderr in *err (caller frees) if asked.
static int
s_run (fx_t *fx, const char *prog, const char *const *args, char **out, char **err)
{
    return zlt_run_program (zlt_broker_dir (fx->broker), prog, args, NULL, out, err, WAIT_MS);
}

// zlane-submit a job of `payload` in `lane`, extra flags in `more`.
static int
s_submit (fx_t *fx, const char *lane, const char *payload, const char *more1, const char *more2,
          char **out, char **err)
{
    const char *args[] = {"--broker", zlt_broker_endpoint (fx->broker, "frontend"),
                          "--tenant", "t",
                          "--lane",   lane,
                          payload,    more1,
                          more2,      NULL};
    return s_run (fx, "zlane-submit", args, out, err);
}

static int
s_ctl_job (fx_t *fx, const char *what, uint64_t id, char **out)
{
    char text[32];
    snprintf (text, sizeof text, "%" PRIu64, id);
    const char *args[] = {"--admin", zlt_broker_endpoint (fx->broker, "admin"), "job", what, text,
                          NULL};
    return s_run (fx, "zlane-ctl", args, out, NULL);
}

static uint64_t
s_id_of (const char *text)
{
    assert_non_null (text);
    uint64_t id = strtoull (text, NULL, 10);
    assert_true (id > 0);
    return id;
}

// ---------------------------------------------------------------- tests
/*  A diamond sent in one Submit, children first: A -> B, C -> D. D's
    handler gets B's and C's results, in the order D named them, and prints
    them; D's own result is kept and fetched with zlane-ctl job result. */
static void
test_diamond (void **state)
{
    (void)state;
    fx_t fx;
    s_start (&fx, NULL, "a");
    zlt_client_t *p = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (fx.broker, "frontend"));
    assert_true (zlt_client_hello (p, "diamond", 5000) > 0);
    uint64_t d_deps[] = {2, 3}, bc_deps[] = {1};
    zl_job_spec_t specs[4] = {
        {.seq = 4,
         .tenant = "t",
         .lane = "a",
         .payload = {(const uint8_t *)"D", 1},
         .idempotency_key = "",
         .depends_on_seq = d_deps,
         .n_depends_on_seq = 2},
        {.seq = 2,
         .tenant = "t",
         .lane = "a",
         .payload = {(const uint8_t *)"B", 1},
         .idempotency_key = "",
         .depends_on_seq = bc_deps,
         .n_depends_on_seq = 1},
        {.seq = 3,
         .tenant = "t",
         .lane = "a",
         .payload = {(const uint8_t *)"C", 1},
         .idempotency_key = "",
         .depends_on_seq = bc_deps,
         .n_depends_on_seq = 1},
        {.seq = 1,
         .tenant = "t",
         .lane = "a",
         .payload = {(const uint8_t *)"A", 1},
         .idempotency_key = ""},
    };
    zl_msg_t m = {.kind = ZL_MSG_SUBMIT, .u.submit = {4, specs}};
    assert_int_equal (zlt_client_send (p, &m), 0);
    zl_msg_t reply;
    assert_int_equal (zlt_client_expect (p, ZL_MSG_ACCEPTED, &reply, 5000), 0);
    assert_int_equal (reply.kind, ZL_MSG_ACCEPTED);
    assert_int_equal (reply.u.accepted.n, 4);
    uint64_t ids[5] = {0};
    for (size_t i = 0; i < 4; i++)
        ids[reply.u.accepted.jobs[i].seq] = reply.u.accepted.jobs[i].job_id;
    char *parents = zlt_path (zlt_broker_dir (fx.broker), "parents-D");
    char want[128];
    snprintf (want, sizeof want, "%" PRIu64 " 5\nres-B\n%" PRIu64 " 5\nres-C\n", ids[2], ids[3]);
    if (zlt_wait_file_has (parents, want, WAIT_MS) != 0) {
        zlt_dump_file ("worker stdout", fx.worker_out, 2000);
        zlt_dump_file ("worker stderr", fx.worker_err, 2000);
        fail_msg ("D did not get B's and C's results");
    }
    // what D's handler printed
    assert_int_equal (zlt_wait_file_has (fx.worker_out, "D got 2 parent results:", WAIT_MS), 0);
    assert_int_equal (zlt_wait_file_has (fx.worker_out, want, WAIT_MS), 0);
    // B and C each got A's
    char *pb = zlt_path (zlt_broker_dir (fx.broker), "parents-B");
    snprintf (want, sizeof want, "%" PRIu64 " 5\nres-A\n", ids[1]);
    assert_int_equal (zlt_wait_file_has (pb, want, WAIT_MS), 0);
    // D's result, fetched later (D was acked once jobs_acked reaches 4)
    assert_int_equal (zlt_wait_counter (fx.admin, "jobs_acked", 4, WAIT_MS), 0);
    char *out = NULL;
    assert_int_equal (s_ctl_job (&fx, "result", ids[4], &out), 0);
    assert_string_equal (out, "res-D");
    free (out);
    assert_int_equal (zlt_counter (fx.admin, "dep_edges"), 4);
    free (pb);
    free (parents);
    zlt_client_destroy (&p);
    s_end (&fx);
}

/*  zlane-submit --wait prints the result and exits 0; a dead letter's
    final error goes to stderr with exit 4; --after runs a job after its
    parent, with the parent's result. */
static void
test_submit_wait (void **state)
{
    (void)state;
    fx_t fx;
    s_start (&fx, NULL, "a");
    char *out = NULL, *err = NULL;
    assert_int_equal (s_submit (&fx, "a", "hello", "--wait", NULL, &out, &err), 0);
    assert_string_equal (out, "res-hello");
    free (out);
    free (err);
    assert_int_equal (s_submit (&fx, "a", "fail-now", "--wait", NULL, &out, &err), 4);
    assert_string_equal (out, "");
    assert_non_null (strstr (err, "dead-lettered"));
    assert_non_null (strstr (err, "failed on purpose: fail-now"));
    free (out);
    free (err);
    // --json: the outcome as an object
    assert_int_equal (s_submit (&fx, "a", "j", "--wait", "--json", &out, NULL), 0);
    assert_non_null (strstr (out, "\"result\":\"res-j\""));
    assert_non_null (strstr (out, "\"outcome\":\"acked\""));
    free (out);
    // a parent, then a child by id: the child sees the parent's result
    assert_int_equal (s_submit (&fx, "a", "P", "--wait", NULL, &out, NULL), 0);
    free (out);
    assert_int_equal (s_submit (&fx, "a", "P", NULL, NULL, &out, NULL), 0); // another P
    uint64_t parent = s_id_of (out);
    free (out);
    char after[32];
    snprintf (after, sizeof after, "%" PRIu64, parent);
    const char *args[] = {"--broker", zlt_broker_endpoint (fx.broker, "frontend"),
                          "--tenant", "t",
                          "--lane",   "a",
                          "--after",  after,
                          "--wait",   "Q",
                          NULL};
    assert_int_equal (s_run (&fx, "zlane-submit", args, &out, NULL), 0);
    assert_string_equal (out, "res-Q");
    free (out);
    char *pq = zlt_path (zlt_broker_dir (fx.broker), "parents-Q");
    char want[64];
    snprintf (want, sizeof want, "%" PRIu64 " 5\nres-P\n", parent);
    assert_int_equal (zlt_wait_file_has (pq, want, WAIT_MS), 0);
    free (pq);
    // an unknown parent is refused (exit 1, the reason on stderr)
    const char *bad[] = {"--broker", zlt_broker_endpoint (fx.broker, "frontend"),
                         "--tenant", "t",
                         "--lane",   "a",
                         "--after",  "987654",
                         "x",        NULL};
    assert_int_equal (s_run (&fx, "zlane-submit", bad, NULL, &err), 1);
    assert_non_null (strstr (err, "unknown_parent"));
    free (err);
    s_end (&fx);
}

/*  A result over max_result is refused (counted); the worker dead-letters
    the job, which --wait reports. */
static void
test_result_too_large (void **state)
{
    (void)state;
    fx_t fx;
    const char *args[] = {"--lane", "a", "--max-result", "16", NULL};
    s_start (&fx, args, "a");
    char *out = NULL, *err = NULL;
    assert_int_equal (s_submit (&fx, "a", "big", "--wait", NULL, &out, &err), 4);
    assert_non_null (strstr (err, "result too large"));
    free (out);
    free (err);
    assert_true (zlt_counter (fx.admin, "err_result_too_large") >= 1);
    // a small one still goes through
    assert_int_equal (s_submit (&fx, "a", "ok", "--wait", NULL, &out, NULL), 0);
    assert_string_equal (out, "res-ok");
    free (out);
    s_end (&fx);
}

/*  Outcomes are durable: after a SIGKILL and restart, a result is still
    there, and a job waiting for a parent (in a lane no worker serves yet)
    still waits; once served, the parent runs and so does the child, with
    the parent's result. */
// Wait (bounded) until the broker says it leads.
static void
s_wait_leader (fx_t *fx)
{
    int64_t end = zlt_now_ms () + WAIT_MS;
    zl_stats_t st;
    while (zlt_now_ms () < end) { // polled like zlt_wait_counter, every 20 ms
        if (zlt_stats (fx->admin, &st, 1000) == 0 && st.role && !strcmp (st.role, "leader"))
            return;
        poll (NULL, 0, 20);
    }
    fail_msg ("the restarted broker did not take the lead");
}

static void
s_outcomes_survive_restart (const char *store)
{
    fx_t fx;
    const char *args[] = {"--lane", "a", "--lane", "b", store ? "--store" : NULL, store, NULL};
    s_start (&fx, args, "a");
    char *out = NULL;
    assert_int_equal (s_submit (&fx, "a", "kept", NULL, NULL, &out, NULL), 0);
    uint64_t kept = s_id_of (out);
    free (out);
    assert_int_equal (zlt_wait_counter (fx.admin, "outcomes_kept", 1, WAIT_MS), 0);
    assert_int_equal (s_submit (&fx, "b", "later", NULL, NULL, &out, NULL), 0);
    uint64_t parent = s_id_of (out);
    free (out);
    char after[32];
    snprintf (after, sizeof after, "%" PRIu64, parent);
    assert_int_equal (s_submit (&fx, "a", "child", "--after", after, &out, NULL), 0);
    uint64_t child = s_id_of (out);
    free (out);
    assert_int_equal (s_ctl_job (&fx, "show", child, &out), 0);
    assert_non_null (strstr (out, "waiting"));
    free (out);

    assert_int_equal (zlt_broker_kill (fx.broker), 0);
    assert_int_equal (zlt_broker_restart (fx.broker, 10000), 0);
    // on PostgreSQL the new broker leads once the killed one's lease lapsed
    s_wait_leader (&fx);
    assert_int_equal (s_ctl_job (&fx, "result", kept, &out), 0);
    assert_string_equal (out, "res-kept");
    free (out);
    assert_int_equal (s_ctl_job (&fx, "show", child, &out), 0);
    assert_non_null (strstr (out, "waiting"));
    free (out);

    zlt_proc_destroy (&fx.worker);
    fx.worker = s_worker (&fx, "a,b", "worker2");
    char *pc = zlt_path (zlt_broker_dir (fx.broker), "parents-child");
    char want[64];
    snprintf (want, sizeof want, "%" PRIu64 " 9\nres-later\n", parent);
    if (zlt_wait_file_has (pc, want, WAIT_MS) != 0) {
        zlt_broker_dump (fx.broker, 3000);
        fail_msg ("the child did not run after its parent");
    }
    free (pc);
    s_end (&fx);
}

static void
test_outcomes_survive_restart (void **state)
{
    (void)state;
    s_outcomes_survive_restart (NULL);
}

#ifdef ZLT_PG
// The same on the PostgreSQL store, a cluster of the test's own.
static void
test_outcomes_survive_restart_on_postgresql (void **state)
{
    (void)state;
    zlh_pg_t *pg = zlh_pg_start ();
    assert_non_null (pg);
    s_outcomes_survive_restart (zlh_pg_conninfo (pg));
    zlh_pg_stop (&pg);
}

static int
s_pg_teardown (void **state)
{
    zlt_teardown (state);
    return zlh_pg_teardown (state);
}
#endif

/*  With a short result_retention the outcome is forgotten: job result then
    says unknown (exit 5). */
static void
test_retention_expiry (void **state)
{
    (void)state;
    fx_t fx;
    const char *args[] = {"--lane", "a", "--result-retention", "1s", NULL};
    s_start (&fx, args, "a");
    char *out = NULL;
    assert_int_equal (s_submit (&fx, "a", "brief", NULL, NULL, &out, NULL), 0);
    uint64_t id = s_id_of (out);
    free (out);
    assert_int_equal (zlt_wait_counter (fx.admin, "outcomes_kept", 1, WAIT_MS), 0);
    assert_int_equal (zlt_wait_counter (fx.admin, "outcomes_expired", 1, WAIT_MS), 0);
    assert_int_equal (s_ctl_job (&fx, "result", id, &out), 5);
    free (out);
    assert_int_equal (s_ctl_job (&fx, "show", id, &out), 1);
    assert_non_null (strstr (out, "unknown"));
    free (out);
    s_end (&fx);
}

/*  The C producer library: a diamond as one workflow batch
    (parents_in_batch: one Submit by depends_on_seq), the join watched
    (zl_producer_watch), its outcome delivered with D's result; an unknown
    job's outcome says not found. */
typedef struct {
    zl_producer_result_t results[8];
    size_t n_results;
    zl_job_outcome_t outcomes[4];
    char result[4][64];
    size_t n_outcomes;
} lib_t;

static void
s_lib_result (const zl_producer_result_t *r, void *arg)
{
    lib_t *l = arg;
    if (l->n_results < 8)
        l->results[l->n_results++] = *r;
}

static void
s_lib_outcome (const zl_producer_outcome_t *o, void *arg)
{
    lib_t *l = arg;
    if (l->n_outcomes < 4) {
        snprintf (l->result[l->n_outcomes], 64, "%.*s", (int)o->result.len,
                  (const char *)o->result.data);
        l->outcomes[l->n_outcomes++] = *o;
    }
}

static void
test_producer_library_workflow (void **state)
{
    (void)state;
    fx_t fx;
    s_start (&fx, NULL, "a");
    lib_t lib = {0};
    zl_producer_opts_t opts;
    zl_producer_opts_defaults (&opts);
    opts.endpoint = zlt_broker_endpoint (fx.broker, "frontend");
    opts.on_result = s_lib_result;
    opts.on_result_arg = &lib;
    opts.on_outcome = s_lib_outcome;
    opts.on_outcome_arg = &lib;
    opts.deadline_ms = 10000;
    zl_producer_t *p = zl_producer_new (&opts);
    assert_non_null (p);
    size_t pa[] = {0}, pbc[] = {1, 2}, bad[] = {3};
    zl_producer_job_t jobs[4] = {
        {.tenant = "t", .lane = "a", .payload = "LA", .payload_len = 2},
        {.tenant = "t",
         .lane = "a",
         .payload = "LB",
         .payload_len = 2,
         .parents_in_batch = pa,
         .n_parents_in_batch = 1},
        {.tenant = "t",
         .lane = "a",
         .payload = "LC",
         .payload_len = 2,
         .parents_in_batch = pa,
         .n_parents_in_batch = 1},
        {.tenant = "t",
         .lane = "a",
         .payload = "LD",
         .payload_len = 2,
         .parents_in_batch = pbc,
         .n_parents_in_batch = 2},
    };
    // an index that is not earlier is refused, nothing taken
    jobs[3].parents_in_batch = bad;
    assert_int_equal (zl_producer_submit_batch (p, jobs, 4, NULL), -1);
    jobs[3].parents_in_batch = pbc;
    uint64_t seqs[4];
    assert_int_equal (zl_producer_submit_batch (p, jobs, 4, seqs), 4);
    assert_int_equal (zl_producer_wait (p, 10000), 0);
    assert_int_equal (lib.n_results, 4);
    uint64_t d = 0;
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal (lib.results[i].status, ZL_PRODUCER_ACCEPTED);
        if (lib.results[i].seq == seqs[3])
            d = lib.results[i].job_id;
    }
    assert_true (d > 0);
    uint64_t watch[] = {d, 999999};
    assert_int_equal (zl_producer_watch (p, watch, 2), 0);
    assert_int_equal (zl_producer_wait_outcomes (p, WAIT_MS), 0);
    assert_int_equal (lib.n_outcomes, 2);
    for (size_t i = 0; i < 2; i++) {
        if (lib.outcomes[i].job_id == d) {
            assert_true (lib.outcomes[i].found && lib.outcomes[i].final);
            assert_int_equal (lib.outcomes[i].outcome, ZL_OUTCOME_ACKED);
            assert_string_equal (lib.result[i], "res-LD");
        } else {
            assert_int_equal (lib.outcomes[i].job_id, 999999);
            assert_false (lib.outcomes[i].found);
        }
    }
    char *pd = zlt_path (zlt_broker_dir (fx.broker), "parents-LD");
    char *text = zlt_read_file (pd, NULL);
    assert_non_null (text);
    assert_non_null (strstr (text, "res-LB"));
    assert_non_null (strstr (text, "res-LC"));
    free (text);
    free (pd);
    zl_producer_destroy (&p);
    s_end (&fx);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown (test_diamond, zlt_teardown),
        cmocka_unit_test_teardown (test_submit_wait, zlt_teardown),
        cmocka_unit_test_teardown (test_result_too_large, zlt_teardown),
        cmocka_unit_test_teardown (test_outcomes_survive_restart, zlt_teardown),
#ifdef ZLT_PG
        cmocka_unit_test_teardown (test_outcomes_survive_restart_on_postgresql, s_pg_teardown),
#endif
        cmocka_unit_test_teardown (test_retention_expiry, zlt_teardown),
        cmocka_unit_test_teardown (test_producer_library_workflow, zlt_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
