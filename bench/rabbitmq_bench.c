/*  zlane-rabbitmq-bench: the zlane-bench workload against RabbitMQ, for a
    side-by-side comparison. Speaks AMQP 0-9-1 through librabbitmq
    (rabbitmq-c); starts its own RabbitMQ node and its own epmd on 127.0.0.1,
    with a data and log directory of their own.

    zlane-rabbitmq-bench throughput [--jobs N] [--consumers C] [--payload B]
                         [--durability durable|transient] [--prefetch P]
                         [--ack-batch A] [--runs K]
        one publisher (this process) publishes N messages to one classic
        queue; C consumer processes (a connection each, basic.qos P, default
        200, like a worker's credit) ack every message after receiving it.
        Reports jobs/s from the first publish to the N-th ack, and the
        publish-to-ack latency. durable = durable queue, persistent messages
        and publisher confirms (at most 1000 unconfirmed; the publisher is
        done when all are confirmed); transient = non-durable queue,
        transient messages, no confirms. An ack covers every delivery
        received since the last (multiple) and is sent as soon as nothing
        more is buffered, or when A (default 64; 1 = one ack per message)
        are waiting: the consumer batches on the wire like the other clients.
        --runs K: K runs on the same node, a fresh queue each (a line each).
    zlane-rabbitmq-bench latency [--rate R] [--seconds S] [--consumers C]
                         [--payload B] [--durability durable|transient]
        open loop: message i is due at t0 + i/R and carries that due time
        (CLOCK_MONOTONIC, shared by the processes of one machine); the
        publisher never waits for an earlier message (only for a full confirm
        window). Latency = receipt by a consumer - due time, so a publisher
        that falls behind is charged for it. Prints p50/p90/p99/p99.9/max.
    zlane-rabbitmq-bench memory [--jobs N] [--payload B]
        publishes N persistent messages (durable queue, confirms) with no
        consumer, waits until the queue holds them and reports the growth of
        beam.smp's RSS per message (the lowest reading of the 3 s after).

    Every mode takes --rabbitmq-server PATH (default /usr/sbin/rabbitmq-server),
    --epmd PATH (default /usr/bin/epmd) and --timeout S (default 300: the
    measurement is killed after S seconds). The node is stopped by PID at
    exit, on failure too (SIGTERM, then SIGKILL after 15 s), then epmd; their
    directory is removed. */
#define _GNU_SOURCE
#include "benchproc.h"

#include <amqp.h>
#include <amqp_tcp_socket.h>
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define QUEUE "zlane-bench"
#define MAX_CONSUMERS 32
#define CONFIRM_WINDOW 1000
#define ACK_BATCH_MAX 1024
#define START_TIMEOUT_S 60
#define STOP_GRACE_MS 15000
#define RPC_TIMEOUT_S 30
#define DRAIN_TIMEOUT_MS 60000 // after the last publish, for the last acks

typedef struct {
    const char *mode;
    int durable;
    uint64_t jobs;
    int consumers, prefetch, ack_batch, runs;
    size_t payload;
    double rate, seconds;
    int port;   // the node's AMQP port
    pid_t beam; // the node's beam.smp process
} run_t;

static int64_t
s_now_us (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void s_die (const char *fmt, ...) __attribute__ ((noreturn, format (printf, 1, 2)));
static void
s_die (const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start (ap, fmt);
    vsnprintf (msg, sizeof msg, fmt, ap);
    va_end (ap);
    zl_benchproc_die (msg);
}

// ---------------------------------------------------------------- server
// The node this process started. s_server_stop (at exit) stops it.
static struct {
    pid_t owner;    // the process that started it: forked children leave it alone
    pid_t launcher; // the rabbitmq-server script, in a process group of its own
    pid_t beam;     // beam.smp, from the node's pid file; 0 until known
    char dir[PATH_MAX];
} s_srv;

static struct sigaction s_prev_int, s_prev_term;

// n distinct free loopback ports: each bound to port 0 while the others are held.
static void
s_free_ports (int *ports, int n)
{
    int fds[8];
    for (int i = 0; i < n; i++) {
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl (INADDR_LOOPBACK)};
        socklen_t al = sizeof a;
        fds[i] = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fds[i] < 0 || bind (fds[i], (struct sockaddr *)&a, sizeof a) != 0 ||
            getsockname (fds[i], (struct sockaddr *)&a, &al) != 0)
            zl_benchproc_die ("cannot find a free port");
        ports[i] = ntohs (a.sin_port);
    }
    for (int i = 0; i < n; i++)
        close (fds[i]);
}

static int
s_port_accepts (int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons ((uint16_t)port)};
    a.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    int fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int ok = fd >= 0 && connect (fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (fd >= 0)
        close (fd);
    return ok;
}

static void
s_write_file (const char *name, const char *text)
{
    char path[PATH_MAX + 64];
    snprintf (path, sizeof path, "%s/%s", s_srv.dir, name);
    FILE *f = fopen (path, "w");
    if (!f || fputs (text, f) < 0 || fclose (f) != 0)
        s_die ("cannot write %s", path);
}

