/*  test_crash: the broker's durable store, with real processes and real
    crashes (SIGKILL). A broker killed and restarted several times while two
    producers submit 20,000 jobs and two workers run them loses none and runs
    nothing nobody submitted; a poisoned job keeps its attempts and history
    across a restart; recovery restores ready order, delayed timers, the DLQ
    and the idempotency window; a foreign or damaged data directory, or one
    a running broker uses, is refused cleanly; a full store rejects with
    store_full and recovers once the queue drains. Run some of them with
    ZLT_FILTER='test_poison*'. */
#define _GNU_SOURCE
#include "zltest.h"
#ifdef ZLT_PG
#include "pg_harness.h"
#endif

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#define CRASH_SUBMITTERS 2
#define CRASH_PER_SUBMIT 10000
#define CRASH_JOBS (CRASH_SUBMITTERS * CRASH_PER_SUBMIT)
#define CRASH_SUBMIT_MS 600000 // the submitters' phase, kills included (ASan: 3-5 min)
#define CRASH_DRAIN_MS 180000  // every printed job executed, after the submitters
#define RESTART_MS 15000       // one broker restart (a busy port is retried)
#define SETTLE_MS 30000        // the broker's gauges reach zero
#define POLL_MS 10             // how often files are looked at while waiting

// ---------------------------------------------------------------- helpers
// Counts the lines of a growing file, reading only what was added.
typedef struct {
    const char *path;
    FILE *f;
    size_t lines;
} line_counter_t;

static size_t
s_counter_update (line_counter_t *c)
{
    if (!c->f)
        c->f = fopen (c->path, "r");
    if (!c->f)
        return c->lines;
    char buf[65536];
    size_t n;
    while ((n = fread (buf, 1, sizeof buf, c->f)) > 0)
        for (size_t i = 0; i < n; i++)
            c->lines += buf[i] == '\n';
    clearerr (c->f); // the file grows: read on from here next time
    return c->lines;
}

static void
s_counter_close (line_counter_t *c)
{
    if (c->f)
        fclose (c->f);
    c->f = NULL;
}

// Spawn a zlane-worker on `lanes` running `cmd`; its stderr in
// <dir>/<name>.err (returned in *err_out, caller frees).
static zlt_proc_t *
s_worker (zlt_broker_t *broker, const char *name, const char *lanes, const char *cmd,
          const char *concurrency, char **err_out)
{
    char *bin = zlt_bin ("zlane-worker");
    char file[96];
    snprintf (file, sizeof file, "%s.err", name);
    char *err = zlt_path (zlt_broker_dir (broker), file);
    const char *argv[] = {bin,
                          "--broker",
                          zlt_broker_endpoint (broker, "backend"),
                          "--lanes",
                          lanes,
                          "--exec",
                          cmd,
                          "--concurrency",
                          concurrency,
                          "--name",
                          name,
                          NULL};
    zlt_proc_t *p = zlt_spawn (argv, NULL, NULL, err);
    assert_non_null (p);
    free (bin);
    if (err_out)
        *err_out = err;
    else
        free (err);
    return p;
}

// Fail the test, showing the broker's stderr and `extra` (may be NULL).
static void
s_dump (zlt_broker_t *broker, const char *extra_title, const char *extra)
{
    zlt_broker_dump (broker, 3000);
    if (extra)
        zlt_dump_file (extra_title, extra, 2000);
}

// Run zlane-submit with `opts` (NULL-terminated) on the broker's frontend,
// stdout to `out` and stderr to `err` (both made afresh); returns its exit
// code.
static int
s_submit (zlt_broker_t *broker, const char *const opts[], const char *out, const char *err)
{
    char *bin = zlt_bin ("zlane-submit");
    const char *argv[64];
    size_t n = 0;
    argv[n++] = bin;
    argv[n++] = "--broker";
    argv[n++] = zlt_broker_endpoint (broker, "frontend");
    for (size_t i = 0; opts[i] && n < 63; i++)
        argv[n++] = opts[i];
    argv[n] = NULL;
    unlink (out); // the harness appends: each run gets a fresh file
    unlink (err);
    int code = zlt_run (argv, NULL, out, err, 60000);
    free (bin);
    return code;
}

// Wait until lane `lane` (tenant NULL = all) has nothing ready, delayed or
// in flight; returns 0, or -1 after `timeout_ms` (the last gauges printed).
static int
s_wait_idle (zlt_client_t *admin, const char *lane, int timeout_ms, zl_group_stats_t *g)
{
    int64_t deadline = zlt_now_ms () + timeout_ms;
    for (;;) {
        if (zlt_group (admin, lane, NULL, g) == 0 && g->ready + g->delayed + g->in_flight == 0)
            return 0;
        if (zlt_now_ms () >= deadline) {
            fprintf (stderr,
                     "lane %s not idle after %d ms: ready %" PRIu64 ", delayed %" PRIu64
                     ", in flight %" PRIu64 ", dlq %" PRIu64 "\n",
                     lane, timeout_ms, g->ready, g->delayed, g->in_flight, g->dlq);
            return -1;
        }
        poll (NULL, 0, 20);
    }
}

// Kill the broker with SIGKILL and start it again on the same endpoints and
// data; fails the test if it does not come back. Returns the milliseconds
// from the kill until the new broker was listening.
static int64_t
s_crash (zlt_broker_t *broker)
{
    int64_t t0 = zlt_now_ms ();
    assert_int_equal (zlt_broker_kill (broker), 0);
    assert_int_equal (zlt_proc_exit_code (zlt_broker_proc (broker)), 128 + SIGKILL);
    if (zlt_broker_restart (broker, RESTART_MS) != 0)
        fail_msg ("the broker did not come back after SIGKILL");
    return zlt_now_ms () - t0;
}

// ---------------------------------------------------------------- handler logs
// One line of zlane-testhandler --log: "start ID ATT PID MS" or
// "end ID ATT PID MS RC".
typedef struct {
    bool start;
    uint64_t id;
    unsigned attempt;
    long long ms;
    int rc;
} log_line_t;

// Parse a --log file; returns the lines (caller frees) and sets *n.
static log_line_t *
s_read_log (const char *path, size_t *n)
{
    char *text = zlt_read_file (path, NULL);
    *n = 0;
    if (!text)
        return NULL;
    size_t cap = 64;
    log_line_t *lines = malloc (cap * sizeof *lines);
    char *save = NULL;
    for (char *line = strtok_r (text, "\n", &save); line; line = strtok_r (NULL, "\n", &save)) {
        log_line_t l = {0};
        long pid;
        if (sscanf (line, "start %" SCNu64 " %u %ld %lld", &l.id, &l.attempt, &pid, &l.ms) == 4)
            l.start = true;
        else if (sscanf (line, "end %" SCNu64 " %u %ld %lld %d", &l.id, &l.attempt, &pid, &l.ms,
                         &l.rc) != 5)
            fail_msg ("%s: malformed line '%s'", path, line);
        if (*n == cap)
            lines = realloc (lines, (cap *= 2) * sizeof *lines);
        lines[(*n)++] = l;
    }
    free (text);
    return lines;
}

// Return how many "end" lines a --log file has.
static size_t
s_log_ends (const char *path)
{
    size_t n, ends = 0;
    log_line_t *lines = s_read_log (path, &n);
    for (size_t i = 0; i < n; i++)
        ends += !lines[i].start;
    free (lines);
    return ends;
}

