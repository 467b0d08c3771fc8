/*  test_dedup: the idempotency-key window (broker/dedup.c). A key is a hit
    inside the window and only for its own tenant, a miss from the window's
    end, and prune drops exactly the expired keys -- also when a key was
    recorded again after it expired. Times are hand-made wall-clock ms. */
#include "dedup.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T0 1700000000000LL
#define WINDOW 10000

static void
test_hit_inside_window (void **state)
{
    (void)state;
    zl_dedup_t *d = zl_dedup_new (WINDOW);
    assert_int_equal (zl_dedup_size (d), 0);
    assert_int_equal (zl_dedup_lookup (d, "acme", "k1", T0), 0);
    zl_dedup_insert (d, "acme", "k1", 42, T0);
    assert_int_equal (zl_dedup_size (d), 1);
    assert_int_equal (zl_dedup_lookup (d, "acme", "k1", T0), 42);
    assert_int_equal (zl_dedup_lookup (d, "acme", "k1", T0 + 1), 42);
    assert_int_equal (zl_dedup_lookup (d, "acme", "k1", T0 + WINDOW - 1), 42);
    // other keys and other tenants miss
    assert_int_equal (zl_dedup_lookup (d, "acme", "k2", T0 + 1), 0);
    assert_int_equal (zl_dedup_lookup (d, "globex", "k1", T0 + 1), 0);
    assert_int_equal (zl_dedup_lookup (d, "acm", "ek1", T0 + 1), 0);
    // the same key for another tenant is its own entry
    zl_dedup_insert (d, "globex", "k1", 43, T0 + 5);
    assert_int_equal (zl_dedup_lookup (d, "globex", "k1", T0 + 6), 43);
    assert_int_equal (zl_dedup_lookup (d, "acme", "k1", T0 + 6), 42);
    assert_int_equal (zl_dedup_size (d), 2);
    zl_dedup_destroy (&d);
    assert_null (d);
    zl_dedup_destroy (&d);
}

// Tenant and key are producer input: no choice of either may reach another
// tenant's entries, whatever bytes they hold.
static void
test_tenant_scope_is_unambiguous (void **state)
{
    (void)state;
    zl_dedup_t *d = zl_dedup_new (WINDOW);
    zl_dedup_insert (d,
                     "a\x1f"
                     "b",
                     "c", 1, T0);
    assert_int_equal (zl_dedup_lookup (d, "a",
                                       "b\x1f"
                                       "c",
                                       T0 + 1),
                      0);
    assert_int_equal (zl_dedup_lookup (d,
                                       "a\x1f"
                                       "b\x1f"
                                       "c",
                                       "", T0 + 1),
                      0);
    zl_dedup_insert (d, "a",
                     "b\x1f"
                     "c",
                     2, T0);
    assert_int_equal (zl_dedup_size (d), 2);
    assert_int_equal (zl_dedup_lookup (d,
                                       "a\x1f"
                                       "b",
                                       "c", T0 + 1),
                      1);
    assert_int_equal (zl_dedup_lookup (d, "a",
                                       "b\x1f"
                                       "c",
                                       T0 + 1),
                      2);
    zl_dedup_insert (d, "x:y", "z", 3, T0);
    assert_int_equal (zl_dedup_lookup (d, "x", "y:z", T0 + 1), 0);
    assert_int_equal (zl_dedup_lookup (d, "x:y:z", "", T0 + 1), 0);
    assert_int_equal (zl_dedup_lookup (d, "x:y", "z", T0 + 1), 3);
    zl_dedup_destroy (&d);
}

static void
test_expiry_at_window_end (void **state)
{
    (void)state;
    zl_dedup_t *d = zl_dedup_new (WINDOW);
    zl_dedup_insert (d, "acme", "k", 7, T0);
    assert_int_equal (zl_dedup_lookup (d, "acme", "k", T0 + WINDOW - 1), 7);
    assert_int_equal (zl_dedup_lookup (d, "acme", "k", T0 + WINDOW), 0);
    assert_int_equal (zl_dedup_lookup (d, "acme", "k", T0 + 10 * WINDOW), 0);
    // expired but not yet pruned: recording it again starts a new window
    zl_dedup_insert (d, "acme", "k", 8, T0 + WINDOW);
    assert_int_equal (zl_dedup_size (d), 1);
    assert_int_equal (zl_dedup_lookup (d, "acme", "k", T0 + WINDOW), 8);
    assert_int_equal (zl_dedup_lookup (d, "acme", "k", T0 + 2 * WINDOW - 1), 8);
    assert_int_equal (zl_dedup_prune (d, T0 + 2 * WINDOW - 1), 0);
    assert_int_equal (zl_dedup_lookup (d, "acme", "k", T0 + 2 * WINDOW - 1), 8);
    assert_int_equal (zl_dedup_prune (d, T0 + 2 * WINDOW), 1);
    assert_int_equal (zl_dedup_size (d), 0);
    assert_int_equal (zl_dedup_lookup (d, "acme", "k", T0 + 2 * WINDOW), 0);
    zl_dedup_destroy (&d);
}