static void
s_setenvf (const char *name, const char *fmt, ...)
{
    char v[PATH_MAX + 64];
    va_list ap;
    va_start (ap, fmt);
    vsnprintf (v, sizeof v, fmt, ap);
    va_end (ap);
    setenv (name, v, 1);
}

// beam.smp's pid from the node's pid file, checked in /proc; 0 if not known yet.
static pid_t
s_read_beam_pid (void)
{
    char path[PATH_MAX + 16], comm[32] = "";
    int pid = 0;
    snprintf (path, sizeof path, "%s/pid", s_srv.dir);
    FILE *f = fopen (path, "r");
    if (f) {
        if (fscanf (f, "%d", &pid) != 1)
            pid = 0;
        fclose (f);
    }
    if (pid <= 0)
        return 0;
    snprintf (path, sizeof path, "/proc/%d/comm", pid);
    f = fopen (path, "r");
    if (f) {
        if (!fgets (comm, sizeof comm, f))
            comm[0] = '\0';
        fclose (f);
    }
    return strncmp (comm, "beam.smp", 8) == 0 ? pid : 0;
}

// Wait up to ms for a child to end; 1 if it did.
static int
s_reap (pid_t pid, int ms)
{
    int64_t deadline = s_now_us () + (int64_t)ms * 1000;
    while (waitpid (pid, NULL, WNOHANG) == 0) {
        if (s_now_us () >= deadline)
            return 0;
        usleep (20000);
    }
    return 1;
}

// Stop the node by PID: SIGTERM to beam.smp (RabbitMQ shuts down cleanly on
// it; before its pid is known, to the launcher's group), SIGKILL if the
// launcher is still there after STOP_GRACE_MS; then epmd and every other
// child. Registered with atexit; only the process that started the node acts.
static void
s_server_stop (void)
{
    if (s_srv.owner != getpid ())
        return;
    s_srv.owner = 0;
    if (!s_srv.beam)
        s_srv.beam = s_read_beam_pid ();
    if (s_srv.launcher) {
        kill (s_srv.beam ? s_srv.beam : -s_srv.launcher, SIGTERM);
        if (!s_reap (s_srv.launcher, STOP_GRACE_MS) && s_srv.beam)
            kill (s_srv.beam, SIGKILL);
    }
    zl_benchproc_stop_all (1000);
}

// benchproc kills its children's process groups on SIGINT/SIGTERM, but
// beam.smp runs in a session of its own (su starts one): kill it first.
static void
s_on_signal (int sig)
{
    if (s_srv.owner == getpid () && s_srv.beam > 0)
        kill (s_srv.beam, SIGKILL);
    struct sigaction *prev = sig == SIGINT ? &s_prev_int : &s_prev_term;
    if (prev->sa_handler != SIG_DFL && prev->sa_handler != SIG_IGN)
        prev->sa_handler (sig);
    _exit (128 + sig);
}

static void
s_catch_signals (void)
{
    struct sigaction sa = {.sa_handler = s_on_signal};
    sigaction (SIGINT, &sa, &s_prev_int);
    sigaction (SIGTERM, &sa, &s_prev_term);
}

static void s_start_failed (const char *why) __attribute__ ((noreturn));
static void
s_start_failed (const char *why)
{
    char cmd[PATH_MAX + 64];
    fprintf (stderr, "zlane-rabbitmq-bench: %s; the end of its output:\n", why);
    snprintf (cmd, sizeof cmd, "tail -n 15 '%s/rabbitmq-server.out' | grep . >&2",
              zl_benchproc_tmp ());
    if (system (cmd) != 0)
        fprintf (stderr, "(none)\n");
    exit (1);
}

// The Debian wrapper (/usr/sbin/rabbitmq-server) started by root runs the
// node as the user rabbitmq (su): that user must reach and own its directory.
static void
s_give_dir_to_rabbitmq (void)
{
    struct passwd *pw = getuid () == 0 ? getpwnam ("rabbitmq") : NULL;
    if (pw &&
        (chmod (zl_benchproc_tmp (), 0711) != 0 || chown (s_srv.dir, pw->pw_uid, pw->pw_gid) != 0))
        zl_benchproc_die ("cannot give the node's directory to the user rabbitmq");
}

// The node's configuration: everything in its own directory (none of the
// system's files under /etc/rabbitmq), listening on 127.0.0.1 only, no plugins.
static void
s_write_config (int amqp_port)
{
    char conf[256];
    snprintf (conf, sizeof conf,
              "listeners.tcp.default = 127.0.0.1:%d\n"
              "loopback_users.guest = true\n"
              "log.console = false\n"
              "log.file.level = warning\n",
              amqp_port);
    s_write_file ("rabbitmq.conf", conf);
    s_write_file ("enabled_plugins", "[].\n");
    s_write_file ("rabbitmq-env.conf", "");
}

