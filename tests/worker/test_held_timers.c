/*  test_held_timers: the worker's deadline heap against a brute-force model
    (random inserts, moves, removals and pops), plus its edge cases. */
#include "held_timers.h"
#include "rng.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#define S_JOBS 300

/*  Uniform in [0, n) (zl_rng_range includes its bound). */
static uint64_t
s_below (zl_rng_t *rng, uint64_t n)
{
    return zl_rng_range (rng, n - 1);
}

static zl_held_job_t *
s_job (uint64_t seq)
{
    zl_held_job_t *h = calloc (1, sizeof *h);
    h->seq = seq;
    return h;
}

/*  The model's earliest live deadline, ties broken by seq; NULL if none. */
static zl_held_job_t *
s_model_first (zl_held_job_t **jobs, const bool *in, size_t n)
{
    zl_held_job_t *best = NULL;
    for (size_t i = 0; i < n; i++)
        if (in[i] && (!best || jobs[i]->due_ms < best->due_ms ||
                      (jobs[i]->due_ms == best->due_ms && jobs[i]->seq < best->seq)))
            best = jobs[i];
    return best;
}

static void
test_empty_and_single (void **state)
{
    (void)state;
    zl_held_timers_t *t = zl_held_timers_new ();
    assert_null (zl_held_timers_due (t, INT64_MAX));
    assert_true (zl_held_timers_next_ms (t) == INT64_MAX);
    zl_held_job_t *h = s_job (1);
    zl_held_timers_update (t, h); // no deadline: not scheduled
    assert_int_equal (zl_held_timers_size (t), 0);
    assert_int_equal (h->timer_idx, 0);

    h->next_extend_ms = 500;
    h->max_run_at_ms = 300;
    zl_held_timers_update (t, h);
    assert_int_equal (zl_held_timers_size (t), 1);
    assert_true (zl_held_timers_next_ms (t) == 300); // the earlier of the two
    assert_null (zl_held_timers_due (t, 299));
    assert_ptr_equal (zl_held_timers_due (t, 300), h);
    h->max_run_at_ms = 0;
    zl_held_timers_update (t, h); // moved, not added twice
    assert_int_equal (zl_held_timers_size (t), 1);
    assert_true (zl_held_timers_next_ms (t) == 500);
    h->next_extend_ms = 0;
    zl_held_timers_update (t, h); // both gone: removed
    assert_int_equal (zl_held_timers_size (t), 0);
    assert_int_equal (h->timer_idx, 0);
    zl_held_timers_remove (t, h); // removing twice is harmless
    free (h);
    zl_held_timers_destroy (&t);
    assert_null (t);
    zl_held_timers_destroy (&t); // NULL-safe
}

static void
test_against_model (void **state)
{
    (void)state;
    zl_rng_t rng;
    zl_rng_seed (&rng, 42);
    zl_held_timers_t *t = zl_held_timers_new ();
    zl_held_job_t *jobs[S_JOBS];
    bool in[S_JOBS] = {false};
    for (size_t i = 0; i < S_JOBS; i++)
        jobs[i] = s_job (i + 1);
    int64_t now = 0;
    for (int step = 0; step < 20000; step++) {
        size_t i = (size_t)s_below (&rng, S_JOBS);
        zl_held_job_t *h = jobs[i];
        switch (s_below (&rng, 4)) {
        case 0: // (re)arm with one or two deadlines, few distinct values (ties)
        case 1:
            h->next_extend_ms = s_below (&rng, 2) ? now + (int64_t)s_below (&rng, 50) : 0;
            h->max_run_at_ms = s_below (&rng, 2) ? now + (int64_t)s_below (&rng, 50) : 0;
            zl_held_timers_update (t, h);
            in[i] = h->next_extend_ms || h->max_run_at_ms;
            if (in[i]) { // due at the earlier of the deadlines that are set
                int64_t a = h->next_extend_ms, b = h->max_run_at_ms;
                assert_true (h->due_ms == (!a ? b : !b ? a : a < b ? a : b));
            } else
                assert_int_equal (h->timer_idx, 0);
            break;
        case 2:
            zl_held_timers_remove (t, h);
            in[i] = false;
            break;
        case 3: { // pop everything due, in order
            now += (int64_t)s_below (&rng, 5);
            zl_held_job_t *d;
            while ((d = zl_held_timers_due (t, now))) {
                assert_ptr_equal (d, s_model_first (jobs, in, S_JOBS));
                assert_true (d->due_ms <= now);
                zl_held_timers_remove (t, d);
                in[d->seq - 1] = false;
            }
            zl_held_job_t *first = s_model_first (jobs, in, S_JOBS);
            assert_true (!first || first->due_ms > now);
            break;
        }
        }
        size_t n = 0;
        for (size_t k = 0; k < S_JOBS; k++)
            n += in[k];
        assert_int_equal (zl_held_timers_size (t), n);
        zl_held_job_t *first = s_model_first (jobs, in, S_JOBS);
        assert_true (zl_held_timers_next_ms (t) == (first ? first->due_ms : INT64_MAX));
    }
    for (size_t i = 0; i < S_JOBS; i++)
        free (jobs[i]);
    zl_held_timers_destroy (&t);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test (test_empty_and_single),
        cmocka_unit_test (test_against_model),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
