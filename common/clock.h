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

/*  One reading of the clocks, taken once per broker turn and passed into
    every transition: monotonic ms and us, wall ms. */
typedef struct {
    int64_t mono_ms;
    int64_t mono_us;
    int64_t wall_ms;
} zl_now_t;

/*  Return the current times. */
zl_now_t zl_now (void);

#endif
