/*  test_security: CURVE end to end on real processes. Keys come from
    `zlane-ctl keygen`; the broker runs with --curve on 127.0.0.1 ephemeral
    ports. Checked: a producer submits only for its tenants; unknown keys and
    plaintext clients get nothing and are counted; a worker takes jobs only
    from its lanes; a subscriber reads (stats, dlq list, tail over CURVE) but
    may not purge, an admin may, and other roles may not tail; and the broker refuses a non-loopback
   bind without CURVE unless --insecure. The one non-loopback bind (0.0.0.0 on port 0) is never
   connected to and stopped at once. */
#define _GNU_SOURCE
#include "curve.h"
#include "wire.h"
#include "zltest.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <czmq.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define WAIT_MS 10000    // anything that takes longer is a failure
#define RUN_MS 15000     // one zlane-submit / zlane-ctl run
#define STRANGER_MS 1000 // --timeout of a client the broker will not admit

// ---------------------------------------------------------------- helpers
// The text of a file ("" if it does not exist). Caller frees.
static char *
s_read (const char *path)
{
    char *text = zlt_read_file (path, NULL);
    return text ? text : strdup ("");
}

static bool
s_file_has (const char *path, const char *needle)
{
    char *text = s_read (path);
    bool has = strstr (text, needle) != NULL;
    free (text);
    return has;
}

// ---------------------------------------------------------------- keys
// Every certificate a test uses, made by zlane-ctl keygen. The public
// halves of the known clients are copied into the broker's clients
// directory; the stranger's is not.
typedef struct {
    const char *dir;
    char *keys;    // DIR/keys: what keygen wrote
    char *clients; // DIR/clients: the broker's --clients
    char *broker_pub, *broker_secret;
    char *producer;   // role producer, tenants t1
    char *worker;     // role worker, lanes a
    char *admin;      // role admin
    char *subscriber; // role subscriber
    char *stranger;   // role admin, but not in the clients directory
    char *latecomer;  // role producer, tenants t1, not in the clients directory (yet)
} keys_t;

static void
s_keygen (keys_t *k, const char *name, const char *role, const char *flag, const char *list,
          bool allowed, char **secret_out)
{
    char *ctl = zlt_bin ("zlane-ctl");
    char *out = zlt_path (k->dir, "keygen.out"), *err = zlt_path (k->dir, "keygen.err");
    const char *argv[12] = {ctl, "keygen", name, "--dir", k->keys};
    size_t n = 5;
    if (role) {
        argv[n++] = "--role";
        argv[n++] = role;
    }
    if (flag) {
        argv[n++] = flag;
        argv[n++] = list;
    }
    argv[n] = NULL;
    if (zlt_run (argv, NULL, out, err, RUN_MS) != 0) {
        zlt_dump_file ("zlane-ctl keygen stderr", err, 2000);
        fail_msg ("zlane-ctl keygen %s failed", name);
    }
    char *pub = zlt_path (k->keys, name);
    if (allowed) {
        size_t len;
        char *text = zlt_read_file (pub, &len);
        assert_non_null (text);
        char *copy = zlt_path (k->clients, name);
        assert_int_equal (zlt_write_file (copy, text, len), 0);
        free (copy);
        free (text);
    }
    char secret_name[256];
    snprintf (secret_name, sizeof secret_name, "%s_secret", name);
    if (secret_out)
        *secret_out = zlt_path (k->keys, secret_name);
    free (pub);
    free (out);
    free (err);
    free (ctl);
}

static void
s_keys (keys_t *k)
{
    memset (k, 0, sizeof *k);
    k->dir = zlt_tmpdir ();
    assert_non_null (k->dir);
    k->keys = zlt_path (k->dir, "keys");
    k->clients = zlt_path (k->dir, "clients");
    assert_int_equal (mkdir (k->clients, 0755), 0);
    s_keygen (k, "broker", NULL, NULL, NULL, false, &k->broker_secret);
    k->broker_pub = zlt_path (k->keys, "broker");
    s_keygen (k, "producer-t1", "producer", "--tenants", "t1", true, &k->producer);
    s_keygen (k, "worker-a", "worker", "--lanes", "a", true, &k->worker);
    s_keygen (k, "ops", "admin", NULL, NULL, true, &k->admin);
    s_keygen (k, "dashboard", "subscriber", NULL, NULL, true, &k->subscriber);
    s_keygen (k, "stranger", "admin", NULL, NULL, false, &k->stranger);
    s_keygen (k, "latecomer", "producer", "--tenants", "t1", false, &k->latecomer);
}

static void
s_keys_free (keys_t *k)
{
    free (k->keys);
    free (k->clients);
    free (k->broker_pub);
    free (k->broker_secret);
    free (k->producer);
    free (k->worker);
    free (k->admin);
    free (k->subscriber);
    free (k->stranger);
    free (k->latecomer);
}

// A broker with CURVE on, lanes a and b, alert.dlq every 200 ms while the
// DLQ is not empty, and a worker silent for `liveness` heartbeats dead.
static zlt_broker_t *
s_broker_with (const keys_t *k, const char *liveness)
{
    const char *args[] = {
        "--lane",    "a",        "--lane",      "b",     "--curve",    "--cert", k->broker_secret,
        "--clients", k->clients, "--dlq-alert", "200ms", "--liveness", liveness, NULL};
    zlt_broker_t *b = zlt_broker_start (args);
    assert_non_null (b);
    return b;
}

static zlt_broker_t *
s_broker (const keys_t *k)
{
    return s_broker_with (k, "3");
}

// ---------------------------------------------------------------- admin over CURVE
// A DEALER to the admin socket with the admin key: the harness's own
// clients speak plaintext, which a CURVE broker refuses.
typedef struct {
    zsock_t *sock;
    zl_codec_t *codec;
    uint64_t next_id;
} admin_t;

