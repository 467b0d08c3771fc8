/*  clock: the time sources zlane uses.
    Monotonic time drives timers and latencies; wall time is only stamped on
    records that people read (enqueue, attempt start/end, dead-letter). */
#ifndef ZL_CLOCK_H
#define ZL_CLOCK_H

#include <stdint.h>

/*  Monotonic microseconds since an arbitrary epoch. */
int64_t zl_clock_mono_us (void);
/*  Monotonic milliseconds since an arbitrary epoch. */
int64_t zl_clock_mono_ms (void);
/*  Wall-clock milliseconds since the Unix epoch. */
int64_t zl_clock_wall_ms (void);
/*  Wall-clock microseconds since the Unix epoch. */
int64_t zl_clock_wall_us (void);

#endif
