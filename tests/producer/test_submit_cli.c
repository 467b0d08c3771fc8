/*  test_submit_cli: zlane-submit run as a process against a fake broker.
    The fake broker is a thread with a ROUTER on 127.0.0.1 and an ephemeral
    port: it grants a little credit at a time, accepts every job as
    5000 + seq, and rejects payloads "reject-me" as INVALID. Each run's
    output goes to files in a fresh temp directory. The child carries an
    alarm so a hung CLI cannot hang the test. */
#include "clock.h"
#include "codec.h"
#include "wire.h"

#include <czmq.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#define MAX_KEYS 64

typedef struct {
    zsock_t *router;
    char endpoint[256];
    pthread_t thread;
    atomic_bool stop;
    char keys[MAX_KEYS][64]; // idempotency keys by seq - 1
} broker_t;

static void *
s_broker_run (void *arg)
{
    broker_t *b = arg;
    void *handle = zsock_resolve (b->router);
    zl_codec_t *codec = zl_codec_new ();
    uint64_t limit = 0;
    while (!atomic_load (&b->stop)) {
        zmq_pollitem_t item = {handle, 0, ZMQ_POLLIN, 0};
        if (zmq_poll (&item, 1, 50) != 1)
            continue;
        zl_peer_t peer;
        int size = zmq_recv (handle, peer.data, sizeof peer.data, 0);
        if (size <= 0)
            continue;
        peer.len = (uint8_t)size;
        zmq_msg_t frame;
        zmq_msg_init (&frame);
        zmq_msg_recv (&frame, handle, 0);
        zl_msg_t msg;
        zl_decode_rc_t rc =
            zl_codec_decode (codec, zmq_msg_data (&frame), zmq_msg_size (&frame), &msg);
        zmq_msg_close (&frame);
        if (rc != ZL_DECODE_OK)
            continue;
        if (msg.kind == ZL_MSG_HELLO)
            limit = 3; // a little at a time, so the CLI waits for credit
        else if (msg.kind == ZL_MSG_SUBMIT) {
            static zl_acceptance_t acc[256];
            static zl_rejection_t rej[256];
            size_t n_acc = 0, n_rej = 0;
            for (size_t i = 0; i < msg.u.submit.n && i < 256; i++) {
                const zl_job_spec_t *spec = &msg.u.submit.jobs[i];
                if (spec->seq >= 1 && spec->seq <= MAX_KEYS)
                    snprintf (b->keys[spec->seq - 1], 64, "%s", spec->idempotency_key);
                if (spec->payload.len == 9 && memcmp (spec->payload.data, "reject-me", 9) == 0)
                    rej[n_rej++] = (zl_rejection_t){spec->seq, ZL_REJECT_INVALID, "bad payload", 0};
                else
                    acc[n_acc++] = (zl_acceptance_t){spec->seq, 5000 + spec->seq, false};
            }
            limit += msg.u.submit.n;
            zl_msg_t reply = {.kind = ZL_MSG_ACCEPTED, .u.accepted = {n_acc, acc}};
            if (n_acc)
                zl_wire_send_to (handle, &peer, codec, &reply);
            reply = (zl_msg_t){.kind = ZL_MSG_REJECTED, .u.rejected = {n_rej, rej}};
            if (n_rej)
                zl_wire_send_to (handle, &peer, codec, &reply);
        } else
            continue;
        zl_msg_t credit = {.kind = ZL_MSG_CREDIT, .u.credit.limit = limit};
        zl_wire_send_to (handle, &peer, codec, &credit);
    }
    zl_codec_destroy (&codec);
    return NULL;
}

static broker_t *
s_broker_start (void)
{
    broker_t *b = calloc (1, sizeof *b);
    b->router = zsock_new (ZMQ_ROUTER);
    assert_int_equal (zmq_bind (zsock_resolve (b->router), "tcp://127.0.0.1:*"), 0);
    size_t size = sizeof b->endpoint;
    zmq_getsockopt (zsock_resolve (b->router), ZMQ_LAST_ENDPOINT, b->endpoint, &size);
    assert_int_equal (pthread_create (&b->thread, NULL, s_broker_run, b), 0);
    return b;
}