static admin_t *
s_admin_new (const keys_t *k, zlt_broker_t *b)
{
    admin_t *a = calloc (1, sizeof *a);
    zl_curve_t curve;
    char err[256];
    if (zl_curve_load (&curve, k->broker_pub, k->admin, err, sizeof err) != 0)
        fail_msg ("zl_curve_load: %s", err);
    a->sock = zsock_new (ZMQ_DEALER);
    zsock_set_linger (a->sock, 0);
    zl_curve_apply (&curve, a->sock);
    assert_int_equal (zsock_connect (a->sock, "%s", zlt_broker_endpoint (b, "admin")), 0);
    a->codec = zl_codec_new ();
    return a;
}

static void
s_admin_destroy (admin_t **a_p)
{
    if (!*a_p)
        return;
    zsock_destroy (&(*a_p)->sock);
    zl_codec_destroy (&(*a_p)->codec);
    free (*a_p);
    *a_p = NULL;
}

// Counter `name` from fresh stats; fails the test without an answer.
static uint64_t
s_counter (admin_t *a, const char *name)
{
    zl_msg_t req = {.kind = ZL_MSG_ADMIN_REQUEST};
    req.u.admin_request.request_id = ++a->next_id;
    req.u.admin_request.op = ZL_ADMIN_STATS;
    assert_int_equal (zl_wire_send (zsock_resolve (a->sock), a->codec, &req, 0), 0);
    int64_t deadline = zlt_now_ms () + WAIT_MS;
    for (;;) {
        int64_t left = deadline - zlt_now_ms ();
        zmq_pollitem_t item = {zsock_resolve (a->sock), 0, ZMQ_POLLIN, 0};
        if (left <= 0 || zmq_poll (&item, 1, left) <= 0)
            fail_msg ("no stats from the broker over CURVE within %d ms", WAIT_MS);
        zmq_msg_t frame;
        zmq_msg_init (&frame);
        assert_true (zmq_msg_recv (&frame, zsock_resolve (a->sock), 0) >= 0);
        zl_msg_t reply;
        zl_decode_rc_t rc =
            zl_codec_decode (a->codec, zmq_msg_data (&frame), zmq_msg_size (&frame), &reply);
        zmq_msg_close (&frame);
        assert_int_equal (rc, ZL_DECODE_OK);
        if (reply.kind == ZL_MSG_ERROR)
            fail_msg ("stats refused: %s", reply.u.error.message);
        if (reply.kind != ZL_MSG_ADMIN_REPLY || reply.u.admin_reply.request_id != a->next_id)
            continue;
        uint64_t value;
        if (zlt_stats_counter (&reply.u.admin_reply.stats, name, &value) != 0)
            fail_msg ("the broker has no counter %s", name);
        return value;
    }
}

// Poll stats until counter `name` reaches `min` (bounded). Returns 0 or -1.
static int
s_wait_counter (admin_t *a, const char *name, uint64_t min, int timeout_ms)
{
    int64_t deadline = zlt_now_ms () + timeout_ms;
    uint64_t v;
    while ((v = s_counter (a, name)) < min) {
        if (zlt_now_ms () >= deadline) {
            fprintf (stderr, "counter %s is %" PRIu64 ", wanted >= %" PRIu64 "\n", name, v, min);
            return -1;
        }
        poll (NULL, 0, 20);
    }
    return 0;
}

// ---------------------------------------------------------------- clients
// Run zlane-submit for one job with `cert` (NULL: plaintext). Returns the
// exit code; stdout and stderr land in `out` and `err` (read with s_read).
static int
s_submit (const keys_t *k, zlt_broker_t *b, const char *cert, const char *tenant, const char *lane,
          const char *payload, const char *timeout, const char *out, const char *err)
{
    char *bin = zlt_bin ("zlane-submit");
    const char *argv[24] = {bin,
                            "--broker",
                            zlt_broker_endpoint (b, "frontend"),
                            "--tenant",
                            tenant,
                            "--lane",
                            lane,
                            "--timeout",
                            timeout,
                            "--max-attempts",
                            "1"};
    size_t n = 11;
    if (cert) {
        argv[n++] = "--curve-server";
        argv[n++] = k->broker_pub;
        argv[n++] = "--cert";
        argv[n++] = cert;
    }
    argv[n++] = payload;
    argv[n] = NULL;
    unlink (out);
    unlink (err);
    int code = zlt_run (argv, NULL, out, err, RUN_MS);
    free (bin);
    return code;
}

// Run zlane-ctl with `cert` (NULL: plaintext) and the command in `cmd`
// (NULL-terminated). Returns the exit code.
static int
s_ctl (const keys_t *k, zlt_broker_t *b, const char *cert, const char *const cmd[], const char *out,
       const char *err)
{
    char *bin = zlt_bin ("zlane-ctl");
    const char *argv[32] = {bin,
                            "--admin",
                            zlt_broker_endpoint (b, "admin"),
                            "--events",
                            zlt_broker_endpoint (b, "events"),
                            "--timeout",
                            "2s"};
    size_t n = 7;
    if (cert) {
        argv[n++] = "--curve-server";
        argv[n++] = k->broker_pub;
        argv[n++] = "--cert";
        argv[n++] = cert;
    }
    for (size_t i = 0; cmd[i] && n < 31; i++)
        argv[n++] = cmd[i];
    argv[n] = NULL;
    unlink (out);
    unlink (err);
    int code = zlt_run (argv, NULL, out, err, RUN_MS);
    free (bin);
    return code;
}

