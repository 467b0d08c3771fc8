/*  test_router: the broker's ROUTER endpoint (broker/router) over real
    loopback sockets, its clients libzmq DEALERs (what pyzmq, zeromq.js and
    zlane-ctl users run), raw TCP clients for what misbehaves (garbage, a
    handshake left half done, a PING with a TTL and then silence), CURVE
    with a key let in and keys refused, ipc:// and inproc://. The router is
    pumped here as the broker's loop pumps it: poll its item, then recv,
    flush and sweep. Every wait has a deadline and ends on a condition. */
#define _GNU_SOURCE
#include "router.h"

#include "clock.h"
#include "zmtp.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <czmq.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#define WAIT_MS 5000
#define MAX_MSGS 256
#define KEEP 1024  // bytes of each message kept
#define STEP_MS 20 // the longest poll: the sweep is a timer of the loop's

// ---------------------------------------------------------------- a router under test
typedef struct {
    zl_peer_t peer;
    uint8_t data[KEEP];
    size_t size;
    uint8_t last; // the body's last byte
    bool extra;
    bool has_user;
    char user_id[41];
    bool has_addr;
    char addr[64];
} seen_msg_t;

typedef struct {
    zl_router_t *router;
    char bound[256];
    seen_msg_t msgs[MAX_MSGS];
    size_t n_msgs, taken;
    uint64_t refused; // zl_router_refused, summed
} rt_t;

static rt_t *
s_rt_new (const zl_router_opts_t *opts)
{
    rt_t *t = calloc (1, sizeof *t);
    t->router = zl_router_new (opts);
    assert_non_null (t->router);
    return t;
}

static void
s_rt_bind (rt_t *t, const char *endpoint)
{
    char err[256] = "";
    if (zl_router_bind (t->router, endpoint, t->bound, sizeof t->bound, err, sizeof err) != 0)
        fail_msg ("zl_router_bind (%s): %s", endpoint, err);
}

static void
s_rt_destroy (rt_t **t_p)
{
    zl_router_destroy (&(*t_p)->router);
    assert_null ((*t_p)->router);
    zl_router_destroy (&(*t_p)->router); // NULL-safe
    free (*t_p);
    *t_p = NULL;
}

static int
s_port (const rt_t *t)
{
    return atoi (strrchr (t->bound, ':') + 1);
}

//  One turn of the broker's loop: poll the router's item (and `extra`
//  items, their revents written back) at most `max_ms`, then take every
//  message, flush, sweep and count refusals.
static void
s_step (rt_t *t, zmq_pollitem_t *extra, int n_extra, int max_ms)
{
    zmq_pollitem_t items[8];
    items[0] = (zmq_pollitem_t){.events = ZMQ_POLLIN};
    zl_router_poll_item (t->router, &items[0].socket, &items[0].fd);
    for (int i = 0; i < n_extra; i++)
        items[1 + i] = extra[i];
    long wait = zl_router_pending (t->router) ? 0 : max_ms > STEP_MS ? STEP_MS : max_ms;
    zmq_poll (items, 1 + n_extra, wait);
    for (int i = 0; i < n_extra; i++)
        extra[i].revents = items[1 + i].revents;
    zl_router_msg_t m;
    while (zl_router_recv (t->router, &m) == 1) {
        assert_true (t->n_msgs < MAX_MSGS);
        seen_msg_t *s = &t->msgs[t->n_msgs++];
        memset (s, 0, sizeof *s);
        s->peer = m.peer;
        s->size = m.size;
        memcpy (s->data, m.data, m.size < KEEP ? m.size : KEEP);
        s->last = m.size ? ((const uint8_t *)m.data)[m.size - 1] : 0;
        s->extra = m.extra_frames;
        if (m.user_id) {
            s->has_user = true;
            snprintf (s->user_id, sizeof s->user_id, "%s", m.user_id);
        }
        if (m.peer_address) {
            s->has_addr = true;
            snprintf (s->addr, sizeof s->addr, "%s", m.peer_address);
        }
    }
    zl_router_flush (t->router);
    zl_router_sweep (t->router, zl_clock_mono_ms ());
    t->refused += zl_router_refused (t->router);
}

//  The next message not taken yet, waiting up to `ms`; NULL if none came.
static seen_msg_t *
s_wait_msg (rt_t *t, int ms)
{
    int64_t deadline = zl_clock_mono_ms () + ms;
    while (t->taken == t->n_msgs) {
        int64_t left = deadline - zl_clock_mono_ms ();
        if (left <= 0)
            return NULL;
        s_step (t, NULL, 0, (int)left);
    }
    return &t->msgs[t->taken++];
}

//  The next message, which must say `text`.
static seen_msg_t *
s_expect_msg (rt_t *t, const char *text)
{
    seen_msg_t *m = s_wait_msg (t, WAIT_MS);
    assert_non_null (m);
    assert_int_equal (m->size, strlen (text));
    assert_memory_equal (m->data, text, m->size);
    return m;
}

static bool
s_wait_conns (rt_t *t, size_t n, int ms)
{
    int64_t deadline = zl_clock_mono_ms () + ms;
    while (zl_router_connections (t->router) != n) {
        int64_t left = deadline - zl_clock_mono_ms ();
        if (left <= 0)
            return false;
        s_step (t, NULL, 0, (int)left);
    }
    return true;
}

