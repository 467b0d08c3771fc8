/*  text: the rules for the strings zlane takes in and sends out.

    Every `string` field of the protocol is proto3 text: valid UTF-8 (no
    overlong forms, no surrogates, nothing past U+10FFFF), which decoders in
    other languages enforce. zlane adds: no NUL byte (C strings end there, so
    "acme\0evil" would silently become "acme"). Names -- tenants, lanes,
    worker and client names, header keys, idempotency keys -- also carry no
    control characters (U+0000-U+001F, U+007F: they would forge log lines)
    and have a length limit in bytes. */
#ifndef ZL_TEXT_H
#define ZL_TEXT_H

#include "arena.h"

#include <stdbool.h>
#include <stddef.h>

/*  True if the `len` bytes at `s` are valid UTF-8 without a NUL byte. */
bool zl_text_valid (const char *s, size_t len);

/*  The why of a name that breaks the rules, or NULL if `s` (NUL-terminated,
    already valid text) is a good name: "is empty" (unless `allow_empty`),
    "is longer than N bytes" (N = `max`), "contains a control character".
    The text is static or in `arena`. */
const char *zl_text_name_problem (zl_arena_t *arena, const char *s, size_t max, bool allow_empty);

/*  The length of the longest prefix of the `len` bytes at `s` that is at
    most `max` bytes and does not end inside a UTF-8 character. */
size_t zl_text_cut (const char *s, size_t len, size_t max);

/*  A copy of the `len` bytes at `s` in `arena` that is valid text: each
    byte that is not part of a valid UTF-8 character, and each NUL, becomes
    U+FFFD. `s` itself is returned when it is valid already. */
const char *zl_text_sanitize (zl_arena_t *arena, const char *s, size_t len);

#endif
