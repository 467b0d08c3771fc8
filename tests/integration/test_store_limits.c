/*  test_store_limits: the store's limits on real processes.

    A full disk: the broker's data directory on a 16 MiB tmpfs (mounted and
    unmounted here; the test is skipped without the privilege), the map its
    default 4 GiB. zlane-submit fills it until jobs are refused STORE_FULL
    (nothing accepted is lost, the broker says why in its log); once the
    queue is drained new jobs are accepted again although the disk stays full
    (the store's free pages count), after a clean restart too, and a second
    fill drains again without the broker stopping.

    Idempotency keys over a long run: 200,000 jobs through an 8 MiB store
    with the queue kept near empty (--max-depth 2000: the producer waits for
    credit), each with the key the producer library
    makes. With the default windows the bound (a quarter of the map) forgets
    the oldest keys, counted and logged, and the store stays flat, never
    STORE_FULL (the code before kept every key 24 h and was full after
    ~44,000 jobs); with a 50 ms resend window the library's keys expire
    (all gone soon after the last job) while a user's key keeps its 24 h.

    The workers are raw DEALER clients in this process that ack every job
    they are given; producers are zlane-submit processes. Run one with
    ZLT_FILTER='test_full*'. */
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <zmq.h>

#define WAIT_MS 60000 // any one phase (ASan included)
#define BIG_LINE 8000 // payload bytes of the full-disk jobs
#define KEYS_JOBS 200000

// ---------------------------------------------------------------- a small disk
static char s_mnt[4096]; // the tmpfs this test mounted, "" = none

// Mount a `size` tmpfs on a fresh directory; NULL (the reason printed) when
// this process may not mount.
static const char *
s_mount_tmpfs (const char *size)
{
    const char *tmp = getenv ("TMPDIR");
    snprintf (s_mnt, sizeof s_mnt, "%s/zlane-disk-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp (s_mnt)) {
        s_mnt[0] = '\0';
        return NULL;
    }
    char opts[64];
    snprintf (opts, sizeof opts, "size=%s,mode=0750", size);
    if (mount ("tmpfs", s_mnt, "tmpfs", MS_NOSUID | MS_NODEV, opts) != 0) {
        fprintf (stderr, "cannot mount a tmpfs on %s (%s): skipped\n", s_mnt, strerror (errno));
        rmdir (s_mnt);
        s_mnt[0] = '\0';
        return NULL;
    }
    return s_mnt;
}

// Kill what the test started (the broker first: it holds the mount), then
// unmount and remove the mount point.
static int
s_teardown (void **state)
{
    zlt_cleanup ();
    if (s_mnt[0]) {
        if (umount2 (s_mnt, 0) != 0 && umount2 (s_mnt, MNT_DETACH) != 0)
            fprintf (stderr, "cannot unmount %s: %s\n", s_mnt, strerror (errno));
        rmdir (s_mnt);
        s_mnt[0] = '\0';
    }
    (void)state;
    return 0;
}

// ---------------------------------------------------------------- a raw worker
typedef struct {
    zlt_client_t *c;
    uint64_t acked;
    int64_t next_hb_ms;
} worker_t;

static void
s_worker_start (worker_t *w, zlt_broker_t *broker)
{
    memset (w, 0, sizeof *w);
    w->c = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (broker, "backend"));
    assert_non_null (w->c);
    const char *lanes[] = {"a"};
    zl_msg_t m = {.kind = ZL_MSG_READY};
    m.u.ready = (zl_ready_t){"raw-worker", 1, lanes, 2000, 0};
    assert_int_equal (zlt_client_send (w->c, &m), 0);
}

