/*  test_link: common/link against real peers over loopback sockets: a
    libzmq ROUTER (what the broker spoke through before, and what it still
    speaks like) with NULL and CURVE, a ZAP handler that lets a key in or
    refuses it, a raw TCP server driven by zl_zmtp_t here that can stop
    answering, and nothing at all listening; the endpoints a link refuses
    and accepts; ipc:// and tcp://[::1]. Every wait has a deadline and ends
    on an event, a frame or a condition, never on a sleep. */
#define _GNU_SOURCE
#include "link.h"

#include "clock.h"
#include "zmtp.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#define WAIT_MS 5000
#define MAX_EVENTS 64
#define MAX_FRAMES 128
#define KEEP 1024 // bytes of each frame kept

// ---------------------------------------------------------------- a raw peer
//  A TCP server that speaks ZMTP through a zl_zmtp_t in this thread (as
//  the broker's router does), and can be told to stop reading and
//  answering (`feed` false). A failed handshake is answered as the
//  router answers it: what the protocol queued is written, then the
//  connection is closed, and the next one is accepted.
typedef struct {
    int lfd, fd, port;
    zl_zmtp_opts_t opts;
    zl_zmtp_t *zmtp;
    bool feed;
    bool ready;
    int accepts;
    zl_zmtp_failure_t failure; // the last handshake's, if one failed
} raw_t;

