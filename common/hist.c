#include "hist.h"

#include <string.h>

// Bucket layout: values below 32 map one to one; above, each power of two is
// split into 32 linear sub-buckets.
static unsigned
s_bucket (uint64_t v)
{
    if (v < 32)
        return (unsigned)v;
    unsigned msb = 63u - (unsigned)__builtin_clzll (v); // >= 5
    unsigned sub = (unsigned)(v >> (msb - 5)) & 31u;
    unsigned b = (msb - 4) * 32 + sub;
    return b < ZL_HIST_BUCKETS ? b : ZL_HIST_BUCKETS - 1;
}

static uint64_t
s_bucket_upper (unsigned b)
{
    if (b < 32)
        return b;
    unsigned msb = b / 32 + 4;
    unsigned sub = b % 32;
    return (((uint64_t)(32 + sub) + 1) << (msb - 5)) - 1;
}

void
zl_hist_reset (zl_hist_t *h)
{
    memset (h, 0, sizeof *h);
}

void
zl_hist_add (zl_hist_t *h, uint64_t value)
{
    h->buckets[s_bucket (value)]++;
    h->count++;
    h->sum += value;
    if (value > h->max)
        h->max = value;
}

uint64_t
zl_hist_quantile (const zl_hist_t *h, double q)
{
    if (h->count == 0)
        return 0;
    uint64_t rank = (uint64_t)(q * (double)h->count);
    if (rank >= h->count)
        rank = h->count - 1;
    uint64_t seen = 0;
    for (unsigned b = 0; b < ZL_HIST_BUCKETS; b++) {
        seen += h->buckets[b];
        if (seen > rank) {
            uint64_t up = s_bucket_upper (b);
            return up < h->max ? up : h->max;
        }
    }
    return h->max;
}
