/*  text: the rules for the strings zlane takes in and sends out.

    Every `string` field of the protocol is proto3 text: well-formed UTF-8
    (RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF),
    which decoders in other languages enforce. zlane adds: no NUL byte (C
    strings end there, so "acme\0evil" would silently become "acme"). Names
    -- tenants, lanes, worker and client names, header keys, idempotency
    keys -- also carry no control characters (U+0000-U+001F, U+007F: they
    would forge log lines) and have a length limit in bytes. The broker
    refuses what does not pass; the worker library repairs what its handlers
    report, and the broker what older versions stored. */
#ifndef ZL_TEXT_H
#define ZL_TEXT_H

#include "arena.h"

#include <stdbool.h>
#include <stddef.h>

/*  U+FFFD REPLACEMENT CHARACTER, as UTF-8. */
#define ZL_TEXT_REPLACEMENT "\xEF\xBF\xBD"
/*  The room zl_text_sanitize needs so that nothing of `len` bytes is cut:
    every byte may become a 3-byte U+FFFD, plus the NUL. */
#define ZL_TEXT_SANITIZED_SIZE(len) (3 * (size_t)(len) + 1)

/*  Return true if the `len` bytes at `s` are well-formed UTF-8 without a
    NUL byte: no overlong form, no surrogate (U+D800..U+DFFF), nothing above
    U+10FFFF, no sequence cut short. An empty text (s may then be NULL) is
    valid. */
bool zl_text_valid (const char *s, size_t len);

/*  Copy the `len` bytes at `s` into `out` (room for `size` >= 1 bytes) as
    valid text: each NUL byte, and each maximal ill-formed subsequence (the
    Unicode "maximal subpart" rule that browsers' decoders follow), becomes
    one U+FFFD. Stops before the first character that would not fit in
    size - 1 bytes, so no character is ever cut, and always NUL-terminates.
    Returns the bytes written, the NUL not counted. Valid text that fits is
    copied unchanged. */
size_t zl_text_sanitize (const char *s, size_t len, char *out, size_t size);

/*  `s` itself if its `len` bytes are valid text, else a repaired copy
    (zl_text_sanitize, nothing cut) in `arena`. */
const char *zl_text_repair (zl_arena_t *arena, const char *s, size_t len);

/*  The why of a name that breaks the rules, or NULL if `s` (NUL-terminated,
    already valid text) is a good name: "is empty" (unless `allow_empty`),
    "is longer than N bytes" (N = `max`), "contains a control character".
    The text is static or in `arena`. */
const char *zl_text_name_problem (zl_arena_t *arena, const char *s, size_t max, bool allow_empty);

/*  The length of the longest prefix of the `len` bytes at `s` that is at
    most `max` bytes and does not end inside a UTF-8 character. */
size_t zl_text_cut (const char *s, size_t len, size_t max);
/*  True if `text` holds `part` (ASCII letters compared without case; an
    empty `part` is in every text). */
bool zl_text_contains_nocase (const char *text, const char *part);

#endif
