/*  test_zmtp: zlane's own ZMTP 3.1 against itself (NULL and CURVE, bytes
    moved in chunks of every size), against libzmq over real loopback TCP
    sockets in both roles (a libzmq DEALER and ROUTER are the peers users
    run: pyzmq, zeromq.js and zlane-ctl are libzmq), and against bad input:
    what is not ZMTP, an old version, reserved flags, an oversize frame, a
    data frame before the handshake, a mechanism or socket type that does
    not fit, a replayed or forged CURVE box, a refused key. */
#include "zmtp.h"

#include "clock.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#define WAIT_MS 5000

typedef struct {
    uint8_t public_key[32], secret_key[32];
    char public_txt[41], secret_txt[41];
} keypair_t;

static void
s_keypair (keypair_t *k)
{
    assert_int_equal (zmq_curve_keypair (k->public_txt, k->secret_txt), 0);
    assert_int_equal (zl_zmtp_z85_key (k->public_txt, k->public_key), 0);
    assert_int_equal (zl_zmtp_z85_key (k->secret_txt, k->secret_key), 0);
}

static zl_zmtp_opts_t
s_opts (bool server, const keypair_t *mine, const keypair_t *server_keys)
{
    zl_zmtp_opts_t o = {.server = server, .socket_type = server ? "ROUTER" : "DEALER"};
    if (mine) {
        o.curve = true;
        memcpy (o.public_key, mine->public_key, 32);
        memcpy (o.secret_key, mine->secret_key, 32);
    }
    if (server_keys)
        memcpy (o.server_key, server_keys->public_key, 32);
    return o;
}

// ---------------------------------------------------------------- in memory
typedef struct {
    int frames;         // data frames seen
    uint8_t last[4096]; // the last one's bytes (its first 4096)
    size_t last_size;
    bool last_more;
    bool ready;
    zl_zmtp_rc_t failed; // ZL_ZMTP_ERROR once it failed
} seen_t;

//  Move what `from` has to send into `to`, at most `chunk` bytes a read,
//  and parse it. Returns the bytes moved.
static size_t
s_move (zl_zmtp_t *from, zl_zmtp_t *to, size_t chunk, seen_t *seen)
{
    const uint8_t *data;
    size_t n = zl_zmtp_out (from, &data), moved = 0;
    while (moved < n) {
        size_t room;
        uint8_t *space = zl_zmtp_in_space (to, chunk, &room);
        size_t take = n - moved < chunk ? n - moved : chunk;
        if (take > room)
            take = room;
        memcpy (space, data + moved, take);
        zl_zmtp_in_commit (to, take);
        moved += take;
        zl_zmtp_frame_t f;
        zl_zmtp_rc_t rc;
        while ((rc = zl_zmtp_next (to, &f)) != ZL_ZMTP_AGAIN) {
            if (rc == ZL_ZMTP_ERROR) {
                seen->failed = rc;
                break;
            }
            if (rc == ZL_ZMTP_READY)
                seen->ready = true;
            if (rc == ZL_ZMTP_FRAME) {
                seen->frames++;
                seen->last_size = f.size;
                seen->last_more = f.more;
                memcpy (seen->last, f.data,
                        f.size < sizeof seen->last ? f.size : sizeof seen->last);
            }
        }
        if (seen->failed)
            break;
        // `from` may have queued more meanwhile (never while we hold `data`)
    }
    zl_zmtp_sent (from, moved);
    return moved;
}

//  Shuttle both ways until neither has anything to send.
static void
s_shuttle (zl_zmtp_t *a, zl_zmtp_t *b, size_t chunk, seen_t *sa, seen_t *sb)
{
    for (int i = 0; i < 100; i++) {
        size_t moved = s_move (a, b, chunk, sb) + s_move (b, a, chunk, sa);
        if (!moved || sa->failed || sb->failed)
            return;
    }
    fail_msg ("the handshake never settled");
}

