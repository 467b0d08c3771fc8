/*  zl_now: one reading of the clocks (clock.h). In a file of its own so
    that a test harness that defines the zl_clock_* functions itself (the
    fuzzers' fake clock) still gets zl_now on top of them. */
#include "clock.h"

zl_now_t
zl_now (void)
{
    zl_now_t now;
    now.mono_us = zl_clock_mono_us ();
    now.mono_ms = now.mono_us / 1000;
    now.wall_ms = zl_clock_wall_ms ();
    return now;
}