static bool
s_wait_refused (rt_t *t, uint64_t n, int ms)
{
    int64_t deadline = zl_clock_mono_ms () + ms;
    while (t->refused < n) {
        int64_t left = deadline - zl_clock_mono_ms ();
        if (left <= 0)
            return false;
        s_step (t, NULL, 0, (int)left);
    }
    return true;
}

//  Pump for `ms`, whatever comes (for what must not happen meanwhile).
static void
s_run_for (rt_t *t, int ms)
{
    int64_t until = zl_clock_mono_ms () + ms;
    for (int64_t left = ms; left > 0; left = until - zl_clock_mono_ms ())
        s_step (t, NULL, 0, (int)left);
}

// ---------------------------------------------------------------- libzmq clients
static void *
s_dealer (void *ctx)
{
    void *d = zmq_socket (ctx, ZMQ_DEALER);
    assert_non_null (d);
    int zero = 0;
    zmq_setsockopt (d, ZMQ_LINGER, &zero, sizeof zero);
    return d;
}

static void
s_connect (void *d, const char *endpoint)
{
    assert_int_equal (zmq_connect (d, endpoint), 0);
}

//  A frame on libzmq socket `d`, pumping the router meanwhile: its size
//  (the body cut at `cap`), or -1 when none came in `ms`. `*more` is set
//  when another frame follows.
static int
s_dealer_recv (rt_t *t, void *d, void *buf, size_t cap, bool *more, int ms)
{
    int64_t deadline = zl_clock_mono_ms () + ms;
    for (;;) {
        int n = zmq_recv (d, buf, cap, ZMQ_DONTWAIT);
        if (n >= 0) {
            int m = 0;
            size_t ml = sizeof m;
            zmq_getsockopt (d, ZMQ_RCVMORE, &m, &ml);
            if (more)
                *more = m;
            return n;
        }
        int64_t left = deadline - zl_clock_mono_ms ();
        if (left <= 0)
            return -1;
        zmq_pollitem_t it = {d, 0, ZMQ_POLLIN, 0};
        s_step (t, &it, 1, (int)left);
    }
}

static void
s_dealer_expect (rt_t *t, void *d, const char *text)
{
    char buf[256];
    bool more;
    int n = s_dealer_recv (t, d, buf, sizeof buf, &more, WAIT_MS);
    assert_int_equal (n, (int)strlen (text));
    assert_memory_equal (buf, text, strlen (text));
    assert_false (more);
}

static void *
s_monitor (void *ctx, void *sock, const char *name)
{
    char ep[64];
    snprintf (ep, sizeof ep, "inproc://test-router-mon-%s", name);
    assert_int_equal (zmq_socket_monitor (sock, ep, ZMQ_EVENT_ALL), 0);
    void *mon = zmq_socket (ctx, ZMQ_PAIR);
    int zero = 0;
    zmq_setsockopt (mon, ZMQ_LINGER, &zero, sizeof zero);
    assert_int_equal (zmq_connect (mon, ep), 0);
    return mon;
}

static void
s_monitor_close (void *sock, void *mon)
{
    zmq_socket_monitor (sock, NULL, 0);
    zmq_close (mon);
}

//  Wait for one of `events` on a monitor, pumping the router meanwhile.
//  Returns the event, or 0 when none came in `ms` (0: only those queued).
static int
s_monitor_wait (rt_t *t, void *mon, int events, int ms)
{
    int64_t deadline = zl_clock_mono_ms () + ms;
    for (;;) {
        zmq_msg_t m;
        zmq_msg_init (&m);
        if (zmq_msg_recv (&m, mon, ZMQ_DONTWAIT) >= 0) {
            uint16_t ev = 0;
            if (zmq_msg_size (&m) >= 6)
                memcpy (&ev, zmq_msg_data (&m), 2);
            zmq_msg_close (&m);
            zmq_msg_init (&m);
            zmq_msg_recv (&m, mon, 0); // the endpoint
            zmq_msg_close (&m);
            if (ev & events)
                return ev;
            continue;
        }
        zmq_msg_close (&m);
        int64_t left = deadline - zl_clock_mono_ms ();
        if (left <= 0)
            return 0;
        zmq_pollitem_t it = {mon, 0, ZMQ_POLLIN, 0};
        s_step (t, &it, 1, (int)left);
    }
}

// ---------------------------------------------------------------- raw TCP clients
static int
s_raw_dial (int port)
{
    int fd = socket (AF_INET, SOCK_STREAM, 0);
    assert_true (fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons ((uint16_t)port),
                            .sin_addr.s_addr = htonl (INADDR_LOOPBACK)};
    assert_int_equal (connect (fd, (struct sockaddr *)&a, sizeof a), 0);
    fcntl (fd, F_SETFL, fcntl (fd, F_GETFL) | O_NONBLOCK);
    return fd;
}

//  Read `fd` until the router closes it, pumping the router meanwhile.
//  Returns the bytes read before the end, or -1 if it did not end in `ms`.
static ssize_t
s_raw_until_closed (rt_t *t, int fd, uint8_t *buf, size_t cap, int ms)
{
    int64_t deadline = zl_clock_mono_ms () + ms;
    size_t got = 0;
    for (;;) {
        uint8_t scratch[4096];
        uint8_t *into = got < cap ? buf + got : scratch;
        size_t room = got < cap ? cap - got : sizeof scratch;
        ssize_t n = recv (fd, into, room, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno == ECONNRESET))
            return (ssize_t)got;
        if (n > 0) {
            got += (size_t)n;
            continue;
        }
        int64_t left = deadline - zl_clock_mono_ms ();
        if (left <= 0)
            return -1;
        zmq_pollitem_t it = {NULL, fd, ZMQ_POLLIN, 0};
        s_step (t, &it, 1, (int)left);
    }
}