// Start zlane-worker for `lanes` with the worker key, running
// zlane-testhandler (jobs whose payload holds "poison" fail PERMANENT). The
// keys come as flags, or with `via_config` as the config keys curve_server
// and cert.
static zlt_proc_t *
s_worker (const keys_t *k, zlt_broker_t *b, const char *lanes, bool via_config, const char *record,
          const char *err)
{
    char *bin = zlt_bin ("zlane-worker"), *handler = zlt_bin ("zlane-testhandler");
    char *cmd, *config = zlt_path (k->dir, "worker.cfg"), *text;
    assert_true (asprintf (&cmd, "'%s' --record '%s' --permanent-if poison", handler, record) > 0);
    assert_true (asprintf (&text, "worker\n    curve_server = \"%s\"\n    cert = \"%s\"\n",
                           k->broker_pub, k->worker) > 0);
    assert_int_equal (zlt_write_file (config, text, strlen (text)), 0);
    const char *argv[16] = {bin,       "--broker", zlt_broker_endpoint (b, "backend"),
                            "--lanes", lanes,      "--exec",
                            cmd,       "--name",   "secure-worker"};
    size_t n = 9;
    if (via_config) {
        argv[n++] = "--config";
        argv[n++] = config;
    } else {
        argv[n++] = "--curve-server";
        argv[n++] = k->broker_pub;
        argv[n++] = "--cert";
        argv[n++] = k->worker;
    }
    argv[n] = NULL;
    zlt_proc_t *p = zlt_spawn (argv, NULL, NULL, err);
    assert_non_null (p);
    free (text);
    free (config);
    free (cmd);
    free (handler);
    free (bin);
    return p;
}

static void
s_expect (int code, int want, const char *what, const char *err_path)
{
    if (code != want) {
        zlt_dump_file (what, err_path, 2000);
        fail_msg ("%s: exit %d, wanted %d", what, code, want);
    }
}

static void
s_expect_said (const char *path, const char *needle, const char *what)
{
    if (!s_file_has (path, needle)) {
        zlt_dump_file (what, path, 2000);
        fail_msg ("%s does not say \"%s\"", what, needle);
    }
}

// ---------------------------------------------------------------- tests
/*  keygen: two files, the secret one private, the role and bindings in the
    public one with no secret key; never overwrites; refuses a bad role. */
static void
test_keygen (void **state)
{
    const char *dir = zlt_tmpdir ();
    assert_non_null (dir);
    char *ctl = zlt_bin ("zlane-ctl");
    char *keys = zlt_path (dir, "keys"), *out = zlt_path (dir, "out"), *err = zlt_path (dir, "err");
    const char *argv[] = {ctl,         "keygen", "alice", "--role", "producer",
                          "--tenants", "t1,t2",  "--dir", keys,     NULL};
    s_expect (zlt_run (argv, NULL, out, err, RUN_MS), 0, "zlane-ctl keygen", err);

    char *pub_path = zlt_path (keys, "alice"), *secret_path = zlt_path (keys, "alice_secret");
    struct stat sb;
    assert_int_equal (stat (secret_path, &sb), 0);
    assert_int_equal (sb.st_mode & 0777, 0600);
    zcert_t *pub = zcert_load (pub_path);
    assert_non_null (pub);
    char *said = s_read (out);
    if (!strstr (said, zcert_public_txt (pub)) || !strstr (said, pub_path) ||
        !strstr (said, secret_path))
        fail_msg ("keygen should print the public key and both files:\n%s", said);
    free (said);
    assert_string_equal (zcert_meta (pub, "role"), "producer");
    assert_string_equal (zcert_meta (pub, "tenants"), "t1,t2");
    char *text = s_read (pub_path);
    assert_null (strstr (text, "secret-key"));
    free (text);
    zcert_t *secret = zcert_load (secret_path);
    assert_non_null (secret);
    assert_string_equal (zcert_public_txt (secret), zcert_public_txt (pub));
    assert_string_not_equal (zcert_secret_txt (secret), "0000000000000000000000000000000000000000");
    zcert_destroy (&secret);

    // again: refused, and the files are untouched
    int code = zlt_run (argv, NULL, out, err, RUN_MS);
    assert_true (code != 0);
    s_expect_said (err, "already exists", "keygen over existing files");
    zcert_t *again = zcert_load (pub_path);
    assert_string_equal (zcert_public_txt (again), zcert_public_txt (pub));
    zcert_destroy (&again);
    zcert_destroy (&pub);

    const char *bad[] = {ctl, "keygen", "bob", "--role", "root", "--dir", keys, NULL};
    assert_int_equal (zlt_run (bad, NULL, out, err, RUN_MS), 2);
    s_expect_said (err, "unknown role 'root'", "keygen --role root");
    char *bob = zlt_path (keys, "bob");
    assert_int_equal (access (bob, F_OK), -1);
    const char *help[] = {ctl, "keygen", "--help", NULL};
    assert_int_equal (zlt_run (help, NULL, out, err, RUN_MS), 0);
    s_expect_said (out, "--tenants", "keygen --help");
    free (bob);
    free (pub_path);
    free (secret_path);
    free (keys);
    free (out);
    free (err);
    free (ctl);
}

/*  A producer bound to t1: accepted for t1, rejected UNAUTHORIZED for t2
    (exit 1, the broker's reason). Keys also come from the environment. */