static void
test_prune_removes_expired_keeps_fresh (void **state)
{
    (void)state;
    zl_dedup_t *d = zl_dedup_new (WINDOW);
    char key[32];
    // 100 keys, one every 100 ms
    for (int i = 0; i < 100; i++) {
        snprintf (key, sizeof key, "key-%d", i);
        zl_dedup_insert (d, "acme", key, (uint64_t)i + 1, T0 + i * 100);
    }
    assert_int_equal (zl_dedup_size (d), 100);
    assert_int_equal (zl_dedup_prune (d, T0 + WINDOW - 1), 0);
    assert_int_equal (zl_dedup_size (d), 100);
    // at T0 + WINDOW + 2550: keys 0..25 (seen at <= T0 + 2500) are expired
    int64_t now = T0 + WINDOW + 2550;
    assert_int_equal (zl_dedup_prune (d, now), 26);
    assert_int_equal (zl_dedup_size (d), 74);
    for (int i = 0; i < 100; i++) {
        snprintf (key, sizeof key, "key-%d", i);
        assert_int_equal (zl_dedup_lookup (d, "acme", key, now), i < 26 ? 0 : (uint64_t)i + 1);
    }
    assert_int_equal (zl_dedup_prune (d, now), 0);
    assert_int_equal (zl_dedup_prune (d, T0 + 100 * WINDOW), 74);
    assert_int_equal (zl_dedup_size (d), 0);
    // usable again after emptying
    zl_dedup_insert (d, "acme", "again", 5, T0 + 100 * WINDOW);
    assert_int_equal (zl_dedup_lookup (d, "acme", "again", T0 + 100 * WINDOW), 5);
    zl_dedup_destroy (&d);
}

// A key recorded again after it expired must not hold back the pruning of
// keys recorded after its first sighting.
static void
test_prune_after_key_recorded_again (void **state)
{
    (void)state;
    zl_dedup_t *d = zl_dedup_new (WINDOW);
    zl_dedup_insert (d, "acme", "a", 1, T0);
    zl_dedup_insert (d, "acme", "b", 2, T0 + 1000);
    // "a" expired, not yet pruned; the broker misses it and records it anew
    int64_t t = T0 + WINDOW + 500;
    assert_int_equal (zl_dedup_lookup (d, "acme", "a", t), 0);
    zl_dedup_insert (d, "acme", "a", 3, t);
    assert_int_equal (zl_dedup_size (d), 2);
    // "b" expires at T0 + 11000; "a" (new) at T0 + 20500
    int64_t later = T0 + WINDOW + 1000;
    assert_int_equal (zl_dedup_prune (d, later), 1);
    assert_int_equal (zl_dedup_size (d), 1);
    assert_int_equal (zl_dedup_lookup (d, "acme", "b", later), 0);
    assert_int_equal (zl_dedup_lookup (d, "acme", "a", later), 3);
    assert_int_equal (zl_dedup_prune (d, t + WINDOW - 1), 0);
    assert_int_equal (zl_dedup_lookup (d, "acme", "a", t + WINDOW - 1), 3);
    assert_int_equal (zl_dedup_prune (d, t + WINDOW), 1);
    assert_int_equal (zl_dedup_size (d), 0);
    zl_dedup_destroy (&d);
}

static void
test_memory_stays_bounded_under_churn (void **state)
{
    (void)state;
    // a steady stream of mostly repeated keys, pruned every second: the number
    // of keys held never exceeds what one window can hold
    zl_dedup_t *d = zl_dedup_new (1000);
    char key[32];
    size_t most = 0;
    for (int s = 0; s < 200; s++) {
        int64_t now = T0 + s * 100;
        for (int i = 0; i < 50; i++) {
            snprintf (key, sizeof key, "k%d", (s * 50 + i) % 700);
            if (!zl_dedup_lookup (d, "t", key, now))
                zl_dedup_insert (d, "t", key, (uint64_t)(s * 50 + i + 1), now);
        }
        if (s % 10 == 9)
            zl_dedup_prune (d, now);
        most = zl_dedup_size (d) > most ? zl_dedup_size (d) : most;
    }
    assert_true (most <= 700);
    zl_dedup_prune (d, T0 + 1000000);
    assert_int_equal (zl_dedup_size (d), 0);
    zl_dedup_destroy (&d);
}

static void
test_long_keys (void **state)
{
    (void)state;
    zl_dedup_t *d = zl_dedup_new (WINDOW);
    size_t len = 5000; // longer than the stack buffer
    char *key = malloc (len + 1);
    memset (key, 'k', len);
    key[len] = '\0';
    zl_dedup_insert (d, "acme", key, 77, T0);
    assert_int_equal (zl_dedup_lookup (d, "acme", key, T0 + 1), 77);
    key[len - 1] = 'x';
    assert_int_equal (zl_dedup_lookup (d, "acme", key, T0 + 1), 0);
    free (key);
    assert_int_equal (zl_dedup_prune (d, T0 + WINDOW), 1);
    zl_dedup_destroy (&d);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test (test_hit_inside_window),
        cmocka_unit_test (test_tenant_scope_is_unambiguous),
        cmocka_unit_test (test_expiry_at_window_end),
        cmocka_unit_test (test_prune_removes_expired_keeps_fresh),
        cmocka_unit_test (test_prune_after_key_recorded_again),
        cmocka_unit_test (test_memory_stays_bounded_under_churn),
        cmocka_unit_test (test_long_keys),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
