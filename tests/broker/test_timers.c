/*  test_timers: the deadline min-heap in broker/timers.c. Pops come out in
    (due_ms, id) order whatever the insertion order, cancel and re-set work
    from any position, pop_due never returns a job that is not due, and each
    job's timer_idx always says whether (and where) it is scheduled. */
#include "job.h"
#include "rng.h"
#include "timers.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#define NO_SLOT UINT32_MAX

static zl_job_t *
s_jobs (size_t n)
{
    zl_job_t *jobs = calloc (n, sizeof *jobs);
    for (size_t i = 0; i < n; i++) {
        jobs[i].id = i + 1;
        jobs[i].timer_idx = NO_SLOT;
    }
    return jobs;
}

static int
s_before (const zl_job_t *a, const zl_job_t *b)
{
    return a->due_ms < b->due_ms || (a->due_ms == b->due_ms && a->id < b->id);
}

// Pop everything (now = far future); check order, count, and that each popped
// job is marked unscheduled. Returns the number popped.
static size_t
s_drain_checked (zl_timers_t *t, size_t expect)
{
    zl_job_t *prev = NULL;
    size_t n = 0;
    zl_job_t *job;
    while ((job = zl_timers_pop_due (t, INT64_MAX))) {
        assert_int_equal (job->timer_idx, NO_SLOT);
        if (prev)
            assert_true (s_before (prev, job));
        prev = job;
        n++;
        assert_int_equal (zl_timers_size (t), expect - n);
    }
    assert_int_equal (n, expect);
    assert_null (zl_timers_peek (t));
    return n;
}

static void
test_empty (void **state)
{
    (void)state;
    zl_timers_t *t = zl_timers_new ();
    assert_int_equal (zl_timers_size (t), 0);
    assert_null (zl_timers_peek (t));
    assert_null (zl_timers_pop_due (t, INT64_MAX));
    zl_job_t job = {.id = 1, .timer_idx = NO_SLOT};
    zl_timers_cancel (t, &job); // not scheduled: a no-op
    assert_int_equal (zl_timers_size (t), 0);
    zl_timers_destroy (&t);
    assert_null (t);
    zl_timers_destroy (&t);
    zl_timers_destroy (NULL);
}

static void
test_random_deadlines_pop_in_order (void **state)
{
    (void)state;
    enum { N = 20000 }; // well past the initial capacity: the heap grows
    zl_rng_t rng;
    zl_rng_seed (&rng, 1234);
    zl_job_t *jobs = s_jobs (N);
    zl_timers_t *t = zl_timers_new ();
    int64_t min_due = INT64_MAX;
    for (size_t i = 0; i < N; i++) {
        // a narrow range gives many equal deadlines too
        jobs[i].due_ms = 1000000 + (int64_t)zl_rng_range (&rng, N / 4);
        if (jobs[i].due_ms < min_due)
            min_due = jobs[i].due_ms;
        zl_timers_set (t, &jobs[i]);
        assert_int_not_equal (jobs[i].timer_idx, NO_SLOT);
        assert_int_equal (zl_timers_peek (t)->due_ms, min_due);
    }
    assert_int_equal (zl_timers_size (t), N);
    s_drain_checked (t, N);
    for (size_t i = 0; i < N; i++)
        assert_int_equal (jobs[i].timer_idx, NO_SLOT);
    zl_timers_destroy (&t);
    free (jobs);
}

static void
test_ties_break_by_id (void **state)
{
    (void)state;
    enum { N = 64 };
    zl_job_t *jobs = s_jobs (N);
    zl_timers_t *t = zl_timers_new ();
    // insert in a scrambled order, all at the same deadline
    for (size_t k = 0; k < N; k++) {
        size_t i = (k * 37) % N;
        jobs[i].due_ms = 500;
        zl_timers_set (t, &jobs[i]);
    }
    for (size_t k = 0; k < N; k++) {
        zl_job_t *job = zl_timers_pop_due (t, 500);
        assert_non_null (job);
        assert_int_equal (job->id, k + 1);
    }
    zl_timers_destroy (&t);
    free (jobs);
}

