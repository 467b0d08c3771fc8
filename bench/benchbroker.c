#include "benchbroker.h"

#include "benchproc.h"
#include "clock.h"
#include "codec.h"
#include "wire.h"
#include "zl_alloc.h"

#include <czmq.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_ARGS 64
#define START_MS 10000
#define STATS_MS 5000

static const char *const s_names[4] = {"frontend", "backend", "events", "admin"};

struct _zl_benchbroker_t {
    pid_t pid;
    char endpoints[4][320];
    zsock_t *admin;
    zl_codec_t *codec;
    zl_msg_t reply; // the last stats, decoded into the codec's arena
};

// Read the ports file; true once it names all four endpoints.
static bool
s_read_ports (zl_benchbroker_t *self, const char *path)
{
    FILE *f = fopen (path, "r");
    if (!f)
        return false;
    char line[400];
    int found = 0;
    while (fgets (line, sizeof line, f)) {
        line[strcspn (line, "\n")] = '\0';
        char *eq = strchr (line, '=');
        if (!eq)
            continue;
        *eq = '\0';
        for (int i = 0; i < 4; i++)
            if (!strcmp (line, s_names[i])) {
                snprintf (self->endpoints[i], sizeof self->endpoints[i], "%s", eq + 1);
                found |= 1 << i;
            }
    }
    fclose (f);
    return found == 0xf;
}

zl_benchbroker_t *
zl_benchbroker_start (const char *dir, const char *const *args)
{
    char bin[PATH_MAX + 32], data[PATH_MAX + 16], ports[PATH_MAX + 16], log[PATH_MAX + 16];
    char perf_out[PATH_MAX + 64];
    snprintf (bin, sizeof bin, "%s/zlane-broker", zl_benchproc_bindir ());
    snprintf (data, sizeof data, "%s/data", dir);
    snprintf (ports, sizeof ports, "%s/ports", dir);
    snprintf (log, sizeof log, "%s/broker.log", dir);
    const char *argv[MAX_ARGS];
    size_t n = 0;
    const char *perf = getenv ("ZLANE_BENCH_PERF");
    if (perf && *perf) {
        const char *base = strrchr (dir, '/');
        snprintf (perf_out, sizeof perf_out, "%s.%s", perf, base ? base + 1 : dir);
        const char *pre[] = {"/usr/bin/perf", "record", "--call-graph=dwarf", "-o", perf_out, "--"};
        for (size_t i = 0; i < 6; i++)
            argv[n++] = pre[i];
    }
    // $ZLANE_BENCH_STORE: another store than DIR/data (a PostgreSQL location)
    const char *store = getenv ("ZLANE_BENCH_STORE");
    bool pg = store && *store;
    const char *fixed[] = {bin,
                           pg ? "--store" : "--data",
                           pg ? store : data,
                           "--frontend",
                           "tcp://127.0.0.1:*",
                           "--backend",
                           "tcp://127.0.0.1:*",
                           "--events",
                           "tcp://127.0.0.1:*",
                           "--admin",
                           "tcp://127.0.0.1:*",
                           "--ports-file",
                           ports};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        argv[n++] = fixed[i];
    for (size_t i = 0; args && args[i] && n < MAX_ARGS - 1; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    zl_benchbroker_t *self = ZL_NEW (zl_benchbroker_t);
    self->pid = zl_benchproc_spawn ((char *const *)argv, log);
    int64_t deadline = zl_clock_mono_ms () + START_MS;
    while (!s_read_ports (self, ports)) {
        if (zl_clock_mono_ms () > deadline || waitpid (self->pid, NULL, WNOHANG) == self->pid)
            zl_benchproc_die ("the broker did not start (see its log)");
        usleep (10000); // the broker writes the file once, after binding
    }
    self->admin = zsock_new_dealer (self->endpoints[3]);
    self->codec = zl_codec_new ();
    return self;
}

void
zl_benchbroker_destroy (zl_benchbroker_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zsock_destroy (&(*self_p)->admin);
    zl_codec_destroy (&(*self_p)->codec);
    free (*self_p);
    *self_p = NULL;
}

pid_t
zl_benchbroker_pid (zl_benchbroker_t *self)
{
    return self->pid;
}

const char *
zl_benchbroker_endpoint (zl_benchbroker_t *self, const char *which)
{
    for (int i = 0; i < 4; i++)
        if (!strcmp (which, s_names[i]))
            return self->endpoints[i];
    return NULL;
}

const zl_stats_t *
zl_benchbroker_stats (zl_benchbroker_t *self)
{
    zl_msg_t req = {.kind = ZL_MSG_ADMIN_REQUEST};
    req.u.admin_request.op = ZL_ADMIN_STATS;
    req.u.admin_request.filter.lane = req.u.admin_request.filter.tenant = "";
    req.u.admin_request.lane = "";
    void *s = zsock_resolve (self->admin);
    if (zl_wire_send (s, self->codec, &req, 0) != 0)
        return NULL;
    zmq_pollitem_t item = {s, 0, ZMQ_POLLIN, 0};
    if (zmq_poll (&item, 1, STATS_MS) <= 0)
        return NULL;
    zmq_msg_t frame;
    zmq_msg_init (&frame);
    zmq_msg_recv (&frame, s, 0);
    int rc =
        zl_codec_decode (self->codec, zmq_msg_data (&frame), zmq_msg_size (&frame), &self->reply);
    zmq_msg_close (&frame);
    if (rc != ZL_DECODE_OK || self->reply.kind != ZL_MSG_ADMIN_REPLY)
        return NULL;
    return &self->reply.u.admin_reply.stats;
}

int64_t
zl_benchbroker_counter_of (const zl_stats_t *stats, const char *name)
{
    for (size_t i = 0; stats && i < stats->n_counters; i++)
        if (!strcmp (stats->counters[i].name, name))
            return (int64_t)stats->counters[i].value;
    return -1;
}

int64_t
zl_benchbroker_counter (zl_benchbroker_t *self, const char *name)
{
    return zl_benchbroker_counter_of (zl_benchbroker_stats (self), name);
}

void
zl_benchbroker_wait (zl_benchbroker_t *self, const char *name, int64_t want, int timeout_ms)
{
    int64_t deadline = zl_clock_mono_ms () + timeout_ms;
    while (zl_benchbroker_counter (self, name) < want) {
        if (zl_clock_mono_ms () > deadline) {
            char msg[160];
            snprintf (msg, sizeof msg, "timed out waiting for %s >= %" PRId64, name, want);
            zl_benchproc_die (msg);
        }
        usleep (5000); // a bounded poll of a counter, not a synchronisation
    }
}