static void
test_producer_tenants (void **state)
{
    keys_t k;
    s_keys (&k);
    zlt_broker_t *b = s_broker (&k);
    admin_t *admin = s_admin_new (&k, b);
    char *out = zlt_path (k.dir, "submit.out"), *err = zlt_path (k.dir, "submit.err");

    s_expect (s_submit (&k, b, k.producer, "t1", "a", "hello", "10s", out, err), 0,
              "zlane-submit for t1", err);
    char *printed = s_read (out);
    assert_true (strtoull (printed, NULL, 10) > 0);
    free (printed);

    s_expect (s_submit (&k, b, k.producer, "t2", "a", "hello", "10s", out, err), 1,
              "zlane-submit for t2", err);
    s_expect_said (err, "unauthorized", "zlane-submit for t2");
    s_expect_said (err, "may not submit for tenant 't2'", "zlane-submit for t2");
    assert_int_equal (s_counter (admin, "jobs_accepted"), 1);
    assert_int_equal (s_counter (admin, "err_unauthorized"), 1);

    // ZLANE_CURVE_SERVER / ZLANE_CERT stand in for the flags
    setenv ("ZLANE_CURVE_SERVER", k.broker_pub, 1);
    setenv ("ZLANE_CERT", k.producer, 1);
    int code = s_submit (&k, b, NULL, "t1", "a", "from the environment", "10s", out, err);
    unsetenv ("ZLANE_CURVE_SERVER");
    unsetenv ("ZLANE_CERT");
    s_expect (code, 0, "zlane-submit with keys from the environment", err);
    assert_int_equal (s_counter (admin, "jobs_accepted"), 2);

    // a CURVE broker stops cleanly (under ASan: nothing leaked)
    s_admin_destroy (&admin);
    if (zlt_broker_stop (b, WAIT_MS) != 0) {
        zlt_broker_dump (b, 4000);
        fail_msg ("the CURVE broker did not stop cleanly");
    }
    free (out);
    free (err);
    s_keys_free (&k);
}

/*  A key the broker does not know, and a client without CURVE: neither gets
    through (zlane-submit times out, exit 3, and says why; zlane-ctl exits 3
    at once) and the broker counts each refused handshake in
    err_auth_failed. A key added to the clients directory later is let in. */
static void
test_strangers_refused (void **state)
{
    keys_t k;
    s_keys (&k);
    zlt_broker_t *b = s_broker (&k);
    admin_t *admin = s_admin_new (&k, b);
    char *out = zlt_path (k.dir, "out"), *err = zlt_path (k.dir, "err");
    assert_int_equal (s_counter (admin, "err_auth_failed"), 0);

    s_expect (s_submit (&k, b, k.stranger, "t1", "a", "hello", "1s", out, err), 3,
              "zlane-submit with an unknown key", err);
    s_expect_said (err, "refused this client's CURVE key", "zlane-submit with an unknown key");
    assert_int_equal (s_wait_counter (admin, "err_auth_failed", 1, WAIT_MS), 0);
    uint64_t after_stranger = s_counter (admin, "err_auth_failed");

    s_expect (s_submit (&k, b, NULL, "t1", "a", "hello", "1s", out, err), 3,
              "zlane-submit without CURVE", err);
    s_expect_said (err, "requires CURVE", "zlane-submit without CURVE");
    assert_int_equal (s_wait_counter (admin, "err_auth_failed", after_stranger + 1, WAIT_MS), 0);
    uint64_t after_plain = s_counter (admin, "err_auth_failed");

    // zlane-ctl says so at once rather than waiting out its timeout
    const char *stats[] = {"stats", NULL};
    s_expect (s_ctl (&k, b, k.stranger, stats, out, err), 3, "zlane-ctl with an unknown key", err);
    s_expect_said (err, "refused this key", "zlane-ctl with an unknown key");
    s_expect (s_ctl (&k, b, NULL, stats, out, err), 3, "zlane-ctl without CURVE", err);
    s_expect_said (err, "--curve-server", "zlane-ctl without CURVE");
    const char *tail[] = {"tail", NULL};
    s_expect (s_ctl (&k, b, k.stranger, tail, out, err), 3, "zlane-ctl tail with an unknown key",
              err);
    s_expect_said (err, "refused this key", "zlane-ctl tail with an unknown key");
    assert_int_equal (s_wait_counter (admin, "err_auth_failed", after_plain + 3, WAIT_MS), 0);
    uint64_t after_ctl = s_counter (admin, "err_auth_failed");

    // a producer refused at first gets in once its key is in the clients
    // directory: it dials again (the broker reloads the directory)
    char *bin = zlt_bin ("zlane-submit");
    char *late_out = zlt_path (k.dir, "late.out"), *late_err = zlt_path (k.dir, "late.err");
    const char *late_argv[] = {bin,
                               "--broker",
                               zlt_broker_endpoint (b, "frontend"),
                               "--tenant",
                               "t1",
                               "--lane",
                               "a",
                               "--timeout",
                               "20s",
                               "--curve-server",
                               k.broker_pub,
                               "--cert",
                               k.latecomer,
                               "let me in",
                               NULL};
    zlt_proc_t *late = zlt_spawn (late_argv, NULL, late_out, late_err);
    assert_non_null (late);
    if (zlt_wait_file_has (late_err, "refused this client's CURVE key", WAIT_MS) != 0) {
        zlt_dump_file ("zlane-submit stderr", late_err, 2000);
        fail_msg ("the broker did not refuse the latecomer's key");
    }
    assert_int_equal (s_wait_counter (admin, "err_auth_failed", after_ctl + 1, WAIT_MS), 0);
    assert_int_equal (s_counter (admin, "jobs_accepted"), 0);
    char *late_pub = zlt_path (k.keys, "latecomer"), *late_copy = zlt_path (k.clients, "latecomer");
    size_t len;
    char *text = zlt_read_file (late_pub, &len);
    assert_non_null (text);
    assert_int_equal (zlt_write_file (late_copy, text, len), 0);
    assert_int_equal (zlt_proc_wait (late, 2 * WAIT_MS), 0);
    s_expect (zlt_proc_exit_code (late), 0, "zlane-submit admitted late", late_err);
    assert_int_equal (s_counter (admin, "jobs_accepted"), 1);
    zlt_proc_destroy (&late);
    free (text);
    free (late_pub);
    free (late_copy);
    free (late_out);
    free (late_err);
    free (bin);

    s_admin_destroy (&admin);
    free (out);
    free (err);
    s_keys_free (&k);
}

