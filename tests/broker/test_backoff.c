/*  test_backoff: zl_backoff_ms, the full-jitter retry delay. Every draw lies
    in [0, min(cap, base * 2^attempt)] for any attempt (no shift overflow),
    draws spread over the range with a mean near half the bound, and without
    jitter the bound itself comes back. The bound is computed here
    independently, in 128-bit arithmetic. */
#include "jobs.h"
#include "rng.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdbool.h>

// min (cap, base * 2^attempt), exactly
static uint64_t
s_bound (uint64_t base, uint64_t cap, uint32_t attempt)
{
    if (base == 0)
        return 0;
    if (attempt >= 64)
        return cap;
    unsigned __int128 v = (unsigned __int128)base << attempt;
    return v < cap ? (uint64_t)v : cap;
}

static void
s_check_range (uint64_t base, uint64_t cap, uint32_t max_attempt, int samples)
{
    zl_rng_t rng;
    zl_rng_seed (&rng, base ^ (cap * 31) ^ 0xabcdef);
    for (uint32_t attempt = 0; attempt <= max_attempt; attempt++) {
        uint64_t bound = s_bound (base, cap, attempt);
        // without jitter: the bound exactly
        assert_int_equal (zl_backoff_ms (base, cap, attempt, false, &rng), bound);
        uint64_t first = 0, lo = UINT64_MAX, hi = 0;
        bool all_equal = true;
        for (int i = 0; i < samples; i++) {
            uint64_t v = zl_backoff_ms (base, cap, attempt, true, &rng);
            if (v > bound)
                fail_msg ("base=%llu cap=%llu attempt=%u: %llu > bound %llu",
                          (unsigned long long)base, (unsigned long long)cap, attempt,
                          (unsigned long long)v, (unsigned long long)bound);
            if (i == 0)
                first = v;
            else if (v != first)
                all_equal = false;
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
        if (bound == 0) {
            assert_int_equal (hi, 0);
        } else if (bound >= 16) {
            // spread: not one value, and both ends of the range are reached
            assert_false (all_equal);
            assert_true (lo <= bound / 4);
            assert_true (hi >= bound - bound / 4);
        }
    }
}

static void
test_bounds_typical (void **state)
{
    (void)state;
    s_check_range (1000, 300000, 70, 2000); // the lane defaults
    s_check_range (100, 5000, 70, 2000);
    s_check_range (1, 1000, 70, 2000);
    s_check_range (250, 250, 70, 2000); // base == cap
}

static void
test_bounds_extreme (void **state)
{
    (void)state;
    s_check_range (0, 300000, 70, 200);     // base 0: always 0
    s_check_range (1000, 0, 70, 200);       // cap 0: always 0
    s_check_range (5000, 100, 70, 200);     // base above cap: the cap
    s_check_range (1, UINT64_MAX, 70, 200); // bound 2^attempt all the way to 2^63
    s_check_range (3, UINT64_MAX, 70, 200);
    s_check_range (UINT64_MAX / 3, UINT64_MAX, 70, 200);
    s_check_range (UINT64_MAX, UINT64_MAX, 70, 200);
    s_check_range ((uint64_t)1 << 40, (uint64_t)1 << 50, 70, 200);
    s_check_range (UINT32_MAX, UINT64_MAX - 1, 70, 200);
}

static void
test_attempts_past_64 (void **state)
{
    (void)state;
    zl_rng_t rng;
    zl_rng_seed (&rng, 3);
    uint32_t attempts[] = {62, 63, 64, 65, 100, 1000, UINT32_MAX};
    for (size_t i = 0; i < sizeof attempts / sizeof attempts[0]; i++) {
        assert_int_equal (zl_backoff_ms (1000, 300000, attempts[i], false, &rng), 300000);
        assert_int_equal (zl_backoff_ms (0, 300000, attempts[i], false, &rng), 0);
        assert_true (zl_backoff_ms (1000, 300000, attempts[i], true, &rng) <= 300000);
    }
    assert_int_equal (zl_backoff_ms (1, UINT64_MAX, 63, false, &rng), (uint64_t)1 << 63);
    assert_int_equal (zl_backoff_ms (1, UINT64_MAX, 64, false, &rng), UINT64_MAX);
    assert_int_equal (zl_backoff_ms (2, UINT64_MAX, 62, false, &rng), (uint64_t)1 << 63);
    assert_int_equal (zl_backoff_ms (2, UINT64_MAX, 63, false, &rng), UINT64_MAX);
}

static void
test_doubling_until_cap (void **state)
{
    (void)state;
    zl_rng_t rng;
    zl_rng_seed (&rng, 8);
    uint64_t expect[] = {1000,  2000,   4000,   8000,   16000, 32000,
                         64000, 128000, 256000, 300000, 300000};
    for (uint32_t a = 0; a < sizeof expect / sizeof expect[0]; a++)
        assert_int_equal (zl_backoff_ms (1000, 300000, a, false, &rng), expect[a]);
}

static void
test_full_jitter_distribution (void **state)
{
    (void)state;
    zl_rng_t rng;
    zl_rng_seed (&rng, 11);
    enum { N = 200000 };
    // bound = min (300000, 1000 * 2^4) = 16000
    uint64_t bound = 16000;
    double sum = 0;
    uint64_t buckets[10] = {0};
    for (int i = 0; i < N; i++) {
        uint64_t v = zl_backoff_ms (1000, 300000, 4, true, &rng);
        assert_true (v <= bound);
        sum += (double)v;
        buckets[v * 10 / (bound + 1)]++;
    }
    double mean = sum / N;
    // uniform on [0, bound]: mean bound/2, sd of the mean ~ bound/sqrt(12 N)
    assert_true (fabs (mean - bound / 2.0) < bound * 0.01);
    // each tenth of the range gets about a tenth of the draws
    for (int b = 0; b < 10; b++)
        assert_true (buckets[b] > N / 10 * 0.95 && buckets[b] < N / 10 * 1.05);

    // at the cap too
    sum = 0;
    for (int i = 0; i < N; i++)
        sum += (double)zl_backoff_ms (1000, 300000, 20, true, &rng);
    assert_true (fabs (sum / N - 150000.0) < 300000 * 0.01);

    // a tiny bound: 0 and 1 both appear, about equally
    uint64_t ones = 0;
    for (int i = 0; i < 10000; i++) {
        uint64_t v = zl_backoff_ms (1, 1, 0, true, &rng);
        assert_true (v <= 1);
        ones += v;
    }
    assert_true (ones > 4500 && ones < 5500);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test (test_bounds_typical),
        cmocka_unit_test (test_bounds_extreme),
        cmocka_unit_test (test_attempts_past_64),
        cmocka_unit_test (test_doubling_until_cap),
        cmocka_unit_test (test_full_jitter_distribution),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