//  A client that speaks ZMTP through a zl_zmtp_t in this thread.
typedef struct {
    int fd;
    zl_zmtp_t *z;
    bool ready, closed;
    int frames;
} zc_t;

static void
s_zc_dial (zc_t *c, int port)
{
    memset (c, 0, sizeof *c);
    c->fd = s_raw_dial (port);
    zl_zmtp_opts_t o = {.server = false, .socket_type = "DEALER"};
    c->z = zl_zmtp_new (&o);
}

static void
s_zc_close (zc_t *c)
{
    close (c->fd);
    zl_zmtp_destroy (&c->z);
}

//  Write what waits, read what came, parse it.
static void
s_zc_io (zc_t *c)
{
    const uint8_t *out;
    size_t n;
    while ((n = zl_zmtp_out (c->z, &out)) > 0) {
        ssize_t w = send (c->fd, out, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w <= 0)
            break;
        zl_zmtp_sent (c->z, (size_t)w);
    }
    for (;;) {
        size_t room;
        uint8_t *space = zl_zmtp_in_space (c->z, 0, &room);
        ssize_t r = recv (c->fd, space, room, MSG_DONTWAIT);
        if (r <= 0) {
            c->closed |= r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
            break;
        }
        zl_zmtp_in_commit (c->z, (size_t)r);
    }
    zl_zmtp_frame_t f;
    zl_zmtp_rc_t rc;
    while ((rc = zl_zmtp_next (c->z, &f)) != ZL_ZMTP_AGAIN) {
        assert_int_not_equal (rc, ZL_ZMTP_ERROR);
        c->ready |= rc == ZL_ZMTP_READY;
        c->frames += rc == ZL_ZMTP_FRAME;
    }
}

static void
s_zc_handshake (rt_t *t, zc_t *c)
{
    int64_t deadline = zl_clock_mono_ms () + WAIT_MS;
    for (s_zc_io (c); !c->ready; s_zc_io (c)) {
        int64_t left = deadline - zl_clock_mono_ms ();
        assert_true (left > 0);
        zmq_pollitem_t it = {NULL, c->fd, ZMQ_POLLIN, 0};
        s_step (t, &it, 1, (int)left);
    }
}

// ---------------------------------------------------------------- the tests
static void
test_two_dealers (void **state)
{
    (void)state;
    rt_t *t = s_rt_new (&(zl_router_opts_t){.name = "frontend"});
    s_rt_bind (t, "tcp://127.0.0.1:*");
    assert_int_equal (strncmp (t->bound, "tcp://127.0.0.1:", 16), 0);
    assert_true (s_port (t) > 0);
    void *ctx = zmq_ctx_new ();
    void *d1 = s_dealer (ctx), *d2 = s_dealer (ctx);
    s_connect (d1, t->bound);
    s_connect (d2, t->bound);
    assert_int_equal (zmq_send (d1, "from-1", 6, 0), 6);
    assert_int_equal (zmq_send (d2, "from-2", 6, 0), 6);
    seen_msg_t *a = s_wait_msg (t, WAIT_MS), *b = s_wait_msg (t, WAIT_MS);
    assert_non_null (a);
    assert_non_null (b);
    if (!memcmp (a->data, "from-2", 6)) {
        seen_msg_t *swap = a;
        a = b;
        b = swap;
    }
    assert_memory_equal (a->data, "from-1", 6);
    assert_memory_equal (b->data, "from-2", 6);
    zl_peer_t p1 = a->peer, p2 = b->peer;
    for (int i = 0; i < 2; i++) {
        seen_msg_t *m = i ? b : a;
        assert_int_equal (m->peer.len, 5);
        assert_int_equal (m->peer.data[0], 0);
        assert_false (m->extra);
        assert_false (m->has_user);
        assert_true (m->has_addr);
        assert_string_equal (m->addr, "127.0.0.1");
    }
    assert_memory_not_equal (p1.data, p2.data, 5);
    assert_int_equal (zl_router_connections (t->router), 2);
    // the id stays with its connection
    assert_int_equal (zmq_send (d1, "again-1", 7, 0), 7);
    seen_msg_t *m = s_expect_msg (t, "again-1");
    assert_memory_equal (m->peer.data, p1.data, 5);
    // replies reach the peer they were sent to
    assert_int_equal (zl_router_send (t->router, &p2, "to-2", 4), 0);
    assert_int_equal (zl_router_send (t->router, &p1, "to-1", 4), 0);
    assert_int_equal (zl_router_send (t->router, &p1, "", 0), 0);
    zl_router_flush (t->router);
    s_dealer_expect (t, d1, "to-1");
    s_dealer_expect (t, d1, "");
    s_dealer_expect (t, d2, "to-2");
    assert_int_equal (t->refused, 0);
    zmq_close (d1);
    zmq_close (d2);
    zmq_ctx_term (ctx);
    s_rt_destroy (&t);
}