// Wait until the --log file has at least `want` end lines; returns 0 or -1.
static int
s_wait_log_ends (const char *path, size_t want, int timeout_ms)
{
    int64_t deadline = zlt_now_ms () + timeout_ms;
    while (s_log_ends (path) < want) {
        if (zlt_now_ms () >= deadline)
            return -1;
        poll (NULL, 0, 20);
    }
    return 0;
}

// ---------------------------------------------------------------- zlane-ctl --json
typedef struct {
    char lane[64], tenant[64];
    uint64_t ready, delayed, in_flight, dlq;
} group_t;

// Run `zlane-ctl --json stats` and parse its lane x tenant groups into
// `out` (at most `cap`); returns how many, or fails the test.
static size_t
s_ctl_groups (zlt_broker_t *broker, group_t *out, size_t cap)
{
    char *bin = zlt_bin ("zlane-ctl");
    char *file = zlt_path (zlt_broker_dir (broker), "ctl-stats.json");
    const char *argv[] = {bin,      "--admin", zlt_broker_endpoint (broker, "admin"),
                          "--json", "stats",   NULL};
    unlink (file); // the harness appends
    int code = zlt_run (argv, NULL, file, NULL, 15000);
    if (code != 0)
        fail_msg ("zlane-ctl --json stats: exit %d", code);
    char *text = zlt_read_file (file, NULL);
    assert_non_null (text);
    const char *p = strstr (text, "\"groups\":[");
    if (!p)
        fail_msg ("zlane-ctl --json stats has no groups: %s", text);
    size_t n = 0;
    while ((p = strstr (p, "{\"lane\":\""))) {
        group_t g = {0};
        if (sscanf (p,
                    "{\"lane\":\"%63[^\"]\",\"tenant\":\"%63[^\"]\",\"ready\":%" SCNu64
                    ",\"delayed\":%" SCNu64 ",\"in_flight\":%" SCNu64 ",\"dlq\":%" SCNu64,
                    g.lane, g.tenant, &g.ready, &g.delayed, &g.in_flight, &g.dlq) != 6)
            fail_msg ("zlane-ctl --json stats: unexpected group '%.120s'", p);
        if (n == cap)
            fail_msg ("zlane-ctl --json stats: more than %zu groups", cap);
        out[n++] = g;
        p++;
    }
    free (text);
    free (file);
    free (bin);
    return n;
}

static const group_t *
s_group_find (const group_t *groups, size_t n, const char *lane, const char *tenant)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp (groups[i].lane, lane) && !strcmp (groups[i].tenant, tenant))
            return &groups[i];
    return NULL;
}

// One attempt of `zlane-ctl --json dlq show ID`.
typedef struct {
    unsigned attempt;
    char outcome[32];
    char error[512]; // as JSON text (escapes kept)
} attempt_t;

// Copy the JSON string value after `key` ("\"error\":\"") into `out`.
static const char *
s_json_field (const char *from, const char *key, char *out, size_t size)
{
    const char *p = strstr (from, key);
    if (!p)
        return NULL;
    p += strlen (key);
    size_t n = 0;
    while (*p && *p != '"') {
        if (*p == '\\' && p[1]) {
            if (n + 1 < size)
                out[n++] = *p;
            p++;
        }
        if (n + 1 < size)
            out[n++] = *p;
        p++;
    }
    out[n] = '\0';
    return *p == '"' ? p + 1 : NULL;
}

// Parse the attempts of a dead letter shown as JSON; returns how many.
static size_t
s_dlq_attempts (const char *json, attempt_t *out, size_t cap)
{
    const char *p = strstr (json, "\"attempts\":[");
    if (!p)
        return 0;
    size_t n = 0;
    while (n < cap && (p = strstr (p, "{\"attempt\":"))) {
        attempt_t *a = &out[n];
        if (sscanf (p, "{\"attempt\":%u", &a->attempt) != 1)
            break;
        p = s_json_field (p, "\"outcome\":\"", a->outcome, sizeof a->outcome);
        if (!p)
            break;
        p = s_json_field (p, "\"error\":\"", a->error, sizeof a->error);
        if (!p)
            break;
        n++;
    }
    return n;
}

// ---------------------------------------------------------------- 1. crashes
/*  20,000 jobs from two producers (10,000 lines each, two tenants), two
    workers running them, and the broker SIGKILLed and restarted when the
    producers' printed ids cross 25, 50 and 75 % of the total, and once more
    as the producers finish. The broker's --max-depth keeps the producers
    paced by the workers, so every kill lands with jobs on the wire in both
    directions. Every printed id must run at least once, and the broker
    must end with nothing queued. Duplicate executions (jobs leased or acked
    but not yet committed at a crash) are allowed by at-least-once and
    counted. An unprinted id may run only as a Submit the producer was never
    answered and sent again: on LMDB a plain job leaves for its worker while
    the commit that accepts it runs, and a crash can undo that commit (README
    "Durability"); such a run must carry one of the input lines, and there
    are at most as many as the producers resent. Nothing else may run, and
    every run of a printed id carries its own line (no id given twice). */
