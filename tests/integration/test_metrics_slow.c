/*  test_metrics_slow: the metrics page (--metrics) of a real zlane-broker
    stays answerable while slow clients crowd it. N_SLOW connections hold
    the page open, each sending a byte of a request head that never ends
    every SLOW_BYTE_MS (or nothing at all), while a normal GET /metrics is
    made; it must be answered 200 on its first attempt. Variants: the slow
    clients come from the scraper's own address (127.0.0.1) and stay; they
    reconnect as fast as they can whenever the broker closes them; they
    come from other loopback addresses (127.0.0.2-9) and reconnect.

    Each scrape's time is printed. Should the first attempt be closed
    unanswered, the scrape is retried every RETRY_MS until answered (or
    SCRAPE_MAX_MS) so that the time a scraper was locked out is printed too,
    and the test fails. Every wait is a poll with a deadline. */
#define _GNU_SOURCE
#include "zltest.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <zmq.h>

#define N_SLOW 80           // more than the page's 64 connections
#define SLOW_BYTE_MS 1000   // a slow client sends a byte this often
#define WARMUP_MS 5000      // for the slow clients to connect
#define RETRY_MS 50         // a scrape closed unanswered is retried after this
#define SCRAPE_MAX_MS 15000 // and given up after this
#define RECONNECT_MS 10     // a slow client that could not connect tries again
#define CHURN 2000          // reconnecting clients: the closes before the scrape

typedef struct {
    int fd; // -1: not connected
    bool connected;
    bool retry;      // fd -1: connect again at next_ms
    bool was_up;     // has connected at least once
    int64_t next_ms; // when it sends its next byte, or connects again
    size_t sent;
} slow_conn_t;

// The slow clients: N_SLOW connections to the page.
typedef struct {
    slow_conn_t conns[N_SLOW];
    struct sockaddr_in to;
    bool reconnect; // open a new connection when the broker closes one
    bool silent;    // send nothing at all
    int n_src;      // source addresses 127.0.0.2 .. 127.0.0.(1 + n_src); 0: 127.0.0.1
    uint64_t opened, closed, failed;
} slow_t;

static struct sockaddr_in
s_addr (const char *endpoint)
{
    const char *colon = strrchr (endpoint, ':');
    assert_non_null (colon);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons ((uint16_t)atoi (colon + 1))};
    a.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    return a;
}

