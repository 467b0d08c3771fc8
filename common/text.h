/*  text: the rule for protocol text. A string field zlane sends (a Nack's
    error text above all) must be well-formed UTF-8 (RFC 3629) without NUL
    bytes: protobuf decoders in other languages refuse anything else, and C
    readers would stop at the NUL. The worker library repairs what its
    handlers report; the broker refuses what does not pass. */
#ifndef ZL_TEXT_H
#define ZL_TEXT_H

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

#endif