// Take what the broker sends for up to `ms`: every dispatched job acked at
// once, heartbeats sent. Returns when a message was handled or `ms` passed.
static void
s_worker_pump (worker_t *w, int ms)
{
    if (!w->c)
        return;
    int64_t now = zlt_now_ms ();
    if (now >= w->next_hb_ms) {
        zl_msg_t hb = {.kind = ZL_MSG_HEARTBEAT};
        zlt_client_send (w->c, &hb);
        w->next_hb_ms = now + 300;
    }
    zl_msg_t m;
    if (zlt_client_recv (w->c, &m, ms) != 0 || m.kind != ZL_MSG_DISPATCH)
        return;
    size_t n = m.u.dispatch.n;
    zl_ack_item_t *items = calloc (n ? n : 1, sizeof *items);
    for (size_t i = 0; i < n; i++)
        items[i] = (zl_ack_item_t){m.u.dispatch.jobs[i].job_id, m.u.dispatch.jobs[i].lease, 10};
    zl_msg_t ack = {.kind = ZL_MSG_ACK};
    ack.u.ack = (zl_ack_t){n, items};
    assert_int_equal (zlt_client_send (w->c, &ack), 0);
    free (items);
    w->acked += n;
}

static void
s_worker_stop (worker_t *w)
{
    zlt_client_destroy (&w->c);
}

// Pump the worker until counter `name` reaches `want` (stats asked every
// 100 ms of work). Fails the test after `timeout_ms`.
static void
s_work_until (worker_t *w, zlt_client_t *admin, const char *name, uint64_t want, int timeout_ms)
{
    int64_t deadline = zlt_now_ms () + timeout_ms, next = 0;
    uint64_t got = 0;
    for (;;) {
        int64_t now = zlt_now_ms ();
        if (now >= next) {
            got = zlt_counter (admin, name);
            if (got >= want)
                return;
            next = now + 100;
        }
        if (now > deadline)
            fail_msg ("%s reached %" PRIu64 " of %" PRIu64 " in %d ms", name, got, want,
                      timeout_ms);
        s_worker_pump (w, 20);
    }
}

// ---------------------------------------------------------------- producers
// Start zlane-submit on broker with `opts` (NULL-terminated), output in
// <broker dir>/NAME.out and .err.
static zlt_proc_t *
s_submit_start (zlt_broker_t *broker, const char *name, const char *const opts[])
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
    char file[128];
    snprintf (file, sizeof file, "%s.out", name);
    char *out = zlt_path (zlt_broker_dir (broker), file);
    snprintf (file, sizeof file, "%s.err", name);
    char *err = zlt_path (zlt_broker_dir (broker), file);
    unlink (out);
    unlink (err);
    zlt_proc_t *p = zlt_spawn (argv, NULL, out, err);
    assert_non_null (p);
    free (bin);
    free (out);
    free (err);
    return p;
}

// Wait for zlane-submit to finish, pumping `w` (may be NULL) meanwhile;
// returns its exit code.
static int
s_submit_wait (zlt_proc_t *p, worker_t *w, int timeout_ms)
{
    int64_t deadline = zlt_now_ms () + timeout_ms;
    while (zlt_proc_wait (p, w ? 0 : 100) != 0) {
        if (zlt_now_ms () > deadline)
            fail_msg ("zlane-submit did not finish in %d ms", timeout_ms);
        if (w)
            s_worker_pump (w, 20);
    }
    return zlt_proc_exit_code (p);
}

// Count the lines of zlane-submit --json output: accepted, and refused
// with code store_full; fails the test on anything else.
static void
s_count_json (zlt_broker_t *broker, const char *name, uint64_t *accepted, uint64_t *store_full)
{
    char file[128];
    snprintf (file, sizeof file, "%s.out", name);
    char *path = zlt_path (zlt_broker_dir (broker), file);
    char *text = zlt_read_file (path, NULL);
    assert_non_null (text);
    *accepted = *store_full = 0;
    for (char *p = text, *eol; *p; p = eol + 1) {
        eol = strchr (p, '\n');
        if (!eol)
            break;
        *eol = '\0';
        if (strstr (p, "\"job_id\":") && !strstr (p, "\"error\""))
            (*accepted)++;
        else if (strstr (p, "store_full"))
            (*store_full)++;
        else
            fail_msg ("%s: a job neither accepted nor refused store_full: %s", name, p);
    }
    free (text);
    free (path);
}

