/*  router: see router.h. A native router keeps its listeners and
    connections in one epoll set (level-triggered), which the loop polls as
    one file descriptor. Each connection is read once per look at the set
    (64 KiB at most), so a busy client cannot starve the others; what it
    read is parsed frame by frame as the broker asks for messages. Writes
    collect in each connection's output (zmtp.h) and go out at
    zl_router_flush, one write per connection per turn. */
#define _GNU_SOURCE
#include "router.h"

#include "clock.h"
#include "dlist.h"
#include "log.h"
#include "u64map.h"
#include "zl_alloc.h"
#include "zmtp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <czmq.h>
#include <zmq.h>

#define MAX_LISTENERS 4
#define EVENTS_PER_LOOK 256
#define SWEEP_EVERY_MS 100
#define BACKLOG 100 // libzmq's ZMQ_BACKLOG default

typedef enum { KIND_LISTENER, KIND_CONN } kind_t;

typedef struct {
    kind_t kind; // first: what an epoll event points at
    int fd;
    bool ipc;
    bool paused; // out of the epoll set: too many open files at the last accept
    char path[sizeof ((struct sockaddr_un *)0)->sun_path];
} listener_t;

typedef struct {
    kind_t kind; // first
    int fd;
    zl_zmtp_t *zmtp;
    uint32_t id;   // the routing id's number once the handshake ended, else 0
    bool readable; // the last look found input (or a hang-up) to read
    bool want_out; // EPOLLOUT is in its events: output waits for the kernel
    bool skipping; // dropping the rest of a multi-frame message
    int64_t opened_ms, heard_ms;
    char address[INET6_ADDRSTRLEN];
    char user_id[41];
    zl_dlink_t all, ready, dirty; // in every connection; in the ready and dirty queues
} conn_t;

#define CONN_OF(l, field) ((conn_t *)((char *)(l)-offsetof (conn_t, field)))

struct _zl_router_t {
    zl_router_opts_t opts;
    // native
    int epfd;
    listener_t listeners[MAX_LISTENERS];
    size_t n_listeners;
    zl_dlink_t all, ready, dirty; // sentinels
    size_t n_conns;
    zl_u64map_t *by_id; // routing id number -> conn (handshakes done)
    uint32_t next_id;
    int64_t next_sweep_ms;
    uint64_t refused;
    bool looked; // the epoll set was looked at since the last poll (zl_router_poll_item)
    // libzmq (inproc)
    void *ctx_sock; // a libzmq ROUTER, or NULL
    zmq_msg_t body; // the last message's body, held until the next recv
    bool has_body;
    char zmq_user_id[41];
};

// ---------------------------------------------------------------- connections
static void
s_mark_dirty (zl_router_t *self, conn_t *c)
{
    if (!zl_dlink_linked (&c->dirty))
        zl_dlink_push (&self->dirty, &c->dirty);
}

static void
s_set_events (zl_router_t *self, conn_t *c, bool out)
{
    if (c->want_out == out)
        return;
    struct epoll_event ev = {.events = EPOLLIN | (out ? EPOLLOUT : 0), .data.ptr = c};
    epoll_ctl (self->epfd, EPOLL_CTL_MOD, c->fd, &ev);
    c->want_out = out;
}

