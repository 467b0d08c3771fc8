#include "http.h"

#include "log.h"
#include "zl_alloc.h"

#include <czmq.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define ID_MAX 256
#define ADDR_MAX 64 // a peer's address as libzmq gives it ("127.0.0.1", "::1")
#define RECENT 128  // closed connections whose late notifications are ignored
#define BUF_MIN 256 // a head buffer's first size; it grows to ZL_HTTP_MAX_REQUEST

typedef struct {
    uint8_t id[ID_MAX];
    size_t id_len;
    char addr[ADDR_MAX]; // the peer's IP address ("" if libzmq gave none)
    char *buf;           // the head so far, NUL-terminated (NULL before any byte)
    size_t len, cap;
    int64_t opened_ms;
    uint64_t seq; // order of arrival: the lowest is the oldest
} conn_t;

typedef struct {
    uint8_t id[ID_MAX];
    size_t id_len;
} closed_id_t;

struct _zl_http_t {
    zsock_t *sock;
    char endpoint[256];
    zl_http_page_fn *page;
    void *arg;
    conn_t *conns[ZL_HTTP_MAX_OPEN]; // every connection waiting for its request
    size_t n_conns;
    uint64_t next_seq;
    closed_id_t recent[RECENT]; // ring of ids this side closed
    size_t recent_next;
    zl_http_counts_t counts;
};

zl_http_t *
zl_http_new (const char *endpoint, zl_http_page_fn *page, void *arg, char *err, size_t errlen)
{
    zsock_t *sock = zsock_new (ZMQ_STREAM);
    if (zsock_bind (sock, "%s", endpoint) < 0) {
        snprintf (err, errlen, "cannot bind the metrics endpoint %s: %s", endpoint,
                  zmq_strerror (zmq_errno ()));
        zsock_destroy (&sock);
        return NULL;
    }
    zl_http_t *self = ZL_NEW (zl_http_t);
    self->sock = sock;
    self->page = page;
    self->arg = arg;
    char *last = zsock_last_endpoint (sock);
    snprintf (self->endpoint, sizeof self->endpoint, "%s", last ? last : endpoint);
    free (last);
    return self;
}

void
zl_http_destroy (zl_http_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    zl_http_t *self = *self_p;
    for (size_t i = 0; i < self->n_conns; i++) {
        free (self->conns[i]->buf);
        free (self->conns[i]);
    }
    zsock_destroy (&self->sock);
    free (self);
    *self_p = NULL;
}

void *
zl_http_socket (zl_http_t *self)
{
    return zsock_resolve (self->sock);
}

const char *
zl_http_endpoint (zl_http_t *self)
{
    return self->endpoint;
}

zl_http_counts_t
zl_http_counts (zl_http_t *self)
{
    return self->counts;
}

size_t
zl_http_waiting (zl_http_t *self)
{
    return self->n_conns;
}

// ---------------------------------------------------------------- connections
static conn_t *
s_find (zl_http_t *self, const void *id, size_t id_len)
{
    for (size_t i = 0; i < self->n_conns; i++)
        if (self->conns[i]->id_len == id_len && !memcmp (self->conns[i]->id, id, id_len))
            return self->conns[i];
    return NULL;
}

static bool
s_recently_closed (zl_http_t *self, const void *id, size_t id_len)
{
    for (size_t i = 0; i < RECENT; i++)
        if (self->recent[i].id_len == id_len && !memcmp (self->recent[i].id, id, id_len))
            return true;
    return false;
}

// Send `data` to connection `id`, then close it (an empty frame).
static void
s_send_close (zl_http_t *self, const void *id, size_t id_len, const void *data, size_t len)
{
    void *s = zsock_resolve (self->sock);
    // a routing id that cannot be sent (the peer's queue is full) drops the
    // frame after it: sending that one anyway would start a new message
    if (len && zmq_send (s, id, id_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) == (int)id_len)
        zmq_send (s, data, len, ZMQ_DONTWAIT);
    if (zmq_send (s, id, id_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) == (int)id_len)
        zmq_send (s, "", 0, ZMQ_DONTWAIT);
    closed_id_t *r = &self->recent[self->recent_next];
    self->recent_next = (self->recent_next + 1) % RECENT;
    r->id_len = id_len;
    memcpy (r->id, id, id_len);
}

// Forget connection `c` (closed by either side).
static void
s_drop (zl_http_t *self, conn_t *c)
{
    for (size_t i = 0; i < self->n_conns; i++)
        if (self->conns[i] == c) {
            self->conns[i] = self->conns[--self->n_conns];
            break;
        }
    free (c->buf);
    free (c);
}

