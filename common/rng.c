#include "rng.h"

#include <stdio.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

static uint64_t
s_splitmix (uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void
zl_rng_seed (zl_rng_t *rng, uint64_t seed)
{
    if (seed == 0) {
        if (getrandom (&seed, sizeof seed, 0) != (ssize_t)sizeof seed) {
            struct timespec ts;
            clock_gettime (CLOCK_REALTIME, &ts);
            seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)getpid ();
        }
    }
    for (int i = 0; i < 4; i++)
        rng->s[i] = s_splitmix (&seed);
}

static inline uint64_t
s_rotl (uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t
zl_rng_next (zl_rng_t *rng)
{
    uint64_t *s = rng->s;
    uint64_t result = s_rotl (s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = s_rotl (s[3], 45);
    return result;
}

uint64_t
zl_rng_range (zl_rng_t *rng, uint64_t bound)
{
    if (bound == 0)
        return 0;
    if (bound == UINT64_MAX)
        return zl_rng_next (rng);
    uint64_t span = bound + 1;
    uint64_t limit = UINT64_MAX - UINT64_MAX % span; // reject to avoid modulo bias
    uint64_t r;
    do
        r = zl_rng_next (rng);
    while (r >= limit);
    return r % span;
}

void
zl_rng_hex (zl_rng_t *rng, char *out, int len)
{
    static const char digits[] = "0123456789abcdef";
    uint64_t bits = 0;
    for (int i = 0; i < len; i++) {
        if (i % 16 == 0)
            bits = zl_rng_next (rng);
        out[i] = digits[bits & 15];
        bits >>= 4;
    }
    out[len] = '\0';
}