// In the launcher's child: the environment that points the node at its own
// directory, ports and epmd (ports: AMQP, Erlang distribution, epmd).
static void
s_node_env (const int ports[3])
{
    const char *d = s_srv.dir;
    s_setenvf ("HOME", "%s", d); // where Erlang keeps its cookie when run as root
    s_setenvf ("RABBITMQ_NODENAME", "zlbench%d@localhost", (int)s_srv.owner);
    s_setenvf ("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1");
    s_setenvf ("RABBITMQ_NODE_PORT", "%d", ports[0]);
    s_setenvf ("RABBITMQ_DIST_PORT", "%d", ports[1]);
    s_setenvf ("RABBITMQ_MNESIA_BASE", "%s/mnesia", d);
    s_setenvf ("RABBITMQ_LOG_BASE", "%s/log", d);
    s_setenvf ("RABBITMQ_CONFIG_FILE", "%s/rabbitmq.conf", d);
    s_setenvf ("RABBITMQ_ADVANCED_CONFIG_FILE", "%s/advanced.config", d);
    s_setenvf ("RABBITMQ_CONF_ENV_FILE", "%s/rabbitmq-env.conf", d);
    s_setenvf ("RABBITMQ_ENABLED_PLUGINS_FILE", "%s/enabled_plugins", d);
    s_setenvf ("RABBITMQ_PLUGINS_EXPAND_DIR", "%s/plugins-expand", d);
    s_setenvf ("RABBITMQ_PID_FILE", "%s/pid", d);
    // the distribution listener binds every interface unless told
    s_setenvf ("RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS",
               "-kernel inet_dist_use_interface {127,0,0,1}");
    s_setenvf ("ERL_EPMD_ADDRESS", "127.0.0.1");
    s_setenvf ("ERL_EPMD_PORT", "%d", ports[2]);
    unsetenv ("NOTIFY_SOCKET"); // not a systemd service
}

// epmd on 127.0.0.1:port, in the foreground, as our child: the node finds
// it (ERL_EPMD_PORT) and starts none of its own.
static void
s_start_epmd (const char *path, int port)
{
    char ps[16], log[PATH_MAX + 16];
    snprintf (ps, sizeof ps, "%d", port);
    snprintf (log, sizeof log, "%s/epmd.log", zl_benchproc_tmp ());
    char *argv[] = {(char *)path, "-address", "127.0.0.1", "-port", ps, NULL};
    pid_t pid = zl_benchproc_spawn (argv, log);
    int64_t deadline = s_now_us () + 10000000;
    while (!s_port_accepts (port)) {
        if (pid < 0 || s_now_us () > deadline || waitpid (pid, NULL, WNOHANG) == pid)
            s_die ("epmd (%s) did not start", path);
        usleep (10000);
    }
}

static void
s_spawn_node (const char *path, const int ports[3])
{
    char out[PATH_MAX + 32];
    snprintf (out, sizeof out, "%s/rabbitmq-server.out", zl_benchproc_tmp ());
    fflush (NULL);
    pid_t pid = fork ();
    if (pid == 0) {
        setpgid (0, 0);
        s_node_env (ports);
        if (!freopen (out, "a", stdout) || dup2 (STDOUT_FILENO, STDERR_FILENO) < 0)
            _exit (127);
        char *argv[] = {(char *)path, NULL};
        execv (path, argv);
        fprintf (stderr, "exec %s: %s\n", path, strerror (errno));
        _exit (127);
    }
    if (pid < 0)
        zl_benchproc_die ("fork failed");
    setpgid (pid, pid);
    zl_benchproc_adopt (pid);
    s_srv.launcher = pid;
}

static amqp_connection_state_t s_connect (int port, const char **why);
static void s_close (amqp_connection_state_t c);

// Wait (START_TIMEOUT_S at most) until the node takes a login, and learn
// beam.smp's pid (the node writes its pid file before it listens).
static void
s_wait_node (int port)
{
    int64_t deadline = s_now_us () + START_TIMEOUT_S * 1000000LL;
    for (;;) {
        if (!s_srv.beam)
            s_srv.beam = s_read_beam_pid ();
        amqp_connection_state_t c = s_connect (port, NULL);
        if (c) {
            s_close (c);
            if (!s_srv.beam)
                zl_benchproc_die ("the node is up but wrote no pid file: cannot tell its pid");
            return;
        }
        if (waitpid (s_srv.launcher, NULL, WNOHANG) == s_srv.launcher) {
            s_srv.launcher = 0;
            s_start_failed ("rabbitmq-server exited during startup");
        }
        if (s_now_us () > deadline)
            s_start_failed ("RabbitMQ did not accept a connection within 60 s");
        usleep (100000);
    }
}