/*  A worker key bound to lane a (keys from its --config file): zlane-worker
    over CURVE takes a's jobs; its Ready for lane b is refused (Error
    UNAUTHORIZED, counted, logged by the worker) and b's job is never
    dispatched to it. It stops cleanly on SIGTERM. */
static void
test_worker_lanes (void **state)
{
    keys_t k;
    s_keys (&k);
    zlt_broker_t *b = s_broker (&k);
    admin_t *admin = s_admin_new (&k, b);
    char *record = zlt_path (k.dir, "record"), *werr = zlt_path (k.dir, "worker.err");
    char *out = zlt_path (k.dir, "out"), *err = zlt_path (k.dir, "err");
    zlt_proc_t *worker = s_worker (&k, b, "a,b", true, record, werr);
    if (s_wait_counter (admin, "workers_ready", 1, WAIT_MS) != 0 ||
        s_wait_counter (admin, "err_unauthorized", 1, WAIT_MS) != 0) {
        zlt_dump_file ("zlane-worker stderr", werr, 2000);
        fail_msg ("the worker was not admitted for lane a, or not refused for lane b");
    }
    assert_int_equal (zlt_wait_file_has (werr, "may not take jobs from lane 'b'", WAIT_MS), 0);
    s_expect_said (werr, "unauthorized", "zlane-worker stderr");

    // a producer for t1 submits to both lanes: only a's job runs
    s_expect (s_submit (&k, b, k.producer, "t1", "a", "job for a", "10s", out, err), 0,
              "zlane-submit to lane a", err);
    char *id_a = s_read (out);
    s_expect (s_submit (&k, b, k.producer, "t1", "b", "job for b", "10s", out, err), 0,
              "zlane-submit to lane b", err);
    if (s_wait_counter (admin, "jobs_acked", 1, WAIT_MS) != 0) {
        zlt_dump_file ("zlane-worker stderr", werr, 2000);
        fail_msg ("the job for lane a was not run");
    }
    char *ran = s_read (record);
    char want[64];
    snprintf (want, sizeof want, "%" PRIu64 " 1 ", (uint64_t)strtoull (id_a, NULL, 10));
    if (strncmp (ran, want, strlen (want)) != 0 || strchr (ran, '\n') != ran + strlen (ran) - 1)
        fail_msg ("the handler should have run job %s once and nothing else; it ran:\n%s", id_a,
                  ran);
    assert_int_equal (s_counter (admin, "jobs_dispatched"), 1);
    assert_int_equal (zlt_proc_exit_code (worker), -1); // still serving lane a
    zlt_proc_signal (worker, SIGTERM);                  // and it stops cleanly
    assert_int_equal (zlt_proc_wait (worker, WAIT_MS), 0);
    if (zlt_proc_exit_code (worker) != 0) {
        zlt_dump_file ("zlane-worker stderr", werr, 2000);
        fail_msg ("zlane-worker exited %d after SIGTERM", zlt_proc_exit_code (worker));
    }
    zlt_proc_destroy (&worker);
    free (ran);
    free (id_a);
    s_admin_destroy (&admin);
    free (record);
    free (werr);
    free (out);
    free (err);
    s_keys_free (&k);
}

/*  A worker whose key leaves the clients directory loses its rights while
    connected: its next message is refused, the broker drops it, and a new
    job is not dispatched to it. */
static void
test_worker_key_revoked (void **state)
{
    keys_t k;
    s_keys (&k);
    zlt_broker_t *b = s_broker (&k);
    admin_t *admin = s_admin_new (&k, b);
    char *record = zlt_path (k.dir, "record"), *werr = zlt_path (k.dir, "worker.err");
    char *out = zlt_path (k.dir, "out"), *err = zlt_path (k.dir, "err");
    zlt_proc_t *worker = s_worker (&k, b, "a", false, record, werr);
    assert_int_equal (s_wait_counter (admin, "workers_ready", 1, WAIT_MS), 0);
    uint64_t refused = s_counter (admin, "err_unauthorized");
    char *key = zlt_path (k.clients, "worker-a");
    assert_int_equal (unlink (key), 0);
    // its heartbeats are refused and the broker forgets it
    if (s_wait_counter (admin, "err_unauthorized", refused + 1, WAIT_MS) != 0 ||
        s_wait_counter (admin, "workers_dead", 1, WAIT_MS) != 0) {
        zlt_dump_file ("zlane-worker stderr", werr, 2000);
        fail_msg ("the revoked worker was neither refused nor dropped");
    }
    s_expect (s_submit (&k, b, k.producer, "t1", "a", "after revocation", "10s", out, err), 0,
              "zlane-submit to lane a", err);
    assert_int_equal (s_counter (admin, "jobs_dispatched"), 0);
    zlt_proc_destroy (&worker);
    free (key);
    s_admin_destroy (&admin);
    free (record);
    free (werr);
    free (out);
    free (err);
    s_keys_free (&k);
}

/*  With CURVE, a lease is bound to the key as well as the connection: a
    worker process that reconnects with its key and instance takes its
    leases over; another key quoting the same instance and the real token
    does not, and is refused NOT_HOLDER. */
typedef struct {
    zsock_t *sock;
    zl_codec_t *codec;
} raw_t;

