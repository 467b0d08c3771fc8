/*  test_common: the small building blocks in common/ — arena, hist, rng,
    SipHash (the published test vectors),
    the text parsers in wire.c, the clock, the allocator — and the wire send
    helpers over an inproc DEALER/ROUTER and PUB/SUB pair. */
#include "arena.h"
#include "clock.h"
#include "codec.h"
#include "hist.h"
#include "rng.h"
#include "siphash.h"
#include "wire.h"
#include "zl_alloc.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <czmq.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

// ---------------------------------------------------------------- siphash
// The reference test vectors of SipHash-2-4 (the authors' vectors.h): key
// 00 01 .. 0f, message i = the i bytes 00 01 .. (i-1), for i = 0..63; the
// digest bytes as the reference implementation writes them.
static const char *s_sip128[64] = {
    "a3817f04ba25a8e66df67214c7550293", "da87c1d86b99af44347659119b22fc45",
    "8177228da4a45dc7fca38bdef60affe4", "9c70b60c5267a94e5f33b6b02985ed51",
    "f88164c12d9c8faf7d0f6e7c7bcd5579", "1368875980776f8854527a07690e9627",
    "14eeca338b208613485ea0308fd7a15e", "a1f1ebbed8dbc153c0b84aa61ff08239",
    "3b62a9ba6258f5610f83e264f31497b4", "264499060ad9baabc47f8b02bb6d71ed",
    "00110dc378146956c95447d3f3d0fbba", "0151c568386b6677a2b4dc6f81e5dc18",
    "d626b266905ef35882634df68532c125", "9869e247e9c08b10d029934fc4b952f7",
    "31fcefac66d7de9c7ec7485fe4494902", "5493e99933b0a8117e08ec0f97cfc3d9",
    "6ee2a4ca67b054bbfd3315bf85230577", "473d06e8738db89854c066c47ae47740",
    "a426e5e423bf4885294da481feaef723", "78017731cf65fab074d5208952512eb1",
    "9e25fc833f2290733e9344a5e83839eb", "568e495abe525a218a2214cd3e071d12",
    "4a29b54552d16b9a469c10528eff0aae", "c9d184ddd5a9f5e0cf8ce29a9abf691c",
    "2db479ae78bd50d8882a8a178a6132ad", "8ece5f042d5e447b5051b9eacb8d8f6f",
    "9c0b53b4b3c307e87eaee08678141f66", "abf248af69a6eae4bfd3eb2f129eeb94",
    "0664da1668574b88b935f3027358aef4", "aa4b9dc4bf337de90cd4fd3c467c6ab7",
    "ea5c7f471faf6bde2b1ad7d4686d2287", "2939b0183223fafc1723de4f52c43d35",
    "7c3956ca5eeafc3e363e9d556546eb68", "77c6077146f01c32b6b69d5f4ea9ffcf",
    "37a6986cb8847edf0925f0f1309b54de", "a705f0e69da9a8f907241a2e923c8cc8",
    "3dc47d1f29c448461e9e76ed904f6711", "0d62bf01e6fc0e1a0d3c4751c5d3692b",
    "8c03468bca7c669ee4fd5e084bbee7b5", "528a5bb93baf2c9c4473cce5d0d22bd9",
    "df6a301e95c95dad97ae0cc8c6913bd8", "801189902c857f39e73591285e70b6db",
    "e617346ac9c231bb3650ae34ccca0c5b", "27d93437efb721aa401821dcec5adf89",
    "89237d9ded9c5e78d8b1c9b166cc7342", "4a6d8091bf5e7d651189fa94a250b14c",
    "0e33f96055e7ae893ffc0e3dcf492902", "e61c432b720b19d18ec8d84bdc63151b",
    "f7e5aef549f782cf379055a608269b16", "438d030fd0b7a54fa837f2ad201a6403",
    "a590d3ee4fbf04e3247e0d27f286423f", "5fe2c1a172fe93c4b15cd37caef9f538",
    "2c97325cbd06b36eb2133dd08b3a017c", "92c814227a6bca949ff0659f002ad39e",
    "dce850110bd8328cfbd50841d6911d87", "67f14984c7da791248e32bb5922583da",
    "1938f2cf72d54ee97e94166fa91d2a36", "74481e9646ed49fe0f6224301604698e",
    "57fca5de98a9d6d8006438d0583d8a1d", "9fecde1cefdc1cbed4763674d9575359",
    "e3040c00eb28f15366ca73cbd872e740", "7697009a6a831dfecca91c5993670f7a",
    "5853542321f567a005d547a4f04759bd", "5150d1772f50834a503e069a973fbd7c"};
