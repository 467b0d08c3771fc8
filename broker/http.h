/*  http: a small HTTP/1.x server on a ZeroMQ STREAM socket, for the broker's
    metrics page. The broker polls its socket in the loop and calls
    zl_http_serve when it is readable. Each connection gets one answer and is
    closed (Connection: close). GET and HEAD only.

    Bad input gets an answer and a count, never a crash: a request line that
    does not parse is 400, another method 405, a path with no page 404,
    headers past ZL_HTTP_MAX_REQUEST bytes 431. A connection that sends no
    complete request within ZL_HTTP_IDLE_MS is closed (zl_http_sweep), and
    past ZL_HTTP_MAX_CONNS open connections a new one is closed at once. */
#ifndef ZL_HTTP_H
#define ZL_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ZL_HTTP_MAX_REQUEST 8192
#define ZL_HTTP_IDLE_MS 10000
#define ZL_HTTP_MAX_CONNS 64

typedef struct _zl_http_t zl_http_t;

/*  The page for `path` and `query` (the text after '?', or ""): set
    `*body` (malloc'd, the server frees it), `*len` and `*content_type`
    (static) and return 200; or return 404. */
typedef int (zl_http_page_fn) (void *arg, const char *path, const char *query, char **body,
                               size_t *len, const char **content_type);

typedef struct {
    uint64_t requests; // answered 200
    uint64_t refused;  // answered 4xx, or closed for idling or too many connections
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
/*  Read what has arrived, without blocking, and answer complete requests.
    `now_ms` is a monotonic clock reading. Returns the number answered. */
size_t zl_http_serve (zl_http_t *self, int64_t now_ms);
/*  Close connections idle for ZL_HTTP_IDLE_MS by `now_ms`. */
void zl_http_sweep (zl_http_t *self, int64_t now_ms);
/*  Parse a request head in place (NUL-terminated, its first line ended by
    CRLF): GET or HEAD (sets *head_only), the target split into *path and
    *query ("" without '?'), both pointing into `head`. Returns 0, or the
    status to answer: 400 (malformed) or 405 (another method). */
int zl_http_parse (char *head, bool *head_only, char **path, char **query);
/*  What it has answered and refused so far. */
zl_http_counts_t zl_http_counts (zl_http_t *self);

#endif
