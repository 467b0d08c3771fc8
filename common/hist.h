/*  hist: a log-linear latency histogram (about 3 % relative error), fixed
    size, no allocation per sample. Values are microseconds. */
#ifndef ZL_HIST_H
#define ZL_HIST_H

#include <stdint.h>

#define ZL_HIST_BUCKETS (64 * 32)

typedef struct zl_hist_s {
    uint64_t count;
    uint64_t max;
    uint64_t sum;
    uint32_t buckets[ZL_HIST_BUCKETS];
} zl_hist_t;

/*  Zero the histogram. */
void zl_hist_reset (zl_hist_t *h);
/*  Record one value. */
void zl_hist_add (zl_hist_t *h, uint64_t value);
/*  Return the value at quantile q (0..1), 0 if empty. */
uint64_t zl_hist_quantile (const zl_hist_t *h, double q);

#endif