// Close `c` unanswered (it is counted as refused) and forget it.
static void
s_close (zl_http_t *self, conn_t *c)
{
    self->counts.refused++;
    s_send_close (self, c->id, c->id_len, NULL, 0);
    s_drop (self, c);
}

// Close `c` unanswered to make room for newer connections.
static void
s_evict (zl_http_t *self, conn_t *c)
{
    zl_debug ("http", "metrics: a connection from %s closed for newer ones", c->addr);
    self->counts.evicted++;
    s_close (self, c);
}

// A connection and how many newer ones its address has, for s_trim.
typedef struct {
    conn_t *c;
    size_t rank;
} ranked_t;

static int
s_newest_first (const void *a, const void *b)
{
    uint64_t x = ((const ranked_t *)a)->c->seq, y = ((const ranked_t *)b)->c->seq;
    return x < y ? 1 : x > y ? -1 : 0;
}

static int
s_lowest_rank_first (const void *a, const void *b)
{
    const ranked_t *x = a, *y = b;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return s_newest_first (a, b);
}

// Cut the connections waiting for their request back to the limits: from
// each peer address its newest ZL_HTTP_MAX_PER_ADDR, and of those at most
// ZL_HTTP_MAX_CONNS: every address's newest first, then every address's
// second newest, and so on (among equals the newer). The others are
// evicted. So a crowd from some addresses takes the slots of others last.
static void
s_trim (zl_http_t *self)
{
    if (self->n_conns <= ZL_HTTP_MAX_PER_ADDR)
        return; // no address can be over, nor the whole
    ranked_t by[ZL_HTTP_MAX_OPEN];
    const char *addrs[ZL_HTTP_MAX_OPEN]; // each address once, and how many seen from it
    size_t seen[ZL_HTTP_MAX_OPEN];
    size_t n = self->n_conns, n_addrs = 0;
    for (size_t i = 0; i < n; i++)
        by[i] = (ranked_t){self->conns[i], 0};
    qsort (by, n, sizeof by[0], s_newest_first);
    for (size_t i = 0; i < n; i++) {
        size_t a = 0;
        while (a < n_addrs && strcmp (addrs[a], by[i].c->addr))
            a++;
        if (a == n_addrs) {
            addrs[n_addrs] = by[i].c->addr;
            seen[n_addrs++] = 0;
        }
        by[i].rank = seen[a]++;
    }
    qsort (by, n, sizeof by[0], s_lowest_rank_first);
    for (size_t i = 0; i < n; i++)
        if (i >= ZL_HTTP_MAX_CONNS || by[i].rank >= ZL_HTTP_MAX_PER_ADDR)
            s_evict (self, by[i].c);
}

// A new connection from `addr` (NULL: libzmq gave none).
static void
s_open (zl_http_t *self, const void *id, size_t id_len, const char *addr, int64_t now_ms)
{
    if (self->n_conns == ZL_HTTP_MAX_OPEN)
        s_trim (self); // a flood within one read: cut back now
    conn_t *c = ZL_NEW (conn_t);
    memcpy (c->id, id, id_len);
    c->id_len = id_len;
    snprintf (c->addr, sizeof c->addr, "%s", addr ? addr : "");
    c->opened_ms = now_ms;
    c->seq = self->next_seq++;
    self->conns[self->n_conns++] = c;
}

// Answer `c` with a status and a body (HEAD: the headers only), and close it.
static void
s_answer (zl_http_t *self, conn_t *c, int status, const char *reason, const char *content_type,
          const char *body, size_t len, bool head)
{
    char header[256];
    int n = snprintf (header, sizeof header,
                      "HTTP/1.0 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                      "Connection: close\r\n\r\n",
                      status, reason, content_type, len);
    size_t total = (size_t)n + (head ? 0 : len);
    char *out = zl_malloc (total);
    memcpy (out, header, (size_t)n);
    if (!head && len)
        memcpy (out + n, body, len);
    s_send_close (self, c->id, c->id_len, out, total);
    free (out);
    if (status == 200)
        self->counts.requests++;
    else
        self->counts.refused++;
    s_drop (self, c);
}

static void
s_error (zl_http_t *self, conn_t *c, int status, const char *reason)
{
    char body[96];
    int n = snprintf (body, sizeof body, "%d %s\n", status, reason);
    zl_debug ("http", "metrics: %d %s", status, reason);
    s_answer (self, c, status, reason, "text/plain; charset=utf-8", body, (size_t)n, false);
}

