/*  link: see link.h. States: WAIT (no socket; a dial is due at dial_at_ms),
    CONNECTING (a non-blocking connect under way), HANDSHAKE (ZMTP greeting
    and mechanism), READY (frames flow), STOPPED (refused: no more dials
    until zl_link_redial). */
#define _GNU_SOURCE
#include "link.h"

#include "clock.h"
#include "zl_alloc.h"
#include "zmtp.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define HANDSHAKE_MS 30000      // libzmq's ZMQ_HANDSHAKE_IVL default, from the dial
#define MAX_WRITTEN (64u << 20) // bytes the broker has not taken before sends fail
#define EVENTS 16
#define MAX_ADDRS 8 // addresses of one name tried at a dial

typedef enum { L_WAIT, L_CONNECTING, L_HANDSHAKE, L_READY, L_STOPPED } state_t;

struct _zl_link_t {
    char *endpoint;
    bool ipc;
    char host[256], port[8];
    char path[sizeof ((struct sockaddr_un *)0)->sun_path];
    zl_link_opts_t opts;
    bool curve;
    uint8_t public_key[32], secret_key[32], server_key[32];
    state_t state;
    int fd;
    uint64_t sockets; // sockets made so far (zl_link_socket_serial)
    zl_zmtp_t *zmtp;
    bool blocked; // output waits for the kernel
    int64_t dial_at_ms, dialled_ms;
    struct sockaddr_storage addrs[MAX_ADDRS]; // this dial's addresses, IPv4 first
    socklen_t addr_lens[MAX_ADDRS];
    size_t n_addrs, addr_at;
    uint32_t ivl_ms;
    int64_t heard_ms, ping_at_ms;
    // a frame parsed by zl_link_pump, not yet taken by zl_link_recv (held),
    // or the one zl_link_recv returned last (lent): no read may move either
    bool held, lent;
    // the kernel had nothing more to read at the last read (it took less
    // than it had room for) or at the owner's last poll: an owner that
    // reports its polls (zl_link_polled) has reads wait for its next poll
    // (and an EAGAIN counts too), one that does not has the next read
    // skipped once.
    bool drained, owner_polls;
    const uint8_t *held_data;
    size_t held_size;
    bool held_more;
    // frames sent while no connection is up: (size, bytes) records
    uint8_t *pending;
    size_t pending_len, pending_cap, n_pending;
    zl_link_event_t events[EVENTS];
    size_t ev_head, n_events;
};

static void s_event (zl_link_t *self, zl_link_event_kind_t kind, const char *fmt, ...)
    __attribute__ ((format (printf, 3, 4)));

static void
s_event (zl_link_t *self, zl_link_event_kind_t kind, const char *fmt, ...)
{
    if (self->n_events == EVENTS) { // nobody reads them: the oldest go
        self->ev_head = (self->ev_head + 1) % EVENTS;
        self->n_events--;
    }
    zl_link_event_t *ev = &self->events[(self->ev_head + self->n_events++) % EVENTS];
    memset (ev, 0, sizeof *ev);
    ev->kind = kind;
    va_list ap;
    va_start (ap, fmt);
    vsnprintf (ev->detail, sizeof ev->detail, fmt, ap);
    va_end (ap);
}

static zl_link_event_t *
s_last_event (zl_link_t *self)
{
    return &self->events[(self->ev_head + self->n_events - 1) % EVENTS];
}

// ---------------------------------------------------------------- connections
static void
s_drop_socket (zl_link_t *self)
{
    if (self->fd >= 0)
        close (self->fd);
    self->fd = -1;
    zl_zmtp_destroy (&self->zmtp);
    self->held = self->lent = false;
    self->blocked = self->drained = false;
}

//  The connection ended for a reason a redial may cure.
static void
s_lost (zl_link_t *self, int64_t now_ms, const char *why)
{
    if (self->state == L_READY)
        s_event (self, ZL_LINK_DISCONNECTED, "%s", why);
    else {
        s_event (self, ZL_LINK_DIAL_FAILED, "%s", why);
        s_last_event (self)->handshake = self->state == L_HANDSHAKE;
    }
    s_drop_socket (self);
    self->state = L_WAIT;
    self->dial_at_ms = now_ms + self->ivl_ms;
    if (self->opts.reconnect_max_ms > self->ivl_ms)
        self->ivl_ms = self->ivl_ms * 2 < self->opts.reconnect_max_ms ? self->ivl_ms * 2
                                                                      : self->opts.reconnect_max_ms;
}