static void
s_crash_restarts_lose_nothing (void **state, const char *store)
{
    int64_t t0 = zlt_now_ms ();
    const char *args[] = {"--lane",      "a",    "--durability",           "fsync",
                          "--max-depth", "2000", store ? "--store" : NULL, store,
                          NULL};
    zlt_broker_t *broker = zlt_broker_start (args);
    assert_non_null (broker);
    const char *dir = zlt_broker_dir (broker);
    zlt_client_t *admin = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (broker, "admin"));
    assert_non_null (admin);
    char *handler = zlt_bin ("zlane-testhandler");
    char *record = zlt_path (dir, "record");
    char *cmd;
    assert_true (asprintf (&cmd, "'%s' --record '%s' --record-payload", handler, record) > 0);

    enum { WORKERS = 2 };
    zlt_proc_t *workers[WORKERS];
    char *worker_err[WORKERS];
    for (int w = 0; w < WORKERS; w++) {
        char name[32];
        snprintf (name, sizeof name, "worker%d", w + 1);
        workers[w] = s_worker (broker, name, "a", cmd, "4", &worker_err[w]);
    }
    if (zlt_wait_counter (admin, "workers_ready", WORKERS, 10000) != 0) {
        for (int w = 0; w < WORKERS; w++)
            zlt_dump_file ("zlane-worker stderr", worker_err[w], 2000);
        fail_msg ("the workers did not say Ready");
    }

    char *submit_bin = zlt_bin ("zlane-submit");
    zlt_proc_t *submits[CRASH_SUBMITTERS];
    char *outs[CRASH_SUBMITTERS], *errs[CRASH_SUBMITTERS];
    line_counter_t counters[CRASH_SUBMITTERS];
    for (int s = 0; s < CRASH_SUBMITTERS; s++) {
        char tenant[32], name[64];
        snprintf (tenant, sizeof tenant, "tenant%d", s + 1);
        snprintf (name, sizeof name, "submit%d.in", s + 1);
        char *in = zlt_path (dir, name);
        zlt_write_lines (in, tenant, CRASH_PER_SUBMIT);
        snprintf (name, sizeof name, "submit%d.out", s + 1);
        outs[s] = zlt_path (dir, name);
        snprintf (name, sizeof name, "submit%d.err", s + 1);
        errs[s] = zlt_path (dir, name);
        const char *argv[] = {submit_bin, "--broker",  zlt_broker_endpoint (broker, "frontend"),
                              "--tenant", tenant,      "--lane",
                              "a",        "--lines",   "--file",
                              in,         "--timeout", "120s",
                              "--json",   "-v",        NULL};
        submits[s] = zlt_spawn (argv, NULL, outs[s], errs[s]);
        assert_non_null (submits[s]);
        counters[s] = (line_counter_t){outs[s], NULL, 0};
        free (in);
    }

    // the kills: as the printed ids cross 25, 50 and 75 % of all jobs
    enum { PLANNED = 3, MAX_RESTARTS = 8 };
    const size_t marks[PLANNED] = {CRASH_JOBS / 4, CRASH_JOBS / 2, CRASH_JOBS * 3 / 4};
    size_t printed_at[MAX_RESTARTS], executed_at[MAX_RESTARTS];
    int64_t down_ms[MAX_RESTARTS];
    int restarts = 0;
    int64_t deadline = zlt_now_ms () + CRASH_SUBMIT_MS;
    for (;;) {
        size_t printed = 0;
        int running = 0;
        for (int s = 0; s < CRASH_SUBMITTERS; s++) {
            printed += s_counter_update (&counters[s]);
            running += zlt_proc_wait (submits[s], 0) != 0;
        }
        if (!running)
            break;
        if (restarts < PLANNED && printed >= marks[restarts]) {
            printed_at[restarts] = printed;
            executed_at[restarts] = zlt_count_lines (record);
            down_ms[restarts] = s_crash (broker);
            restarts++;
            continue;
        }
        if (zlt_now_ms () >= deadline) {
            for (int s = 0; s < CRASH_SUBMITTERS; s++)
                zlt_dump_file ("zlane-submit stderr", errs[s], 2000);
            s_dump (broker, NULL, NULL);
            fail_msg ("the submitters did not finish within %d ms (%zu ids printed)",
                      CRASH_SUBMIT_MS, printed);
        }
        poll (NULL, 0, POLL_MS);
    }
    int64_t t_submitted = zlt_now_ms ();
    for (int s = 0; s < CRASH_SUBMITTERS; s++) {
        s_counter_close (&counters[s]);
        int code = zlt_proc_exit_code (submits[s]);
        if (code != 0) {
            zlt_dump_file ("zlane-submit stderr", errs[s], 3000);
            fail_msg ("zlane-submit %d exited %d", s + 1, code);
        }
    }

    // every id printed, once, and no two printed lines name the same job
    uint64_t *ids = malloc ((CRASH_JOBS + 1) * sizeof *ids);
    size_t n_ids = 0, duplicates_said = 0;
    for (int s = 0; s < CRASH_SUBMITTERS; s++) {
        char *text = zlt_read_file (outs[s], NULL);
        assert_non_null (text);
        size_t n = zlt_ids_parse_json (text, ids + n_ids, CRASH_JOBS + 1 - n_ids, outs[s],
                                       &duplicates_said);
        free (text);
        if (n != CRASH_PER_SUBMIT)
            fail_msg ("zlane-submit %d printed %zu ids for %d lines", s + 1, n, CRASH_PER_SUBMIT);
        n_ids += n;
    }
    uint64_t *by_line = malloc (n_ids * sizeof *by_line); // ids[s * PER + i]: line i of s
    assert_non_null (by_line);
    memcpy (by_line, ids, n_ids * sizeof *ids);
    zlt_ids_sort (ids, n_ids);
    for (size_t i = 1; i < n_ids; i++)
        if (ids[i] == ids[i - 1])
            fail_msg ("job id %" PRIu64 " was printed for two different lines", ids[i]);

    // what the producers said about the crashes (-v)
    size_t reconnects = 0, resent = 0;
    for (int s = 0; s < CRASH_SUBMITTERS; s++) {
        char *text = zlt_read_file (errs[s], NULL);
        for (const char *p = text; p && (p = strstr (p, "; resending ")); p++) {
            reconnects++;
            resent += strtoul (p + strlen ("; resending "), NULL, 10);
        }
        free (text);
    }

    // one more crash while the last jobs drain (if any are left)
    if (zlt_count_lines (record) < CRASH_JOBS) {
        printed_at[restarts] = n_ids;
        executed_at[restarts] = zlt_count_lines (record);
        down_ms[restarts] = s_crash (broker);
        restarts++;
    }

    // drain: until every printed id has run at least once; then until the
    // broker holds nothing (a job nobody was told of would run now)
    unsigned *runs = calloc (n_ids, sizeof *runs);
    zlt_tally_t t;
    deadline = zlt_now_ms () + CRASH_DRAIN_MS;
    while (zlt_tally (record, ids, n_ids, runs, &t), t.lost && zlt_now_ms () < deadline)
        poll (NULL, 0, 100);
    zl_group_stats_t g;
    bool idle = t.lost == 0 && s_wait_idle (admin, "a", SETTLE_MS, &g) == 0;
    zlt_tally (record, ids, n_ids, runs, &t);
    size_t lost = t.lost, duplicates = t.duplicates, reruns = t.reruns, lines = t.lines;
    const char *const tenants[CRASH_SUBMITTERS] = {"tenant1", "tenant2"};
    zlt_payloads_t pl;
    zlt_payloads (record, by_line, tenants, CRASH_SUBMITTERS, CRASH_PER_SUBMIT, &pl);
    size_t unanswered = pl.unanswered, foreign = pl.foreign;
    uint64_t first_foreign = pl.first_foreign;
    int64_t t_drained = zlt_now_ms ();

    fprintf (stderr,
             "crash: lost = %zu, duplicate executions = %zu, jobs = %d, restarts = %d\n"
             "crash: %zu executions (%zu on attempt > 1), %zu of jobs nobody submitted, %zu of "
             "Submits never answered (sent to a worker before a commit the crash undid); %zu "
             "jobs resent after a crash were answered duplicate=true\n"
             "crash: the producers reconnected %zu times and resent %zu unanswered jobs\n",
             lost, duplicates, CRASH_JOBS, restarts, lines, reruns, foreign, unanswered,
             duplicates_said, reconnects, resent);
    for (int r = 0; r < restarts; r++)
        fprintf (stderr,
                 "crash: kill %d at %zu ids printed, %zu executions; back listening after "
                 "%" PRId64 " ms\n",
                 r + 1, printed_at[r], executed_at[r], down_ms[r]);
    fprintf (stderr,
             "crash: submitted in %" PRId64 " ms, drained %" PRId64 " ms later (%" PRId64
             " ms in all)\n",
             t_submitted - t0, t_drained - t_submitted, t_drained - t0);
    char *broker_err = zlt_path (dir, "broker.err");
    char *log = zlt_read_file (broker_err, NULL);
    char *save = NULL;
    size_t stale = 0, unknown = 0, not_ready = 0;
    for (char *line = log ? strtok_r (log, "\n", &save) : NULL; line;
         line = strtok_r (NULL, "\n", &save)) {
        stale += strstr (line, "stale_lease:") != NULL;
        unknown += strstr (line, "unknown_job:") != NULL;
        not_ready += strstr (line, "not_ready:") != NULL;
        if (strstr (line, "recovered") || strstr (line, " ERROR "))
            fprintf (stderr, "crash: broker said: %s\n", line);
    }
    fprintf (stderr,
             "crash: the brokers refused %zu stale-lease and %zu unknown-job settlements and "
             "told workers %zu times to send Ready\n",
             stale, unknown, not_ready);
    free (log);

    if (lost || foreign) {
        for (size_t i = 0; i < n_ids && lost; i++)
            if (!runs[i]) {
                fprintf (stderr, "crash: job %" PRIu64 " never ran\n", ids[i]);
                break;
            }
        for (int w = 0; w < WORKERS; w++)
            zlt_dump_file ("zlane-worker stderr", worker_err[w], 2000);
        s_dump (broker, NULL, NULL);
        fail_msg ("%zu printed job(s) never ran; %zu execution(s) of jobs nobody submitted (first "
                  "%" PRIu64 ")",
                  lost, foreign, first_foreign);
    }
    zlt_payloads_assert (&pl, resent);
    if (unanswered && store)
        fail_msg ("%zu unprinted jobs ran on the PostgreSQL store, which sends no job before its "
                  "commit",
                  unanswered);
    assert_true (restarts >= 3);

    // the broker agrees: nothing ready, delayed, in flight or dead
    if (!idle) {
        s_dump (broker, NULL, NULL);
        fail_msg ("the broker still holds jobs after every job ran");
    }
    assert_int_equal (g.dlq, 0);
    for (int s = 0; s < CRASH_SUBMITTERS; s++) {
        char tenant[32];
        snprintf (tenant, sizeof tenant, "tenant%d", s + 1);
        assert_int_equal (zlt_group (admin, "a", tenant, &g), 0);
        assert_int_equal (g.ready + g.delayed + g.in_flight + g.dlq, 0);
    }
    zlt_assert_no_sanitizer_report ("zlane-broker stderr", broker_err);
    for (int w = 0; w < WORKERS; w++) {
        assert_int_equal (zlt_proc_exit_code (workers[w]), -1); // still serving
        zlt_proc_destroy (&workers[w]);
        zlt_assert_no_sanitizer_report ("zlane-worker stderr", worker_err[w]);
        free (worker_err[w]);
    }
    for (int s = 0; s < CRASH_SUBMITTERS; s++) {
        zlt_assert_no_sanitizer_report ("zlane-submit stderr", errs[s]);
        zlt_proc_destroy (&submits[s]);
        free (outs[s]);
        free (errs[s]);
    }
    free (broker_err);
    free (runs);
    free (ids);
    free (by_line);
    free (submit_bin);
    free (cmd);
    free (record);
    free (handler);
}