static void
s_raw_listen (raw_t *r)
{
    memset (r, 0, sizeof *r);
    r->fd = -1;
    r->feed = true;
    r->opts = (zl_zmtp_opts_t){.server = true, .socket_type = "ROUTER"};
    r->lfd = socket (AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    assert_true (r->lfd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl (INADDR_LOOPBACK)};
    assert_int_equal (bind (r->lfd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal (listen (r->lfd, 4), 0);
    socklen_t len = sizeof a;
    assert_int_equal (getsockname (r->lfd, (struct sockaddr *)&a, &len), 0);
    r->port = ntohs (a.sin_port);
}

static void
s_raw_drop (raw_t *r)
{
    if (r->fd >= 0)
        close (r->fd);
    r->fd = -1;
    zl_zmtp_destroy (&r->zmtp);
}

static void
s_raw_close (raw_t *r)
{
    s_raw_drop (r);
    close (r->lfd);
}

static void
s_raw_write (raw_t *r)
{
    const uint8_t *out;
    size_t n;
    while ((n = zl_zmtp_out (r->zmtp, &out)) > 0) {
        ssize_t w = send (r->fd, out, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w <= 0)
            break;
        zl_zmtp_sent (r->zmtp, (size_t)w);
    }
}

//  Accept a connection when none is open; while `feed`, read, parse and answer.
static void
s_raw_pump (raw_t *r)
{
    if (r->fd < 0) {
        r->fd = accept4 (r->lfd, NULL, NULL, SOCK_NONBLOCK);
        if (r->fd < 0)
            return;
        r->accepts++;
        r->ready = false;
        r->zmtp = zl_zmtp_new (&r->opts);
    }
    if (!r->feed)
        return;
    bool closed = false;
    for (;;) {
        size_t room;
        uint8_t *space = zl_zmtp_in_space (r->zmtp, 0, &room);
        ssize_t n = recv (r->fd, space, room, MSG_DONTWAIT);
        if (n <= 0) {
            closed = n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
            break;
        }
        zl_zmtp_in_commit (r->zmtp, (size_t)n);
    }
    zl_zmtp_frame_t f;
    zl_zmtp_rc_t rc;
    while ((rc = zl_zmtp_next (r->zmtp, &f)) != ZL_ZMTP_AGAIN) {
        if (rc == ZL_ZMTP_ERROR) {
            r->failure = zl_zmtp_failure (r->zmtp);
            s_raw_write (r);
            s_raw_drop (r);
            return;
        }
        r->ready |= rc == ZL_ZMTP_READY;
    }
    s_raw_write (r);
    if (closed)
        s_raw_drop (r);
}

// ---------------------------------------------------------------- a link under test
typedef struct {
    zl_link_event_t ev;
    int64_t at_ms;
} seen_event_t;

typedef struct {
    uint8_t data[KEEP];
    size_t size;
    bool more;
    uint8_t last; // the frame's last byte
} seen_frame_t;

typedef struct {
    zl_link_t *link;
    seen_event_t events[MAX_EVENTS];
    size_t n_events, ev_seen; // ev_seen: events matched by s_wait_event so far
    seen_frame_t frames[MAX_FRAMES];
    size_t n_frames, fr_seen;
} lt_t;

static lt_t *
s_lt_new (const char *endpoint, const zl_link_opts_t *opts)
{
    lt_t *t = calloc (1, sizeof *t);
    char err[256] = "";
    t->link = zl_link_new (endpoint, opts, err, sizeof err);
    if (!t->link)
        fail_msg ("zl_link_new (%s): %s", endpoint, err);
    return t;
}

static void
s_lt_destroy (lt_t **t_p)
{
    zl_link_destroy (&(*t_p)->link);
    assert_null ((*t_p)->link);
    free (*t_p);
    *t_p = NULL;
}

static void
s_take_events (lt_t *t)
{
    zl_link_event_t ev;
    while (zl_link_event (t->link, &ev) == 1) {
        assert_true (t->n_events < MAX_EVENTS);
        t->events[t->n_events++] = (seen_event_t){ev, zl_clock_mono_ms ()};
    }
}

//  Take what the link has: its events and frames, then the events again (a
//  read for a frame may finish a handshake: CONNECTED comes then).
static void
s_drain (lt_t *t)
{
    s_take_events (t);
    const void *data;
    size_t size;
    bool more;
    while (zl_link_recv (t->link, &data, &size, &more) == 1) {
        assert_true (t->n_frames < MAX_FRAMES);
        seen_frame_t *f = &t->frames[t->n_frames++];
        f->size = size;
        f->more = more;
        memcpy (f->data, data, size < KEEP ? size : KEEP);
        f->last = size ? ((const uint8_t *)data)[size - 1] : 0;
    }
    s_take_events (t);
}

//  One turn of an owner's loop: wait (at most `max_ms`) for the link's
//  socket, its timer, a raw peer's sockets or a libzmq socket, then pump.
static void
s_step (lt_t *t, raw_t *raw, void *zsock, int max_ms)
{
    zmq_pollitem_t items[3];
    int n = 0;
    int64_t now = zl_clock_mono_ms ();
    long wait = max_ms;
    int64_t due = zl_link_timeout (t->link, now);
    if (due >= 0 && due < wait)
        wait = (long)due;
    if (zl_link_fd (t->link) >= 0) {
        short ev = zl_link_poll_events (t->link);
        items[n++] = (zmq_pollitem_t){
            NULL, zl_link_fd (t->link),
            (short)((ev & POLLIN ? ZMQ_POLLIN : 0) | (ev & POLLOUT ? ZMQ_POLLOUT : 0)), 0};
    }
    if (raw && raw->fd < 0)
        items[n++] = (zmq_pollitem_t){NULL, raw->lfd, ZMQ_POLLIN, 0};
    else if (raw && raw->feed)
        items[n++] = (zmq_pollitem_t){NULL, raw->fd, ZMQ_POLLIN, 0};
    if (zsock)
        items[n++] = (zmq_pollitem_t){zsock, 0, ZMQ_POLLIN, 0};
    zmq_poll (items, n, wait); // with no item: the link's own timer
    zl_link_pump (t->link, zl_clock_mono_ms ());
    s_drain (t);
    if (raw)
        s_raw_pump (raw);
}

//  The next event not yet matched, waiting up to `ms`, if it is of `kind`.
//  NULL when none came in time or it is of another kind (said on stdout).
static zl_link_event_t *
s_wait_event (lt_t *t, raw_t *raw, zl_link_event_kind_t kind, int ms, int64_t *at_ms)
{
    int64_t deadline = zl_clock_mono_ms () + ms;
    while (t->ev_seen == t->n_events) {
        int64_t left = deadline - zl_clock_mono_ms ();
        if (left <= 0)
            return NULL;
        s_step (t, raw, NULL, (int)left);
    }
    seen_event_t *s = &t->events[t->ev_seen++];
    if (s->ev.kind != kind) {
        print_message ("expected event %d, got %d (%s)\n", kind, s->ev.kind, s->ev.detail);
        return NULL;
    }
    if (at_ms)
        *at_ms = s->at_ms;
    return &s->ev;
}

//  The next frame not yet looked at, waiting up to `ms`; NULL if none.
static seen_frame_t *
s_wait_frame (lt_t *t, int ms)
{
    int64_t deadline = zl_clock_mono_ms () + ms;
    while (t->fr_seen == t->n_frames) {
        int64_t left = deadline - zl_clock_mono_ms ();
        if (left <= 0)
            return NULL;
        s_step (t, NULL, NULL, (int)left);
    }
    return &t->frames[t->fr_seen++];
}

//  Pump for `ms` whatever comes (for what must NOT happen in that time).
static void
s_pump_for (lt_t *t, raw_t *raw, int ms)
{
    int64_t until = zl_clock_mono_ms () + ms;
    for (int64_t left = ms; left > 0; left = until - zl_clock_mono_ms ())
        s_step (t, raw, NULL, (int)left);
}

// ---------------------------------------------------------------- libzmq ROUTER peers
static void *
s_router (void *ctx, const char *endpoint, const char *curve_secret, char *bound, size_t cap)
{
    void *r = zmq_socket (ctx, ZMQ_ROUTER);
    assert_non_null (r);
    int zero = 0, one = 1;
    zmq_setsockopt (r, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt (r, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    if (curve_secret) {
        zmq_setsockopt (r, ZMQ_CURVE_SERVER, &one, sizeof one);
        zmq_setsockopt (r, ZMQ_CURVE_SECRETKEY, curve_secret, 40);
    }
    assert_int_equal (zmq_bind (r, endpoint), 0);
    size_t len = cap;
    assert_int_equal (zmq_getsockopt (r, ZMQ_LAST_ENDPOINT, bound, &len), 0);
    return r;
}

//  One message on `r` (routing id, then exactly one body frame), pumping
//  the link meanwhile. Returns the body's size; the id goes to `id`.
static int
s_router_msg (lt_t *t, void *r, uint8_t *id, size_t *id_len, void *body, size_t cap)
{
    int64_t deadline = zl_clock_mono_ms () + WAIT_MS;
    for (;;) {
        int n = zmq_recv (r, id, 255, ZMQ_DONTWAIT);
        if (n >= 0) {
            *id_len = (size_t)n;
            int more = 0;
            size_t ml = sizeof more;
            zmq_getsockopt (r, ZMQ_RCVMORE, &more, &ml);
            assert_true (more);
            int size = zmq_recv (r, body, cap, 0);
            assert_true (size >= 0);
            zmq_getsockopt (r, ZMQ_RCVMORE, &more, &ml);
            assert_false (more); // the link sends single-frame messages
            return size;
        }
        int64_t left = deadline - zl_clock_mono_ms ();
        if (left <= 0)
            fail_msg ("the ROUTER received nothing in %d ms", WAIT_MS);
        s_step (t, NULL, r, (int)left);
    }
}

static void
s_router_expect (lt_t *t, void *r, const char *text, uint8_t *id, size_t *id_len)
{
    char body[256];
    uint8_t my_id[256];
    size_t my_len;
    int n = s_router_msg (t, r, id ? id : my_id, id_len ? id_len : &my_len, body, sizeof body);
    assert_int_equal (n, strlen (text));
    assert_memory_equal (body, text, strlen (text));
}

// ---------------------------------------------------------------- frames read, not yet taken
//  A link to a raw peer (`raw`, listening), its handshake done on both sides.
static lt_t *
s_connected (raw_t *raw)
{
    s_raw_listen (raw);
    char ep[64];
    snprintf (ep, sizeof ep, "tcp://127.0.0.1:%d", raw->port);
    zl_link_opts_t opts = {.reconnect_ivl_ms = 50};
    lt_t *t = s_lt_new (ep, &opts);
    assert_non_null (s_wait_event (t, raw, ZL_LINK_CONNECTED, WAIT_MS, NULL));
    int64_t deadline = zl_clock_mono_ms () + WAIT_MS;
    while (!raw->ready && zl_clock_mono_ms () < deadline)
        s_step (t, raw, NULL, 50);
    assert_true (raw->ready);
    return t;
}

//  Frames that came in one read wait in the link: while a whole one is
//  there, zl_link_pending is true and zl_link_timeout 0, so an owner that
//  took only some of them (a batch limit) does not sleep on a socket with
//  nothing more to say (it did: the rest waited for the next timer).
static void
test_pending (void **state)
{
    (void)state;
    raw_t raw;
    lt_t *t = s_connected (&raw);
    assert_false (zl_link_pending (t->link));
    assert_int_not_equal (zl_link_timeout (t->link, zl_clock_mono_ms ()), 0);
    // 20 frames in one write: one read takes them all
    for (int i = 0; i < 20; i++) {
        uint8_t body[3] = {'f', (uint8_t)i, 0};
        assert_int_equal (zl_zmtp_send (raw.zmtp, body, sizeof body, false), 0);
    }
    s_raw_write (&raw);
    struct pollfd p = {zl_link_fd (t->link), POLLIN, 0};
    assert_int_equal (poll (&p, 1, WAIT_MS), 1);
    const void *data;
    size_t size;
    bool more;
    for (int i = 0; i < 20; i++) {
        assert_int_equal (zl_link_recv (t->link, &data, &size, &more), 1);
        assert_int_equal (size, 3);
        assert_int_equal (((const uint8_t *)data)[1], i);
        // the owner stops here: what is left is whole, and the socket is empty
        bool left = i < 19;
        assert_int_equal (zl_link_pending (t->link), left);
        assert_int_equal (zl_link_timeout (t->link, zl_clock_mono_ms ()) == 0, left);
        struct pollfd q = {zl_link_fd (t->link), POLLIN, 0};
        assert_int_equal (poll (&q, 1, 0), 0);
    }
    assert_int_equal (zl_link_recv (t->link, &data, &size, &more), 0);
    // half a frame is not pending: the rest must come first
    assert_int_equal (zl_zmtp_send (raw.zmtp, "abcdef", 6, false), 0);
    const uint8_t *out;
    size_t n = zl_zmtp_out (raw.zmtp, &out);
    assert_int_equal (send (raw.fd, out, n - 3, 0), (ssize_t)(n - 3));
    assert_int_equal (poll (&p, 1, WAIT_MS), 1);
    assert_int_equal (zl_link_recv (t->link, &data, &size, &more), 0);
    assert_false (zl_link_pending (t->link));
    assert_int_equal (send (raw.fd, out + n - 3, 3, 0), 3);
    zl_zmtp_sent (raw.zmtp, n);
    assert_int_equal (poll (&p, 1, WAIT_MS), 1);
    assert_int_equal (zl_link_recv (t->link, &data, &size, &more), 1);
    assert_memory_equal (data, "abcdef", 6);
    s_lt_destroy (&t);
    s_raw_close (&raw);
}

//  The raw peer sends `text` as one frame; returns once it is in the
//  kernel's buffer on the link's side (its socket polls readable).
static void
s_raw_arrives (raw_t *raw, lt_t *t, const char *text)
{
    assert_int_equal (zl_zmtp_send (raw->zmtp, text, strlen (text), false), 0);
    s_raw_write (raw);
    struct pollfd p = {zl_link_fd (t->link), POLLIN, 0};
    assert_int_equal (poll (&p, 1, WAIT_MS), 1);
}

//  A read that took less than it had room for emptied the kernel's buffer:
//  the next zl_link_recv returns 0 without a read (a system call that would
//  find nothing, after each message a worker or producer takes), once; what
//  came meanwhile is read after the owner's poll, which says it is there.
static void
test_drained_read (void **state)
{
    (void)state;
    raw_t raw;
    lt_t *t = s_connected (&raw);
    const void *data;
    size_t size;
    bool more;
    struct pollfd p = {zl_link_fd (t->link), POLLIN, 0};
    s_raw_arrives (&raw, t, "first");
    assert_int_equal (zl_link_recv (t->link, &data, &size, &more), 1); // one short read
    assert_memory_equal (data, "first", 5);
    // the next frame is in the kernel's buffer before the owner asks again
    s_raw_arrives (&raw, t, "second");
    assert_int_equal (zl_link_recv (t->link, &data, &size, &more), 0); // not read
    assert_false (zl_link_pending (t->link));
    assert_int_equal (poll (&p, 1, 0), 1); // so the owner's poll does not sleep on it
    assert_int_equal (zl_link_recv (t->link, &data, &size, &more), 1);
    assert_memory_equal (data, "second", 6);
    s_lt_destroy (&t);
    s_raw_close (&raw);
}

//  An owner that reports its polls (zl_link_polled, as the producer
//  library does) has no read made that would find nothing: after a poll
//  that saw no input, or a read that emptied the kernel's buffer, the link
//  reads nothing, however often it is pumped or asked, until the owner's
//  next poll says something came (a producer made two reads that said
//  EAGAIN after each job it sent). A hang-up counts as something.
static void
test_polled_read (void **state)
{
    (void)state;
    raw_t raw;
    lt_t *t = s_connected (&raw);
    const void *data;
    size_t size;
    bool more;
    struct pollfd p = {zl_link_fd (t->link), POLLIN, 0};
    zl_link_polled (t->link, 0);      // the owner's poll saw nothing
    s_raw_arrives (&raw, t, "first"); // there now, but not said
    for (int i = 0; i < 3; i++) {
        zl_link_pump (t->link, zl_clock_mono_ms ());
        assert_int_equal (zl_link_recv (t->link, &data, &size, &more), 0);
    }
    zl_link_polled (t->link, POLLIN);
    assert_int_equal (zl_link_recv (t->link, &data, &size, &more), 1);
    assert_memory_equal (data, "first", 5);
    // that read emptied the buffer: what comes next waits for the next poll
    s_raw_arrives (&raw, t, "second");
    for (int i = 0; i < 3; i++) {
        zl_link_pump (t->link, zl_clock_mono_ms ());
        assert_int_equal (zl_link_recv (t->link, &data, &size, &more), 0);
    }
    zl_link_polled (t->link, POLLIN);
    zl_link_pump (t->link, zl_clock_mono_ms ());
    assert_int_equal (zl_link_recv (t->link, &data, &size, &more), 1);
    assert_memory_equal (data, "second", 6);
    // a poll that said input, and a read that found none (EAGAIN): the
    // same as a poll that saw nothing
    zl_link_polled (t->link, POLLIN);
    assert_int_equal (zl_link_recv (t->link, &data, &size, &more), 0);
    s_raw_arrives (&raw, t, "third");
    assert_int_equal (zl_link_recv (t->link, &data, &size, &more), 0);
    zl_link_polled (t->link, POLLIN);
    assert_int_equal (zl_link_recv (t->link, &data, &size, &more), 1);
    assert_memory_equal (data, "third", 5);
    // the peer hangs up: a poll that says so has the link read, and see it
    s_raw_close (&raw);
    assert_int_equal (poll (&p, 1, WAIT_MS), 1);
    zl_link_polled (t->link, 0);
    assert_int_equal (zl_link_recv (t->link, &data, &size, &more), 0);
    assert_true (zl_link_connected (t->link));
    zl_link_polled (t->link, POLLIN | POLLHUP);
    assert_int_equal (zl_link_recv (t->link, &data, &size, &more), 0);
    assert_false (zl_link_connected (t->link));
    s_drain (t);
    assert_non_null (s_wait_event (t, NULL, ZL_LINK_DISCONNECTED, 0, NULL));
    s_lt_destroy (&t);
}

//  A handshake that ends in zl_link_recv (the owner took frames before it
//  took events) leaves its CONNECTED event pending: zl_link_timeout says 0
//  until the owner takes it. A producer waited for its next heartbeat, a
//  second, before it sent its Hello (1 run in 10 of the throughput bench).
static void
test_event_pending (void **state)
{
    (void)state;
    raw_t raw;
    s_raw_listen (&raw);
    char ep[64];
    snprintf (ep, sizeof ep, "tcp://127.0.0.1:%d", raw.port);
    zl_link_opts_t opts = {.reconnect_ivl_ms = 50, .heartbeat_ivl_ms = 1000};
    lt_t *t = s_lt_new (ep, &opts);
    int64_t deadline = zl_clock_mono_ms () + WAIT_MS;
    // dial and write the first greeting, then take frames only
    while (zl_link_fd (t->link) < 0 || zl_link_poll_events (t->link) != POLLIN) {
        assert_true (zl_clock_mono_ms () < deadline);
        zl_link_pump (t->link, zl_clock_mono_ms ());
        s_raw_pump (&raw);
    }
    const void *data;
    size_t size;
    bool more;
    zl_link_event_t ev;
    while (!raw.ready || !zl_link_connected (t->link)) {
        assert_true (zl_clock_mono_ms () < deadline);
        s_raw_pump (&raw);
        struct pollfd p = {zl_link_fd (t->link), POLLIN, 0};
        poll (&p, 1, 10);
        assert_int_equal (zl_link_recv (t->link, &data, &size, &more), 0);
    }
    assert_true (zl_link_pending (t->link));
    assert_int_equal (zl_link_timeout (t->link, zl_clock_mono_ms ()), 0);
    assert_int_equal (zl_link_event (t->link, &ev), 1);
    assert_int_equal (ev.kind, ZL_LINK_CONNECTED);
    assert_false (zl_link_pending (t->link));
    assert_true (zl_link_timeout (t->link, zl_clock_mono_ms ()) > 0); // the next PING
    s_lt_destroy (&t);
    s_raw_close (&raw);
}

// ---------------------------------------------------------------- endpoints
static void
test_endpoints (void **state)
{
    (void)state;
    const char *bad[] = {
        "inproc://x", "tcp://nohostport", "tcp://h:0", "tcp://h:99999", "bogus://x",
        "tcp://:5",   "tcp://h:5x",       "ipc://",    "tcp://h:",      ""};
    zl_link_opts_t opts = {0};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[256] = "";
        assert_int_equal (zl_link_check_endpoint (bad[i], err, sizeof err), -1);
        assert_true (strlen (err) > 0);
        if (bad[i][0])
            assert_non_null (strstr (err, bad[i])); // the message names what was refused
        char err2[256] = "";
        assert_null (zl_link_new (bad[i], &opts, err2, sizeof err2));
        assert_string_equal (err, err2);
    }
    const char *good[] = {"tcp://[::1]:5", "ipc:///tmp/x", "tcp://127.0.0.1:65535",
                          "tcp://example.invalid:1"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        char err[256] = "";
        assert_int_equal (zl_link_check_endpoint (good[i], err, sizeof err), 0);
        zl_link_t *l = zl_link_new (good[i], &opts, err, sizeof err);
        assert_non_null (l);
        assert_string_equal (zl_link_endpoint (l), good[i]);
        assert_false (zl_link_connected (l));
        assert_int_equal (zl_link_fd (l), -1); // nothing dialled before the first pump
        zl_link_destroy (&l);
        assert_null (l);
    }
    zl_link_destroy (NULL);
    zl_link_t *none = NULL;
    zl_link_destroy (&none); // NULL-safe
    // CURVE keys that are not Z85 keys are refused at once
    zl_curve_t curve = {.server_public = "short", .public_key = "x", .secret_key = "y"};
    opts.curve = &curve;
    char err[256] = "";
    assert_null (zl_link_new ("tcp://127.0.0.1:5", &opts, err, sizeof err));
    assert_true (strlen (err) > 0);
}

// ---------------------------------------------------------------- NULL, with a libzmq ROUTER
static void
test_null_router (void **state)
{
    (void)state;
    void *ctx = zmq_ctx_new ();
    char ep[256];
    void *r = s_router (ctx, "tcp://127.0.0.1:*", NULL, ep, sizeof ep);
    zl_link_opts_t opts = {.reconnect_ivl_ms = 50};
    lt_t *t = s_lt_new (ep, &opts);
    // queued before the first dial: delivered, in order, once connected
    assert_int_equal (zl_link_send (t->link, "one", 3), 0);
    assert_int_equal (zl_link_send (t->link, "two", 3), 0);
    assert_int_equal (zl_link_send (t->link, "", 0), 0);
    assert_int_equal (zl_link_send (t->link, "three", 5), 0);
    assert_false (zl_link_connected (t->link));
    zl_link_event_t *ev = s_wait_event (t, NULL, ZL_LINK_CONNECTED, WAIT_MS, NULL);
    assert_non_null (ev);
    assert_true (zl_link_connected (t->link));
    uint8_t id[256], id2[256];
    size_t id_len, id2_len;
    s_router_expect (t, r, "one", id, &id_len);
    s_router_expect (t, r, "two", id2, &id2_len);
    assert_memory_equal (id, id2, id_len); // one connection
    s_router_expect (t, r, "", NULL, NULL);
    s_router_expect (t, r, "three", NULL, NULL);

    // ROUTER -> link: a frame, then a three-frame message (`more` on all but the last)
    assert_int_equal (zmq_send (r, id, id_len, ZMQ_SNDMORE), (int)id_len);
    assert_int_equal (zmq_send (r, "hello", 5, 0), 5);
    assert_int_equal (zmq_send (r, id, id_len, ZMQ_SNDMORE), (int)id_len);
    assert_int_equal (zmq_send (r, "a", 1, ZMQ_SNDMORE), 1);
    assert_int_equal (zmq_send (r, "bb", 2, ZMQ_SNDMORE), 2);
    assert_int_equal (zmq_send (r, "ccc", 3, 0), 3);
    seen_frame_t *f = s_wait_frame (t, WAIT_MS);
    assert_non_null (f);
    assert_int_equal (f->size, 5);
    assert_memory_equal (f->data, "hello", 5);
    assert_false (f->more);
    const char *parts[] = {"a", "bb", "ccc"};
    for (int i = 0; i < 3; i++) {
        f = s_wait_frame (t, WAIT_MS);
        assert_non_null (f);
        assert_int_equal (f->size, strlen (parts[i]));
        assert_memory_equal (f->data, parts[i], f->size);
        assert_int_equal (f->more, i < 2);
    }
    // large frames both ways (a LONG header; more than one write or read)
    size_t big = 300000;
    uint8_t *blob = malloc (big);
    for (size_t i = 0; i < big; i++)
        blob[i] = (uint8_t)(i * 13 + 1);
    assert_int_equal (zmq_send (r, id, id_len, ZMQ_SNDMORE), (int)id_len);
    assert_int_equal (zmq_send (r, blob, big, 0), (int)big);
    f = s_wait_frame (t, WAIT_MS);
    assert_non_null (f);
    assert_int_equal (f->size, big);
    assert_memory_equal (f->data, blob, KEEP);
    assert_int_equal (f->last, blob[big - 1]);
    assert_int_equal (zl_link_send (t->link, blob, big), 0);
    zl_link_flush (t->link);
    uint8_t *back = malloc (big);
    assert_int_equal (s_router_msg (t, r, id2, &id2_len, back, big), (int)big);
    assert_memory_equal (back, blob, big);
    assert_memory_equal (id2, id, id_len);
    free (back);
    free (blob);
    // the link -> ROUTER, after frames came the other way
    assert_int_equal (zl_link_send (t->link, "back", 4), 0);
    zl_link_flush (t->link);
    s_router_expect (t, r, "back", id2, &id2_len);
    assert_memory_equal (id2, id, id_len);
    assert_int_equal (t->n_events, 1); // CONNECTED only
    s_lt_destroy (&t);
    zmq_close (r);
    zmq_ctx_term (ctx);
}

static void
test_immediate_and_hwm (void **state)
{
    (void)state;
    void *ctx = zmq_ctx_new ();
    char ep[256];
    void *r = s_router (ctx, "tcp://127.0.0.1:*", NULL, ep, sizeof ep);
    // immediate: nothing waits for a connection
    zl_link_opts_t opts = {.immediate = true, .reconnect_ivl_ms = 50};
    lt_t *t = s_lt_new (ep, &opts);
    errno = 0;
    assert_int_equal (zl_link_send (t->link, "refused", 7), -1);
    assert_int_equal (errno, EAGAIN);
    assert_non_null (s_wait_event (t, NULL, ZL_LINK_CONNECTED, WAIT_MS, NULL));
    assert_int_equal (zl_link_send (t->link, "after", 5), 0);
    zl_link_flush (t->link);
    s_router_expect (t, r, "after", NULL, NULL); // first: the refused frame never went
    s_lt_destroy (&t);

    // hwm: 3 frames wait, the 4th is refused; the 3 arrive, the 4th never
    zl_link_opts_t o2 = {.hwm = 3, .reconnect_ivl_ms = 50};
    t = s_lt_new (ep, &o2);
    assert_int_equal (zl_link_send (t->link, "q1", 2), 0);
    assert_int_equal (zl_link_send (t->link, "q2", 2), 0);
    assert_int_equal (zl_link_send (t->link, "q3", 2), 0);
    errno = 0;
    assert_int_equal (zl_link_send (t->link, "q4", 2), -1);
    assert_int_equal (errno, EAGAIN);
    assert_non_null (s_wait_event (t, NULL, ZL_LINK_CONNECTED, WAIT_MS, NULL));
    // once connected the bound is the connection's, not hwm
    for (int i = 0; i < 10; i++)
        assert_int_equal (zl_link_send (t->link, "more", 4), 0);
    assert_int_equal (zl_link_send (t->link, "end", 3), 0);
    zl_link_flush (t->link);
    s_router_expect (t, r, "q1", NULL, NULL);
    s_router_expect (t, r, "q2", NULL, NULL);
    s_router_expect (t, r, "q3", NULL, NULL);
    for (int i = 0; i < 10; i++)
        s_router_expect (t, r, "more", NULL, NULL);
    s_router_expect (t, r, "end", NULL, NULL);
    s_lt_destroy (&t);
    zmq_close (r);
    zmq_ctx_term (ctx);
}

// ---------------------------------------------------------------- redial
static void
test_redial (void **state)
{
    (void)state;
    void *ctx = zmq_ctx_new ();
    char ep[256];
    void *r = s_router (ctx, "tcp://127.0.0.1:*", NULL, ep, sizeof ep);
    zl_link_opts_t opts = {.reconnect_ivl_ms = 100, .reconnect_max_ms = 300};
    lt_t *t = s_lt_new (ep, &opts);
    assert_non_null (s_wait_event (t, NULL, ZL_LINK_CONNECTED, WAIT_MS, NULL));
    assert_int_equal (zl_link_send (t->link, "first", 5), 0);
    zl_link_flush (t->link);
    s_router_expect (t, r, "first", NULL, NULL);

    // the ROUTER goes away: DISCONNECTED, then failed dials while nothing listens
    zmq_close (r);
    int64_t down_ms;
    zl_link_event_t *ev = s_wait_event (t, NULL, ZL_LINK_DISCONNECTED, WAIT_MS, &down_ms);
    assert_non_null (ev);
    assert_true (strlen (ev->detail) > 0);
    assert_false (zl_link_connected (t->link));
    // dials 100 ms after the loss, then 200 ms apart, then 300 (the most)
    int64_t at[4];
    for (int i = 0; i < 4; i++) {
        ev = s_wait_event (t, NULL, ZL_LINK_DIAL_FAILED, WAIT_MS, &at[i]);
        assert_non_null (ev);
        assert_false (ev->handshake); // refused by the kernel: no connection was made
        assert_true (strlen (ev->detail) > 0);
    }
    assert_true (at[0] - down_ms >= 100 - 5);
    assert_true (at[0] - down_ms <= 100 + 90);
    int64_t want[3] = {200, 300, 300};
    for (int i = 0; i < 3; i++) {
        assert_true (at[i + 1] - at[i] >= want[i] - 5);
        assert_true (at[i + 1] - at[i] <= want[i] + 90);
    }
    // sent while down: waits for the next connection
    assert_int_equal (zl_link_send (t->link, "queued", 6), 0);

    // a new ROUTER on the same port: the link comes back by itself
    r = zmq_socket (ctx, ZMQ_ROUTER);
    int zero = 0;
    zmq_setsockopt (r, ZMQ_LINGER, &zero, sizeof zero);
    int64_t deadline = zl_clock_mono_ms () + WAIT_MS;
    while (zmq_bind (r, ep) != 0) { // the old listener closes in libzmq's I/O thread
        assert_int_equal (errno, EADDRINUSE);
        assert_true (zl_clock_mono_ms () < deadline);
        s_step (t, NULL, NULL, 10);
    }
    // failed dials may come before the new ROUTER is found, then CONNECTED
    deadline = zl_clock_mono_ms () + WAIT_MS;
    while (!zl_link_connected (t->link) && zl_clock_mono_ms () < deadline)
        s_step (t, NULL, NULL, (int)(deadline - zl_clock_mono_ms ()));
    assert_true (zl_link_connected (t->link));
    while (t->ev_seen < t->n_events && t->events[t->ev_seen].ev.kind == ZL_LINK_DIAL_FAILED)
        t->ev_seen++;
    assert_non_null (s_wait_event (t, NULL, ZL_LINK_CONNECTED, 0, NULL));
    assert_int_equal (zl_link_send (t->link, "again", 5), 0);
    zl_link_flush (t->link);
    s_router_expect (t, r, "queued", NULL, NULL);
    s_router_expect (t, r, "again", NULL, NULL);
    s_lt_destroy (&t);
    zmq_close (r);
    zmq_ctx_term (ctx);
}

//  A frame over max_frame from the broker ends the connection; a redial follows.
static void
test_max_frame (void **state)
{
    (void)state;
    void *ctx = zmq_ctx_new ();
    char ep[256];
    void *r = s_router (ctx, "tcp://127.0.0.1:*", NULL, ep, sizeof ep);
    zl_link_opts_t opts = {.reconnect_ivl_ms = 50, .max_frame = 1000};
    lt_t *t = s_lt_new (ep, &opts);
    assert_non_null (s_wait_event (t, NULL, ZL_LINK_CONNECTED, WAIT_MS, NULL));
    assert_int_equal (zl_link_send (t->link, "hi", 2), 0);
    zl_link_flush (t->link);
    uint8_t id[256];
    size_t id_len;
    s_router_expect (t, r, "hi", id, &id_len);
    char fits[1000] = {0}, over[1001] = {0};
    assert_int_equal (zmq_send (r, id, id_len, ZMQ_SNDMORE), (int)id_len);
    assert_int_equal (zmq_send (r, fits, sizeof fits, 0), (int)sizeof fits);
    seen_frame_t *f = s_wait_frame (t, WAIT_MS);
    assert_non_null (f);
    assert_int_equal (f->size, 1000);
    assert_int_equal (zmq_send (r, id, id_len, ZMQ_SNDMORE), (int)id_len);
    assert_int_equal (zmq_send (r, over, sizeof over, 0), (int)sizeof over);
    zl_link_event_t *ev = s_wait_event (t, NULL, ZL_LINK_DISCONNECTED, WAIT_MS, NULL);
    assert_non_null (ev);
    assert_non_null (strstr (ev->detail, "1001"));
    assert_non_null (s_wait_event (t, NULL, ZL_LINK_CONNECTED, WAIT_MS, NULL)); // redialled
    assert_int_equal (t->n_frames, 1); // the long frame was not delivered
    s_lt_destroy (&t);
    zmq_close (r);
    zmq_ctx_term (ctx);
}

// ---------------------------------------------------------------- heartbeats
static void
test_heartbeat_silent_peer (void **state)
{
    (void)state;
    raw_t raw;
    s_raw_listen (&raw);
    char ep[64];
    snprintf (ep, sizeof ep, "tcp://127.0.0.1:%d", raw.port);
    zl_link_opts_t opts = {.reconnect_ivl_ms = 50,
                           .heartbeat_ivl_ms = 100,
                           .heartbeat_timeout_ms = 400,
                           .heartbeat_ttl_ms = 1000};
    lt_t *t = s_lt_new (ep, &opts);
    int64_t up_ms;
    assert_non_null (s_wait_event (t, &raw, ZL_LINK_CONNECTED, WAIT_MS, &up_ms));
    int64_t deadline = zl_clock_mono_ms () + WAIT_MS;
    while (!raw.ready && zl_clock_mono_ms () < deadline)
        s_step (t, &raw, NULL, 50);
    assert_true (raw.ready);
    // from now on the peer reads nothing and answers nothing
    raw.feed = false;
    int64_t mute_ms = zl_clock_mono_ms ();
    int64_t down_ms;
    zl_link_event_t *ev = s_wait_event (t, &raw, ZL_LINK_DISCONNECTED, WAIT_MS, &down_ms);
    assert_non_null (ev);
    assert_true (down_ms - up_ms >= 400 - 20);    // not before the timeout (not at a PING)
    assert_true (down_ms - mute_ms <= 400 + 500); // and about when it ran out
    // what the link wrote meanwhile: PINGs that carry its TTL
    int64_t read_until = zl_clock_mono_ms () + WAIT_MS;
    for (;;) {
        struct pollfd p = {raw.fd, POLLIN, 0};
        int64_t left = read_until - zl_clock_mono_ms ();
        assert_true (left > 0);
        if (poll (&p, 1, (int)left) <= 0)
            continue;
        size_t room;
        uint8_t *space = zl_zmtp_in_space (raw.zmtp, 0, &room);
        ssize_t n = recv (raw.fd, space, room, 0);
        if (n <= 0)
            break; // the link closed its end
        zl_zmtp_in_commit (raw.zmtp, (size_t)n);
    }
    zl_zmtp_frame_t fr;
    assert_int_equal (zl_zmtp_next (raw.zmtp, &fr), ZL_ZMTP_AGAIN); // PINGs only, no data
    assert_int_equal (zl_zmtp_peer_ttl_ms (raw.zmtp), 1000);
    s_lt_destroy (&t);
    s_raw_close (&raw);
}

static void
test_heartbeat_answered (void **state)
{
    (void)state;
    void *ctx = zmq_ctx_new ();
    char ep[256];
    void *r = s_router (ctx, "tcp://127.0.0.1:*", NULL, ep, sizeof ep);
    zl_link_opts_t opts = {.reconnect_ivl_ms = 50,
                           .heartbeat_ivl_ms = 100,
                           .heartbeat_timeout_ms = 300,
                           .heartbeat_ttl_ms = 1000};
    lt_t *t = s_lt_new (ep, &opts);
    assert_non_null (s_wait_event (t, NULL, ZL_LINK_CONNECTED, WAIT_MS, NULL));
    assert_int_equal (zl_link_send (t->link, "a", 1), 0);
    zl_link_flush (t->link);
    uint8_t id[256], id2[256];
    size_t id_len, id2_len;
    s_router_expect (t, r, "a", id, &id_len);
    // five timeouts: only the PONGs keep it up (nothing else comes back)
    s_pump_for (t, NULL, 5 * 300);
    assert_int_equal (t->n_events, 1); // no DISCONNECTED
    assert_true (zl_link_connected (t->link));
    assert_int_equal (zl_link_send (t->link, "b", 1), 0);
    zl_link_flush (t->link);
    s_router_expect (t, r, "b", id2, &id2_len);
    assert_int_equal (id2_len, id_len);
    assert_memory_equal (id2, id, id_len); // the same connection all along
    s_lt_destroy (&t);
    zmq_close (r);
    zmq_ctx_term (ctx);
}

// ---------------------------------------------------------------- CURVE
//  A ZAP handler (libzmq asks it about every CURVE client of the context).
typedef struct {
    void *ctx;
    atomic_int allow;    // reply 200, else 400
    atomic_int requests; // how many it answered
    char last_key[41];   // the last client key asked about (Z85)
    pthread_t thread;
} zap_t;

static void *
s_zap_run (void *arg)
{
    zap_t *z = arg;
    void *rep = zmq_socket (z->ctx, ZMQ_REP);
    int zero = 0;
    zmq_setsockopt (rep, ZMQ_LINGER, &zero, sizeof zero);
    void *ctl = zmq_socket (z->ctx, ZMQ_PAIR);
    zmq_setsockopt (ctl, ZMQ_LINGER, &zero, sizeof zero);
    int rc = zmq_bind (rep, "inproc://zeromq.zap.01") | zmq_connect (ctl, "inproc://test-link-zap");
    zmq_send (ctl, rc == 0 ? "up" : "no", 2, 0);
    while (rc == 0) {
        zmq_pollitem_t items[] = {{rep, 0, ZMQ_POLLIN, 0}, {ctl, 0, ZMQ_POLLIN, 0}};
        if (zmq_poll (items, 2, -1) < 0 || (items[1].revents & ZMQ_POLLIN))
            break;
        // version, request id, domain, address, identity, mechanism, key
        zmq_msg_t part[8];
        int n = 0, more = 1;
        while (more) {
            zmq_msg_t m;
            zmq_msg_init (&m);
            zmq_msg_recv (&m, rep, 0);
            more = zmq_msg_more (&m);
            if (n < 8)
                part[n++] = m;
            else
                zmq_msg_close (&m);
        }
        if (n >= 7 && zmq_msg_size (&part[6]) == 32)
            zmq_z85_encode (z->last_key, zmq_msg_data (&part[6]), 32);
        bool allow = atomic_load (&z->allow);
        atomic_fetch_add (&z->requests, 1); // counted before the link can see the answer
        zmq_send (rep, "1.0", 3, ZMQ_SNDMORE);
        zmq_send (rep, zmq_msg_data (&part[1]), zmq_msg_size (&part[1]), ZMQ_SNDMORE);
        zmq_send (rep, allow ? "200" : "400", 3, ZMQ_SNDMORE);
        zmq_send (rep, allow ? "OK" : "not let in", allow ? 2 : 10, ZMQ_SNDMORE);
        zmq_send (rep, allow ? z->last_key : "", allow ? 40 : 0, ZMQ_SNDMORE);
        zmq_send (rep, "", 0, 0);
        for (int i = 0; i < n; i++)
            zmq_msg_close (&part[i]);
    }
    zmq_close (rep);
    zmq_close (ctl);
    return NULL;
}

static void *
s_zap_start (zap_t *z, void *ctx)
{
    memset (z, 0, sizeof *z);
    z->ctx = ctx;
    atomic_store (&z->allow, 1);
    void *ctl = zmq_socket (ctx, ZMQ_PAIR);
    int zero = 0;
    zmq_setsockopt (ctl, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt (ctl, ZMQ_RCVTIMEO, &(int){WAIT_MS}, sizeof (int));
    assert_int_equal (zmq_bind (ctl, "inproc://test-link-zap"), 0);
    assert_int_equal (pthread_create (&z->thread, NULL, s_zap_run, z), 0);
    char up[2];
    assert_int_equal (zmq_recv (ctl, up, 2, 0), 2); // bound before any handshake
    assert_memory_equal (up, "up", 2);
    return ctl;
}

static void
s_zap_stop (zap_t *z, void *ctl)
{
    zmq_send (ctl, "stop", 4, 0);
    pthread_join (z->thread, NULL);
    zmq_close (ctl);
}

typedef struct {
    char public_txt[41], secret_txt[41];
} keys_t;

static void
s_keys (keys_t *k)
{
    assert_int_equal (zmq_curve_keypair (k->public_txt, k->secret_txt), 0);
}

static zl_curve_t
s_curve (const keys_t *server, const keys_t *client)
{
    zl_curve_t c;
    memset (&c, 0, sizeof c);
    snprintf (c.server_public, sizeof c.server_public, "%s", server->public_txt);
    snprintf (c.public_key, sizeof c.public_key, "%s", client->public_txt);
    snprintf (c.secret_key, sizeof c.secret_key, "%s", client->secret_txt);
    return c;
}

static void
test_curve (void **state)
{
    (void)state;
    void *ctx = zmq_ctx_new ();
    zap_t zap;
    void *zap_ctl = s_zap_start (&zap, ctx);
    keys_t sk, ck;
    s_keys (&sk);
    s_keys (&ck);
    char ep[256];
    void *r = s_router (ctx, "tcp://127.0.0.1:*", sk.secret_txt, ep, sizeof ep);
    zl_curve_t curve = s_curve (&sk, &ck);
    zl_link_opts_t opts = {.curve = &curve, .reconnect_ivl_ms = 50};

    // let in: frames both ways, boxed
    lt_t *t = s_lt_new (ep, &opts);
    assert_non_null (s_wait_event (t, NULL, ZL_LINK_CONNECTED, WAIT_MS, NULL));
    assert_int_equal (atomic_load (&zap.requests), 1);
    assert_string_equal (zap.last_key, ck.public_txt); // the key the link presented
    assert_int_equal (zl_link_send (t->link, "secret", 6), 0);
    zl_link_flush (t->link);
    uint8_t id[256];
    size_t id_len;
    s_router_expect (t, r, "secret", id, &id_len);
    assert_int_equal (zmq_send (r, id, id_len, ZMQ_SNDMORE), (int)id_len);
    assert_int_equal (zmq_send (r, "x", 1, ZMQ_SNDMORE), 1);
    assert_int_equal (zmq_send (r, "reply", 5, 0), 5);
    seen_frame_t *f = s_wait_frame (t, WAIT_MS);
    assert_non_null (f);
    assert_true (f->more);
    f = s_wait_frame (t, WAIT_MS);
    assert_non_null (f);
    assert_int_equal (f->size, 5);
    assert_memory_equal (f->data, "reply", 5);
    assert_false (f->more);
    s_lt_destroy (&t);

    // refused by the ZAP handler: REFUSED (auth), then no more dials
    atomic_store (&zap.allow, 0);
    t = s_lt_new (ep, &opts);
    zl_link_event_t *ev = s_wait_event (t, NULL, ZL_LINK_REFUSED, WAIT_MS, NULL);
    assert_non_null (ev);
    assert_true (ev->auth);
    assert_false (ev->mechanism);
    assert_non_null (strstr (ev->detail, "400"));
    assert_int_equal (atomic_load (&zap.requests), 2);
    assert_false (zl_link_connected (t->link));
    assert_int_equal (zl_link_fd (t->link), -1);
    assert_int_equal (zl_link_timeout (t->link, zl_clock_mono_ms ()), -1); // no timer either
    s_pump_for (t, NULL, 10 * 50);              // ten reconnect intervals
    assert_int_equal (t->n_events, t->ev_seen); // no CONNECTED, no DIAL_FAILED
    assert_int_equal (atomic_load (&zap.requests), 2);
    // the owner may dial again: refused again, once
    zl_link_redial (t->link);
    ev = s_wait_event (t, NULL, ZL_LINK_REFUSED, WAIT_MS, NULL);
    assert_non_null (ev);
    assert_true (ev->auth);
    assert_int_equal (atomic_load (&zap.requests), 3);
    s_lt_destroy (&t);
    zmq_close (r);

    s_zap_stop (&zap, zap_ctl);
    zmq_ctx_term (ctx);
}

//  CURVE here, NULL at the peer, a peer as the broker's router answers it
//  (its greeting, then the connection closed): REFUSED (mechanism), then
//  no more dials. And the other way round: NULL here, CURVE there.
static void
test_curve_mechanism (void **state)
{
    (void)state;
    keys_t sk, ck;
    s_keys (&sk);
    s_keys (&ck);
    zl_curve_t curve = s_curve (&sk, &ck);
    for (int curve_here = 1; curve_here >= 0; curve_here--) {
        raw_t raw;
        s_raw_listen (&raw);
        if (!curve_here) {
            raw.opts.curve = true;
            assert_int_equal (zl_zmtp_z85_key (sk.public_txt, raw.opts.public_key), 0);
            assert_int_equal (zl_zmtp_z85_key (sk.secret_txt, raw.opts.secret_key), 0);
        }
        char ep[64];
        snprintf (ep, sizeof ep, "tcp://127.0.0.1:%d", raw.port);
        zl_link_opts_t opts = {.curve = curve_here ? &curve : NULL, .reconnect_ivl_ms = 50};
        lt_t *t = s_lt_new (ep, &opts);
        zl_link_event_t *ev = s_wait_event (t, &raw, ZL_LINK_REFUSED, WAIT_MS, NULL);
        assert_non_null (ev);
        assert_true (ev->mechanism);
        assert_false (ev->auth);
        assert_non_null (strstr (ev->detail, "CURVE"));
        assert_int_equal (raw.failure, ZL_ZMTP_FAIL_MECHANISM);
        s_pump_for (t, &raw, 10 * 50);              // ten reconnect intervals
        assert_int_equal (t->n_events, t->ev_seen); // no more dials
        assert_int_equal (raw.accepts, 1);
        assert_int_equal (zl_link_fd (t->link), -1);
        s_lt_destroy (&t);
        s_raw_close (&raw);
    }
}

//  The same against a libzmq NULL ROUTER, which closes the connection
//  after its 10-byte signature, without saying which mechanism it speaks,
//  when a whole greeting comes at once: the link sends its greeting in
//  steps, as libzmq does, so it learns the ROUTER's mechanism, and dials
//  no more (it redialled for ever with DIAL_FAILED before).
static void
test_curve_mechanism_libzmq (void **state)
{
    (void)state;
    keys_t sk, ck;
    s_keys (&sk);
    s_keys (&ck);
    zl_curve_t curve = s_curve (&sk, &ck);
    void *ctx = zmq_ctx_new ();
    char ep[256];
    void *r = s_router (ctx, "tcp://127.0.0.1:*", NULL, ep, sizeof ep);
    zl_link_opts_t opts = {.curve = &curve, .reconnect_ivl_ms = 50};
    lt_t *t = s_lt_new (ep, &opts);
    zl_link_event_t *ev = s_wait_event (t, NULL, ZL_LINK_REFUSED, WAIT_MS, NULL);
    assert_non_null (ev);
    assert_true (ev->mechanism);
    s_pump_for (t, NULL, 10 * 50);
    assert_int_equal (t->n_events, t->ev_seen); // no more dials
    s_lt_destroy (&t);
    zmq_close (r);
    zmq_ctx_term (ctx);
}

// ---------------------------------------------------------------- ipc
static void
test_ipc (void **state)
{
    (void)state;
    char dir[] = "/tmp/zl-test-link-XXXXXX";
    assert_non_null (mkdtemp (dir));
    char ep[256];
    snprintf (ep, sizeof ep, "ipc://%s/r.sock", dir);
    void *ctx = zmq_ctx_new ();
    char bound[256];
    void *r = s_router (ctx, ep, NULL, bound, sizeof bound);
    zl_link_opts_t opts = {.reconnect_ivl_ms = 50};
    lt_t *t = s_lt_new (ep, &opts);
    assert_non_null (s_wait_event (t, NULL, ZL_LINK_CONNECTED, WAIT_MS, NULL));
    assert_int_equal (zl_link_send (t->link, "over ipc", 8), 0);
    zl_link_flush (t->link);
    uint8_t id[256];
    size_t id_len;
    s_router_expect (t, r, "over ipc", id, &id_len);
    assert_int_equal (zmq_send (r, id, id_len, ZMQ_SNDMORE), (int)id_len);
    assert_int_equal (zmq_send (r, "and back", 8, 0), 8);
    seen_frame_t *f = s_wait_frame (t, WAIT_MS);
    assert_non_null (f);
    assert_int_equal (f->size, 8);
    assert_memory_equal (f->data, "and back", 8);
    s_lt_destroy (&t);
    zmq_close (r);
    zmq_ctx_term (ctx);
    char path[300];
    snprintf (path, sizeof path, "%s/r.sock", dir);
    unlink (path);
    assert_int_equal (rmdir (dir), 0);
}

//  tcp://[::1]:PORT: the brackets go, the address is dialled (skipped
//  where the machine has no IPv6 loopback).
static void
test_ipv6 (void **state)
{
    (void)state;
    void *ctx = zmq_ctx_new ();
    void *r = zmq_socket (ctx, ZMQ_ROUTER);
    int zero = 0, one = 1;
    zmq_setsockopt (r, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt (r, ZMQ_IPV6, &one, sizeof one);
    if (zmq_bind (r, "tcp://[::1]:*") != 0) {
        zmq_close (r);
        zmq_ctx_term (ctx);
        skip ();
    }
    char ep[256];
    size_t len = sizeof ep;
    assert_int_equal (zmq_getsockopt (r, ZMQ_LAST_ENDPOINT, ep, &len), 0);
    assert_int_equal (strncmp (ep, "tcp://[::1]:", 12), 0);
    zl_link_opts_t opts = {.reconnect_ivl_ms = 50};
    lt_t *t = s_lt_new (ep, &opts);
    assert_non_null (s_wait_event (t, NULL, ZL_LINK_CONNECTED, WAIT_MS, NULL));
    assert_int_equal (zl_link_send (t->link, "v6", 2), 0);
    zl_link_flush (t->link);
    s_router_expect (t, r, "v6", NULL, NULL);
    s_lt_destroy (&t);
    zmq_close (r);
    zmq_ctx_term (ctx);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test (test_endpoints),
        cmocka_unit_test (test_pending),
        cmocka_unit_test (test_drained_read),
        cmocka_unit_test (test_polled_read),
        cmocka_unit_test (test_event_pending),
        cmocka_unit_test (test_null_router),
        cmocka_unit_test (test_immediate_and_hwm),
        cmocka_unit_test (test_redial),
        cmocka_unit_test (test_max_frame),
        cmocka_unit_test (test_heartbeat_silent_peer),
        cmocka_unit_test (test_heartbeat_answered),
        cmocka_unit_test (test_curve),
        cmocka_unit_test (test_curve_mechanism),
        cmocka_unit_test (test_curve_mechanism_libzmq),
        cmocka_unit_test (test_ipc),
        cmocka_unit_test (test_ipv6),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