static void
test_pop_due_respects_now (void **state)
{
    (void)state;
    zl_job_t *jobs = s_jobs (5);
    zl_timers_t *t = zl_timers_new ();
    int64_t due[5] = {300, 100, 200, 200, 400};
    for (int i = 0; i < 5; i++) {
        jobs[i].due_ms = due[i];
        zl_timers_set (t, &jobs[i]);
    }
    assert_null (zl_timers_pop_due (t, 0));
    assert_null (zl_timers_pop_due (t, 99));
    assert_int_equal (zl_timers_size (t), 5);
    assert_ptr_equal (zl_timers_peek (t), &jobs[1]);
    assert_ptr_equal (zl_timers_pop_due (t, 100), &jobs[1]); // due == now is due
    assert_null (zl_timers_pop_due (t, 199));
    assert_ptr_equal (zl_timers_pop_due (t, 250), &jobs[2]);
    assert_ptr_equal (zl_timers_pop_due (t, 250), &jobs[3]);
    assert_null (zl_timers_pop_due (t, 250));
    assert_ptr_equal (zl_timers_pop_due (t, 1000), &jobs[0]);
    assert_ptr_equal (zl_timers_pop_due (t, 1000), &jobs[4]);
    assert_null (zl_timers_pop_due (t, 1000));
    // negative deadlines (monotonic clocks may start anywhere) order too
    jobs[0].due_ms = -5;
    jobs[1].due_ms = -50;
    zl_timers_set (t, &jobs[0]);
    zl_timers_set (t, &jobs[1]);
    assert_null (zl_timers_pop_due (t, -51));
    assert_ptr_equal (zl_timers_pop_due (t, -50), &jobs[1]);
    assert_ptr_equal (zl_timers_pop_due (t, 0), &jobs[0]);
    zl_timers_destroy (&t);
    free (jobs);
}

static void
test_cancel_from_anywhere (void **state)
{
    (void)state;
    enum { N = 3000 };
    zl_rng_t rng;
    zl_rng_seed (&rng, 99);
    zl_job_t *jobs = s_jobs (N);
    zl_timers_t *t = zl_timers_new ();
    for (size_t i = 0; i < N; i++) {
        jobs[i].due_ms = (int64_t)zl_rng_range (&rng, 100000);
        zl_timers_set (t, &jobs[i]);
    }
    // cancel a random third, wherever they sit in the heap (root included)
    bool *cancelled = calloc (N, sizeof (bool));
    size_t n_cancelled = 0;
    zl_job_t *root = zl_timers_peek (t);
    zl_timers_cancel (t, root);
    cancelled[root->id - 1] = true;
    n_cancelled++;
    for (size_t i = 0; i < N; i++) {
        if (cancelled[i] || zl_rng_range (&rng, 2) != 0)
            continue;
        zl_timers_cancel (t, &jobs[i]);
        assert_int_equal (jobs[i].timer_idx, NO_SLOT);
        cancelled[i] = true;
        n_cancelled++;
        zl_timers_cancel (t, &jobs[i]); // twice is harmless
        assert_int_equal (zl_timers_size (t), N - n_cancelled);
    }
    // the last one in the array (often the heap's last slot)
    if (!cancelled[N - 1]) {
        zl_timers_cancel (t, &jobs[N - 1]);
        cancelled[N - 1] = true;
        n_cancelled++;
    }
    // what remains pops in order, and no cancelled job ever comes out
    zl_job_t *prev = NULL, *job;
    size_t popped = 0;
    while ((job = zl_timers_pop_due (t, INT64_MAX))) {
        assert_false (cancelled[job->id - 1]);
        if (prev)
            assert_true (s_before (prev, job));
        prev = job;
        popped++;
    }
    assert_int_equal (popped, N - n_cancelled);
    free (cancelled);
    zl_timers_destroy (&t);
    free (jobs);
}

