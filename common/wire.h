/*  wire: send and receive zlane messages on ZeroMQ sockets.
    One Envelope per frame; ROUTER sockets add the peer's routing id first. */
#ifndef ZL_WIRE_H
#define ZL_WIRE_H

#include "codec.h"

#include <stdint.h>

#define ZL_PEER_ID_MAX 255

/*  A ROUTER peer's routing id. */
typedef struct {
    uint8_t len;
    uint8_t data[ZL_PEER_ID_MAX];
} zl_peer_t;

/*  Encode `msg` and send it on a DEALER/PUB-less socket. Returns 0, or -1
    with errno set (EAGAIN when ZMQ_DONTWAIT would block). */
int zl_wire_send (void *sock, zl_codec_t *codec, const zl_msg_t *msg, int flags);

/*  Encode `msg` and send it to `peer` on a ROUTER socket. Returns 0 or -1
    (EHOSTUNREACH when the peer is gone and ZMQ_ROUTER_MANDATORY is set). */
int zl_wire_send_to (void *sock, const zl_peer_t *peer, zl_codec_t *codec, const zl_msg_t *msg);

/*  Send `msg` on a PUB socket under `topic`. Returns 0 or -1. */
int zl_wire_publish (void *sock, const char *topic, zl_codec_t *codec, const zl_msg_t *msg);

/*  Parse a duration such as "250ms", "30s", "5m", "1h" or a bare number of
    milliseconds into `*ms`. Returns 0, or -1 if the text is not a duration. */
int zl_parse_duration_ms (const char *text, uint64_t *ms);

/*  Parse a size such as "1048576", "64KiB", "1MiB", "2GiB" into `*bytes`.
    Returns 0, or -1 if the text is not a size. */
int zl_parse_size (const char *text, uint64_t *bytes);

/*  Parse a non-negative integer; returns 0 or -1. */
int zl_parse_u64 (const char *text, uint64_t *value);

#endif