static const char *s_sip64[64] = {
    "310e0edd47db6f72", "fd67dc93c539f874", "5a4fa9d909806c0d", "2d7efbd796666785",
    "b7877127e09427cf", "8da699cd64557618", "cee3fe586e46c9cb", "37d1018bf50002ab",
    "6224939a79f5f593", "b0e4a90bdf82009e", "f3b9dd94c5bb5d7a", "a7ad6b22462fb3f4",
    "fbe50e86bc8f1e75", "903d84c02756ea14", "eef27a8e90ca23f7", "e545be4961ca29a1",
    "db9bc2577fcc2a3f", "9447be2cf5e99a69", "9cd38d96f0b3c14b", "bd6179a71dc96dbb",
    "98eea21af25cd6be", "c7673b2eb0cbf2d0", "883ea3e395675393", "c8ce5ccd8c030ca8",
    "94af49f6c650adb8", "eab8858ade92e1bc", "f315bb5bb835d817", "adcf6b0763612e2f",
    "a5c91da7acaa4dde", "716595876650a2a6", "28ef495c53a387ad", "42c341d8fa92d832",
    "ce7cf2722f512771", "e37859f94623f3a7", "381205bb1ab0e012", "ae97a10fd434e015",
    "b4a31508beff4d31", "81396229f0907902", "4d0cf49ee5d4dcca", "5c73336a76d8bf9a",
    "d0a704536ba93e0e", "925958fcd6420cad", "a915c29bc8067318", "952b79f3bc0aa6d4",
    "f21df2e41d4535f9", "87577519048f53a9", "10a56cf5dfcd9adb", "eb75095ccd986cd0",
    "51a9cb9ecba312e6", "96afadfc2ce666c7", "72fe52975a4364ee", "5a1645b276d592a1",
    "b274cb8ebf87870a", "6f9bb4203de7b381", "eaecb2a30b22a87f", "9924a43cc1315724",
    "bd838d3aafbf8db7", "0b1a2a3265d51aea", "135079a3231ce660", "932b2846e4d70666",
    "e1915f5cb1eca46c", "f325965ca16d629f", "575ff28e60381be5", "724506eb4c328a95"};

static void
s_hex (const uint8_t *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf (out + 2 * i, "%02x", b[i]);
}

static void
test_siphash_vectors (void **state)
{
    (void)state;
    uint8_t key[16], msg[64], out[16];
    char hex[33];
    for (int i = 0; i < 16; i++)
        key[i] = (uint8_t)i;
    for (int i = 0; i < 64; i++)
        msg[i] = (uint8_t)i;
    for (size_t len = 0; len < 64; len++) {
        zl_siphash (key, msg, len, out, 16);
        s_hex (out, 16, hex);
        if (strcmp (hex, s_sip128[len]))
            fail_msg ("SipHash-2-4-128 of %zu bytes: %s, want %s", len, hex, s_sip128[len]);
        zl_siphash (key, msg, len, out, 8);
        s_hex (out, 8, hex);
        if (strcmp (hex, s_sip64[len]))
            fail_msg ("SipHash-2-4-64 of %zu bytes: %s, want %s", len, hex, s_sip64[len]);
    }
}

// Fed in pieces of every size, the digest is the one of the whole message;
// a changed key or message bit changes it.
static void
test_siphash_incremental_and_keyed (void **state)
{
    (void)state;
    uint8_t key[16], msg[200], whole[16], parts[16];
    for (int i = 0; i < 16; i++)
        key[i] = (uint8_t)(0xa0 + i);
    for (int i = 0; i < 200; i++)
        msg[i] = (uint8_t)(i * 7 + 3);
    for (size_t len = 0; len <= sizeof msg; len += 13) {
        zl_siphash (key, msg, len, whole, 16);
        for (size_t step = 1; step <= 17; step++) {
            zl_siphash_t s;
            zl_siphash_init (&s, key, 16);
            for (size_t at = 0; at < len; at += step)
                zl_siphash_update (&s, msg + at, len - at < step ? len - at : step);
            zl_siphash_final (&s, parts);
            assert_memory_equal (whole, parts, 16);
        }
    }
    zl_siphash (key, msg, 100, whole, 16);
    key[15] ^= 1;
    zl_siphash (key, msg, 100, parts, 16);
    assert_memory_not_equal (whole, parts, 16);
    key[15] ^= 1;
    msg[50] ^= 0x80;
    zl_siphash (key, msg, 100, parts, 16);
    assert_memory_not_equal (whole, parts, 16);
}

