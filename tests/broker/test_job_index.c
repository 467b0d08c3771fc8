/*  test_job_index: the job index against a model (an array of which ids
    are in), through a random walk of puts, replacements, gets and removes
    that grows the table and makes long probe chains (ids chosen so that
    many share a home), then a walk of every job left. */
#include "job_index.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define N_IDS 20000

static uint64_t s_state = 88172645463325252ULL;
static uint64_t
s_rand (void)
{
    s_state ^= s_state << 13;
    s_state ^= s_state >> 7;
    s_state ^= s_state << 17;
    return s_state;
}

static void
test_random_walk_against_a_model (void **state)
{
    (void)state;
    zl_job_t *jobs = calloc (N_IDS, sizeof *jobs);   // job i has id ids[i]
    zl_job_t *spare = calloc (N_IDS, sizeof *spare); // a second job of the same id
    uint64_t *ids = calloc (N_IDS, sizeof *ids);
    bool *in = calloc (N_IDS, sizeof *in);
    zl_job_t **which = calloc (N_IDS, sizeof *which); // the one indexed
    for (size_t i = 0; i < N_IDS; i++) {
        // half in sequence (as the broker makes them), half scattered
        ids[i] = i % 2 ? i + 1 : (s_rand () | 1) & 0xffffffffffffULL;
        jobs[i].id = spare[i].id = ids[i];
    }
    zl_job_index_t *x = zl_job_index_new ();
    size_t n = 0;
    for (int step = 0; step < 400000; step++) {
        size_t i = s_rand () % N_IDS;
        switch (s_rand () % 4) {
        case 0:
        case 1: { // put, or put the other job of that id in its place
            zl_job_t *j = in[i] && which[i] == &jobs[i] ? &spare[i] : &jobs[i];
            zl_job_index_put (x, j);
            if (!in[i])
                n++;
            in[i] = true;
            which[i] = j;
            break;
        }
        case 2: { // remove
            zl_job_t *got = zl_job_index_remove (x, ids[i]);
            assert_ptr_equal (got, in[i] ? which[i] : NULL);
            if (in[i])
                n--;
            in[i] = false;
            break;
        }
        default: // get
            assert_ptr_equal (zl_job_index_get (x, ids[i]), in[i] ? which[i] : NULL);
        }
        assert_int_equal (zl_job_index_size (x), n);
    }
    for (size_t i = 0; i < N_IDS; i++)
        assert_ptr_equal (zl_job_index_get (x, ids[i]), in[i] ? which[i] : NULL);
    assert_null (zl_job_index_get (x, 0));
    size_t cursor = 0, walked = 0;
    zl_job_t *j;
    while ((j = zl_job_index_next (x, &cursor))) {
        walked++;
        assert_ptr_equal (zl_job_index_get (x, j->id), j);
    }
    assert_int_equal (walked, n);
    zl_job_index_destroy (&x);
    assert_null (x);
    free (jobs);
    free (spare);
    free (ids);
    free (in);
    free (which);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test (test_random_walk_against_a_model)};
    return cmocka_run_group_tests (tests, NULL, NULL);
}