// Start epmd and a RabbitMQ node on free loopback ports; sets run->port and
// run->beam. Dies (stopping what it started) if either does not come up.
static void
s_server_start (const char *server, const char *epmd, run_t *run)
{
    if (access (server, X_OK) != 0)
        s_die ("rabbitmq-server not found at %s (Debian: apt-get install rabbitmq-server; "
               "or --rabbitmq-server PATH)",
               server);
    if (access (epmd, X_OK) != 0)
        s_die ("epmd not found at %s (Debian: erlang-base; or --epmd PATH)", epmd);
    int ports[3]; // AMQP, Erlang distribution, epmd
    s_free_ports (ports, 3);
    snprintf (s_srv.dir, sizeof s_srv.dir, "%s/node", zl_benchproc_tmp ());
    if (mkdir (s_srv.dir, 0700) != 0)
        zl_benchproc_die ("cannot make the node's directory");
    s_give_dir_to_rabbitmq ();
    s_write_config (ports[0]);
    s_srv.owner = getpid ();
    atexit (s_server_stop);
    s_start_epmd (epmd, ports[2]);
    int64_t t0 = s_now_us ();
    s_spawn_node (server, ports);
    s_wait_node (ports[0]);
    fprintf (stderr, "zlane-rabbitmq-bench: RabbitMQ up on 127.0.0.1:%d in %.1f s (beam.smp %d)\n",
             ports[0], (double)(s_now_us () - t0) / 1e6, (int)s_srv.beam);
    run->port = ports[0];
    run->beam = s_srv.beam;
}

// ---------------------------------------------------------------- AMQP
// A connection logged in as guest with channel 1 open, or NULL (the reason
// in *why when not NULL).
static amqp_connection_state_t
s_connect (int port, const char **why)
{
    amqp_connection_state_t c = amqp_new_connection ();
    amqp_socket_t *sock = amqp_tcp_socket_new (c);
    struct timeval connect_tv = {5, 0}, rpc_tv = {RPC_TIMEOUT_S, 0};
    const char *err = NULL;
    if (!sock || amqp_socket_open_noblock (sock, "127.0.0.1", port, &connect_tv) != AMQP_STATUS_OK)
        err = "cannot connect";
    else if (amqp_set_rpc_timeout (c, &rpc_tv) != AMQP_STATUS_OK ||
             amqp_login (c, "/", 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, "guest", "guest")
                     .reply_type != AMQP_RESPONSE_NORMAL)
        err = "login failed";
    else if (!amqp_channel_open (c, 1))
        err = "cannot open a channel";
    if (!err)
        return c;
    amqp_destroy_connection (c);
    if (why)
        *why = err;
    return NULL;
}

static amqp_connection_state_t
s_connect_or_die (int port)
{
    const char *why = "";
    amqp_connection_state_t c = s_connect (port, &why);
    if (!c)
        s_die ("RabbitMQ on 127.0.0.1:%d: %s", port, why);
    return c;
}

static void
s_close (amqp_connection_state_t c)
{
    amqp_connection_close (c, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection (c);
}

// Die with the server's reason for closing the channel or the connection.
static void s_die_method (amqp_method_t m, const char *what) __attribute__ ((noreturn));
static void
s_die_method (amqp_method_t m, const char *what)
{
    if (m.id == AMQP_CHANNEL_CLOSE_METHOD) {
        amqp_channel_close_t *c = m.decoded;
        s_die ("%s: the server closed the channel: %u %.*s", what, c->reply_code,
               (int)c->reply_text.len, (const char *)c->reply_text.bytes);
    }
    if (m.id == AMQP_CONNECTION_CLOSE_METHOD) {
        amqp_connection_close_t *c = m.decoded;
        s_die ("%s: the server closed the connection: %u %.*s", what, c->reply_code,
               (int)c->reply_text.len, (const char *)c->reply_text.bytes);
    }
    s_die ("%s: unexpected method 0x%08x from the server", what, (unsigned)m.id);
}

static void
s_check (amqp_rpc_reply_t r, const char *what)
{
    if (r.reply_type == AMQP_RESPONSE_NORMAL)
        return;
    if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION)
        s_die_method (r.reply, what);
    s_die ("%s: %s", what, amqp_error_string2 (r.library_error));
}

// Declare the bench queue (passive: look it up); its count of ready messages.
static uint32_t
s_declare (amqp_connection_state_t c, int durable, int passive)
{
    amqp_queue_declare_ok_t *ok = amqp_queue_declare (c, 1, amqp_cstring_bytes (QUEUE), passive,
                                                      durable, 0, 0, amqp_empty_table);
    s_check (amqp_get_rpc_reply (c), "queue.declare");
    return ok->message_count;
}

// ---------------------------------------------------------------- samples
// What the consumers share with the measuring process (an anonymous shared
// mapping): one latency sample per job, and an event pipe on which a
// consumer writes 'r' once subscribed and 'd' with the last expected sample.
typedef struct {
    _Atomic uint64_t n, stored; // slots taken, samples written
    _Atomic int stop;
    uint64_t cap;
    int event_fd;
    int64_t t_done_us;
    int64_t lat_us[];
} samples_t;