// ---------------------------------------------------------------- arena
static void
test_arena_alignment_and_disjoint (void **state)
{
    (void)state;
    zl_arena_t *a = zl_arena_new (1024);
    enum { N = 2000 };
    uint8_t *ptrs[N];
    size_t sizes[N];
    for (size_t i = 0; i < N; i++) {
        sizes[i] = i % 97; // includes 0
        ptrs[i] = zl_arena_alloc (a, sizes[i]);
        assert_non_null (ptrs[i]);
        assert_int_equal ((uintptr_t)ptrs[i] % 16, 0);
        memset (ptrs[i], (int)(i & 0xff), sizes[i]);
    }
    //  no allocation overlaps another: every pattern is still intact
    for (size_t i = 0; i < N; i++)
        for (size_t k = 0; k < sizes[i]; k++)
            assert_int_equal (ptrs[i][k], i & 0xff);
    //  size 0 still yields distinct pointers
    void *z1 = zl_arena_alloc (a, 0);
    void *z2 = zl_arena_alloc (a, 0);
    assert_ptr_not_equal (z1, z2);
    zl_arena_destroy (&a);
    assert_null (a);
    zl_arena_destroy (&a); // NULL-safe
    zl_arena_destroy (NULL);
}

// printf into the arena, and the cut at ZL_ARENA_PRINTF_MAX characters
static void
test_arena_printf (void **state)
{
    (void)state;
    zl_arena_t *a = zl_arena_new (64);
    char *s = zl_arena_printf (a, "job %d in lane '%s'", 42, "chat");
    assert_string_equal (s, "job 42 in lane 'chat'");
    char big[2000];
    memset (big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    s = zl_arena_printf (a, "<%s>", big);
    assert_int_equal (strlen (s), ZL_ARENA_PRINTF_MAX);
    assert_int_equal (s[0], '<');
    assert_int_equal (s[ZL_ARENA_PRINTF_MAX - 1], 'x');
    assert_string_equal (zl_arena_printf (a, "%s", ""), "");
    zl_arena_destroy (&a);
}

static void
test_arena_large (void **state)
{
    (void)state;
    zl_arena_t *a = zl_arena_new (256);
    uint8_t *small = zl_arena_alloc (a, 10);
    memset (small, 1, 10);
    //  larger than a chunk: gets a block of its own
    size_t big = 1024 * 1024 + 3;
    uint8_t *p = zl_arena_alloc (a, big);
    assert_int_equal ((uintptr_t)p % 16, 0);
    memset (p, 0xab, big);
    uint8_t *after = zl_arena_alloc (a, 10); // small allocations keep working
    memset (after, 2, 10);
    assert_int_equal (p[0], 0xab);
    assert_int_equal (p[big - 1], 0xab);
    assert_int_equal (small[9], 1);
    assert_int_equal (zl_arena_used (a), 16 + ((big + 15) & ~(size_t)15) + 16);
    zl_arena_destroy (&a);
}

static void
test_arena_reset_reuses_and_grows (void **state)
{
    (void)state;
    zl_arena_t *a = zl_arena_new (4096);
    void *first = zl_arena_alloc (a, 100);
    zl_arena_alloc (a, 200);
    assert_int_equal (zl_arena_used (a), 112 + 208);
    zl_arena_reset (a);
    assert_int_equal (zl_arena_used (a), 0);
    //  a turn that fitted reuses the same first chunk
    assert_ptr_equal (zl_arena_alloc (a, 100), first);
    zl_arena_reset (a);

    //  a turn that spilled over several chunks ...
    size_t turn = 0;
    for (int i = 0; i < 100; i++) {
        memset (zl_arena_alloc (a, 1000), 0xee, 1000);
        turn += 1008;
    }
    assert_int_equal (zl_arena_used (a), turn);
    zl_arena_reset (a);
    //  ... grows the first chunk so that the same turn now fits in one:
    //  the allocations come out back to back
    uint8_t *prev = zl_arena_alloc (a, 1000);
    for (int i = 1; i < 100; i++) {
        uint8_t *p = zl_arena_alloc (a, 1000);
        assert_ptr_equal (p, prev + 1008);
        prev = p;
    }
    //  and resets after that keep it
    zl_arena_reset (a);
    uint8_t *base = zl_arena_alloc (a, 1000);
    for (int i = 1; i < 100; i++)
        assert_ptr_equal (zl_arena_alloc (a, 1000), base + i * 1008);
    zl_arena_destroy (&a);
}

static void
test_arena_calloc_strndup (void **state)
{
    (void)state;
    zl_arena_t *a = zl_arena_new (512);
    memset (zl_arena_alloc (a, 400), 0xff, 400);
    zl_arena_reset (a);
    uint32_t *z = zl_arena_calloc (a, 100, sizeof *z);
    for (int i = 0; i < 100; i++)
        assert_int_equal (z[i], 0);
    assert_non_null (zl_arena_calloc (a, 0, 8));

    const char src[] = "hello\0world";
    char *s = zl_arena_strndup (a, src, 5);
    assert_string_equal (s, "hello");
    char *t = zl_arena_strndup (a, src, sizeof src - 1); // embedded NUL copied too
    assert_memory_equal (t, src, sizeof src);
    char *e = zl_arena_strndup (a, "xyz", 0);
    assert_string_equal (e, "");
    assert_int_equal ((uintptr_t)s % 16, 0);
    zl_arena_destroy (&a);
}

//  Run `fn` in a child; returns the signal that ended it, or 0.
static int
s_child_signal (void (*fn) (void))
{
    pid_t pid = fork ();
    assert_true (pid >= 0);
    if (pid == 0) {
        fn ();
        _exit (0);
    }
    int status = 0;
    assert_int_equal (waitpid (pid, &status, 0), pid);
    return WIFSIGNALED (status) ? WTERMSIG (status) : 0;
}

static void
s_alloc_huge (void)
{
    zl_arena_t *a = zl_arena_new (256);
    fclose (stderr); // keep the abort message out of the test log
    uint8_t *p = zl_arena_alloc (a, SIZE_MAX - 8);
    p[0] = 1;
}

static void
s_calloc_overflow (void)
{
    zl_arena_t *a = zl_arena_new (256);
    fclose (stderr);
    uint8_t *p = zl_arena_calloc (a, SIZE_MAX / 4 + 2, 8);
    p[0] = 1;
}

static void
test_arena_impossible_sizes_abort (void **state)
{
    (void)state;
    //  sizes that would wrap around must take the out-of-memory path, never
    //  hand out a block smaller than asked for
    assert_int_equal (s_child_signal (s_alloc_huge), SIGABRT);
    assert_int_equal (s_child_signal (s_calloc_overflow), SIGABRT);
}

// ---------------------------------------------------------------- hist
static int
s_cmp_u64 (const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

//  Check the histogram of `v` against the exact quantiles of `v`.
static void
s_check_quantiles (uint64_t *v, size_t n, double tolerance)
{
    static zl_hist_t h;
    zl_hist_reset (&h);
    uint64_t max = 0, sum = 0;
    for (size_t i = 0; i < n; i++) {
        zl_hist_add (&h, v[i]);
        max = v[i] > max ? v[i] : max;
        sum += v[i];
    }
    assert_int_equal (h.count, n);
    assert_int_equal (h.max, max);
    assert_int_equal (h.sum, sum);
    qsort (v, n, sizeof *v, s_cmp_u64);
    const double qs[] = {0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 1.0};
    for (size_t k = 0; k < sizeof qs / sizeof qs[0]; k++) {
        size_t rank = (size_t)(qs[k] * (double)n);
        if (rank >= n)
            rank = n - 1;
        double want = (double)v[rank];
        double got = (double)zl_hist_quantile (&h, qs[k]);
        double err = want == 0 ? got : (got > want ? got - want : want - got) / want;
        if (err > tolerance)
            fail_msg ("q=%.3f: want %.0f got %.0f (error %.2f%%)", qs[k], want, got, err * 100);
        assert_true (got <= (double)max);
    }
    assert_int_equal (zl_hist_quantile (&h, 1.0), max);
}

static void
test_hist_empty (void **state)
{
    (void)state;
    zl_hist_t h;
    memset (&h, 0x5a, sizeof h);
    zl_hist_reset (&h);
    assert_int_equal (h.count, 0);
    assert_int_equal (h.max, 0);
    assert_int_equal (zl_hist_quantile (&h, 0.0), 0);
    assert_int_equal (zl_hist_quantile (&h, 0.5), 0);
    assert_int_equal (zl_hist_quantile (&h, 0.99), 0);
    assert_int_equal (zl_hist_quantile (&h, 1.0), 0);
}

static void
test_hist_known_distributions (void **state)
{
    (void)state;
    enum { N = 100000 };
    uint64_t *v = malloc (N * sizeof *v);
    zl_rng_t rng;
    zl_rng_seed (&rng, 1234);

    //  uniform 1..N
    for (size_t i = 0; i < N; i++)
        v[i] = i + 1;
    s_check_quantiles (v, N, 0.04);

    //  small values are exact
    for (size_t i = 0; i < N; i++)
        v[i] = i % 32;
    s_check_quantiles (v, N, 0.0);

    //  uniform random over six orders of magnitude (log-uniform)
    for (size_t i = 0; i < N; i++)
        v[i] = (uint64_t)exp ((double)zl_rng_range (&rng, 1000000) / 1000000.0 * log (1e9));
    s_check_quantiles (v, N, 0.04);

    //  exponential, mean 5 ms
    for (size_t i = 0; i < N; i++) {
        double u = ((double)(zl_rng_next (&rng) >> 11) + 0.5) / 9007199254740992.0;
        v[i] = (uint64_t)(-log (u) * 5000.0);
    }
    s_check_quantiles (v, N, 0.04);

    //  bimodal: fast cache hits and slow misses
    for (size_t i = 0; i < N; i++)
        v[i] = i % 10 ? 100 + zl_rng_range (&rng, 50) : 250000 + zl_rng_range (&rng, 100000);
    s_check_quantiles (v, N, 0.04);

    //  huge values near the top of the range
    for (size_t i = 0; i < 1000; i++)
        v[i] = UINT64_MAX - zl_rng_range (&rng, (uint64_t)1 << 60);
    s_check_quantiles (v, 1000, 0.04);
    free (v);
}

static void
test_hist_constant_and_max (void **state)
{
    (void)state;
    zl_hist_t h;
    zl_hist_reset (&h);
    for (int i = 0; i < 1000; i++)
        zl_hist_add (&h, 12345);
    //  one distinct value: every quantile is that value exactly
    assert_int_equal (zl_hist_quantile (&h, 0.0), 12345);
    assert_int_equal (zl_hist_quantile (&h, 0.5), 12345);
    assert_int_equal (zl_hist_quantile (&h, 1.0), 12345);
    zl_hist_add (&h, 9999999);
    assert_int_equal (h.max, 9999999);
    assert_int_equal (h.count, 1001);
    //  no longer capped by max: the bucket's upper bound, within 1/32
    assert_in_range (zl_hist_quantile (&h, 0.5), 12345, 12345 + 12345 / 32);
    assert_int_equal (zl_hist_quantile (&h, 1.0), 9999999);
    zl_hist_add (&h, UINT64_MAX);
    assert_int_equal (h.max, UINT64_MAX);
    assert_int_equal (zl_hist_quantile (&h, 1.0), UINT64_MAX);
    zl_hist_add (&h, 0);
    assert_int_equal (zl_hist_quantile (&h, 0.0), 0);
    zl_hist_reset (&h);
    assert_int_equal (zl_hist_quantile (&h, 0.5), 0);
}

// ---------------------------------------------------------------- rng
static void
test_rng_range (void **state)
{
    (void)state;
    zl_rng_t rng;
    zl_rng_seed (&rng, 99);
    int seen[10] = {0};
    for (int i = 0; i < 100000; i++) {
        uint64_t r = zl_rng_range (&rng, 9);
        assert_true (r <= 9);
        seen[r]++;
    }
    for (int k = 0; k < 10; k++) // both ends reached, roughly uniform
        assert_in_range (seen[k], 9000, 11000);

    for (int i = 0; i < 1000; i++)
        assert_int_equal (zl_rng_range (&rng, 0), 0);
    int ones = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t r = zl_rng_range (&rng, 1);
        assert_true (r <= 1);
        ones += (int)r;
    }
    assert_in_range (ones, 400, 600);
    //  the largest bounds
    int high = 0;
    for (int i = 0; i < 1000; i++) {
        high += zl_rng_range (&rng, UINT64_MAX) > UINT64_MAX / 2;
        assert_true (zl_rng_range (&rng, UINT64_MAX - 1) <= UINT64_MAX - 1);
    }
    assert_in_range (high, 400, 600);
}

static void
test_rng_seeding (void **state)
{
    (void)state;
    zl_rng_t a, b, c;
    zl_rng_seed (&a, 42);
    zl_rng_seed (&b, 42);
    zl_rng_seed (&c, 43);
    int same_c = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t x = zl_rng_next (&a);
        assert_int_equal (x, zl_rng_next (&b));
        same_c += x == zl_rng_next (&c);
    }
    assert_int_equal (same_c, 0);

    //  seed 0 draws from the OS: two such generators differ
    zl_rng_t d, e;
    zl_rng_seed (&d, 0);
    zl_rng_seed (&e, 0);
    assert_int_not_equal (zl_rng_next (&d), zl_rng_next (&e));
}

