/*  zmtp: one ZMTP 3.x connection's protocol, spoken by zlane itself
    (ZeroMQ RFC 23 and 37, with the NULL and CURVE mechanisms of RFC 25/26),
    so that the broker and the C client libraries read and write their TCP
    and IPC sockets in their own threads: no libzmq I/O thread sits between
    a job and its worker (README, "Design notes: zlane speaks ZMTP itself").
    Peers are libzmq's (pyzmq, zeromq.js, zlane-ctl) or zlane's own.

    A zl_zmtp_t never touches a socket: the caller reads bytes into the
    space zl_zmtp_in_space gives, tells how many (zl_zmtp_in_commit), then
    takes frames out with zl_zmtp_next; what the protocol must send (the
    greeting, handshake commands, PONGs, the caller's frames) collects in an
    output buffer the caller writes out (zl_zmtp_out, zl_zmtp_sent). The
    server (the side that binds, a ROUTER here) and the client (a DEALER)
    both speak it; CURVE needs libsodium.

    Only ZMTP 3.0 and later peers are spoken to: an older one (ZMTP 1.0 or
    2.0, libzmq before 4.0) is refused as a protocol error. */
#ifndef ZL_ZMTP_H
#define ZL_ZMTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ZL_ZMTP_KEY 32           // a CURVE key, in bytes
#define ZL_ZMTP_IDENTITY_MAX 255 // the longest Identity property kept
#define ZL_ZMTP_MAX_FRAME_DEFAULT (256ull << 20)

typedef struct _zl_zmtp_t zl_zmtp_t;

/*  A CURVE server's verdict on a client's permanent public key: true lets
    it in. Called once, during the handshake. */
typedef bool (zl_zmtp_auth_fn) (void *arg, const uint8_t key[ZL_ZMTP_KEY]);

typedef struct {
    bool server;                     // the side that binds: the CURVE server
    const char *socket_type;         // sent in the handshake, the peer's checked against it:
                                     // "ROUTER" or "DEALER"
    bool curve;                      // CURVE, else NULL (plaintext)
    uint8_t public_key[ZL_ZMTP_KEY]; // CURVE: this side's permanent key pair
    uint8_t secret_key[ZL_ZMTP_KEY];
    uint8_t server_key[ZL_ZMTP_KEY]; // CURVE client: the server's public key
    zl_zmtp_auth_fn *auth;           // CURVE server: NULL lets every key in
    void *auth_arg;
    uint64_t max_frame; // a longer frame ends the connection (0: 256 MiB)
} zl_zmtp_opts_t;

/*  What zl_zmtp_next found. */
typedef enum {
    ZL_ZMTP_AGAIN, // no whole frame buffered: read more
    ZL_ZMTP_READY, // the handshake just ended: frames may be sent and come in
    ZL_ZMTP_FRAME, // a data frame, in *frame
    ZL_ZMTP_ERROR  // the connection must end: zl_zmtp_error says why (any
                   // ERROR command queued for the peer is in the output)
} zl_zmtp_rc_t;

/*  Why a connection ended (zl_zmtp_failure). */
typedef enum {
    ZL_ZMTP_FAIL_NONE,
    ZL_ZMTP_FAIL_PROTOCOL,  // malformed bytes, a socket type that does not fit, an old peer
    ZL_ZMTP_FAIL_MECHANISM, // CURVE at one end only
    ZL_ZMTP_FAIL_AUTH,      // CURVE: a key refused (by us, or by the server's ERROR)
    ZL_ZMTP_FAIL_CRYPTO,    // CURVE: a box that does not open (a wrong server key, tampering)
    ZL_ZMTP_FAIL_TOO_LARGE  // a frame over max_frame
} zl_zmtp_failure_t;

typedef struct {
    const uint8_t *data; // borrowed: valid until the next zl_zmtp_next or zl_zmtp_in_space
    size_t size;
    bool more; // another frame of the same message follows
} zl_zmtp_frame_t;

/*  Return a connection's protocol for `opts` (copied; socket_type must be a
    static string), the first part of its greeting already in the output
    (the rest follows the peer's first 11 octets). */
zl_zmtp_t *zl_zmtp_new (const zl_zmtp_opts_t *opts);
/*  Destroy; nulls the caller's pointer (keys are wiped). NULL-safe. */
void zl_zmtp_destroy (zl_zmtp_t **self_p);

/*  Where to read into: at least `want` bytes of room (0: the default chunk,
    64 KiB), more when a longer frame is under way. Frames returned before
    are no longer valid after this call. Writes the room to `*room`. */
uint8_t *zl_zmtp_in_space (zl_zmtp_t *self, size_t want, size_t *room);
/*  `n` bytes were read into the space zl_zmtp_in_space gave. */
void zl_zmtp_in_commit (zl_zmtp_t *self, size_t n);
/*  Parse what was read: handshake commands are answered (into the
    output), PINGs ponged, and the next data frame returned. */
zl_zmtp_rc_t zl_zmtp_next (zl_zmtp_t *self, zl_zmtp_frame_t *frame);
/*  True if bytes read are waiting to be parsed (zl_zmtp_next may find a
    frame without reading more). */
bool zl_zmtp_buffered (const zl_zmtp_t *self);
/*  True if a whole frame (or the greeting) read waits to be parsed:
    zl_zmtp_next has something to do without reading more. */
bool zl_zmtp_whole_frame (const zl_zmtp_t *self);

/*  Queue a data frame (`more`: part of a message that goes on). Returns 0,
    or -1 before the handshake ended or after an error. */
int zl_zmtp_send (zl_zmtp_t *self, const void *data, size_t size, bool more);
/*  Queue a PING (ZMTP 3.1) telling the peer to give up on us after `ttl_ms`
    of silence (0: never). Does nothing to a ZMTP 3.0 peer (no PING there)
    or before the handshake ended. */
void zl_zmtp_ping (zl_zmtp_t *self, uint32_t ttl_ms);
/*  The bytes waiting to be written (borrowed; valid until the next call
    that queues or zl_zmtp_sent; NULL when there are none). Returns their
    count. */
size_t zl_zmtp_out (const zl_zmtp_t *self, const uint8_t **data);
/*  `n` of the bytes zl_zmtp_out gave were written. */
void zl_zmtp_sent (zl_zmtp_t *self, size_t n);

/*  True once the handshake ended (and no error since). */
bool zl_zmtp_ready (const zl_zmtp_t *self);
/*  After ZL_ZMTP_ERROR: why, as text (borrowed) and as a class. */
const char *zl_zmtp_error (const zl_zmtp_t *self);
zl_zmtp_failure_t zl_zmtp_failure (const zl_zmtp_t *self);
/*  The peer's Identity property (borrowed; `*len` 0 when it sent none). */
const uint8_t *zl_zmtp_peer_identity (const zl_zmtp_t *self, size_t *len);
/*  CURVE server, after the handshake: the client's permanent public key
    (borrowed), else NULL. */
const uint8_t *zl_zmtp_peer_key (const zl_zmtp_t *self);
/*  The silence after which the peer gives up on us, from its last PING's
    TTL in ms (0: it set none). */
uint32_t zl_zmtp_peer_ttl_ms (const zl_zmtp_t *self);

/*  Decode a Z85 key (40 characters) into 32 bytes. Returns 0 or -1. */
int zl_zmtp_z85_key (const char *text, uint8_t key[ZL_ZMTP_KEY]);

#endif