static samples_t *
s_samples_new (uint64_t cap, int *events)
{
    samples_t *s = mmap (NULL, sizeof *s + cap * sizeof (int64_t), PROT_READ | PROT_WRITE,
                         MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int p[2];
    if (s == MAP_FAILED || pipe (p) != 0)
        zl_benchproc_die ("cannot share the samples");
    s->cap = cap;
    s->event_fd = p[1];
    *events = p[0];
    return s;
}

static void
s_samples_destroy (samples_t **s_p, int events)
{
    munmap (*s_p, sizeof **s_p + (*s_p)->cap * sizeof (int64_t));
    close (events);
    *s_p = NULL;
}

static void
s_event (samples_t *s, char ev)
{
    if (write (s->event_fd, &ev, 1) != 1)
        _exit (3);
}

static void
s_samples_add (samples_t *s, int64_t us)
{
    uint64_t i = atomic_fetch_add (&s->n, 1);
    if (i < s->cap)
        s->lat_us[i] = us;
    if (atomic_fetch_add (&s->stored, 1) + 1 == s->cap) {
        s->t_done_us = s_now_us ();
        s_event (s, 'd');
    }
}

// ---------------------------------------------------------------- consumer
// A consumer process: its own connection, basic.qos prefetch, manual acks.
// In the throughput run a job's sample is taken when its ack is written
// (publish to ack); in the latency run, when it is received.
static void
s_consumer (const run_t *run, samples_t *sm, int at_receipt)
{
    amqp_connection_state_t c = s_connect_or_die (run->port);
    amqp_basic_qos (c, 1, 0, (uint16_t)run->prefetch, 0);
    s_check (amqp_get_rpc_reply (c), "basic.qos");
    amqp_basic_consume (c, 1, amqp_cstring_bytes (QUEUE), amqp_empty_bytes, 0, 0, 0,
                        amqp_empty_table);
    s_check (amqp_get_rpc_reply (c), "basic.consume");
    s_event (sm, 'r');
    int64_t stamps[ACK_BATCH_MAX];
    int waiting = 0; // received, not acked
    uint64_t last_tag = 0;
    while (!atomic_load (&sm->stop)) {
        amqp_envelope_t env;
        struct timeval tv = {0, 100000}; // to look at sm->stop
        amqp_maybe_release_buffers (c);
        amqp_rpc_reply_t r = amqp_consume_message (c, &env, &tv, 0);
        if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
            r.library_error == AMQP_STATUS_TIMEOUT)
            continue;
        s_check (r, "consume");
        int64_t stamp = 0;
        if (env.message.body.len >= sizeof stamp)
            memcpy (&stamp, env.message.body.bytes, sizeof stamp);
        last_tag = env.delivery_tag;
        amqp_destroy_envelope (&env);
        if (at_receipt)
            s_samples_add (sm, s_now_us () - stamp);
        stamps[waiting++] = stamp;
        if (waiting < run->ack_batch && amqp_data_in_buffer (c))
            continue;
        if (amqp_basic_ack (c, 1, last_tag, waiting > 1) != AMQP_STATUS_OK)
            zl_benchproc_die ("consumer: basic.ack failed");
        int64_t now = s_now_us ();
        if (!at_receipt)
            for (int i = 0; i < waiting; i++)
                s_samples_add (sm, now - stamps[i]);
        waiting = 0;
    }
    s_close (c);
}

static void
s_start_consumers (const run_t *run, samples_t *sm, int at_receipt)
{
    fflush (NULL);
    for (int i = 0; i < run->consumers; i++) {
        pid_t pid = fork ();
        if (pid == 0) {
            zl_benchproc_forget (); // the measuring process cleans up
            s_consumer (run, sm, at_receipt);
            _exit (0);
        }
        if (pid < 0)
            zl_benchproc_die ("fork failed");
        zl_benchproc_adopt (pid);
    }
    close (sm->event_fd); // the read end sees EOF when every consumer is gone
}

// Ask the consumers to close their connections, and wait for them.
static void
s_stop_consumers (samples_t *sm)
{
    atomic_store (&sm->stop, 1);
    for (int i = 0; i < zl_benchproc_count (); i++)
        waitpid (zl_benchproc_pid (i), NULL, 0);
    zl_benchproc_forget (); // reaped: off the list (this process has no other children)
}

// ---------------------------------------------------------------- publisher
// One publishing connection. With confirms, which delivery tags (1, 2, ...
// in publish order) the server has confirmed: confirms may come out of
// order, one by one or many at once.
typedef struct {
    amqp_connection_state_t conn;
    int confirms;
    uint8_t delivery_mode;
    size_t payload;
    char *body;
    uint64_t sent, confirmed, low; // every tag <= low is confirmed
    uint8_t *acked;                // by tag, 1..cap
} publisher_t;

static publisher_t *
s_publisher_new (const run_t *run, uint64_t cap)
{
    publisher_t *p = calloc (1, sizeof *p);
    if (!p || !(p->body = malloc (run->payload)) || !(p->acked = calloc (cap + 1, 1)))
        zl_benchproc_die ("out of memory");
    memset (p->body, 'x', run->payload);
    p->payload = run->payload;
    p->confirms = run->durable;
    p->delivery_mode = run->durable ? AMQP_DELIVERY_PERSISTENT : AMQP_DELIVERY_NONPERSISTENT;
    p->conn = s_connect_or_die (run->port);
    if (p->confirms) {
        amqp_confirm_select (p->conn, 1);
        s_check (amqp_get_rpc_reply (p->conn), "confirm.select");
    }
    return p;
}