static void
test_crash_restarts_lose_nothing (void **state)
{
    s_crash_restarts_lose_nothing (state, NULL); // LMDB in the broker's dir
}

#ifdef ZLT_PG
// The same on the PostgreSQL store, a cluster of the test's own: the broker
// is SIGKILLed and restarted on the database; the database is not touched.
static void
test_crash_restarts_lose_nothing_on_postgresql (void **state)
{
    zlh_pg_t *pg = zlh_pg_start ();
    assert_non_null (pg);
    s_crash_restarts_lose_nothing (state, zlh_pg_conninfo (pg));
    zlh_pg_stop (&pg);
}

static int
s_pg_teardown (void **state)
{
    zlt_teardown (state);
    return zlh_pg_teardown (state);
}
#endif

// ---------------------------------------------------------------- 2. poison
// True if the --log file has a start line for attempt `attempt`.
static bool
s_log_started (const char *path, unsigned attempt)
{
    size_t n;
    bool found = false;
    log_line_t *lines = s_read_log (path, &n);
    for (size_t i = 0; i < n; i++)
        found |= lines[i].start && lines[i].attempt == attempt;
    free (lines);
    return found;
}

/*  A job that always fails (exit 1, "boom" on stderr), max 4 attempts: after
    two failed attempts (both nacks recorded by the broker) the broker is
    SIGKILLed and restarted, between attempts or, with `leased_at_kill`,
    while attempt 3 runs (its handler sleeps). The job goes on from its
    attempt count and dies after 4 attempts in all, numbered 1..4, the first
    two the transient "boom" failures from before the crash; an attempt
    running at the kill is recorded as broker_restart and counts. */
