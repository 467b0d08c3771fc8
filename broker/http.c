#include "http.h"

#include "log.h"
#include "zl_alloc.h"

#include <czmq.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define ID_MAX 256
#define RECENT 128 // closed connections whose late notifications are ignored

typedef struct {
    uint8_t id[ID_MAX];
    size_t id_len;
    char buf[ZL_HTTP_MAX_REQUEST + 1];
    size_t len;
    int64_t opened_ms;
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
    conn_t *conns[ZL_HTTP_MAX_CONNS];
    size_t n_conns;
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
    for (size_t i = 0; i < self->n_conns; i++)
        free (self->conns[i]);
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
    if (len && zmq_send (s, id, id_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) == (int) id_len)
        zmq_send (s, data, len, ZMQ_DONTWAIT);
    if (zmq_send (s, id, id_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) == (int) id_len)
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
    free (c);
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
        if ((unsigned char) *p <= ' ' || (unsigned char) *p >= 0x7f)
            return 400;  // a target is visible ASCII (no bare CR, no controls)
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
        *query = sp2;  // an empty string: the NUL that ended the target
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
            else if (!s_recently_closed (self, idp, id_len)) {
                if (self->n_conns == ZL_HTTP_MAX_CONNS) {
                    self->counts.refused++;
                    s_send_close (self, idp, id_len, NULL, 0);
                } else {
                    c = ZL_NEW (conn_t);
                    memcpy (c->id, idp, id_len);
                    c->id_len = id_len;
                    c->opened_ms = now_ms;
                    self->conns[self->n_conns++] = c;
                }
            }
        } else if (c) {
            size_t room = ZL_HTTP_MAX_REQUEST - c->len;
            size_t take = len < room ? len : room;
            memcpy (c->buf + c->len, zmq_msg_data (&data), take);
            c->len += take;
            c->buf[c->len] = '\0';
            if (memchr (c->buf, '\0', c->len))
                s_error (self, c, 400, "Bad Request");
            else if (strstr (c->buf, "\r\n\r\n")) {
                s_request (self, c);
                answered++;
            } else if (len > room || c->len == ZL_HTTP_MAX_REQUEST)
                s_error (self, c, 431, "Request Header Fields Too Large");
        }
        zmq_msg_close (&id);
        zmq_msg_close (&data);
    }
    return answered;
}

void
zl_http_sweep (zl_http_t *self, int64_t now_ms)
{
    for (size_t i = 0; i < self->n_conns;) {
        conn_t *c = self->conns[i];
        if (now_ms - c->opened_ms >= ZL_HTTP_IDLE_MS) {
            self->counts.refused++;
            s_send_close (self, c->id, c->id_len, NULL, 0);
            s_drop (self, c); // moves the last one into slot i
        } else
            i++;
    }
}