static void
s_pair_exchange (const keypair_t *ck, const keypair_t *sk, size_t chunk)
{
    zl_zmtp_opts_t co = s_opts (false, ck, sk), so = s_opts (true, sk, NULL);
    zl_zmtp_t *c = zl_zmtp_new (&co), *s = zl_zmtp_new (&so);
    seen_t sc = {0}, ss = {0};
    assert_int_equal (zl_zmtp_send (c, "early", 5, false), -1); // not before the handshake
    s_shuttle (c, s, chunk, &sc, &ss);
    assert_true (sc.ready && ss.ready);
    assert_true (zl_zmtp_ready (c) && zl_zmtp_ready (s));
    if (ck) {
        assert_non_null (zl_zmtp_peer_key (s));
        assert_memory_equal (zl_zmtp_peer_key (s), ck->public_key, 32);
    } else {
        assert_null (zl_zmtp_peer_key (s));
    }
    // frames both ways: short, multipart, long (a LONG header), empty
    assert_int_equal (zl_zmtp_send (c, "hello", 5, true), 0);
    assert_int_equal (zl_zmtp_send (c, "world", 5, false), 0);
    s_shuttle (c, s, chunk, &sc, &ss);
    assert_int_equal (ss.frames, 2);
    assert_int_equal (ss.last_size, 5);
    assert_memory_equal (ss.last, "world", 5);
    assert_false (ss.last_more);
    size_t big = 300000;
    uint8_t *blob = malloc (big);
    for (size_t i = 0; i < big; i++)
        blob[i] = (uint8_t)(i * 7);
    assert_int_equal (zl_zmtp_send (s, blob, big, false), 0);
    assert_int_equal (zl_zmtp_send (s, "", 0, false), 0);
    s_move (s, c, chunk, &sc); // the big frame, then the empty one
    assert_int_equal (sc.frames, 2);
    assert_int_equal (sc.last_size, 0);
    free (blob);
    // a PING is answered with a PONG and reports its TTL; neither is data
    zl_zmtp_ping (c, 3000);
    s_shuttle (c, s, chunk, &sc, &ss);
    assert_int_equal (zl_zmtp_peer_ttl_ms (s), 3000);
    assert_int_equal (ss.frames, 2);
    assert_int_equal (sc.frames, 2);
    assert_int_equal (sc.failed, 0);
    assert_int_equal (ss.failed, 0);
    zl_zmtp_destroy (&c);
    zl_zmtp_destroy (&s);
    assert_null (c);
    zl_zmtp_destroy (&c); // NULL-safe
}

static void
test_null_pair (void **state)
{
    (void)state;
    size_t chunks[] = {1, 2, 3, 7, 63, 64, 65, 1000, 65536};
    for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++)
        s_pair_exchange (NULL, NULL, chunks[i]);
}

static void
test_curve_pair (void **state)
{
    (void)state;
    keypair_t ck, sk;
    s_keypair (&ck);
    s_keypair (&sk);
    size_t chunks[] = {1, 5, 64, 199, 200, 201, 65536};
    for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++)
        s_pair_exchange (&ck, &sk, chunks[i]);
}

static bool
s_refuse (void *arg, const uint8_t key[32])
{
    int *calls = arg;
    (*calls)++;
    return false;
}

