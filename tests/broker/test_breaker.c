/*  test_breaker: the circuit breaker's state machine (broker/breaker.c),
    driven by hand-made outcomes and times, and checked against a model of
    the rule at every step of random walks. */
#include "breaker.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>

#define N 3 // failures that open it
#define WINDOW 1000
#define COOL 5000
#define PROBES 2

static zl_breaker_state_t
s_state (zl_breaker_t *b, int64_t now)
{
    return zl_breaker_view (b, now).state;
}

// N transient failures inside the window open it; ones that fell out of
// the window do not count; successes in CLOSED change nothing.
static void
test_opens_after_n_failures_in_the_window (void **state)
{
    (void)state;
    zl_breaker_t *b = zl_breaker_new (N, WINDOW, COOL, PROBES);
    assert_true (zl_breaker_may_dispatch (b, 0));
    zl_breaker_failure (b, 0);
    zl_breaker_failure (b, 100);
    zl_breaker_success (b, 150);
    assert_int_equal (zl_breaker_view (b, 200).failures, 2);
    zl_breaker_failure (b, 1200); // those at 0 and 100 fell out of the window
    assert_int_equal (s_state (b, 1200), ZL_BREAKER_CLOSED);
    assert_int_equal (zl_breaker_view (b, 1200).failures, 1);
    assert_int_equal (zl_breaker_next_ms (b), -1);
    zl_breaker_failure (b, 1250); // the ring: 100, 1200, 1250; 100 is out of the window
    assert_int_equal (s_state (b, 1250), ZL_BREAKER_CLOSED);
    zl_breaker_failure (b, 1300); // 1200, 1250, 1300
    assert_int_equal (s_state (b, 1300), ZL_BREAKER_OPEN);
    zl_breaker_view_t v = zl_breaker_view (b, 1300);
    assert_int_equal (v.opened, 1);
    assert_int_equal (v.transitions, 1);
    assert_int_equal (v.open_until_ms, 1300 + COOL);
    assert_int_equal (zl_breaker_next_ms (b), 1300 + COOL);
    assert_false (zl_breaker_may_dispatch (b, 1300 + COOL - 1));
    zl_breaker_failure (b, 2000); // a job from before: nothing more
    zl_breaker_success (b, 2000);
    assert_int_equal (zl_breaker_view (b, 2000).open_until_ms, 1300 + COOL);
    zl_breaker_destroy (&b);
    assert_null (b);
    zl_breaker_destroy (&b); // NULL-safe
}

// After the cool-down it half-opens: at most PROBES jobs out at a time; as
// many successes close it; a failing probe opens it again for another
// cool-down; neutral outcomes only take a probe back.
static void
test_half_open_probes (void **state)
{
    (void)state;
    zl_breaker_t *b = zl_breaker_new (N, WINDOW, COOL, PROBES);
    for (int i = 0; i < N; i++)
        zl_breaker_failure (b, 10 * i);
    int64_t t = 20 + COOL;
    zl_breaker_tick (b, t - 1);
    assert_int_equal (s_state (b, t - 1), ZL_BREAKER_OPEN);
    assert_true (zl_breaker_may_dispatch (b, t)); // ticks: half-open
    assert_int_equal (s_state (b, t), ZL_BREAKER_HALF_OPEN);
    zl_breaker_dispatched (b);
    assert_true (zl_breaker_may_dispatch (b, t));
    zl_breaker_dispatched (b);
    assert_false (zl_breaker_may_dispatch (b, t)); // two probes out
    assert_int_equal (zl_breaker_view (b, t).probes_out, 2);
    zl_breaker_neutral (b); // a probe throttled: back, nothing decided
    assert_true (zl_breaker_may_dispatch (b, t));
    zl_breaker_dispatched (b);
    zl_breaker_failure (b, t + 1); // a probe failed: open again
    assert_int_equal (s_state (b, t + 1), ZL_BREAKER_OPEN);
    assert_int_equal (zl_breaker_view (b, t + 1).opened, 2);
    assert_int_equal (zl_breaker_next_ms (b), t + 1 + COOL);
    t = t + 1 + COOL;
    assert_true (zl_breaker_may_dispatch (b, t));
    zl_breaker_dispatched (b);
    zl_breaker_success (b, t + 5);
    assert_int_equal (s_state (b, t + 5), ZL_BREAKER_HALF_OPEN); // one of two
    zl_breaker_dispatched (b);
    zl_breaker_success (b, t + 6);
    assert_int_equal (s_state (b, t + 6), ZL_BREAKER_CLOSED);
    zl_breaker_view_t v = zl_breaker_view (b, t + 6);
    assert_int_equal (v.failures, 0);    // a fresh window
    assert_int_equal (v.transitions, 5); // open, half, open, half, closed
    zl_breaker_failure (b, t + 7);
    assert_int_equal (s_state (b, t + 7), ZL_BREAKER_CLOSED);
    zl_breaker_destroy (&b);
}

// Random outcomes against a model of the rule.
static void
test_random_walk_matches_the_model (void **state)
{
    (void)state;
    srand (7);
    zl_breaker_t *b = zl_breaker_new (N, WINDOW, COOL, PROBES);
    zl_breaker_state_t m = ZL_BREAKER_CLOSED;
    int64_t fails[N] = {0};
    int n_fails = 0, out = 0, ok = 0;
    int64_t until = 0, t = 0;
    for (int step = 0; step < 200000; step++) {
        t += rand () % 400;
        if (m == ZL_BREAKER_OPEN && t >= until) {
            m = ZL_BREAKER_HALF_OPEN;
            out = ok = 0;
        }
        bool may = m == ZL_BREAKER_CLOSED || (m == ZL_BREAKER_HALF_OPEN && out < PROBES);
        assert_int_equal (zl_breaker_may_dispatch (b, t), may);
        int what = rand () % 4;
        if (what == 0 && may) {
            zl_breaker_dispatched (b);
            if (m == ZL_BREAKER_HALF_OPEN)
                out++;
        } else if (what == 1) {
            zl_breaker_success (b, t);
            if (m == ZL_BREAKER_HALF_OPEN) {
                out -= out > 0;
                if (++ok >= PROBES) {
                    m = ZL_BREAKER_CLOSED;
                    n_fails = 0;
                }
            }
        } else if (what == 2) {
            zl_breaker_failure (b, t);
            if (m == ZL_BREAKER_HALF_OPEN) {
                m = ZL_BREAKER_OPEN;
                until = t + COOL;
            } else if (m == ZL_BREAKER_CLOSED) {
                if (n_fails == N) { // the oldest drops out of the ring
                    for (int i = 1; i < N; i++)
                        fails[i - 1] = fails[i];
                    n_fails--;
                }
                fails[n_fails++] = t;
                int in = 0;
                for (int i = 0; i < n_fails; i++)
                    in += t - fails[i] < WINDOW;
                if (in >= N) {
                    m = ZL_BREAKER_OPEN;
                    until = t + COOL;
                    n_fails = 0;
                }
            }
        } else {
            zl_breaker_neutral (b);
            if (m == ZL_BREAKER_HALF_OPEN)
                out -= out > 0;
        }
        assert_int_equal (s_state (b, t), m);
    }
    assert_true (zl_breaker_view (b, t).opened > 10);
    zl_breaker_destroy (&b);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test (test_opens_after_n_failures_in_the_window),
        cmocka_unit_test (test_half_open_probes),
        cmocka_unit_test (test_random_walk_matches_the_model),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