static void
s_publisher_destroy (publisher_t **p_p)
{
    publisher_t *p = *p_p;
    s_close (p->conn);
    free (p->acked);
    free (p->body);
    free (p);
    *p_p = NULL;
}

static void
s_confirm (publisher_t *p, uint64_t tag, int multiple)
{
    for (uint64_t t = multiple ? p->low + 1 : tag; t <= tag && t <= p->sent; t++)
        if (!p->acked[t]) {
            p->acked[t] = 1;
            p->confirmed++;
        }
    while (p->low < p->sent && p->acked[p->low + 1])
        p->low++;
}

// Take the frames the server has sent, waiting up to wait_us for the first:
// confirms are counted; a nack, or the server closing, is fatal.
static void
s_read_confirms (publisher_t *p, int64_t wait_us)
{
    struct timeval tv = {(time_t)(wait_us / 1000000), (suseconds_t)(wait_us % 1000000)};
    amqp_frame_t f;
    int rc;
    while ((rc = amqp_simple_wait_frame_noblock (p->conn, &f, &tv)) == AMQP_STATUS_OK) {
        tv = (struct timeval){0, 0};
        if (f.frame_type != AMQP_FRAME_METHOD)
            continue;
        amqp_method_t m = f.payload.method;
        if (m.id == AMQP_BASIC_ACK_METHOD) {
            amqp_basic_ack_t *a = m.decoded;
            s_confirm (p, a->delivery_tag, a->multiple);
        } else if (m.id == AMQP_BASIC_NACK_METHOD)
            zl_benchproc_die ("the server refused (nacked) a message");
        else if (m.id != AMQP_CONNECTION_BLOCKED_METHOD && m.id != AMQP_CONNECTION_UNBLOCKED_METHOD)
            s_die_method (m, "publish");
    }
    if (rc != AMQP_STATUS_TIMEOUT)
        s_die ("publisher: %s", amqp_error_string2 (rc));
    amqp_maybe_release_buffers (p->conn);
}

// Publish one message carrying `stamp` (µs, CLOCK_MONOTONIC) in its first
// 8 bytes; first wait while CONFIRM_WINDOW messages are unconfirmed.
static void
s_publish (publisher_t *p, int64_t stamp)
{
    while (p->confirms && p->sent - p->confirmed >= CONFIRM_WINDOW)
        s_read_confirms (p, 1000000);
    memcpy (p->body, &stamp, sizeof stamp); // --payload is 8 bytes or more
    amqp_basic_properties_t props = {._flags = AMQP_BASIC_DELIVERY_MODE_FLAG,
                                     .delivery_mode = p->delivery_mode};
    amqp_bytes_t body = {p->payload, p->body};
    int rc = amqp_basic_publish (p->conn, 1, amqp_empty_bytes, amqp_cstring_bytes (QUEUE), 0, 0,
                                 &props, body);
    if (rc != AMQP_STATUS_OK)
        s_die ("publish: %s", amqp_error_string2 (rc));
    p->sent++;
    if (p->confirms && p->sent % 64 == 0)
        s_read_confirms (p, 0); // keep the window open without blocking
}

// Wait until every message sent is confirmed (no-op without confirms).
static void
s_publisher_finish (publisher_t *p)
{
    while (p->confirms && p->confirmed < p->sent)
        s_read_confirms (p, 1000000);
}

// ---------------------------------------------------------------- modes
static void
s_declare_queue (const run_t *run)
{
    amqp_connection_state_t c = s_connect_or_die (run->port);
    s_declare (c, run->durable, 0);
    s_close (c);
}

static const char *
s_durability (const run_t *run)
{
    return run->durable ? "durable" : "transient";
}

// One throughput run on a fresh queue (deleted at the end).
static void
s_throughput_once (const run_t *run)
{
    int events;
    s_declare_queue (run);
    samples_t *sm = s_samples_new (run->jobs, &events);
    s_start_consumers (run, sm, 0);
    zl_benchproc_wait_events (events, 'r', run->consumers, 30000);
    publisher_t *p = s_publisher_new (run, run->jobs);
    int64_t t0 = s_now_us ();
    for (uint64_t i = 0; i < run->jobs; i++)
        s_publish (p, s_now_us ());
    s_publisher_finish (p);
    int64_t t_pub = s_now_us ();
    zl_benchproc_wait_events (events, 'd', 1, DRAIN_TIMEOUT_MS);
    s_stop_consumers (sm);
    double secs = (double)(sm->t_done_us - t0) / 1e6;
    zl_benchproc_sort_i64 (sm->lat_us, run->jobs);
    printf ("rabbitmq throughput durability=%s jobs=%" PRIu64 " producers=1 consumers=%d "
            "prefetch=%d ack-batch=%d payload=%zu: %.2f s, %.0f jobs/s (published%s in %.2f s), "
            "submit->ack p50 %.1f ms p99 %.1f ms\n",
            s_durability (run), run->jobs, run->consumers, run->prefetch, run->ack_batch,
            run->payload, secs, (double)run->jobs / secs, run->durable ? " and confirmed" : "",
            (double)(t_pub - t0) / 1e6, zl_benchproc_pct_ms (sm->lat_us, run->jobs, 50),
            zl_benchproc_pct_ms (sm->lat_us, run->jobs, 99));
    fflush (stdout);
    amqp_queue_delete (p->conn, 1, amqp_cstring_bytes (QUEUE), 0, 0);
    s_check (amqp_get_rpc_reply (p->conn), "queue.delete");
    s_publisher_destroy (&p);
    s_samples_destroy (&sm, events);
}

