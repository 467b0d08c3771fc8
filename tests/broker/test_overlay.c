/*  test_overlay: the ops a batch holds before the store has them
    (broker/overlay.h): in order, the latest of each key found, a nested
    batch cut back to its mark, and the index past its first growth. */
#include "overlay.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

static void
s_key (uint8_t key[9], char space, uint64_t id)
{
    key[0] = (uint8_t)space;
    memcpy (key + 1, &id, sizeof id);
}

// The data of the latest op of (space, id), or NULL when none has the key.
static const char *
s_find (zl_overlay_t *ov, char space, uint64_t id, unsigned *kind)
{
    uint8_t key[9];
    s_key (key, space, id);
    zl_overlay_op_t op;
    if (!zl_overlay_find (ov, key, sizeof key, &op))
        return NULL;
    if (kind)
        *kind = op.kind;
    return (const char *)op.data;
}

static void
s_add (zl_overlay_t *ov, unsigned kind, char space, uint64_t id, const char *data)
{
    uint8_t key[9];
    s_key (key, space, id);
    zl_overlay_add (ov, kind, 0, key, sizeof key, data, strlen (data) + 1);
}

static void
test_latest_wins_in_order (void **state)
{
    (void)state;
    zl_overlay_t *ov = zl_overlay_new ();
    s_add (ov, 1, 'J', 7, "first");
    s_add (ov, 1, 'S', 7, "state"); // another space: another key
    zl_overlay_add (ov, 9, 3, NULL, 0, "nokey", 6);
    s_add (ov, 2, 'J', 7, "second");
    unsigned kind = 0;
    assert_string_equal (s_find (ov, 'J', 7, &kind), "second");
    assert_int_equal (kind, 2);
    assert_string_equal (s_find (ov, 'S', 7, NULL), "state");
    assert_null (s_find (ov, 'J', 8, NULL));
    // every op, in the order added, keyless ones too
    assert_int_equal (zl_overlay_count (ov), 4);
    zl_overlay_op_t op = zl_overlay_at (ov, 2);
    assert_int_equal (op.kind, 9);
    assert_int_equal (op.arg, 3);
    assert_null (op.key);
    assert_string_equal ((const char *)op.data, "nokey");
    op = zl_overlay_at (ov, 0);
    assert_string_equal ((const char *)op.data, "first");
    assert_int_equal (op.key_len, 9);
    assert_int_equal (op.key[0], 'J');
    // data written by the caller at the pointer returned
    uint8_t key[9];
    s_key (key, 'J', 9);
    uint8_t *at = zl_overlay_add (ov, 1, 0, key, sizeof key, NULL, 4);
    memcpy (at, "own", 4);
    assert_string_equal (s_find (ov, 'J', 9, NULL), "own");
    assert_true (zl_overlay_bytes (ov) > 0);
    zl_overlay_clear (ov);
    assert_int_equal (zl_overlay_count (ov), 0);
    assert_int_equal (zl_overlay_bytes (ov), 0);
    assert_null (s_find (ov, 'J', 7, NULL));
    zl_overlay_destroy (&ov);
    assert_null (ov);
}

static void
test_cut_takes_back_a_nested_batch (void **state)
{
    (void)state;
    zl_overlay_t *ov = zl_overlay_new ();
    s_add (ov, 1, 'J', 1, "kept");
    s_add (ov, 1, 'J', 2, "two");
    size_t mark = zl_overlay_count (ov);
    s_add (ov, 1, 'J', 1, "replaced in the nested batch");
    s_add (ov, 1, 'J', 3, "new in the nested batch");
    assert_string_equal (s_find (ov, 'J', 1, NULL), "replaced in the nested batch");
    zl_overlay_cut (ov, mark);
    assert_int_equal (zl_overlay_count (ov), mark);
    assert_string_equal (s_find (ov, 'J', 1, NULL), "kept");
    assert_string_equal (s_find (ov, 'J', 2, NULL), "two");
    assert_null (s_find (ov, 'J', 3, NULL));
    // the buffer is reused from the mark on
    s_add (ov, 1, 'J', 3, "again");
    assert_string_equal (s_find (ov, 'J', 3, NULL), "again");
    assert_string_equal (s_find (ov, 'J', 1, NULL), "kept");
    zl_overlay_cut (ov, 100); // past the end: nothing
    assert_int_equal (zl_overlay_count (ov), mark + 1);
    zl_overlay_destroy (&ov);
}

static void
test_many_keys (void **state)
{
    (void)state;
    zl_overlay_t *ov = zl_overlay_new ();
    char data[32];
    for (uint64_t id = 0; id < 5000; id++) {
        snprintf (data, sizeof data, "job-%llu", (unsigned long long)id);
        s_add (ov, 1, 'J', id, data);
        if (id % 2 == 0)
            s_add (ov, 2, 'S', id, data);
    }
    for (uint64_t id = 0; id < 5000; id += 7) {
        snprintf (data, sizeof data, "job-%llu", (unsigned long long)id);
        assert_string_equal (s_find (ov, 'J', id, NULL), data);
        const char *st = s_find (ov, 'S', id, NULL);
        if (id % 2 == 0)
            assert_string_equal (st, data);
        else
            assert_null (st);
    }
    size_t mark = 2500;
    zl_overlay_cut (ov, mark);
    unsigned found = 0;
    for (uint64_t id = 0; id < 5000; id++)
        found += s_find (ov, 'J', id, NULL) != NULL;
    // 2,500 ops: three for every two ids (J, S, J) from id 0
    assert_int_equal (found, 1667);
    zl_overlay_destroy (&ov);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test (test_latest_wins_in_order),
        cmocka_unit_test (test_cut_takes_back_a_nested_batch),
        cmocka_unit_test (test_many_keys),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
