/*  zlane-beanstalk-bench: the zlane-bench workload against beanstalkd, for a
    side-by-side comparison. Speaks the beanstalkd text protocol over TCP
    (put / reserve / delete / stats); starts its own beanstalkd on 127.0.0.1.

    zlane-beanstalk-bench throughput [--jobs N] [--consumers C] [--payload B]
                         [--reserve-depth D] [--durability memory|nosync|binlog|fsync]
                         [--beanstalkd PATH]
        one producer (this process) pipelines N puts (at most 1024 unanswered,
        like a credit window), C consumer processes reserve (D at a time,
        default 64; 1 = the classic blocking loop) and delete every job they
        get; reports jobs/s from the first put to the N-th delete. Durability:
        memory = no binlog; nosync = -b DIR -F (written, never fsynced: like
        zlane --durability none); binlog = -b DIR (beanstalkd's default: fsync
        at most every 50 ms); fsync = -b DIR -f0 (fsync on every write).
    zlane-beanstalk-bench latency [--rate R] [--seconds S] [--consumers C]
                         [--payload B] [--reserve-depth D] [--durability ...]
        open loop: job i is due at t0 + i/R and carries that due time
        (CLOCK_MONOTONIC, shared by the processes of one machine) in its
        first 8 bytes; the producer never waits for an earlier put's answer.
        C consumers (default depth 1: the blocking reserve) record reserve
        time - due time, so a producer that falls behind is charged for it.
        Prints p50/p90/p99/p99.9/max.
    zlane-beanstalk-bench memory [--jobs N] [--payload B]
        puts N jobs with no consumer and reports beanstalkd's RSS per job.

    Every process it starts is killed at exit, by PID. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include "benchproc.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
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

#define MAX_PROCS 34
#define PUT_WINDOW 1024

static double
s_now (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int64_t
s_now_us (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

// ---------------------------------------------------------------- samples
// The latency run's consumers share these with the producer (an anonymous
// shared mapping): one sample per job, and an event pipe on which a
// consumer writes 'r' once connected and 'd' with the last expected sample.
typedef struct {
    _Atomic uint64_t n, stored; // slots taken, samples written
    uint64_t cap;
    int event_fd;
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
    if (atomic_fetch_add (&s->stored, 1) + 1 == s->cap)
        s_event (s, 'd');
}

// ---------------------------------------------------------------- connection
typedef struct {
    int fd;
    char in[1 << 16];
    size_t in_len;
} conn_t;

// Read more bytes (blocking). Returns 0, or -1 on EOF/error.
static int
s_fill (conn_t *c)
{
    if (c->in_len == sizeof c->in)
        zl_benchproc_die ("reply too long");
    ssize_t r;
    do
        r = read (c->fd, c->in + c->in_len, sizeof c->in - c->in_len);
    while (r < 0 && errno == EINTR);
    if (r <= 0)
        return -1;
    c->in_len += (size_t)r;
    return 0;
}

// If a full line (and, for RESERVED/OK, its body) is buffered, copy the
// line into `line`, consume it all and return 1; else 0. For a RESERVED
// body of 8 bytes or more, its first 8 go to *stamp when it is not NULL.
static int
s_take_reply (conn_t *c, char *line, size_t cap, int64_t *stamp)
{
    char *eol = memmem (c->in, c->in_len, "\r\n", 2);
    if (!eol)
        return 0;
    size_t ll = (size_t)(eol - c->in);
    size_t body = 0;
    unsigned long long id, bytes;
    char tmp[128];
    size_t tl = ll < sizeof tmp - 1 ? ll : sizeof tmp - 1;
    memcpy (tmp, c->in, tl);
    tmp[tl] = '\0';
    if (sscanf (tmp, "RESERVED %llu %llu", &id, &bytes) == 2)
        body = bytes + 2;
    else if (sscanf (tmp, "OK %llu", &bytes) == 1)
        body = bytes + 2;
    if (c->in_len < ll + 2 + body)
        return 0;
    size_t copy = ll < cap - 1 ? ll : cap - 1;
    memcpy (line, c->in, copy);
    line[copy] = '\0';
    if (stamp && !strncmp (line, "RESERVED ", 9) && body >= sizeof *stamp + 2)
        memcpy (stamp, c->in + ll + 2, sizeof *stamp);
    // keep the body of an OK (stats) reply after the line for the caller
    if (!strncmp (line, "OK ", 3) && body && cap > copy + 1 + body) {
        line[copy] = '\n';
        memcpy (line + copy + 1, c->in + ll + 2, body - 2);
        line[copy + 1 + body - 2] = '\0';
    }
    size_t used = ll + 2 + body;
    memmove (c->in, c->in + used, c->in_len - used);
    c->in_len -= used;
    return 1;
}

static void
s_reply (conn_t *c, char *line, size_t cap)
{
    while (!s_take_reply (c, line, cap, NULL))
        if (s_fill (c) != 0)
            zl_benchproc_die ("beanstalkd closed the connection");
}

// A stats value of the server, or -1.
static long long
s_stat (conn_t *c, const char *name)
{
    static char buf[1 << 15];
    zl_benchproc_write_all (c->fd, "stats\r\n", 7);
    s_reply (c, buf, sizeof buf);
    char key[96];
    snprintf (key, sizeof key, "\n%s: ", name);
    char *p = strstr (buf, key);
    return p ? atoll (p + strlen (key)) : -1;
}

// ---------------------------------------------------------------- server
static pid_t
s_start_server (const char *path, const char *durability, int *port_out)
{
    // a free port: bind to 0, read it, close (beanstalkd takes a number)
    int probe = socket (AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    if (probe < 0 || bind (probe, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname (probe, (struct sockaddr *)&a, &al) != 0)
        zl_benchproc_die ("cannot find a free port");
    int port = ntohs (a.sin_port);
    close (probe);
    char ps[16], dir[PATH_MAX + 16], log[PATH_MAX + 16];
    snprintf (ps, sizeof ps, "%d", port);
    snprintf (dir, sizeof dir, "%s/binlog", zl_benchproc_tmp ());
    snprintf (log, sizeof log, "%s/beanstalkd.log", zl_benchproc_tmp ());
    char *argv[12] = {(char *)path, "-l", "127.0.0.1", "-p", ps, NULL};
    int argc = 5;
    if (strcmp (durability, "memory") != 0) {
        if (mkdir (dir, 0700) != 0)
            zl_benchproc_die ("cannot make the binlog dir");
        argv[argc++] = "-b";
        argv[argc++] = dir;
        if (!strcmp (durability, "fsync"))
            argv[argc++] = "-f0";
        else if (!strcmp (durability, "nosync"))
            argv[argc++] = "-F";
        else if (strcmp (durability, "binlog") != 0)
            zl_benchproc_die ("--durability: memory, nosync, binlog or fsync");
    }
    argv[argc] = NULL;
    pid_t pid = fork ();
    if (pid == 0) {
        if (!freopen (log, "a", stderr))
            _exit (127);
        execv (path, argv);
        execvp (path, argv);
        fprintf (stderr, "exec %s: %s\n", path, strerror (errno));
        _exit (127);
    }
    if (pid < 0)
        zl_benchproc_die ("fork failed");
    zl_benchproc_adopt (pid);
    double deadline = s_now () + 10;
    for (;;) {
        int fd = zl_benchproc_connect (port);
        if (fd >= 0) {
            close (fd);
            break;
        }
        if (s_now () > deadline || waitpid (pid, NULL, WNOHANG) == pid)
            zl_benchproc_die ("beanstalkd did not start (is it installed?)");
        usleep (10000);
    }
    *port_out = port;
    return pid;
}

// ---------------------------------------------------------------- roles
// A consumer. depth 1: the classic loop, a blocking "reserve", then
// "delete ID" and the next "reserve" in one write. depth > 1: `depth`
// non-blocking reserves ("reserve-with-timeout 0") kept outstanding, each
// answer followed by its delete and a new reserve; a round of nothing but
// TIMED_OUT waits 100 us before asking again. (Blocking reserves cannot be
// pipelined: a delete queued behind one waits for it.) With `sm` (the
// latency run): says 'r' when connected, and records each job's reserve
// time - the due time in its body.
static void
s_consumer (int port, int depth, samples_t *sm)
{
    conn_t *c = calloc (1, sizeof *c);
    c->fd = zl_benchproc_connect (port);
    if (c->fd < 0)
        _exit (1);
    if (sm)
        s_event (sm, 'r');
    const char *reserve = depth > 1 ? "reserve-with-timeout 0\r\n" : "reserve\r\n";
    size_t rl = strlen (reserve);
    size_t cap = (size_t)depth * 64 + 256;
    char *out = malloc (cap);
    size_t ol = 0;
    for (int i = 0; i < depth; i++) {
        memcpy (out + ol, reserve, rl);
        ol += rl;
    }
    zl_benchproc_write_all (c->fd, out, ol);
    char line[256];
    for (;;) {
        if (s_fill (c) != 0)
            _exit (0);
        ol = 0;
        int64_t stamp = 0;
        int got = 0, empty = 0;
        while (s_take_reply (c, line, sizeof line, sm ? &stamp : NULL)) {
            unsigned long long id, bytes;
            if (sscanf (line, "RESERVED %llu %llu", &id, &bytes) == 2) {
                if (sm)
                    s_samples_add (sm, s_now_us () - stamp);
                ol += (size_t)snprintf (out + ol, cap - ol, "delete %llu\r\n%s", id, reserve);
                got++;
            } else if (!strcmp (line, "TIMED_OUT")) {
                memcpy (out + ol, reserve, rl);
                ol += rl;
                empty++;
            } else if (strcmp (line, "DELETED") != 0)
                _exit (2);
            if (ol > cap - 96) {
                zl_benchproc_write_all (c->fd, out, ol);
                ol = 0;
            }
        }
        if (empty && !got)
            usleep (100);
        if (ol)
            zl_benchproc_write_all (c->fd, out, ol);
    }
}

// Read the answers to puts that are there (block: wait for at least one
// read); how many. Any answer but INSERTED is fatal.
static uint64_t
s_read_puts (conn_t *c, int block)
{
    struct pollfd p = {c->fd, POLLIN, 0};
    if (poll (&p, 1, block ? -1 : 0) > 0 && s_fill (c) != 0)
        zl_benchproc_die ("beanstalkd closed the producer connection");
    char line[256];
    uint64_t n = 0;
    while (s_take_reply (c, line, sizeof line, NULL)) {
        if (strncmp (line, "INSERTED ", 9) != 0) {
            fprintf (stderr, "put: %s\n", line);
            zl_benchproc_die ("a put was refused");
        }
        n++;
    }
    return n;
}

static conn_t *
s_producer_connect (int port)
{
    conn_t *c = calloc (1, sizeof *c);
    c->fd = zl_benchproc_connect (port);
    if (c->fd < 0)
        zl_benchproc_die ("producer cannot connect");
    return c;
}

static void
s_conn_destroy (conn_t **c_p)
{
    close ((*c_p)->fd);
    free (*c_p);
    *c_p = NULL;
}

// One put command ("put ...\r\n" + payload + "\r\n"); its length in *len.
static char *
s_put_command (size_t payload, size_t *len)
{
    char head[64];
    size_t hl = (size_t)snprintf (head, sizeof head, "put 0 0 60 %zu\r\n", payload);
    char *put = malloc (hl + payload + 2);
    memcpy (put, head, hl);
    memset (put + hl, 'x', payload);
    memcpy (put + hl + payload, "\r\n", 2);
    *len = hl + payload + 2;
    return put;
}

// The producer: pipeline `jobs` puts with at most PUT_WINDOW unanswered.
static void
s_producer (int port, uint64_t jobs, size_t payload)
{
    conn_t *c = s_producer_connect (port);
    size_t one;
    char *put = s_put_command (payload, &one);
    size_t cap = one * 256;
    char *out = malloc (cap);
    uint64_t sent = 0, answered = 0;
    while (answered < jobs) {
        size_t ol = 0;
        while (sent < jobs && sent - answered < PUT_WINDOW && ol + one <= cap) {
            memcpy (out + ol, put, one);
            ol += one;
            sent++;
        }
        if (ol)
            zl_benchproc_write_all (c->fd, out, ol);
        // read what is there; block only when the window is full or all sent
        answered += s_read_puts (c, sent == jobs || sent - answered >= PUT_WINDOW);
    }
    free (out);
    free (put);
    s_conn_destroy (&c);
}

// The latency run's producer: job i is put at t0 + i/rate with that due
// time (µs) in its body's first 8 bytes, whatever the earlier puts' answers
// (read as they come). Returns how many puts were more than 1 ms late.
static uint64_t
s_paced_producer (int port, double rate, uint64_t jobs, size_t payload)
{
    conn_t *c = s_producer_connect (port);
    size_t one;
    char *put = s_put_command (payload, &one);
    char *stamp = put + one - payload - 2;
    int64_t t0 = s_now_us () + 10000;
    uint64_t late = 0, answered = 0;
    for (uint64_t i = 0; i < jobs; i++) {
        int64_t due = t0 + (int64_t)((double)i * 1e6 / rate);
        zl_benchproc_sleep_until (due);
        if (s_now_us () - due > 1000)
            late++;
        memcpy (stamp, &due, sizeof due);
        zl_benchproc_write_all (c->fd, put, one);
        answered += s_read_puts (c, 0);
    }
    while (answered < jobs)
        answered += s_read_puts (c, 1);
    free (put);
    s_conn_destroy (&c);
    return late;
}

typedef struct {
    const char *mode, *durability, *server;
    uint64_t jobs;
    int consumers, depth;
    size_t payload;
    double rate, seconds;
} opts_t;

// Fork the consumers (killed at exit); sm: the latency run's samples.
static void
s_start_consumers (int port, const opts_t *o, samples_t *sm)
{
    for (int i = 0; i < o->consumers; i++) {
        pid_t pid = fork ();
        if (pid == 0) {
            zl_benchproc_forget (); // the parent cleans up
            s_consumer (port, o->depth, sm);
            _exit (0);
        }
        if (pid < 0)
            zl_benchproc_die ("fork failed");
        zl_benchproc_adopt (pid);
    }
}

static int
s_memory (int port, pid_t srv, const opts_t *o)
{
    uint64_t rss0 = zl_benchproc_rss (srv, NULL, NULL);
    double t0 = s_now ();
    s_producer (port, o->jobs, o->payload);
    double secs = s_now () - t0;
    uint64_t rss1 = zl_benchproc_rss (srv, NULL, NULL);
    printf ("beanstalkd memory durability=%s jobs=%" PRIu64 " payload=%zu: queued in %.2f s "
            "(%.0f jobs/s); RSS %.1f MiB -> %.1f MiB = %.0f bytes/job\n",
            o->durability, o->jobs, o->payload, secs, (double)o->jobs / secs, rss0 / 1048576.0,
            rss1 / 1048576.0, (double)(rss1 - rss0) / (double)o->jobs);
    return 0;
}

static int
s_throughput (int port, const opts_t *o)
{
    s_start_consumers (port, o, NULL);
    conn_t *mon = calloc (1, sizeof *mon);
    mon->fd = zl_benchproc_connect (port);
    if (mon->fd < 0)
        zl_benchproc_die ("cannot connect the monitor");
    double t0 = s_now ();
    s_producer (port, o->jobs, o->payload);
    double t_put = s_now ();
    long long deleted;
    while ((deleted = s_stat (mon, "cmd-delete")) < (long long)o->jobs) {
        if (deleted < 0)
            zl_benchproc_die ("no cmd-delete in stats");
        if (s_now () - t0 > 600)
            zl_benchproc_die ("timed out waiting for the consumers");
        usleep (1000);
    }
    double secs = s_now () - t0;
    printf ("beanstalkd throughput durability=%s jobs=%" PRIu64 " producers=1 consumers=%d "
            "reserve-depth=%d payload=%zu: %.2f s, %.0f jobs/s (puts done in %.2f s)\n",
            o->durability, o->jobs, o->consumers, o->depth, o->payload, secs,
            (double)o->jobs / secs, t_put - t0);
    return 0;
}

static int
s_latency (int port, const opts_t *o)
{
    uint64_t jobs = (uint64_t)(o->rate * o->seconds);
    int events;
    samples_t *sm = s_samples_new (jobs, &events);
    s_start_consumers (port, o, sm);
    close (sm->event_fd); // the read end sees EOF when every consumer is gone
    zl_benchproc_wait_events (events, 'r', o->consumers, 10000);
    double t0 = s_now ();
    uint64_t late = s_paced_producer (port, o->rate, jobs, o->payload);
    double sent_s = s_now () - t0;
    zl_benchproc_wait_events (events, 'd', 1, 60000);
    int64_t *lat = sm->lat_us;
    zl_benchproc_sort_i64 (lat, jobs);
    printf ("beanstalkd latency durability=%s rate=%.0f/s jobs=%" PRIu64 " consumers=%d "
            "reserve-depth=%d payload=%zu: put->reserve p50 %.3f ms p90 %.3f ms p99 %.3f ms "
            "p99.9 %.3f ms max %.3f ms (%" PRIu64 " samples, sent in %.2f s, %" PRIu64
            " sends >1 ms late)\n",
            o->durability, o->rate, jobs, o->consumers, o->depth, o->payload,
            zl_benchproc_pct_ms (lat, jobs, 50), zl_benchproc_pct_ms (lat, jobs, 90),
            zl_benchproc_pct_ms (lat, jobs, 99), zl_benchproc_pct_ms (lat, jobs, 99.9),
            (double)lat[jobs - 1] / 1000.0, jobs, sent_s, late);
    return 0;
}

int
main (int argc, char **argv)
{
    if (argc < 2 || !strcmp (argv[1], "--help") || !strcmp (argv[1], "-h")) {
        printf ("usage: zlane-beanstalk-bench throughput|latency|memory [--jobs N]\n"
                "       [--consumers C] [--payload BYTES] [--reserve-depth D]\n"
                "       [--rate R] [--seconds S] [--durability memory|nosync|binlog|fsync]\n"
                "       [--beanstalkd PATH]\n");
        return argc < 2 ? 2 : 0;
    }
    opts_t o = {.mode = argv[1],
                .durability = "memory",
                .server = "beanstalkd",
                .jobs = 100000,
                .consumers = 2,
                .depth = 0,
                .payload = 100,
                .rate = 1000,
                .seconds = 5};
    for (int i = 2; i < argc; i++) {
        if (i + 1 >= argc)
            zl_benchproc_die ("every option takes a value");
        if (!strcmp (argv[i], "--jobs"))
            o.jobs = strtoull (argv[++i], NULL, 10);
        else if (!strcmp (argv[i], "--consumers"))
            o.consumers = atoi (argv[++i]);
        else if (!strcmp (argv[i], "--payload"))
            o.payload = (size_t)atoi (argv[++i]);
        else if (!strcmp (argv[i], "--durability"))
            o.durability = argv[++i];
        else if (!strcmp (argv[i], "--reserve-depth"))
            o.depth = atoi (argv[++i]);
        else if (!strcmp (argv[i], "--rate"))
            o.rate = atof (argv[++i]);
        else if (!strcmp (argv[i], "--seconds"))
            o.seconds = atof (argv[++i]);
        else if (!strcmp (argv[i], "--beanstalkd"))
            o.server = argv[++i];
        else
            zl_benchproc_die ("unknown option");
    }
    int latency = !strcmp (o.mode, "latency");
    if (!o.depth)
        o.depth = latency ? 1 : 64; // latency: the blocking reserve, no 100 us polls
    if (!o.jobs || o.consumers < 1 || o.consumers > MAX_PROCS - 2 || o.payload < 1 || o.depth < 1 ||
        o.depth > 4096 || o.rate <= 0 || o.seconds <= 0 ||
        (latency && (o.payload < sizeof (int64_t) || o.rate * o.seconds < 1)))
        zl_benchproc_die ("bad numbers");
    if (!latency && strcmp (o.mode, "throughput") != 0 && strcmp (o.mode, "memory") != 0)
        zl_benchproc_die ("unknown mode (throughput, latency, memory)");
    zl_benchproc_init ("zlane-beanstalk-bench", "zlane-beanstalk");
    signal (SIGPIPE, SIG_IGN);
    int port;
    pid_t srv = s_start_server (o.server, o.durability, &port);
    if (!strcmp (o.mode, "memory"))
        return s_memory (port, srv, &o);
    return latency ? s_latency (port, &o) : s_throughput (port, &o);
}
