/*  test_lease: broker/lease.c on its own. A lease's deadlines with and
    without a max run, the due time (the earlier deadline), extension capped
    at the run deadline, the run time; and the token source: tokens nonzero,
    odd and distinct across many batches, one getrandom call per batch, EINTR
    and short reads retried, and a broker that cannot get random bytes
    aborting (checked in a forked child). The random source is swapped
    through zl_lease_tokens_set_random to count and inject faults. */
#include "lease.h"

#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define MONO_BASE_MS 7000000 // an arbitrary monotonic epoch
#define WALL_BASE_MS 1767225600000LL

// The clocks `ms` after the base.
static zl_now_t
at (int64_t ms)
{
    return (zl_now_t){.mono_ms = MONO_BASE_MS + ms,
                      .mono_us = (MONO_BASE_MS + ms) * 1000,
                      .wall_ms = WALL_BASE_MS + ms};
}

// ---------------------------------------------------------------- random sources
static size_t s_calls; // calls into the current fake
static size_t s_eintr; // fail this many calls with EINTR first
static size_t s_chunk; // at most this many bytes per call (0 = all)

static ssize_t
s_counting_getrandom (void *buf, size_t len, unsigned int flags)
{
    s_calls++;
    return getrandom (buf, len, flags);
}

static ssize_t
s_pattern (void *buf, size_t len, unsigned int flags)
{
    s_calls++;
    if (s_eintr) {
        s_eintr--;
        errno = EINTR;
        return -1;
    }
    size_t n = s_chunk && s_chunk < len ? s_chunk : len;
    memset (buf, 0x5a, n);
    return (ssize_t)n;
}

static ssize_t
s_zeros (void *buf, size_t len, unsigned int flags)
{
    memset (buf, 0, len);
    return (ssize_t)len;
}

static ssize_t
s_fail_eio (void *buf, size_t len, unsigned int flags)
{
    errno = EIO;
    return -1;
}

static ssize_t
s_no_bytes (void *buf, size_t len, unsigned int flags)
{
    return 0;
}