static void
s_poison_across_restart (bool leased_at_kill)
{
    const char *args[] = {"--lane",
                          "p",
                          "--max-attempts",
                          "4",
                          "--backoff-base",
                          "200ms",
                          "--backoff-cap",
                          "1s",
                          "--durability",
                          "fsync",
                          NULL};
    zlt_broker_t *broker = zlt_broker_start (args);
    assert_non_null (broker);
    const char *dir = zlt_broker_dir (broker);
    zlt_client_t *admin = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (broker, "admin"));
    assert_non_null (admin);
    char *handler = zlt_bin ("zlane-testhandler");
    char *log = zlt_path (dir, "log"), *out = zlt_path (dir, "submit.out"),
         *err = zlt_path (dir, "submit.err");
    char *cmd;
    assert_true (asprintf (&cmd, "'%s' --poison boom --log '%s'%s", handler, log,
                           leased_at_kill ? " --sleep 3000 --sleep-attempt 3" : "") > 0);
    char *worker_err;
    zlt_proc_t *worker = s_worker (broker, "poison-worker", "p", cmd, "1", &worker_err);

    const char *opts[] = {"--tenant", "t1", "--lane", "p", "--timeout", "10s", "boom", NULL};
    assert_int_equal (s_submit (broker, opts, out, err), 0);
    char *text = zlt_read_file (out, NULL);
    uint64_t id = strtoull (text, NULL, 10);
    free (text);
    assert_true (id > 0);

    // two attempts failed, and the broker has recorded both nacks durably.
    // A stats reply may be sent before its turn's commit, and the commit
    // thread commits while later turns answer: zlt_wait_turn_committed
    // waits until the turns up to the one that showed the nacks are
    // committed (loop_turns_committed).
    if (s_wait_log_ends (log, 2, 20000) != 0) {
        zlt_dump_file ("zlane-worker stderr", worker_err, 2000);
        s_dump (broker, "handler log", log);
        fail_msg ("the poisoned job did not fail twice");
    }
    int64_t deadline = zlt_now_ms () + 10000;
    zl_group_stats_t nacked = {0};
    while ((zlt_group (admin, "p", "t1", &nacked) != 0 || nacked.nacked_transient < 2) &&
           zlt_now_ms () < deadline)
        poll (NULL, 0, 10);
    if (nacked.nacked_transient < 2 || zlt_wait_turn_committed (admin, 10000) != 0)
        fail_msg ("the broker did not record two transient nacks in a committed turn");
    zl_group_stats_t g;
    if (leased_at_kill) { // attempt 3 is leased and running
        deadline = zlt_now_ms () + 10000;
        while (!s_log_started (log, 3)) {
            if (zlt_now_ms () >= deadline)
                fail_msg ("attempt 3 did not start");
            poll (NULL, 0, 10);
        }
        // its Dispatch may have left before its lease's commit: the kill
        // must find attempt 3 on record
        assert_int_equal (zlt_wait_turn_committed (admin, 10000), 0);
    }
    size_t ends_before = s_log_ends (log);
    int64_t down = s_crash (broker);

    // it runs on to the DLQ
    deadline = zlt_now_ms () + 30000;
    while (zlt_group (admin, "p", "t1", &g) != 0 || g.dlq < 1) {
        if (zlt_now_ms () >= deadline) {
            zlt_dump_file ("zlane-worker stderr", worker_err, 2000);
            s_dump (broker, "handler log", log);
            fail_msg ("the poisoned job did not reach the DLQ after the restart");
        }
        poll (NULL, 0, 20);
    }
    assert_int_equal (g.dlq, 1);
    assert_int_equal (g.ready + g.delayed + g.in_flight, 0);

    char *ctl = zlt_bin ("zlane-ctl");
    char idtext[32];
    snprintf (idtext, sizeof idtext, "%" PRIu64, id);
    char *show = zlt_path (dir, "show.json");
    const char *argv[] = {ctl,      "--admin", zlt_broker_endpoint (broker, "admin"),
                          "--json", "dlq",     "show",
                          idtext,   NULL};
    assert_int_equal (zlt_run (argv, NULL, show, NULL, 15000), 0);
    char *json = zlt_read_file (show, NULL);
    assert_non_null (json);
    attempt_t att[16];
    size_t n = s_dlq_attempts (json, att, 16);
    fprintf (stderr,
             "poison (%s): job %" PRIu64 ", %zu handler run(s) ended before the kill, back in "
             "%" PRId64 " ms; dead letter:\n",
             leased_at_kill ? "killed while attempt 3 ran" : "killed between attempts", id,
             ends_before, down);
    for (size_t i = 0; i < n; i++)
        fprintf (stderr, "poison:   #%u %s: %s\n", att[i].attempt, att[i].outcome, att[i].error);
    // every check below says what was wrong, then everything is shown
    char bad[256] = "";
    size_t restarted = 0;
    if (n != 4)
        snprintf (bad, sizeof bad, "the dead letter has %zu attempts, wanted 4", n);
    for (size_t i = 0; i < n && !bad[0]; i++) {
        bool boom = strstr (att[i].error, "boom") != NULL;
        bool transient = !strcmp (att[i].outcome, "transient");
        if (att[i].attempt != i + 1)
            snprintf (bad, sizeof bad, "entry %zu is attempt %u", i + 1, att[i].attempt);
        else if (i < 2 && !(transient && boom)) // the two failures from before the crash
            snprintf (bad, sizeof bad, "attempt %zu is not a transient boom", i + 1);
        else if (!strcmp (att[i].outcome, "broker_restart"))
            restarted++;
        else if (!(transient && boom))
            snprintf (bad, sizeof bad, "attempt %zu: %s", i + 1, att[i].outcome);
    }
    if (!bad[0] && restarted > 1)
        snprintf (bad, sizeof bad, "%zu attempts ended by the one restart", restarted);
    if (!bad[0] && leased_at_kill && strcmp (att[2].outcome, "broker_restart"))
        snprintf (bad, sizeof bad, "attempt 3 ran at the kill but is '%s'", att[2].outcome);
    if (!bad[0] && strcmp (att[3].outcome, "transient")) // it ran after the restart
        snprintf (bad, sizeof bad, "attempt 4 is '%s'", att[3].outcome);

    // the handler saw attempts 1, 2, then went on from there (never from 1)
    size_t n_log;
    log_line_t *lines = s_read_log (log, &n_log);
    unsigned last = 0;
    for (size_t i = 0; i < n_log; i++)
        fprintf (stderr, "poison:   handler %s job %" PRIu64 " attempt %u at +%lld ms%s\n",
                 lines[i].start ? "start" : "end  ", lines[i].id, lines[i].attempt,
                 lines[i].ms - lines[0].ms,
                 lines[i].start ? ""
                 : lines[i].rc  ? " (failed)"
                                : " (ok)");
    for (size_t i = 0; i < n_log && !bad[0]; i++) {
        if (!lines[i].start)
            continue;
        if (lines[i].id != id)
            snprintf (bad, sizeof bad, "the handler ran job %" PRIu64, lines[i].id);
        else if (lines[i].attempt <= last || lines[i].attempt > 4)
            snprintf (bad, sizeof bad, "the handler ran attempt %u after attempt %u",
                      lines[i].attempt, last);
        last = lines[i].attempt;
    }
    free (lines);
    if (!bad[0] && last != 4)
        snprintf (bad, sizeof bad, "the handler's last attempt was %u", last);
    if (!bad[0] && zlt_proc_exit_code (worker) != -1)
        snprintf (bad, sizeof bad, "the worker exited (%d)", zlt_proc_exit_code (worker));
    if (bad[0]) {
        fprintf (stderr, "%s\n", json);
        zlt_dump_file ("zlane-worker stderr", worker_err, 4000);
        s_dump (broker, NULL, NULL);
        fail_msg ("poison: %s", bad);
    }
    zlt_proc_destroy (&worker);
    free (json);
    free (show);
    free (ctl);
    free (worker_err);
    free (cmd);
    free (out);
    free (err);
    free (log);
    free (handler);
}

static void
test_poison_killed_between_attempts (void **state)
{
    s_poison_across_restart (false);
}

static void
test_poison_killed_while_attempt_runs (void **state)
{
    s_poison_across_restart (true);
}

// ---------------------------------------------------------------- 3. recovery
#define REC_JOBS 1000
#define REC_DELAYED 5
#define REC_DELAY_MS 3000

/*  With no worker running: 2 dead letters (a worker exiting 65, then
    stopped), 1,000 ready jobs over 3 tenants and 2 lanes (FIFO scheduler),
    and 5 jobs delayed by 3 s. After SIGKILL and a restart zlane-ctl shows
    the same ready, delayed and DLQ counts per lane and tenant; one worker
    (concurrency 1) then runs the 1,000 jobs in submission order per lane,
    and the delayed ones not before their delay is over. */