//  One look at the connections a poll: a message that came after the
//  drain's look waits for the next poll (its descriptor is readable), so
//  a drain does not end with an epoll_wait that finds nothing.
static void
test_one_look_a_poll (void **state)
{
    (void)state;
    rt_t *t = s_rt_new (&(zl_router_opts_t){.name = "frontend"});
    s_rt_bind (t, "tcp://127.0.0.1:*");
    void *ctx = zmq_ctx_new ();
    void *d = s_dealer (ctx);
    s_connect (d, t->bound);
    assert_int_equal (zmq_send (d, "first", 5, 0), 5);
    s_expect_msg (t, "first");
    void *sock;
    int fd;
    zl_router_poll_item (t->router, &sock, &fd); // as before a poll
    assert_null (sock);
    zl_router_msg_t m;
    assert_int_equal (zl_router_recv (t->router, &m), 0); // its look: nothing yet
    assert_int_equal (zmq_send (d, "late", 4, 0), 4);
    struct pollfd p = {fd, POLLIN, 0};
    assert_int_equal (poll (&p, 1, WAIT_MS), 1);          // "late" is in
    assert_int_equal (zl_router_recv (t->router, &m), 0); // no second look
    assert_true (poll (&p, 1, 0) == 1);                   // still readable
    zl_router_poll_item (t->router, &sock, &fd);
    assert_int_equal (zl_router_recv (t->router, &m), 1);
    assert_int_equal (m.size, 4);
    assert_memory_equal (m.data, "late", 4);
    zmq_close (d);
    zmq_ctx_term (ctx);
    s_rt_destroy (&t);
}

static void
test_multiframe (void **state)
{
    (void)state;
    rt_t *t = s_rt_new (&(zl_router_opts_t){.name = "frontend"});
    s_rt_bind (t, "tcp://127.0.0.1:*");
    void *ctx = zmq_ctx_new ();
    void *d = s_dealer (ctx);
    s_connect (d, t->bound);
    assert_int_equal (zmq_send (d, "a", 1, ZMQ_SNDMORE), 1);
    assert_int_equal (zmq_send (d, "b", 1, ZMQ_SNDMORE), 1);
    assert_int_equal (zmq_send (d, "c", 1, 0), 1);
    assert_int_equal (zmq_send (d, "next", 4, 0), 4);
    // a long tail frame (a LONG header, more than one read) is skipped whole
    size_t big = 300000;
    char *blob = calloc (1, big);
    blob[big - 1] = 'z';
    assert_int_equal (zmq_send (d, "x", 1, ZMQ_SNDMORE), 1);
    assert_int_equal (zmq_send (d, blob, big, 0), (int)big);
    assert_int_equal (zmq_send (d, "after", 5, 0), 5);
    // and a long first frame comes whole
    assert_int_equal (zmq_send (d, blob, big, 0), (int)big);
    seen_msg_t *m = s_expect_msg (t, "a");
    assert_true (m->extra);
    m = s_expect_msg (t, "next");
    assert_false (m->extra);
    m = s_expect_msg (t, "x");
    assert_true (m->extra);
    m = s_expect_msg (t, "after");
    assert_false (m->extra);
    m = s_wait_msg (t, WAIT_MS);
    assert_non_null (m);
    assert_int_equal (m->size, big);
    assert_int_equal (m->last, 'z');
    assert_false (m->extra);
    assert_null (s_wait_msg (t, 0)); // nothing else: "b", "c" and the tail were dropped
    free (blob);
    zmq_close (d);
    zmq_ctx_term (ctx);
    s_rt_destroy (&t);
}

static void
test_unreachable (void **state)
{
    (void)state;
    rt_t *t = s_rt_new (&(zl_router_opts_t){.name = "backend"});
    s_rt_bind (t, "tcp://127.0.0.1:*");
    void *ctx = zmq_ctx_new ();
    void *d1 = s_dealer (ctx), *d2 = s_dealer (ctx);
    s_connect (d1, t->bound);
    assert_int_equal (zmq_send (d1, "one", 3, 0), 3);
    zl_peer_t p1 = s_expect_msg (t, "one")->peer;
    s_connect (d2, t->bound);
    assert_int_equal (zmq_send (d2, "two", 3, 0), 3);
    zl_peer_t p2 = s_expect_msg (t, "two")->peer;
    assert_int_equal (zl_router_send (t->router, &p1, "before", 6), 0);
    s_dealer_expect (t, d1, "before");
    zmq_close (d1);
    assert_true (s_wait_conns (t, 1, WAIT_MS)); // the router saw the close
    errno = 0;
    assert_int_equal (zl_router_send (t->router, &p1, "late", 4), -1);
    assert_int_equal (errno, EHOSTUNREACH);
    assert_int_equal (zl_router_send (t->router, &p2, "ok", 2), 0);
    s_dealer_expect (t, d2, "ok");
    // ids nobody has: another number, a wrong length, a wrong first byte, 0
    zl_peer_t made_up[4] = {p2, p2, p2, {.len = 5}};
    made_up[0].data[1] ^= 0x80;
    made_up[1].len = 4;
    made_up[2].data[0] = 1;
    for (int i = 0; i < 4; i++) {
        errno = 0;
        assert_int_equal (zl_router_send (t->router, &made_up[i], "x", 1), -1);
        assert_int_equal (errno, EHOSTUNREACH);
    }
    assert_int_equal (t->refused, 0); // a close after the handshake is no refusal
    zmq_close (d2);
    zmq_ctx_term (ctx);
    s_rt_destroy (&t);
}