static void
test_curve_refused (void **state)
{
    (void)state;
    keypair_t ck, sk, other;
    s_keypair (&ck);
    s_keypair (&sk);
    s_keypair (&other);
    // the server refuses the key: ERROR "400", an authentication failure at both ends
    zl_zmtp_opts_t co = s_opts (false, &ck, &sk), so = s_opts (true, &sk, NULL);
    int calls = 0;
    so.auth = s_refuse;
    so.auth_arg = &calls;
    zl_zmtp_t *c = zl_zmtp_new (&co), *s = zl_zmtp_new (&so);
    seen_t sc = {0}, ss = {0};
    s_shuttle (c, s, 4096, &sc, &ss);
    assert_int_equal (calls, 1);
    assert_int_equal (ss.failed, ZL_ZMTP_ERROR);
    assert_int_equal (zl_zmtp_failure (s), ZL_ZMTP_FAIL_AUTH);
    assert_int_equal (sc.failed, ZL_ZMTP_ERROR);
    assert_int_equal (zl_zmtp_failure (c), ZL_ZMTP_FAIL_AUTH);
    assert_non_null (strstr (zl_zmtp_error (c), "400"));
    assert_false (zl_zmtp_ready (c));
    zl_zmtp_destroy (&c);
    zl_zmtp_destroy (&s);

    // the client has another server key: the HELLO does not open
    co = s_opts (false, &ck, &other);
    so = s_opts (true, &sk, NULL);
    c = zl_zmtp_new (&co);
    s = zl_zmtp_new (&so);
    memset (&sc, 0, sizeof sc);
    memset (&ss, 0, sizeof ss);
    s_shuttle (c, s, 4096, &sc, &ss);
    assert_int_equal (ss.failed, ZL_ZMTP_ERROR);
    assert_int_equal (zl_zmtp_failure (s), ZL_ZMTP_FAIL_CRYPTO);
    assert_false (zl_zmtp_ready (c));
    zl_zmtp_destroy (&c);
    zl_zmtp_destroy (&s);

    // CURVE at one end only: a mechanism mismatch, said plainly by the side
    // whose peer's whole greeting came first (both ends, moved one by one)
    for (int first = 0; first < 2; first++) {
        co = s_opts (false, NULL, NULL);
        so = s_opts (true, &sk, NULL);
        c = zl_zmtp_new (&co);
        s = zl_zmtp_new (&so);
        memset (&sc, 0, sizeof sc);
        memset (&ss, 0, sizeof ss);
        zl_zmtp_t *a = first ? s : c, *b = first ? c : s;
        seen_t *sa = first ? &ss : &sc, *sb = first ? &sc : &ss;
        s_shuttle (a, b, 4096, sa, sb);
        zl_zmtp_t *failed = sc.failed ? c : s;
        assert_true (sc.failed || ss.failed);
        assert_int_equal (zl_zmtp_failure (failed), ZL_ZMTP_FAIL_MECHANISM);
        assert_non_null (strstr (zl_zmtp_error (failed), "CURVE must be on at both ends"));
        // the greeting goes in two steps: 11 octets, then the rest once the
        // peer's 11 came; neither end ever got ready
        assert_false (zl_zmtp_ready (c) || zl_zmtp_ready (s));
        zl_zmtp_destroy (&c);
        zl_zmtp_destroy (&s);
    }
    // the first step alone, before anything came from the peer
    co = s_opts (false, NULL, NULL);
    c = zl_zmtp_new (&co);
    const uint8_t *g;
    assert_int_equal (zl_zmtp_out (c, &g), 11);
    assert_int_equal (g[10], 3);
    zl_zmtp_destroy (&c);
}

//  A server fed `bytes` after a valid greeting (when `greet`) fails with `why`.
static void
s_expect_failure (const void *bytes, size_t n, bool greet, zl_zmtp_failure_t why, const char *text)
{
    zl_zmtp_opts_t so = s_opts (true, NULL, NULL);
    so.max_frame = 1000;
    zl_zmtp_t *s = zl_zmtp_new (&so);
    seen_t ss = {0};
    if (greet) {
        zl_zmtp_opts_t co = s_opts (false, NULL, NULL);
        zl_zmtp_t *c = zl_zmtp_new (&co);
        seen_t sc = {0};
        s_shuttle (c, s, 4096, &sc, &ss); // the greetings and READYs
        assert_true (ss.ready);
        zl_zmtp_destroy (&c);
    }
    size_t room;
    uint8_t *space = zl_zmtp_in_space (s, n, &room);
    assert_true (room >= n);
    memcpy (space, bytes, n);
    zl_zmtp_in_commit (s, n);
    zl_zmtp_frame_t f;
    assert_int_equal (zl_zmtp_next (s, &f), ZL_ZMTP_ERROR);
    assert_int_equal (zl_zmtp_failure (s), why);
    if (text)
        assert_non_null (strstr (zl_zmtp_error (s), text));
    assert_int_equal (zl_zmtp_send (s, "x", 1, false), -1);
    assert_int_equal (zl_zmtp_next (s, &f), ZL_ZMTP_ERROR); // it stays failed
    zl_zmtp_destroy (&s);
}