static void
test_recovery_order_and_content (void **state)
{
    const char *args[] = {"--lane",      "l1",   "--lane",       "l2",    "--lane", "dead",
                          "--scheduler", "fifo", "--durability", "fsync", NULL};
    zlt_broker_t *broker = zlt_broker_start (args);
    assert_non_null (broker);
    const char *dir = zlt_broker_dir (broker);
    zlt_client_t *admin = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (broker, "admin"));
    assert_non_null (admin);
    char *handler = zlt_bin ("zlane-testhandler");
    char *out = zlt_path (dir, "submit.out"), *err = zlt_path (dir, "submit.err");

    // two dead letters, made by a worker that says "bad input"
    char *in = zlt_path (dir, "dead.in");
    zlt_write_lines (in, "bad", 2);
    const char *dead_opts[] = {"--tenant", "t1", "--lane", "dead", "--lines", "--file", in, NULL};
    assert_int_equal (s_submit (broker, dead_opts, out, err), 0);
    char *cmd;
    assert_true (asprintf (&cmd, "'%s' --exit 65", handler) > 0);
    zlt_proc_t *bad_worker = s_worker (broker, "bad-worker", "dead", cmd, "1", NULL);
    free (cmd);
    zl_group_stats_t g;
    int64_t deadline = zlt_now_ms () + 15000;
    while (zlt_group (admin, "dead", "t1", &g) != 0 || g.dlq < 2) {
        if (zlt_now_ms () >= deadline)
            fail_msg ("the two bad jobs were not dead-lettered");
        poll (NULL, 0, 20);
    }
    zlt_proc_destroy (&bad_worker);
    free (in);

    // 1,000 jobs: tenant t1..t3 by line, lane l1/l2 in runs of 7
    static const char *const tenants[] = {"t1", "t2", "t3"}, *const lanes[] = {"l1", "l2"};
    in = zlt_path (dir, "jobs.tsv");
    FILE *f = fopen (in, "w");
    assert_non_null (f);
    int line_lane[REC_JOBS], line_tenant[REC_JOBS];
    for (int i = 0; i < REC_JOBS; i++) {
        line_tenant[i] = i % 3;
        line_lane[i] = (i / 7) % 2;
        fprintf (f, "%s\t%s\tjob %d\n", tenants[line_tenant[i]], lanes[line_lane[i]], i);
    }
    assert_int_equal (fclose (f), 0);
    const char *tsv_opts[] = {"--tsv", "--file", in, "--timeout", "30s", NULL};
    if (s_submit (broker, tsv_opts, out, err) != 0) {
        zlt_dump_file ("zlane-submit stderr", err, 2000);
        fail_msg ("zlane-submit --tsv failed");
    }
    free (in);
    uint64_t ids[REC_JOBS];
    char *text = zlt_read_file (out, NULL);
    assert_int_equal (zlt_ids_parse (text, ids, REC_JOBS, out), REC_JOBS);
    free (text);

    // 5 delayed jobs
    in = zlt_path (dir, "delayed.in");
    zlt_write_lines (in, "later", REC_DELAYED);
    char *delayed_out = zlt_path (dir, "delayed.out");
    int64_t delay_wall = zlt_wall_ms (), delay_mono = zlt_now_ms ();
    const char *delay_opts[] = {"--tenant", "t2",      "--lane", "l1", "--delay",
                                "3s",       "--lines", "--file", in,   NULL};
    assert_int_equal (s_submit (broker, delay_opts, delayed_out, err), 0);
    uint64_t delayed_ids[REC_DELAYED];
    text = zlt_read_file (delayed_out, NULL);
    assert_int_equal (zlt_ids_parse (text, delayed_ids, REC_DELAYED, delayed_out), REC_DELAYED);
    free (text);
    free (in);

    // what should be there, per lane x tenant
    typedef struct {
        const char *lane, *tenant;
        uint64_t ready, delayed, dlq;
    } want_t;
    want_t want[8];
    size_t n_want = 0;
    for (int l = 0; l < 2; l++)
        for (int t = 0; t < 3; t++) {
            want_t w = {lanes[l], tenants[t], 0, 0, 0};
            for (int i = 0; i < REC_JOBS; i++)
                w.ready += line_lane[i] == l && line_tenant[i] == t;
            if (l == 0 && t == 1)
                w.delayed = REC_DELAYED;
            want[n_want++] = w;
        }
    want[n_want++] = (want_t){"dead", "t1", 0, 0, 2};

    group_t groups[32];
    for (int pass = 0; pass < 2; pass++) {
        size_t n = s_ctl_groups (broker, groups, 32);
        // before the delay is over the 5 must still be delayed; later (a
        // slow machine) they may have become ready. The time is read once
        // the answer is in (`asked`: the stats were made before it)
        int64_t asked = zlt_now_ms ();
        bool early = asked < delay_mono + REC_DELAY_MS;
        for (size_t i = 0; i < n_want; i++) {
            const group_t *gr = s_group_find (groups, n, want[i].lane, want[i].tenant);
            if (!gr)
                fail_msg ("%s: no group %s/%s", pass ? "after the restart" : "before", want[i].lane,
                          want[i].tenant);
            bool same = gr->dlq == want[i].dlq && gr->in_flight == 0 &&
                        (early ? gr->ready == want[i].ready && gr->delayed == want[i].delayed
                               : gr->ready + gr->delayed == want[i].ready + want[i].delayed);
            if (!same)
                fail_msg ("%s: %s/%s has ready %" PRIu64 " delayed %" PRIu64 " in flight %" PRIu64
                          " dlq %" PRIu64 ", wanted %" PRIu64 "/%" PRIu64 "/0/%" PRIu64,
                          pass ? "after the restart" : "before the restart", want[i].lane,
                          want[i].tenant, gr->ready, gr->delayed, gr->in_flight, gr->dlq,
                          want[i].ready, want[i].delayed, want[i].dlq);
        }
        for (size_t i = 0; i < n; i++) { // nothing anywhere else
            bool known = false;
            for (size_t k = 0; k < n_want; k++)
                known |= !strcmp (groups[i].lane, want[k].lane) &&
                         !strcmp (groups[i].tenant, want[k].tenant);
            if (!known)
                assert_int_equal (
                    groups[i].ready + groups[i].delayed + groups[i].in_flight + groups[i].dlq, 0);
        }
        fprintf (stderr,
                 "recovery: %s: counts as submitted (%s, %" PRId64 " ms after the delay "
                 "was asked for)\n",
                 pass ? "after SIGKILL + restart" : "before the kill",
                 early ? "delayed still delayed" : "delay over: ready + delayed compared",
                 asked - delay_mono);
        if (pass == 0)
            s_crash (broker);
    }

    // one worker, one job at a time, in order
    char *log = zlt_path (dir, "log");
    assert_true (asprintf (&cmd, "'%s' --log '%s'", handler, log) > 0);
    int64_t worker_wall = zlt_wall_ms ();
    char *worker_err;
    zlt_proc_t *worker = s_worker (broker, "fifo-worker", "l1,l2", cmd, "1", &worker_err);
    if (s_wait_log_ends (log, REC_JOBS + REC_DELAYED, 60000) != 0) {
        zlt_dump_file ("zlane-worker stderr", worker_err, 2000);
        s_dump (broker, NULL, NULL);
        fail_msg ("the worker did not run all %d jobs", REC_JOBS + REC_DELAYED);
    }
    size_t n_log;
    log_line_t *lines = s_read_log (log, &n_log);
    int last_line[2] = {-1, -1};
    size_t started = 0, delayed_started = 0;
    long long first_delayed_ms = 0;
    uint64_t sorted[REC_JOBS];
    memcpy (sorted, ids, sizeof sorted);
    zlt_ids_sort (sorted, REC_JOBS);
    for (size_t i = 0; i < n_log; i++) {
        if (!lines[i].start)
            continue;
        started++;
        assert_int_equal (lines[i].attempt, 1);
        bool is_delayed = false;
        for (int k = 0; k < REC_DELAYED; k++)
            is_delayed |= lines[i].id == delayed_ids[k];
        if (is_delayed) {
            if (lines[i].ms < delay_wall + REC_DELAY_MS)
                fail_msg ("delayed job %" PRIu64 " started %lld ms after it was submitted, "
                          "before its %d ms delay",
                          lines[i].id, lines[i].ms - delay_wall, REC_DELAY_MS);
            if (!delayed_started++)
                first_delayed_ms = lines[i].ms;
            continue;
        }
        int at = -1;
        for (int k = 0; k < REC_JOBS; k++)
            if (ids[k] == lines[i].id)
                at = k;
        if (at < 0)
            fail_msg ("the worker ran job %" PRIu64 ", which nobody submitted here", lines[i].id);
        int l = line_lane[at];
        if (at <= last_line[l])
            fail_msg ("lane %s ran line %d (job %" PRIu64 ") after line %d: not FIFO", lanes[l], at,
                      lines[i].id, last_line[l]);
        last_line[l] = at;
    }
    assert_int_equal (started, REC_JOBS + REC_DELAYED);
    assert_int_equal (delayed_started, REC_DELAYED);
    fprintf (stderr,
             "recovery: %d jobs ran in submission order per lane; the worker started %" PRId64
             " ms after the delayed jobs were submitted, the first of them ran after %lld ms\n",
             REC_JOBS, worker_wall - delay_wall, first_delayed_ms - delay_wall);
    free (lines);

    // the dead letters are still there
    if (s_wait_idle (admin, "l1", SETTLE_MS, &g) != 0 || s_wait_idle (admin, "l2", SETTLE_MS, &g))
        fail_msg ("jobs left in l1 or l2");
    assert_int_equal (zlt_group (admin, "dead", "t1", &g), 0);
    assert_int_equal (g.dlq, 2);
    zlt_proc_destroy (&worker);
    free (worker_err);
    free (cmd);
    free (log);
    free (delayed_out);
    free (out);
    free (err);
    free (handler);
}

