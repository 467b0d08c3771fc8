/*  bucket: a token bucket (rate per second, burst) -- the one shared rate
    limiter the broker applies at dispatch, per lane and per tenant. */
#ifndef ZL_BUCKET_H
#define ZL_BUCKET_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    double rate;  // tokens per second; 0 = unlimited
    double burst; // capacity
    double tokens;
    int64_t last_ms;
} zl_bucket_t;

/*  Set up a bucket, full. `burst` below 1 becomes max(1, rate / 10). */
void zl_bucket_init (zl_bucket_t *b, double rate, double burst, int64_t now_ms);
/*  True if unlimited or a token is there; does not take it. */
bool zl_bucket_ready (zl_bucket_t *b, int64_t now_ms);
/*  Take one token (call after zl_bucket_ready said yes). */
void zl_bucket_take (zl_bucket_t *b, int64_t now_ms);
/*  Monotonic ms at which the next token will be there (now if there is one). */
int64_t zl_bucket_next_ms (zl_bucket_t *b, int64_t now_ms);

#endif
