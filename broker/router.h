/*  router: one of the broker's ROUTER endpoints (frontend, backend, admin):
    the connections clients (DEALERs) made to it, each known by a routing id
    the router gives it, and a message in or out at a time.

    On tcp:// and ipc:// the broker speaks ZMTP itself (zmtp.h): it accepts
    and reads and writes the sockets in its own loop thread, so a job's
    frames cross no libzmq I/O thread on their way through the broker (the
    README's design notes say why). On inproc:// (tests that run a broker
    in their own process) a libzmq ROUTER does the same work.

    Semantics kept from a libzmq ROUTER with ZMQ_ROUTER_MANDATORY: a send to
    a peer whose connection is gone fails EHOSTUNREACH; a peer that does not
    read is sent to until `max_out` bytes wait for it, then sends fail
    EAGAIN; a frame over `max_frame` ends its connection; a peer that sent a
    ZMTP 3.1 PING with a TTL is let go after that long a silence; a
    handshake not done in ZL_ROUTER_HANDSHAKE_MS ends its connection. The
    routing id is 5 bytes (0, then a 32-bit number), as libzmq makes them;
    an Identity the client sets is not used. */
#ifndef ZL_ROUTER_H
#define ZL_ROUTER_H

#include "wire.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ZL_ROUTER_HANDSHAKE_MS 30000 // libzmq's ZMQ_HANDSHAKE_IVL default

typedef struct _zl_router_t zl_router_t;

typedef struct {
    const char *name;   // "frontend", "backend" or "admin", for logs (static)
    uint64_t max_frame; // a longer frame from a peer ends its connection
    size_t max_out;     // bytes waiting for one peer before sends to it fail EAGAIN
    bool curve;         // CURVE server with this key pair (or zl_router_set_curve)
    uint8_t public_key[32], secret_key[32];
    bool (*auth) (void *arg, const uint8_t key[32]); // CURVE: is a client key let in?
    void *auth_arg;
} zl_router_opts_t;

/*  One message received. */
typedef struct {
    zl_peer_t peer;
    const void *data; // the first frame (borrowed until the next zl_router_recv)
    size_t size;
    bool extra_frames;        // the message had more than one frame (the rest dropped)
    const char *user_id;      // CURVE: the client's public key in Z85, else NULL
    const char *peer_address; // the client's IP address, or NULL (ipc, inproc)
} zl_router_msg_t;

/*  Return a router for `opts` (copied), bound nowhere yet. */
zl_router_t *zl_router_new (const zl_router_opts_t *opts);
/*  Close every connection and listener (an ipc:// socket file is removed);
    nulls the caller's pointer. NULL-safe. */
void zl_router_destroy (zl_router_t **self_p);
/*  Make this a CURVE server with the key pair `public_key`/`secret_key`
    (32 bytes each), letting in a client whose key `auth (arg, key)` is true
    of. For the connections accepted from then on; call before binding. */
void zl_router_set_curve (zl_router_t *self, const uint8_t *public_key, const uint8_t *secret_key,
                          bool (*auth) (void *arg, const uint8_t key[32]), void *arg);
/*  Listen on `endpoint`: tcp://HOST:PORT (HOST an address, a name, or *;
    PORT a number or * for an ephemeral one), ipc://PATH or inproc://NAME.
    Writes the endpoint as bound (tcp://127.0.0.1:40123) to `bound`.
    Returns 0, or -1 with the reason in `err`. */
int zl_router_bind (zl_router_t *self, const char *endpoint, char *bound, size_t bound_len,
                    char *err, size_t errlen);
/*  What to poll: a libzmq socket or a file descriptor, readable when there
    is something to do (zl_router_recv). Call it before each poll: the
    receives after it look at the connections once. */
void zl_router_poll_item (zl_router_t *self, void **socket, int *fd);
/*  True if messages already read wait in memory: poll without waiting. */
bool zl_router_pending (const zl_router_t *self);
/*  The next message, into `msg`: 1, or 0 when none is ready. Accepts new
    connections and moves handshakes on along the way. What arrives after
    the one look a poll allows waits for the next poll (the descriptor is
    readable then). */
int zl_router_recv (zl_router_t *self, zl_router_msg_t *msg);
/*  Queue one frame for `peer`; it goes at the next zl_router_flush (libzmq:
    at once). Returns 0, or -1 with errno EHOSTUNREACH (no such peer) or
    EAGAIN (max_out bytes wait for it already). */
int zl_router_send (zl_router_t *self, const zl_peer_t *peer, const void *data, size_t size);
/*  Encode `msg` with `codec` and send it to `peer` as zl_router_send. */
int zl_router_send_msg (zl_router_t *self, const zl_peer_t *peer, zl_codec_t *codec,
                        const zl_msg_t *msg);
/*  Write what was queued, to each peer in the order it was first queued
    for since the last flush; what the kernel does not take now goes when
    the socket drains (the poll item wakes the loop). */
void zl_router_flush (zl_router_t *self);
/*  Close the connections that outlived their peer's TTL or their
    handshake, and listen again where too many files were open; `now_ms` is
    the monotonic clock. Cheap when called often (it looks every 100 ms). */
void zl_router_sweep (zl_router_t *self, int64_t now_ms);
/*  Handshakes refused (a key not let in, a box that does not open, a
    mechanism that does not fit, bytes that are not ZMTP) since the last
    call. */
uint64_t zl_router_refused (zl_router_t *self);
/*  Connections open now (handshakes under way included). */
size_t zl_router_connections (const zl_router_t *self);

#endif