static void
s_close (zl_router_t *self, conn_t *c, const char *why)
{
    zl_debug ("broker", "%s: connection %u%s%s closed: %s", self->opts.name, c->id,
              c->address[0] ? " from " : "", c->address, why);
    epoll_ctl (self->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close (c->fd);
    if (c->id)
        zl_u64map_remove (self->by_id, c->id);
    zl_dlink_unlink (&c->all);
    zl_dlink_unlink (&c->ready);
    zl_dlink_unlink (&c->dirty);
    zl_zmtp_destroy (&c->zmtp);
    free (c);
    self->n_conns--;
}

//  A handshake that failed: counted and logged as a refusal, the ERROR
//  command (if one was made) sent on a best-effort write, then closed.
static void
s_refuse (zl_router_t *self, conn_t *c)
{
    if (c->id == 0) { // the handshake failed
        self->refused++;
        zl_warn ("broker", "%s: refused a connection%s%s: %s", self->opts.name,
                 c->address[0] ? " from " : "", c->address, zl_zmtp_error (c->zmtp));
    } else {
        zl_warn ("broker", "%s: dropped connection %u%s%s: %s", self->opts.name, c->id,
                 c->address[0] ? " from " : "", c->address, zl_zmtp_error (c->zmtp));
    }
    const uint8_t *data;
    size_t n = zl_zmtp_out (c->zmtp, &data);
    if (n && send (c->fd, data, n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
        zl_debug ("broker", "%s: the refusal was not sent: %s", self->opts.name, strerror (errno));
    s_close (self, c, zl_zmtp_error (c->zmtp));
}

//  Write what waits for `c`; what the kernel does not take waits for
//  EPOLLOUT. Returns false if the connection was closed.
static bool
s_write (zl_router_t *self, conn_t *c)
{
    for (;;) {
        const uint8_t *data;
        size_t n = zl_zmtp_out (c->zmtp, &data);
        if (n == 0) {
            s_set_events (self, c, false);
            return true;
        }
        ssize_t w = send (c->fd, data, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            zl_zmtp_sent (c->zmtp, (size_t)w);
            continue;
        }
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            s_set_events (self, c, true);
            return true;
        }
        if (w < 0 && errno == EINTR)
            continue;
        s_close (self, c, w < 0 ? strerror (errno) : "write returned 0");
        return false;
    }
}

static void
s_on_handshake (zl_router_t *self, conn_t *c)
{
    do // a 32-bit number of its own, never 0
        c->id = self->next_id++;
    while (c->id == 0 || zl_u64map_get (self->by_id, c->id));
    zl_u64map_put (self->by_id, c->id, c);
    const uint8_t *key = zl_zmtp_peer_key (c->zmtp);
    if (key && !zmq_z85_encode (c->user_id, key, 32))
        c->user_id[0] = '\0';
    zl_debug ("broker", "%s: connection %u%s%s ready%s%s", self->opts.name, c->id,
              c->address[0] ? " from " : "", c->address, c->user_id[0] ? ", key " : "", c->user_id);
}

static void
s_accept (zl_router_t *self, listener_t *l, int64_t now_ms)
{
    for (;;) {
        struct sockaddr_storage sa;
        socklen_t len = sizeof sa;
        int fd = accept4 (l->fd, (struct sockaddr *)&sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                // the listener stays readable: out of the set until the next sweep
                zl_warn ("broker", "%s: cannot accept a connection: %s", self->opts.name,
                         strerror (errno));
                epoll_ctl (self->epfd, EPOLL_CTL_DEL, l->fd, NULL);
                l->paused = true;
            }
            return;
        }
        conn_t *c = ZL_NEW (conn_t);
        c->kind = KIND_CONN;
        c->fd = fd;
        c->opened_ms = c->heard_ms = now_ms;
        zl_dlink_init (&c->ready);
        zl_dlink_init (&c->dirty);
        if (!l->ipc) {
            int one = 1;
            setsockopt (fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            void *addr = sa.ss_family == AF_INET6 ? (void *)&((struct sockaddr_in6 *)&sa)->sin6_addr
                                                  : (void *)&((struct sockaddr_in *)&sa)->sin_addr;
            if (!inet_ntop (sa.ss_family, addr, c->address, sizeof c->address))
                c->address[0] = '\0';
        }
        zl_zmtp_opts_t zo = {.server = true,
                             .socket_type = "ROUTER",
                             .curve = self->opts.curve,
                             .auth = self->opts.auth,
                             .auth_arg = self->opts.auth_arg,
                             .max_frame = self->opts.max_frame};
        memcpy (zo.public_key, self->opts.public_key, 32);
        memcpy (zo.secret_key, self->opts.secret_key, 32);
        c->zmtp = zl_zmtp_new (&zo);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (!c->zmtp || epoll_ctl (self->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            zl_zmtp_destroy (&c->zmtp);
            close (fd);
            free (c);
            continue;
        }
        zl_dlink_push (&self->all, &c->all);
        self->n_conns++;
        s_mark_dirty (self, c); // the greeting
    }
}

//  One look at the epoll set: accept, note who has input, write where the
//  kernel took none before.
static void
s_look (zl_router_t *self)
{
    struct epoll_event ev[EVENTS_PER_LOOK];
    int n = epoll_wait (self->epfd, ev, EVENTS_PER_LOOK, 0);
    int64_t now_ms = n > 0 ? zl_clock_mono_ms () : 0;
    for (int i = 0; i < n; i++) {
        if (*(kind_t *)ev[i].data.ptr == KIND_LISTENER) {
            s_accept (self, ev[i].data.ptr, now_ms);
            continue;
        }
        conn_t *c = ev[i].data.ptr;
        if ((ev[i].events & EPOLLOUT) && !s_write (self, c))
            continue;
        if (ev[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) {
            c->readable = true;
            if (!zl_dlink_linked (&c->ready))
                zl_dlink_push (&self->ready, &c->ready);
        }
    }
}

//  Read once into `c`. Returns false if the connection ended.
static bool
s_read (zl_router_t *self, conn_t *c)
{
    size_t room;
    uint8_t *space = zl_zmtp_in_space (c->zmtp, 0, &room);
    ssize_t r = recv (c->fd, space, room, MSG_DONTWAIT);
    if (r > 0) {
        zl_zmtp_in_commit (c->zmtp, (size_t)r);
        c->heard_ms = zl_clock_mono_ms ();
        return true;
    }
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return true;
    const char *why = r == 0 ? "closed by the peer" : strerror (errno);
    if (c->id == 0) {    // as libzmq's HANDSHAKE_FAILED_NO_DETAIL: a refusal too
        self->refused++; // (a libzmq client closes at once on a mechanism mismatch)
        zl_warn ("broker", "%s: a connection%s%s ended during its handshake: %s", self->opts.name,
                 c->address[0] ? " from " : "", c->address, why);
    }
    s_close (self, c, why);
    return false;
}

// ---------------------------------------------------------------- libzmq (inproc)
static int
s_zmq_recv (zl_router_t *self, zl_router_msg_t *msg)
{
    if (self->has_body) {
        zmq_msg_close (&self->body);
        self->has_body = false;
    }
    for (;;) {
        zmq_msg_t id;
        zmq_msg_init (&id);
        if (zmq_msg_recv (&id, self->ctx_sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close (&id);
            return 0;
        }
        size_t idlen = zmq_msg_size (&id);
        msg->peer.len = (uint8_t)(idlen > ZL_PEER_ID_MAX ? ZL_PEER_ID_MAX : idlen);
        memcpy (msg->peer.data, zmq_msg_data (&id), msg->peer.len);
        bool more = zmq_msg_more (&id);
        zmq_msg_close (&id);
        if (!more)
            continue; // a ROUTER always delivers id + body
        zmq_msg_init (&self->body);
        if (zmq_msg_recv (&self->body, self->ctx_sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close (&self->body);
            continue;
        }
        self->has_body = true;
        msg->extra_frames = zmq_msg_more (&self->body);
        for (bool again = msg->extra_frames; again;) { // drop the rest
            zmq_msg_t rest;
            zmq_msg_init (&rest);
            again = zmq_msg_recv (&rest, self->ctx_sock, ZMQ_DONTWAIT) >= 0 && zmq_msg_more (&rest);
            zmq_msg_close (&rest);
        }
        msg->data = zmq_msg_data (&self->body);
        msg->size = zmq_msg_size (&self->body);
        const char *user = zmq_msg_gets (&self->body, "User-Id");
        snprintf (self->zmq_user_id, sizeof self->zmq_user_id, "%s", user ? user : "");
        msg->user_id = user ? self->zmq_user_id : NULL;
        msg->peer_address = zmq_msg_gets (&self->body, "Peer-Address");
        return 1;
    }
}

static int
s_zmq_bind (zl_router_t *self, const char *endpoint, char *bound, size_t bound_len, char *err,
            size_t errlen)
{
    if (!self->ctx_sock) {
        void *ctx = zsys_init ();
        void *s = zmq_socket (ctx, ZMQ_ROUTER);
        int one = 1, hwm = 100000, linger = 0;
        int64_t max_msg = (int64_t)self->opts.max_frame;
        zmq_setsockopt (s, ZMQ_MAXMSGSIZE, &max_msg, sizeof max_msg);
        zmq_setsockopt (s, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
        zmq_setsockopt (s, ZMQ_SNDHWM, &hwm, sizeof hwm);
        zmq_setsockopt (s, ZMQ_RCVHWM, &hwm, sizeof hwm);
        zmq_setsockopt (s, ZMQ_LINGER, &linger, sizeof linger);
        self->ctx_sock = s;
    }
    if (zmq_bind (self->ctx_sock, endpoint) != 0) {
        snprintf (err, errlen, "cannot bind %s: %s", endpoint, zmq_strerror (errno));
        return -1;
    }
    zmq_getsockopt (self->ctx_sock, ZMQ_LAST_ENDPOINT, bound, &bound_len);
    return 0;
}

// ---------------------------------------------------------------- binding
static int
s_listen_fd (zl_router_t *self, int fd, bool ipc, const char *path)
{
    listener_t *l = &self->listeners[self->n_listeners++];
    l->kind = KIND_LISTENER;
    l->fd = fd;
    l->ipc = ipc;
    snprintf (l->path, sizeof l->path, "%s", path ? path : "");
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = l};
    return epoll_ctl (self->epfd, EPOLL_CTL_ADD, fd, &ev);
}

static int
s_bind_tcp (zl_router_t *self, const char *spec, char *bound, size_t bound_len, char *err,
            size_t errlen)
{
    char host[256];
    const char *colon = strrchr (spec, ':');
    if (!colon || colon == spec || (size_t)(colon - spec) >= sizeof host) {
        snprintf (err, errlen, "cannot bind tcp://%s: expected tcp://HOST:PORT", spec);
        return -1;
    }
    memcpy (host, spec, (size_t)(colon - spec));
    host[colon - spec] = '\0';
    const char *port_text = colon + 1;
    long port = 0;
    if (strcmp (port_text, "*") != 0) {
        char *end;
        port = strtol (port_text, &end, 10);
        if (!*port_text || *end || port < 0 || port > 65535) {
            snprintf (err, errlen, "cannot bind tcp://%s: bad port '%s'", spec, port_text);
            return -1;
        }
    }
    struct sockaddr_storage sa = {0};
    socklen_t sa_len;
    size_t hl = strlen (host);
    if (!strcmp (host, "*") || !strcmp (host, "0.0.0.0")) {
        struct sockaddr_in *in = (struct sockaddr_in *)&sa;
        in->sin_family = AF_INET;
        in->sin_addr.s_addr = htonl (INADDR_ANY);
        sa_len = sizeof *in;
    } else {
        if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
            memmove (host, host + 1, hl - 2);
            host[hl - 2] = '\0';
        }
        struct addrinfo hints = {.ai_flags = AI_PASSIVE, .ai_socktype = SOCK_STREAM}, *res;
        int rc = getaddrinfo (host, NULL, &hints, &res);
        if (rc != 0) {
            snprintf (err, errlen, "cannot bind tcp://%s: %s", spec, gai_strerror (rc));
            return -1;
        }
        struct addrinfo *pick = res; // an IPv4 address first, as libzmq without ZMQ_IPV6
        for (struct addrinfo *a = res; a; a = a->ai_next)
            if (a->ai_family == AF_INET) {
                pick = a;
                break;
            }
        memcpy (&sa, pick->ai_addr, pick->ai_addrlen);
        sa_len = pick->ai_addrlen;
        freeaddrinfo (res);
    }
    if (sa.ss_family == AF_INET)
        ((struct sockaddr_in *)&sa)->sin_port = htons ((uint16_t)port);
    else
        ((struct sockaddr_in6 *)&sa)->sin6_port = htons ((uint16_t)port);
    int fd = socket (sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd >= 0)
        setsockopt (fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind (fd, (struct sockaddr *)&sa, sa_len) != 0 || listen (fd, BACKLOG) != 0) {
        snprintf (err, errlen, "cannot bind tcp://%s: %s", spec, strerror (errno));
        if (fd >= 0)
            close (fd);
        return -1;
    }
    sa_len = sizeof sa;
    getsockname (fd, (struct sockaddr *)&sa, &sa_len);
    char text[INET6_ADDRSTRLEN];
    bool v6 = sa.ss_family == AF_INET6;
    void *addr = v6 ? (void *)&((struct sockaddr_in6 *)&sa)->sin6_addr
                    : (void *)&((struct sockaddr_in *)&sa)->sin_addr;
    inet_ntop (sa.ss_family, addr, text, sizeof text);
    unsigned bound_port = ntohs (v6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                    : ((struct sockaddr_in *)&sa)->sin_port);
    snprintf (bound, bound_len, "tcp://%s%s%s:%u", v6 ? "[" : "", text, v6 ? "]" : "", bound_port);
    return s_listen_fd (self, fd, false, NULL);
}

static int
s_bind_ipc (zl_router_t *self, const char *path, char *bound, size_t bound_len, char *err,
            size_t errlen)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    char made[sizeof sa.sun_path];
    if (!strcmp (path, "*")) { // as libzmq: a fresh name of its own
        snprintf (made, sizeof made, "/tmp/zlane-ipc-XXXXXX");
        int tmp = mkstemp (made);
        if (tmp >= 0)
            close (tmp);
        path = made;
    }
    if (strlen (path) >= sizeof sa.sun_path || !*path) {
        snprintf (err, errlen, "cannot bind ipc://%s: the path must be 1 to %zu bytes", path,
                  sizeof sa.sun_path - 1);
        return -1;
    }
    memcpy (sa.sun_path, path, strlen (path) + 1);
    unlink (path); // a socket file left by a broker that died
    int fd = socket (AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind (fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen (fd, BACKLOG) != 0) {
        snprintf (err, errlen, "cannot bind ipc://%s: %s", path, strerror (errno));
        if (fd >= 0)
            close (fd);
        return -1;
    }
    snprintf (bound, bound_len, "ipc://%s", path);
    return s_listen_fd (self, fd, true, path);
}

// ---------------------------------------------------------------- the API
zl_router_t *
zl_router_new (const zl_router_opts_t *opts)
{
    zl_router_t *self = ZL_NEW (zl_router_t);
    self->opts = *opts;
    if (!self->opts.max_out)
        self->opts.max_out = 64u << 20;
    self->epfd = epoll_create1 (EPOLL_CLOEXEC);
    if (self->epfd < 0) {
        free (self);
        return NULL;
    }
    zl_dlink_init (&self->all);
    zl_dlink_init (&self->ready);
    zl_dlink_init (&self->dirty);
    self->by_id = zl_u64map_new ();
    // libzmq starts its routing ids at a random number too
    uint32_t seed = (uint32_t)zl_clock_mono_us () ^ (uint32_t)getpid () * 2654435761u;
    self->next_id = seed ? seed : 1;
    return self;
}

void
zl_router_destroy (zl_router_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_router_t *self = *self_p;
    while (zl_dlink_linked (&self->all))
        s_close (self, CONN_OF (self->all.next, all), "the broker stops");
    for (size_t i = 0; i < self->n_listeners; i++) {
        close (self->listeners[i].fd);
        if (self->listeners[i].ipc)
            unlink (self->listeners[i].path);
    }
    if (self->has_body)
        zmq_msg_close (&self->body);
    if (self->ctx_sock)
        zmq_close (self->ctx_sock);
    zl_u64map_destroy (&self->by_id);
    close (self->epfd);
    free (self);
    *self_p = NULL;
}

void
zl_router_set_curve (zl_router_t *self, const uint8_t *public_key, const uint8_t *secret_key,
                     bool (*auth) (void *arg, const uint8_t key[32]), void *arg)
{
    self->opts.curve = true;
    memcpy (self->opts.public_key, public_key, 32);
    memcpy (self->opts.secret_key, secret_key, 32);
    self->opts.auth = auth;
    self->opts.auth_arg = arg;
}

int
zl_router_bind (zl_router_t *self, const char *endpoint, char *bound, size_t bound_len, char *err,
                size_t errlen)
{
    if (!strncmp (endpoint, "inproc://", 9))
        return s_zmq_bind (self, endpoint, bound, bound_len, err, errlen);
    if (self->n_listeners == MAX_LISTENERS) {
        snprintf (err, errlen, "cannot bind %s: at most %d endpoints a socket", endpoint,
                  MAX_LISTENERS);
        return -1;
    }
    if (!strncmp (endpoint, "tcp://", 6))
        return s_bind_tcp (self, endpoint + 6, bound, bound_len, err, errlen);
    if (!strncmp (endpoint, "ipc://", 6))
        return s_bind_ipc (self, endpoint + 6, bound, bound_len, err, errlen);
    snprintf (err, errlen, "cannot bind %s: tcp://, ipc:// or inproc:// only", endpoint);
    return -1;
}

void
zl_router_poll_item (zl_router_t *self, void **socket, int *fd)
{
    *socket = self->ctx_sock && !self->n_listeners ? self->ctx_sock : NULL;
    *fd = *socket ? 0 : self->epfd;
    self->looked = false;
}

bool
zl_router_pending (const zl_router_t *self)
{
    return zl_dlink_linked (&self->ready);
}

int
zl_router_recv (zl_router_t *self, zl_router_msg_t *msg)
{
    if (self->ctx_sock && !self->n_listeners)
        return s_zmq_recv (self, msg);
    for (;;) {
        if (!zl_dlink_linked (&self->ready)) {
            // one look a poll: what comes after it makes the epoll set
            // readable for the next poll (a look that finds nothing is a
            // system call a turn for nothing)
            if (self->looked)
                return 0;
            s_look (self);
            self->looked = true;
            continue;
        }
        conn_t *c = CONN_OF (self->ready.next, ready);
        zl_zmtp_frame_t f;
        zl_zmtp_rc_t rc = zl_zmtp_next (c->zmtp, &f);
        const uint8_t *out;
        if (zl_zmtp_out (c->zmtp, &out))
            s_mark_dirty (self, c); // handshake replies, PONGs
        if (rc == ZL_ZMTP_ERROR) {
            s_refuse (self, c);
            continue;
        }
        if (rc == ZL_ZMTP_READY) {
            s_on_handshake (self, c);
            continue;
        }
        if (rc == ZL_ZMTP_AGAIN) {
            if (c->readable) {
                c->readable = false;
                s_read (self, c);
            } else {
                zl_dlink_unlink (&c->ready); // the next look finds it if more comes
            }
            continue;
        }
        if (c->skipping) { // the tail of a multi-frame message
            c->skipping = f.more;
            continue;
        }
        c->skipping = f.more;
        msg->peer.len = 5;
        msg->peer.data[0] = 0;
        msg->peer.data[1] = (uint8_t)(c->id >> 24);
        msg->peer.data[2] = (uint8_t)(c->id >> 16);
        msg->peer.data[3] = (uint8_t)(c->id >> 8);
        msg->peer.data[4] = (uint8_t)c->id;
        msg->data = f.data;
        msg->size = f.size;
        msg->extra_frames = f.more;
        msg->user_id = c->user_id[0] ? c->user_id : NULL;
        msg->peer_address = c->address[0] ? c->address : NULL;
        return 1;
    }
}

static conn_t *
s_lookup (zl_router_t *self, const zl_peer_t *peer)
{
    if (peer->len != 5 || peer->data[0] != 0)
        return NULL;
    uint32_t id = (uint32_t)peer->data[1] << 24 | (uint32_t)peer->data[2] << 16 |
                  (uint32_t)peer->data[3] << 8 | peer->data[4];
    return id ? zl_u64map_get (self->by_id, id) : NULL;
}

int
zl_router_send (zl_router_t *self, const zl_peer_t *peer, const void *data, size_t size)
{
    if (self->ctx_sock && !self->n_listeners) {
        if (zmq_send (self->ctx_sock, peer->data, peer->len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
            return -1;
        return zmq_send (self->ctx_sock, data, size, ZMQ_DONTWAIT) < 0 ? -1 : 0;
    }
    conn_t *c = s_lookup (self, peer);
    if (!c) {
        errno = EHOSTUNREACH;
        return -1;
    }
    const uint8_t *out;
    if (zl_zmtp_out (c->zmtp, &out) > self->opts.max_out) {
        errno = EAGAIN;
        return -1;
    }
    if (zl_zmtp_send (c->zmtp, data, size, false) != 0) {
        errno = EHOSTUNREACH;
        return -1;
    }
    s_mark_dirty (self, c);
    return 0;
}

int
zl_router_send_msg (zl_router_t *self, const zl_peer_t *peer, zl_codec_t *codec,
                    const zl_msg_t *msg)
{
    size_t size;
    const void *data = zl_codec_encode (codec, msg, &size);
    if (!data) {
        errno = EINVAL;
        return -1;
    }
    return zl_router_send (self, peer, data, size);
}

void
zl_router_flush (zl_router_t *self)
{
    while (zl_dlink_linked (&self->dirty)) {
        conn_t *c = CONN_OF (self->dirty.next, dirty);
        zl_dlink_unlink (&c->dirty);
        s_write (self, c);
    }
}

void
zl_router_sweep (zl_router_t *self, int64_t now_ms)
{
    if (now_ms < self->next_sweep_ms)
        return;
    self->next_sweep_ms = now_ms + SWEEP_EVERY_MS;
    for (size_t i = 0; i < self->n_listeners; i++) {
        listener_t *l = &self->listeners[i];
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = l};
        if (l->paused && epoll_ctl (self->epfd, EPOLL_CTL_ADD, l->fd, &ev) == 0)
            l->paused = false;
    }
    for (zl_dlink_t *l = self->all.next, *next; l != &self->all; l = next) {
        next = l->next;
        conn_t *c = CONN_OF (l, all);
        uint32_t ttl = zl_zmtp_peer_ttl_ms (c->zmtp);
        if (!zl_zmtp_ready (c->zmtp) && now_ms - c->opened_ms > ZL_ROUTER_HANDSHAKE_MS) {
            self->refused++;
            zl_warn ("broker", "%s: refused a connection%s%s: no handshake within %d ms",
                     self->opts.name, c->address[0] ? " from " : "", c->address,
                     ZL_ROUTER_HANDSHAKE_MS);
            s_close (self, c, "handshake timed out");
        } else if (ttl && now_ms - c->heard_ms > ttl) {
            s_close (self, c, "silent for longer than its heartbeat TTL");
        }
    }
}

uint64_t
zl_router_refused (zl_router_t *self)
{
    uint64_t n = self->refused;
    self->refused = 0;
    return n;
}

size_t
zl_router_connections (const zl_router_t *self)
{
    return self->n_conns;
}