static void
test_max_out (void **state)
{
    (void)state;
    rt_t *t = s_rt_new (&(zl_router_opts_t){.name = "backend", .max_out = 1 << 20});
    s_rt_bind (t, "tcp://127.0.0.1:*");
    void *ctx = zmq_ctx_new ();
    void *slow = s_dealer (ctx), *fast = s_dealer (ctx);
    int one = 1, small = 16384;
    zmq_setsockopt (slow, ZMQ_RCVHWM, &one, sizeof one);
    zmq_setsockopt (slow, ZMQ_RCVBUF, &small, sizeof small);
    s_connect (slow, t->bound);
    assert_int_equal (zmq_send (slow, "slow", 4, 0), 4);
    zl_peer_t ps = s_expect_msg (t, "slow")->peer;
    s_connect (fast, t->bound);
    assert_int_equal (zmq_send (fast, "fast", 4, 0), 4);
    zl_peer_t pf = s_expect_msg (t, "fast")->peer;

    // the slow one reads nothing: sends to it fail EAGAIN in the end
    size_t big = 256 * 1024;
    uint8_t *blob = malloc (big);
    int sent = 0, rc = 0, err = 0;
    while (sent < 200) { // 50 MiB: far more than the kernel and max_out hold
        memset (blob, (uint8_t)sent, big);
        rc = zl_router_send (t->router, &ps, blob, big);
        if (rc != 0) {
            err = errno;
            break;
        }
        sent++;
        s_step (t, NULL, 0, 0); // flush: the kernel takes what it takes
    }
    assert_int_equal (rc, -1);
    assert_int_equal (err, EAGAIN);
    assert_true (sent >= 4); // 1 MiB waits in the router, on top of the kernel's
    // the other one is served meanwhile
    assert_int_equal (zmq_send (fast, "ping", 4, 0), 4);
    seen_msg_t *m = s_expect_msg (t, "ping");
    assert_memory_equal (m->peer.data, pf.data, 5);
    assert_int_equal (zl_router_send (t->router, &pf, "pong", 4), 0);
    s_dealer_expect (t, fast, "pong");
    errno = 0;
    assert_int_equal (zl_router_send (t->router, &ps, "x", 1), -1);
    assert_int_equal (errno, EAGAIN);
    assert_int_equal (zl_router_connections (t->router), 2);

    // once it reads, it gets every frame that was taken, in order, and
    // sends to it succeed again
    int got = 0;
    bool resumed = false;
    int64_t deadline = zl_clock_mono_ms () + WAIT_MS;
    while (!resumed || got < sent + 1) {
        assert_true (zl_clock_mono_ms () < deadline);
        if (!resumed)
            resumed = zl_router_send (t->router, &ps, "resume", 6) == 0;
        int n = s_dealer_recv (t, slow, blob, big, NULL, WAIT_MS);
        assert_true (n >= 0);
        if (got < sent) {
            assert_int_equal (n, (int)big);
            assert_int_equal (blob[0], (uint8_t)got);
            assert_int_equal (blob[big - 1], (uint8_t)got);
        } else {
            assert_int_equal (n, 6);
            assert_memory_equal (blob, "resume", 6);
        }
        got++;
    }
    free (blob);
    zmq_close (slow);
    zmq_close (fast);
    zmq_ctx_term (ctx);
    s_rt_destroy (&t);
}

static void
test_max_frame (void **state)
{
    (void)state;
    rt_t *t = s_rt_new (&(zl_router_opts_t){.name = "frontend", .max_frame = 1000});
    s_rt_bind (t, "tcp://127.0.0.1:*");
    void *ctx = zmq_ctx_new ();
    void *bad = s_dealer (ctx), *ok = s_dealer (ctx);
    int never = -1;
    zmq_setsockopt (bad, ZMQ_RECONNECT_IVL, &never, sizeof never);
    void *mon = s_monitor (ctx, bad, "max-frame");
    s_connect (bad, t->bound);
    assert_int_equal (zmq_send (bad, "hi", 2, 0), 2);
    zl_peer_t pb = s_expect_msg (t, "hi")->peer;
    s_connect (ok, t->bound);
    char frame[1001];
    memset (frame, 'f', sizeof frame);
    assert_int_equal (zmq_send (ok, frame, 1000, 0), 1000); // at the limit: fine
    seen_msg_t *m = s_wait_msg (t, WAIT_MS);
    assert_non_null (m);
    assert_int_equal (m->size, 1000);
    zl_peer_t po = m->peer;
    assert_int_equal (zl_router_connections (t->router), 2);

    assert_int_equal (zmq_send (bad, frame, 1001, 0), 1001); // over it: the connection ends
    assert_true (s_wait_conns (t, 1, WAIT_MS));
    assert_int_equal (s_monitor_wait (t, mon, ZMQ_EVENT_DISCONNECTED, WAIT_MS),
                      ZMQ_EVENT_DISCONNECTED);
    assert_int_equal (t->n_msgs, 2); // the long frame was not delivered
    errno = 0;
    assert_int_equal (zl_router_send (t->router, &pb, "x", 1), -1);
    assert_int_equal (errno, EHOSTUNREACH);
    // the other peer goes on
    assert_int_equal (zmq_send (ok, "still", 5, 0), 5);
    m = s_expect_msg (t, "still");
    assert_memory_equal (m->peer.data, po.data, 5);
    assert_int_equal (zl_router_send (t->router, &po, "yes", 3), 0);
    s_dealer_expect (t, ok, "yes");
    assert_int_equal (t->refused, 0); // dropped after its handshake: not a refusal
    s_monitor_close (bad, mon);
    zmq_close (bad);
    zmq_close (ok);
    zmq_ctx_term (ctx);
    s_rt_destroy (&t);
}