static bool
s_log_has (zlt_broker_t *broker, const char *needle)
{
    char *path = zlt_path (zlt_broker_dir (broker), "broker.err");
    char *text = zlt_read_file (path, NULL);
    bool has = text && strstr (text, needle);
    free (text);
    free (path);
    return has;
}

// A file of `n` lines of `len` bytes (each starting with its number).
static char *
s_lines_file (const char *name, size_t n, size_t len)
{
    char *path = zlt_path (zlt_tmpdir (), name);
    FILE *f = fopen (path, "w");
    assert_non_null (f);
    char *line = malloc (len + 1);
    memset (line, 'x', len);
    line[len] = '\0';
    for (size_t i = 0; i < n; i++) {
        int k = snprintf (line, len, "%zu", i + 1);
        line[k] = 'x';
        fprintf (f, "%s\n", line);
    }
    free (line);
    fclose (f);
    return path;
}

// ---------------------------------------------------------------- 1. a full disk
// Fill the store (no worker) with BIG_LINE-byte jobs until some are refused
// STORE_FULL; returns how many were accepted.
static uint64_t
s_fill (zlt_broker_t *broker, const char *lines, const char *name)
{
    const char *opts[] = {"--tenant", "t",      "--lane",    "a",  "--lines", "--file",
                          lines,      "--json", "--timeout", "3s", NULL};
    zlt_proc_t *p = s_submit_start (broker, name, opts);
    int code = s_submit_wait (p, NULL, WAIT_MS);
    zlt_proc_destroy (&p);
    uint64_t accepted, full;
    s_count_json (broker, name, &accepted, &full);
    fprintf (stderr,
             "%s: %" PRIu64 " jobs of %d bytes accepted, %" PRIu64
             " refused store_full (zlane-submit exit %d)\n",
             name, accepted, BIG_LINE, full, code);
    if (full == 0 || (code != 1 && code != 3))
        fail_msg ("%s: the disk did not fill (exit %d, %" PRIu64 " refused)", name, code, full);
    return accepted;
}

// Submit `n` jobs that must all be accepted, while `w` works.
static void
s_submit_all (zlt_broker_t *broker, const char *lines, worker_t *w, const char *name)
{
    const char *opts[] = {"--tenant", "t",      "--lane",    "a",   "--lines", "--file",
                          lines,      "--json", "--timeout", "10s", NULL};
    zlt_proc_t *p = s_submit_start (broker, name, opts);
    int code = s_submit_wait (p, w, WAIT_MS);
    zlt_proc_destroy (&p);
    if (code != 0) {
        char file[128];
        snprintf (file, sizeof file, "%s.err", name);
        char *err = zlt_path (zlt_broker_dir (broker), file);
        zlt_dump_file ("zlane-submit stderr", err, 2000);
        zlt_broker_dump (broker, 3000);
        free (err);
        fail_msg ("%s: with the queue drained, jobs were refused (exit %d)", name, code);
    }
}