static raw_t
s_raw_worker (const keys_t *k, zlt_broker_t *b, const char *cert)
{
    zl_curve_t curve;
    char err[256];
    if (zl_curve_load (&curve, k->broker_pub, cert, err, sizeof err) != 0)
        fail_msg ("zl_curve_load: %s", err);
    raw_t r = {zsock_new (ZMQ_DEALER), zl_codec_new ()};
    zsock_set_linger (r.sock, 0);
    zl_curve_apply (&curve, r.sock);
    assert_int_equal (zsock_connect (r.sock, "%s", zlt_broker_endpoint (b, "backend")), 0);
    return r;
}

static void
s_raw_send (raw_t *r, const zl_msg_t *m)
{
    assert_int_equal (zl_wire_send (zsock_resolve (r->sock), r->codec, m, 0), 0);
}

// The next message of `kind` or an Error (Heartbeats skipped), decoded.
static zl_msg_t
s_raw_expect (raw_t *r, zl_msg_kind_t kind)
{
    int64_t deadline = zlt_now_ms () + WAIT_MS;
    for (;;) {
        int64_t left = deadline - zlt_now_ms ();
        zmq_pollitem_t item = {zsock_resolve (r->sock), 0, ZMQ_POLLIN, 0};
        if (left <= 0 || zmq_poll (&item, 1, left) <= 0)
            fail_msg ("no %s over CURVE within %d ms", zl_msg_kind_name (kind), WAIT_MS);
        zmq_msg_t frame;
        zmq_msg_init (&frame);
        assert_true (zmq_msg_recv (&frame, zsock_resolve (r->sock), 0) >= 0);
        zl_msg_t m;
        zl_decode_rc_t rc =
            zl_codec_decode (r->codec, zmq_msg_data (&frame), zmq_msg_size (&frame), &m);
        zmq_msg_close (&frame);
        assert_int_equal (rc, ZL_DECODE_OK);
        if (m.kind == kind || m.kind == ZL_MSG_ERROR)
            return m;
    }
}

static void
s_raw_destroy (raw_t *r)
{
    zsock_destroy (&r->sock);
    zl_codec_destroy (&r->codec);
}

static void
test_leases_bound_to_key (void **state)
{
    keys_t k;
    s_keys (&k);
    char *other;
    s_keygen (&k, "worker-other", "worker", "--lanes", "a", true, &other);
    zlt_broker_t *b = s_broker_with (&k, "60"); // (its raw workers send no heartbeats)
    admin_t *admin = s_admin_new (&k, b);
    const char *lanes[] = {"a"};
    zl_msg_t ready = {.kind = ZL_MSG_READY, .u.ready = {"w", 1, lanes, 1, 0x77}};
    raw_t w1 = s_raw_worker (&k, b, k.worker);
    s_raw_send (&w1, &ready);
    assert_int_equal (s_wait_counter (admin, "workers_ready", 1, WAIT_MS), 0);
    char *out = zlt_path (k.dir, "out"), *err = zlt_path (k.dir, "err");
    s_expect (s_submit (&k, b, k.producer, "t1", "a", "job", "10s", out, err), 0, "zlane-submit",
              err);
    zl_msg_t m = s_raw_expect (&w1, ZL_MSG_DISPATCH);
    assert_int_equal (m.kind, ZL_MSG_DISPATCH);
    zl_ack_item_t ack = {m.u.dispatch.jobs[0].job_id, m.u.dispatch.jobs[0].lease, 10};
    zl_msg_t ack_msg = {.kind = ZL_MSG_ACK, .u.ack = {1, &ack}};

    // another key, the same instance: no takeover, the token is not enough
    raw_t w2 = s_raw_worker (&k, b, other);
    ready.u.ready.capacity = 0;
    s_raw_send (&w2, &ready);
    assert_int_equal (s_wait_counter (admin, "workers_ready", 2, WAIT_MS), 0);
    assert_int_equal (s_counter (admin, "workers_reconnected"), 0);
    s_raw_send (&w2, &ack_msg);
    m = s_raw_expect (&w2, ZL_MSG_SETTLED);
    assert_int_equal (m.kind, ZL_MSG_ERROR);
    assert_int_equal (m.u.error.code, ZL_ERR_NOT_HOLDER);
    assert_int_equal (s_counter (admin, "err_not_holder"), 1);

    // the same key on a new connection with the same instance: the lease follows
    raw_t w1b = s_raw_worker (&k, b, k.worker);
    s_raw_send (&w1b, &ready);
    assert_int_equal (s_wait_counter (admin, "workers_reconnected", 1, WAIT_MS), 0);
    s_raw_send (&w1b, &ack_msg);
    m = s_raw_expect (&w1b, ZL_MSG_SETTLED);
    if (m.kind == ZL_MSG_ERROR)
        fail_msg ("the reconnected holder's ack was refused: %s", m.u.error.message);
    assert_int_equal (m.u.settled.n, 1);
    assert_int_equal (s_counter (admin, "jobs_acked"), 1);
    s_raw_destroy (&w1);
    s_raw_destroy (&w2);
    s_raw_destroy (&w1b);
    s_admin_destroy (&admin);
    free (other);
    free (out);
    free (err);
    s_keys_free (&k);
}

/*  Two files in the clients directory with one public key (the producer's,
    copied under another name): the broker starts and serves, and lets that
    key in from neither file, since which one holds the real bindings is
    unknown. Removing the copy lets the producer in again. */
