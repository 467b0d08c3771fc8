/*  test_commit_mark: how far the loop's turns are committed, given the
    turns at which commits start and end (broker/commit_mark.h): a turn
    whose commit ended within it, a commit that runs on past its turn
    (the later turns not committed until it ends, then only up to the turn
    that started it), an empty batch closed while one runs, and a commit
    that never ended. */
#include "commit_mark.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

static void
test_turns_committed_within_them (void **state)
{
    (void)state;
    zl_commit_mark_t *mark = zl_commit_mark_new ();
    assert_int_equal (zl_commit_mark_turn (mark), 0);
    zl_commit_mark_done (mark, 1);
    zl_commit_mark_done (mark, 2);
    assert_int_equal (zl_commit_mark_turn (mark), 2);
    zl_commit_mark_done (mark, 1); // never back
    assert_int_equal (zl_commit_mark_turn (mark), 2);
    zl_commit_mark_destroy (&mark);
    assert_null (mark);
}

static void
test_a_commit_that_runs_on (void **state)
{
    (void)state;
    zl_commit_mark_t *mark = zl_commit_mark_new ();
    zl_commit_mark_done (mark, 3);
    zl_commit_mark_started (mark, 4); // turn 4's commit runs on
    // turns 5 and 6 answer meanwhile (their writes wait for the next commit)
    assert_int_equal (zl_commit_mark_turn (mark), 3);
    zl_commit_mark_ended (mark); // seen in turn 7: turns up to 4 are on disk
    assert_int_equal (zl_commit_mark_turn (mark), 4);
    zl_commit_mark_started (mark, 7); // the batch of turns 5-7
    zl_commit_mark_ended (mark);
    assert_int_equal (zl_commit_mark_turn (mark), 7);
    zl_commit_mark_destroy (&mark);
}

static void
test_an_empty_batch_closed_while_one_runs (void **state)
{
    (void)state;
    zl_commit_mark_t *mark = zl_commit_mark_new ();
    zl_commit_mark_started (mark, 10);
    zl_commit_mark_started (mark, 11); // turn 11 wrote nothing: it waits for the same commit
    assert_int_equal (zl_commit_mark_turn (mark), 0);
    zl_commit_mark_ended (mark);
    assert_int_equal (zl_commit_mark_turn (mark), 11);
    zl_commit_mark_destroy (&mark);
}

static void
test_a_commit_that_never_ended (void **state)
{
    (void)state;
    zl_commit_mark_t *mark = zl_commit_mark_new ();
    zl_commit_mark_done (mark, 5);
    zl_commit_mark_started (mark, 6); // failed: the broker stops or steps down
    zl_commit_mark_done (mark, 5);
    assert_int_equal (zl_commit_mark_turn (mark), 5);
    zl_commit_mark_destroy (&mark);
    zl_commit_mark_destroy (&mark); // NULL-safe
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test (test_turns_committed_within_them),
        cmocka_unit_test (test_a_commit_that_runs_on),
        cmocka_unit_test (test_an_empty_batch_closed_while_one_runs),
        cmocka_unit_test (test_a_commit_that_never_ended),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