static void
test_bad_input (void **state)
{
    (void)state;
    s_expect_failure ("GET / HTTP/1.1\r\n", 16, false, ZL_ZMTP_FAIL_PROTOCOL,
                      "does not speak ZMTP");
    uint8_t g[64] = {0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 2, 0};
    s_expect_failure (g, 12, false, ZL_ZMTP_FAIL_PROTOCOL, "ZMTP 2.x");
    uint8_t g1[10] = {0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7e};
    s_expect_failure (g1, 10, false, ZL_ZMTP_FAIL_PROTOCOL, "ZMTP 1.0");
    g[10] = 3;
    memcpy (g + 12, "PLAIN", 5);
    s_expect_failure (g, 64, false, ZL_ZMTP_FAIL_MECHANISM, "speaks PLAIN");
    s_expect_failure ("\x08\x01x", 3, true, ZL_ZMTP_FAIL_PROTOCOL, "reserved flags");
    uint8_t long_frame[9] = {0x02, 0, 0, 0, 0, 0, 0, 0x03, 0xe9}; // 1001 bytes
    s_expect_failure (long_frame, 9, true, ZL_ZMTP_FAIL_TOO_LARGE, "1001 bytes");
    // a data frame before the peer's READY
    zl_zmtp_opts_t so = s_opts (true, NULL, NULL);
    zl_zmtp_t *s = zl_zmtp_new (&so);
    uint8_t early[64 + 3];
    memcpy (early, g, 64);
    memcpy (early + 12, "NULL\0", 5);
    memcpy (early + 64, "\x00\x01x", 3);
    size_t room;
    memcpy (zl_zmtp_in_space (s, sizeof early, &room), early, sizeof early);
    zl_zmtp_in_commit (s, sizeof early);
    zl_zmtp_frame_t f;
    assert_int_equal (zl_zmtp_next (s, &f), ZL_ZMTP_ERROR);
    assert_non_null (strstr (zl_zmtp_error (s), "before the handshake"));
    zl_zmtp_destroy (&s);
    // a socket type that does not fit: two ROUTERs are fine, a PUB is not
    uint8_t ready[64 + 2 + 6 + 12 + 4 + 3];
    memcpy (ready, early, 64);
    uint8_t *r = ready + 64;
    r[0] = 0x04;
    r[1] = 6 + 12 + 4 + 3;
    memcpy (r + 2, "\x05READY\x0bSocket-Type\0\0\0\x03PUB", 6 + 12 + 4 + 3);
    s_expect_failure (ready, sizeof ready, false, ZL_ZMTP_FAIL_PROTOCOL,
                      "a PUB socket cannot talk to a ROUTER");
}

static void
test_curve_forgery (void **state)
{
    (void)state;
    keypair_t ck, sk;
    s_keypair (&ck);
    s_keypair (&sk);
    zl_zmtp_opts_t co = s_opts (false, &ck, &sk), so = s_opts (true, &sk, NULL);
    zl_zmtp_t *c = zl_zmtp_new (&co), *s = zl_zmtp_new (&so);
    seen_t sc = {0}, ss = {0};
    s_shuttle (c, s, 4096, &sc, &ss);
    assert_true (ss.ready && sc.ready);
    // capture one MESSAGE, deliver it, then deliver it again: a replay
    assert_int_equal (zl_zmtp_send (c, "pay", 3, false), 0);
    const uint8_t *data;
    size_t n = zl_zmtp_out (c, &data);
    uint8_t *copy = malloc (n);
    memcpy (copy, data, n);
    s_move (c, s, 4096, &ss);
    assert_int_equal (ss.frames, 1);
    size_t room;
    memcpy (zl_zmtp_in_space (s, n, &room), copy, n);
    zl_zmtp_in_commit (s, n);
    zl_zmtp_frame_t f;
    assert_int_equal (zl_zmtp_next (s, &f), ZL_ZMTP_ERROR);
    assert_int_equal (zl_zmtp_failure (s), ZL_ZMTP_FAIL_CRYPTO);
    zl_zmtp_destroy (&s);
    // a flipped bit in a box: it does not open
    s = zl_zmtp_new (&so);
    zl_zmtp_destroy (&c);
    c = zl_zmtp_new (&co);
    memset (&sc, 0, sizeof sc);
    memset (&ss, 0, sizeof ss);
    s_shuttle (c, s, 4096, &sc, &ss);
    assert_int_equal (zl_zmtp_send (c, "pay", 3, false), 0);
    n = zl_zmtp_out (c, &data);
    uint8_t *flipped = zl_zmtp_in_space (s, n, &room);
    memcpy (flipped, data, n);
    flipped[n - 1] ^= 1;
    zl_zmtp_in_commit (s, n);
    assert_int_equal (zl_zmtp_next (s, &f), ZL_ZMTP_ERROR);
    assert_int_equal (zl_zmtp_failure (s), ZL_ZMTP_FAIL_CRYPTO);
    free (copy);
    zl_zmtp_destroy (&c);
    zl_zmtp_destroy (&s);
}

