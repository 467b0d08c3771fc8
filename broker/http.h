/*  http: a small HTTP/1.x server on a ZeroMQ STREAM socket, for the broker's
    metrics page. The broker polls its socket in the loop and calls
    zl_http_serve when it is readable. Each connection gets one answer and is
    closed (Connection: close). GET and HEAD only.

    Bad input gets an answer and a count, never a crash: a request line that
    does not parse is 400, another method 405, a path with no page 404,
    headers past ZL_HTTP_MAX_REQUEST bytes 431.

    Slow or idle clients cannot lock out a scraper, which sends its head at
    once. A connection that has not sent a complete head ZL_HTTP_HEAD_MS
    after it opened is closed (zl_http_sweep). A new connection is always
    taken in. At the end of each zl_http_serve, when all that had arrived
    was read and answered, the connections still waiting are cut back
    (evicted: closed unanswered): from each peer address (libzmq's
    "Peer-Address") its newest ZL_HTTP_MAX_PER_ADDR stay, and of those
    ZL_HTTP_MAX_CONNS, taking every address's newest first, then every
    address's second newest, and so on, newer before older. Within one
    zl_http_serve at most ZL_HTTP_MAX_OPEN wait: a connection past that
    makes the cut happen at once. */
#ifndef ZL_HTTP_H
#define ZL_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ZL_HTTP_MAX_REQUEST 8192
#define ZL_HTTP_HEAD_MS 3000
#define ZL_HTTP_MAX_CONNS 64
#define ZL_HTTP_MAX_PER_ADDR 16
#define ZL_HTTP_MAX_OPEN 256

typedef struct _zl_http_t zl_http_t;

/*  The page for `path` and `query` (the text after '?', or ""): set
    `*body` (malloc'd, the server frees it), `*len` and `*content_type`
    (static) and return 200; or return 404. */
typedef int (zl_http_page_fn) (void *arg, const char *path, const char *query, char **body,
                               size_t *len, const char **content_type);

typedef struct {
    uint64_t requests; // answered 200
    uint64_t refused;  // answered 4xx, or closed unanswered (the head too late, or evicted)
    uint64_t evicted;  // of those refused, closed to make room for a newer connection
} zl_http_counts_t;

/*  Bind a STREAM socket at `endpoint` (tcp://host:port, port * for any).
    NULL with `err` filled if it cannot be bound. */
zl_http_t *zl_http_new (const char *endpoint, zl_http_page_fn *page, void *arg, char *err,
                        size_t errlen);
/*  Close the socket and every connection; nulls the caller's pointer. */
void zl_http_destroy (zl_http_t **self_p);
/*  The socket, for zmq_poll (borrowed). */
void *zl_http_socket (zl_http_t *self);
/*  The endpoint it is bound to, with the real port (borrowed). */
const char *zl_http_endpoint (zl_http_t *self);
/*  Read what has arrived, without blocking, and answer complete requests
    (and bad ones); then cut the connections still waiting back to the
    limits above. `now_ms` is a monotonic clock reading. Returns the number
    of connections answered. */
size_t zl_http_serve (zl_http_t *self, int64_t now_ms);
/*  Close the connections still without a complete head ZL_HTTP_HEAD_MS
    after they opened, by `now_ms`. */
void zl_http_sweep (zl_http_t *self, int64_t now_ms);
/*  Parse a request head in place (NUL-terminated, its first line ended by
    CRLF): GET or HEAD (sets *head_only), the target split into *path and
    *query ("" without '?'), both pointing into `head`. Returns 0, or the
    status to answer: 400 (malformed) or 405 (another method). */
int zl_http_parse (char *head, bool *head_only, char **path, char **query);
/*  What it has answered and refused so far. */
zl_http_counts_t zl_http_counts (zl_http_t *self);
/*  The connections open now that wait for their request (at most
    ZL_HTTP_MAX_CONNS between calls of zl_http_serve). */
size_t zl_http_waiting (zl_http_t *self);

#endif