// ---------------------------------------------------------------- 4. idempotency
// Run zlane-submit --key `key` --json once; returns the job id and sets
// *duplicate.
static uint64_t
s_submit_key (zlt_broker_t *broker, const char *key, bool *duplicate)
{
    char *out = zlt_path (zlt_broker_dir (broker), "key.out");
    char *err = zlt_path (zlt_broker_dir (broker), "key.err");
    unlink (out);
    const char *opts[] = {"--tenant", "t1",        "--lane", "a",    "--key", key,
                          "--json",   "--timeout", "15s",    "once", NULL};
    if (s_submit (broker, opts, out, err) != 0) {
        zlt_dump_file ("zlane-submit stderr", err, 2000);
        fail_msg ("zlane-submit --key %s failed", key);
    }
    char *text = zlt_read_file (out, NULL);
    assert_non_null (text);
    uint64_t seq, id;
    char dup[8];
    if (sscanf (text, "{\"seq\":%" SCNu64 ",\"job_id\":%" SCNu64 ",\"duplicate\":%7[a-z]}", &seq,
                &id, dup) != 3)
        fail_msg ("zlane-submit --json printed '%s'", text);
    *duplicate = !strcmp (dup, "true");
    free (text);
    free (out);
    free (err);
    return id;
}

/*  A key submitted, the broker SIGKILLed and restarted, the key submitted
    again: the same job id with duplicate=true, nothing new queued, and the
    job runs once. The key outlives the job: a third submit after it ran is
    still a duplicate. */
static void
test_idempotency_across_restart (void **state)
{
    const char *args[] = {"--lane", "a", "--durability", "fsync", NULL};
    zlt_broker_t *broker = zlt_broker_start (args);
    assert_non_null (broker);
    zlt_client_t *admin = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (broker, "admin"));
    assert_non_null (admin);
    bool dup;
    uint64_t first = s_submit_key (broker, "order-42", &dup);
    assert_false (dup);
    s_crash (broker);
    uint64_t again = s_submit_key (broker, "order-42", &dup);
    assert_true (dup);
    assert_int_equal (again, first);
    zl_group_stats_t g;
    assert_int_equal (zlt_group (admin, "a", NULL, &g), 0);
    assert_int_equal (g.ready, 1);

    char *handler = zlt_bin ("zlane-testhandler");
    char *record = zlt_path (zlt_broker_dir (broker), "record");
    char *cmd;
    assert_true (asprintf (&cmd, "'%s' --record '%s'", handler, record) > 0);
    zlt_proc_t *worker = s_worker (broker, "key-worker", "a", cmd, "2", NULL);
    if (zlt_wait_counter (admin, "jobs_acked", 1, 15000) != 0)
        fail_msg ("the job was not acked");
    assert_int_equal (s_wait_idle (admin, "a", SETTLE_MS, &g), 0);
    uint64_t third = s_submit_key (broker, "order-42", &dup);
    assert_true (dup);
    assert_int_equal (third, first);
    assert_int_equal (s_wait_idle (admin, "a", SETTLE_MS, &g), 0); // nothing new queued

    char *text = zlt_read_file (record, NULL);
    assert_non_null (text);
    uint64_t id;
    unsigned attempt;
    long pid;
    assert_int_equal (sscanf (text, "%" SCNu64 " %u %ld", &id, &attempt, &pid), 3);
    assert_int_equal (id, first);
    assert_int_equal (attempt, 1);
    assert_int_equal (zlt_count_lines (record), 1);
    fprintf (stderr,
             "idempotency: key order-42 -> job %" PRIu64 " before and after the restart, "
             "run once\n",
             first);
    zlt_proc_destroy (&worker);
    free (text);
    free (cmd);
    free (record);
    free (handler);
}

// ---------------------------------------------------------------- 5. bad data dirs
// Run a broker on data dir `data`; returns its exit code and sets *took_ms.
static int
s_broker_on (const char *dir, const char *data, const char *err, int64_t *took_ms)
{
    char *bin = zlt_bin ("zlane-broker");
    char *ports = zlt_path (dir, "ports");
    const char *argv[] = {bin,
                          "--frontend",
                          "tcp://127.0.0.1:*",
                          "--backend",
                          "tcp://127.0.0.1:*",
                          "--events",
                          "tcp://127.0.0.1:*",
                          "--admin",
                          "tcp://127.0.0.1:*",
                          "--ports-file",
                          ports,
                          "--data",
                          data,
                          "--lane",
                          "a",
                          NULL};
    int64_t t0 = zlt_now_ms ();
    int code = zlt_run (argv, NULL, NULL, err, 15000);
    *took_ms = zlt_now_ms () - t0;
    free (ports);
    free (bin);
    return code;
}

/*  A data directory holding someone else's file, and one whose data.mdb is
    8 KiB of random bytes: the broker refuses both at once, with a message
    that names the problem, exits non-zero (not by a signal) and leaves the
    files as they were. */
static void
test_foreign_and_corrupt_data_dir (void **state)
{
    const char *dir = zlt_tmpdir ();
    assert_non_null (dir);
    char *err = zlt_path (dir, "broker.err");

    // someone else's directory
    char *foreign = zlt_path (dir, "foreign");
    assert_int_equal (mkdir (foreign, 0750), 0);
    char *notes = zlt_path (foreign, "accounts.csv");
    assert_int_equal (zlt_write_file (notes, "id,balance\n1,100\n", 17), 0);
    int64_t took;
    int code = s_broker_on (dir, foreign, err, &took);
    char *said = zlt_read_file (err, NULL);
    assert_non_null (said);
    fprintf (stderr, "foreign dir: exit %d after %" PRId64 " ms: %s", code, took, said);
    if (code <= 0 || code >= 128 || !strstr (said, "accounts.csv"))
        fail_msg ("a foreign data dir: exit %d; the message should name accounts.csv", code);
    assert_true (took < 15000); // refused, not hung (an ASan start on a busy machine)
    char *kept = zlt_read_file (notes, NULL);
    assert_string_equal (kept, "id,balance\n1,100\n");
    free (kept);
    free (said);
    unlink (err);

    // a data.mdb of random bytes
    char *damaged = zlt_path (dir, "damaged");
    assert_int_equal (mkdir (damaged, 0750), 0);
    char *mdb = zlt_path (damaged, "data.mdb");
    unsigned char junk[8192];
    uint64_t x = 0x9e3779b97f4a7c15ull ^ (uint64_t)zlt_now_ms ();
    for (size_t i = 0; i < sizeof junk; i++) { // xorshift64
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        junk[i] = (unsigned char)x;
    }
    assert_int_equal (zlt_write_file (mdb, junk, sizeof junk), 0);
    code = s_broker_on (dir, damaged, err, &took);
    said = zlt_read_file (err, NULL);
    assert_non_null (said);
    fprintf (stderr, "random data.mdb: exit %d after %" PRId64 " ms: %s", code, took, said);
    if (code <= 0 || code >= 128)
        fail_msg ("a damaged data.mdb: exit %d (128+ is a signal: a crash)", code);
    if (!strstr (said, "zlane-broker:") || !strstr (said, damaged))
        fail_msg ("a damaged data.mdb: the message should name the data dir %s", damaged);
    assert_null (strstr (said, "AddressSanitizer"));
    assert_true (took < 15000); // refused, not hung (an ASan start on a busy machine)
    size_t len;
    char *after = zlt_read_file (mdb, &len);
    assert_non_null (after);
    assert_int_equal (len, sizeof junk);
    assert_memory_equal (after, junk, sizeof junk); // left alone
    free (after);
    free (said);
    free (mdb);
    free (damaged);
    free (notes);
    free (foreign);
    free (err);
}