static int
s_cmp_u64 (const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

// ---------------------------------------------------------------- leases
static void
test_new_without_max_run (void **state)
{
    zl_lease_tokens_t *tokens = zl_lease_tokens_new ();
    zl_lease_t *l = zl_lease_new (tokens, 30000, 0, at (20));
    assert_true (l->token & 1);
    assert_int_equal (l->lease_deadline_ms, at (30020).mono_ms);
    assert_int_equal (l->run_deadline_ms, 0);
    assert_int_equal (l->started_at_ms, at (20).wall_ms);
    assert_int_equal (l->started_us, at (20).mono_us);
    assert_null (l->worker);
    assert_null (l->prev);
    assert_null (l->next);
    assert_int_equal (zl_lease_due_ms (l), at (30020).mono_ms);
    // no max run: never reached, however long it runs
    assert_false (zl_lease_max_run_reached (l, at (30020).mono_ms));
    assert_false (zl_lease_max_run_reached (l, INT64_MAX));
    assert_int_equal (zl_lease_run_us (l, at (20)), 0);
    assert_int_equal (zl_lease_run_us (l, at (1520)), 1500000);
    zl_lease_destroy (&l);
    assert_null (l);
    zl_lease_destroy (&l); // NULL-safe
    zl_lease_tokens_destroy (&tokens);
    assert_null (tokens);
    zl_lease_tokens_destroy (&tokens);
    zl_lease_tokens_destroy (NULL);
}

static void
test_due_is_the_earlier_deadline (void **state)
{
    zl_lease_tokens_t *tokens = zl_lease_tokens_new ();
    // max run longer than the lease: the lease deadline comes first
    zl_lease_t *l = zl_lease_new (tokens, 1000, 2500, at (0));
    assert_int_equal (l->lease_deadline_ms, at (1000).mono_ms);
    assert_int_equal (l->run_deadline_ms, at (2500).mono_ms);
    assert_int_equal (zl_lease_due_ms (l), at (1000).mono_ms);
    zl_lease_destroy (&l);
    // max run shorter than the lease: the run deadline comes first
    l = zl_lease_new (tokens, 1000, 400, at (10));
    assert_int_equal (l->lease_deadline_ms, at (1010).mono_ms);
    assert_int_equal (l->run_deadline_ms, at (410).mono_ms);
    assert_int_equal (zl_lease_due_ms (l), at (410).mono_ms);
    assert_false (zl_lease_max_run_reached (l, at (409).mono_ms));
    assert_true (zl_lease_max_run_reached (l, at (410).mono_ms));
    assert_true (zl_lease_max_run_reached (l, at (5000).mono_ms));
    zl_lease_destroy (&l);
    // both equal: either way, that time
    l = zl_lease_new (tokens, 700, 700, at (0));
    assert_int_equal (zl_lease_due_ms (l), at (700).mono_ms);
    zl_lease_destroy (&l);
    zl_lease_tokens_destroy (&tokens);
}

static void
test_extend_capped_at_run_deadline (void **state)
{
    zl_lease_tokens_t *tokens = zl_lease_tokens_new ();
    zl_lease_t *l = zl_lease_new (tokens, 1000, 2500, at (0));
    uint64_t token = l->token;
    // within max run: the new lease deadline holds
    assert_false (zl_lease_extend (l, 1000, at (900)));
    assert_int_equal (l->lease_deadline_ms, at (1900).mono_ms);
    assert_int_equal (zl_lease_due_ms (l), at (1900).mono_ms);
    // exactly to the run deadline is not past it
    assert_false (zl_lease_extend (l, 1000, at (1500)));
    assert_int_equal (zl_lease_due_ms (l), at (2500).mono_ms);
    // past it: the lease deadline moves, the attempt still ends at max run
    assert_true (zl_lease_extend (l, 1000, at (1800)));
    assert_int_equal (l->lease_deadline_ms, at (2800).mono_ms);
    assert_int_equal (l->run_deadline_ms, at (2500).mono_ms);
    assert_int_equal (zl_lease_due_ms (l), at (2500).mono_ms);
    assert_true (zl_lease_extend (l, 60000, at (2400)));
    assert_int_equal (zl_lease_due_ms (l), at (2500).mono_ms);
    // a shorter extension brings the due time back before max run
    assert_false (zl_lease_extend (l, 10, at (2100)));
    assert_int_equal (zl_lease_due_ms (l), at (2110).mono_ms);
    // extending changes neither the token nor the start
    assert_int_equal (l->token, token);
    assert_int_equal (l->started_us, at (0).mono_us);
    assert_int_equal (l->started_at_ms, at (0).wall_ms);
    zl_lease_destroy (&l);

    // no max run: any extension holds
    l = zl_lease_new (tokens, 1000, 0, at (0));
    assert_false (zl_lease_extend (l, UINT32_MAX, at (100)));
    assert_int_equal (zl_lease_due_ms (l), at (100).mono_ms + UINT32_MAX);
    assert_int_equal (l->run_deadline_ms, 0);
    zl_lease_destroy (&l);
    zl_lease_tokens_destroy (&tokens);
}

// ---------------------------------------------------------------- tokens
static void
test_tokens_odd_distinct_one_call_per_batch (void **state)
{
    enum { N = 5 * ZL_LEASE_BATCH + 7 }; // six batches, the last one barely begun
    zl_lease_tokens_t *tokens = zl_lease_tokens_new ();
    zl_lease_tokens_set_random (tokens, s_counting_getrandom);
    s_calls = 0;
    uint64_t *got = calloc (N, sizeof *got);
    for (size_t i = 0; i < N; i++) {
        got[i] = zl_lease_tokens_next (tokens);
        assert_int_not_equal (got[i], 0);
        assert_true (got[i] & 1);
        // a batch is drawn only when the previous one is used up
        assert_int_equal (s_calls, i / ZL_LEASE_BATCH + 1);
    }
    assert_int_equal (s_calls, 6);
    qsort (got, N, sizeof *got, s_cmp_u64);
    for (size_t i = 1; i < N; i++)
        assert_true (got[i - 1] != got[i]);
    // 63 random bits: the high bits are not stuck
    uint64_t or_all = 0, and_all = UINT64_MAX;
    for (size_t i = 0; i < N; i++) {
        or_all |= got[i];
        and_all &= got[i];
    }
    assert_true (or_all == UINT64_MAX);
    assert_true (and_all == 1);
    free (got);
    zl_lease_tokens_destroy (&tokens);
}

static void
test_leases_take_tokens_from_the_source (void **state)
{
    zl_lease_tokens_t *tokens = zl_lease_tokens_new ();
    zl_lease_tokens_set_random (tokens, s_counting_getrandom);
    s_calls = 0;
    enum { N = 2 * ZL_LEASE_BATCH + 1 };
    zl_lease_t *ls[N];
    for (size_t i = 0; i < N; i++) {
        ls[i] = zl_lease_new (tokens, 1000, 0, at ((int64_t)i));
        assert_true (ls[i]->token & 1);
        for (size_t k = 0; k < i; k++)
            assert_true (ls[k]->token != ls[i]->token);
    }
    assert_int_equal (s_calls, 3);
    for (size_t i = 0; i < N; i++)
        zl_lease_destroy (&ls[i]);
    zl_lease_tokens_destroy (&tokens);
}

static void
test_low_bit_set_whatever_the_bytes (void **state)
{
    zl_lease_tokens_t *tokens = zl_lease_tokens_new ();
    zl_lease_tokens_set_random (tokens, s_zeros);
    for (int i = 0; i < ZL_LEASE_BATCH + 3; i++)
        assert_int_equal (zl_lease_tokens_next (tokens), 1); // never 0
    // back to getrandom
    zl_lease_tokens_set_random (tokens, NULL);
    for (int i = 0; i < ZL_LEASE_BATCH; i++)
        zl_lease_tokens_next (tokens); // what is left of the zero batch, then fresh
    uint64_t a = zl_lease_tokens_next (tokens), b = zl_lease_tokens_next (tokens);
    assert_true (a & 1);
    assert_true (a != 1 || b != 1);
    zl_lease_tokens_destroy (&tokens);
}

static void
test_refill_retries_eintr_and_short_reads (void **state)
{
    zl_lease_tokens_t *tokens = zl_lease_tokens_new ();
    zl_lease_tokens_set_random (tokens, s_pattern);
    s_calls = 0;
    s_eintr = 2;
    s_chunk = 100; // the batch arrives 100 bytes at a time
    size_t bytes = ZL_LEASE_BATCH * sizeof (uint64_t);
    for (int i = 0; i < ZL_LEASE_BATCH; i++)
        assert_true (zl_lease_tokens_next (tokens) == 0x5a5a5a5a5a5a5a5bULL); // every byte filled
    assert_int_equal (s_calls, 2 + (bytes + 99) / 100);
    s_chunk = 0;
    zl_lease_tokens_destroy (&tokens);
}

static void
test_no_random_bytes_aborts (void **state)
{
    zl_lease_random_fn *bad[] = {s_fail_eio, s_no_bytes};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pid_t pid = fork ();
        assert_true (pid >= 0);
        if (pid == 0) {
            struct rlimit none = {0, 0};
            setrlimit (RLIMIT_CORE, &none);
            zl_lease_tokens_t *tokens = zl_lease_tokens_new ();
            zl_lease_tokens_set_random (tokens, bad[i]);
            zl_lease_tokens_next (tokens);
            _exit (0); // a token made without random bytes: the test fails
        }
        int status = 0;
        assert_int_equal (waitpid (pid, &status, 0), pid);
        assert_true (WIFSIGNALED (status));
        assert_int_equal (WTERMSIG (status), SIGABRT);
    }
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test (test_new_without_max_run),
        cmocka_unit_test (test_due_is_the_earlier_deadline),
        cmocka_unit_test (test_extend_capped_at_run_deadline),
        cmocka_unit_test (test_tokens_odd_distinct_one_call_per_batch),
        cmocka_unit_test (test_leases_take_tokens_from_the_source),
        cmocka_unit_test (test_low_bit_set_whatever_the_bytes),
        cmocka_unit_test (test_refill_retries_eintr_and_short_reads),
        cmocka_unit_test (test_no_random_bytes_aborts),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
