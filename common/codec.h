/*  codec: frames <-> zlane messages (msg.h).
    The only module that touches the generated protobuf-c types. A codec owns
    two arenas: decoded messages live until the next decode, encode scratch
    until the next encode. Not thread-safe; one codec per thread. */
#ifndef ZL_CODEC_H
#define ZL_CODEC_H

#include "msg.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct _zl_codec_t zl_codec_t;

typedef enum {
    ZL_DECODE_OK = 0,
    ZL_DECODE_BAD_FRAME,   // not a valid Envelope
    ZL_DECODE_BAD_VERSION, // a version this build does not speak
    ZL_DECODE_NO_BODY,     // valid Envelope without a known body kind
    ZL_DECODE_BAD_TEXT     // decoded, but a string field is not valid text (text.h):
                           // zl_codec_error names it (a Submit's specs are not
                           // failed for this: each bad spec carries `invalid`)
} zl_decode_rc_t;

/*  Return a new codec. */
zl_codec_t *zl_codec_new (void);
/*  Destroy the codec; nulls the caller's pointer. */
void zl_codec_destroy (zl_codec_t **self_p);

/*  Decode one frame into `out`. Returns ZL_DECODE_OK or the reason it
    failed. `out` borrows memory that the next decode frees. Every string
    field is checked against the wire bytes (protobuf-c itself would pass
    invalid UTF-8, and cut a string at a NUL byte): a bad one in a Submit's
    job spec sets that spec's `invalid` to the reason ("field 'tenant' is not
    valid UTF-8"); anywhere else the message is decoded and
    ZL_DECODE_BAD_TEXT returned. */
zl_decode_rc_t zl_codec_decode (zl_codec_t *self, const void *data, size_t size, zl_msg_t *out);

/*  Why the last decode returned ZL_DECODE_BAD_TEXT: "field 'ready.name'
    contains a NUL byte". Borrowed until the next decode. */
const char *zl_codec_error (zl_codec_t *self);

/*  Encode `msg` into a new buffer of `*size_p` bytes that stays valid until
    the next encode on this codec. Returns NULL if the kind is unknown. */
const void *zl_codec_encode (zl_codec_t *self, const zl_msg_t *msg, size_t *size_p);

/*  In debug builds, make zl_codec_encode abort on a string field that is
    not valid text (text.h): for a sender whose strings are all checked or
    its own, like the broker, so that tests catch any that is not. Release
    builds do not check. */
void zl_codec_set_strict (zl_codec_t *self, bool strict);

/*  Call `fn (arg, frame, size)` with every frame zl_codec_encode makes
    (NULL: none). For debugging and tests: a copy of what a program sends. */
typedef void (zl_codec_tap_fn) (void *arg, const void *frame, size_t size);
void zl_codec_set_tap (zl_codec_t *self, zl_codec_tap_fn *fn, void *arg);

/*  Return the arena that holds the last decoded message, so that callers may
    allocate alongside it (for example replies built from it). */
struct _zl_arena_t *zl_codec_scratch (zl_codec_t *self);

#endif