static void
s_broker_stop (broker_t **b_p)
{
    broker_t *b = *b_p;
    atomic_store (&b->stop, true);
    pthread_join (b->thread, NULL);
    zsock_destroy (&b->router);
    free (b);
    *b_p = NULL;
}

// ---------------------------------------------------------------- running the CLI

typedef struct {
    int status; // exit status, or -1 if it did not exit normally
    char out[8192];
    char err[8192];
} run_t;

static char s_dir[256];

static void
s_read_file (const char *path, char *buf, size_t size)
{
    buf[0] = '\0';
    FILE *f = fopen (path, "r");
    if (!f)
        return;
    size_t n = fread (buf, 1, size - 1, f);
    buf[n] = '\0';
    fclose (f);
}

//  Run zlane-submit with `argv` (NULL-terminated, without the program name),
//  stdin from `input` (NULL = /dev/null). Waits for it to exit.
static void
s_run (run_t *run, const char *input, const char *first, ...)
{
    //  CTest names the bin directory; run by hand, the CLI sits next to us.
    char program[512];
    const char *bin_dir = getenv ("ZLANE_BIN_DIR");
    if (bin_dir)
        snprintf (program, sizeof program, "%s/zlane-submit", bin_dir);
    else {
        ssize_t n = readlink ("/proc/self/exe", program, sizeof program - 1);
        assert_true (n > 0);
        program[n] = '\0';
        char *slash = strrchr (program, '/');
        snprintf (slash + 1, sizeof program - (size_t)(slash + 1 - program), "zlane-submit");
    }
    const char *argv[32] = {program};
    int argc = 1;
    va_list args;
    va_start (args, first);
    for (const char *a = first; a && argc < 31; a = va_arg (args, const char *))
        argv[argc++] = a;
    va_end (args);
    argv[argc] = NULL;

    char in_path[300], out_path[300], err_path[300];
    snprintf (in_path, sizeof in_path, "%s/in", s_dir);
    snprintf (out_path, sizeof out_path, "%s/out", s_dir);
    snprintf (err_path, sizeof err_path, "%s/err", s_dir);
    FILE *f = fopen (in_path, "w");
    assert_non_null (f);
    if (input)
        fputs (input, f);
    fclose (f);

    pid_t pid = fork ();
    assert_true (pid >= 0);
    if (pid == 0) {
        alarm (30); // survives exec: a hung CLI dies instead of hanging the test
        int in = open (in_path, O_RDONLY);
        int out = open (out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int err = open (err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2 (in, 0);
        dup2 (out, 1);
        dup2 (err, 2);
        execv (program, (char *const *)argv);
        _exit (127);
    }
    int status;
    assert_int_equal (waitpid (pid, &status, 0), pid);
    run->status = WIFEXITED (status) ? WEXITSTATUS (status) : -1;
    s_read_file (out_path, run->out, sizeof run->out);
    s_read_file (err_path, run->err, sizeof run->err);
}

// ---------------------------------------------------------------- tests

static void
test_help_and_usage (void **state)
{
    run_t run;
    s_run (&run, NULL, "--help", NULL);
    assert_int_equal (run.status, 0);
    const char *flags[] = {"--broker",     "--tenant", "--lane",         "--key",
                           "--key-prefix", "--delay",  "--max-attempts", "--lease",
                           "--max-run",    "--header", "--timeout",      "--quiet",
                           "--json",       "--file",   "--lines",        "--verbose"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (!strstr (run.out, flags[i]))
            fail_msg ("--help does not mention %s", flags[i]);

    s_run (&run, NULL, "--lane", "email", "x", NULL);
    assert_int_equal (run.status, 2);
    assert_non_null (strstr (run.err, "--tenant is required"));
    s_run (&run, NULL, "--tenant", "t", "--lane", "l", "--delay", "5x", "x", NULL);
    assert_int_equal (run.status, 2);
    assert_non_null (strstr (run.err, "--delay"));
    s_run (&run, NULL, "--tenant", "t", "--lane", "l", "--header", "novalue", "x", NULL);
    assert_int_equal (run.status, 2);
    s_run (&run, NULL, "--tenant", "t", "--lane", "l", "--lines", "--key", "k", NULL);
    assert_int_equal (run.status, 2);
    s_run (&run, NULL, "--tenant", "t", "--lane", "l", NULL);
    assert_int_equal (run.status, 2);
    assert_non_null (strstr (run.err, "no payload"));
}

static void
test_unreachable_exits_3 (void **state)
{
    //  A port nobody listens on: bind one, then close it.
    broker_t *b = s_broker_start ();
    char endpoint[256];
    snprintf (endpoint, sizeof endpoint, "%s", b->endpoint);
    s_broker_stop (&b);

    run_t run;
    s_run (&run, NULL, "--broker", endpoint, "--tenant", "t", "--lane", "l", "--timeout", "300ms",
           "payload", NULL);
    assert_int_equal (run.status, 3);
    char expected[300];
    snprintf (expected, sizeof expected, "broker unreachable at %s for 0.3 s", endpoint);
    if (!strstr (run.err, expected))
        fail_msg ("stderr lacks '%s':\n%s", expected, run.err);
    assert_string_equal (run.out, "");
}

static void
test_lines_in_order (void **state)
{
    broker_t *b = s_broker_start ();
    run_t run;
    s_run (&run, "one\ntwo\nreject-me\nfour\nfive", "--broker", b->endpoint, "--tenant", "t",
           "--lane", "l", "--lines", "--key-prefix", "batch7-", "--header", "a=b", NULL);
    assert_int_equal (run.status, 1);
    assert_string_equal (run.out, "5001\n5002\n\n5004\n5005\n");
    assert_non_null (strstr (run.err, "zlane-submit: job 3 rejected: invalid: bad payload"));
    for (int i = 0; i < 5; i++) {
        char key[32];
        snprintf (key, sizeof key, "batch7-%d", i + 1);
        assert_string_equal (b->keys[i], key);
    }
    s_broker_stop (&b);
}

static void
test_single_json (void **state)
{
    broker_t *b = s_broker_start ();
    run_t run;
    s_run (&run, "from stdin", "--broker", b->endpoint, "--tenant", "t", "--lane", "l", "--json",
           "--key", "k-1", "--delay", "5s", "-", NULL);
    assert_int_equal (run.status, 0);
    assert_string_equal (run.out, "{\"seq\":1,\"job_id\":5001,\"duplicate\":false}\n");
    assert_string_equal (b->keys[0], "k-1");

    s_run (&run, NULL, "--broker", b->endpoint, "--tenant", "t", "--lane", "l", "--json",
           "reject-me", NULL);
    assert_int_equal (run.status, 1);
    assert_non_null (strstr (run.out, "\"error\":\"rejected\",\"code\":\"invalid\""));
    s_broker_stop (&b);
}

int
main (void)
{
    snprintf (s_dir, sizeof s_dir, "/tmp/zlane-test-submit-XXXXXX");
    if (!mkdtemp (s_dir)) {
        perror ("mkdtemp");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test (test_help_and_usage),
        cmocka_unit_test (test_unreachable_exits_3),
        cmocka_unit_test (test_lines_in_order),
        cmocka_unit_test (test_single_json),
    };
    int failed = cmocka_run_group_tests (tests, NULL, NULL);
    char path[300];
    const char *names[] = {"in", "out", "err"};
    for (int i = 0; i < 3; i++) {
        snprintf (path, sizeof path, "%s/%s", s_dir, names[i]);
        unlink (path);
    }
    rmdir (s_dir);
    return failed;
}