static void
test_full_disk_then_room_again (void **state)
{
    (void)state;
    const char *disk = s_mount_tmpfs ("16m");
    if (!disk)
        skip ();
    char data[4200];
    snprintf (data, sizeof data, "%s/data", disk);
    // the default map (4 GiB) on a 16 MiB disk; the default durability
    const char *args[] = {"--lane", "a", "--data", data, NULL};
    zlt_broker_t *broker = zlt_broker_start (args);
    assert_non_null (broker);
    zlt_client_t *admin = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (broker, "admin"));
    assert_non_null (admin);
    char *big = s_lines_file ("big", 3000, BIG_LINE);  // 24 MB: more than the disk
    char *some = s_lines_file ("some", 300, BIG_LINE); // 2.4 MB

    // 1. full: refused STORE_FULL, nothing accepted lost, the log says why
    uint64_t accepted = s_fill (broker, big, "fill1");
    assert_true (accepted >= 800); // 6.4 MB of jobs at least
    assert_int_equal (zlt_proc_exit_code (zlt_broker_proc (broker)), -1);
    assert_true (zlt_counter (admin, "err_store_full") >= 1);
    zl_group_stats_t g;
    assert_int_equal (zlt_group (admin, "a", NULL, &g), 0);
    assert_int_equal (g.ready, accepted);
    if (!s_log_has (broker, "refusing new jobs (STORE_FULL)") ||
        !s_log_has (broker, "disk is full"))
        fail_msg ("the broker's log does not say it refuses jobs for a full disk");
    struct statvfs vfs;
    assert_int_equal (statvfs (disk, &vfs), 0);
    fprintf (stderr, "the disk: %.1f MiB free\n",
             (double)vfs.f_bavail * (double)vfs.f_frsize / 1048576.0);

    // 2. drained: room again, although the disk is still full
    worker_t w;
    s_worker_start (&w, broker);
    s_work_until (&w, admin, "jobs_acked", accepted, WAIT_MS);
    assert_int_equal (statvfs (disk, &vfs), 0);
    assert_true ((uint64_t)vfs.f_bavail * vfs.f_frsize < (2u << 20));
    s_submit_all (broker, some, &w, "again");
    s_work_until (&w, admin, "jobs_acked", accepted + 300, WAIT_MS);
    // said once room has held a second (at a commit: one a second while idle)
    char *log = zlt_path (zlt_broker_dir (broker), "broker.err");
    if (zlt_wait_file_has (log, "accepting new jobs again", 5000) != 0)
        fail_msg ("the broker's log does not say it accepts jobs again");
    free (log);
    s_worker_stop (&w);

    // 3. after a clean restart too
    assert_int_equal (zlt_broker_stop (broker, 10000), 0);
    assert_int_equal (zlt_broker_restart (broker, 15000), 0);
    zlt_client_destroy (&admin);
    admin = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (broker, "admin"));
    s_worker_start (&w, broker);
    s_submit_all (broker, some, &w, "restarted");
    s_work_until (&w, admin, "jobs_acked", 300, WAIT_MS);
    s_worker_stop (&w);

    // 4. full again, and a full store drains without the broker stopping
    uint64_t again = s_fill (broker, big, "fill2");
    assert_true (again >= 800);
    uint64_t acked0 = zlt_counter (admin, "jobs_acked");
    s_worker_start (&w, broker);
    s_work_until (&w, admin, "jobs_acked", acked0 + again, WAIT_MS);
    s_worker_stop (&w);
    assert_int_equal (zlt_proc_exit_code (zlt_broker_proc (broker)), -1);
    assert_int_equal (zlt_group (admin, "a", NULL, &g), 0);
    assert_int_equal (g.ready + g.in_flight, 0);
    fprintf (stderr,
             "full disk: filled twice (%" PRIu64 " and %" PRIu64
             " jobs), drained twice, room again each time and after a restart\n",
             accepted, again);
    assert_int_equal (zlt_broker_stop (broker, 10000), 0);
    free (big);
    free (some);
}

// ---------------------------------------------------------------- 2. keys
typedef struct {
    uint64_t used_max, used_at[4], keys_max, samples;
} store_track_t;