static void
test_reset_moves_earlier_and_later (void **state)
{
    (void)state;
    enum { N = 1000 };
    zl_job_t *jobs = s_jobs (N);
    zl_timers_t *t = zl_timers_new ();
    for (size_t i = 0; i < N; i++) {
        jobs[i].due_ms = 1000 + (int64_t)i * 10;
        zl_timers_set (t, &jobs[i]);
    }
    // move a late job to the front
    jobs[700].due_ms = 5;
    zl_timers_set (t, &jobs[700]);
    assert_int_equal (zl_timers_size (t), N); // re-set does not duplicate
    assert_ptr_equal (zl_timers_peek (t), &jobs[700]);
    // move the front job to the back
    jobs[700].due_ms = 1000000;
    zl_timers_set (t, &jobs[700]);
    assert_ptr_equal (zl_timers_peek (t), &jobs[0]);
    // move the root later: the next one becomes root
    jobs[0].due_ms = 1000 + 10 * 500 + 5;
    zl_timers_set (t, &jobs[0]);
    assert_ptr_equal (zl_timers_peek (t), &jobs[1]);
    // same deadline again: no change
    zl_timers_set (t, &jobs[1]);
    assert_ptr_equal (zl_timers_peek (t), &jobs[1]);
    assert_int_equal (zl_timers_size (t), N);
    // many random moves, then the whole heap still pops in order
    zl_rng_t rng;
    zl_rng_seed (&rng, 5);
    for (int k = 0; k < 20000; k++) {
        zl_job_t *j = &jobs[zl_rng_range (&rng, N - 1)];
        j->due_ms = (int64_t)zl_rng_range (&rng, 50000);
        zl_timers_set (t, j);
    }
    assert_int_equal (zl_timers_size (t), N);
    // pop_due takes precisely the jobs due at or before `now`
    int64_t now = 25000;
    size_t due_count = 0;
    for (size_t i = 0; i < N; i++)
        if (jobs[i].due_ms <= now)
            due_count++;
    size_t got = 0;
    zl_job_t *job;
    while ((job = zl_timers_pop_due (t, now))) {
        assert_true (job->due_ms <= now);
        got++;
    }
    assert_int_equal (got, due_count);
    s_drain_checked (t, N - due_count);
    zl_timers_destroy (&t);
    free (jobs);
}

static void
test_mixed_operations_against_a_model (void **state)
{
    (void)state;
    // a brute-force model: the earliest scheduled job by linear scan
    enum { N = 400 };
    zl_rng_t rng;
    zl_rng_seed (&rng, 77);
    zl_job_t *jobs = s_jobs (N);
    zl_timers_t *t = zl_timers_new ();
    for (int step = 0; step < 50000; step++) {
        zl_job_t *j = &jobs[zl_rng_range (&rng, N - 1)];
        int op = (int)zl_rng_range (&rng, 3);
        if (op <= 1) {
            j->due_ms = (int64_t)zl_rng_range (&rng, 1000);
            zl_timers_set (t, j);
        } else if (op == 2) {
            zl_timers_cancel (t, j);
        } else {
            zl_job_t *p = zl_timers_pop_due (t, (int64_t)zl_rng_range (&rng, 1000));
            if (p)
                assert_int_equal (p->timer_idx, NO_SLOT);
        }
        zl_job_t *best = NULL;
        size_t scheduled = 0;
        for (size_t i = 0; i < N; i++) {
            if (jobs[i].timer_idx == NO_SLOT)
                continue;
            scheduled++;
            if (!best || s_before (&jobs[i], best))
                best = &jobs[i];
        }
        assert_int_equal (zl_timers_size (t), scheduled);
        assert_ptr_equal (zl_timers_peek (t), best);
    }
    zl_timers_destroy (&t);
    free (jobs);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test (test_empty),
        cmocka_unit_test (test_random_deadlines_pop_in_order),
        cmocka_unit_test (test_ties_break_by_id),
        cmocka_unit_test (test_pop_due_respects_now),
        cmocka_unit_test (test_cancel_from_anywhere),
        cmocka_unit_test (test_reset_moves_earlier_and_later),
        cmocka_unit_test (test_mixed_operations_against_a_model),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
