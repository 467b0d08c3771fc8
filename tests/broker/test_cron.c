/*  test_cron: cron expressions (broker/cron.c): parsing, refusals with a
    reason, and tick arithmetic in UTC: steps, lists, names, the either-day
    rule, month ends, leap years, a year boundary, @every's alignment, and
    that the ticks do not depend on when they are asked for (a restart asks
    from its last tick and finds the same next one). */
#define _GNU_SOURCE // timegm
#include "cron.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>
#include <time.h>

// Unix ms of a UTC date.
static int64_t
s_at (int y, int mo, int d, int h, int mi)
{
    struct tm tm = {
        .tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d, .tm_hour = h, .tm_min = mi};
    return (int64_t)timegm (&tm) * 1000;
}

static zl_cron_t
s_parse (const char *text)
{
    zl_cron_t c;
    char err[160] = "";
    if (zl_cron_parse (text, &c, err, sizeof err) != 0)
        fail_msg ("'%s': %s", text, err);
    return c;
}

static void
s_refused (const char *text, const char *why)
{
    zl_cron_t c;
    char err[160] = "";
    assert_int_equal (zl_cron_parse (text, &c, err, sizeof err), -1);
    if (!strstr (err, why))
        fail_msg ("'%s': '%s' does not say '%s'", text, err, why);
}

static void
test_parse_and_refuse (void **state)
{
    (void)state;
    zl_cron_t c = s_parse ("*/15 9-17 * JAN,jul MON-FRI");
    assert_int_equal (c.minutes, (1ull << 0) | (1ull << 15) | (1ull << 30) | (1ull << 45));
    assert_int_equal (c.hours, 0x3fe00u); // 9..17
    assert_int_equal (c.months, (1u << 1) | (1u << 7));
    assert_int_equal (c.weekdays, 0x3e); // 1..5
    assert_true (c.dom_any);
    assert_false (c.dow_any);
    c = s_parse ("0 0 * * 7"); // 7 is Sunday
    assert_int_equal (c.weekdays, 1);
    c = s_parse ("5/20 * * * *");
    assert_int_equal (c.minutes, (1ull << 5) | (1ull << 25) | (1ull << 45));
    c = s_parse ("@hourly");
    assert_int_equal (c.minutes, 1);
    assert_int_equal (c.hours, 0xffffffu);
    c = s_parse ("@every 90s");
    assert_int_equal (c.every_ms, 90000);
    s_refused ("* * * *", "not 5");
    s_refused ("* * * * * *", "more than 5");
    s_refused ("60 * * * *", "out of 0-59");
    s_refused ("* 24 * * *", "hour");
    s_refused ("* * 0 * *", "day of the month");
    s_refused ("* * * 13 *", "month");
    s_refused ("* * * * 8", "day of the week");
    s_refused ("*/0 * * * *", "bad minute");
    s_refused ("5-1 * * * *", "out of");
    s_refused ("1,,2 * * * *", "bad minute");
    s_refused ("* * * FOO *", "bad month");
    s_refused ("@every 500ms", "at least 1s");
    s_refused ("@every soon", "at least 1s");
    s_refused ("@sometimes", "unknown macro");
    s_refused ("", "not 5");
}

static void
test_next_ticks (void **state)
{
    (void)state;
    zl_cron_t c = s_parse ("*/5 * * * *");
    assert_int_equal (zl_cron_next (&c, s_at (2026, 3, 1, 10, 2)), s_at (2026, 3, 1, 10, 5));
    assert_int_equal (zl_cron_next (&c, s_at (2026, 3, 1, 10, 5)), s_at (2026, 3, 1, 10, 10));
    assert_int_equal (zl_cron_next (&c, s_at (2026, 3, 1, 10, 5) + 59999),
                      s_at (2026, 3, 1, 10, 10));
    // a UTC year boundary (no DST anywhere: UTC)
    c = s_parse ("59 23 31 12 *");
    assert_int_equal (zl_cron_next (&c, s_at (2026, 6, 1, 0, 0)), s_at (2026, 12, 31, 23, 59));
    c = s_parse ("0 0 1 1 *");
    assert_int_equal (zl_cron_next (&c, s_at (2026, 12, 31, 23, 59)), s_at (2027, 1, 1, 0, 0));
    c = s_parse ("*/30 * * * *");
    assert_int_equal (zl_cron_next (&c, s_at (2026, 12, 31, 23, 45)), s_at (2027, 1, 1, 0, 0));
    // Feb 29 only in leap years; a day that never comes
    c = s_parse ("0 12 29 2 *");
    assert_int_equal (zl_cron_next (&c, s_at (2025, 1, 1, 0, 0)), s_at (2028, 2, 29, 12, 0));
    c = s_parse ("0 0 30 2 *");
    assert_int_equal (zl_cron_next (&c, s_at (2026, 1, 1, 0, 0)), -1);
    // the 31st skips the short months
    c = s_parse ("0 0 31 * *");
    assert_int_equal (zl_cron_next (&c, s_at (2026, 4, 1, 0, 0)), s_at (2026, 5, 31, 0, 0));
    // both day fields restricted: either (the 13th, or a Friday)
    c = s_parse ("0 0 13 * FRI");
    assert_int_equal (zl_cron_next (&c, s_at (2026, 3, 1, 0, 0)), s_at (2026, 3, 6, 0, 0));
    assert_int_equal (zl_cron_next (&c, s_at (2026, 3, 12, 0, 0)), s_at (2026, 3, 13, 0, 0));
    // only the weekday restricted
    c = s_parse ("30 8 * * MON");
    assert_int_equal (zl_cron_next (&c, s_at (2026, 12, 1, 0, 0)), s_at (2026, 12, 7, 8, 30));
    // @every: at multiples since the epoch, whenever asked
    c = s_parse ("@every 7s");
    assert_int_equal (zl_cron_next (&c, 0), 7000);
    assert_int_equal (zl_cron_next (&c, 13999), 14000);
    assert_int_equal (zl_cron_next (&c, 14000), 21000);
}

// A restart asks for the tick after its last one, at some later moment: the
// ticks it walks through are those the broker would have had, in a year of
// "17 3 * * *" and of "*/10 * * * *" across a year boundary.
static void
test_ticks_are_stable_across_restarts (void **state)
{
    (void)state;
    const char *exprs[] = {"17 3 * * *", "*/10 * * * *", "@every 3600s"};
    for (size_t e = 0; e < 3; e++) {
        zl_cron_t c = s_parse (exprs[e]);
        int64_t t = s_at (2026, 12, 30, 0, 0), end = s_at (2027, 1, 3, 0, 0);
        int64_t prev = -1;
        while ((t = zl_cron_next (&c, t)) >= 0 && t < end) {
            assert_true (t > prev);
            // asked from anywhere between the previous tick and this one: this one
            for (int64_t k = 1; k <= 3; k++) {
                int64_t from = prev < 0 ? t - 1 : prev + (t - prev) * k / 4;
                assert_int_equal (zl_cron_next (&c, from), t);
            }
            prev = t;
        }
        assert_true (prev > s_at (2027, 1, 1, 0, 0)); // it crossed the year
    }
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test (test_parse_and_refuse),
        cmocka_unit_test (test_next_ticks),
        cmocka_unit_test (test_ticks_are_stable_across_restarts),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