static void
test_heartbeat_ttl (void **state)
{
    (void)state;
    rt_t *t = s_rt_new (&(zl_router_opts_t){.name = "backend"});
    s_rt_bind (t, "tcp://127.0.0.1:*");
    void *ctx = zmq_ctx_new ();

    // a libzmq DEALER that PINGs (TTL 300 ms) and wants PONGs: it stays
    void *d = s_dealer (ctx);
    int ivl = 100, ttl = 300;
    zmq_setsockopt (d, ZMQ_HEARTBEAT_IVL, &ivl, sizeof ivl);
    zmq_setsockopt (d, ZMQ_HEARTBEAT_TTL, &ttl, sizeof ttl);
    zmq_setsockopt (d, ZMQ_HEARTBEAT_TIMEOUT, &ttl, sizeof ttl);
    void *mon = s_monitor (ctx, d, "ttl");
    s_connect (d, t->bound);
    assert_int_equal (zmq_send (d, "hi", 2, 0), 2);
    zl_peer_t p = s_expect_msg (t, "hi")->peer;
    s_run_for (t, 5 * ttl);
    assert_int_equal (zl_router_connections (t->router), 1);
    assert_int_equal (s_monitor_wait (t, mon, ZMQ_EVENT_DISCONNECTED, 0), 0);
    assert_int_equal (zmq_send (d, "still", 5, 0), 5);
    seen_msg_t *m = s_expect_msg (t, "still");
    assert_memory_equal (m->peer.data, p.data, 5); // the same connection all along
    s_monitor_close (d, mon);
    zmq_close (d);
    assert_true (s_wait_conns (t, 0, WAIT_MS));

    // raw clients: one PINGs with a TTL and falls silent, one never PINGs
    zc_t pinger, quiet;
    s_zc_dial (&pinger, s_port (t));
    s_zc_dial (&quiet, s_port (t));
    s_zc_handshake (t, &pinger);
    s_zc_handshake (t, &quiet);
    assert_int_equal (zl_zmtp_send (pinger.z, "p", 1, false), 0);
    assert_int_equal (zl_zmtp_send (quiet.z, "q", 1, false), 0);
    s_zc_io (&pinger);
    s_zc_io (&quiet);
    seen_msg_t *mp = s_wait_msg (t, WAIT_MS), *mq = s_wait_msg (t, WAIT_MS);
    assert_non_null (mp);
    assert_non_null (mq);
    if (mp->data[0] == 'q') {
        seen_msg_t *swap = mp;
        mp = mq;
        mq = swap;
    }
    zl_peer_t pq = mq->peer;
    assert_int_equal (zl_router_connections (t->router), 2);
    zl_zmtp_ping (pinger.z, 300);
    s_zc_io (&pinger);
    int64_t pinged_ms = zl_clock_mono_ms ();
    assert_true (s_wait_conns (t, 1, WAIT_MS));
    int64_t dropped_ms = zl_clock_mono_ms ();
    assert_true (dropped_ms - pinged_ms >= 300);        // not before its TTL
    assert_true (dropped_ms - pinged_ms <= 300 + 1000); // and about when it ran out
    // the pinger was answered (a PONG, no data), then closed
    uint8_t buf[256];
    assert_true (s_raw_until_closed (t, pinger.fd, buf, sizeof buf, WAIT_MS) > 0);
    // the quiet one set no TTL: still there, and reachable
    assert_int_equal (zl_router_send (t->router, &pq, "here", 4), 0);
    zl_router_flush (t->router);
    int64_t deadline = zl_clock_mono_ms () + WAIT_MS;
    while (quiet.frames == 0 && !quiet.closed && zl_clock_mono_ms () < deadline) {
        zmq_pollitem_t it = {NULL, quiet.fd, ZMQ_POLLIN, 0};
        s_step (t, &it, 1, WAIT_MS);
        s_zc_io (&quiet);
    }
    assert_int_equal (quiet.frames, 1);
    assert_false (quiet.closed);
    s_zc_close (&pinger);
    s_zc_close (&quiet);
    zmq_ctx_term (ctx);
    s_rt_destroy (&t);
}

