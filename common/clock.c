#include "clock.h"

#include <time.h>

static int64_t
s_now_us (clockid_t id)
{
    struct timespec ts;
    clock_gettime (id, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t
zl_clock_mono_us (void)
{
    return s_now_us (CLOCK_MONOTONIC);
}

int64_t
zl_clock_mono_ms (void)
{
    return s_now_us (CLOCK_MONOTONIC) / 1000;
}

int64_t
zl_clock_wall_ms (void)
{
    return s_now_us (CLOCK_REALTIME) / 1000;
}

int64_t
zl_clock_wall_us (void)
{
    return s_now_us (CLOCK_REALTIME);
}
