/*  link: a client's connection to one broker endpoint, as a libzmq DEALER
    would keep it, but spoken by zlane itself (zmtp.h) in the caller's
    thread: a frame sent is written by the thread that sends it, and a
    frame received is read by the thread that polls, with no I/O thread
    between (the README's design notes say why). The producer and worker
    libraries use it; zlane-ctl, pyzmq and zeromq.js clients use libzmq,
    which speaks the same protocol.

    What it does like a DEALER: it dials tcp://HOST:PORT (a name is looked
    up at each dial) or ipc://PATH; it dials again after a connection ends
    or a dial fails, `reconnect_ivl_ms` later, doubling up to
    `reconnect_max_ms`; it sends ZMTP 3.1 PINGs every `heartbeat_ivl_ms` and
    drops a connection silent for `heartbeat_timeout_ms`; after a refused
    handshake (a key not let in, a mechanism that does not fit) it dials no
    more: the owner decides (libzmq does the same). Frames sent while no
    connection is up wait (at most `hwm`) unless `immediate`; frames already
    written to a connection that then ends are gone, as with libzmq.

    Not thread-safe: one thread at a time. Not for inproc:// (libzmq's). */
#ifndef ZL_LINK_H
#define ZL_LINK_H

#include "curve.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct _zl_link_t zl_link_t;

typedef struct {
    const zl_curve_t *curve;       // CURVE client keys, or NULL (or off): plaintext
    bool immediate;                // sends fail EAGAIN while no connection is up
    size_t hwm;                    // frames waiting for a connection, at most (0: 1000)
    uint32_t reconnect_ivl_ms;     // 0: 100
    uint32_t reconnect_max_ms;     // 0: no doubling
    uint32_t heartbeat_ivl_ms;     // 0: no PINGs
    uint32_t heartbeat_timeout_ms; // 0: heartbeat_ivl_ms
    uint32_t heartbeat_ttl_ms;     // asked of the broker in each PING (0: none)
    uint64_t max_frame;            // a longer frame from the broker ends the connection
} zl_link_opts_t;

/*  What happened to the connection (zl_link_event). */
typedef enum {
    ZL_LINK_CONNECTED,    // a handshake ended: frames flow
    ZL_LINK_DISCONNECTED, // a connection that was up ended (a redial follows)
    ZL_LINK_DIAL_FAILED,  // a dial or a handshake's connection failed (a redial follows)
    ZL_LINK_REFUSED       // the handshake was refused: no more dialling
} zl_link_event_kind_t;

typedef struct {
    zl_link_event_kind_t kind;
    bool handshake;   // DIAL_FAILED: the connection was made, and ended during the handshake
    bool auth;        // REFUSED: the key was not let in
    bool mechanism;   // REFUSED: CURVE at one end only
    char detail[192]; // what failed, in words
} zl_link_event_t;

/*  0 if `endpoint` is one a link can dial (tcp://HOST:PORT, ipc://PATH),
    else -1 with the reason in `err`. Looks nothing up. */
int zl_link_check_endpoint (const char *endpoint, char *err, size_t errlen);
/*  Return a link to `endpoint` (copied), dialling at once (the first
    attempt is made by zl_link_pump). NULL with the reason in `err` if the
    endpoint is not tcp://HOST:PORT or ipc://PATH. */
zl_link_t *zl_link_new (const char *endpoint, const zl_link_opts_t *opts, char *err, size_t errlen);
/*  Close the connection; what was not written is dropped. Nulls the
    caller's pointer. NULL-safe. */
void zl_link_destroy (zl_link_t **self_p);

/*  What to poll: the socket (-1 while waiting to dial) and its events
    (POLLIN, and POLLOUT while a dial or a write waits for the kernel). */
int zl_link_fd (const zl_link_t *self);
short zl_link_poll_events (const zl_link_t *self);
/*  How many sockets the link has made: a socket under the same number as
    one closed before it has another serial (an epoll set lost the old one
    when it closed). */
uint64_t zl_link_socket_serial (const zl_link_t *self);
/*  Milliseconds until the link needs zl_link_pump for a timer (a dial, a
    PING, a timeout), from `now_ms`: 0 or more, or -1 for none. */
int64_t zl_link_timeout (const zl_link_t *self, int64_t now_ms);
/*  Move everything on without blocking: dial when due, finish a dial,
    write what waits, read what came, PING, time out. */
void zl_link_pump (zl_link_t *self, int64_t now_ms);
/*  The owner's poll of zl_link_fd returned `revents`. An owner that tells
    the link of every poll has no read made that would find nothing: with
    no POLLIN (nor POLLERR, POLLHUP) in `revents`, or once a read found the
    kernel's buffer empty, the link reads nothing until the owner's next
    poll says something came. The producer and worker libraries do. */
void zl_link_polled (zl_link_t *self, short revents);

/*  Queue a frame. It goes at the next zl_link_flush or zl_link_pump.
    Returns 0, or -1 with errno EAGAIN: no connection is up and
    `immediate`, or `hwm` frames wait already, or the broker reads none of
    what was written (64 MiB wait). */
int zl_link_send (zl_link_t *self, const void *data, size_t size);
/*  Write what waits, as far as the kernel takes it now. */
void zl_link_flush (zl_link_t *self);
/*  The next frame from the broker (`*data`, `*size`, borrowed until the
    next call on the link): 1, or 0 when none is buffered. `*more` is set
    when another frame of the same message follows. A read that took less
    than it had room for emptied the kernel's buffer: the next call that
    would read again returns 0 without reading, once, or until the owner's
    next zl_link_polled for an owner that reports its polls (what came
    since makes the socket readable for that poll). */
int zl_link_recv (zl_link_t *self, const void **data, size_t *size, bool *more);
/*  The next connection event: 1, or 0 when none. */
int zl_link_event (zl_link_t *self, zl_link_event_t *ev);

/*  True if a frame from the broker can be taken (zl_link_recv), a
    handshake step made without waiting for the socket, or an event taken
    (zl_link_event; a handshake may end in zl_link_recv): the owner's poll
    must not wait then (zl_link_timeout says 0). An owner must take the
    events. */
bool zl_link_pending (const zl_link_t *self);
/*  True while a connection is up (its handshake ended). */
bool zl_link_connected (const zl_link_t *self);
/*  True while frames wait for the kernel to take them. */
bool zl_link_blocked (const zl_link_t *self);
/*  The endpoint (borrowed). */
const char *zl_link_endpoint (const zl_link_t *self);
/*  Dial again now (after a refusal, say), dropping any connection up. */
void zl_link_redial (zl_link_t *self);

#endif