static void
test_rng_hex (void **state)
{
    (void)state;
    zl_rng_t rng;
    zl_rng_seed (&rng, 7);
    const int lens[] = {0, 1, 15, 16, 17, 32, 33, 64};
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        int len = lens[k];
        char buf[80];
        memset (buf, '#', sizeof buf);
        zl_rng_hex (&rng, buf, len);
        assert_int_equal (strlen (buf), len);
        for (int i = 0; i < len; i++)
            assert_non_null (strchr ("0123456789abcdef", buf[i]));
        assert_int_equal (buf[len + 1], '#'); // nothing written past the NUL
    }
    //  all sixteen digits show up
    char buf[4097];
    zl_rng_hex (&rng, buf, 4096);
    for (const char *d = "0123456789abcdef"; *d; d++)
        assert_non_null (strchr (buf, *d));
}

// ---------------------------------------------------------------- parse
static void
s_dur_ok (const char *text, uint64_t want)
{
    uint64_t ms = 12345678;
    if (zl_parse_duration_ms (text, &ms) != 0)
        fail_msg ("duration \"%s\" refused", text);
    if (ms != want)
        fail_msg ("duration \"%s\" = %llu, want %llu", text, (unsigned long long)ms,
                  (unsigned long long)want);
}

static void
s_dur_bad (const char *text)
{
    uint64_t ms = 12345678;
    if (zl_parse_duration_ms (text, &ms) != -1)
        fail_msg ("duration \"%s\" accepted as %llu", text ? text : "(null)",
                  (unsigned long long)ms);
    assert_int_equal (ms, 12345678); // untouched on failure
}