static void
test_garbage (void **state)
{
    (void)state;
    rt_t *t = s_rt_new (&(zl_router_opts_t){.name = "frontend"});
    s_rt_bind (t, "tcp://127.0.0.1:*");
    // not ZMTP: refused, counted, closed
    int fd = s_raw_dial (s_port (t));
    const char get[] = "GET / HTTP/1.1\r\n\r\n";
    assert_int_equal (send (fd, get, sizeof get - 1, 0), (ssize_t)(sizeof get - 1));
    assert_true (s_wait_refused (t, 1, WAIT_MS));
    uint8_t buf[256];
    ssize_t n = s_raw_until_closed (t, fd, buf, sizeof buf, WAIT_MS);
    assert_true (n >= 0 && n <= 64); // the router's greeting at most
    if (n > 0)
        assert_int_equal (buf[0], 0xff);
    close (fd);
    assert_true (s_wait_conns (t, 0, WAIT_MS));
    assert_int_equal (t->refused, 1);

    // a handshake left half done, then closed: a refusal too
    t->refused = 0;
    fd = s_raw_dial (s_port (t));
    const uint8_t signature[10] = {0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f};
    assert_int_equal (send (fd, signature, sizeof signature, 0), (ssize_t)sizeof signature);
    assert_true (s_wait_conns (t, 1, WAIT_MS));
    s_run_for (t, 50);
    assert_int_equal (t->refused, 0); // not yet: it may go on
    close (fd);
    assert_true (s_wait_refused (t, 1, WAIT_MS));
    assert_true (s_wait_conns (t, 0, WAIT_MS));

    // and a real client is still served
    t->refused = 0;
    void *ctx = zmq_ctx_new ();
    void *d = s_dealer (ctx);
    s_connect (d, t->bound);
    assert_int_equal (zmq_send (d, "real", 4, 0), 4);
    zl_peer_t p = s_expect_msg (t, "real")->peer;
    assert_int_equal (zl_router_send (t->router, &p, "served", 6), 0);
    s_dealer_expect (t, d, "served");
    assert_int_equal (t->refused, 0);
    zmq_close (d);
    zmq_ctx_term (ctx);
    s_rt_destroy (&t);
}

// ---------------------------------------------------------------- CURVE
typedef struct {
    uint8_t allowed[32];
    int calls;
} auth_t;

static bool
s_auth (void *arg, const uint8_t key[32])
{
    auth_t *a = arg;
    a->calls++;
    return memcmp (key, a->allowed, 32) == 0;
}

typedef struct {
    char public_txt[41], secret_txt[41];
    uint8_t public_key[32], secret_key[32];
} keys_t;

static void
s_keys (keys_t *k)
{
    assert_int_equal (zmq_curve_keypair (k->public_txt, k->secret_txt), 0);
    assert_int_equal (zl_zmtp_z85_key (k->public_txt, k->public_key), 0);
    assert_int_equal (zl_zmtp_z85_key (k->secret_txt, k->secret_key), 0);
}

static void *
s_curve_dealer (void *ctx, const keys_t *server, const keys_t *mine)
{
    void *d = s_dealer (ctx);
    zmq_setsockopt (d, ZMQ_CURVE_SERVERKEY, server->public_txt, 40);
    zmq_setsockopt (d, ZMQ_CURVE_PUBLICKEY, mine->public_txt, 40);
    zmq_setsockopt (d, ZMQ_CURVE_SECRETKEY, mine->secret_txt, 40);
    return d;
}

static void
test_curve (void **state)
{
    (void)state;
    keys_t sk, allowed, denied, other_server;
    s_keys (&sk);
    s_keys (&allowed);
    s_keys (&denied);
    s_keys (&other_server);
    auth_t auth = {.calls = 0};
    memcpy (auth.allowed, allowed.public_key, 32);
    rt_t *t = s_rt_new (&(zl_router_opts_t){.name = "frontend"});
    zl_router_set_curve (t->router, sk.public_key, sk.secret_key, s_auth, &auth);
    s_rt_bind (t, "tcp://127.0.0.1:*");
    void *ctx = zmq_ctx_new ();

    // a key let in: its messages carry the key, replies go back boxed
    void *d = s_curve_dealer (ctx, &sk, &allowed);
    s_connect (d, t->bound);
    assert_int_equal (zmq_send (d, "hi", 2, 0), 2);
    seen_msg_t *m = s_expect_msg (t, "hi");
    assert_true (m->has_user);
    assert_string_equal (m->user_id, allowed.public_txt);
    assert_string_equal (m->addr, "127.0.0.1");
    zl_peer_t p = m->peer;
    assert_int_equal (auth.calls, 1);
    assert_int_equal (zl_router_send (t->router, &p, "welcome", 7), 0);
    s_dealer_expect (t, d, "welcome");
    assert_int_equal (t->refused, 0);

    // a key refused: libzmq sees an authentication failure; counted
    void *bad = s_curve_dealer (ctx, &sk, &denied);
    void *mon = s_monitor (ctx, bad, "denied");
    s_connect (bad, t->bound);
    assert_int_equal (s_monitor_wait (t, mon, ZMQ_EVENT_HANDSHAKE_FAILED_AUTH, WAIT_MS),
                      ZMQ_EVENT_HANDSHAKE_FAILED_AUTH);
    assert_true (s_wait_refused (t, 1, WAIT_MS));
    assert_true (auth.calls >= 2);
    s_monitor_close (bad, mon);
    zmq_close (bad);

    // another server's key (the HELLO does not open), and no CURVE at all
    t->refused = 0;
    void *wrong = s_curve_dealer (ctx, &other_server, &allowed);
    s_connect (wrong, t->bound);
    assert_true (s_wait_refused (t, 1, WAIT_MS));
    zmq_close (wrong);
    t->refused = 0;
    void *plain = s_dealer (ctx);
    s_connect (plain, t->bound);
    assert_int_equal (zmq_send (plain, "in clear", 8, 0), 8);
    assert_true (s_wait_refused (t, 1, WAIT_MS));
    zmq_close (plain);
    assert_true (s_wait_conns (t, 1, WAIT_MS)); // the one let in
    assert_int_equal (t->n_msgs, 1);            // nothing from the others

    // the one let in goes on
    assert_int_equal (zmq_send (d, "again", 5, 0), 5);
    m = s_expect_msg (t, "again");
    assert_memory_equal (m->peer.data, p.data, 5);
    assert_string_equal (m->user_id, allowed.public_txt);
    zmq_close (d);
    zmq_ctx_term (ctx);
    s_rt_destroy (&t);
}