// A non-blocking TCP socket from 127.0.0.`src` (0: the kernel's choice,
// 127.0.0.1), connecting to `to`. Returns the fd, or -1 (errno set).
static int
s_open (const struct sockaddr_in *to, int src)
{
    int fd = socket (AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (src) {
        struct sockaddr_in from = {.sin_family = AF_INET};
        from.sin_addr.s_addr = htonl (INADDR_LOOPBACK - 1 + (uint32_t)src);
        if (bind (fd, (struct sockaddr *)&from, sizeof from) < 0) {
            close (fd);
            return -1;
        }
    }
    if (connect (fd, (const struct sockaddr *)to, sizeof *to) < 0 && errno != EINPROGRESS) {
        int e = errno;
        close (fd);
        errno = e;
        return -1;
    }
    return fd;
}

static void
s_slow_open (slow_t *self, int i, int64_t now)
{
    slow_conn_t *c = &self->conns[i];
    c->fd = s_open (&self->to, self->n_src ? 2 + i % self->n_src : 0);
    c->connected = false;
    c->sent = 0;
    c->retry = c->fd < 0; // out of ports for a moment: try again soon
    c->next_ms = now + RECONNECT_MS;
    if (c->fd < 0)
        self->failed++;
    else
        self->opened++;
}

static void
s_slow_start (slow_t *self, const char *endpoint, bool reconnect, bool silent, int n_src)
{
    *self =
        (slow_t){.to = s_addr (endpoint), .reconnect = reconnect, .silent = silent, .n_src = n_src};
    for (int i = 0; i < N_SLOW; i++)
        s_slow_open (self, i, zlt_now_ms ());
}

static void
s_slow_stop (slow_t *self)
{
    for (int i = 0; i < N_SLOW; i++)
        if (self->conns[i].fd >= 0)
            close (self->conns[i].fd);
}

static int
s_slow_connected (const slow_t *self)
{
    int n = 0;
    for (int i = 0; i < N_SLOW; i++)
        n += self->conns[i].connected;
    return n;
}

static int
s_slow_were_up (const slow_t *self)
{
    int n = 0;
    for (int i = 0; i < N_SLOW; i++)
        n += self->conns[i].was_up;
    return n;
}

// The next byte of a request head that never ends.
static char
s_slow_byte (size_t sent)
{
    static const char start[] = "GET /metrics HTTP/1.1\r\nX-Slow: ";
    return sent < sizeof start - 1 ? start[sent] : 'a';
}

// Fill `fds` with what the slow clients wait for; returns how many, and
// lowers `*timeout_ms` to the next byte or reconnect that is due.
static int
s_slow_fds (slow_t *self, struct pollfd *fds, int64_t now, int *timeout_ms)
{
    for (int i = 0; i < N_SLOW; i++) {
        slow_conn_t *c = &self->conns[i];
        fds[i] = (struct pollfd){.fd = c->fd, .events = c->connected ? POLLIN : POLLOUT};
        bool timed = c->retry || (c->connected && !self->silent);
        if (timed) {
            int64_t wait = c->next_ms > now ? c->next_ms - now : 0;
            if (wait < *timeout_ms)
                *timeout_ms = (int)wait;
        }
    }
    return N_SLOW;
}

// Act on what poll said about the slow clients' `fds`.
static void
s_slow_handle (slow_t *self, const struct pollfd *fds, int64_t now)
{
    for (int i = 0; i < N_SLOW; i++) {
        slow_conn_t *c = &self->conns[i];
        bool gone = false;
        if (c->fd < 0) {
            if (c->retry && now >= c->next_ms)
                s_slow_open (self, i, now);
            continue;
        }
        if (!c->connected && fds[i].revents) {
            int err = 0;
            socklen_t len = sizeof err;
            getsockopt (c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
            if (err)
                gone = true;
            else {
                c->connected = c->was_up = true;
                c->next_ms = now; // the first byte now
            }
        } else if (c->connected && (fds[i].revents & (POLLIN | POLLHUP | POLLERR))) {
            char buf[512];
            ssize_t r = read (c->fd, buf, sizeof buf);
            if (r == 0 || (r < 0 && errno != EAGAIN))
                gone = true; // the broker closed it (or answered and closed)
        }
        if (!gone && c->connected && !self->silent && now >= c->next_ms) {
            char b = s_slow_byte (c->sent);
            if (write (c->fd, &b, 1) == 1)
                c->sent++;
            c->next_ms = now + SLOW_BYTE_MS;
        }
        if (gone) {
            close (c->fd);
            c->fd = -1;
            c->connected = false;
            c->next_ms = now;
            self->closed++;
            if (self->reconnect)
                s_slow_open (self, i, now);
        }
    }
}

// Run the slow clients until each has connected (and sent its first byte,
// unless silent), and reconnecting ones until the broker has closed CHURN
// of them; at most WARMUP_MS.
static void
s_slow_warm_up (slow_t *self)
{
    int64_t deadline = zlt_now_ms () + WARMUP_MS;
    struct pollfd fds[N_SLOW];
    while (s_slow_were_up (self) < N_SLOW || (self->reconnect && self->closed < CHURN)) {
        int64_t now = zlt_now_ms ();
        if (now >= deadline)
            fail_msg ("only %d of %d slow clients connected, %llu closed, within %d ms",
                      s_slow_were_up (self), N_SLOW, (unsigned long long)self->closed, WARMUP_MS);
        int timeout = (int)(deadline - now);
        s_slow_fds (self, fds, now, &timeout);
        poll (fds, N_SLOW, timeout);
        s_slow_handle (self, fds, zlt_now_ms ());
    }
}

typedef struct {
    bool answered;    // a 200 came
    int attempts;     // connections it took, the last one answered
    int64_t first_ms; // the first attempt's time: to its answer, or to its close
    int64_t total_ms; // from the first connect to the answer
} scrape_t;

// GET /metrics from 127.0.0.1 while the slow clients go on, read to the
// broker's close; retried every RETRY_MS while closed unanswered.
static scrape_t
s_scrape (slow_t *slow)
{
    static const char request[] = "GET /metrics HTTP/1.1\r\nHost: broker\r\n\r\n";
    scrape_t out = {0};
    int64_t start = zlt_now_ms (), deadline = start + SCRAPE_MAX_MS;
    int64_t retry_at = start;
    struct pollfd fds[N_SLOW + 1];
    char got[256] = "";
    size_t n = 0;
    int fd = -1;
    bool sent = false;
    for (;;) {
        int64_t now = zlt_now_ms ();
        if (now >= deadline)
            break;
        if (fd < 0 && now >= retry_at) {
            fd = s_open (&slow->to, 0);
            out.attempts++;
            n = 0;
            got[0] = '\0';
            sent = false;
            if (fd < 0) // out of ports for a moment
                retry_at = now + RETRY_MS;
        }
        int timeout = (int)((fd < 0 ? retry_at : deadline) - now);
        s_slow_fds (slow, fds, now, &timeout);
        fds[N_SLOW] = (struct pollfd){.fd = fd, .events = sent ? POLLIN : POLLOUT};
        poll (fds, N_SLOW + 1, timeout);
        // the scraper first, as a client of its own would: its head goes
        // out the moment it is connected
        bool done = false;
        if (fd >= 0 && fds[N_SLOW].revents && !sent) {
            ssize_t w = write (fd, request, sizeof request - 1);
            sent = true;
            done = w != (ssize_t)sizeof request - 1;
        } else if (fd >= 0 && fds[N_SLOW].revents) {
            char buf[8192];
            ssize_t r = read (fd, buf, sizeof buf);
            if (r > 0 && n < sizeof got - 1) {
                size_t take = (size_t)r < sizeof got - 1 - n ? (size_t)r : sizeof got - 1 - n;
                memcpy (got + n, buf, take);
                n += take;
                got[n] = '\0';
            }
            done = r == 0 || (r < 0 && errno != EAGAIN);
        }
        now = zlt_now_ms ();
        s_slow_handle (slow, fds, now);
        if (!done)
            continue;
        close (fd);
        fd = -1;
        if (out.attempts == 1)
            out.first_ms = now - start;
        if (!strncmp (got, "HTTP/1.0 200 OK\r\n", 17)) {
            out.answered = true;
            out.total_ms = now - start;
            break;
        }
        retry_at = now + RETRY_MS;
    }
    if (fd >= 0)
        close (fd);
    if (!out.answered)
        out.total_ms = zlt_now_ms () - start;
    return out;
}

// Start a broker with the page, crowd it with slow clients, scrape it.
static void
s_run (const char *what, bool reconnect, bool silent, int n_src)
{
    static const char *const args[] = {"--lane", "a", "--metrics", "tcp://127.0.0.1:*", NULL};
    zlt_broker_t *b = zlt_broker_start (args);
    assert_non_null (b);
    const char *metrics = zlt_broker_endpoint (b, "metrics");
    assert_non_null (metrics);
    zlt_client_t *admin = zlt_client_new (ZMQ_DEALER, zlt_broker_endpoint (b, "admin"));
    slow_t slow;
    int64_t start = zlt_now_ms ();
    s_slow_start (&slow, metrics, reconnect, silent, n_src);
    s_slow_warm_up (&slow);
    if (reconnect)
        printf ("%s: %llu closed and reconnected in %lld ms before the scrape\n", what,
                (unsigned long long)slow.closed, (long long)(zlt_now_ms () - start));
    scrape_t s = s_scrape (&slow);
    int held = s_slow_connected (&slow);
    s_slow_stop (&slow);
    printf ("%s: first attempt %s after %lld ms; answered %s after %lld ms, %d attempt(s); "
            "slow clients: %d connected at the end, %llu opened, %llu closed by the broker, "
            "%llu connects failed\n",
            what, s.attempts == 1 && s.answered ? "answered" : "not answered",
            (long long)s.first_ms, s.answered ? "yes" : "NO", (long long)s.total_ms, s.attempts,
            held, (unsigned long long)slow.opened, (unsigned long long)slow.closed,
            (unsigned long long)slow.failed);
    printf ("%s: err_metrics_refused %llu, metrics_requests %llu\n", what,
            (unsigned long long)zlt_counter (admin, "err_metrics_refused"),
            (unsigned long long)zlt_counter (admin, "metrics_requests"));
    fflush (stdout);
    assert_true (s.answered);
    assert_int_equal (s.attempts, 1); // answered on the first attempt
    assert_int_equal (zlt_counter (admin, "metrics_requests"), 1);
}

// Slow clients from the scraper's own address that stay connected.
static void
test_slow_clients_same_address (void **state)
{
    (void)state;
    s_run ("slow, 127.0.0.1", false, false, 0);
}

// Connections that send nothing at all.
static void
test_idle_clients_same_address (void **state)
{
    (void)state;
    s_run ("idle, 127.0.0.1", false, true, 0);
}

// Slow clients that reconnect at once whenever the broker closes them.
static void
test_reconnecting_slow_clients_same_address (void **state)
{
    (void)state;
    s_run ("slow, reconnecting, 127.0.0.1", true, false, 0);
}

// Slow clients from 127.0.0.2-9 that reconnect at once.
static void
test_reconnecting_slow_clients_other_addresses (void **state)
{
    (void)state;
    s_run ("slow, reconnecting, 127.0.0.2-9", true, false, 8);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown (test_slow_clients_same_address, zlt_teardown),
        cmocka_unit_test_teardown (test_idle_clients_same_address, zlt_teardown),
        cmocka_unit_test_teardown (test_reconnecting_slow_clients_same_address, zlt_teardown),
        cmocka_unit_test_teardown (test_reconnecting_slow_clients_other_addresses, zlt_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