static void
test_parse_duration (void **state)
{
    (void)state;
    s_dur_ok ("250ms", 250);
    s_dur_ok ("30s", 30000);
    s_dur_ok ("5m", 300000);
    s_dur_ok ("1h", 3600000);
    s_dur_ok ("2d", 172800000);
    s_dur_ok ("1.5s", 1500);
    s_dur_ok ("0.5ms", 1); // rounds to the nearest millisecond
    s_dur_ok ("100", 100); // bare number: milliseconds
    s_dur_ok ("0", 0);
    s_dur_ok ("0s", 0);
    s_dur_ok ("10S", 10000);
    s_dur_ok ("10 s", 10000);
    s_dur_ok ("86400000", 86400000);
    s_dur_bad (NULL);
    s_dur_bad ("");
    s_dur_bad ("abc");
    s_dur_bad ("-1s");
    s_dur_bad ("-1");
    s_dur_bad ("5x");
    s_dur_bad ("5sec");
    s_dur_bad ("s");
    s_dur_bad ("ms");
    s_dur_bad ("1s5");
    s_dur_bad ("nan");
    s_dur_bad ("nanms");
    s_dur_bad ("inf");
    s_dur_bad ("infs");
    s_dur_bad ("1e30h");
}

static void
s_size_ok (const char *text, uint64_t want)
{
    uint64_t bytes = 12345678;
    if (zl_parse_size (text, &bytes) != 0)
        fail_msg ("size \"%s\" refused", text);
    if (bytes != want)
        fail_msg ("size \"%s\" = %llu, want %llu", text, (unsigned long long)bytes,
                  (unsigned long long)want);
}