// Run `n` library-keyed jobs through an 8 MiB store with a worker draining
// as they come; track the store's size at each quarter of the jobs.
static void
s_run_keys (zlt_broker_t *broker, zlt_client_t *admin, uint64_t n, store_track_t *t)
{
    char *lines = s_lines_file ("keys", n, 8);
    const char *opts[] = {"--tenant", "t",  "--lane",    "a",   "--lines", "--file",
                          lines,      "-q", "--timeout", "20s", NULL};
    worker_t w;
    s_worker_start (&w, broker);
    uint64_t base = zlt_counter (admin, "jobs_acked");
    zlt_proc_t *p = s_submit_start (broker, "keys", opts);
    memset (t, 0, sizeof *t);
    int64_t deadline = zlt_now_ms () + WAIT_MS, next = 0;
    int code = -1;
    for (;;) {
        int64_t now = zlt_now_ms ();
        if (now > deadline)
            fail_msg ("%" PRIu64 " jobs did not go through in %d ms", n, WAIT_MS);
        if (code < 0 && zlt_proc_wait (p, 0) == 0)
            code = zlt_proc_exit_code (p);
        if (now >= next) {
            zl_stats_t st;
            uint64_t used = 0, keys = 0, acked = 0;
            assert_int_equal (zlt_stats (admin, &st, 5000), 0);
            assert_int_equal (zlt_stats_counter (&st, "store_used_bytes", &used), 0);
            assert_int_equal (zlt_stats_counter (&st, "store_idem_keys", &keys), 0);
            assert_int_equal (zlt_stats_counter (&st, "jobs_acked", &acked), 0);
            acked -= base;
            t->used_max = used > t->used_max ? used : t->used_max;
            t->keys_max = keys > t->keys_max ? keys : t->keys_max;
            for (int q = 0; q < 4; q++)
                if (acked >= n * (uint64_t)(q + 1) / 4 && !t->used_at[q])
                    t->used_at[q] = used;
            t->samples++;
            if (code >= 0 && acked >= n)
                break;
            next = now + 100;
        }
        s_worker_pump (&w, 10);
    }
    s_worker_stop (&w);
    zlt_proc_destroy (&p);
    if (code != 0) {
        zlt_broker_dump (broker, 3000);
        fail_msg ("zlane-submit exit %d: not every job was accepted", code);
    }
    free (lines);
}

// The default windows: the bound forgets the oldest library keys early, the
// store stays flat and is never full.
static void
test_keys_bounded_with_default_windows (void **state)
{
    (void)state;
    // the queue kept near empty: producers wait for credit beyond 2,000 jobs
    const char *args[] = {"--lane", "a",           "--map-size", "8MiB", "--durability",
                          "none",   "--max-depth", "2000",       NULL};
    zlt_broker_t *broker = zlt_broker_start (args);
    assert_non_null (broker);
    zlt_client_t *admin = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (broker, "admin"));
    store_track_t t;
    int64_t t0 = zlt_now_ms ();
    s_run_keys (broker, admin, KEYS_JOBS, &t);
    uint64_t evicted = zlt_counter (admin, "dedup_evicted");
    uint64_t full = zlt_counter (admin, "err_store_full");
    uint64_t keys = zlt_counter (admin, "store_idem_keys");
    fprintf (stderr,
             "%d jobs in %" PRId64 " ms through an 8 MiB store: used %.2f / %.2f / %.2f "
             "/ %.2f MiB at the quarters (max %.2f), keys max %" PRIu64 " now %" PRIu64 ", %" PRIu64
             " forgotten early, store_full %" PRIu64 "\n",
             KEYS_JOBS, zlt_now_ms () - t0, t.used_at[0] / 1048576.0, t.used_at[1] / 1048576.0,
             t.used_at[2] / 1048576.0, t.used_at[3] / 1048576.0, t.used_max / 1048576.0, t.keys_max,
             keys, evicted, full);
    assert_int_equal (full, 0);
    // the bound: a quarter of the map at 140 bytes a key
    uint64_t bound = (8u << 20) / 4 / 140;
    assert_true (keys <= bound);
    assert_true (evicted >= KEYS_JOBS - bound - 1000);
    assert_true (s_log_has (broker, "forgotten before their window ended"));
    // flat: no quarter above the first by more than 256 KiB, all well inside
    for (int q = 1; q < 4; q++)
        assert_true (t.used_at[q] <= t.used_at[0] + (256u << 10));
    assert_true (t.used_max < (6u << 20));
    assert_int_equal (zlt_broker_stop (broker, 10000), 0);
}