int
zl_http_parse (char *head, bool *head_only, char **path, char **query)
{
    // request line: METHOD SP TARGET SP HTTP/1.x CRLF
    char *eol = strstr (head, "\r\n");
    if (!eol)
        return 400;
    *eol = '\0';
    char *sp1 = strchr (head, ' ');
    char *sp2 = sp1 ? strchr (sp1 + 1, ' ') : NULL;
    if (!sp1 || !sp2 || sp2 == sp1 + 1 || strchr (sp2 + 1, ' ') ||
        strncmp (sp2 + 1, "HTTP/1.", 7) || sp1[1] != '/')
        return 400;
    *sp1 = *sp2 = '\0';
    for (const char *p = sp1 + 1; *p; p++)
        if ((unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f)
            return 400; // a target is visible ASCII (no bare CR, no controls)
    if (strcmp (sp2 + 1, "HTTP/1.0") && strcmp (sp2 + 1, "HTTP/1.1"))
        return 400;
    *head_only = !strcmp (head, "HEAD");
    if (!*head_only && strcmp (head, "GET"))
        return 405;
    *path = sp1 + 1;
    *query = strchr (*path, '?');
    if (*query)
        *(*query)++ = '\0';
    else
        *query = sp2; // an empty string: the NUL that ended the target
    return 0;
}

// A complete request head is in c->buf: answer it.
static void
s_request (zl_http_t *self, conn_t *c)
{
    bool head;
    char *path, *query;
    int rc = zl_http_parse (c->buf, &head, &path, &query);
    if (rc) {
        s_error (self, c, rc, rc == 405 ? "Method Not Allowed" : "Bad Request");
        return;
    }
    char *body = NULL;
    size_t len = 0;
    const char *type = "text/plain";
    if (self->page (self->arg, path, query, &body, &len, &type) != 200) {
        free (body);
        s_error (self, c, 404, "Not Found");
        return;
    }
    s_answer (self, c, 200, "OK", type, body, len, head);
    free (body);
}

// `len` more bytes of `c`'s head: answer it once it is whole (or bad).
// Returns true if it was answered.
static bool
s_receive (zl_http_t *self, conn_t *c, const char *data, size_t len)
{
    size_t room = ZL_HTTP_MAX_REQUEST - c->len;
    size_t take = len < room ? len : room;
    if (c->len + take + 1 > c->cap) {
        size_t cap = c->cap ? 2 * c->cap : BUF_MIN;
        while (cap < c->len + take + 1)
            cap *= 2;
        c->cap = cap < ZL_HTTP_MAX_REQUEST + 1 ? cap : ZL_HTTP_MAX_REQUEST + 1;
        c->buf = zl_realloc (c->buf, c->cap);
    }
    size_t from = c->len < 3 ? 0 : c->len - 3; // where a CRLFCRLF ending in the new bytes starts
    memcpy (c->buf + c->len, data, take);
    c->len += take;
    c->buf[c->len] = '\0';
    if (memchr (data, '\0', take))
        s_error (self, c, 400, "Bad Request");
    else if (strstr (c->buf + from, "\r\n\r\n"))
        s_request (self, c);
    else if (len > room || c->len == ZL_HTTP_MAX_REQUEST)
        s_error (self, c, 431, "Request Header Fields Too Large");
    else
        return false;
    return true;
}

size_t
zl_http_serve (zl_http_t *self, int64_t now_ms)
{
    void *s = zsock_resolve (self->sock);
    size_t answered = 0;
    for (;;) {
        zmq_msg_t id, data;
        zmq_msg_init (&id);
        if (zmq_msg_recv (&id, s, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close (&id);
            break;
        }
        zmq_msg_init (&data);
        if (!zmq_msg_more (&id) || zmq_msg_recv (&data, s, ZMQ_DONTWAIT) < 0 ||
            zmq_msg_size (&id) > ID_MAX) {
            zmq_msg_close (&id);
            zmq_msg_close (&data);
            continue;
        }
        const void *idp = zmq_msg_data (&id);
        size_t id_len = zmq_msg_size (&id), len = zmq_msg_size (&data);
        conn_t *c = s_find (self, idp, id_len);
        if (len == 0) {
            // a connection opened, or the peer closed it
            if (c)
                s_drop (self, c);
            else if (!s_recently_closed (self, idp, id_len))
                s_open (self, idp, id_len, zmq_msg_gets (&id, "Peer-Address"), now_ms);
        } else if (c && s_receive (self, c, zmq_msg_data (&data), len))
            answered++;
        zmq_msg_close (&id);
        zmq_msg_close (&data);
    }
    // Everything that had arrived was read, so a client that sent its head
    // at once has its answer: whoever still waits makes room now.
    s_trim (self);
    return answered;
}

void
zl_http_sweep (zl_http_t *self, int64_t now_ms)
{
    for (size_t i = 0; i < self->n_conns;) {
        conn_t *c = self->conns[i];
        if (now_ms - c->opened_ms >= ZL_HTTP_HEAD_MS)
            s_close (self, c); // moves the last one into slot i
        else
            i++;
    }
}