static void
s_size_bad (const char *text)
{
    uint64_t bytes = 12345678;
    if (zl_parse_size (text, &bytes) != -1)
        fail_msg ("size \"%s\" accepted as %llu", text ? text : "(null)",
                  (unsigned long long)bytes);
    assert_int_equal (bytes, 12345678);
}

static void
test_parse_size (void **state)
{
    (void)state;
    s_size_ok ("64KiB", 65536);
    s_size_ok ("1MiB", 1048576);
    s_size_ok ("1048576", 1048576);
    s_size_ok ("2GiB", 2147483648ULL);
    s_size_ok ("1kb", 1000);
    s_size_ok ("10b", 10);
    s_size_ok ("1.5KiB", 1536);
    s_size_ok ("0", 0);
    s_size_ok ("16 MiB", 16777216);
    s_size_bad (NULL);
    s_size_bad ("");
    s_size_bad ("junk");
    s_size_bad ("KiB");
    s_size_bad ("12 bananas");
    s_size_bad ("-1KiB");
    s_size_bad ("1TiB"); // not a unit we know
    s_size_bad ("nan");
    s_size_bad ("inf");
    s_size_bad ("99999999999GiB");
}

static void
s_u64_bad (const char *text)
{
    uint64_t v = 777;
    if (zl_parse_u64 (text, &v) != -1)
        fail_msg ("u64 \"%s\" accepted as %llu", text ? text : "(null)", (unsigned long long)v);
    assert_int_equal (v, 777);
}

static void
test_parse_u64 (void **state)
{
    (void)state;
    uint64_t v = 0;
    assert_int_equal (zl_parse_u64 ("0", &v), 0);
    assert_int_equal (v, 0);
    assert_int_equal (zl_parse_u64 ("42", &v), 0);
    assert_int_equal (v, 42);
    assert_int_equal (zl_parse_u64 ("18446744073709551615", &v), 0);
    assert_int_equal (v, UINT64_MAX);
    s_u64_bad (NULL);
    s_u64_bad ("");
    s_u64_bad ("18446744073709551616"); // one past the top
    s_u64_bad ("-1");
    s_u64_bad (" -5"); // strtoull would negate this into a huge number
    s_u64_bad ("\t-1");
    s_u64_bad ("12a");
    s_u64_bad ("1.5");
    s_u64_bad ("0x10");
    s_u64_bad ("abc");
}

