/*  test_bucket: the token bucket (broker/bucket.c) the broker applies at
    dispatch, per lane and per tenant. Time is simulated (plain integers of
    monotonic ms), never read. Checks: it starts full; over any window of t
    ms a greedy consumer never gets more than burst + rate * t tokens, and
    gets that many (less one) when it polls often enough; it refills to burst
    and no further; rate 0 is unlimited; next_ms is never early and at most
    1 ms late; a consumer that sleeps until next_ms keeps the full rate. */
#include "bucket.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#define T0 1000000 // simulated monotonic ms at the start of each test

// The configurations every property is checked with: (rate per s, burst).
static const struct {
    double rate, burst;
} s_configs[] = {{20, 5}, {1, 1}, {1000, 1}, {333, 7}, {2.5, 1.5}, {50, 50}, {0.5, 2}, {7, 0}};
#define N_CONFIGS (sizeof s_configs / sizeof s_configs[0])

// The burst a bucket set up with `burst` ends up with (bucket.h: below 1
// it becomes max(1, rate / 10)).
static double
s_effective_burst (double rate, double burst)
{
    if (burst >= 1)
        return burst;
    return rate / 10 > 1 ? rate / 10 : 1;
}

// Would the bucket give a token at `at`? Asks a copy: the bucket itself
// never sees time go back (bucket.c only refills forward).
static bool
s_ready_at (const zl_bucket_t *b, int64_t at)
{
    zl_bucket_t copy = *b;
    return zl_bucket_ready (&copy, at);
}

// A greedy consumer: at every ms from T0 to T0 + span_ms it takes all the
// tokens there are. Returns the take times (caller frees) and their count.
static int64_t *
s_greedy (zl_bucket_t *b, int64_t span_ms, int64_t step_ms, size_t *n_p)
{
    size_t cap = 1024, n = 0;
    int64_t *at = malloc (cap * sizeof *at);
    for (int64_t now = T0; now <= T0 + span_ms; now += step_ms) {
        while (zl_bucket_ready (b, now)) {
            zl_bucket_take (b, now);
            if (n == cap)
                at = realloc (at, (cap *= 2) * sizeof *at);
            at[n++] = now;
            assert_true (n < 10000000); // a bucket that never runs dry
        }
    }
    *n_p = n;
    return at;
}

// No window [at[i], at[j]] holds more than burst + rate * (at[j] - at[i])
// tokens (a tiny epsilon for the float sums).
static void
s_check_windows (const int64_t *at, size_t n, double rate, double burst, const char *what)
{
    for (size_t i = 0; i < n; i++)
        for (size_t j = i; j < n; j++) {
            double allowed = burst + rate * (double)(at[j] - at[i]) / 1000.0 + 1e-6;
            if ((double)(j - i + 1) > allowed)
                fail_msg ("%s (rate %g, burst %g): %zu tokens in [%lld, %lld] ms, at most %.3f "
                          "allowed",
                          what, rate, burst, j - i + 1, (long long)(at[i] - T0),
                          (long long)(at[j] - T0), allowed);
        }
}

// ---------------------------------------------------------------- tests
static void
test_unlimited_when_rate_zero (void **state)
{
    (void)state;
    zl_bucket_t b;
    zl_bucket_init (&b, 0, 0, T0);
    for (int i = 0; i < 100000; i++) {
        assert_true (zl_bucket_ready (&b, T0));
        zl_bucket_take (&b, T0);
    }
    assert_int_equal (zl_bucket_next_ms (&b, T0), T0);
    assert_int_equal (zl_bucket_next_ms (&b, T0 + 5), T0 + 5);
    // a burst does not limit an unlimited bucket either
    zl_bucket_init (&b, 0, 3, T0);
    for (int i = 0; i < 1000; i++) {
        assert_true (zl_bucket_ready (&b, T0));
        zl_bucket_take (&b, T0);
    }
}

static void
test_starts_full_and_burst_default (void **state)
{
    (void)state;
    for (size_t c = 0; c < N_CONFIGS; c++) {
        double rate = s_configs[c].rate, burst = s_effective_burst (rate, s_configs[c].burst);
        zl_bucket_t b;
        zl_bucket_init (&b, rate, s_configs[c].burst, T0);
        assert_true (fabs (b.burst - burst) < 1e-9);
        // full at the start: floor(burst) tokens at once, not one more
        size_t n = 0;
        while (zl_bucket_ready (&b, T0)) {
            zl_bucket_take (&b, T0);
            n++;
            assert_true (n <= 1000);
        }
        if (n != (size_t)floor (burst))
            fail_msg ("rate %g burst %g: %zu tokens at the start, expected %.0f", rate, burst, n,
                      floor (burst));
    }
    // burst below 1: max(1, rate / 10)
    zl_bucket_t b;
    zl_bucket_init (&b, 100, 0, T0);
    assert_true (fabs (b.burst - 10) < 1e-9);
    zl_bucket_init (&b, 5, 0.5, T0);
    assert_true (fabs (b.burst - 1) < 1e-9);
}

