/*  broker_harness: an in-process broker's peers and clock, for the fuzz
    targets (tests/fuzz/fuzz_broker.c) and the tests of the turn
    (tests/broker/test_turn.c). Uses the broker's public API only.

    Three DEALERs ("p0".."p2", "w0".."w2", "a0".."a2") are connected to each
    of the broker's ROUTERs, and a SUB (all topics) to its PUB, so what the
    broker sends them can be read back. Frames are handed to the broker with
    zl_broker_feed, each one a whole turn.

    The clock is the harness's: this file defines zl_clock_* (so common's
    clock.o is not linked), at fixed epochs plus what zlh_clock_advance_us
    added, so time moves only when the caller says so. No cmocka: failures
    are return values (or abort () on out-of-memory). */
#ifndef ZL_BROKER_HARNESS_H
#define ZL_BROKER_HARNESS_H

#include "broker.h"
#include "config.h"
#include "msg.h"

#include <stddef.h>
#include <stdint.h>

#define ZLH_PEERS 3 // harness DEALERs per ROUTER

typedef enum { ZLH_FRONTEND = 0, ZLH_BACKEND, ZLH_ADMIN, ZLH_EVENTS, ZLH_SOCKS } zlh_sock_t;

typedef struct _zlh_t zlh_t;

/*  Move the fake clock (monotonic and wall) forward by `us`. */
void zlh_clock_advance_us (int64_t us);

/*  Return a new empty directory under $TMPDIR (or /tmp) named
    "zlane-<tag>-XXXXXX" (caller owns the string), or NULL. */
char *zlh_tmpdir (const char *tag);
/*  Remove `dir` and all it holds. Returns 0 or -1. */
int zlh_rmdir (const char *dir);

/*  Point `cfg`'s four endpoints at inproc names of their own (unique in the
    process) and its data dir at `data_dir` (copied). */
void zlh_config_inproc (zl_broker_config_t *cfg, const char *data_dir);

/*  Connect the harness peers to `broker` (borrowed; must outlive the
    harness) and make its ROUTERs learn their routing ids (each peer sends a
    frame that is not an Envelope; the broker's Error replies are read and
    dropped). Returns NULL with a reason on stderr if they do not arrive. */
zlh_t *zlh_new (zl_broker_t *broker);
/*  Close the harness's sockets; nulls the caller's pointer. */
void zlh_destroy (zlh_t **self_p);

/*  Write peer `peer`'s routing id on socket `sock` ("p0", "w1", ...). */
void zlh_peer_id (zlh_sock_t sock, int peer, char out[4]);

/*  Called by zlh_drain for each message read that decodes; `msg` is
    borrowed until it returns. `peer` is 0 for ZLH_EVENTS, `topic` NULL
    for the other sockets. */
typedef void (zlh_msg_fn) (void *ctx, zlh_sock_t sock, int peer, const char *topic,
                           const zl_msg_t *msg);
/*  Read everything waiting at the harness's peers and SUB, without waiting,
    passing each decoded message to `fn` (may be NULL). Returns how many
    messages were read, decoded or not. */
int zlh_drain (zlh_t *self, zlh_msg_fn *fn, void *ctx);

/*  Encode `msg` and feed it to the broker as peer `peer` of `sock` (one
    turn). Returns what zl_broker_feed returned (-1: the broker failed). */
int zlh_feed (zlh_t *self, zlh_sock_t sock, int peer, const zl_msg_t *msg);

/*  Encode `msg` and send it from peer `peer` of `sock` through its socket:
    the broker reads it in a later zl_broker_turn. Returns 0 or -1. */
int zlh_send (zlh_t *self, zlh_sock_t sock, int peer, const zl_msg_t *msg);

#endif