// ---------------------------------------------------------------- over TCP, with libzmq
static int
s_listen (int *port)
{
    int fd = socket (AF_INET, SOCK_STREAM, 0);
    assert_true (fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl (INADDR_LOOPBACK)};
    assert_int_equal (bind (fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal (listen (fd, 4), 0);
    socklen_t len = sizeof a;
    getsockname (fd, (struct sockaddr *)&a, &len);
    *port = ntohs (a.sin_port);
    return fd;
}

//  Write out what `z` queued, then read and parse for up to `ms` until
//  `until` frames (or the handshake, with until 0) were seen or it failed.
static void
s_pump (int fd, zl_zmtp_t *z, seen_t *seen, int until, int ms)
{
    int64_t deadline = zl_clock_mono_ms () + ms;
    for (;;) {
        const uint8_t *data;
        size_t n;
        while ((n = zl_zmtp_out (z, &data)) > 0) {
            ssize_t w = write (fd, data, n);
            assert_true (w > 0);
            zl_zmtp_sent (z, (size_t)w);
        }
        if (seen->failed || (until == 0 ? seen->ready : seen->frames >= until))
            return;
        int left = (int)(deadline - zl_clock_mono_ms ());
        if (left <= 0)
            return;
        struct pollfd p = {fd, POLLIN, 0};
        if (poll (&p, 1, left) <= 0)
            continue;
        size_t room;
        uint8_t *space = zl_zmtp_in_space (z, 0, &room);
        ssize_t r = read (fd, space, room);
        if (r <= 0) {
            seen->failed = ZL_ZMTP_ERROR;
            return;
        }
        zl_zmtp_in_commit (z, (size_t)r);
        zl_zmtp_frame_t f;
        zl_zmtp_rc_t rc;
        while ((rc = zl_zmtp_next (z, &f)) != ZL_ZMTP_AGAIN) {
            if (rc == ZL_ZMTP_ERROR) {
                seen->failed = rc;
                break;
            }
            seen->ready |= rc == ZL_ZMTP_READY;
            if (rc == ZL_ZMTP_FRAME) {
                seen->frames++;
                seen->last_size = f.size;
                seen->last_more = f.more;
                memcpy (seen->last, f.data,
                        f.size < sizeof seen->last ? f.size : sizeof seen->last);
            }
        }
    }
}

//  Wait for one of `events` on a libzmq monitor; returns the event or 0.
static int
s_monitor_event (void *monitor, int events, int ms)
{
    int64_t deadline = zl_clock_mono_ms () + ms;
    for (;;) {
        int left = (int)(deadline - zl_clock_mono_ms ());
        if (left <= 0)
            return 0;
        zmq_pollitem_t it = {monitor, 0, ZMQ_POLLIN, 0};
        if (zmq_poll (&it, 1, left) <= 0)
            continue;
        zmq_msg_t m;
        zmq_msg_init (&m);
        zmq_msg_recv (&m, monitor, 0);
        uint16_t ev = 0;
        if (zmq_msg_size (&m) >= 6)
            memcpy (&ev, zmq_msg_data (&m), 2);
        zmq_msg_close (&m);
        zmq_msg_init (&m);
        zmq_msg_recv (&m, monitor, 0); // the endpoint
        zmq_msg_close (&m);
        if (ev & events)
            return ev;
    }
}

static void
s_libzmq_dealer_to_us (const keypair_t *ck, const keypair_t *sk, bool let_in)
{
    int port, lfd = s_listen (&port);
    void *ctx = zmq_ctx_new ();
    void *d = zmq_socket (ctx, ZMQ_DEALER);
    int zero = 0, ivl = 100, timeout = 400;
    zmq_setsockopt (d, ZMQ_LINGER, &zero, sizeof zero);
    // heartbeats: libzmq drops the connection unless our PONGs come back
    zmq_setsockopt (d, ZMQ_HEARTBEAT_IVL, &ivl, sizeof ivl);
    zmq_setsockopt (d, ZMQ_HEARTBEAT_TIMEOUT, &timeout, sizeof timeout);
    zmq_setsockopt (d, ZMQ_HEARTBEAT_TTL, &timeout, sizeof timeout);
    if (ck) {
        zmq_setsockopt (d, ZMQ_CURVE_SERVERKEY, sk->public_txt, 40);
        zmq_setsockopt (d, ZMQ_CURVE_PUBLICKEY, ck->public_txt, 40);
        zmq_setsockopt (d, ZMQ_CURVE_SECRETKEY, ck->secret_txt, 40);
    }
    assert_int_equal (zmq_socket_monitor (d, "inproc://test-zmtp-mon", ZMQ_EVENT_ALL), 0);
    void *mon = zmq_socket (ctx, ZMQ_PAIR);
    assert_int_equal (zmq_connect (mon, "inproc://test-zmtp-mon"), 0);
    char ep[64];
    snprintf (ep, sizeof ep, "tcp://127.0.0.1:%d", port);
    assert_int_equal (zmq_connect (d, ep), 0);
    int fd = accept (lfd, NULL, NULL);
    assert_true (fd >= 0);

    zl_zmtp_opts_t so = s_opts (true, sk, NULL);
    int calls = 0;
    if (!let_in) {
        so.auth = s_refuse;
        so.auth_arg = &calls;
    }
    zl_zmtp_t *s = zl_zmtp_new (&so);
    seen_t ss = {0};
    s_pump (fd, s, &ss, 0, WAIT_MS);
    if (!let_in) {
        assert_int_equal (ss.failed, ZL_ZMTP_ERROR);
        assert_int_equal (calls, 1);
        assert_int_equal (s_monitor_event (mon, ZMQ_EVENT_HANDSHAKE_FAILED_AUTH, WAIT_MS),
                          ZMQ_EVENT_HANDSHAKE_FAILED_AUTH);
    } else {
        assert_true (ss.ready);
        assert_int_equal (s_monitor_event (mon, ZMQ_EVENT_HANDSHAKE_SUCCEEDED, WAIT_MS),
                          ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
        if (ck)
            assert_memory_equal (zl_zmtp_peer_key (s), ck->public_key, 32);
        // libzmq -> us: a two-frame message, then a 100 kB one
        assert_int_equal (zmq_send (d, "ab", 2, ZMQ_SNDMORE), 2);
        assert_int_equal (zmq_send (d, "cde", 3, 0), 3);
        char *big = calloc (1, 100000);
        big[99999] = 'z';
        assert_int_equal (zmq_send (d, big, 100000, 0), 100000);
        s_pump (fd, s, &ss, 3, WAIT_MS);
        assert_int_equal (ss.frames, 3);
        assert_int_equal (ss.last_size, 100000);
        // us -> libzmq
        assert_int_equal (zl_zmtp_send (s, "one", 3, true), 0);
        assert_int_equal (zl_zmtp_send (s, big, 100000, false), 0);
        s_pump (fd, s, &ss, 4, 0);
        zmq_setsockopt (d, ZMQ_RCVTIMEO, &(int){WAIT_MS}, sizeof (int));
        char buf[16];
        assert_int_equal (zmq_recv (d, buf, sizeof buf, 0), 3);
        int more = 0;
        size_t ml = sizeof more;
        zmq_getsockopt (d, ZMQ_RCVMORE, &more, &ml);
        assert_true (more);
        char *back = malloc (100000);
        assert_int_equal (zmq_recv (d, back, 100000, 0), 100000);
        assert_int_equal (back[99999], 'z');
        free (back);
        free (big);
        // heartbeats for 4 timeouts: every PING answered, libzmq keeps the
        // connection (a missed PONG shows as DISCONNECTED on its monitor)
        int64_t until = zl_clock_mono_ms () + 4 * timeout;
        while (zl_clock_mono_ms () < until)
            s_pump (fd, s, &ss, 1000, (int)(until - zl_clock_mono_ms ()));
        assert_int_equal (ss.failed, 0);
        assert_int_equal (zl_zmtp_peer_ttl_ms (s), timeout);
        assert_int_equal (s_monitor_event (mon, ZMQ_EVENT_DISCONNECTED, 0), 0);
        assert_int_equal (zmq_send (d, "still", 5, 0), 5);
        s_pump (fd, s, &ss, 4, WAIT_MS);
        assert_int_equal (ss.frames, 4);
        assert_memory_equal (ss.last, "still", 5);
    }
    zl_zmtp_destroy (&s);
    close (fd);
    close (lfd);
    zmq_socket_monitor (d, NULL, 0);
    zmq_close (mon);
    zmq_close (d);
    zmq_ctx_term (ctx);
}

static void
test_libzmq_dealer_null (void **state)
{
    (void)state;
    s_libzmq_dealer_to_us (NULL, NULL, true);
}

static void
test_libzmq_dealer_curve (void **state)
{
    (void)state;
    keypair_t ck, sk;
    s_keypair (&ck);
    s_keypair (&sk);
    s_libzmq_dealer_to_us (&ck, &sk, true);
    s_libzmq_dealer_to_us (&ck, &sk, false);
}

static void
s_us_to_libzmq_router (const keypair_t *ck, const keypair_t *sk)
{
    void *ctx = zmq_ctx_new ();
    void *r = zmq_socket (ctx, ZMQ_ROUTER);
    int zero = 0;
    zmq_setsockopt (r, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt (r, ZMQ_RCVTIMEO, &(int){WAIT_MS}, sizeof (int));
    if (sk) {
        int one = 1;
        zmq_setsockopt (r, ZMQ_CURVE_SERVER, &one, sizeof one);
        zmq_setsockopt (r, ZMQ_CURVE_SECRETKEY, sk->secret_txt, 40);
    }
    assert_int_equal (zmq_bind (r, "tcp://127.0.0.1:*"), 0);
    char ep[64];
    size_t len = sizeof ep;
    zmq_getsockopt (r, ZMQ_LAST_ENDPOINT, ep, &len);
    int port = atoi (strrchr (ep, ':') + 1);

    int fd = socket (AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons ((uint16_t)port),
                            .sin_addr.s_addr = htonl (INADDR_LOOPBACK)};
    assert_int_equal (connect (fd, (struct sockaddr *)&a, sizeof a), 0);
    zl_zmtp_opts_t co = s_opts (false, ck, sk);
    zl_zmtp_t *c = zl_zmtp_new (&co);
    seen_t sc = {0};
    s_pump (fd, c, &sc, 0, WAIT_MS);
    assert_true (sc.ready);
    assert_int_equal (zl_zmtp_send (c, "job", 3, false), 0);
    zl_zmtp_ping (c, 2000); // a ZMTP 3.1 peer: answered with a PONG, not data
    s_pump (fd, c, &sc, 1, 0);
    char id[256], body[16];
    int idlen = zmq_recv (r, id, sizeof id, 0);
    assert_true (idlen > 0);
    assert_int_equal (zmq_recv (r, body, sizeof body, 0), 3);
    assert_memory_equal (body, "job", 3);
    assert_int_equal (zmq_send (r, id, (size_t)idlen, ZMQ_SNDMORE), idlen);
    assert_int_equal (zmq_send (r, "done", 4, 0), 4);
    s_pump (fd, c, &sc, 1, WAIT_MS);
    assert_int_equal (sc.frames, 1);
    assert_memory_equal (sc.last, "done", 4);
    assert_int_equal (sc.failed, 0);
    zl_zmtp_destroy (&c);
    close (fd);
    zmq_close (r);
    zmq_ctx_term (ctx);
}

static void
test_us_to_libzmq_router (void **state)
{
    (void)state;
    s_us_to_libzmq_router (NULL, NULL);
    keypair_t ck, sk;
    s_keypair (&ck);
    s_keypair (&sk);
    s_us_to_libzmq_router (&ck, &sk);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test (test_null_pair),           cmocka_unit_test (test_curve_pair),
        cmocka_unit_test (test_curve_refused),       cmocka_unit_test (test_bad_input),
        cmocka_unit_test (test_curve_forgery),       cmocka_unit_test (test_libzmq_dealer_null),
        cmocka_unit_test (test_libzmq_dealer_curve), cmocka_unit_test (test_us_to_libzmq_router),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
