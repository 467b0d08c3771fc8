/*  test_text: UTF-8 validation and repair (common/text.h), checked against
    a reference decoder written the other way round (bit patterns, then the
    code point's range) over every 1-, 2- and 3-byte string and random
    longer ones, and on the cases that matter: overlong forms, surrogates,
    code points past U+10FFFF, NUL, cut sequences, the room in the output. */
#include "arena.h"
#include "rng.h"
#include "text.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define FFFD ZL_TEXT_REPLACEMENT

/*  The reference: decode each character from its bit pattern, then
    require the shortest form, no surrogate, at most U+10FFFF, and no NUL. */
static bool
s_model_valid (const uint8_t *p, size_t len)
{
    size_t i = 0;
    while (i < len) {
        uint8_t c = p[i];
        size_t n;
        uint32_t cp;
        if ((c & 0x80) == 0x00)
            n = 1, cp = c;
        else if ((c & 0xE0) == 0xC0)
            n = 2, cp = c & 0x1F;
        else if ((c & 0xF0) == 0xE0)
            n = 3, cp = c & 0x0F;
        else if ((c & 0xF8) == 0xF0)
            n = 4, cp = c & 0x07;
        else
            return false;
        if (i + n > len)
            return false;
        for (size_t k = 1; k < n; k++) {
            if ((p[i + k] & 0xC0) != 0x80)
                return false;
            cp = (cp << 6) | (p[i + k] & 0x3F);
        }
        static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp == 0 || cp < min[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += n;
    }
    return true;
}

static bool
s_valid (const char *s)
{
    return zl_text_valid (s, strlen (s));
}

// ---------------------------------------------------------------- valid

static void
test_valid_cases (void **state)
{
    (void)state;
    assert_true (zl_text_valid (NULL, 0));
    assert_true (s_valid ("plain ascii, with\ttabs\nand newlines"));
    assert_true (s_valid ("\xC2\x80"));         // U+0080, the first 2-byte
    assert_true (s_valid ("\xDF\xBF"));         // U+07FF
    assert_true (s_valid ("\xE0\xA0\x80"));     // U+0800, the first 3-byte
    assert_true (s_valid ("\xED\x9F\xBF"));     // U+D7FF, just below the surrogates
    assert_true (s_valid ("\xEE\x80\x80"));     // U+E000, just above them
    assert_true (s_valid ("\xEF\xBF\xBD"));     // U+FFFD
    assert_true (s_valid ("\xEF\xBF\xBF"));     // U+FFFF
    assert_true (s_valid ("\xF0\x90\x80\x80")); // U+10000, the first 4-byte
    assert_true (s_valid ("\xF4\x8F\xBF\xBF")); // U+10FFFF, the last
    assert_true (s_valid ("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80")); // é € 😀

    assert_false (zl_text_valid ("a\0b", 3));    // NUL inside
    assert_false (zl_text_valid ("", 1));        // a lone NUL
    assert_false (s_valid ("\x80"));             // a lone continuation byte
    assert_false (s_valid ("\xC0\x80"));         // overlong NUL
    assert_false (s_valid ("\xC1\xBF"));         // overlong U+007F
    assert_false (s_valid ("\xE0\x9F\xBF"));     // overlong U+07FF
    assert_false (s_valid ("\xF0\x8F\xBF\xBF")); // overlong U+FFFF
    assert_false (s_valid ("\xED\xA0\x80"));     // U+D800, a surrogate
    assert_false (s_valid ("\xED\xBF\xBF"));     // U+DFFF
    assert_false (s_valid ("\xF4\x90\x80\x80")); // U+110000
    assert_false (s_valid ("\xF5\x80\x80\x80")); // no such lead byte
    assert_false (s_valid ("\xFF"));
    assert_false (s_valid ("\xE2\x82"));            // cut short at the end
    assert_false (s_valid ("\xE2\x82x"));           // cut short by a new character
    assert_false (zl_text_valid ("\xC3\xA9", 1));   // len cuts it
    assert_true (zl_text_valid ("\xC3\xA9xyz", 2)); // only len bytes count
}

/*  Every string of 1, 2 and 3 bytes: the model and zl_text_valid agree. */
static void
test_valid_exhaustive (void **state)
{
    (void)state;
    uint8_t b[3];
    size_t n_valid = 0;
    for (uint32_t x = 0; x < (1u << 24); x++) {
        b[0] = (uint8_t)(x >> 16), b[1] = (uint8_t)(x >> 8), b[2] = (uint8_t)x;
        bool got = zl_text_valid ((const char *)b, 3);
        if (got != s_model_valid (b, 3))
            fail_msg ("%02x %02x %02x: zl_text_valid says %d", b[0], b[1], b[2], got);
        n_valid += got;
        if (x < (1u << 16)) {
            const uint8_t *two = b + 1; // (x >> 8) & 0xff, x & 0xff
            assert_int_equal (zl_text_valid ((const char *)two, 2), s_model_valid (two, 2));
            assert_int_equal (zl_text_valid ((const char *)two + 1, 1), s_model_valid (two + 1, 1));
        }
    }
    assert_true (n_valid > 0);
}

/*  Random strings up to 12 bytes, biased towards bytes that start or
    continue sequences, so that 4-byte forms are well covered. */
static void
test_valid_random (void **state)
{
    (void)state;
    zl_rng_t rng;
    zl_rng_seed (&rng, 42);
    static const uint8_t pool[] = {0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0,
                                   0xC2, 0xDF, 0xE0, 0xED, 0xEF, 0xF0, 0xF4, 0xF5, 0xFF};
    uint8_t b[12];
    for (int i = 0; i < 1000000; i++) {
        size_t len = 1 + (size_t)zl_rng_range (&rng, sizeof b - 1);
        for (size_t k = 0; k < len; k++)
            b[k] = zl_rng_range (&rng, 1) ? pool[zl_rng_range (&rng, sizeof pool - 1)]
                                          : (uint8_t)zl_rng_next (&rng);
        if (zl_text_valid ((const char *)b, len) != s_model_valid (b, len))
            fail_msg ("random string %d (%zu bytes) disagrees with the model", i, len);
    }
}

// ---------------------------------------------------------------- sanitize

/*  Sanitize `in` (`len` bytes) with room `size` and compare with `want`. */
static void
s_expect (const char *in, size_t len, size_t size, const char *want)
{
    char out[256];
    assert_true (size <= sizeof out);
    memset (out, 'Z', sizeof out);
    size_t n = zl_text_sanitize (in, len, out, size);
    assert_int_equal (n, strlen (want));
    assert_string_equal (out, want);
    assert_true (zl_text_valid (out, n));
}

static void
test_sanitize_cases (void **state)
{
    (void)state;
    const char good[] = "caf\xC3\xA9 \xF0\x9F\x98\x80 done";
    s_expect (good, sizeof good - 1, 256, good); // valid: unchanged
    s_expect ("", 0, 1, "");
    s_expect ("a\xFF"
              "b",
              3, 256, "a" FFFD "b");                            // a stray byte
    s_expect ("a\0b", 3, 256, "a" FFFD "b");                    // NUL
    s_expect ("\xED\xA0\x80", 3, 256, FFFD FFFD FFFD);          // a surrogate: ED, A0, 80 apart
    s_expect ("\xC0\x80", 2, 256, FFFD FFFD);                   // overlong: each byte
    s_expect ("\xE2\x82", 2, 256, FFFD);                        // cut short: one for the subpart
    s_expect ("\xF0\x9F\x98x", 4, 256, FFFD "x");               // cut short by a new character
    s_expect ("\xF4\x90\x80\x80", 4, 256, FFFD FFFD FFFD FFFD); // past U+10FFFF
    s_expect ("\xE2\x82\xE2\x82\xAC", 5, 256, FFFD "\xE2\x82\xAC");
    // The same test the worker library's s_utf8_scrub had, now with U+FFFD.
    s_expect ("a\xFF"
              "b\xC3\xA9"
              "c\xED\xA0\x80",
              9, 256,
              "a" FFFD "b\xC3\xA9"
              "c" FFFD FFFD FFFD);

    // Room: never a cut character, always NUL-terminated.
    s_expect ("ab\xE2\x82\xAC", 5, 5, "ab");             // 4 bytes of room: the euro does not fit
    s_expect ("ab\xE2\x82\xAC", 5, 6, "ab\xE2\x82\xAC"); // 5: it does
    s_expect ("ab\xFF", 3, 5, "ab");                     // nor does a replacement
    s_expect ("abc", 3, 1, "");
    s_expect ("abc", 3, 3, "ab");
}

/*  Whatever goes in, what comes out is valid, and sanitizing twice changes
    nothing more; with ZL_TEXT_SANITIZED_SIZE room nothing is dropped. */
static void
test_sanitize_random (void **state)
{
    (void)state;
    zl_rng_t rng;
    zl_rng_seed (&rng, 7);
    uint8_t in[64];
    char out[ZL_TEXT_SANITIZED_SIZE (64)], again[sizeof out];
    for (int i = 0; i < 200000; i++) {
        size_t len = (size_t)zl_rng_range (&rng, sizeof in);
        for (size_t k = 0; k < len; k++)
            in[k] = (uint8_t)zl_rng_next (&rng);
        size_t n = zl_text_sanitize ((const char *)in, len, out, ZL_TEXT_SANITIZED_SIZE (len));
        assert_true (zl_text_valid (out, n));
        assert_int_equal (out[n], '\0');
        if (s_model_valid (in, len)) {
            assert_int_equal (n, len);
            assert_memory_equal (out, in, len);
        } else
            assert_true (n >= len); // a U+FFFD stands for at most 3 bytes
        size_t m = zl_text_sanitize (out, n, again, sizeof again);
        assert_int_equal (m, n);
        assert_memory_equal (again, out, n);
        // Less room: a prefix of the full answer, ending on a character.
        size_t size = 1 + (size_t)zl_rng_range (&rng, n);
        char cut[sizeof out];
        size_t c = zl_text_sanitize ((const char *)in, len, cut, size);
        assert_true (c < size);
        assert_memory_equal (cut, out, c);
        assert_true (zl_text_valid (cut, c));
    }
}

static void
test_valid_table (void **state)
{
    (void)state;
    static const struct {
        const char *s;
        size_t len;
        bool valid;
    } cases[] = {
        {"", 0, true},
        {"acme", 4, true},
        {"caf\xc3\xa9", 5, true},       // U+00E9
        {"\xe2\x82\xac", 3, true},      // U+20AC
        {"\xf0\x9f\x98\x80", 4, true},  // U+1F600
        {"\xf4\x8f\xbf\xbf", 4, true},  // U+10FFFF, the last
        {"\xed\x9f\xbf", 3, true},      // U+D7FF, below the surrogates
        {"\xee\x80\x80", 3, true},      // U+E000, above them
        {"acme\0evil", 9, false},       // NUL
        {"\xff", 1, false},             // never in UTF-8
        {"\x80", 1, false},             // a lone continuation byte
        {"\xc3", 1, false},             // cut short
        {"\xe2\x82", 2, false},         // cut short
        {"\xc0\xaf", 2, false},         // overlong '/'
        {"\xc1\xbf", 2, false},         // overlong
        {"\xe0\x80\xaf", 3, false},     // overlong
        {"\xf0\x80\x80\xaf", 4, false}, // overlong
        {"\xed\xa0\x80", 3, false},     // U+D800, a surrogate
        {"\xed\xbf\xbf", 3, false},     // U+DFFF
        {"\xf4\x90\x80\x80", 4, false}, // U+110000
        {"\xf5\x80\x80\x80", 4, false}, // past the range
        {"\xc3\x28", 2, false},         // a lead byte then ASCII
        {"ok\xe2\x82\xacok\xe2\x28\xa1", 11, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (zl_text_valid (cases[i].s, cases[i].len) != cases[i].valid)
            fail_msg ("case %zu: zl_text_valid should be %d", i, cases[i].valid);
}

static void
test_names_cut_repair (void **state)
{
    (void)state;
    zl_arena_t *a = zl_arena_new (1024);
    assert_null (zl_text_name_problem (a, "acme", 128, false));
    assert_null (zl_text_name_problem (a, "", 128, true));
    assert_string_equal (zl_text_name_problem (a, "", 128, false), "is empty");
    assert_string_equal (zl_text_name_problem (a, "a\nb", 128, false),
                         "contains a control character");
    assert_string_equal (zl_text_name_problem (a, "a\x7f", 128, false),
                         "contains a control character");
    assert_string_equal (zl_text_name_problem (a, "abcde", 4, false), "is longer than 4 bytes");
    assert_null (zl_text_name_problem (a, "caf\xc3\xa9", 5, false)); // bytes, not characters

    // a cut never splits a character
    const char *e = "a\xe2\x82\xac"
                    "b"; // a, U+20AC, b
    assert_int_equal (zl_text_cut (e, 5, 10), 5);
    assert_int_equal (zl_text_cut (e, 5, 4), 4);
    assert_int_equal (zl_text_cut (e, 5, 3), 1);
    assert_int_equal (zl_text_cut (e, 5, 2), 1);
    assert_int_equal (zl_text_cut (e, 5, 1), 1);
    assert_int_equal (zl_text_cut (e, 5, 0), 0);
    // and zl_arena_printf cuts the same way
    char big[ZL_ARENA_PRINTF_MAX + 8];
    memset (big, 'x', ZL_ARENA_PRINTF_MAX - 1);
    memcpy (big + ZL_ARENA_PRINTF_MAX - 1, "\xe2\x82\xac", 4);
    char *cut = zl_arena_printf (a, "%s", big);
    assert_int_equal (strlen (cut), ZL_ARENA_PRINTF_MAX - 1);
    assert_true (zl_text_valid (cut, strlen (cut)));

    // repair: valid text is returned as is, the rest made valid
    const char *ok = "fine \xc3\xa9";
    assert_ptr_equal (zl_text_repair (a, ok, strlen (ok)), ok);
    const char *bad = "a\xff"
                      "b\xed\xa0\x80"
                      "c";
    const char *fixed = zl_text_repair (a, bad, strlen (bad));
    assert_string_equal (fixed, "a\xef\xbf\xbd"
                                "b\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
                                "c");
    assert_true (zl_text_valid (fixed, strlen (fixed)));
    assert_string_equal (zl_text_repair (a, "x\0y", 3), "x\xef\xbf\xbdy");
    zl_arena_destroy (&a);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test (test_valid_cases),      cmocka_unit_test (test_valid_exhaustive),
        cmocka_unit_test (test_valid_random),     cmocka_unit_test (test_sanitize_cases),
        cmocka_unit_test (test_sanitize_random),  cmocka_unit_test (test_valid_table),
        cmocka_unit_test (test_names_cut_repair),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
