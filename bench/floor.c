/*  zlane-bench-floor: the least time any broker with a process in the middle
    can take on this machine, measured with the latency runs' workload and
    pacing, so that their figures can be read against it.

    zlane-bench-floor [--rate R] [--seconds S] [--consumers C] [--payload B]
        three kinds of process on 127.0.0.1 TCP (TCP_NODELAY): this process
        is the producer; a relay (forked) waits in epoll_wait, reads each
        message from the producer and writes it to the next consumer in turn;
        C consumers (forked) wait in a blocking recv. Nothing else: no
        protocol, no store, no acknowledgement, no reply to the producer.
        Job i is due at t0 + i/R and carries that due time (CLOCK_MONOTONIC)
        in its first 8 bytes; the producer sleeps until then (timer slack
        1 ns, as zlane's, beanstalkd's and RabbitMQ's latency producers do)
        and sends; a consumer records receipt time - due time. Prints
        p50/p90/p99/p99.9/max for the two hops, and for one hop (the same
        pacing, the producer straight to one consumer) run first.

    Every process it starts is killed at exit, by PID. */
#define _GNU_SOURCE
#include "benchproc.h"
#include "clock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

// A message on the wire: a 4-byte length (host order: one machine), then
// that many bytes, the first 8 the due time. Length 0 ends the run.
#define MAX_PAYLOAD 65536

typedef struct {
    _Atomic uint64_t n;
    uint64_t cap;
    int64_t lat_us[];
} samples_t;

