/*  endpoints: the broker's sockets -- the frontend, backend and admin
    ROUTERs (router.h: zlane's own ZMTP on tcp:// and ipc://) and the events
    PUB (a libzmq socket) -- made with their options, bound to the
    configured addresses (ephemeral ports resolved) and named in the ports
    file. The loop polls and drains them (broker.c); replies.c sends on
    them. */
#ifndef ZL_ENDPOINTS_H
#define ZL_ENDPOINTS_H

#include "config.h"
#include "replies.h"
#include "router.h"

#include <czmq.h>
#include <stddef.h>

typedef struct _zl_endpoints_t zl_endpoints_t;

/*  Return the sockets for `cfg` (borrowed; must outlive them), not yet
    bound; NULL if the system refuses an epoll set. */
zl_endpoints_t *zl_endpoints_new (const zl_broker_config_t *cfg);
/*  Close the sockets; nulls the caller's pointer. */
void zl_endpoints_destroy (zl_endpoints_t **self_p);
/*  The ROUTER `sock` (borrowed). */
zl_router_t *zl_endpoints_router (zl_endpoints_t *self, zl_sock_t sock);
/*  The events PUB socket (a libzmq socket, borrowed). */
void *zl_endpoints_events (zl_endpoints_t *self);
/*  The same, as czmq's socket, for the security setup (borrowed). */
zsock_t *zl_endpoints_events_zsock (zl_endpoints_t *self);
/*  Write what the ROUTERs queued: the backend's first (a lone job's
    Dispatch before its Accepted), then the frontend's and the admin's. */
void zl_endpoints_flush (zl_endpoints_t *self);
/*  Bind every socket to its configured address. Returns 0, or -1 with the
    reason in `err`. */
int zl_endpoints_bind (zl_endpoints_t *self, char *err, size_t errlen);
/*  The address bound for "frontend", "backend", "events" or "admin", or
    NULL. */
const char *zl_endpoints_bound (zl_endpoints_t *self, const char *which);
/*  The endpoint clients are told to dial for a socket bound at `bound` (as
    zl_endpoints_bound gives it, "tcp://0.0.0.0:5570"): tcp://HOST:PORT, HOST
    being `advertise` if not NULL, else the bound address unless it is a
    wildcard (0.0.0.0, ::), else this machine's host name (gethostname). An
    IPv6 HOST gets brackets; an ipc:// or inproc:// endpoint is given as it
    is. Writes at most `size` bytes to `out`; returns 0, or -1 if `bound`
    names no port or the host name is unknown. */
int zl_endpoints_advertise (const char *bound, const char *advertise, char *out, size_t size);
/*  Write the bound addresses to `path` (and `metrics`, if not NULL), by
    renaming a whole file into place. Returns 0, or -1 with `err`. */
int zl_endpoints_write_ports (zl_endpoints_t *self, const char *path, const char *metrics,
                              char *err, size_t errlen);

#endif