// ---------------------------------------------------------------- clock, alloc
static void
test_clock (void **state)
{
    (void)state;
    int64_t prev_us = zl_clock_mono_us ();
    int64_t prev_ms = zl_clock_mono_ms ();
    for (int i = 0; i < 100000; i++) {
        int64_t us = zl_clock_mono_us ();
        int64_t ms = zl_clock_mono_ms ();
        assert_true (us >= prev_us);
        assert_true (ms >= prev_ms);
        prev_us = us;
        prev_ms = ms;
    }
    int64_t us = zl_clock_mono_us ();
    int64_t ms = zl_clock_mono_ms ();
    assert_true (ms >= us / 1000 && ms <= us / 1000 + 1000);

    int64_t wall_ms = zl_clock_wall_ms ();
    int64_t wall_us = zl_clock_wall_us ();
    assert_true (wall_ms > 1577836800000LL); // after 2020-01-01
    assert_true (wall_us / 1000 >= wall_ms && wall_us / 1000 <= wall_ms + 1000);
}

static void
test_alloc (void **state)
{
    (void)state;
    assert_null (zl_strdup (NULL));
    char *s = zl_strdup ("zlane");
    assert_string_equal (s, "zlane");
    ZL_FREE (s);
    assert_null (s);
    s = zl_strndup ("abcdef", 3);
    assert_string_equal (s, "abc");
    free (s);
    uint64_t *z = zl_calloc (64, sizeof *z);
    for (int i = 0; i < 64; i++)
        assert_int_equal (z[i], 0);
    z = zl_realloc (z, 128 * sizeof *z);
    assert_int_equal (z[63], 0);
    free (z);
    free (zl_malloc (0)); // never NULL, even for 0 bytes
}

// ---------------------------------------------------------------- wire send
//  Wait up to 5 s for `sock` to be readable.
static bool
s_readable (void *sock)
{
    zmq_pollitem_t item = {sock, 0, ZMQ_POLLIN, 0};
    return zmq_poll (&item, 1, 5000) == 1;
}

//  Receive one whole message part into `buf`; returns its size.
static size_t
s_recv (void *sock, void *buf, size_t cap)
{
    assert_true (s_readable (sock));
    int n = zmq_recv (sock, buf, cap, 0);
    assert_true (n >= 0);
    assert_true ((size_t)n <= cap);
    return (size_t)n;
}

static void
test_wire_dealer_router (void **state)
{
    (void)state;
    zsock_t *router = zsock_new (ZMQ_ROUTER);
    zsock_t *dealer = zsock_new (ZMQ_DEALER);
    assert_non_null (router);
    assert_non_null (dealer);
    zsock_set_router_mandatory (router, 1);
    zsock_set_identity (dealer, "producer-7");
    assert_int_equal (zsock_bind (router, "inproc://test-common-wire"), 0);
    assert_int_equal (zsock_connect (dealer, "inproc://test-common-wire"), 0);
    void *r = zsock_resolve (router), *d = zsock_resolve (dealer);
    zl_codec_t *codec = zl_codec_new ();
    zl_msg_t out;
    uint8_t buf[4096];

    //  DEALER -> ROUTER: [peer id][envelope]
    zl_msg_t hello = {.kind = ZL_MSG_HELLO, .u.hello.client = "producer-7"};
    assert_int_equal (zl_wire_send (d, codec, &hello, 0), 0);
    zl_peer_t peer = {0};
    peer.len = (uint8_t)s_recv (r, peer.data, sizeof peer.data);
    assert_int_equal (peer.len, 10);
    assert_memory_equal (peer.data, "producer-7", 10);
    int more = 0;
    size_t more_len = sizeof more;
    zmq_getsockopt (r, ZMQ_RCVMORE, &more, &more_len);
    assert_true (more);
    size_t n = s_recv (r, buf, sizeof buf);
    zmq_getsockopt (r, ZMQ_RCVMORE, &more, &more_len);
    assert_false (more); // one envelope per frame
    assert_int_equal (zl_codec_decode (codec, buf, n, &out), ZL_DECODE_OK);
    assert_int_equal (out.kind, ZL_MSG_HELLO);
    assert_string_equal (out.u.hello.client, "producer-7");

    //  ROUTER -> DEALER: addressed by the peer id
    zl_msg_t credit = {.kind = ZL_MSG_CREDIT, .u.credit.limit = 500};
    assert_int_equal (zl_wire_send_to (r, &peer, codec, &credit), 0);
    n = s_recv (d, buf, sizeof buf);
    assert_int_equal (zl_codec_decode (codec, buf, n, &out), ZL_DECODE_OK);
    assert_int_equal (out.kind, ZL_MSG_CREDIT);
    assert_int_equal (out.u.credit.limit, 500);

    //  a vanished peer is an error, not a silent drop
    zl_peer_t ghost = {.len = 5, .data = "ghost"};
    errno = 0;
    assert_int_equal (zl_wire_send_to (r, &ghost, codec, &credit), -1);
    assert_int_equal (errno, EHOSTUNREACH);
    //  and a message kind the codec does not know is refused before sending
    zl_msg_t none = {.kind = ZL_MSG_NONE};
    errno = 0;
    assert_int_equal (zl_wire_send (d, codec, &none, 0), -1);
    assert_int_equal (errno, EINVAL);
    assert_int_equal (zl_wire_send_to (r, &peer, codec, &none), -1);
    assert_int_equal (errno, EINVAL);
    //  the pair still works after the failures
    assert_int_equal (zl_wire_send_to (r, &peer, codec, &credit), 0);
    n = s_recv (d, buf, sizeof buf);
    assert_int_equal (zl_codec_decode (codec, buf, n, &out), ZL_DECODE_OK);
    assert_int_equal (out.kind, ZL_MSG_CREDIT);

    zl_codec_destroy (&codec);
    zsock_destroy (&dealer);
    zsock_destroy (&router);
}