static void
test_repeated_key (void **state)
{
    keys_t k;
    s_keys (&k);
    char *orig = zlt_path (k.clients, "producer-t1"), *copy = zlt_path (k.clients, "producer-copy");
    size_t len;
    char *text = zlt_read_file (orig, &len);
    assert_non_null (text);
    assert_int_equal (zlt_write_file (copy, text, len), 0);
    zlt_broker_t *b = s_broker (&k);
    admin_t *admin = s_admin_new (&k, b);
    char *out = zlt_path (k.dir, "out"), *err = zlt_path (k.dir, "err");
    s_expect (s_submit (&k, b, k.producer, "t1", "a", "hello", "1s", out, err), 3,
              "zlane-submit with a key held by two files", err);
    s_expect_said (err, "refused this client's CURVE key", "zlane-submit with a repeated key");
    assert_int_equal (s_counter (admin, "jobs_accepted"), 0);
    assert_int_equal (unlink (copy), 0);
    // the directory is looked at again within 250 ms: --timeout covers it
    s_expect (s_submit (&k, b, k.producer, "t1", "a", "hello", "10s", out, err), 0,
              "zlane-submit once the copy is gone", err);
    assert_int_equal (s_counter (admin, "jobs_accepted"), 1);
    s_admin_destroy (&admin);
    free (text);
    free (orig);
    free (copy);
    free (out);
    free (err);
    s_keys_free (&k);
}

/*  Dead letters over CURVE: `zlane-ctl tail` with a subscriber key gets the
    DeadLetter event; the subscriber may read (stats, dlq list) but not
    purge; a producer key may not even read; the admin redrives and purges. */
static void
test_admin_and_subscriber (void **state)
{
    keys_t k;
    s_keys (&k);
    zlt_broker_t *b = s_broker (&k);
    admin_t *admin = s_admin_new (&k, b);
    char *record = zlt_path (k.dir, "record"), *werr = zlt_path (k.dir, "worker.err");
    char *out = zlt_path (k.dir, "out"), *err = zlt_path (k.dir, "err");
    char *tail_out = zlt_path (k.dir, "tail.out"), *tail_err = zlt_path (k.dir, "tail.err");
    zlt_proc_t *worker = s_worker (&k, b, "a", false, record, werr);
    assert_int_equal (s_wait_counter (admin, "workers_ready", 1, WAIT_MS), 0);

    // a first dead letter keeps alert.dlq coming every 200 ms
    s_expect (s_submit (&k, b, k.producer, "t1", "a", "poison 1", "10s", out, err), 0,
              "zlane-submit poison 1", err);
    char *id1 = s_read (out);
    *strchr (id1, '\n') = '\0';
    assert_int_equal (s_wait_counter (admin, "jobs_dead_lettered", 1, WAIT_MS), 0);

    // tail with the subscriber key; an alert shows its subscription is live
    char *ctl = zlt_bin ("zlane-ctl");
    const char *tail_argv[] = {ctl,
                               "--events",
                               zlt_broker_endpoint (b, "events"),
                               "--curve-server",
                               k.broker_pub,
                               "--cert",
                               k.subscriber,
                               "--json",
                               "tail",
                               NULL};
    zlt_proc_t *tail = zlt_spawn (tail_argv, NULL, tail_out, tail_err);
    assert_non_null (tail);
    if (zlt_wait_file_has (tail_out, "\"event\":\"dlq_alert\"", WAIT_MS) != 0) {
        zlt_dump_file ("zlane-ctl tail stderr", tail_err, 2000);
        fail_msg ("zlane-ctl tail over CURVE got no alert.dlq event");
    }
    s_expect (s_submit (&k, b, k.producer, "t1", "a", "poison 2", "10s", out, err), 0,
              "zlane-submit poison 2", err);
    char *id2 = s_read (out);
    *strchr (id2, '\n') = '\0';
    char want[128];
    snprintf (want, sizeof want, "\"event\":\"dead_letter\",\"job_id\":%s,", id2);
    if (zlt_wait_file_has (tail_out, want, WAIT_MS) != 0) {
        zlt_dump_file ("zlane-ctl tail stdout", tail_out, 2000);
        fail_msg ("zlane-ctl tail did not print the DeadLetter of job %s", id2);
    }
    zlt_proc_signal (tail, SIGTERM);
    assert_int_equal (zlt_proc_wait (tail, WAIT_MS), 0);
    assert_int_equal (zlt_proc_exit_code (tail), 0);

    // the subscriber reads
    const char *dead[] = {"stats", "--counter", "jobs_dead_lettered", NULL};
    s_expect (s_ctl (&k, b, k.subscriber, dead, out, err), 0, "subscriber stats", err);
    s_expect_said (out, "2\n", "subscriber stats --counter jobs_dead_lettered");
    const char *list[] = {"dlq", "list", NULL};
    s_expect (s_ctl (&k, b, k.subscriber, list, out, err), 0, "subscriber dlq list", err);
    s_expect_said (out, id1, "subscriber dlq list");
    s_expect_said (out, id2, "subscriber dlq list");

    // ... but may not purge, and a producer may not even read
    uint64_t refused = s_counter (admin, "err_unauthorized");
    const char *purge[] = {"dlq", "purge", "--all", NULL};
    s_expect (s_ctl (&k, b, k.subscriber, purge, out, err), 1, "subscriber dlq purge --all", err);
    s_expect_said (err, "unauthorized", "subscriber dlq purge --all");
    s_expect_said (err, "role subscriber", "subscriber dlq purge --all");
    s_expect (s_ctl (&k, b, k.producer, dead, out, err), 1, "producer stats", err);
    s_expect_said (err, "role producer", "producer stats");
    assert_int_equal (s_counter (admin, "err_unauthorized"), refused + 2);
    assert_int_equal (s_counter (admin, "jobs_purged"), 0);
    // nor subscribe to the events (a PUB socket cannot answer with an Error:
    // the handshake is refused, and counted), and neither may a worker
    uint64_t failed = s_counter (admin, "err_auth_failed");
    const char *ptail[] = {"tail", NULL};
    s_expect (s_ctl (&k, b, k.producer, ptail, out, err), 3, "zlane-ctl tail with a producer key",
              err);
    s_expect_said (err, "refused this key", "zlane-ctl tail with a producer key");
    assert_int_equal (s_wait_counter (admin, "err_auth_failed", failed + 1, WAIT_MS), 0);
    s_expect (s_ctl (&k, b, k.worker, ptail, out, err), 3, "zlane-ctl tail with a worker key", err);
    assert_int_equal (s_wait_counter (admin, "err_auth_failed", failed + 2, WAIT_MS), 0);

    // the admin redrives one (it dies again: PERMANENT) and purges both
    const char *redrive[] = {"dlq", "redrive", id1, NULL};
    s_expect (s_ctl (&k, b, k.admin, redrive, out, err), 0, "admin dlq redrive", err);
    s_expect_said (out, "redrove 1", "admin dlq redrive");
    assert_int_equal (s_wait_counter (admin, "jobs_dead_lettered", 3, WAIT_MS), 0);
    s_expect (s_ctl (&k, b, k.admin, purge, out, err), 0, "admin dlq purge --all", err);
    s_expect_said (out, "purged 2", "admin dlq purge --all");
    s_expect (s_ctl (&k, b, k.subscriber, list, out, err), 0, "subscriber dlq list", err);
    assert_false (s_file_has (out, id1));

    zlt_proc_destroy (&worker);
    zlt_proc_destroy (&tail);
    free (id1);
    free (id2);
    free (ctl);
    s_admin_destroy (&admin);
    free (record);
    free (werr);
    free (out);
    free (err);
    free (tail_out);
    free (tail_err);
    s_keys_free (&k);
}

