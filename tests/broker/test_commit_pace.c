/*  test_commit_pace: when the commit thread may start a commit. A batch
    that began while the commit before it was unfinished waits for the
    interval from that commit's start; a batch that began after it ended,
    one dropped or waited for, and any batch with no interval go at once. */
#include "commit_pace.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

enum { INTERVAL = 5000 };

// A batch of `writes` writes handed over; returns whether it follows a stream.
static bool
s_batch (zl_commit_pace_t *pace, int writes)
{
    for (int i = 0; i < writes; i++)
        zl_commit_pace_write (pace, i == 0);
    return zl_commit_pace_hand_over (pace);
}

static void
test_a_lone_batch_goes_at_once (void **state)
{
    (void)state;
    zl_commit_pace_t *pace = zl_commit_pace_new (INTERVAL);
    bool behind = s_batch (pace, 3); // nothing under way
    assert_false (behind);
    assert_int_equal (zl_commit_pace_due (pace, behind), 0);
    zl_commit_pace_started (pace, 1000000);
    zl_commit_pace_ended (pace);
    // the next job comes after the commit ended (its producer waited for
    // the Accepted): at once, although the interval has not passed
    behind = s_batch (pace, 1);
    assert_false (behind);
    assert_int_equal (zl_commit_pace_due (pace, behind), 0);
    zl_commit_pace_destroy (&pace);
    assert_null (pace);
}

static void
test_a_stream_waits_for_the_interval (void **state)
{
    (void)state;
    zl_commit_pace_t *pace = zl_commit_pace_new (INTERVAL);
    assert_false (s_batch (pace, 1));
    zl_commit_pace_started (pace, 1000000);
    // writes while that commit runs: the next batch follows a stream
    zl_commit_pace_write (pace, true);
    zl_commit_pace_write (pace, false);
    zl_commit_pace_ended (pace);
    bool behind = zl_commit_pace_hand_over (pace);
    assert_true (behind);
    assert_int_equal (zl_commit_pace_due (pace, behind), 1000000 + INTERVAL);
    zl_commit_pace_started (pace, 1000000 + INTERVAL);
    // and the one after it too, from its start
    zl_commit_pace_write (pace, true);
    zl_commit_pace_ended (pace);
    behind = zl_commit_pace_hand_over (pace);
    assert_true (behind);
    assert_int_equal (zl_commit_pace_due (pace, behind), 1000000 + 2 * INTERVAL);
    zl_commit_pace_destroy (&pace);
}

static void
test_a_batch_dropped_or_waited_for_is_not_behind (void **state)
{
    (void)state;
    zl_commit_pace_t *pace = zl_commit_pace_new (INTERVAL);
    assert_false (s_batch (pace, 1));
    zl_commit_pace_started (pace, 1000000);
    zl_commit_pace_write (pace, true); // during the commit
    zl_commit_pace_not_behind (pace);  // its caller will wait for it
    zl_commit_pace_ended (pace);
    assert_false (zl_commit_pace_hand_over (pace));
    // a write that is not a batch's first does not make it behind
    zl_commit_pace_write (pace, false);
    zl_commit_pace_ended (pace);
    assert_false (zl_commit_pace_hand_over (pace));
    zl_commit_pace_destroy (&pace);
}

static void
test_no_interval_never_waits (void **state)
{
    (void)state;
    zl_commit_pace_t *pace = zl_commit_pace_new (0);
    assert_false (s_batch (pace, 1));
    zl_commit_pace_started (pace, 1000000);
    zl_commit_pace_write (pace, true);
    assert_true (zl_commit_pace_hand_over (pace)); // behind a stream, but
    assert_int_equal (zl_commit_pace_due (pace, true), 0);
    zl_commit_pace_set_interval (pace, INTERVAL); // set later, it applies
    assert_int_equal (zl_commit_pace_due (pace, true), 1000000 + INTERVAL);
    zl_commit_pace_set_interval (pace, -1);
    assert_int_equal (zl_commit_pace_due (pace, true), 0);
    zl_commit_pace_destroy (&pace);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test (test_a_lone_batch_goes_at_once),
        cmocka_unit_test (test_a_stream_waits_for_the_interval),
        cmocka_unit_test (test_a_batch_dropped_or_waited_for_is_not_behind),
        cmocka_unit_test (test_no_interval_never_waits),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