static void
test_wire_publish (void **state)
{
    (void)state;
    zsock_t *pub = zsock_new (ZMQ_PUB);
    zsock_t *sub = zsock_new (ZMQ_SUB);
    assert_int_equal (zsock_bind (pub, "inproc://test-common-pub"), 0);
    zsock_set_subscribe (sub, "dlq.");
    assert_int_equal (zsock_connect (sub, "inproc://test-common-pub"), 0);
    void *p = zsock_resolve (pub), *s = zsock_resolve (sub);
    zl_codec_t *codec = zl_codec_new ();
    zl_msg_t alert = {.kind = ZL_MSG_DLQ_ALERT, .u.dlq_alert = {3, 1000}};

    //  the subscription reaches the PUB socket asynchronously: publish until
    //  the SUB side sees a message (bounded by 500 polls of 10 ms)
    bool got = false;
    for (int i = 0; i < 500 && !got; i++) {
        assert_int_equal (zl_wire_publish (p, "dlq.email.acme", codec, &alert), 0);
        zmq_pollitem_t item = {s, 0, ZMQ_POLLIN, 0};
        got = zmq_poll (&item, 1, 10) == 1;
    }
    assert_true (got);
    char topic[64];
    size_t n = s_recv (s, topic, sizeof topic - 1);
    topic[n] = '\0';
    assert_string_equal (topic, "dlq.email.acme");
    uint8_t buf[256];
    n = s_recv (s, buf, sizeof buf);
    zl_msg_t out;
    assert_int_equal (zl_codec_decode (codec, buf, n, &out), ZL_DECODE_OK);
    assert_int_equal (out.kind, ZL_MSG_DLQ_ALERT);
    assert_int_equal (out.u.dlq_alert.depth, 3);
    assert_int_equal (out.u.dlq_alert.oldest_age_ms, 1000);

    zl_msg_t none = {.kind = ZL_MSG_NONE};
    errno = 0;
    assert_int_equal (zl_wire_publish (p, "dlq.x", codec, &none), -1);
    assert_int_equal (errno, EINVAL);

    zl_codec_destroy (&codec);
    zsock_destroy (&sub);
    zsock_destroy (&pub);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test (test_arena_alignment_and_disjoint),
        cmocka_unit_test (test_arena_large),
        cmocka_unit_test (test_arena_printf),
        cmocka_unit_test (test_arena_reset_reuses_and_grows),
        cmocka_unit_test (test_arena_calloc_strndup),
        cmocka_unit_test (test_arena_impossible_sizes_abort),
        cmocka_unit_test (test_hist_empty),
        cmocka_unit_test (test_hist_known_distributions),
        cmocka_unit_test (test_hist_constant_and_max),
        cmocka_unit_test (test_rng_range),
        cmocka_unit_test (test_rng_seeding),
        cmocka_unit_test (test_rng_hex),
        cmocka_unit_test (test_parse_duration),
        cmocka_unit_test (test_parse_size),
        cmocka_unit_test (test_parse_u64),
        cmocka_unit_test (test_clock),
        cmocka_unit_test (test_alloc),
        cmocka_unit_test (test_wire_dealer_router),
        cmocka_unit_test (test_wire_publish),
        cmocka_unit_test (test_siphash_vectors),
        cmocka_unit_test (test_siphash_incremental_and_keyed),
    };
    int rc = cmocka_run_group_tests_name ("common", tests, NULL, NULL);
    zsys_shutdown ();
    return rc;
}