/*  Without CURVE the broker refuses an endpoint other hosts can reach, and
    names it; --insecure lets it start, with an INSECURE warning. The
    0.0.0.0 bind is on port 0 and stopped as soon as it is up. Also: a
    broker certificate without its secret key is refused at start. */
static void
test_public_bind (void **state)
{
    const char *dir = zlt_tmpdir ();
    assert_non_null (dir);
    char *bin = zlt_bin ("zlane-broker");
    char *data = zlt_path (dir, "data"), *err = zlt_path (dir, "err");
    const char *argv[] = {bin,
                          "--frontend",
                          "tcp://0.0.0.0:0",
                          "--backend",
                          "tcp://127.0.0.1:*",
                          "--events",
                          "tcp://127.0.0.1:*",
                          "--admin",
                          "tcp://127.0.0.1:*",
                          "--data",
                          data,
                          "--lane",
                          "a",
                          NULL};
    int code = zlt_run (argv, NULL, NULL, err, 15000); // it must not get as far as binding
    if (code <= 0) {
        zlt_dump_file ("zlane-broker stderr", err, 2000);
        fail_msg ("a plaintext broker on 0.0.0.0 started (exit %d)", code);
    }
    s_expect_said (err, "tcp://0.0.0.0:0", "zlane-broker on 0.0.0.0 without CURVE");
    s_expect_said (err, "--insecure", "zlane-broker on 0.0.0.0 without CURVE");

    const char *insecure[] = {"--lane", "a", "--frontend", "tcp://0.0.0.0:0", "--insecure", NULL};
    zlt_broker_t *b = zlt_broker_start (insecure);
    assert_non_null (b);
    int stopped = zlt_broker_stop (b, WAIT_MS); // at once: nothing connects to it
    char *broker_err = zlt_path (zlt_broker_dir (b), "broker.err");
    s_expect_said (broker_err, "INSECURE", "zlane-broker --insecure");
    s_expect_said (broker_err, "tcp://0.0.0.0:0", "zlane-broker --insecure");
    assert_int_equal (stopped, 0);

    // the public half of the broker's key: it has no secret key to serve with
    keys_t k;
    s_keys (&k);
    char *lone = zlt_path (k.dir, "broker-public-only");
    size_t len;
    char *text = zlt_read_file (k.broker_pub, &len);
    assert_non_null (text);
    assert_int_equal (zlt_write_file (lone, text, len), 0);
    const char *pub_argv[] = {bin,
                              "--frontend",
                              "tcp://127.0.0.1:*",
                              "--backend",
                              "tcp://127.0.0.1:*",
                              "--events",
                              "tcp://127.0.0.1:*",
                              "--admin",
                              "tcp://127.0.0.1:*",
                              "--data",
                              data,
                              "--lane",
                              "a",
                              "--curve",
                              "--cert",
                              lone,
                              "--clients",
                              k.clients,
                              NULL};
    assert_int_equal (zlt_run (pub_argv, NULL, NULL, err, RUN_MS), 1);
    s_expect_said (err, "holds no secret key", "zlane-broker with a public certificate");
    free (text);
    free (lone);
    s_keys_free (&k);
    free (broker_err);
    free (data);
    free (err);
    free (bin);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown (test_keygen, zlt_teardown),
        cmocka_unit_test_teardown (test_producer_tenants, zlt_teardown),
        cmocka_unit_test_teardown (test_strangers_refused, zlt_teardown),
        cmocka_unit_test_teardown (test_worker_lanes, zlt_teardown),
        cmocka_unit_test_teardown (test_worker_key_revoked, zlt_teardown),
        cmocka_unit_test_teardown (test_leases_bound_to_key, zlt_teardown),
        cmocka_unit_test_teardown (test_repeated_key, zlt_teardown),
        cmocka_unit_test_teardown (test_admin_and_subscriber, zlt_teardown),
        cmocka_unit_test_teardown (test_public_bind, zlt_teardown),
    };
    int rc = cmocka_run_group_tests (tests, NULL, NULL);
    zsys_shutdown ();
    return rc;
}
