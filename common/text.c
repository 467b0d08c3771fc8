#include "text.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

// The length of the valid UTF-8 character (not NUL) that starts the `len`
// bytes at `p`, or 0 if they do not start with one (RFC 3629, table 3-7 of
// the Unicode standard: no overlongs, no surrogates, at most U+10FFFF).
static size_t
s_char_len (const uint8_t *p, size_t len)
{
    uint8_t c = p[0];
    if (c == 0)
        return 0;
    if (c < 0x80)
        return 1;
    size_t n;
    uint8_t lo = 0x80, hi = 0xBF; // bounds of the second byte
    if (c >= 0xC2 && c <= 0xDF)
        n = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0)
            lo = 0xA0; // overlong below U+0800
        else if (c == 0xED)
            hi = 0x9F; // U+D800..U+DFFF are surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0)
            lo = 0x90; // overlong below U+10000
        else if (c == 0xF4)
            hi = 0x8F; // past U+10FFFF
    } else
        return 0; // a continuation byte, 0xC0, 0xC1, or 0xF5..0xFF
    if (len < n || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if ((p[i] & 0xC0) != 0x80)
            return 0;
    return n;
}

bool
zl_text_valid (const char *s, size_t len)
{
    const uint8_t *p = (const uint8_t *)s;
    size_t i = 0;
    while (i < len) {
        if (p[i] && p[i] < 0x80) { // the common case: ASCII
            i++;
            continue;
        }
        size_t n = s_char_len (p + i, len - i);
        if (!n)
            return false;
        i += n;
    }
    return true;
}

const char *
zl_text_name_problem (zl_arena_t *arena, const char *s, size_t max, bool allow_empty)
{
    size_t len = strlen (s);
    if (!len && !allow_empty)
        return "is empty";
    if (len > max)
        return zl_arena_printf (arena, "is longer than %zu bytes", max);
    for (size_t i = 0; i < len; i++)
        if ((uint8_t)s[i] < 0x20 || s[i] == 0x7f)
            return "contains a control character";
    return NULL;
}

size_t
zl_text_cut (const char *s, size_t len, size_t max)
{
    if (len <= max)
        return len;
    size_t n = max;
    // back off the continuation bytes of a character the cut would split
    while (n > 0 && ((uint8_t)s[n] & 0xC0) == 0x80)
        n--;
    return n;
}

const char *
zl_text_sanitize (zl_arena_t *arena, const char *s, size_t len)
{
    if (zl_text_valid (s, len))
        return s;
    const uint8_t *p = (const uint8_t *)s;
    char *out = zl_arena_alloc (arena, len * 3 + 1); // U+FFFD is 3 bytes
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        size_t n = s_char_len (p + i, len - i);
        if (n) {
            memcpy (out + o, p + i, n);
            o += n;
            i += n;
        } else {
            memcpy (out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    out[o] = '\0';
    return out;
}
