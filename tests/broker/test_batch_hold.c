/*  test_batch_hold: when a turn of the loop may leave its batch open, with
    given times (batch_hold.h): not before the first commit, while the
    interval since the last commit runs and not after, due at the last
    commit plus the interval, and never with an interval of 0. */
#include "batch_hold.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

static void
test_within_the_interval_of_the_last_commit (void **state)
{
    (void)state;
    zl_batch_hold_t *h = zl_batch_hold_new (5);
    assert_false (zl_batch_hold_may (h, 1000)); // nothing committed yet
    assert_int_equal (zl_batch_hold_due (h), -1);
    zl_batch_hold_committed (h, 1000);
    assert_true (zl_batch_hold_may (h, 1000));
    assert_true (zl_batch_hold_may (h, 1004));
    assert_false (zl_batch_hold_may (h, 1005)); // the interval has passed
    zl_batch_hold_leave (h);
    assert_int_equal (zl_batch_hold_due (h), 1005);
    zl_batch_hold_leave (h); // a later turn leaves it open too: still due then
    assert_int_equal (zl_batch_hold_due (h), 1005);
    zl_batch_hold_committed (h, 1003); // a turn that had to commit did
    assert_int_equal (zl_batch_hold_due (h), -1);
    assert_true (zl_batch_hold_may (h, 1007)); // from that commit on
    assert_false (zl_batch_hold_may (h, 1008));
    zl_batch_hold_destroy (&h);
    assert_null (h);
    zl_batch_hold_destroy (&h); // NULL-safe
}

static void
test_no_interval_never_holds (void **state)
{
    (void)state;
    zl_batch_hold_t *h = zl_batch_hold_new (0);
    zl_batch_hold_committed (h, 1000);
    assert_false (zl_batch_hold_may (h, 1000));
    zl_batch_hold_destroy (&h);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test (test_within_the_interval_of_the_last_commit),
        cmocka_unit_test (test_no_interval_never_holds),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
