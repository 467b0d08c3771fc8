/*  test_eplist: parsing a client's broker list, moving round robin, and
    following a standby's NOT_LEADER (in the list, outside it, malformed). */
#include "eplist.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

static void
test_parse (void **state)
{
    (void)state;
    zl_eplist_t *l = zl_eplist_new ("tcp://a:1");
    assert_non_null (l);
    assert_int_equal (zl_eplist_size (l), 1);
    assert_false (zl_eplist_roams (l));
    assert_string_equal (zl_eplist_current (l), "tcp://a:1");
    assert_string_equal (zl_eplist_next (l), "tcp://a:1"); // one endpoint: the same again
    zl_eplist_destroy (&l);
    assert_null (l);
    zl_eplist_destroy (&l); // NULL-safe

    l = zl_eplist_new (" tcp://a:1 ,\ttcp://b:2,ipc:///tmp/c ");
    assert_non_null (l);
    assert_int_equal (zl_eplist_size (l), 3);
    assert_true (zl_eplist_roams (l));
    assert_string_equal (zl_eplist_at (l, 0), "tcp://a:1");
    assert_string_equal (zl_eplist_at (l, 1), "tcp://b:2");
    assert_string_equal (zl_eplist_at (l, 2), "ipc:///tmp/c");
    assert_null (zl_eplist_at (l, 3));
    assert_string_equal (zl_eplist_text (l), "tcp://a:1, tcp://b:2, ipc:///tmp/c");
    const char *bad = NULL;
    assert_int_equal (zl_eplist_probe (l, &bad), 0);
    zl_eplist_destroy (&l);

    const char *refused[] = {"", " ", "tcp://a:1,", ",tcp://a:1", "tcp://a:1,,tcp://b:2", NULL};
    for (int i = 0; refused[i]; i++) {
        errno = 0;
        assert_null (zl_eplist_new (refused[i]));
        assert_int_equal (errno, EINVAL);
    }
    assert_null (zl_eplist_new (NULL));
    char long_one[ZL_EPLIST_MAX_LEN + 16] = "tcp://";
    memset (long_one + 6, 'x', ZL_EPLIST_MAX_LEN);
    long_one[ZL_EPLIST_MAX_LEN + 6] = '\0';
    assert_null (zl_eplist_new (long_one));
    char many[ZL_EPLIST_MAX * 16 + 32] = "";
    for (int i = 0; i <= ZL_EPLIST_MAX; i++)
        snprintf (many + strlen (many), sizeof many - strlen (many), "%stcp://h:%d", i ? "," : "",
                  i + 1);
    assert_null (zl_eplist_new (many));

    // ZeroMQ's own check, up front: the bad entry is named
    l = zl_eplist_new ("tcp://a:1,bogus://x");
    assert_non_null (l);
    assert_int_equal (zl_eplist_probe (l, &bad), -1);
    assert_string_equal (bad, "bogus://x");
    zl_eplist_destroy (&l);
}

static void
test_round_robin (void **state)
{
    (void)state;
    zl_eplist_t *l = zl_eplist_new ("tcp://a:1,tcp://b:2,tcp://c:3");
    assert_string_equal (zl_eplist_current (l), "tcp://a:1");
    assert_string_equal (zl_eplist_next (l), "tcp://b:2");
    assert_string_equal (zl_eplist_next (l), "tcp://c:3");
    assert_string_equal (zl_eplist_next (l), "tcp://a:1");
    assert_string_equal (zl_eplist_current (l), "tcp://a:1");
    zl_eplist_destroy (&l);
}

static void
test_follow (void **state)
{
    (void)state;
    zl_eplist_t *l = zl_eplist_new ("tcp://a:1,tcp://b:2,tcp://c:3");
    // a named leader in the list wins, whatever its place among the names
    const char *named[] = {"tcp://elsewhere:9", "tcp://c:3"};
    assert_true (zl_eplist_follow (l, 2, named));
    assert_string_equal (zl_eplist_current (l), "tcp://c:3");
    // none named: the next of the list
    assert_false (zl_eplist_follow (l, 0, NULL));
    assert_string_equal (zl_eplist_current (l), "tcp://a:1");
    // a leader outside the list, as given; then the list again after the
    // entry used last
    const char *outside[] = {"tcp://d:4"};
    assert_true (zl_eplist_follow (l, 1, outside));
    assert_string_equal (zl_eplist_current (l), "tcp://d:4");
    assert_true (zl_eplist_roams (l));
    assert_string_equal (zl_eplist_next (l), "tcp://b:2");
    // names that are not endpoints are not dialled: the next of the list
    const char *junk[] = {"",  "no-scheme", "tcp://", "://x", "tcp://a b:1", "tcp://x:1,tcp://y:2",
                          NULL};
    assert_false (zl_eplist_follow (l, 7, junk));
    assert_string_equal (zl_eplist_current (l), "tcp://c:3");
    zl_eplist_destroy (&l);

    // a list of one still follows a leader elsewhere, and comes back
    l = zl_eplist_new ("tcp://a:1");
    assert_true (zl_eplist_follow (l, 1, outside));
    assert_string_equal (zl_eplist_current (l), "tcp://d:4");
    assert_true (zl_eplist_roams (l));
    assert_string_equal (zl_eplist_next (l), "tcp://a:1");
    assert_false (zl_eplist_roams (l));
    zl_eplist_destroy (&l);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test (test_parse),
        cmocka_unit_test (test_round_robin),
        cmocka_unit_test (test_follow),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