// --runs N: N runs on one node (its start takes longer than a run).
static int
s_throughput (const run_t *run)
{
    for (int i = 0; i < run->runs; i++)
        s_throughput_once (run);
    return 0;
}

// Publish `jobs` messages, message i at t0 + i/rate, each carrying its due
// time; counts the sends more than 1 ms late.
static uint64_t
s_publish_paced (publisher_t *p, double rate, uint64_t jobs)
{
    int64_t t0 = s_now_us () + 10000;
    uint64_t late = 0;
    for (uint64_t i = 0; i < jobs; i++) {
        int64_t due = t0 + (int64_t)((double)i * 1e6 / rate);
        zl_benchproc_sleep_until (due);
        if (s_now_us () - due > 1000)
            late++;
        s_publish (p, due);
    }
    return late;
}

static int
s_latency (const run_t *run)
{
    uint64_t jobs = (uint64_t)(run->rate * run->seconds);
    int events;
    s_declare_queue (run);
    samples_t *sm = s_samples_new (jobs, &events);
    s_start_consumers (run, sm, 1);
    zl_benchproc_wait_events (events, 'r', run->consumers, 30000);
    publisher_t *p = s_publisher_new (run, jobs);
    int64_t t0 = s_now_us ();
    uint64_t late = s_publish_paced (p, run->rate, jobs);
    double sent_s = (double)(s_now_us () - t0) / 1e6;
    s_publisher_finish (p);
    zl_benchproc_wait_events (events, 'd', 1, DRAIN_TIMEOUT_MS);
    s_stop_consumers (sm);
    int64_t *lat = sm->lat_us;
    size_t n = jobs;
    zl_benchproc_sort_i64 (lat, n);
    printf ("rabbitmq latency durability=%s rate=%.0f/s jobs=%" PRIu64 " consumers=%d "
            "payload=%zu: publish->receive p50 %.3f ms p90 %.3f ms p99 %.3f ms p99.9 %.3f ms "
            "max %.3f ms (%zu samples, sent in %.2f s, %" PRIu64 " sends >1 ms late)\n",
            s_durability (run), run->rate, jobs, run->consumers, run->payload,
            zl_benchproc_pct_ms (lat, n, 50), zl_benchproc_pct_ms (lat, n, 90),
            zl_benchproc_pct_ms (lat, n, 99), zl_benchproc_pct_ms (lat, n, 99.9),
            (double)lat[n - 1] / 1000.0, n, sent_s, late);
    s_publisher_destroy (&p);
    s_samples_destroy (&sm, events);
    return 0;
}

// The lowest RSS over the next `ms` (read every 100 ms): the node's garbage
// collector makes a single reading swing by 10 % and more.
static uint64_t
s_settled_rss (pid_t pid, int ms)
{
    uint64_t low = zl_benchproc_rss (pid, NULL, NULL);
    for (int t = 0; t < ms; t += 100) {
        usleep (100000);
        uint64_t r = zl_benchproc_rss (pid, NULL, NULL);
        low = r && r < low ? r : low;
    }
    return low;
}

static int
s_memory (const run_t *run)
{
    s_declare_queue (run);
    publisher_t *p = s_publisher_new (run, run->jobs);
    uint64_t rss0 = s_settled_rss (run->beam, 1000);
    int64_t t0 = s_now_us ();
    for (uint64_t i = 0; i < run->jobs; i++)
        s_publish (p, t0);
    s_publisher_finish (p);
    // confirms of persistent messages come once the queue has them; check
    int64_t deadline = s_now_us () + 30000000;
    while (s_declare (p->conn, run->durable, 1) < run->jobs) {
        if (s_now_us () > deadline)
            zl_benchproc_die ("the queue does not hold every message");
        usleep (50000);
    }
    double secs = (double)(s_now_us () - t0) / 1e6;
    uint64_t rss_now = zl_benchproc_rss (run->beam, NULL, NULL);
    uint64_t rss1 = s_settled_rss (run->beam, 3000);
    printf ("rabbitmq memory durability=%s jobs=%" PRIu64 " payload=%zu: queued in %.2f s "
            "(%.0f jobs/s); beam.smp RSS %.1f MiB -> %.1f MiB (lowest of 3 s after; %.1f MiB "
            "at once) = %.0f bytes/job\n",
            s_durability (run), run->jobs, run->payload, secs, (double)run->jobs / secs,
            rss0 / 1048576.0, rss1 / 1048576.0, rss_now / 1048576.0,
            ((double)rss1 - (double)rss0) / (double)run->jobs);
    s_publisher_destroy (&p);
    return 0;
}