// ---------------------------------------------------------------- ipc, inproc
static void
test_ipc (void **state)
{
    (void)state;
    char dir[] = "/tmp/zl-test-router-XXXXXX";
    assert_non_null (mkdtemp (dir));
    char ep[300], path[256];
    snprintf (path, sizeof path, "%s/r.sock", dir);
    snprintf (ep, sizeof ep, "ipc://%s", path);
    rt_t *t = s_rt_new (&(zl_router_opts_t){.name = "admin"});
    s_rt_bind (t, ep);
    assert_string_equal (t->bound, ep);
    struct stat st;
    assert_int_equal (stat (path, &st), 0);
    assert_true (S_ISSOCK (st.st_mode));
    void *ctx = zmq_ctx_new ();
    void *d = s_dealer (ctx);
    s_connect (d, t->bound);
    assert_int_equal (zmq_send (d, "over ipc", 8, 0), 8);
    seen_msg_t *m = s_expect_msg (t, "over ipc");
    assert_int_equal (m->peer.len, 5);
    assert_false (m->has_addr); // no IP address on ipc
    assert_int_equal (zl_router_send (t->router, &m->peer, "back", 4), 0);
    s_dealer_expect (t, d, "back");
    s_rt_destroy (&t);
    errno = 0;
    assert_int_equal (stat (path, &st), -1); // the socket file went with the router
    assert_int_equal (errno, ENOENT);

    // ipc://*: a fresh name of its own, removed too
    t = s_rt_new (&(zl_router_opts_t){.name = "admin"});
    s_rt_bind (t, "ipc://*");
    assert_int_equal (strncmp (t->bound, "ipc://", 6), 0);
    char made[256];
    snprintf (made, sizeof made, "%s", t->bound + 6);
    assert_int_equal (stat (made, &st), 0);
    assert_true (S_ISSOCK (st.st_mode));
    s_rt_destroy (&t);
    assert_int_equal (stat (made, &st), -1);
    zmq_close (d);
    zmq_ctx_term (ctx);
    assert_int_equal (rmdir (dir), 0);
}

//  What test_inproc holds in czmq's context, released by its teardown even
//  when an assertion failed (a socket left open would hang czmq's exit).
typedef struct {
    rt_t *t;
    zsock_t *d;
} inproc_t;

static int
s_inproc_teardown (void **state)
{
    inproc_t *s = *state;
    if (s) {
        zsock_destroy (&s->d);
        if (s->t)
            s_rt_destroy (&s->t);
        free (s);
    }
    return 0;
}

static void
test_inproc (void **state)
{
    zsys_init (); // the router's libzmq socket lives in czmq's context
    inproc_t *held = calloc (1, sizeof *held);
    *state = held;
    rt_t *t = held->t = s_rt_new (&(zl_router_opts_t){.name = "frontend"});
    char ep[64];
    snprintf (ep, sizeof ep, "inproc://test-router-%d", (int)getpid ());
    s_rt_bind (t, ep);
    assert_string_equal (t->bound, ep);
    void *sock;
    int fd;
    zl_router_poll_item (t->router, &sock, &fd);
    assert_non_null (sock); // a libzmq socket to poll, not a descriptor
    zsock_t *d = held->d = zsock_new (ZMQ_DEALER);
    assert_non_null (d);
    zsock_set_linger (d, 0);
    assert_int_equal (zsock_connect (d, "%s", ep), 0);
    void *dz = zsock_resolve (d);
    assert_int_equal (zmq_send (dz, "ping", 4, 0), 4);
    seen_msg_t *m = s_expect_msg (t, "ping");
    zl_peer_t p = m->peer;
    assert_true (p.len > 0);
    assert_false (m->extra);
    assert_false (m->has_user);
    assert_false (m->has_addr);
    assert_int_equal (zl_router_send (t->router, &p, "pong", 4), 0);
    zl_router_flush (t->router);
    s_dealer_expect (t, dz, "pong");
    // a multi-frame message: its first frame, then the next message whole
    assert_int_equal (zmq_send (dz, "a", 1, ZMQ_SNDMORE), 1);
    assert_int_equal (zmq_send (dz, "b", 1, 0), 1);
    assert_int_equal (zmq_send (dz, "c", 1, 0), 1);
    m = s_expect_msg (t, "a");
    assert_true (m->extra);
    m = s_expect_msg (t, "c");
    assert_false (m->extra);
    assert_memory_equal (m->peer.data, p.data, p.len);
    zl_peer_t nobody = p;
    nobody.data[nobody.len - 1] ^= 0x5a;
    errno = 0;
    assert_int_equal (zl_router_send (t->router, &nobody, "x", 1), -1);
    assert_int_equal (errno, EHOSTUNREACH);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test (test_two_dealers),
        cmocka_unit_test (test_one_look_a_poll),
        cmocka_unit_test (test_multiframe),
        cmocka_unit_test (test_unreachable),
        cmocka_unit_test (test_max_out),
        cmocka_unit_test (test_max_frame),
        cmocka_unit_test (test_heartbeat_ttl),
        cmocka_unit_test (test_garbage),
        cmocka_unit_test (test_curve),
        cmocka_unit_test (test_ipc),
        cmocka_unit_test_teardown (test_inproc, s_inproc_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
