/*  cron (zl_cron_t): when a schedule's ticks fall. Standard five-field cron
    ("minute hour day-of-month month day-of-week", UTC: no time zones, no
    DST), with lists, ranges, steps and names (JAN-DEC, SUN-SAT; 0 and 7
    are Sunday), the macros @yearly @annually @monthly @weekly @daily
    @midnight @hourly, and "@every DUR" (at least 1s): ticks at the
    multiples of DUR since the Unix epoch, so they fall at the same instants
    whenever the broker starts. As in cron, when both day fields are
    restricted a day matches if either does. Pure: no clock, no state. */
#ifndef ZL_CRON_H
#define ZL_CRON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t every_ms;     // @every: the period; 0: the calendar fields below
    uint64_t minutes;      // bit m: minute m (0-59)
    uint32_t hours;        // bit h (0-23)
    uint32_t days;         // bit d: day of the month d (1-31)
    uint16_t months;       // bit m: month m (1-12)
    uint8_t weekdays;      // bit w: day of the week w (0 Sunday - 6)
    bool dom_any, dow_any; // the day fields were "*" (for the either-day rule)
} zl_cron_t;

/*  Parse `text` into `out`. Returns 0, or -1 with a reason in `err`. */
int zl_cron_parse (const char *text, zl_cron_t *out, char *err, size_t errlen);
/*  The first tick strictly after `after_ms` (Unix ms, UTC), or -1 if none
    falls within the next 8 years (e.g. "0 0 30 2 *"). */
int64_t zl_cron_next (const zl_cron_t *cron, int64_t after_ms);

#endif