static void
s_start_handshake (zl_link_t *self, int64_t now_ms)
{
    zl_zmtp_opts_t zo = {.server = false,
                         .socket_type = "DEALER",
                         .curve = self->curve,
                         .max_frame = self->opts.max_frame};
    memcpy (zo.public_key, self->public_key, 32);
    memcpy (zo.secret_key, self->secret_key, 32);
    memcpy (zo.server_key, self->server_key, 32);
    self->zmtp = zl_zmtp_new (&zo);
    self->state = L_HANDSHAKE;
    self->heard_ms = now_ms;
}

//  Connect to the dial's address `addr_at`, or to the next that takes a
//  connect; the last failure is reported as a failed dial.
static void
s_connect_next (zl_link_t *self, int64_t now_ms, const char *why)
{
    for (; self->addr_at < self->n_addrs; self->addr_at++) {
        if (self->fd >= 0)
            close (self->fd);
        const struct sockaddr_storage *sa = &self->addrs[self->addr_at];
        self->fd = socket (sa->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        self->sockets++;
        if (self->fd < 0) {
            why = strerror (errno);
            continue;
        }
        if (!self->ipc) {
            int one = 1;
            setsockopt (self->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        }
        if (connect (self->fd, (const struct sockaddr *)sa, self->addr_lens[self->addr_at]) == 0) {
            s_start_handshake (self, now_ms);
            return;
        }
        if (errno == EINPROGRESS)
            return; // s_check_connect
        why = strerror (errno);
    }
    s_lost (self, now_ms, why ? why : "no address to dial");
}

static void
s_dial (zl_link_t *self, int64_t now_ms)
{
    self->dialled_ms = now_ms;
    self->state = L_CONNECTING; // a failure below is reported as a failed dial
    self->n_addrs = self->addr_at = 0;
    if (self->ipc) {
        struct sockaddr_un *un = (struct sockaddr_un *)&self->addrs[0];
        memset (un, 0, sizeof *un);
        un->sun_family = AF_UNIX;
        memcpy (un->sun_path, self->path, strlen (self->path) + 1);
        self->addr_lens[0] = sizeof *un;
        self->n_addrs = 1;
    } else {
        // every address of the name, IPv4 first as a libzmq client does
        // (a broker bound to * or a name listens on IPv4): "localhost" is
        // ::1 first on many hosts
        struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res;
        int rc = getaddrinfo (self->host, self->port, &hints, &res);
        if (rc != 0) {
            s_lost (self, now_ms, gai_strerror (rc));
            return;
        }
        for (int v4 = 1; v4 >= 0; v4--)
            for (struct addrinfo *a = res; a && self->n_addrs < MAX_ADDRS; a = a->ai_next)
                if ((a->ai_family == AF_INET) == v4 && a->ai_addrlen <= sizeof self->addrs[0]) {
                    memcpy (&self->addrs[self->n_addrs], a->ai_addr, a->ai_addrlen);
                    self->addr_lens[self->n_addrs++] = a->ai_addrlen;
                }
        freeaddrinfo (res);
    }
    s_connect_next (self, now_ms, NULL);
}

//  A dial under way: done? (a zero-timeout poll, then SO_ERROR)
static void
s_check_connect (zl_link_t *self, int64_t now_ms)
{
    struct pollfd p = {self->fd, POLLOUT, 0};
    if (poll (&p, 1, 0) <= 0)
        return;
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt (self->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (!err) {
        s_start_handshake (self, now_ms);
        return;
    }
    self->addr_at++; // the name's next address, if it has one
    s_connect_next (self, now_ms, strerror (err));
}

static void
s_write (zl_link_t *self, int64_t now_ms)
{
    if (!self->zmtp)
        return;
    for (;;) {
        const uint8_t *data;
        size_t n = zl_zmtp_out (self->zmtp, &data);
        if (n == 0) {
            self->blocked = false;
            return;
        }
        ssize_t w = send (self->fd, data, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            zl_zmtp_sent (self->zmtp, (size_t)w);
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            self->blocked = true;
            return;
        }
        s_lost (self, now_ms, w < 0 ? strerror (errno) : "write returned 0");
        return;
    }
}

static void
s_on_ready (zl_link_t *self, int64_t now_ms)
{
    self->state = L_READY;
    self->ivl_ms = self->opts.reconnect_ivl_ms;
    self->ping_at_ms = now_ms + self->opts.heartbeat_ivl_ms;
    s_event (self, ZL_LINK_CONNECTED, "connected to %s", self->endpoint);
    // what waited for a connection goes first, in order
    for (size_t at = 0; at < self->pending_len;) {
        uint64_t size;
        memcpy (&size, self->pending + at, sizeof size);
        zl_zmtp_send (self->zmtp, self->pending + at + sizeof size, size, false);
        at += sizeof size + size;
    }
    self->pending_len = self->n_pending = 0;
}

static void
s_on_failure (zl_link_t *self, int64_t now_ms)
{
    zl_zmtp_failure_t why = zl_zmtp_failure (self->zmtp);
    if (self->state == L_READY || why == ZL_ZMTP_FAIL_TOO_LARGE) {
        s_lost (self, now_ms, zl_zmtp_error (self->zmtp));
        return;
    }
    // refused in the handshake: libzmq dials no more either
    s_event (self, ZL_LINK_REFUSED, "%s", zl_zmtp_error (self->zmtp));
    s_last_event (self)->auth = why == ZL_ZMTP_FAIL_AUTH;
    s_last_event (self)->mechanism = why == ZL_ZMTP_FAIL_MECHANISM;
    s_write (self, now_ms);
    s_drop_socket (self);
    self->state = L_STOPPED;
}

//  Parse what was read: handshake steps, then the next frame. 1 with a
//  frame in `held`, 0 when none is whole.
static int
s_parse (zl_link_t *self, int64_t now_ms)
{
    if (self->held)
        return 1;
    if (self->lent) // parsing on would move the frame lent out
        return 0;
    while (self->zmtp) {
        zl_zmtp_frame_t f;
        zl_zmtp_rc_t rc = zl_zmtp_next (self->zmtp, &f);
        const uint8_t *out;
        if (zl_zmtp_out (self->zmtp, &out) && rc != ZL_ZMTP_ERROR)
            s_write (self, now_ms); // handshake steps, PONGs
        if (!self->zmtp)
            return 0;
        switch (rc) {
        case ZL_ZMTP_AGAIN: return 0;
        case ZL_ZMTP_READY:
            s_on_ready (self, now_ms);
            s_write (self, now_ms);
            continue;
        case ZL_ZMTP_ERROR: s_on_failure (self, now_ms); return 0;
        case ZL_ZMTP_FRAME:
            self->held = true;
            self->held_data = f.data;
            self->held_size = f.size;
            self->held_more = f.more;
            return 1;
        }
    }
    return 0;
}

//  Read once. Returns true if bytes came.
static bool
s_read (zl_link_t *self, int64_t now_ms)
{
    if (!self->zmtp || self->held || self->lent)
        return false;
    if (self->drained) { // a system call that would say EAGAIN
        if (!self->owner_polls)
            self->drained = false;
        return false;
    }
    size_t room;
    uint8_t *space = zl_zmtp_in_space (self->zmtp, 0, &room);
    ssize_t r = recv (self->fd, space, room, MSG_DONTWAIT);
    if (r > 0) {
        self->drained = (size_t)r < room;
        zl_zmtp_in_commit (self->zmtp, (size_t)r);
        self->heard_ms = now_ms;
        return true;
    }
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        self->drained = self->owner_polls;
        return false;
    }
    if (r < 0 && errno == EINTR)
        return false;
    s_lost (self, now_ms, r == 0 ? "the broker closed the connection" : strerror (errno));
    return false;
}

//  True if input waits in the kernel (so the peer is not silent).
static bool
s_input_waits (zl_link_t *self)
{
    struct pollfd p = {self->fd, POLLIN, 0};
    return poll (&p, 1, 0) > 0;
}

// ---------------------------------------------------------------- the API
static int
s_parse_endpoint (zl_link_t *self, const char *endpoint, char *err, size_t errlen)
{
    if (!strncmp (endpoint, "ipc://", 6)) {
        const char *path = endpoint + 6;
        if (!*path || strlen (path) >= sizeof self->path) {
            snprintf (err, errlen, "bad endpoint '%s': the path must be 1 to %zu bytes", endpoint,
                      sizeof self->path - 1);
            return -1;
        }
        self->ipc = true;
        snprintf (self->path, sizeof self->path, "%s", path);
        return 0;
    }
    if (strncmp (endpoint, "tcp://", 6) != 0) {
        snprintf (err, errlen,
                  "bad endpoint '%s': tcp://HOST:PORT or ipc://PATH (this client does not speak "
                  "inproc://)",
                  endpoint);
        return -1;
    }
    const char *spec = endpoint + 6, *colon = strrchr (spec, ':');
    size_t host_len = colon ? (size_t)(colon - spec) : 0;
    char *end;
    long port = colon ? strtol (colon + 1, &end, 10) : 0;
    if (!colon || !host_len || host_len >= sizeof self->host || !colon[1] || *end || port <= 0 ||
        port > 65535) {
        snprintf (err, errlen, "bad endpoint '%s': expected tcp://HOST:PORT", endpoint);
        return -1;
    }
    if (spec[0] == '[' && spec[host_len - 1] == ']') { // [v6]
        spec++;
        host_len -= 2;
    }
    memcpy (self->host, spec, host_len);
    self->host[host_len] = '\0';
    snprintf (self->port, sizeof self->port, "%ld", port);
    return 0;
}

int
zl_link_check_endpoint (const char *endpoint, char *err, size_t errlen)
{
    zl_link_t probe;
    return s_parse_endpoint (&probe, endpoint, err, errlen);
}

zl_link_t *
zl_link_new (const char *endpoint, const zl_link_opts_t *opts, char *err, size_t errlen)
{
    zl_link_t *self = ZL_NEW (zl_link_t);
    self->fd = -1;
    if (s_parse_endpoint (self, endpoint, err, errlen) != 0) {
        free (self);
        return NULL;
    }
    self->opts = *opts;
    if (opts->curve && zl_curve_enabled (opts->curve)) {
        if (zl_zmtp_z85_key (opts->curve->public_key, self->public_key) != 0 ||
            zl_zmtp_z85_key (opts->curve->secret_key, self->secret_key) != 0 ||
            zl_zmtp_z85_key (opts->curve->server_public, self->server_key) != 0) {
            snprintf (err, errlen, "the CURVE keys are not 40-character Z85 keys");
            free (self);
            return NULL;
        }
        self->curve = true;
    }
    self->opts.curve = NULL;
    if (!self->opts.hwm)
        self->opts.hwm = 1000;
    if (!self->opts.reconnect_ivl_ms)
        self->opts.reconnect_ivl_ms = 100;
    if (!self->opts.heartbeat_timeout_ms)
        self->opts.heartbeat_timeout_ms = self->opts.heartbeat_ivl_ms;
    self->ivl_ms = self->opts.reconnect_ivl_ms;
    self->endpoint = zl_strdup (endpoint);
    self->state = L_WAIT;
    self->dial_at_ms = 0; // at the first pump
    return self;
}

void
zl_link_destroy (zl_link_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_link_t *self = *self_p;
    s_drop_socket (self);
    free (self->pending);
    free (self->endpoint);
    memset (self, 0, sizeof *self); // the keys
    free (self);
    *self_p = NULL;
}

int
zl_link_fd (const zl_link_t *self)
{
    return self->fd;
}

uint64_t
zl_link_socket_serial (const zl_link_t *self)
{
    return self->sockets;
}

short
zl_link_poll_events (const zl_link_t *self)
{
    if (self->fd < 0)
        return 0;
    if (self->state == L_CONNECTING)
        return POLLOUT;
    return (short)(POLLIN | (self->blocked ? POLLOUT : 0));
}

int64_t
zl_link_timeout (const zl_link_t *self, int64_t now_ms)
{
    int64_t due = -1;
    switch (self->state) {
    case L_WAIT: due = self->dial_at_ms; break;
    case L_CONNECTING:
    case L_HANDSHAKE: due = self->dialled_ms + HANDSHAKE_MS; break;
    case L_READY:
        if (self->opts.heartbeat_ivl_ms) {
            due = self->ping_at_ms;
            int64_t silent = self->heard_ms + self->opts.heartbeat_timeout_ms;
            if (silent < due)
                due = silent;
        }
        break;
    case L_STOPPED: break;
    }
    if (zl_link_pending (self))
        return 0;
    return due < 0 ? -1 : due > now_ms ? due - now_ms : 0;
}

void
zl_link_polled (zl_link_t *self, short revents)
{
    self->owner_polls = true;
    self->drained = !(revents & (POLLIN | POLLERR | POLLHUP));
}

void
zl_link_pump (zl_link_t *self, int64_t now_ms)
{
    if (self->state == L_WAIT && now_ms >= self->dial_at_ms)
        s_dial (self, now_ms);
    if (self->state == L_CONNECTING)
        s_check_connect (self, now_ms);
    if (self->state == L_HANDSHAKE || self->state == L_READY) {
        s_write (self, now_ms);
        while (!self->held && !self->lent && self->zmtp && !s_parse (self, now_ms) &&
               s_read (self, now_ms))
            ;
    }
    if ((self->state == L_CONNECTING || self->state == L_HANDSHAKE) &&
        now_ms - self->dialled_ms >= HANDSHAKE_MS)
        s_lost (self, now_ms, "no handshake within 30 s");
    if (self->state == L_READY && self->opts.heartbeat_ivl_ms) {
        if (now_ms - self->heard_ms >= self->opts.heartbeat_timeout_ms && !s_input_waits (self)) {
            s_lost (self, now_ms, "the broker is silent (no answer to heartbeats)");
            return;
        }
        if (now_ms >= self->ping_at_ms) {
            zl_zmtp_ping (self->zmtp, self->opts.heartbeat_ttl_ms);
            self->ping_at_ms = now_ms + self->opts.heartbeat_ivl_ms;
            s_write (self, now_ms);
        }
    }
}

int
zl_link_send (zl_link_t *self, const void *data, size_t size)
{
    if (self->state == L_READY) {
        const uint8_t *out;
        if (zl_zmtp_out (self->zmtp, &out) > MAX_WRITTEN) {
            errno = EAGAIN;
            return -1;
        }
        zl_zmtp_send (self->zmtp, data, size, false);
        return 0;
    }
    if (self->opts.immediate || self->n_pending >= self->opts.hwm) {
        errno = EAGAIN;
        return -1;
    }
    uint64_t n = size;
    size_t need = self->pending_len + sizeof n + size;
    if (need > self->pending_cap) {
        self->pending_cap = need * 2;
        self->pending = zl_realloc (self->pending, self->pending_cap);
    }
    memcpy (self->pending + self->pending_len, &n, sizeof n);
    if (size)
        memcpy (self->pending + self->pending_len + sizeof n, data, size);
    self->pending_len = need;
    self->n_pending++;
    return 0;
}

void
zl_link_flush (zl_link_t *self)
{
    if (self->zmtp && !self->blocked)
        s_write (self, zl_clock_mono_ms ());
}

int
zl_link_recv (zl_link_t *self, const void **data, size_t *size, bool *more)
{
    self->lent = false; // the frame returned last time is done with
    if (!self->zmtp)
        return 0;
    int64_t now_ms = zl_clock_mono_ms ();
    for (;;) {
        if (s_parse (self, now_ms)) {
            *data = self->held_data;
            *size = self->held_size;
            *more = self->held_more;
            self->held = false;
            self->lent = true;
            return 1;
        }
        if (!self->zmtp || !s_read (self, now_ms))
            return 0;
    }
}

int
zl_link_event (zl_link_t *self, zl_link_event_t *ev)
{
    if (!self->n_events)
        return 0;
    *ev = self->events[self->ev_head];
    self->ev_head = (self->ev_head + 1) % EVENTS;
    self->n_events--;
    return 1;
}

bool
zl_link_pending (const zl_link_t *self)
{
    return self->held || self->n_events || (self->zmtp && zl_zmtp_whole_frame (self->zmtp));
}

bool
zl_link_connected (const zl_link_t *self)
{
    return self->state == L_READY;
}

bool
zl_link_blocked (const zl_link_t *self)
{
    return self->blocked;
}

const char *
zl_link_endpoint (const zl_link_t *self)
{
    return self->endpoint;
}

void
zl_link_redial (zl_link_t *self)
{
    s_drop_socket (self);
    self->state = L_WAIT;
    self->dial_at_ms = 0;
    self->ivl_ms = self->opts.reconnect_ivl_ms;
}
