#include "bucket.h"

#include <math.h>

// a token that is whole but for rounding counts as whole
#define WHOLE (1.0 - 1e-9)

static void
s_refill (zl_bucket_t *b, int64_t now_ms)
{
    if (now_ms > b->last_ms) {
        b->tokens += b->rate * (double)(now_ms - b->last_ms) / 1000.0;
        if (b->tokens > b->burst)
            b->tokens = b->burst;
        b->last_ms = now_ms;
    }
}

void
zl_bucket_init (zl_bucket_t *b, double rate, double burst, int64_t now_ms)
{
    b->rate = rate;
    if (burst < 1)
        burst = rate / 10 > 1 ? rate / 10 : 1;
    b->burst = burst;
    b->tokens = burst;
    b->last_ms = now_ms;
}

bool
zl_bucket_ready (zl_bucket_t *b, int64_t now_ms)
{
    if (b->rate <= 0)
        return true;
    s_refill (b, now_ms);
    return b->tokens >= WHOLE;
}

void
zl_bucket_take (zl_bucket_t *b, int64_t now_ms)
{
    if (b->rate <= 0)
        return;
    s_refill (b, now_ms);
    b->tokens -= 1.0;
}

int64_t
zl_bucket_next_ms (zl_bucket_t *b, int64_t now_ms)
{
    if (b->rate <= 0)
        return now_ms;
    s_refill (b, now_ms);
    if (b->tokens >= WHOLE)
        return now_ms;
    double wait_ms = (1.0 - b->tokens) * 1000.0 / b->rate;
    return now_ms + (int64_t)ceil (wait_ms - 1e-9);
}