/*  A second broker started on the data directory of a running one (a double
    start, a restart racing the old process) must refuse it: two brokers on
    one store hand out the same job ids and overwrite each other's jobs. */
static void
test_second_broker_on_live_data_dir (void **state)
{
    zlt_broker_t *first = zlt_broker_start (NULL);
    assert_non_null (first);
    char *data = zlt_path (zlt_broker_dir (first), "data");
    const char *args[] = {"--lane", "a", "--lane", "b", "--data", data, NULL};
    int64_t t0 = zlt_now_ms ();
    zlt_broker_t *second = zlt_broker_start (args); // NULL: it refused (and exited)
    int64_t took = zlt_now_ms () - t0;
    if (second) {
        // show the damage: one job through each (no heap left behind by the
        // failure, for ASan's leak check)
        char out[PATH_MAX], err[PATH_MAX], ids[2][32] = {"?", "?"}, where[PATH_MAX];
        snprintf (out, sizeof out, "%s/out", zlt_broker_dir (second));
        snprintf (err, sizeof err, "%s/err", zlt_broker_dir (second));
        snprintf (where, sizeof where, "%s", data);
        free (data);
        const char *opts[] = {"--tenant", "t1", "--lane", "a", "--timeout", "5s", "x", NULL};
        zlt_broker_t *both[2] = {first, second};
        for (int k = 0; k < 2; k++) {
            if (s_submit (both[k], opts, out, err) != 0)
                continue;
            char *text = zlt_read_file (out, NULL);
            if (text)
                snprintf (ids[k], sizeof ids[k], "%.*s", (int)strcspn (text, "\n"), text);
            free (text);
        }
        fail_msg ("a second broker came up on the live data dir %s; the first gave job id %s "
                  "and the second job id %s (one id, one job record: a job is lost)",
                  where, ids[0], ids[1]);
    }
    fprintf (stderr, "second broker on a live data dir: refused after %" PRId64 " ms\n", took);
    assert_true (took < 15000); // refused, not hung (an ASan start on a busy machine)
    assert_int_equal (zlt_proc_exit_code (zlt_broker_proc (first)), -1); // unharmed
    free (data);
}

// ---------------------------------------------------------------- 6. store full
/*  A 2 MiB store (durability none) filled with 64 KiB payloads: a submit is
    finally refused with code store_full, the broker stays up and answers
    stats, and once a worker has consumed the queue new jobs are accepted
    again. store_full is retryable, so zlane-submit retries it until its
    --timeout and then reports a timeout (exit 3) with code store_full; a
    final rejection (exit 1) would pass too. */
static void
test_store_full_then_room_again (void **state)
{
    const char *args[] = {"--lane", "a", "--map-size", "2MiB", "--durability", "none", NULL};
    zlt_broker_t *broker = zlt_broker_start (args);
    assert_non_null (broker);
    const char *dir = zlt_broker_dir (broker);
    zlt_client_t *admin = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (broker, "admin"));
    assert_non_null (admin);
    char *payload = zlt_path (dir, "payload");
    static char big[64 * 1024];
    memset (big, 'x', sizeof big);
    assert_int_equal (zlt_write_file (payload, big, sizeof big), 0);
    char *out = zlt_path (dir, "out"), *err = zlt_path (dir, "err");
    const char *opts[] = {"--tenant", "t1",     "--lane",    "a",      "--file",
                          payload,    "--json", "--timeout", "1500ms", NULL};

    int accepted = 0, code = 0;
    while (accepted < 64 && (code = s_submit (broker, opts, out, err)) == 0)
        accepted++;
    char *text = zlt_read_file (out, NULL);
    char *said = zlt_read_file (err, NULL);
    assert_non_null (text);
    fprintf (stderr, "store full: %d x 64 KiB accepted, then exit %d: %s%s", accepted, code, text,
             said ? said : "");
    if (accepted == 64)
        fail_msg ("64 x 64 KiB went into a 2 MiB store");
    assert_true (accepted >= 4);
    if ((code != 1 && code != 3) || !strstr (text, "\"code\":\"store_full\""))
        fail_msg ("the refused submit: exit %d, output '%s' (wanted code store_full)", code, text);
    free (text);
    free (said);

    // still up, still answering
    assert_int_equal (zlt_proc_exit_code (zlt_broker_proc (broker)), -1);
    assert_true (zlt_counter (admin, "err_store_full") >= 1);
    zl_group_stats_t g;
    assert_int_equal (zlt_group (admin, "a", NULL, &g), 0);
    assert_int_equal (g.ready, (uint64_t)accepted);

    // drain, then there is room again
    char *handler = zlt_bin ("zlane-testhandler");
    char *cmd;
    assert_true (asprintf (&cmd, "'%s'", handler) > 0);
    zlt_proc_t *worker = s_worker (broker, "full-worker", "a", cmd, "4", NULL);
    if (zlt_wait_counter (admin, "jobs_acked", (uint64_t)accepted, 30000) != 0)
        fail_msg ("the worker did not consume the queue");
    assert_int_equal (s_wait_idle (admin, "a", SETTLE_MS, &g), 0);
    for (int i = 0; i < 3; i++) {
        code = s_submit (broker, opts, out, err);
        if (code != 0) {
            zlt_dump_file ("zlane-submit stdout", out, 1000);
            zlt_dump_file ("zlane-submit stderr", err, 1000);
            fail_msg ("after the queue drained, a 64 KiB job was refused (exit %d)", code);
        }
    }
    assert_int_equal (zlt_wait_counter (admin, "jobs_acked", (uint64_t)accepted + 3, 30000), 0);
    fprintf (stderr, "store full: drained; 3 more 64 KiB jobs accepted and run\n");
    zlt_proc_destroy (&worker);
    free (cmd);
    free (handler);
    free (out);
    free (err);
    free (payload);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown (test_crash_restarts_lose_nothing, zlt_teardown),
#ifdef ZLT_PG
        cmocka_unit_test_teardown (test_crash_restarts_lose_nothing_on_postgresql, s_pg_teardown),
#endif
        cmocka_unit_test_teardown (test_poison_killed_between_attempts, zlt_teardown),
        cmocka_unit_test_teardown (test_poison_killed_while_attempt_runs, zlt_teardown),
        cmocka_unit_test_teardown (test_recovery_order_and_content, zlt_teardown),
        cmocka_unit_test_teardown (test_idempotency_across_restart, zlt_teardown),
        cmocka_unit_test_teardown (test_foreign_and_corrupt_data_dir, zlt_teardown),
        cmocka_unit_test_teardown (test_second_broker_on_live_data_dir, zlt_teardown),
        cmocka_unit_test_teardown (test_store_full_then_room_again, zlt_teardown),
    };
    if (getenv ("ZLT_FILTER")) // run some: ZLT_FILTER='test_poison*'
        cmocka_set_test_filter (getenv ("ZLT_FILTER"));
    return cmocka_run_group_tests (tests, NULL, NULL);
}