// The bound that makes it a rate limit: over any window, burst + rate * t.
// And the greedy consumer polling every ms gets (nearly) all of it.
static void
test_never_more_than_burst_plus_rate_t (void **state)
{
    (void)state;
    for (size_t c = 0; c < N_CONFIGS; c++) {
        double rate = s_configs[c].rate, burst = s_effective_burst (rate, s_configs[c].burst);
        int64_t span = (int64_t)(2000.0 / rate * 1000.0); // about 2,000 tokens' worth
        if (span > 600000)
            span = 600000;
        if (span < 3000)
            span = 3000;
        zl_bucket_t b;
        zl_bucket_init (&b, rate, s_configs[c].burst, T0);
        size_t n;
        int64_t *at = s_greedy (&b, span, 1, &n);
        s_check_windows (at, n, rate, burst, "greedy every ms");
        free (at);
        // and not stingy: the float sums lose at most a token
        double due = floor (burst + rate * (double)span / 1000.0);
        if ((double)n < due - 1)
            fail_msg ("rate %g burst %g: %zu tokens in %lld ms, %.0f due", rate, burst, n,
                      (long long)span, due);
        // polling at odd intervals does not beat the bound either
        zl_bucket_init (&b, rate, s_configs[c].burst, T0);
        at = s_greedy (&b, span, 37, &n);
        s_check_windows (at, n, rate, burst, "greedy every 37 ms");
        free (at);
    }
}

// Idle for long: back to burst and no further (no banked tokens).
static void
test_refills_to_burst_only (void **state)
{
    (void)state;
    zl_bucket_t b;
    zl_bucket_init (&b, 20, 5, T0);
    for (int i = 0; i < 5; i++)
        zl_bucket_take (&b, T0);
    assert_false (zl_bucket_ready (&b, T0));
    // 100 ms: two tokens (20/s)
    assert_true (zl_bucket_ready (&b, T0 + 100));
    zl_bucket_take (&b, T0 + 100);
    assert_true (zl_bucket_ready (&b, T0 + 100));
    zl_bucket_take (&b, T0 + 100);
    assert_false (zl_bucket_ready (&b, T0 + 100));
    // an hour idle: exactly 5 again
    int64_t later = T0 + 3600 * 1000;
    int n = 0;
    while (zl_bucket_ready (&b, later)) {
        zl_bucket_take (&b, later);
        n++;
        assert_true (n <= 5);
    }
    assert_int_equal (n, 5);
    // a clock that steps back adds nothing
    assert_false (zl_bucket_ready (&b, later - 1000));
    assert_false (zl_bucket_ready (&b, later));
}

// next_ms: the bucket is ready at next_ms (never early) and was not ready
// 2 ms before (at most 1 ms late); "now" when a token is there.
static void
test_next_ms_is_exact_enough (void **state)
{
    (void)state;
    for (size_t c = 0; c < N_CONFIGS; c++) {
        double rate = s_configs[c].rate;
        zl_bucket_t b;
        zl_bucket_init (&b, rate, s_configs[c].burst, T0);
        assert_int_equal (zl_bucket_next_ms (&b, T0), T0); // full: now
        int64_t now = T0;
        uint64_t seed = 99 + c;
        for (int k = 0; k < 500; k++) {
            while (zl_bucket_ready (&b, now))
                zl_bucket_take (&b, now);
            int64_t next = zl_bucket_next_ms (&b, now);
            assert_true (next > now);
            if (!s_ready_at (&b, next))
                fail_msg ("rate %g: next_ms %lld but no token then", rate, (long long)(next - T0));
            if (next - 2 >= now && s_ready_at (&b, next - 2))
                fail_msg ("rate %g: next_ms %lld is more than 1 ms late", rate,
                          (long long)(next - T0));
            // the one-token wait is 1000 / rate ms (rounded up, +1 at most)
            assert_true ((double)(next - now) <= 1000.0 / rate + 1.0 + 1e-6);
            // move on by a random part of the wait (or to next itself)
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            int64_t step = (int64_t)((seed >> 33) % (uint64_t)(next - now + 1));
            now += step ? step : next - now;
        }
    }
}

// A consumer that only wakes at next_ms (as the scheduler's wake heap does)
// keeps the configured rate: the +1 ms rounding does not add up.
static void
test_sleeping_until_next_ms_keeps_the_rate (void **state)
{
    (void)state;
    for (size_t c = 0; c < N_CONFIGS; c++) {
        double rate = s_configs[c].rate, burst = s_effective_burst (rate, s_configs[c].burst);
        zl_bucket_t b;
        zl_bucket_init (&b, rate, s_configs[c].burst, T0);
        int64_t span = (int64_t)(1000.0 / rate * 1000.0); // 1,000 tokens' worth
        if (span > 600000)
            span = 600000;
        size_t n = 0, cap = 4096;
        int64_t *at = malloc (cap * sizeof *at);
        int64_t now = T0;
        while (now <= T0 + span) {
            while (zl_bucket_ready (&b, now)) {
                zl_bucket_take (&b, now);
                if (n == cap)
                    at = realloc (at, (cap *= 2) * sizeof *at);
                at[n++] = now;
            }
            now = zl_bucket_next_ms (&b, now);
        }
        s_check_windows (at, n, rate, burst, "sleeping until next_ms");
        free (at);
        double due = burst + rate * (double)span / 1000.0;
        if ((double)n < due - 2)
            fail_msg ("rate %g burst %g: %zu tokens in %lld ms waking at next_ms, %.1f due", rate,
                      burst, n, (long long)span, due);
    }
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test (test_unlimited_when_rate_zero),
        cmocka_unit_test (test_starts_full_and_burst_default),
        cmocka_unit_test (test_never_more_than_burst_plus_rate_t),
        cmocka_unit_test (test_refills_to_burst_only),
        cmocka_unit_test (test_next_ms_is_exact_enough),
        cmocka_unit_test (test_sleeping_until_next_ms_keeps_the_rate),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
