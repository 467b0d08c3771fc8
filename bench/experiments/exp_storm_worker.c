/*  zlane-exp-storm-worker: a zlane worker (the C library, no process per
    job) whose handler makes one call to the retry-storm downstream
    (zlane-exp-downstream) per attempt: "A" acks the job, "R" fails it
    TRANSIENT (the broker's backoff, with or without jitter, decides the
    retry) or, with --throttled MS, THROTTLED with retry-after MS.

    The library worker is used here, not zlane-worker --exec, because the
    row is about how retries bunch in time: 1000 calls must be able to reach
    the downstream within one scaled second, faster than forking a process
    per attempt allows on a small machine. */
#define _GNU_SOURCE
#include "zlane_worker.h"

#include <arpa/inet.h>
#include <czmq.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define S_TIMEOUT_MS 1000

typedef struct {
    struct sockaddr_in downstream;
    uint32_t throttled_ms; // 0: reject -> TRANSIENT
} storm_t;

static __thread int s_fd = -1;
static zl_worker_t *s_worker;

static void
s_on_signal (int sig)
{
    (void)sig;
    if (s_worker)
        zl_worker_stop (s_worker);
}

static void
s_handler (const zl_worker_job_t *job, zl_worker_result_t *result, void *arg)
{
    storm_t *st = arg;
    if (s_fd < 0) {
        s_fd = socket (AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (s_fd < 0 ||
            connect (s_fd, (struct sockaddr *)&st->downstream, sizeof st->downstream) != 0) {
            zl_worker_result_set (result, ZL_WORKER_TRANSIENT, 0, "socket: %s", strerror (errno));
            if (s_fd >= 0)
                close (s_fd);
            s_fd = -1;
            return;
        }
    }
    char req[64], buf[160];
    int n = snprintf (req, sizeof req, "%u %" PRIu64, job->attempt, job->job_id);
    if (send (s_fd, req, (size_t)n, 0) != n) {
        zl_worker_result_set (result, ZL_WORKER_TRANSIENT, 0, "send: %s", strerror (errno));
        return;
    }
    for (;;) {
        struct pollfd p = {s_fd, POLLIN, 0};
        if (poll (&p, 1, S_TIMEOUT_MS) <= 0) {
            zl_worker_result_set (result, ZL_WORKER_TRANSIENT, 0, "downstream timed out");
            return;
        }
        ssize_t got = recv (s_fd, buf, sizeof buf - 1, 0);
        if (got <= 2)
            continue;
        buf[got] = '\0';
        if (strcmp (buf + 2, req) != 0)
            continue; // a late answer to an earlier, timed-out request
        if (buf[0] == 'A')
            return; // outcome ACK (zeroed by the worker)
        if (st->throttled_ms)
            zl_worker_result_set (result, ZL_WORKER_THROTTLED, st->throttled_ms,
                                  "downstream: rate limited");
        else
            zl_worker_result_set (result, ZL_WORKER_TRANSIENT, 0, "downstream: rate limited");
        return;
    }
}

int
main (int argc, char **argv)
{
    static const struct option opts[] = {{"broker", required_argument, 0, 'b'},
                                         {"lanes", required_argument, 0, 'l'},
                                         {"downstream-port", required_argument, 0, 'p'},
                                         {"concurrency", required_argument, 0, 'c'},
                                         {"prefetch", required_argument, 0, 'f'},
                                         {"heartbeat", required_argument, 0, 'H'},
                                         {"throttled", required_argument, 0, 't'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *broker = NULL, *lane = NULL;
    int port = 0, c;
    uint32_t concurrency = 64, prefetch = 0, heartbeat = 1000;
    storm_t st = {.throttled_ms = 0};
    while ((c = getopt_long (argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'b': broker = optarg; break;
        case 'l': lane = optarg; break;
        case 'p': port = atoi (optarg); break;
        case 'c': concurrency = (uint32_t)atoi (optarg); break;
        case 'f': prefetch = (uint32_t)atoi (optarg); break;
        case 'H': heartbeat = (uint32_t)atoi (optarg); break;
        case 't': st.throttled_ms = (uint32_t)atoi (optarg); break;
        case 'h':
        default:
            fprintf (c == 'h' ? stdout : stderr,
                     "Usage: zlane-exp-storm-worker --broker EP --lanes LANE --downstream-port P\n"
                     "       [--concurrency N (64)] [--prefetch N (0)] [--heartbeat MS (1000)]\n"
                     "       [--throttled MS: reject -> THROTTLED retry-after MS, not "
                     "TRANSIENT]\n");
            return c == 'h' ? 0 : 2;
        }
    }
    if (!broker || !lane || port <= 0 || concurrency == 0) {
        fprintf (stderr, "zlane-exp-storm-worker: --broker, --lanes and --downstream-port\n");
        return 2;
    }
    st.downstream.sin_family = AF_INET;
    st.downstream.sin_port = htons ((uint16_t)port);
    st.downstream.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    zsys_handler_set (NULL);
    const char *lanes[] = {lane};
    zl_worker_opts_t o;
    zl_worker_opts_defaults (&o);
    o.endpoint = broker;
    o.lanes = lanes;
    o.n_lanes = 1;
    o.concurrency = concurrency;
    o.prefetch = prefetch;
    o.heartbeat_ms = heartbeat;
    o.drain_ms = 2000;
    o.handler = s_handler;
    o.handler_arg = &st;
    s_worker = zl_worker_new (&o);
    if (!s_worker)
        return 2;
    struct sigaction sa = {.sa_handler = s_on_signal};
    sigaction (SIGTERM, &sa, NULL);
    sigaction (SIGINT, &sa, NULL);
    int rc = zl_worker_run (s_worker);
    zl_worker_stats_t ws;
    zl_worker_stats (s_worker, &ws);
    fprintf (stderr,
             "storm-worker: received %" PRIu64 " acked %" PRIu64 " nacked %" PRIu64
             " refused %" PRIu64 "\n",
             ws.received, ws.acked, ws.nacked, ws.refused);
    zl_worker_destroy (&s_worker);
    return rc == 0 ? 0 : 1;
}