// A 50 ms resend window and no bound to speak of: the library's keys
// expire (every one: none is forgotten early) and are gone soon after the
// last job, the store flat; a user's key keeps its 24 h.
static void
test_keys_expire_after_the_resend_window (void **state)
{
    (void)state;
    // a window short enough that the keys of a full-speed run (well over
    // 100,000 jobs/s here) fit the map without the bound
    const char *args[] = {
        "--lane",      "a",    "--map-size",      "8MiB", "--durability",     "none",
        "--max-depth", "2000", "--resend-window", "50ms", "--dedup-max-keys", "1000000",
        NULL};
    zlt_broker_t *broker = zlt_broker_start (args);
    assert_non_null (broker);
    zlt_client_t *admin = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (broker, "admin"));
    // a user's key first
    const char *mine[] = {"--tenant", "t",      "--lane", "a", "--key",
                          "order-1",  "--json", "one",    NULL};
    zlt_proc_t *p = s_submit_start (broker, "mine", mine);
    worker_t w;
    s_worker_start (&w, broker);
    assert_int_equal (s_submit_wait (p, &w, WAIT_MS), 0);
    zlt_proc_destroy (&p);
    s_worker_stop (&w);
    char *path = zlt_path (zlt_broker_dir (broker), "mine.out");
    char *first = zlt_read_file (path, NULL);
    assert_non_null (first);

    store_track_t t;
    s_run_keys (broker, admin, KEYS_JOBS, &t);
    assert_int_equal (zlt_counter (admin, "err_store_full"), 0);
    // the keys of the last 50 ms: their number follows the rate, not the
    // jobs run (200,000 keys would take some 19 MB)
    fprintf (stderr, "resend window 50 ms: used %.2f / %.2f / %.2f / %.2f MiB at the quarters\n",
             t.used_at[0] / 1048576.0, t.used_at[1] / 1048576.0, t.used_at[2] / 1048576.0,
             t.used_at[3] / 1048576.0);
    assert_true (t.keys_max < KEYS_JOBS / 4);
    assert_true (t.used_max < (4u << 20));
    // expiry, not the bound, empties the library's keys: only the user's stays
    int64_t deadline = zlt_now_ms () + 10000;
    uint64_t keys;
    while ((keys = zlt_counter (admin, "store_idem_keys")) > 1) {
        if (zlt_now_ms () > deadline)
            fail_msg ("%" PRIu64 " keys left 10 s after the last job (resend window 50 ms)", keys);
        poll (NULL, 0, 20); // the stats poll's pace, as zlt_wait_counter's
    }
    uint64_t expired = zlt_counter (admin, "dedup_expired");
    fprintf (stderr,
             "resend window 50 ms: keys max %" PRIu64 ", %" PRIu64
             " expired, all gone after the run; used max %.2f MiB\n",
             t.keys_max, expired, t.used_max / 1048576.0);
    assert_int_equal (expired, KEYS_JOBS);
    assert_int_equal (zlt_counter (admin, "dedup_evicted"), 0);
    // the user's key is still answered with its first job
    p = s_submit_start (broker, "mine", mine);
    s_worker_start (&w, broker);
    assert_int_equal (s_submit_wait (p, &w, WAIT_MS), 0);
    zlt_proc_destroy (&p);
    s_worker_stop (&w);
    char *again = zlt_read_file (path, NULL);
    assert_non_null (again);
    uint64_t id1 = 0, id2 = 0;
    char dup[8] = "";
    assert_int_equal (sscanf (first, "{\"seq\":1,\"job_id\":%" SCNu64, &id1), 1);
    assert_int_equal (
        sscanf (again, "{\"seq\":1,\"job_id\":%" SCNu64 ",\"duplicate\":%7[a-z]", &id2, dup), 2);
    assert_int_equal (id1, id2);
    assert_string_equal (dup, "true");
    free (first);
    free (again);
    free (path);
    assert_int_equal (zlt_broker_stop (broker, 10000), 0);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown (test_full_disk_then_room_again, s_teardown),
        cmocka_unit_test_teardown (test_keys_bounded_with_default_windows, s_teardown),
        cmocka_unit_test_teardown (test_keys_expire_after_the_resend_window, s_teardown),
    };
    if (getenv ("ZLT_FILTER"))
        cmocka_set_test_filter (getenv ("ZLT_FILTER"));
    return cmocka_run_group_tests (tests, NULL, NULL);
}