static samples_t *
s_samples_new (uint64_t cap)
{
    samples_t *s = mmap (NULL, sizeof *s + cap * sizeof (int64_t), PROT_READ | PROT_WRITE,
                         MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (s == MAP_FAILED)
        zl_benchproc_die ("cannot share the samples");
    s->cap = cap;
    return s;
}

static void
s_nodelay (int fd)
{
    int one = 1;
    setsockopt (fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static int
s_listen (int *port)
{
    int fd = socket (AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl (INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (fd < 0 || bind (fd, (struct sockaddr *)&a, sizeof a) != 0 || listen (fd, 16) != 0 ||
        getsockname (fd, (struct sockaddr *)&a, &al) != 0)
        zl_benchproc_die ("cannot listen on 127.0.0.1");
    *port = ntohs (a.sin_port);
    return fd;
}

static int
s_connect (int port)
{
    int fd = zl_benchproc_connect (port);
    if (fd < 0)
        zl_benchproc_die ("cannot connect on 127.0.0.1");
    return fd;
}

static int
s_accept (int lfd)
{
    int fd = accept (lfd, NULL, NULL);
    if (fd < 0)
        zl_benchproc_die ("cannot accept on 127.0.0.1");
    s_nodelay (fd);
    return fd;
}

static int
s_read_all (int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = recv (fd, p, len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

// A consumer: one blocking recv for each message's length and body (the
// way a worker blocked in its read takes a job); the receipt time - the due
// time is the sample. Exits at the end mark.
static void
s_consumer (int port, bool relay, samples_t *sm)
{
    int fd = s_connect (port);
    if (relay)
        zl_benchproc_write_all (fd, "c", 1);
    static char body[MAX_PAYLOAD];
    for (;;) {
        uint32_t len;
        if (s_read_all (fd, &len, sizeof len) != 0 || len == 0 || len > MAX_PAYLOAD)
            _exit (0);
        if (s_read_all (fd, body, len) != 0)
            _exit (2);
        int64_t due;
        memcpy (&due, body, sizeof due);
        uint64_t i = atomic_fetch_add (&sm->n, 1);
        if (i < sm->cap)
            sm->lat_us[i] = zl_clock_mono_us () - due;
        zl_benchproc_write_all (fd, "a", 1); // the job done, as a worker acks
    }
}

// The relay: an epoll loop, as a broker's; it accepts the producer and the
// consumers (each says which it is in its first byte), then hands each whole
// message from the producer to the next consumer and answers the producer
// with one byte; a consumer's one-byte acknowledgements are read and
// dropped. Exits at the end mark, passing it on.
static void
s_relay (int lfd, int consumers)
{
    int *out = calloc ((size_t)consumers, sizeof *out);
    int in = -1, nout = 0;
    int ep = epoll_create1 (0);
    if (ep < 0)
        _exit (2);
    while (in < 0 || nout < consumers) {
        int fd = s_accept (lfd);
        char role;
        if (s_read_all (fd, &role, 1) != 0)
            _exit (2);
        if (role == 'p' && in < 0)
            in = fd;
        else if (role == 'c' && nout < consumers)
            out[nout++] = fd;
        else
            _exit (2);
        struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
        if (epoll_ctl (ep, EPOLL_CTL_ADD, fd, &ev) != 0)
            _exit (2);
    }
    static char buf[1 << 16];
    size_t have = 0;
    int next = 0;
    for (;;) {
        struct epoll_event evs[8];
        int ne = epoll_wait (ep, evs, 8, -1);
        if (ne < 0 && errno == EINTR)
            continue;
        if (ne < 0)
            _exit (2);
        for (int e = 0; e < ne; e++) {
            int fd = evs[e].data.fd;
            if (fd != in) {
                char acks[256];
                if (recv (fd, acks, sizeof acks, MSG_DONTWAIT) == 0)
                    _exit (2);
                continue;
            }
            ssize_t n = recv (in, buf + have, sizeof buf - have, MSG_DONTWAIT);
            if (n < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            if (n <= 0)
                _exit (2);
            have += (size_t)n;
            size_t at = 0;
            for (;;) {
                uint32_t len;
                if (have - at < sizeof len)
                    break;
                memcpy (&len, buf + at, sizeof len);
                if (len == 0) {
                    for (int i = 0; i < consumers; i++)
                        zl_benchproc_write_all (out[i], &len, sizeof len);
                    _exit (0);
                }
                if (len > MAX_PAYLOAD)
                    _exit (2);
                if (have - at < sizeof len + len)
                    break;
                zl_benchproc_write_all (out[next], buf + at, sizeof len + len);
                zl_benchproc_write_all (in, "k", 1);
                next = (next + 1) % consumers;
                at += sizeof len + len;
            }
            memmove (buf, buf + at, have - at);
            have -= at;
        }
    }
}

static pid_t
s_fork (void)
{
    pid_t pid = fork ();
    if (pid < 0)
        zl_benchproc_die ("fork failed");
    if (pid == 0)
        zl_benchproc_forget (); // the parent cleans up; a child's exit kills none else
    zl_benchproc_adopt (pid);
    return pid;
}

// One run: `relay` or straight to one consumer. Returns the samples, sorted;
// *late: sends more than 1 ms after their due time.
static samples_t *
s_run (bool relay, double rate, uint64_t jobs, size_t payload, int consumers, uint64_t *late)
{
    samples_t *sm = s_samples_new (jobs);
    int port;
    int lfd = s_listen (&port);
    pid_t kids[1 + 64];
    int nkids = 0;
    if (relay) {
        pid_t r = s_fork ();
        if (r == 0) {
            s_relay (lfd, consumers);
            _exit (0);
        }
        kids[nkids++] = r;
    }
    int nc = relay ? consumers : 1;
    for (int i = 0; i < nc; i++) {
        pid_t c = s_fork ();
        if (c == 0) {
            s_consumer (port, relay, sm);
            _exit (0);
        }
        kids[nkids++] = c;
    }
    int fd = relay ? s_connect (port) : s_accept (lfd);
    if (relay)
        zl_benchproc_write_all (fd, "p", 1);
    close (lfd);
    size_t one = sizeof (uint32_t) + payload;
    char *msg = calloc (1, one);
    uint32_t len = (uint32_t)payload;
    memcpy (msg, &len, sizeof len);
    *late = 0;
    int64_t t0 = zl_clock_mono_us () + 100000; // the connections settle
    for (uint64_t i = 0; i < jobs; i++) {
        int64_t due = t0 + (int64_t)((double)i * 1e6 / rate);
        zl_benchproc_sleep_until (due);
        if (zl_clock_mono_us () - due > 1000)
            (*late)++;
        memcpy (msg + sizeof len, &due, sizeof due);
        zl_benchproc_write_all (fd, msg, one);
        char answers[256]; // the relay's answers or the consumer's acks, as they come
        while (recv (fd, answers, sizeof answers, MSG_DONTWAIT) > 0)
            ;
    }
    len = 0;
    zl_benchproc_write_all (fd, &len, sizeof len);
    // each passes the end mark on and exits; 30 s at most
    int64_t give_up = zl_clock_mono_us () + 30 * 1000000;
    for (int i = 0; i < nkids; i++) {
        int st;
        pid_t w;
        while ((w = waitpid (kids[i], &st, WNOHANG)) == 0 && zl_clock_mono_us () < give_up) {
            struct timespec ms = {0, 1000000};
            nanosleep (&ms, NULL);
        }
        if (w != kids[i] || !WIFEXITED (st) || WEXITSTATUS (st) != 0)
            zl_benchproc_die ("a relay or consumer failed or did not end");
    }
    close (fd);
    free (msg);
    if (atomic_load (&sm->n) != jobs)
        zl_benchproc_die ("a message was lost");
    zl_benchproc_sort_i64 (sm->lat_us, jobs);
    return sm;
}

static void
s_print (const char *what, double rate, uint64_t jobs, int consumers, size_t payload,
         const samples_t *sm, uint64_t late)
{
    const int64_t *lat = sm->lat_us;
    printf ("floor %s rate=%.0f/s jobs=%" PRIu64 " consumers=%d payload=%zu: send->receipt "
            "p50 %.3f ms p90 %.3f ms p99 %.3f ms p99.9 %.3f ms max %.3f ms (%" PRIu64
            " samples, %" PRIu64 " sends >1 ms late)\n",
            what, rate, jobs, consumers, payload, zl_benchproc_pct_ms (lat, jobs, 50),
            zl_benchproc_pct_ms (lat, jobs, 90), zl_benchproc_pct_ms (lat, jobs, 99),
            zl_benchproc_pct_ms (lat, jobs, 99.9), (double)lat[jobs - 1] / 1000.0, jobs, late);
    fflush (stdout);
}

int
main (int argc, char **argv)
{
    double rate = 5000, seconds = 5;
    int consumers = 2;
    size_t payload = 100;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf (stderr, "usage: zlane-bench-floor [--rate R] [--seconds S] "
                             "[--consumers C] [--payload B]\n");
            return 2;
        }
        if (!strcmp (a, "--rate"))
            rate = atof (v);
        else if (!strcmp (a, "--seconds"))
            seconds = atof (v);
        else if (!strcmp (a, "--consumers"))
            consumers = atoi (v);
        else if (!strcmp (a, "--payload"))
            payload = (size_t)atol (v);
        else {
            fprintf (stderr, "zlane-bench-floor: unknown option %s\n", a);
            return 2;
        }
        i++;
    }
    if (rate <= 0 || seconds <= 0 || consumers < 1 || consumers > 64 || payload < 8 ||
        payload > MAX_PAYLOAD) {
        fprintf (stderr, "zlane-bench-floor: rate and seconds > 0, 1-64 consumers, payload "
                         "8-65536 bytes\n");
        return 2;
    }
    uint64_t jobs = (uint64_t)(rate * seconds);
    if (jobs == 0)
        jobs = 1;
    zl_benchproc_init ("zlane-bench-floor", "zlane-floor");
    uint64_t late;
    samples_t *one = s_run (false, rate, jobs, payload, 1, &late);
    s_print ("one-hop", rate, jobs, 1, payload, one, late);
    samples_t *two = s_run (true, rate, jobs, payload, consumers, &late);
    s_print ("two-hops", rate, jobs, consumers, payload, two, late);
    zl_benchproc_stop_all (1000);
    return 0;
}
