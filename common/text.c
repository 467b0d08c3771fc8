/*  text: UTF-8 validation and repair (see text.h). One decoder step,
    s_char, is shared by both functions, after the Unicode Standard's table
    of well-formed byte sequences (Table 3-7). */
#include "text.h"

#include <stdint.h>
#include <string.h>

/*  Look at the character starting at `p` (n >= 1 bytes left). Returns its
    length (1..4) if it is well formed and not NUL, else 0 with `*bad` set
    to the length of the maximal ill-formed subsequence there (>= 1): the
    bytes one U+FFFD replaces. */
static size_t
s_char (const uint8_t *p, size_t n, size_t *bad)
{
    uint8_t c = p[0];
    if (c >= 0x01 && c <= 0x7F)
        return 1;
    // The lead byte fixes the length and the range of the second byte
    // (narrower after E0, ED, F0 and F4: no overlong forms, surrogates or
    // code points past U+10FFFF); later bytes are 80..BF.
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        need = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        lo = c == 0xE0 ? 0xA0 : 0x80;
        hi = c == 0xED ? 0x9F : 0xBF;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        lo = c == 0xF0 ? 0x90 : 0x80;
        hi = c == 0xF4 ? 0x8F : 0xBF;
    } else {
        *bad = 1; // NUL, a continuation byte, C0, C1 or F5..FF
        return 0;
    }
    size_t i = 1;
    for (; i < need && i < n; i++) {
        uint8_t lo_i = i == 1 ? lo : 0x80, hi_i = i == 1 ? hi : 0xBF;
        if (p[i] < lo_i || p[i] > hi_i)
            break;
    }
    if (i == need)
        return need;
    *bad = i; // the lead and the continuation bytes that still fitted
    return 0;
}

bool
zl_text_valid (const char *s, size_t len)
{
    const uint8_t *p = (const uint8_t *)s;
    size_t bad;
    for (size_t at = 0; at < len;) {
        size_t k = s_char (p + at, len - at, &bad);
        if (!k)
            return false;
        at += k;
    }
    return true;
}

size_t
zl_text_sanitize (const char *s, size_t len, char *out, size_t size)
{
    const uint8_t *p = (const uint8_t *)s;
    size_t room = size - 1, w = 0, bad;
    for (size_t at = 0; at < len;) {
        size_t k = s_char (p + at, len - at, &bad);
        const char *from = k ? s + at : ZL_TEXT_REPLACEMENT;
        size_t out_len = k ? k : sizeof ZL_TEXT_REPLACEMENT - 1;
        if (out_len > room - w)
            break; // it would not fit whole
        memcpy (out + w, from, out_len);
        w += out_len;
        at += k ? k : bad;
    }
    out[w] = '\0';
    return w;
}

const char *
zl_text_repair (zl_arena_t *arena, const char *s, size_t len)
{
    if (zl_text_valid (s, len))
        return s;
    size_t size = ZL_TEXT_SANITIZED_SIZE (len);
    char *out = zl_arena_alloc (arena, size);
    zl_text_sanitize (s, len, out, size);
    return out;
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

bool
zl_text_contains_nocase (const char *text, const char *part)
{
    size_t n = strlen (part);
    if (n == 0)
        return true;
    for (; *text; text++) {
        size_t i = 0;
        while (i < n && text[i]) {
            unsigned char a = (unsigned char)text[i], b = (unsigned char)part[i];
            if (a >= 'A' && a <= 'Z')
                a = (unsigned char)(a + 32);
            if (b >= 'A' && b <= 'Z')
                b = (unsigned char)(b + 32);
            if (a != b)
                break;
            i++;
        }
        if (i == n)
            return true;
    }
    return false;
}