static int
s_measure (const run_t *run)
{
    if (!strcmp (run->mode, "throughput"))
        return s_throughput (run);
    if (!strcmp (run->mode, "latency"))
        return s_latency (run);
    return s_memory (run);
}

static void
s_on_alarm (int sig)
{
    (void)sig; // only to interrupt waitpid
}

// Run the measurement in a child of its own process group, killed with its
// consumers after timeout_s; its exit code, or 1.
static int
s_supervise (const run_t *run, int timeout_s)
{
    fflush (NULL);
    pid_t pid = fork ();
    if (pid == 0) {
        setpgid (0, 0);
        zl_benchproc_forget ();
        exit (s_measure (run));
    }
    if (pid < 0)
        zl_benchproc_die ("fork failed");
    setpgid (pid, pid);
    zl_benchproc_adopt (pid);
    struct sigaction sa = {.sa_handler = s_on_alarm}; // no SA_RESTART: waitpid gets EINTR
    sigaction (SIGALRM, &sa, NULL);
    alarm ((unsigned)timeout_s);
    int status;
    pid_t r = waitpid (pid, &status, 0);
    alarm (0);
    if (r == pid)
        return WIFEXITED (status) ? WEXITSTATUS (status) : 1;
    fprintf (stderr, "zlane-rabbitmq-bench: the %s run did not end in %d s: killed\n", run->mode,
             timeout_s);
    kill (-pid, SIGKILL);
    waitpid (pid, NULL, 0);
    return 1;
}

static void
s_usage (FILE *f)
{
    fprintf (f, "usage: zlane-rabbitmq-bench throughput|latency|memory [--jobs N]\n"
                "       [--consumers C] [--payload BYTES] [--durability durable|transient]\n"
                "       [--rate R] [--seconds S] [--prefetch P] [--ack-batch A] [--runs N]\n"
                "       [--rabbitmq-server PATH] [--epmd PATH] [--timeout S]\n");
}

int
main (int argc, char **argv)
{
    if (argc < 2 || !strcmp (argv[1], "--help") || !strcmp (argv[1], "-h")) {
        s_usage (argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    zl_benchproc_init ("zlane-rabbitmq-bench", "zlane-rabbitmq");
    run_t run = {.mode = argv[1],
                 .durable = 1,
                 .jobs = 100000,
                 .consumers = 2,
                 .prefetch = 200,
                 .ack_batch = 64,
                 .runs = 1,
                 .payload = 100,
                 .rate = 1000,
                 .seconds = 5};
    const char *server = "/usr/sbin/rabbitmq-server", *epmd = "/usr/bin/epmd", *dur = "durable";
    int timeout = 300;
    for (int i = 2; i < argc; i++) {
        if (i + 1 >= argc)
            zl_benchproc_die ("every option takes a value");
        const char *o = argv[i], *v = argv[++i];
        if (!strcmp (o, "--jobs"))
            run.jobs = strtoull (v, NULL, 10);
        else if (!strcmp (o, "--consumers"))
            run.consumers = atoi (v);
        else if (!strcmp (o, "--payload"))
            run.payload = (size_t)atoi (v);
        else if (!strcmp (o, "--durability"))
            dur = v;
        else if (!strcmp (o, "--rate"))
            run.rate = atof (v);
        else if (!strcmp (o, "--seconds"))
            run.seconds = atof (v);
        else if (!strcmp (o, "--prefetch"))
            run.prefetch = atoi (v);
        else if (!strcmp (o, "--ack-batch"))
            run.ack_batch = atoi (v);
        else if (!strcmp (o, "--runs"))
            run.runs = atoi (v);
        else if (!strcmp (o, "--rabbitmq-server"))
            server = v;
        else if (!strcmp (o, "--epmd"))
            epmd = v;
        else if (!strcmp (o, "--timeout"))
            timeout = atoi (v);
        else
            s_die ("unknown option %s", o);
    }
    if (strcmp (run.mode, "throughput") && strcmp (run.mode, "latency") &&
        strcmp (run.mode, "memory"))
        s_die ("unknown mode %s (throughput, latency, memory)", run.mode);
    if (strcmp (dur, "durable") && strcmp (dur, "transient"))
        zl_benchproc_die ("--durability: durable or transient");
    run.durable = !strcmp (dur, "durable");
    if (!run.jobs || run.consumers < 1 || run.consumers > MAX_CONSUMERS ||
        run.payload < sizeof (int64_t) || run.prefetch < 1 || run.prefetch > 65535 ||
        run.ack_batch < 1 || run.ack_batch > ACK_BATCH_MAX || run.runs < 1 || run.rate <= 0 ||
        run.seconds <= 0 || run.rate * run.seconds < 1 || timeout < 1)
        zl_benchproc_die ("bad numbers");
    s_catch_signals ();
    signal (SIGPIPE, SIG_IGN);
    s_server_start (server, epmd, &run);
    int rc = s_supervise (&run, timeout);
    s_server_stop ();
    return rc;
}
